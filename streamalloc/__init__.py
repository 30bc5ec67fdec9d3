"""streamalloc: the helper package of the stream-ordered allocator course.

Modules, each named by its job: gpu (finding the GPU, live or replay), cuda (building and running
CUDA), measure (reading and summarizing measurements; med, mib, nbytes), compare (the verdict rule: which of
settings timed in turns is faster, by a paired test and a practical margin), replay (recordings), lesson
(what a notebook calls), plots, widgets, sanitizer (running compute-sanitizer and reading its report),
checks (the machinery of a lab's check), labchecks (the labs' checks), runner (runs every
notebook), cli (the command line), together (a notebook's programs started at once, their GPU work one at a time).

Importing the package is cheap: the modules that need matplotlib or IPython (plots, widgets, checks,
labchecks, sanitizer) load on first use (`sa.plots.figure(...)` imports plots then), so
`python -m streamalloc info` imports neither.
"""
import importlib

from . import cuda, gpu, measure, replay
from .errors import (BrokenRecording, CompileError, CourseError, MissingRecording, NoGPU, NvccNotFound, ProgramFailed, ProgramTimedOut,
                     RecordingError, SanitizerNotFound, StaleRecording)
from .lesson import Lesson, Result, start

_LAZY = ("checks", "compare", "labchecks", "plots", "sanitizer", "widgets", "runner", "cli", "together")

__all__ = ["start", "Lesson", "Result", "CourseError", "CompileError", "NvccNotFound", "ProgramFailed",
           "ProgramTimedOut", "RecordingError", "MissingRecording", "StaleRecording", "BrokenRecording", "SanitizerNotFound",
           "NoGPU",
           "cuda", "gpu", "measure", "replay", *_LAZY]


def __getattr__(name):
    if name in _LAZY:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'streamalloc' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
