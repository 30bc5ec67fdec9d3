"""Lab 2 (tune the pool): its check cell rejects wrong answers, without a GPU.

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
SOLUTION = ROOT / "solutions" / "lab2_tune_pool.ipynb"
LAB = ROOT / "labs" / "lab2_tune_pool.ipynb"
CU = "tuned.cu"
FUNCTION = "tuned_loop"
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
    assert "cudaMemPoolAttrReleaseThreshold is set before the loop" in printed


def test_the_lab_as_given_is_incomplete():
    ename, evalue, printed = run_check(LAB)
    assert ename == "LabIncomplete", printed
    for words in ("the release threshold is never set", "cudaMemPoolTrimTo is not called"):
        assert words in evalue, evalue


SET = "const uint64_t keep_all = UINT64_MAX;\nCHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, (void *)&keep_all));"
TRIM = "CHECK(cudaMemPoolTrimTo(pool, 0));"
LOOP_TOP = "        const auto t0 = Clock::now();\n"
LOOP_END = "        trace.reserved.push_back(get(pool, cudaMemPoolAttrReservedMemCurrent));\n"


def indented(code, spaces=8):
    return "".join(" " * spaces + line + "\n" for line in code.splitlines())


WRONG = {
    # the brief's wrong answer: the threshold set after the loop, where it no longer changes anything in it
    "threshold set after the loop": (
        lambda t: regions(t, "", SET + "\n" + TRIM),
        ["cudaMemPoolAttrReleaseThreshold is set after the loop"]),
    "threshold set inside the loop": (
        lambda t: in_function(regions(t, "", TRIM), LOOP_TOP, LOOP_TOP + indented(SET)),
        ["cudaMemPoolAttrReleaseThreshold is set inside the loop"]),
    "trimmed inside the loop": (
        lambda t: in_function(regions(t, SET, ""), LOOP_END, LOOP_END + indented(TRIM)),
        ["cudaMemPoolTrimTo is called inside the loop"]),
    "never trimmed": (
        lambda t: regions(t, SET, ""),
        ["cudaMemPoolTrimTo is not called"]),
    "another attribute set instead of the threshold": (
        lambda t: regions(t, "const int yes = 1;\n"
                             "CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolReuseAllowOpportunistic, (void *)&yes));",
                          TRIM),
        ["the release threshold is never set"]),
}


@pytest.mark.parametrize("name", list(WRONG))
def test_a_wrong_answer_is_rejected_with_the_reason(name):
    edit, expected = WRONG[name]
    ename, evalue, printed = run_check(SOLUTION, edit)
    assert ename == "LabIncomplete", f"{name}: the check passed:\n{printed}"
    for words in expected:
        assert words in evalue, f"{name}: {words!r} not in {evalue!r}"
    assert "it compiles" in printed, printed  # each wrong answer is valid CUDA: only the check catches it
