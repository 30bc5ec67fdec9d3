"""The runner: execute every notebook headless with papermill and summarize.

Each notebook runs in its own kernel, in its own folder, in the mode decided once here; the executed
copies go under build/executed/ at the notebook's path in the repository (a notebook from outside it goes
under build/executed/outside/): the runner never writes over a notebook, nor outside build/. The summary (notebook, mode, passed or failed, seconds, the error)
is printed and written to build/summary.json and build/summary.md.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from pathlib import Path

from . import gpu
from .errors import CourseError

REPO = Path(__file__).resolve().parent.parent
FOLDERS = ("notebooks", "solutions", "labs")


class NoNotebooks(CourseError):
    """The paths given to the runner name no notebook."""


def _kernel_config():
    """The kernels talk to the runner over local IPC sockets on Linux and macOS, not over TCP: nothing leaves the
    machine, and ipykernel (7+) then has no reason to warn "Kernel is running over TCP without encryption"."""
    from traitlets.config import Config

    return Config({"KernelManager": {"transport": "ipc"}}) if os.name == "posix" else Config()


def notebooks(paths=()) -> list[Path]:
    """The notebooks to run: those given (files, or every .ipynb in a folder), else the course's three folders."""
    if not paths:
        return [nb for folder in FOLDERS for nb in sorted((REPO / folder).glob("*.ipynb"))]
    found = []
    for p in map(Path, paths):
        if p.is_dir():
            found += sorted(p.glob("*.ipynb"))
        elif p.is_file() and p.suffix == ".ipynb":
            found.append(p)
        elif p.exists():
            raise NoNotebooks(f"{p} is not a notebook (.ipynb) or a folder of notebooks")
        else:
            raise NoNotebooks(f"{p} does not exist")
    if not found:
        raise NoNotebooks(f"no notebook (.ipynb) in {', '.join(map(str, paths))}")
    return found


def output_path(nb: Path, out_dir: Path) -> Path:
    """Where the executed copy of a notebook goes: under out_dir, at its path in the repository, or, for a
    notebook outside the repository, under out_dir/outside/ with its whole path made into one safe name."""
    nb = nb.resolve()
    if nb.is_relative_to(REPO):
        out = out_dir / nb.relative_to(REPO)
    else:
        out = out_dir / "outside" / re.sub(r"[^A-Za-z0-9._-]+", "_", str(nb.parent).strip("/")) / nb.name
    if out.resolve() == nb:
        raise ValueError(f"the executed copy of {nb} would overwrite it")
    return out


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


INJECTED = {"injected-parameters", "papermill-error-cell-tag"}  # cells papermill adds to the executed copy


def source_cells(nb) -> list[tuple[int, dict]]:
    """The executed notebook's cells that come from the source notebook, each with its number there (from 1)."""
    cells = [c for c in nb.cells if not INJECTED & set(c.get("metadata", {}).get("tags", []))]
    return list(enumerate(cells, 1))


def _where(number: int, total: int, cell) -> str:
    first = next((ln.strip() for ln in cell.get("source", "").splitlines() if ln.strip()), "")
    return f"cell {number} of {total}" + (f" ({first[:60]})" if first else "")


def notebook_problem(path: Path, solved_ok: bool = False) -> str:
    """The first problem in an executed notebook, or '', naming the cell as the source notebook numbers it.
    solved_ok: a lab's check that expected LabIncomplete and raised nothing is no problem (the lab is solved)."""
    import nbformat

    cells = source_cells(nbformat.read(str(path), as_version=4))
    for n, cell in cells:
        if cell.cell_type == "code" and cell.get("execution_count") is not None:
            problem = cell_problem(cell, cell.get("outputs", []))
            if problem and solved_ok and cell.metadata.get("expected_exception") == "LabIncomplete" \
                    and not any(o.get("output_type") == "error" for o in cell.get("outputs", [])):
                continue
            if problem:
                return f"{_where(n, len(cells), cell)}: {problem}"[:400]
    return ""


