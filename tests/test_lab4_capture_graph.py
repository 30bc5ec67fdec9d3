"""Lab 4 (capture it): plausible wrong answers are rejected by the lab's own check, without a GPU.

Each test puts a wrong answer into the solution notebook's regions, runs the notebook in replay mode with
nbclient (kernel python3, in solutions/), and asserts that the check cell raised LabIncomplete naming what is
wrong. Only the static part of the check can judge them here (the run is "not checked" in replay for code that
is not the recorded solution). Slow-but-OK: each run takes about 10 s.
"""
import re
from pathlib import Path

import nbformat
import pytest

nbclient = pytest.importorskip("nbclient")

REPO = Path(__file__).resolve().parent.parent
SOLUTION = REPO / "solutions" / "lab4_capture_graph.ipynb"
LAB = REPO / "labs" / "lab4_capture_graph.ipynb"
REGION = re.compile(r"^(?P<indent>[ \t]*)// BEGIN SOLUTION.*?^[ \t]*// END SOLUTION[ \t]*$\n?", re.M | re.S)

# The buffer allocated once before the capture, only the kernels captured, freed at the end.
ALLOCATED_BEFORE_CAPTURE = """\
    float *tmp = nullptr;
    CHECK(cudaMallocAsync(&tmp, bytes, s));  // once, before the capture
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    produce<<<blocks, threads, 0, s>>>(tmp, n);
    CHECK_LAUNCH();
    accumulate<<<blocks, threads, 0, s>>>(tmp, out, n);
    CHECK_LAUNCH();
    CHECK(cudaStreamEndCapture(s, &graph));
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
"""
FREED_AT_THE_END = """\
    CHECK(cudaFreeAsync(tmp, s));
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(graph));
    CHECK(cudaDeviceSynchronize());
"""
# The stream-ordered pool trimmed instead of the graph allocator: a different pool.
POOL_TRIM_INSTEAD = """\
    cudaMemPool_t pool;
    CHECK(cudaDeviceGetDefaultMemPool(&pool, dev));
    CHECK(cudaMemPoolTrimTo(pool, 0));
"""


def with_regions(nb, replacements):
    """The notebook with its CUDA solution regions (numbered in order) replaced by the given code."""
    count = 0
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue

        def swap(m):
            nonlocal count
            k, count = count, count + 1
            return replacements.get(k, m.group(0))

        cell.source = REGION.sub(swap, cell.source)
    return nb


def run_replay(nb, monkeypatch):
    """Execute in replay mode in solutions/; the check cell's error (or None) and the other cells' errors."""
    monkeypatch.setenv("STREAMALLOC_MODE", "replay")
    client = nbclient.NotebookClient(nb, kernel_name="python3", timeout=120, allow_errors=True,
                                     resources={"metadata": {"path": str(SOLUTION.parent)}})
    try:
        client.execute()
    except nbclient.exceptions.NoSuchKernel:
        pytest.skip("no python3 Jupyter kernel")
    check, others = None, []
    for i, cell in enumerate(nb.cells):
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        if "check" in cell.metadata.get("tags", []):
            check = errors[0] if errors else None
        elif errors:
            others.append(f"cell {i}: {errors[0]['ename']}: {errors[0]['evalue']}")
    return check, others


def rejected(nb, monkeypatch, *words):
    check, others = run_replay(nb, monkeypatch)
    assert not others, others
    assert check is not None, "the check cell accepted a wrong answer"
    assert check["ename"] == "LabIncomplete", f"{check['ename']}: {check['evalue']}"
    assert "does not compile" not in check["evalue"], "a wrong answer of these tests must still compile"
    for w in words:
        assert w in check["evalue"], f"{w!r} is not in the check's message: {check['evalue']}"
    return check["evalue"]


def solution():
    return nbformat.read(str(SOLUTION), as_version=4)


def test_the_solution_passes_its_check_in_replay(monkeypatch):
    check, others = run_replay(solution(), monkeypatch)
    assert not others, others
    assert check is None, f"{check['ename']}: {check['evalue']}"


@pytest.mark.skipif(not LAB.exists(), reason="labs/ is not generated (tools/make_labs.py)")
def test_the_generated_lab_names_every_missing_call(monkeypatch):
    rejected(nbformat.read(str(LAB), as_version=4), monkeypatch,
             "cudaStreamBeginCapture is not called", "cudaGraphLaunch is not called",
             "cudaDeviceGraphMemTrim is not called")


def test_an_allocation_made_once_before_the_capture_is_not_captured(monkeypatch):
    message = rejected(with_regions(solution(), {0: ALLOCATED_BEFORE_CAPTURE, 2: FREED_AT_THE_END}), monkeypatch,
                       "the allocation is not captured", "the free is not captured")
    assert message.startswith("2 thing(s) still wrong")  # every call is there; only where two are is wrong


def test_trimming_the_stream_ordered_pool_is_not_the_graph_trim(monkeypatch):
    rejected(with_regions(solution(), {3: POOL_TRIM_INSTEAD}), monkeypatch,
             "cudaDeviceGraphMemTrim is not called")
