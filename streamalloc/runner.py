"""The runner: execute every notebook headless with papermill and summarize.

Each notebook runs in its own kernel, in its own folder, in the mode decided once here; the executed
copies go under build/executed/ at the notebook's path in the repository (a notebook from outside it goes
under build/executed/outside/): the runner never writes over a notebook, nor outside build/. The summary (notebook,
mode, passed, failed or not measured, seconds, the error or why it was not measured, and a note) is printed and
written, whole or not at all, to build/summary.json and build/summary.md.

A lab the learner edited (edited_lab) is judged by its check, from the verdict the check cell shows as data
(streamalloc.verdict; never from a sentence it printed): "solved", "in progress" with the check's first finding, or
"not verified" with what it could not verify here. The console and the summary show that word; the row's "result"
stays "passed" (the notebook ran as intended), its word is in "lab".

A notebook is "not measured" when it needs more GPUs than there are and no recording made on that many exists
(05b: it reports NotYetRecorded, and the lesson's note, shown as data in the same channel, says why); it did not fail,
and it was not verified. A lesson that showed a recording on a live machine (too few GPUs) says so the same way. SIGTERM and SIGHUP stop a run as
SIGINT does: the kernels are interrupted (a build in progress stops nvcc's process group and removes its
temporary folder), shut down, and their socket folder removed. The caller's environment is left as it was.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import os
import re
import shutil
import signal
import tempfile
import time
from pathlib import Path

from . import cuda, gpu, verdict
from .course import REPO, notebooks
from .errors import CourseError
from .settings import absolute_folders, check_settings

NOT_MEASURED = "not measured"  # a row's result, beside "passed" and "failed"


class OutputNotWritable(CourseError):
    """The runner cannot write its executed copies or its summary (a read-only or full disk): where, and why."""


def _kernel_config():
    """The kernels talk to the runner over local IPC sockets on Linux and macOS, not over TCP: nothing leaves the
    machine, and ipykernel (7+) then has no reason to warn "Kernel is running over TCP without encryption"."""
    from traitlets.config import Config

    return Config({"KernelManager": {"transport": "ipc"}}) if os.name == "posix" else Config()


def output_path(nb: Path, out_dir: Path) -> Path:
    """Where the executed copy of a notebook goes: under out_dir, at its path in the repository, or, for a
    notebook outside the repository, under out_dir/outside/ in a folder named after its whole path (made safe,
    and with a hash of the path itself, so that `a b/` and `a_b/` do not share one)."""
    nb = nb.resolve()
    if nb.is_relative_to(REPO):
        out = out_dir / nb.relative_to(REPO)
    else:
        safe = re.sub(r"[^A-Za-z0-9._-]+", "_", str(nb.parent).strip("/"))[-80:]
        digest = hashlib.sha256(str(nb.parent).encode()).hexdigest()[:10]
        out = out_dir / "outside" / f"{safe}-{digest}" / nb.name
    if out.resolve() == nb:
        raise ValueError(f"the executed copy of {nb} would overwrite it")
    return out


def _first_error(exc: Exception) -> str:
    text = str(exc).strip()
    lines = [ln for ln in text.splitlines() if ln.strip() and not set(ln.strip()) <= set("-")]
    for ln in reversed(lines):  # papermill ends with the exception line: "ErrorName: message"
        if ":" in ln and not ln.startswith(" "):
            return verdict.clip(ln)
    return verdict.clip(lines[-1] if lines else type(exc).__name__)


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
    if expected and errors[0].get("ename") != expected and not cell_note(cell, outputs):
        return f"the cell should raise {expected}, but raised {errors[0]['ename']}: {errors[0]['evalue']}"
    return None


def cell_note(cell, outputs) -> str | None:
    """What an executed cell could not check here: a compile error it expects, where there is no nvcc to compile."""
    meta = cell.get("metadata", {})
    errors = [o for o in outputs if o.get("output_type") == "error"]
    if ("raises-exception" in meta.get("tags", []) and meta.get("expected_exception", "CompileError") == "CompileError"
            and errors and errors[0].get("ename") == "NvccNotFound"):
        first = str(errors[0].get("evalue", "")).split(":")[0]
        return f"not compiled, no nvcc here ({first})"
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
    return notebook_findings(path, solved_ok)[0]


def notebook_findings(path: Path, solved_ok: bool = False) -> tuple[str, str]:
    """(the first problem, or ''; what the notebook could not check here, or ''), cells named as in the source."""
    import nbformat

    cells = source_cells(nbformat.read(str(path), as_version=4))
    notes = []
    for n, cell in cells:
        if cell.cell_type == "code" and cell.get("execution_count") is not None:
            problem = cell_problem(cell, cell.get("outputs", []))
            if problem and solved_ok and cell.metadata.get("expected_exception") == "LabIncomplete" \
                    and not any(o.get("output_type") == "error" for o in cell.get("outputs", [])):
                continue
            if problem:
                return f"{_where(n, len(cells), cell)}: {problem}"[:400], ""
            note = cell_note(cell, cell.get("outputs", []))
            if note:
                notes.append(f"{_where(n, len(cells), cell)}: {note}")
    return "", "; ".join(notes)[:400]


SOLVED, IN_PROGRESS, UNVERIFIED = verdict.SOLVED, verdict.IN_PROGRESS, verdict.UNVERIFIED  # an edited lab's word


def lab_outcome(path: Path) -> tuple[str, str]:
    """An executed lab's check, in a word and its first finding, read from the verdict its check cell showed as data
    (streamalloc.verdict), never from what it printed: (SOLVED, ''), (IN_PROGRESS, the first thing still wrong),
    (UNVERIFIED, what it could not verify here), or ('', '') where no check ran."""
    return verdict.of_lab(path)


def running_cell(path: Path) -> str:
    """The cell that was running when a notebook stopped (numbered as in the source notebook), or 'a cell'."""
    import nbformat

    if path.is_file():
        try:
            cells = source_cells(nbformat.read(str(path), as_version=4))
        except Exception:  # a copy papermill could not finish writing
            return "a cell"
        started = [(n, c) for n, c in cells if c.cell_type == "code" and (
            c.get("metadata", {}).get("execution") or c.get("metadata", {}).get("papermill", {}).get("status") == "running")]
        if started:
            n, cell = started[-1]
            return _where(n, len(cells), cell)
    return "a cell"


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


def edited_labs(paths, root: Path = REPO) -> list[str]:
    """The labs among `paths` (relative to root: "labs/lab1_stream_ordered.ipynb") edited in place (edited_lab): what
    make dist and make site refuse to hand out as the labs."""
    return [p for p in paths if p.startswith("labs/") and p.endswith(".ipynb") and edited_lab(root / p)]


def edited_said(edited: list[str]) -> str:
    """What make dist and make site say of labs edited in place, before their own remedy."""
    one = len(edited) == 1
    return (f"{', '.join(edited)} {'is' if one else 'are'} edited in place (solved, or begun). Put back the "
            f"lab{'' if one else 's'} as given (`git stash`, or `git checkout -- {' '.join(edited)}` after keeping your "
            "work elsewhere)")


def timeout_problem(path: Path, limit: float) -> str:
    """A timeout in words: which cell (numbered as in the source notebook) ran past which limit."""
    return (f"timed out: {running_cell(path)} ran longer than the {limit:g} s limit for one cell and was stopped "
            "(STREAMALLOC_CELL_TIMEOUT sets the limit)")


def died_problem(path: Path, cell=None) -> str:
    """`cell`: the cell nbclient last started (on_cell_start), which names it even where papermill's copy on disk
    is a cell behind; else the copy's last running cell."""
    where = None
    if cell is not None and path.is_file():
        import nbformat
        try:
            cells = source_cells(nbformat.read(str(path), as_version=4))
            where = next((_where(n, len(cells), c) for n, c in cells if c.get("id") == cell.get("id")), None)
        except Exception:  # a copy papermill could not finish writing
            pass
    return (f"the kernel died in {where or running_cell(path)}: its Python process ended (a crash, the machine's "
            "memory running out, or an exit called in the cell)")


