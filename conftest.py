"""How pytest runs the course: unit tests in tests/, and every notebook through nbval.

The mode (live on a GPU with memory pools, or replay) is decided once, here, shown in the pytest
header, and handed to every notebook kernel through STREAMALLOC_MODE. A cell tagged
`raises-exception` must raise (nbval alone accepts a cell that does not); if the cell's metadata names
`expected_exception`, the error must be of that class.
"""
import os

import pytest

from streamalloc import gpu, replay

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
    if "raises-exception" not in cell.get("metadata", {}).get("tags", []):
        return
    errors = [o for o in getattr(item, "test_outputs", []) if o.get("output_type") == "error"]
    expected = cell.get("metadata", {}).get("expected_exception")
    if not errors:
        report.outcome, report.longrepr = "failed", "the cell is tagged raises-exception but raised nothing"
    elif expected and errors[0].get("ename") != expected:
        report.outcome = "failed"
        report.longrepr = f"the cell should raise {expected}, but raised {errors[0].get('ename')}: {errors[0].get('evalue')}"
