"""Lab 1 (from synchronous to stream-ordered): its check cell rejects wrong answers, without a GPU.

Each test runs the lab's set-up cell, its %%writefile cells and its check cell in a Jupyter kernel in
replay mode, with the solution's CUDA edited into a plausible wrong answer, and looks for the check's
words. Slow (a kernel start and an nvcc build each, some seconds), but each stays well under a minute.
"""
import re
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = Path(__file__).resolve().parent.parent
SOLUTION = ROOT / "solutions" / "lab1_stream_ordered.ipynb"
LAB = ROOT / "labs" / "lab1_stream_ordered.ipynb"
CU = "pipeline.cu"
FUNCTION = "pipeline_stream_ordered"
REGION = re.compile(r"^([ \t]*)// BEGIN SOLUTION.*?\n(.*?)^[ \t]*// END SOLUTION[ \t]*\n", re.S | re.M)


def regions(text, *bodies):
    """Replace the solution regions' contents, in order, by `bodies` (markers dropped, indentation kept)."""
    bodies = iter(bodies)

    def sub(m):
        indent, body = m.group(1), next(bodies)
        return "".join(f"{indent}{line}\n" for line in body.splitlines())

    return REGION.sub(sub, text)


def in_function(text, old, new):
    """Replace `old` by `new` once, inside the learner's function only."""
    start = text.index(f"void {FUNCTION}(")
    assert old in text[start:], old
    return text[:start] + text[start:].replace(old, new, 1)


def run_check(notebook, edit=None):
    """Run set-up, %%writefile and check cells in replay; return (error name, error text, printed text)."""
    nb = nbformat.read(str(notebook), as_version=4)
    keep = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        tags = cell.metadata.get("tags", [])
        if "sa.start(" in cell.source or "check" in tags:
            keep.append(cell)
        elif cell.source.startswith("%%writefile"):
            if edit and cell.source.splitlines()[0].endswith("/" + CU):
                first, _, body = cell.source.partition("\n")
                cell.source = first + "\n" + edit(body)
            keep.append(cell)
    nb.cells = keep
    client = nbclient.NotebookClient(nb, kernel_name="python3", timeout=120, allow_errors=True,
                                     resources={"metadata": {"path": str(notebook.parent)}})
    client.execute()
    *before, check = nb.cells
    for cell in before:
        errors = [o for o in cell.outputs if o.output_type == "error"]
        assert not errors, f"a cell before the check failed: {errors[0].ename}: {errors[0].evalue}"
    printed = "".join(o.get("text", "") for o in check.outputs if o.output_type == "stream")
    errors = [o for o in check.outputs if o.output_type == "error"]
    return (errors[0].ename, errors[0].evalue, printed) if errors else (None, "", printed)


@pytest.fixture(autouse=True)
def replay(monkeypatch):
    monkeypatch.setenv("STREAMALLOC_MODE", "replay")


def test_the_solution_passes_what_can_be_checked_without_a_gpu():
    ename, evalue, printed = run_check(SOLUTION)
    assert ename is None, f"{ename}: {evalue}\n{printed}"
    assert "All checks passed" in printed
    assert "ok" in printed and "calls cudaMallocAsync, cudaFreeAsync" in printed


def test_the_lab_as_given_is_incomplete():
    ename, evalue, printed = run_check(LAB)
    assert ename == "LabIncomplete", printed
    for words in ("cudaMallocAsync, cudaFreeAsync are not called", "cudaMalloc, cudaFree is still called inside the loop",
                  "cudaDeviceSynchronize is still called inside the loop"):
        assert words in evalue, evalue


WRONG = {
    # the brief's wrong answer: stream-ordered allocation, but the classic free left in the loop
    "cudaFree left in the loop": (
        lambda t: regions(t, "CHECK(cudaMallocAsync(&buf, bytes, s));", "", "CHECK(cudaFree(buf));"),
        ["cudaFree is still called inside the loop"]),
    "a synchronization left in the loop": (
        lambda t: regions(t, "CHECK(cudaMallocAsync(&buf, bytes, s));", "CHECK(cudaStreamSynchronize(s));",
                          "CHECK(cudaFreeAsync(buf, s));"),
        ["cudaStreamSynchronize is still called inside the loop"]),
    "freed before the kernels": (
        lambda t: regions(t, "CHECK(cudaMallocAsync(&buf, bytes, s));\nCHECK(cudaFreeAsync(buf, s));", "", ""),
        ["cudaFreeAsync comes before compute(...)"]),
    "allocated on the legacy default stream": (
        lambda t: regions(t, "CHECK(cudaMallocAsync(&buf, bytes, 0));", "", "CHECK(cudaFreeAsync(buf, s));"),
        ["cudaMallocAsync is called on 0, not on s"]),
    "allocation hoisted out of the loop": (
        lambda t: in_function(regions(t, "", "", "CHECK(cudaFreeAsync(buf, s));"),
                              "    for (int it = 0; it < iters; ++it) {\n        int *buf = nullptr;\n",
                              "    int *buf = nullptr;\n    CHECK(cudaMallocAsync(&buf, bytes, s));\n"
                              "    for (int it = 0; it < iters; ++it) {\n"),
        ["cudaMallocAsync is called outside the loop"]),
}


@pytest.mark.parametrize("name", list(WRONG))
def test_a_wrong_answer_is_rejected_with_the_reason(name):
    edit, expected = WRONG[name]
    ename, evalue, printed = run_check(SOLUTION, edit)
    assert ename == "LabIncomplete", f"{name}: the check passed:\n{printed}"
    for words in expected:
        assert words in evalue, f"{name}: {words!r} not in {evalue!r}"
    assert "it compiles" in printed, printed  # each wrong answer is valid CUDA: only the check catches it
