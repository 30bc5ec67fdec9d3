"""What a notebook calls: run a lesson's CUDA program or a Python measurement, live or replayed.

    lesson = sa.start("01_sync_vs_async")      # looks at the machine, decides live or replay
    %%writefile {lesson.build}/host_cost.cu    # the lesson's CUDA, in the notebook
    res = lesson.run("host_cost.cu", [1 << 20]) # builds, runs, parses; or replays the recording
    res.records                                  # the JSON lines the program printed

    %%writefile {lesson.build}/torch_cost.py   # a Python program, run with this kernel's interpreter
    res = lesson.run("torch_cost.py", [64], requires=("torch",))

Live, programs run here (and the recorder, STREAMALLOC_RECORD=1, stores their output). In replay
the source is still written and compiled by nvcc where nvcc exists; the output comes from the
recording whose key (what the program means, and its arguments: see replay.py) matches, and every
label says it is a replay.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib.util
import inspect
import io
import json
import os
import re
import sys
import time
from pathlib import Path

from . import calls, cuda, gpu, measure, replay, stacks, verdict
from .course import build_folder, build_root, notebook_file, programs_folder, written_programs
from .errors import (BuildFailed, CompileError, CourseError, MissingRecording, NoGPU, NotYetRecorded, NvccNotFound,
                     RecordingError)
from .settings import check_settings


@dataclasses.dataclass
class Result:
    """One run's output and where it came from."""

    name: str
    args: list
    stdout: str
    stderr: str
    seconds: float
    replayed: bool
    label: str  # "NVIDIA H100 80GB HBM3, live" or "... replayed from a recording of <date> ..."
    data: object = None  # what a Python measurement returned
    note: str = ""  # why a live lesson shows a replay here (a package it needs is missing), or ""
    call_record: str | None = None  # run(trace=True): the recorder's lines (streamalloc.calls), never the stdout
    killed: list = dataclasses.field(default_factory=list)  # processes it left running, killed when it ended (live)
    call_key: str | None = None  # live: the run's key, which every recorded line's tag must match (a replay has none)

    @property
    def calls(self):
        """What the program did with CUDA (a calls.Calls), for a run with trace=True; else None."""
        return None if self.call_record is None else calls.read(self.call_record, self.call_key)

    @property
    def records(self) -> measure.Records:
        return measure.parse(self.stdout)


