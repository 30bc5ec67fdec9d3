"""How pytest runs the course: unit tests in tests/, and every notebook through nbval.

The mode (live on a GPU with memory pools, or replay) is decided once, here, shown in the pytest
header, and handed to every notebook kernel through STREAMALLOC_MODE. A cell tagged
`raises-exception` must raise (nbval alone accepts a cell that does not); if the cell's metadata names
`expected_exception`, the error must be of that class.
"""
import os

import pytest

from streamalloc import gpu, replay, runner

_machine = gpu.probe()
MODE = gpu.decide(_machine)
os.environ["STREAMALLOC_MODE"] = MODE.name

collect_ignore = ["build", ".venv", ".site", "recordings", "tools"]


def pytest_report_header(config):
    ref = replay.reference()
    lines = [f"streamalloc: {MODE.name.upper()} mode: {MODE.reason}",
             f"streamalloc: this machine: {_machine.describe()}; nvcc {_machine.nvcc or 'not found'}"]
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
        problem = runner.cell_problem(cell, getattr(item, "test_outputs", []))
        if problem:
            report.outcome, report.longrepr = "failed", problem