def partial_path(out: Path) -> Path:
    """Where papermill writes a notebook's executed copy while it runs (it saves after every cell): beside out,
    hidden."""
    return out.with_name(f".{out.stem}.partial.ipynb")


def _settle(part: Path, out: Path) -> str:
    """Put the executed copy in out's place if papermill wrote it whole; else remove it, and any older copy at out,
    and say so ('' when the copy is in place, or when none was written: the row's error then says why). A copy cut
    short (the disk filled up, the run was killed while papermill saved) never stands beside its row."""
    import nbformat

    if not part.exists():
        out.unlink(missing_ok=True)  # an older run's copy would tell of another run
        return ""
    try:
        nbformat.read(str(part), as_version=4)
        os.replace(part, out)
        return ""
    except Exception as e:  # not JSON, not a notebook, or it could not be moved
        part.unlink(missing_ok=True)
        out.unlink(missing_ok=True)
        why = e.strerror if isinstance(e, OSError) and e.strerror else type(e).__name__
        return f"the executed copy could not be written whole ({why}), so none is kept at {out}"


def _writable(folder: Path) -> None:
    """OutputNotWritable unless the runner can write into folder (made if missing)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as e:
        raise OutputNotWritable(f"the runner cannot write to {folder}: {e.strerror or e} (a read-only folder, or a "
                                "full disk?); nothing was run") from None


def run(paths=(), out_dir: Path | None = None, kernel: str = "python3", progress: bool = True,
        extra_env: dict | None = None, cell_timeout: int | None = None, jobs: int = 1) -> list[dict]:
    """Execute notebooks; the executed copies go under out_dir (build/executed/), never over a notebook.

    The kernels get this process's environment with extra_env and the mode decided here (extra_env's
    STREAMALLOC_MODE decides it, where it names one); this process's own environment does not change.
    In replay, `jobs` > 1 runs that many notebooks at once (nothing is timed there), 0 one per core (jobs_for);
    live, always one."""
    env = absolute_folders({**os.environ, **(extra_env or {})})  # each kernel runs in its notebook's folder
    settings = check_settings(env)  # BadSetting, one message for every bad STREAMALLOC_* value
    nbs = notebooks(paths)  # NoNotebooks before anything starts
    out_dir = Path(out_dir or REPO / "build" / "executed")
    _writable(out_dir)
    cell_timeout = cell_timeout or settings["STREAMALLOC_CELL_TIMEOUT"]  # a hung cell fails
    forced = env.get("STREAMALLOC_MODE", "").strip()
    mode = gpu.decide(gpu.probe(), forced=forced)
    env["STREAMALLOC_MODE"] = mode.name  # the kernels get the decision, and why: not "STREAMALLOC_MODE=... was set"
    env.pop(gpu.HANDED_REASON, None)
    if not forced and not mode.live:
        env[gpu.HANDED_REASON] = mode.reason
    print(f"Running the course in {mode.name.upper()} mode: {mode.reason}.", flush=True)
    with cuda.terminate_as_interrupt():  # SIGTERM, SIGHUP: the same clean stop as SIGINT
        jobs = jobs or jobs_for(mode.live)
        if jobs > 1 and not mode.live and len(nbs) > 1:
            rows = _run_at_once(nbs, out_dir, kernel, env, cell_timeout, mode, jobs)
        else:
            rows = _run(nbs, out_dir, kernel, progress, env, cell_timeout, mode)
    write_summary(merged(rows, out_dir.parent / "summary.json"), out_dir.parent)
    return rows


def _text_sha(notebook: str) -> str:
    """The hash of a notebook's saved text ('' where it cannot be read): what a row of the summary ran."""
    path = Path(notebook) if Path(notebook).is_absolute() else REPO / notebook
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    except OSError:
        return ""


