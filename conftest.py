"""How pytest runs the course: unit tests in tests/, and every notebook through nbval.

The mode (live on a GPU with memory pools, or replay) is decided once, here, shown in the pytest
header, and handed to every notebook kernel through STREAMALLOC_MODE. STREAMALLOC_MODE=live without a
usable GPU stops pytest with one line (a usage error). A cell tagged `raises-exception` must raise (nbval
alone accepts a cell that does not); if the cell's metadata names `expected_exception`, the error must be
of that class. A lab the learner solved in place (runner.edited_lab) is theirs: its check raising nothing means
solved, as `make course` says; the unsolved lab as git tracks it is still checked (tests/labcheck.py).
"""
import os

import pytest

from streamalloc import cuda, gpu, replay, runner

collect_ignore = ["build", ".venv", ".site", "recordings", "tools"]
_machine = None
MODE = None


def pytest_configure(config):
    global _machine, MODE
    _machine = gpu.probe()
    try:
        MODE = gpu.decide(_machine)
    except (RuntimeError, ValueError) as e:  # STREAMALLOC_MODE=live on a machine without a usable GPU
        raise pytest.UsageError(str(e)) from None
    os.environ["STREAMALLOC_MODE"] = MODE.name


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: without it, never called
def pytest_xdist_auto_num_workers(config):
    """`-n auto` (make test): in replay, one worker per core (nvcc and the kernels each use one); live, one, so that no
    test's GPU timing shares the GPU or the CPU with another test."""
    try:
        live = gpu.decide(gpu.probe()).live
    except (RuntimeError, ValueError):  # STREAMALLOC_MODE=live without a GPU: pytest_configure says so
        return 1
    return 1 if live else max(1, os.cpu_count() or 1)


def pytest_report_header(config):
    ref = replay.reference()
    lines = [f"streamalloc: {MODE.name.upper()} mode: {MODE.reason}",
             f"streamalloc: this machine: {_machine.describe() if _machine.gpu or cuda.driver_present() else 'no GPU found'}; nvcc {_machine.nvcc or 'not found'}"]
    if not MODE.live:
        lines.append(f"streamalloc: replaying recordings of {ref or 'nothing (recordings/ is empty)'}")
    return lines


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    cell = getattr(item, "cell", None)
    if cell is None or call.when != "call" or report.outcome != "passed":
        return
    if "raises-exception" in cell.get("metadata", {}).get("tags", []):
        outputs = getattr(item, "test_outputs", [])
        problem = runner.cell_problem(cell, outputs)
        solved = (cell.get("metadata", {}).get("expected_exception") == "LabIncomplete"
                  and not any(o.get("output_type") == "error" for o in outputs) and runner.edited_lab(item.path))
        if problem and not solved:
            report.outcome, report.longrepr = "failed", problem