class Lesson:
    def __init__(self, name: str, quiet: bool = False):
        self.name = name
        check_settings()  # a bad STREAMALLOC_* value: one message naming it
        self.here = gpu.probe()
        try:
            self.mode = gpu.decide(self.here)
        except RuntimeError as e:  # STREAMALLOC_MODE=live without a usable GPU
            raise NoGPU(str(e)) from None
        if not self.here.gpu and not self.mode.live and os.environ.get("STREAMALLOC_MODE", "").strip().lower() != "replay" \
                and not cuda.driver_present():
            self.mode = gpu.Mode(False, "no GPU found (this machine has no NVIDIA driver)")
        self.build = build_folder(name)  # this notebook's, this process's: its %%writefile cells write here
        self.bin = programs_folder()  # built programs, keyed by their content, flags and nvcc: shared by every notebook
        try:
            self.build.mkdir(parents=True, exist_ok=True)
        except OSError as e:  # a read-only or full disk: say which folder, not a traceback
            raise BuildFailed(f"the build folder {self.build} cannot be made: {e.strerror or e} (a read-only folder, or "
                              "a full disk); set STREAMALLOC_BUILD to a folder you can write") from None
        short_writefile(self.build)
        self.reference_gpu = replay.reference()
        self._programs: dict[str, str] = {}  # key source -> program_sha, for what key_source() made
        if self.mode.live:
            self.machine = self.here
        elif self.reference_gpu:
            self.machine = replay.machine(self.reference_gpu, name)
        else:
            self.machine = gpu.Machine(problem="no recording")
        if not quiet:
            print(self.banner())
        if "ipykernel" in sys.modules:  # in a notebook: live, and in replay (which compiles too, where nvcc is)
            self.build_ahead()

    # -- where measurements come from -------------------------------------------------------
    @property
    def live(self) -> bool:
        return self.mode.live

    @property
    def label(self) -> str:
        """Names the GPU, and says 'replayed' with the recording's date, driver and CUDA version."""
        return label(self.machine, self.live)

    def shared_with(self) -> int | None:
        """Live: how many other processes compute on this GPU now (None where it cannot tell); in replay None: the
        recorded timings were not taken here."""
        return gpu.other_compute_processes() if self.live else None

    def banner(self) -> str:
        lines = [f"Lesson {self.name}: {self.mode.name.upper()} mode, because {self.mode.reason}."]
        here = self.here.describe() if self.here.gpu or cuda.driver_present() else "no GPU found"
        lines.append(f"  this machine: {here}; nvcc {self.here.nvcc or 'not found'}; "
                     f"CuPy {self.here.cupy or 'not installed'}")
        shared = self.shared_with()
        if shared:  # a workshop's GPU, or a job beside the notebook: the figures will show it
            lines.append(f"  this GPU is shared with {shared} other process{'es' if shared != 1 else ''} computing on "
                         "it: timings are noisier")
        if not self.live:
            elsewhere = self._sets_with(2) if self.reference_gpu and not (
                replay.root() / self.reference_gpu / self.name).is_dir() else []
            if elsewhere:  # a lesson whose programs need more GPUs than the reference set's machine had (05b)
                lines.append("  measurements are replayed from: "
                             f"{label(replay.machine(elsewhere[0], self.name), False)}, a machine with more GPUs")
            elif self.reference_gpu:
                lines.append(f"  measurements are replayed from: {self.label}")
            else:
                lines.append("  this copy of the course has no recordings to replay (recordings/ is missing or empty): "
                             "get a complete copy (README.md, \"Opening it\"), or run it on a GPU")
        return "\n".join(lines)

    # -- CUDA programs ----------------------------------------------------------------------
    def source(self, file: str | os.PathLike) -> Path:
        path = Path(file)
        return path if path.is_absolute() else self.build / path

    def compile(self, file, flags=()) -> Path | None:
        """Build the program for this GPU (live) or the recorded one (replay); None in replay without nvcc."""
        arch = cuda.arch_flags(self.machine.compute_capability, self.live)
        if not self.live and gpu.nvcc_path() is None:
            return None
        return cuda.build(self.source(file), flags=list(flags), arch=arch, out_dir=self.bin)

    def build_ahead(self, notebook: Path | None = None) -> dict:
        """Build every CUDA program the notebook's %%writefile cells write, all at once (one per CPU core), so
        each run cell finds its program built. The build cache is keyed on the program's text: a cell edited
        since the notebook was saved, or a lab's unfinished program, is simply built (or fails) when it runs."""
        notebook = notebook or notebook_file(self.name)
        sources = written_programs(notebook) if notebook else []
        if not sources or gpu.nvcc_path() is None:
            return {}
        paths = []
        for i, (file, text) in enumerate(sources):  # the saved texts, built into the shared programs folder
            folder = self.build / ".ahead" / str(i)  # a folder each: a notebook may write one file twice
            folder.mkdir(parents=True, exist_ok=True)
            (folder / file).write_text(text)
            paths.append(folder / file)
        arch = cuda.arch_flags(self.machine.compute_capability, self.live)
        t0 = time.perf_counter()
        jobs = min(len(paths), os.cpu_count() or 1)
        line = display_line(f"Building this notebook's CUDA programs ahead ({len(paths)}, {jobs} at a time) ...")
        results = cuda.build_all(paths, arch=arch, out_dir=self.bin, jobs=jobs,
                                 done=lambda n, of: line(f"Building this notebook's CUDA programs ahead: {n} of {of} built ..."))
        failed = sorted(p.name for p, r in results.items() if isinstance(r, Exception))
        line(f"Built this notebook's CUDA programs ahead ({len(paths) - len(failed)}) in {time.perf_counter() - t0:.1f} s"
             + (f"; not built as saved: {', '.join(failed)} (its run cell builds it and says why)" if failed else ""))
        return results

    def key_source(self, path: Path, flags=()) -> str:
        """What a recording of this program is keyed by (with its arguments): what it means, its headers, flags."""
        text = replay.program_key(path, flags)
        self._programs[text] = replay.source_hash(replay.program_meaning(path))
        return text

    def run(self, file, args=(), timeout: float = 120, flags=(), name: str | None = None,
            requires: tuple | list = (), gpus: int = 1, trace: bool = False) -> Result:
        """Build and run a program (live) or replay its recording; raise if either fails.

        A `.cu` program is built with nvcc and run; a `.py` program runs with this kernel's Python
        (`sys.executable x.py args`), in its own process group with the timeout, exactly like a CUDA
        program. `requires` names modules a Python program imports (e.g. ("torch",)): live, when one is
        missing, the reference recording is replayed instead and the Result's note says what to install.

        `gpus`: how many GPUs the program needs. Live with that many here, it runs. Otherwise (replay, or
        live with fewer) it replays a recording made on a machine with at least that many, from whichever
        set of recordings holds one, labelled "needs N GPUs; replayed from ..."; with none, NotYetRecorded.

        `trace`: record what the program does with the CUDA runtime (streamalloc.calls): it is built against the
        shared runtime with the course's call recorder preloaded, which writes to a file of its own; the Result's
        `calls` reads it (and a recording keeps it).
        """
        path = self.source(file)
        if trace:
            flags = [*flags, *calls.FLAGS]
        args = [str(a) for a in args]
        name = name or path.stem
        python = path.suffix == ".py"
        if python and flags:
            raise ValueError(f"{path.name} is a Python program: it takes no nvcc flags")
        if not path.is_file():
            raise FileNotFoundError(f"{path} does not exist: run the %%writefile cell that writes it first")
        exe = check_python(path) if python else self.compile(path, flags)
        key_source = self.key_source(path, flags)
        keyed = replay.input_args(args, self.build)  # an input file's argument is keyed by its content
        if gpus > 1 and not (self.live and self.gpus_here >= gpus):
            return self._replayed_with(gpus, name, key_source, keyed)
        if not self.live:
            try:
                return self._replayed(name, key_source, keyed)
            except MissingRecording as e:
                if exe is not None or python:
                    raise
                raise NvccNotFound(f"{path.name} could not be compiled: {cuda.nvcc_missing()} In replay the output of "
                                   f"a program comes from its recording, and {path.name} has none ({e}), so only "
                                   "nvcc could tell whether it compiles.") from None
        missing = missing_modules(requires) if python else []
        if missing:
            what = f"{path.name} needs {', '.join(missing)}, which this Python cannot import"
            pkgs = " ".join(pip_name(m, stacks.of_machine(self.here)) for m in missing)
            note = (f"{what}: showing the reference recording instead. Install it with `{sys.executable} -m pip "
                    f"install {pkgs}` (in a notebook: `%pip install {pkgs}`), then restart the kernel.")
            try:
                res = self._replayed(name, key_source, keyed)
            except RecordingError as e:
                raise type(e)(f"{what}, and the reference holds no recording of this run to show instead: {e}") from None
            res.note = note
            print(note)
            return res
        argv0, argv = (sys.executable, [str(path), *args]) if python else (exe, args)
        env = channel = None
        if trace:  # the record's file and key reach the recorder, never the program (calls.Channel)
            channel = calls.Channel(calls.recorder(self.bin), cuda.runtime_dir())
            env = channel.env
        try:
            done = cuda.run(argv0, argv, timeout=timeout, name=path.name if python else None, env=env)
            call_record = channel.text() if channel else None
        except CourseError as e:  # it crashed or hung: what it did up to then is still a record
            if channel:
                e.call_record, e.call_key = channel.text(), channel.key
            raise
        finally:
            if channel:
                channel.close()
        result = Result(name, args, done.stdout, done.stderr, done.seconds, False, self.label,
                        call_record=call_record, call_key=channel.key if channel else None,
                        killed=done.killed)
        if done.killed:  # a daemon, or a child it never waited for: worth knowing, not an error
            print(f"{path.name}: {cuda.left_running(done.killed)}")
        measure.parse(done.stdout)  # a malformed JSON line is an error before it is recorded
        if replay.recording():
            run = {"stdout": done.stdout, "stderr": done.stderr, "seconds": done.seconds, "gpus": self.gpus_here}
            if trace:
                run["calls"] = call_record
            replay.save(self.machine, self.name, name, key_source, keyed, run,
                        program_sha=self._programs.get(key_source))
        return result

    def _replayed(self, name, key_source, args) -> Result:
        if not self.reference_gpu:
            raise MissingRecording(f"{self.mode.reason}, and recordings/ holds no recording to replay; "
                                   "record one on a GPU with `make record`")
        r = replay.load(self.reference_gpu, self.name, name, key_source, args)
        data = replay.run_data(r, replay.path_of(self.reference_gpu, self.name, name)) if "data" in r else None
        return Result(name, args, r.get("stdout", ""), r.get("stderr", ""), r.get("seconds", 0.0), True,
                      label(replay.machine(self.reference_gpu, self.name), False), data, call_record=r.get("calls"))

    # -- programs that need more than one GPU -------------------------------------------------
    @functools.cached_property
    def gpus_here(self) -> int:
        """How many CUDA GPUs this machine has (0 without a usable one)."""
        if not self.here.gpu:
            return 0
        try:
            import cupy  # probe() found the GPU through CuPy

            return int(cupy.cuda.runtime.getDeviceCount())
        except Exception:  # the GPU was found, so at least that one
            return 1

    def _sets_with(self, gpus: int, name: str | None = None) -> list[str]:
        """Sets of recordings holding a run of this lesson (of program `name`, or of any) made with at least
        `gpus` GPUs, the reference set first."""
        found = []
        for s in sorted(replay.available(), key=lambda s: s != self.reference_gpu):
            folder = replay.root() / s / self.name
            files = [folder / f"{name}.json"] if name else sorted(folder.glob("*.json"))
            for f in files:
                if f.name != "machine.json" and f.is_file() and any(
                        r.get("gpus", 1) >= gpus for r in replay.read_runs(f).values()):
                    found.append(s)
                    break
        return found

    def machine_with(self, gpus: int) -> gpu.Machine | None:
        """The machine whose numbers a program needing `gpus` GPUs shows: this one, live with that many; else the
        recorded machine of a set that ran this lesson with that many; None when this lesson has not yet run on
        `gpus` GPUs anywhere."""
        if self.live and self.gpus_here >= gpus:
            return self.here
        sets = self._sets_with(gpus)
        # a note to the runner, shown as data (streamalloc.verdict): its row says "not measured: needs N GPUs", or
        # that it was replayed, not run live
        if not sets:
            why = f"needs {gpus} GPUs: this lesson has not yet run on {gpus} GPUs, here or in a recording"
            verdict.show(verdict.Verdict(verdict.NOT_MEASURED, why, f"Not measured here: {why}."))
        elif self.live:  # live, but too few GPUs
            why = (f"needs {gpus} GPUs, this machine has {self.gpus_here}: the numbers are the recording's "
                   f"({label(replay.machine(sets[0], self.name), False)})")
            verdict.show(verdict.Verdict(verdict.REPLAYED, why, f"{verdict.REPLAYED_HERE.capitalize()}{why}."))
        return replay.machine(sets[0], self.name) if sets else None

    def _replayed_with(self, gpus: int, name, key_source, args) -> Result:
        sets = self._sets_with(gpus, name)
        if not sets:
            here = f"this machine has {self.gpus_here}" if self.live else f"this notebook replays ({self.mode.reason})"
            raise NotYetRecorded(
                f"{name} needs {gpus} GPUs; {here}, and {replay.root()} holds no run of {self.name}/{name} made on a "
                f"machine with {gpus} or more GPUs: this lesson has not yet run on {gpus} GPUs. Run it live on a "
                f"machine with {gpus} GPUs (`make record` there records it).")
        r = replay.load(sets[0], self.name, name, key_source, args)
        if r.get("gpus", 1) < gpus:
            raise NotYetRecorded(f"the recording of {self.name}/{name} with these arguments in {sets[0]} was made on "
                                 f"{r.get('gpus', 1)} GPU(s), and {name} needs {gpus}: re-record it on {gpus} GPUs")
        gpu_name, _, rest = label(replay.machine(sets[0], self.name), False).partition(", ")
        return Result(name, args, r.get("stdout", ""), r.get("stderr", ""), r.get("seconds", 0.0), True,
                      f"{r.get('gpus', '?')}x {gpu_name}, needs {gpus} GPUs; {rest}")

    def reference(self, file, args=(), flags=(), name: str | None = None) -> Result | None:
        """The reference recording of the same program and arguments, to plot beside live numbers."""
        if not self.reference_gpu:
            return None
        path = self.source(file)
        try:
            return self._replayed(name or path.stem, self.key_source(path, flags), replay.input_args(args, self.build))
        except RecordingError:
            return None

    # -- measurements made from Python (CuPy) -----------------------------------------------
    def measure(self, name: str, fn, params: dict | None = None, source: str = "") -> Result:
        """fn() measures on the GPU and returns JSON-able data; in replay the recorded data comes back.

        The key is what fn means (its syntax tree: comments and docstrings do not count), `source` (e.g. a
        kernel's text, or key_source() of a program) without its comments, and the params.
        """
        params = params or {}
        try:
            fn_source = replay.python_meaning(inspect.getsource(fn))
        except (OSError, TypeError):
            fn_source = getattr(fn, "__qualname__", "")
        key_source = replay.cpp_meaning(source) + "\n" + fn_source
        args = [measure.dumps(params)]
        if not self.live:
            return self._replayed(name, key_source, args)
        t0 = time.perf_counter()
        data = fn(**params)
        seconds = time.perf_counter() - t0
        text = json.dumps(data)
        if replay.recording():
            replay.save(self.machine, self.name, name, key_source, args, {"data": text, "seconds": seconds},
                        program_sha=self._programs.get(source))
        return Result(name, args, "", "", seconds, False, self.label, json.loads(text))

    # -- the figures an instructor's preflight compares with the reference ------------------
    def key_figure(self, name: str, value, unit: str = "", band=(0.5, 2.0)) -> None:
        """Record one of the lesson's key figures (a statement: it shows nothing in the notebook).

        `make preflight` runs the course live, then in replay, and sets each figure beside the reference's
        figure of the same name: the ratio live / reference should lie in band (lo, hi). The figures go to
        build/key_figures/<live|replay>/<lesson>.json ($STREAMALLOC_KEY_FIGURES replaces build/key_figures);
        a new sa.start(...) of the lesson starts its file afresh.
        """
        import math
        import numbers

        lo, hi = (float(b) for b in band)
        if not 0 < lo <= hi:
            raise ValueError(f"key figure {name!r}: the band {band!r} must be (lo, hi) with 0 < lo <= hi")
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
            raise ValueError(f"key figure {name!r} must be a finite number, not {value!r}")
        if not hasattr(self, "_key_figures"):
            self._key_figures = {}  # this lesson's figures so far: its file is written whole each time
        self._key_figures[name] = {"value": float(value), "unit": unit, "band": [lo, hi]}
        folder = Path(os.environ.get("STREAMALLOC_KEY_FIGURES") or build_root() / "key_figures") / self.mode.name
        folder.mkdir(parents=True, exist_ok=True)
        record = {"lesson": self.name, "mode": self.mode.name, "label": self.label, "figures": self._key_figures}
        (folder / f"{self.name}.json").write_text(json.dumps(record, indent=1) + "\n")


