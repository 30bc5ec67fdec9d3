"""The lesson modules of 01 take their repeat and iteration counts from the records, not from typed numbers:
the notebooks choose the counts (and may change them), the titles and labels must say what was run."""
import json
from types import SimpleNamespace

import matplotlib

matplotlib.use("Agg")

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