def merged(rows: list[dict], summary: Path) -> list[dict]:
    """The whole course's table: this run's rows, and from the summary an earlier run wrote, the row of each notebook
    this run did not run, where that notebook is still the text that run ran (a notebook changed since, or gone,
    keeps no row). Each row carries the hash of the text it ran ("sha"); a kept row is marked "earlier". In the
    course's order, others after."""
    for r in rows:
        r["sha"] = _text_sha(r["notebook"])
        r.pop("earlier", None)
    try:
        old = json.loads(summary.read_text())
    except (OSError, ValueError):
        old = []
    ran = {r["notebook"] for r in rows}
    kept = [r for r in (old if isinstance(old, list) else []) if isinstance(r, dict) and isinstance(r.get("notebook"), str)
            and r["notebook"] not in ran and r.get("sha") and r["sha"] == _text_sha(r["notebook"])]
    for r in kept:
        r["earlier"] = True  # the summary says which rows this run did not make
    order = {str(nb.relative_to(REPO)): i for i, nb in enumerate(notebooks())}
    return sorted(rows + kept, key=lambda r: order.get(r["notebook"], len(order)))


def _run(nbs, out_dir, kernel, progress, env, cell_timeout, mode) -> list[dict]:
    import papermill
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    rows = []
    kernels = Kernels(kernel, env)
    try:
        for i, nb in enumerate(nbs, 1):
            rel = nb.resolve().relative_to(REPO) if nb.resolve().is_relative_to(REPO) else nb.resolve()
            out = output_path(nb, out_dir)
            print(f"[{i}/{len(nbs)}] {rel}", flush=True)
            t0 = time.perf_counter()
            error = note = ""
            started = {}  # the cell nbclient last started
            part = partial_path(out)  # papermill writes here; the copy takes out's place only whole (_settle)
            try:
                _writable(out.parent)  # the disk filled up, or the folder became read-only, during the run
                km = kernels.take(nb, following=nbs[i] if i < len(nbs) else None)
                papermill.execute_notebook(str(nb), str(part), cwd=str(nb.parent), kernel_name=kernel,
                                           progress_bar=progress, log_output=False, execution_timeout=cell_timeout,
                                           km=km, on_cell_executed=kernels.after_cell,
                                           on_cell_start=lambda cell=None, **_: started.update(cell=cell))
            except OutputNotWritable as e:
                error = str(e)
            except papermill.PapermillExecutionError:
                pass  # papermill also counts the errors that raises-exception cells expect: judged below
            except CellTimeoutError:
                error = timeout_problem(part, cell_timeout)
            except DeadKernelError:
                error = died_problem(part, started.get("cell"))
            except Exception as e:  # the notebook could not be read or written
                error = _first_error(e)
            except BaseException:  # an interrupt (SIGINT, SIGTERM, SIGHUP): the kernel is interrupted, then stopped
                kernels.done(interrupt=True)
                _settle(part, out)
                raise
            unwritten = _settle(part, out)
            error = "; ".join(e for e in (error, unwritten) if e)
            kernels.done()
            said = verdict.note(out) if out.is_file() else None  # the lesson's note to the runner, as data
            replayed = verdict.REPLAYED_HERE + said.finding if said and said.word == verdict.REPLAYED else ""
            not_measured = said.finding if said and said.word == verdict.NOT_MEASURED else ""
            solved = edited_lab(nb)  # the learner's work: its check raising nothing means solved, not failed
            if not error and out.is_file():
                error, note = notebook_findings(out, solved_ok=solved)
            if replayed:
                note = "; ".join(n for n in (replayed, note) if n)
            result = "failed" if error else "passed"
            if not_measured and (not error or ": NotYetRecorded: " in error):
                result, error = NOT_MEASURED, not_measured
            elif ": NotYetRecorded: " in error:
                result = NOT_MEASURED
            rows.append({"notebook": str(rel), "mode": "replay" if replayed else mode.name, "result": result,
                         "seconds": round(time.perf_counter() - t0, 1), "error": error, "note": note})
            if solved and result == "passed":  # the learner's lab: its check's verdict, not "passed"
                rows[-1]["lab"], rows[-1]["finding"] = lab_outcome(out)
            if mode.live:  # other compute processes on this GPU (a workshop's): its timings were noisier
                rows[-1]["shared_with"] = gpu.other_compute_processes()
            print(f"    {verdict_line(rows[-1])}", flush=True)
    finally:
        kernels.close()
    return rows