def edited_lab(nb: Path) -> bool:
    """A lab whose cells differ from those tools/make_labs.py wrote (the hash in its metadata): the learner's."""
    import hashlib

    import nbformat

    try:
        book = nbformat.read(str(nb), as_version=4)
    except Exception:
        return False
    mark = book.metadata.get("streamalloc", {})
    return isinstance(mark, dict) and "cells_sha256" in mark and mark["cells_sha256"] != hashlib.sha256(
        json.dumps(book.cells, sort_keys=True).encode()).hexdigest()


def timeout_problem(path: Path, limit: float) -> str:
    """A timeout in words: which cell (numbered as in the source notebook) ran past which limit."""
    import nbformat

    where = "a cell"
    if path.is_file():
        cells = source_cells(nbformat.read(str(path), as_version=4))
        started = [(n, c) for n, c in cells if c.cell_type == "code" and c.get("metadata", {}).get("execution")]
        if started:
            n, cell = started[-1]
            where = _where(n, len(cells), cell)
    return (f"timed out: {where} ran longer than the {limit:g} s limit for one cell and was stopped "
            "(STREAMALLOC_CELL_TIMEOUT sets the limit)")


def run(paths=(), out_dir: Path | None = None, kernel: str = "python3", progress: bool = True,
        extra_env: dict | None = None, cell_timeout: int | None = None) -> list[dict]:
    """Execute notebooks; the executed copies go under out_dir (build/executed/), never over a notebook."""
    import papermill
    from nbclient.exceptions import CellTimeoutError

    nbs = notebooks(paths)  # NoNotebooks before anything starts
    out_dir = Path(out_dir or REPO / "build" / "executed")
    cell_timeout = cell_timeout or int(os.environ.get("STREAMALLOC_CELL_TIMEOUT", 900))  # a hung cell fails
    mode = gpu.decide(gpu.probe())
    os.environ["STREAMALLOC_MODE"] = mode.name  # the kernels inherit the decision
    os.environ.update(extra_env or {})
    print(f"Running the course in {mode.name.upper()} mode: {mode.reason}.", flush=True)
    rows = []
    kernels = Kernels(kernel)
    try:
        for i, nb in enumerate(nbs, 1):
            rel = nb.resolve().relative_to(REPO) if nb.resolve().is_relative_to(REPO) else nb.resolve()
            out = output_path(nb, out_dir)
            out.parent.mkdir(parents=True, exist_ok=True)
            print(f"[{i}/{len(nbs)}] {rel}", flush=True)
            t0 = time.perf_counter()
            error = ""
            try:
                km = kernels.take(nb, following=nbs[i] if i < len(nbs) else None)
                papermill.execute_notebook(str(nb), str(out), cwd=str(nb.parent), kernel_name=kernel,
                                           progress_bar=progress, log_output=False, execution_timeout=cell_timeout,
                                           km=km, on_cell_executed=kernels.after_cell)
            except papermill.PapermillExecutionError:
                pass  # papermill also counts the errors that raises-exception cells expect: judged below
            except CellTimeoutError:
                error = timeout_problem(out, cell_timeout)
            except Exception as e:  # the kernel died, or the notebook could not be read or written
                error = _first_error(e)
            finally:
                kernels.done()
            solved = edited_lab(nb)  # the learner's work: its check raising nothing means solved, not failed
            if not error and out.is_file():
                error = notebook_problem(out, solved_ok=solved)
            rows.append({"notebook": str(rel), "mode": mode.name, "result": "failed" if error else "passed",
                         "seconds": round(time.perf_counter() - t0, 1), "error": error})
            said = "solved" if solved and not error else rows[-1]["result"]
            print(f"    {said} in {rows[-1]['seconds']} s{(': ' + error) if error else ''}", flush=True)
    finally:
        kernels.close()
    write_summary(rows, out_dir.parent)
    return rows


