"""streamalloc: the helper package of the stream-ordered allocator course.

Modules, each named by its job: gpu (finding the GPU, live or replay), cuda (building and running
CUDA), measure (reading and summarizing measurements), replay (recordings), lesson (what a notebook
calls), plots, widgets, sanitizer (running compute-sanitizer and reading its report), checks (the
machinery of a lab's check), labchecks (the four labs' checks), runner (runs every notebook), cli
(the command line).
"""
from . import checks, cuda, gpu, labchecks, measure, plots, replay, sanitizer, widgets
from .errors import (CompileError, CourseError, MissingRecording, NvccNotFound, ProgramFailed, ProgramTimedOut,
                     RecordingError, SanitizerNotFound, StaleRecording)
from .lesson import Lesson, Result, start

__all__ = ["start", "Lesson", "Result", "CourseError", "CompileError", "NvccNotFound", "ProgramFailed",
           "ProgramTimedOut", "RecordingError", "MissingRecording", "StaleRecording", "SanitizerNotFound"]
