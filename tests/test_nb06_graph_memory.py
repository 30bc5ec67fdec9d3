"""Notebook 06's cells that read sharing.cu, upload.cu and compare.cu, run on canned JSON lines shaped like the
programs' (the numbers are made up for the test, never recorded): a broken table, plot or check shows before a GPU
run, and a wrong result must fail its check. The programs themselves only run on a GPU."""
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "06_graph_memory_nodes.ipynb"
sys.path.insert(0, str(ROOT))
import streamalloc as sa  # noqa: E402

MiB = 1 << 20


def code_cells():
    return ["".join(c["source"]) for c in json.loads(NOTEBOOK.read_text())["cells"] if c["cell_type"] == "code"]


def cells_reading(program):
    """The code cells after the %%writefile cell of `program`, up to the next %%writefile."""
    out, inside = [], False
    for src in code_cells():
        if src.startswith("%%writefile"):
            inside = src.partition("\n")[0].endswith("/" + program)
        elif inside:
            out.append(src)
    assert out, f"the notebook has no cells reading {program}"
    return out


def sharing(args, overlap_in_one_stream=False, shared=True):
    block, graphs, spin, rounds = (int(a) for a in args)
    lines, held = [], 0
    for phase in ("one stream", "a stream each", "one stream again"):
        each = phase == "a stream each"
        for r in range(rounds):
            together = each or overlap_in_one_stream
            start = [0.0 if together else g * spin * 1000.0 for g in range(graphs)]
            before = held
            held = max(held, (graphs if each or not shared else 1) * block)
            lines.append({"what": "round", "phase": phase, "round": r, "graphs": graphs, "bytes": block,
                          "spin_ms": float(spin), "stream": [g if each else 0 for g in range(graphs)],
                          "call_us": [3.0 + 400.0 * (each and r == 0 and g > 0) for g in range(graphs)],
                          "start_us": start, "stop_us": [s + spin * 1000.0 for s in start],
                          "ms": spin * (1 if together else graphs) + 0.5, "reserved_before": before,
                          "graph_reserved": held, "graph_used": held, "graph_reserved_high": held,
                          "graph_used_high": held})
    return lines


def upload(args, trim_keeps=0):
    block, repeats, later = (int(a) for a in args)
    timed = lambda first: {"call_us": [first] + [3.0] * later, "done_us": [first + 20] + [25.0] * later,  # noqa: E731
                           "gpu_us": [15.0] * (later + 1)}
    lines = [{"what": "new_graph", "bytes": block, "reserved_before_launch": 0, "reserved_after": block, **timed(900.0)}]
    for rep in range(repeats):
        for way in ("none", "upload", "other stream"):
            lines.append({"what": "after_trim", "way": way, "rep": rep, "bytes": block, "reserved_after_trim": trim_keeps,
                          "reserved_before_launch": 0 if way == "none" else block, "reserved_after": block,
                          "upload_call_us": 0.0 if way == "none" else 300.0,
                          **timed({"none": 400.0, "upload": 5.0, "other stream": 350.0}[way])})
    return lines


def compare(args, restored=True):
    iterations, k, repeats, *sizes = (int(a) for a in args)
    lines = []
    for n in sizes:
        for way, host, gpu in (("stream", 4.0, 9.0), ("graph 1", 2.5, 8.0), ("graph K", 0.6, 7.0), ("prealloc", 2.0, 6.0)):
            lines.append({"what": "compare", "way": way, "bytes": n, "iterations": iterations,
                          "per_graph": k if way == "graph K" else 1 if way == "graph 1" else 0,
                          "host_us": [host + i * 0.1 for i in range(repeats)], "gpu_us": [gpu] * repeats,
                          "reserved_peak": max(n, 2 * MiB) * (k if way == "graph K" else 1)})
    lines.append({"what": "threshold", "before": 0, "during": 2**64 - 1, "after": 0 if restored else 2**64 - 1})
    return lines


CANNED = {"sharing": sharing, "upload": upload, "compare": compare}


class CannedLesson:
    label = "TEST GPU, replayed from a recording of today (canned output for a unit test)"
    live = False

    def __init__(self, **bad):
        self.bad = bad
        self.machine = sa.gpu.Machine(gpu="TEST GPU", memory_free=80 << 30, memory_total=80 << 30)

    def run(self, file, args=(), timeout=120, **_):
        name, args = Path(file).stem, [str(a) for a in args]
        lines = CANNED[name](args, **self.bad.get(name, {}))
        return sa.lesson.Result(name, args, "\n".join(json.dumps(x) for x in lines) + "\n", "", 0.0, True, self.label)


def run_cells(program, **bad):
    import matplotlib
    matplotlib.use("Agg")
    ns = {"sa": sa, "lesson": CannedLesson(**bad)}
    sizes = next(src for src in code_cells() if src.startswith("import numpy") and "BLOCK =" in src)
    for src in [sizes, *cells_reading(program + ".cu")]:
        exec(compile(src, f"06 cell reading {program}", "exec"), ns)
    return ns


@pytest.mark.parametrize("program", sorted(CANNED))
def test_the_cells_read_canned_output(program, capsys):
    run_cells(program)
    out = capsys.readouterr().out
    assert out.strip()


def test_sharing_reports_a_remap_as_data(capsys):
    run_cells("sharing")
    out = capsys.readouterr().out
    assert "they shared physical memory" in out and "the driver remapped" in out


def test_sharing_without_sharing_needs_no_remap(capsys):
    run_cells("sharing", sharing={"shared": False})
    assert "they shared no memory" in capsys.readouterr().out


@pytest.mark.parametrize("program, bad, message", [
    ("sharing", {"overlap_in_one_stream": True}, "graphs launched into one stream ran at once"),
    ("upload", {"trim_keeps": 2 * MiB}, "the trim kept memory"),
    ("compare", {"restored": False}, "threshold was not put back"),
])
def test_a_wrong_result_fails_its_check(program, bad, message):
    with pytest.raises(AssertionError, match=message):
        run_cells(program, **{program: bad})
