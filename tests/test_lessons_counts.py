"""The lesson modules of 01 take their repeat and iteration counts from the records, not from typed numbers:
the notebooks choose the counts (and may change them), the titles and labels must say what was run."""
import json
from types import SimpleNamespace

import matplotlib
import pytest

matplotlib.use("Agg")

from notebook import code_cell  # noqa: E402
from streamalloc.lessons import sync_vs_async as story  # noqa: E402
from streamalloc.measure import parse  # noqa: E402


def result(lines):
    return SimpleNamespace(records=parse("\n".join(json.dumps(x) for x in lines)), label="canned GPU")


def test_waits_counts_its_repeats():
    calls = story.Waits.CALLS
    lines = [{"call": c, "size": 4 << 20, "rep": rep, "host_us": 2.0, "kernel_us": 10000.0,
              "running_after": c != "cudaFree", "other_start_us": -9000.0} for rep in range(3) for c in calls]
    wait = story.Waits(result(lines), 10)
    assert wait.reps == 3
    assert wait("cudaFreeAsync", 4 << 20)["n"] == 3
    assert "medians of 3 repeats" in wait.table().title


def test_steady_says_how_many_iterations_each_run_had():
    lines = [{"loop": loop, "size": size, "iters": 100, "us_per_iter": [v * size / 65536 for v in (3.0, 3.1, 2.9)]}
             for loop in ("async", "prealloc", "sync") for size in (65536, 4 << 20)]
    ss = story.Steady(result(lines), 3)
    assert ss.iters == 100
    marks, _ = ss.tables()
    assert "medians of 3 runs of 100 iterations" in marks.title


def run_wait_checks(free_returned_early: bool, free_other_start_us: float):
    """01's cell that checks section 2, on canned lines: the control and the asynchronous calls as the guide has
    them, cudaFree as given."""
    cell = code_cell("01_sync_vs_async", "for size in WAIT_SIZES:")
    lines = []
    for rep in range(3):
        for c in story.Waits.CALLS:
            early = free_returned_early if c == "cudaFree" else c not in ("cudaMalloc",)
            other = free_other_start_us if c == "cudaFree" else (-9000.0 if early else 50.0)
            lines.append({"call": c, "size": 4 << 20, "rep": rep, "host_us": 2.0 if early else 10000.0,
                          "kernel_us": 10000.0, "running_after": early, "other_start_us": other})
    res = result(lines)
    wait = story.Waits(res, 10)
    exec(cell, {"WAIT_SIZES": [4 << 20], "wait": wait, "res_wait": res})
    return wait


def test_cudafree_is_held_to_synchronizing_in_either_sense_the_guide_allows():
    """§15.1: cudaFree "causes GPU to synchronize across all executing CUDA streams", which does not say the host
    thread blocks: a cudaFree that returned at once while the next kernel on another stream waited passes (and the
    prose says the device serialized); one after which that kernel ran beside the long one fails."""
    run_wait_checks(False, 50.0)  # the host waited (what the recorded drivers did)
    wait = run_wait_checks(True, 50.0)  # the host went on, the device serialized
    text = story.seed_verdicts(wait, lambda call, size: 30.0).data
    assert "the device serialized where the host did not wait" in text, text
    with pytest.raises(AssertionError, match=r"did not synchronize in either sense \(Guide §15.1\)"):
        run_wait_checks(True, -9000.0)
