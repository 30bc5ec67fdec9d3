"""The course's errors: each one says in words what went wrong and what to do.

In IPython and Jupyter a CourseError shows as its message alone, without the frames of this package
(IPython asks an exception for `_render_traceback_`). The full traceback stays one call away: `%tb verbose`
right after the error (or `%xmode verbose` for every error), or `err.full_traceback()` on the exception
(`import sys; sys.last_value.full_traceback()` in IPython).
"""
from __future__ import annotations

import traceback

FULL_TRACEBACK_HINT = "(where it came from: run `%tb verbose`)"


class CourseError(Exception):
    """Something a learner can fix or must know about; the message says what and how."""

    def full_traceback(self) -> str:
        """The whole traceback, helper-package frames included, as text."""
        return "".join(traceback.format_exception(type(self), self, self.__traceback__))

    def _render_traceback_(self) -> list[str]:
        """IPython calls this to show the error. In verbose mode (`%tb verbose`) the full traceback comes back."""
        try:
            from IPython import get_ipython

            shell = get_ipython()
        except ImportError:  # pragma: no cover - only IPython calls this method
            shell = None
        itb = getattr(shell, "InteractiveTB", None)
        if itb is not None and str(getattr(itb, "mode", "")).lower() == "verbose":
            return itb.structured_traceback(type(self), self, self.__traceback__)
        red, reset = ("\x1b[0;31m", "\x1b[0m") if _colors(shell) else ("", "")
        return [f"{red}{type(self).__name__}{reset}: {self}", "", FULL_TRACEBACK_HINT]


def _colors(shell) -> bool:
    try:
        return str(shell.colors).lower() not in ("nocolor", "none")
    except AttributeError:
        return False


class NvccNotFound(CourseError):
    pass


class NoGPU(CourseError):
    """STREAMALLOC_MODE=live was asked for, and there is no GPU with memory pools here."""


class SanitizerNotFound(CourseError):
    """compute-sanitizer is not installed where the course looks; the message says how to get it."""


class CompileError(CourseError):
    def __init__(self, message: str, log: str, location: str | None):
        super().__init__(message)
        self.log = log
        self.location = location  # "file.cu:12", or None


class BuildFailed(CourseError):
    """A build that failed for a reason other than the program's code: nvcc crashed, the disk is full, or the build
    folder cannot be written. The message names the cause (never "does not compile")."""


class ProgramFailed(CourseError):
    def __init__(self, message: str, returncode: int, stdout: str, stderr: str, killed=()):
        super().__init__(message)
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr
        self.killed = list(killed)  # processes it left running, killed when it ended (streamalloc/launcher.py)


class ProgramTimedOut(CourseError):
    def __init__(self, message: str, stdout: str, stderr: str):
        super().__init__(message)
        self.stdout, self.stderr = stdout, stderr


class RecordingError(CourseError):
    """A replay found no recording, or one made from other code, or a damaged file: re-record on a GPU."""


class MissingRecording(RecordingError):
    pass


class StaleRecording(RecordingError):
    pass


class BrokenRecording(RecordingError):
    """A recording file that cannot be read: truncated, not JSON, or without runs. The message names the file."""


class NotYetRecorded(MissingRecording):
    """A program needs more GPUs than this machine has, and no machine with that many has recorded it yet."""


class BadSetting(CourseError, ValueError):
    """A STREAMALLOC_* environment variable holds a value the course cannot use: every bad one, in one message."""