def verdict_line(row: dict) -> str:
    """What the console says of one notebook's row: 'failed in 2.1 s: cell 3 of 9 (...): ZeroDivisionError: ...'."""
    finding = row["error"] or row.get("finding", "")
    unchecked = " (with something not checked here: the summary says what)" if row["note"] else ""
    tail = f": {finding}" if finding else unchecked
    return f"{shown(row)} in {row['seconds']} s{tail}"


def jobs_for(mode_live: bool) -> int:
    """How many notebooks `python -m streamalloc run` runs at once: live one (a GPU's timings are never shared);
    in replay one per core, at most 8 (each kernel holds a few hundred MB)."""
    return 1 if mode_live else max(1, min(8, os.cpu_count() or 1))


_STOP = {"stopped": False, "running": False}  # a worker process's state (_stop_on_signal)
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _stop_on_signal(signum, frame):
    """A worker's SIGINT, SIGTERM and SIGHUP: the first one stops its notebook as SIGINT stops _run's (its kernel is
    interrupted, so that a build stops nvcc's process group and removes its temporary folder, then shut down, and its
    socket folder removed); later ones, or one while it waits for a notebook, only mean that it starts no other. The
    runner sends each worker SIGTERM when it is stopped; a terminal or a CI job may signal them all at once."""
    first, _STOP["stopped"] = not _STOP["stopped"], True
    if first and _STOP["running"]:
        raise KeyboardInterrupt(f"stopped by {signal.Signals(signum).name}")
    if not _STOP["running"] and _orphaned():  # no runner is left to hand it a notebook or to end it: it ends
        os._exit(128 + signum)