class Kernels:
    """A fresh kernel for each notebook, started one notebook ahead: the next notebook's kernel boots (about a
    second of Python start-up) while this notebook's first cell (its set-up) runs, and that cell does not end
    until the next kernel is up (`after_cell`), so no kernel boots while a measurement runs. Each kernel starts
    in its notebook's folder, with the environment the runner set (less MPLBACKEND), its sockets and connection file in a
    temporary folder of the runner's; after its notebook its clients are closed and it is shut down, and any
    left when the runner stops (an error, an interrupt) are shut down too."""

    def __init__(self, name: str):
        self.name = name
        self.ahead: dict[Path, object] = {}
        self.current = None
        self.following = None
        self.started = 0
        self.sockets = Path(tempfile.mkdtemp(prefix="streamalloc-kernels-"))

    def _start(self, nb: Path):
        from jupyter_client.manager import AsyncKernelManager
        from nbclient.util import run_sync  # the one nbclient itself uses (nbclient 0.10 has its own)

        class Manager(AsyncKernelManager):
            def client(self, **kw):  # papermill does not close the client of a kernel it was given: we do
                self.clients = [*getattr(self, "clients", []), super().client(**kw)]
                return self.clients[-1]

        self.started += 1
        config = _kernel_config()
        if os.name == "posix":  # an absolute path of its own: two kernels are up at once, in other folders
            config.KernelManager.ip = str(self.sockets / f"kernel-{self.started}")
        km = Manager(kernel_name=self.name, config=config,
                     connection_file=str(self.sockets / f"kernel-{self.started}.json"))
        # as nbclient starts it: IPython's history in memory, not in the learner's profile; without a headless
        # shell's MPLBACKEND=Agg, which would keep every figure out of the executed notebook
        env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
        run_sync(km.start_kernel)(cwd=str(nb.parent), env=env, extra_arguments=["--HistoryManager.hist_file=:memory:"])
        return km

    def take(self, nb: Path, following: Path | None = None):
        """The kernel for `nb` (started now if it was not started ahead); starts the kernel of `following`
        (if that fails, it is started, and its failure reported, when its own turn comes)."""
        self.current = self.ahead.pop(nb, None) or self._start(nb)
        self.following = None
        if following is not None:
            try:
                self.following = self.ahead[following] = self.ahead.get(following) or self._start(following)
            except Exception:
                self.ahead.pop(following, None)
        return self.current

    async def after_cell(self, cell=None, cell_index=None, **_):
        """nbclient's on_cell_executed: after the first code cell, wait until the next kernel is up."""
        km, self.following = self.following, None
        if km is None:
            return
        kc = km.client()
        try:
            kc.start_channels()
            await kc.wait_for_ready(timeout=60)
        except Exception:  # its own turn reports it
            pass

    def _stop(self, km) -> None:
        from nbclient.util import run_sync  # the one nbclient itself uses (nbclient 0.10 has its own)

        for kc in getattr(km, "clients", []):
            try:
                kc.stop_channels()
            except Exception:
                pass
        try:
            run_sync(km.shutdown_kernel)(now=False)
        except Exception:  # already gone (it crashed, or was interrupted)
            pass

    def done(self) -> None:
        if self.current is not None:
            self._stop(self.current)
            self.current = None

    def close(self) -> None:
        self.done()
        for km in self.ahead.values():
            self._stop(km)
        self.ahead.clear()
        shutil.rmtree(self.sockets, ignore_errors=True)


def md_cell(value) -> str:
    """Text that stays inside one cell of a Markdown table: | escaped, line breaks as <br>."""
    text = str(value).replace("\\", "\\\\").replace("|", "\\|")
    return "<br>".join(line.strip() for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"))


def write_summary(rows: list[dict], where: Path) -> str:
    where.mkdir(parents=True, exist_ok=True)
    (where / "summary.json").write_text(json.dumps(rows, indent=1) + "\n")
    head = "| notebook | mode | result | seconds | error |\n|---|---|---|---|---|\n"
    md = head + "".join("| " + " | ".join(md_cell(r[k]) for k in ("notebook", "mode", "result", "seconds", "error"))
                        + " |\n" for r in rows)
    passed = sum(r["result"] == "passed" for r in rows)
    md += f"\n{passed} passed, {len(rows) - passed} failed\n"
    (where / "summary.md").write_text(md)
    print("\n" + md, flush=True)
    return md