def check_python(path: Path) -> None:
    """A Python program that does not parse is a CompileError (file:line), live and in replay, like nvcc's."""
    try:
        compile(path.read_text(), str(path), "exec")
    except SyntaxError as e:
        where = f"{path.name}:{e.lineno}"
        raise CompileError(f"{path.name} is not valid Python: {where}: {e.msg}\n{(e.text or '').rstrip()}",
                           str(e), where) from None


def pip_name(module: str, stack: stacks.Stack = stacks.COLAB) -> str:
    """The pip package that provides a module for `stack` ("cupy" is cupy-cuda12x on Colab's)."""
    names, parts = stacks.pip_names(stack), module.split(".")
    prefixes = (".".join(parts[:n]) for n in range(len(parts), 0, -1))  # cuda.core.experimental: cuda.core's
    return next((names[p] for p in prefixes if p in names), parts[0])


def missing_modules(modules) -> list[str]:
    """The modules of `modules` that this Python cannot import (found without importing them)."""
    missing = []
    for mod in modules:
        try:
            found = importlib.util.find_spec(mod) is not None
        except (ImportError, ValueError):  # a parent package is missing
            found = False
        if not found:
            missing.append(mod)
    return missing


def display_line(text: str):
    """Show one line of progress and return a function that replaces it (in a notebook, in place)."""
    try:
        from IPython import get_ipython
        from IPython.display import display
        if get_ipython() is not None:
            handle = display({"text/plain": text}, raw=True, display_id=True)
            return lambda new: handle.update({"text/plain": new}, raw=True)
    except ImportError:
        pass
    print(text, flush=True)
    return lambda new: print(new, flush=True)