def _orphaned() -> bool:
    """Whether the runner that started this worker is gone (the worker was handed to another parent)."""
    return os.getppid() != _STOP.get("parent", os.getppid())


class _AfterTheStop(logging.Filter):
    """Once a worker is stopped, nbclient's cell task ends with the kernel it was running in ("Kernel died") and nobody
    is left to read it; asyncio would print "Task exception was never retrieved" with its traceback. Before a stop
    the message still shows."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (_STOP["stopped"] and record.getMessage().startswith("Task exception was never retrieved"))


def _worker_started(runner_pid: int) -> None:
    """A worker's set-up: signals stop its notebook (_stop_on_signal), and where the runner dies without stopping it
    (killed, or its own stop cut short), the kernel sends the worker SIGTERM (Linux's PR_SET_PDEATHSIG), which stops
    its notebook, and it ends instead of waiting for ever for a notebook nobody will send."""
    _STOP["parent"] = runner_pid  # the runner's pid, handed over: a worker that starts after it died sees so
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _stop_on_signal)
    with contextlib.suppress(OSError, AttributeError):  # not Linux: only the runner's own stop ends its workers
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if _orphaned():  # the runner died before the line above: nobody would send the signal
        os._exit(1)
    logging.getLogger("asyncio").addFilter(_AfterTheStop())


def _one(nb, out_dir, kernel, env, cell_timeout, mode) -> tuple[dict | None, str]:
    """One notebook, in a worker process of _run_at_once: its row and its verdict_line; (None, '')
    where a signal stopped it, or had stopped this worker before it began."""
    try:
        _STOP["running"] = not _STOP["stopped"]
        if not _STOP["running"]:
            return None, ""
        with contextlib.redirect_stdout(io.StringIO()):  # _run's own lines: the runner prints this one's when it ends
            row = _run([nb], out_dir, kernel, False, env, cell_timeout, mode)[0]
    except KeyboardInterrupt:  # _run has stopped its kernel
        if _orphaned():  # stopped because the runner died: nobody is left to take the answer
            os._exit(1)
        return None, ""
    finally:
        _STOP["running"] = False
    return row, verdict_line(row)


def _run_at_once(nbs, out_dir, kernel, env, cell_timeout, mode, jobs) -> list[dict]:
    """Replay only: `jobs` notebooks at a time, each in a worker process with its own kernel, as _run runs one;
    each is printed when it ends, the rows come back in the notebooks' order. An interrupt (SIGINT, SIGTERM, SIGHUP)
    is passed on to the workers, which stop their notebooks as _run does and start no other; it is raised again once
    they have."""
    import concurrent.futures as cf
    import multiprocessing

    rows: list[dict | None] = [None] * len(nbs)
    workers = min(jobs, len(nbs))
    pool = cf.ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                                  initializer=_worker_started, initargs=(os.getpid(),))
    try:
        futures = {pool.submit(_one, nb, out_dir, kernel, env, cell_timeout, mode): i for i, nb in enumerate(nbs)}
        print(f"{len(nbs)} notebooks, {workers} at a time (replay: nothing is timed)", flush=True)
        for n, f in enumerate(cf.as_completed(futures), 1):
            row, words = f.result()
            if row is None:  # a worker was stopped by a signal of its own: the run stops too
                raise KeyboardInterrupt("a notebook's worker was stopped")
            rows[futures[f]] = row
            words = "\n".join("    " + line for line in words.splitlines())  # every line of an error, indented
            print(f"[{n}/{len(nbs)}] {row['notebook']}\n{words}", flush=True)
    except BaseException:  # an interrupt, or a worker lost: the others stop their notebooks cleanly
        for process in list((pool._processes or {}).values()):  # the executor's own workers (no public list)
            with contextlib.suppress(OSError):
                os.kill(process.pid, signal.SIGTERM)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return rows


class Kernels:
    """A fresh kernel for each notebook, started one notebook ahead: the next notebook's kernel boots (about a
    second of Python start-up) while this notebook's first cell (its set-up) runs, and that cell does not end
    until the next kernel is up (`after_cell`), so no kernel boots while a measurement runs. Each kernel starts
    in its notebook's folder, with the environment the runner set (less MPLBACKEND), its sockets and connection file in a
    temporary folder of the runner's; after its notebook its clients are closed and it is shut down, and any
    left when the runner stops (an error, an interrupt) are shut down too."""

    def __init__(self, name: str, env: dict | None = None):
        self.name = name
        self.env = {k: v for k, v in (os.environ if env is None else env).items() if k != "MPLBACKEND"}
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
        # shell's MPLBACKEND=Agg (left out of self.env), which would keep every figure out of the executed notebook
        run_sync(km.start_kernel)(cwd=str(nb.parent), env=self.env,
                                  extra_arguments=["--HistoryManager.hist_file=:memory:"])
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

    def _stop(self, km, interrupt: bool = False) -> None:
        """Close its clients, shut it down; interrupted first (a stopped run), so that a build in progress stops
        its nvcc and removes its temporary folder, as the kernel does on SIGINT, before it shuts down."""
        from nbclient.util import run_sync  # the one nbclient itself uses (nbclient 0.10 has its own)

        if interrupt:
            try:
                run_sync(km.interrupt_kernel)()
                self._wait_idle(km, 10)
            except Exception:
                pass
        for kc in getattr(km, "clients", []):
            try:
                kc.stop_channels()
            except Exception:
                pass
        try:
            run_sync(km.shutdown_kernel)(now=False)
        except Exception:  # already gone (it crashed, or was interrupted)
            pass

    @staticmethod
    def _wait_idle(km, timeout: float) -> None:
        """Wait until the kernel answers a kernel_info request (it does once its interrupted cell has ended)."""
        from nbclient.util import run_sync

        kc = km.client()
        try:
            kc.start_channels()
            kc.kernel_info()
            run_sync(kc.get_shell_msg)(timeout=timeout)
        except Exception:  # no answer in time: the shutdown that follows kills it
            pass

    def done(self, interrupt: bool = False) -> None:
        """Stop the current notebook's kernel."""
        if self.current is not None:
            km, self.current = self.current, None
            self._stop(km, interrupt)

    def close(self, interrupt: bool = False) -> None:
        self.done(interrupt)
        for km in self.ahead.values():
            self._stop(km)
        self.ahead.clear()
        shutil.rmtree(self.sockets, ignore_errors=True)


