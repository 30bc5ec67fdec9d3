"""What a notebook calls: run a lesson's CUDA program or a Python measurement, live or replayed.

    lesson = sa.start("01_sync_vs_async")      # looks at the machine, decides live or replay
    %%writefile {lesson.build}/host_cost.cu    # the lesson's CUDA, in the notebook
    res = lesson.run("host_cost.cu", [1 << 20]) # builds, runs, parses; or replays the recording
    res.records                                  # the JSON lines the program printed

Live, programs run here (and the recorder, STREAMALLOC_RECORD=1, stores their output). In replay
the source is still written and compiled by nvcc where nvcc exists; the output comes from the
recording whose key (source and arguments) matches, and every label says it is a replay.
"""
from __future__ import annotations

import dataclasses
import inspect
import json
import os
import time
from pathlib import Path

from . import cuda, gpu, measure, replay
from .errors import MissingRecording, RecordingError

REPO = Path(__file__).resolve().parent.parent


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

    @property
    def records(self) -> measure.Records:
        return measure.parse(self.stdout)


class Lesson:
    def __init__(self, name: str, quiet: bool = False):
        self.name = name
        self.here = gpu.probe()
        self.mode = gpu.decide(self.here)
        self.build = REPO / "build" / "cuda" / Path.cwd().name / name
        self.build.mkdir(parents=True, exist_ok=True)
        self.reference_gpu = replay.reference()
        if self.mode.live:
            self.machine = self.here
        elif self.reference_gpu:
            self.machine = replay.machine(self.reference_gpu, name)
        else:
            self.machine = gpu.Machine(problem="no recording")
        if not quiet:
            print(self.banner())

    # -- where measurements come from -------------------------------------------------------
    @property
    def live(self) -> bool:
        return self.mode.live

    @property
    def label(self) -> str:
        """Names the GPU, and says 'replayed' with the recording's date, driver and CUDA version."""
        return label(self.machine, self.live)

    def banner(self) -> str:
        lines = [f"Lesson {self.name}: {self.mode.name.upper()} mode, because {self.mode.reason}."]
        lines.append(f"  this machine: {self.here.describe()}; nvcc {self.here.nvcc or 'not found'}; "
                     f"CuPy {self.here.cupy or 'not installed'}")
        if not self.live:
            if self.reference_gpu:
                lines.append(f"  measurements are replayed from: {self.label}")
            else:
                lines.append("  there is no recording to replay: record one on a GPU with `make record`")
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
        return cuda.build(self.source(file), flags=list(flags), arch=arch)

    def key_source(self, path: Path, flags=()) -> str:
        """What a recording of this program is keyed by (with its arguments): source, course header, flags."""
        return path.read_text() + cuda.headers_text() + "\n// flags: " + " ".join(flags)

    def run(self, file, args=(), timeout: float = 120, flags=(), name: str | None = None) -> Result:
        """Build and run a program (live) or replay its recording; raise if either fails."""
        path = self.source(file)
        args = [str(a) for a in args]
        name = name or path.stem
        exe = self.compile(path, flags)
        key_source = self.key_source(path, flags)
        if not self.live:
            return self._replayed(name, key_source, args)
        done = cuda.run(exe, args, timeout=timeout)
        result = Result(name, args, done.stdout, done.stderr, done.seconds, False, self.label)
        measure.parse(done.stdout)  # a malformed JSON line is an error before it is recorded
        if replay.recording():
            replay.save(self.machine, self.name, name, key_source, args,
                        {"stdout": done.stdout, "stderr": done.stderr, "seconds": done.seconds})
        return result

    def _replayed(self, name, key_source, args) -> Result:
        if not self.reference_gpu:
            raise MissingRecording(f"{self.mode.reason}, and recordings/ holds no recording to replay; "
                                   "record one on a GPU with `make record`")
        r = replay.load(self.reference_gpu, self.name, name, key_source, args)
        data = json.loads(r["data"]) if "data" in r else None
        return Result(name, args, r.get("stdout", ""), r.get("stderr", ""), r.get("seconds", 0.0), True,
                      label(replay.machine(self.reference_gpu, self.name), False), data)

    def reference(self, file, args=(), flags=(), name: str | None = None) -> Result | None:
        """The reference recording of the same program and arguments, to plot beside live numbers."""
        if not self.reference_gpu:
            return None
        path = self.source(file)
        try:
            return self._replayed(name or path.stem, self.key_source(path, flags), [str(a) for a in args])
        except RecordingError:
            return None

    # -- measurements made from Python (CuPy) -----------------------------------------------
    def measure(self, name: str, fn, params: dict | None = None, source: str = "") -> Result:
        """fn() measures on the GPU and returns JSON-able data; in replay the recorded data comes back.

        The key is the source of fn (and `source`, e.g. a kernel's text) with the params.
        """
        params = params or {}
        try:
            fn_source = inspect.getsource(fn)
        except (OSError, TypeError):
            fn_source = getattr(fn, "__qualname__", "")
        key_source = source + "\n" + fn_source
        args = [measure.dumps(params)]
        if not self.live:
            return self._replayed(name, key_source, args)
        t0 = time.perf_counter()
        data = fn(**params)
        seconds = time.perf_counter() - t0
        text = json.dumps(data)
        if replay.recording():
            replay.save(self.machine, self.name, name, key_source, args, {"data": text, "seconds": seconds})
        return Result(name, args, "", "", seconds, False, self.label, json.loads(text))

    # -- the figures an instructor's preflight compares with the reference ------------------
    def key_figure(self, name: str, value, unit: str = "", band=(0.5, 2.0)):
        """Record one of the lesson's key figures and return the value unchanged.

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
        folder = Path(os.environ.get("STREAMALLOC_KEY_FIGURES") or REPO / "build" / "key_figures") / self.mode.name
        folder.mkdir(parents=True, exist_ok=True)
        record = {"lesson": self.name, "mode": self.mode.name, "label": self.label, "figures": self._key_figures}
        (folder / f"{self.name}.json").write_text(json.dumps(record, indent=1) + "\n")
        return value


def label(m: gpu.Machine, live: bool) -> str:
    if live:
        return f"{m.gpu}, live"
    return f"{m.gpu}, replayed from a recording of {m.date} (driver {m.driver}, CUDA {m.driver_cuda}, nvcc {m.nvcc})"


def start(name: str, quiet: bool = False) -> Lesson:
    """Begin a lesson: probe the machine, decide the mode, make the build folder, print where numbers come from."""
    return Lesson(name, quiet=quiet)