def label(m: gpu.Machine, live: bool) -> str:
    if live:
        return f"{m.gpu}, live"
    cupy = getattr(m, "cupy_package", None) or ("CuPy" if m.cupy else None)
    stack = f", {cupy} {m.cupy} on CUDA {m.runtime}" if cupy and m.cupy else ""
    stack += f", programs built for {m.build_arch}" if getattr(m, "build_arch", None) else ""
    return (f"{m.gpu}, replayed from a recording of {m.date} (driver {m.driver}, CUDA {m.driver_cuda}, "
            f"nvcc {m.nvcc}{stack}){replay.same_machine_note(m)}")


_BUILDS: set[Path] = set()  # the lessons' build folders, which %%writefile's message names as lesson.build
WRITTEN = re.compile(r"^(Writing|Overwriting|Appending to) (.+)$", re.M)


def short_writefile(build: Path) -> None:
    """`%%writefile {lesson.build}/x.cu` says "Writing x.cu (in lesson.build)", not the build folder's whole path
    (build/cuda/<lesson>-<key>/run-<pid>-<token>/x.cu: nothing a reader needs; `print(lesson.build)` shows it).
    IPython's own magic writes the file, as it always does; only its message is shorter, and only for a file in a
    lesson's build folder. Outside IPython, nothing to do."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None:
        return
    _BUILDS.add(Path(build).resolve())
    original = shell.find_cell_magic("writefile")
    if original is None or getattr(original, "short_paths", False):
        return

    def shorter(match):
        path = Path(match[2].strip("'\""))
        return f"{match[1]} {path.name} (in lesson.build)" if path.parent.resolve() in _BUILDS else match[0]

    def writefile(line, cell):
        said = io.StringIO()
        try:
            with contextlib.redirect_stdout(said):
                return original(line, cell)
        finally:
            print(WRITTEN.sub(shorter, said.getvalue()), end="", flush=True)

    writefile.short_paths = True
    writefile.__doc__ = original.__doc__  # `%%writefile?` reads as IPython's
    shell.register_magic_function(writefile, magic_kind="cell", magic_name="writefile")


def start(name: str, quiet: bool = False) -> Lesson:
    """Begin a lesson: probe the machine, decide the mode, make the build folder, print where numbers come from."""
    return Lesson(name, quiet=quiet)