def md_cell(value) -> str:
    """Text that stays inside one cell of a Markdown table: | escaped, line breaks as <br>."""
    text = str(value).replace("\\", "\\\\").replace("|", "\\|")
    return "<br>".join(line.strip() for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"))


def shown(row: dict) -> str:
    """A row's word, the same on the console and in the summary: an edited lab's (solved, in progress, not verified),
    else its result."""
    return row.get("lab") or row["result"]


def counts(rows: list[dict]) -> str:
    """'20 passed, 1 solved, 1 in progress, 0 failed, 1 not measured (notebooks/05b_two_gpus.ipynb: needs 2 GPUs ...)'."""
    passed = sum(r["result"] == "passed" for r in rows)
    unmeasured = [r for r in rows if r["result"] == NOT_MEASURED]
    labs = [shown(r) for r in rows if r["result"] == "passed" and r.get("lab")]
    line = ", ".join([f"{passed - len(labs)} passed"] + [f"{labs.count(w)} {w}" for w in (SOLVED, IN_PROGRESS,
                                                                                           UNVERIFIED) if w in labs])
    line += f", {len(rows) - passed - len(unmeasured)} failed"
    if unmeasured:
        line += f", {len(unmeasured)} {NOT_MEASURED} (" + "; ".join(
            f"{r['notebook']}: {r['error'] or 'needs more GPUs'}" for r in unmeasured) + ")"
    return line


def write_summary(rows: list[dict], where: Path) -> str:
    """Print the summary and write summary.json and summary.md, each whole or not at all."""
    from .course import write_atomically

    head = "| notebook | mode | result | seconds | error, or the lab's first finding |\n|---|---|---|---|---|\n"
    md = head + "".join("| " + " | ".join(md_cell(v) for v in (
        r["notebook"], r["mode"], shown(r), f"{r['seconds']} (earlier run)" if r.get("earlier") else r["seconds"],
        r["error"] or r.get("finding", ""))) + " |\n" for r in rows)
    md += f"\n{counts(rows)}\n"
    if any(r.get("earlier") for r in rows):
        md += ("\nA row marked (earlier run) is kept from a run before this one: its notebook has not changed since. "
               "Run it again to renew it.\n")
    shared = max((r.get("shared_with") or 0 for r in rows), default=0)
    if shared:
        md += (f"\nThis GPU was shared: up to {shared} other process{'es' if shared != 1 else ''} computed on it during "
               "the run. Timings are noisier; a timing that the sharing could have decided says 'not verified'.\n")
    notes = [f"- {r['notebook']}: {r['note']}" for r in rows if r.get("note")]
    if notes:
        md += "\nNot checked here (the run passed without it):\n" + "\n".join(notes) + "\n"
    print("\n" + md, flush=True)
    try:
        write_atomically(where / "summary.json", json.dumps(rows, indent=1) + "\n")
        write_atomically(where / "summary.md", md)
    except OSError as e:
        raise OutputNotWritable(f"the runner cannot write its summary to {where}: {e.strerror or e} (a read-only "
                                "folder, or a full disk?); the summary above is all there is") from None
    return md
