"""The course's errors: each one says in words what went wrong and what to do."""


class CourseError(Exception):
    """Something a learner can fix or must know about; the message says what and how."""


class NvccNotFound(CourseError):
    pass


class SanitizerNotFound(CourseError):
    """compute-sanitizer is not installed where the course looks; the message says how to get it."""


class CompileError(CourseError):
    def __init__(self, message: str, log: str, location: str | None):
        super().__init__(message)
        self.log = log
        self.location = location  # "file.cu:12", or None


class ProgramFailed(CourseError):
    def __init__(self, message: str, returncode: int, stdout: str, stderr: str):
        super().__init__(message)
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


class ProgramTimedOut(CourseError):
    def __init__(self, message: str, stdout: str, stderr: str):
        super().__init__(message)
        self.stdout, self.stderr = stdout, stderr


class RecordingError(CourseError):
    """A replay found no recording, or one made from other code: re-record on a GPU."""


class MissingRecording(RecordingError):
    pass


class StaleRecording(RecordingError):
    pass


class NotYetRecorded(MissingRecording):
    """A program needs more GPUs than this machine has, and no machine with that many has recorded it yet."""
