"""Lab 3 (fix the race): plausible wrong answers are rejected by the lab's own check, without a GPU.

Each test puts a wrong answer into the solution notebook's regions, runs the notebook in replay mode with
nbclient (kernel python3, in solutions/), and asserts that the check cell raised LabIncomplete naming what is
missing. Only the static part of the check can judge them here (the run and the sanitizer are "not checked"
in replay for code that is not the recorded solution). Slow-but-OK: each run takes about 10 s.
"""
import os
import re
from pathlib import Path

import nbformat
import pytest

nbclient = pytest.importorskip("nbclient")

REPO = Path(__file__).resolve().parent.parent
SOLUTION = REPO / "solutions" / "lab3_fix_the_race.ipynb"
LAB = REPO / "labs" / "lab3_fix_the_race.ipynb"
REGION = re.compile(r"^(?P<indent>[ \t]*)// BEGIN SOLUTION.*?^[ \t]*// END SOLUTION[ \t]*$\n?", re.M | re.S)

ONLY_TODO_1 = """\
        CHECK(cudaEventRecord(filled, producer));
        CHECK(cudaStreamWaitEvent(consumer, filled, 0));
"""
ONLY_TODO_2 = """\
        CHECK(cudaEventRecord(consumed, consumer));
        CHECK(cudaStreamWaitEvent(producer, consumed, 0));
"""
RECORD_ON_THE_WRONG_STREAM = """\
        CHECK(cudaEventRecord(filled, consumer));
        CHECK(cudaStreamWaitEvent(consumer, filled, 0));
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
def test_the_generated_lab_says_both_orderings_are_missing(monkeypatch):
    rejected(nbformat.read(str(LAB), as_version=4), monkeypatch,
             "consume on `consumer` is not ordered after fill_slow", "TODO 1",
             "cudaFreeAsync on `producer` is not ordered after consume", "TODO 2",
             "cudaEventRecord 0× and cudaStreamWaitEvent 0×")


def test_only_the_wait_before_the_read_is_rejected_for_the_free(monkeypatch):
    """The consumer waits for the fill, but nothing orders the producer's free after the read."""
    message = rejected(with_regions(solution(), {0: ONLY_TODO_1, 1: ""}), monkeypatch,
                       "cudaFreeAsync on `producer` is not ordered after consume on `consumer`", "TODO 2",
                       "cudaEventRecord 1× and cudaStreamWaitEvent 1×: 2 of each are needed")
    assert "not ordered after fill_slow" not in message


def test_only_the_wait_before_the_free_is_rejected_for_the_read(monkeypatch):
    """The free waits for the read, but the read does not wait for the allocation and the fill."""
    message = rejected(with_regions(solution(), {0: "", 1: ONLY_TODO_2}), monkeypatch,
                       "consume on `consumer` is not ordered after fill_slow on `producer`", "TODO 1")
    assert "cudaFreeAsync on `producer` is not ordered" not in message


def test_an_event_recorded_on_the_consumer_orders_nothing(monkeypatch):
    """Four calls, as many as needed, but the first event is recorded on the wrong stream."""
    rejected(with_regions(solution(), {0: RECORD_ON_THE_WRONG_STREAM}), monkeypatch,
             "consume on `consumer` is not ordered after fill_slow on `producer`")
