"""The runner: execute every notebook headless with papermill and summarize.

Each notebook runs in its own kernel, in its own folder, in the mode decided once here; the executed
copies go under build/executed/. The summary (notebook, mode, passed or failed, seconds, the error)
is printed and written to build/summary.json and build/summary.md.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from . import gpu

REPO = Path(__file__).resolve().parent.parent
FOLDERS = ("notebooks", "solutions", "labs")


def _kernel_config():
    """The kernels talk to the runner over local IPC sockets on Linux and macOS, not over TCP: nothing leaves the
    machine, and ipykernel (7+) then has no reason to warn "Kernel is running over TCP without encryption"."""
    from traitlets.config import Config

    return Config({"KernelManager": {"transport": "ipc"}}) if os.name == "posix" else Config()


def notebooks(paths=()) -> list[Path]:
    if paths:
        found = []
        for p in map(Path, paths):
            found += sorted(p.glob("*.ipynb")) if p.is_dir() else [p]
        return found
    return [nb for folder in FOLDERS for nb in sorted((REPO / folder).glob("*.ipynb"))]


def _first_error(exc: Exception) -> str:
    text = str(exc).strip()
    lines = [ln for ln in text.splitlines() if ln.strip() and not set(ln.strip()) <= set("-")]
    for ln in reversed(lines):  # papermill ends with the exception line: "ErrorName: message"
        if ":" in ln and not ln.startswith(" "):
            return ln[:300]
    return (lines[-1] if lines else type(exc).__name__)[:300]


def cell_problem(cell, outputs) -> str | None:
    """What is wrong with one executed code cell: an unexpected error, or no error where one is expected.

    A cell tagged `raises-exception` must raise; if its metadata names `expected_exception`, that class.
    """
    errors = [o for o in outputs if o.get("output_type") == "error"]
    meta = cell.get("metadata", {})
    if "raises-exception" not in meta.get("tags", []):
        return f"{errors[0]['ename']}: {errors[0]['evalue']}" if errors else None
    if not errors:
        return "the cell is tagged raises-exception but raised nothing"
    expected = meta.get("expected_exception")
    if expected and errors[0].get("ename") != expected:
        return f"the cell should raise {expected}, but raised {errors[0]['ename']}: {errors[0]['evalue']}"
    return None


def notebook_problem(path: Path) -> str:
    """The first problem in an executed notebook, or ''."""
    import nbformat

    nb = nbformat.read(str(path), as_version=4)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and cell.get("execution_count") is not None:
            problem = cell_problem(cell, cell.get("outputs", []))
            if problem:
                return f"cell {i}: {problem}"[:300]
    return ""


def run(paths=(), out_dir: Path | None = None, kernel: str = "python3", progress: bool = True,
        extra_env: dict | None = None, cell_timeout: int | None = None) -> list[dict]:
    import papermill

    out_dir = Path(out_dir or REPO / "build" / "executed")
    cell_timeout = cell_timeout or int(os.environ.get("STREAMALLOC_CELL_TIMEOUT", 900))  # a hung cell fails
    mode = gpu.decide(gpu.probe())
    os.environ["STREAMALLOC_MODE"] = mode.name  # the kernels inherit the decision
    os.environ.update(extra_env or {})
    print(f"Running the course in {mode.name.upper()} mode: {mode.reason}.", flush=True)
    rows = []
    nbs = notebooks(paths)
    for i, nb in enumerate(nbs, 1):
        rel = nb.resolve().relative_to(REPO) if nb.resolve().is_relative_to(REPO) else nb
        out = out_dir / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        print(f"[{i}/{len(nbs)}] {rel}", flush=True)
        t0 = time.perf_counter()
        error = ""
        try:
            papermill.execute_notebook(str(nb), str(out), cwd=str(nb.parent), kernel_name=kernel,
                                       progress_bar=progress, log_output=False, execution_timeout=cell_timeout,
                                       config=_kernel_config())
        except papermill.PapermillExecutionError:
            pass  # papermill also counts the errors that raises-exception cells expect: judged below
        except Exception as e:  # the kernel died, or the notebook could not be read or written
            error = _first_error(e)
        error = error or notebook_problem(out)
        rows.append({"notebook": str(rel), "mode": mode.name, "result": "failed" if error else "passed",
                     "seconds": round(time.perf_counter() - t0, 1), "error": error})
        print(f"    {rows[-1]['result']} in {rows[-1]['seconds']} s{(': ' + error) if error else ''}", flush=True)
    write_summary(rows, out_dir.parent)
    return rows


def write_summary(rows: list[dict], where: Path) -> str:
    where.mkdir(parents=True, exist_ok=True)
    (where / "summary.json").write_text(json.dumps(rows, indent=1) + "\n")
    head = "| notebook | mode | result | seconds | error |\n|---|---|---|---|---|\n"
    md = head + "".join(f"| {r['notebook']} | {r['mode']} | {r['result']} | {r['seconds']} | {r['error']} |\n"
                        for r in rows)
    passed = sum(r["result"] == "passed" for r in rows)
    md += f"\n{passed} passed, {len(rows) - passed} failed\n"
    (where / "summary.md").write_text(md)
    print("\n" + md, flush=True)
    return md
