"""Running compute-sanitizer and reading its report.

    where = sa.sanitizer.find()                            # its path, or None (sa.sanitizer.INSTALL says how to get it)
    res = sa.sanitizer.measure(lesson, "race.cu", args)    # live: runs it; replay: the recorded report
    report = sa.sanitizer.parse(res.data)
    report.errors, report.kind, report.location, report.function, report.located, report.shortened()

The sanitizer runs a lesson's built program in a subprocess with a timeout (streamalloc.cuda.run). It writes its
report to a file in a temporary folder of the course's (--log-file), and the report is read from there alone: what
the program prints (its output, kept apart) can never pass for the report, a forged "ERROR SUMMARY: 0 errors" line
included; the file is in a fresh private folder the program is not told of. A non-zero exit status (its
--error-exitcode, or the program failing under it) is an answer, not an error: the report is kept, and found_errors()
counts that exit status as an error too. A sanitizer that did not end by itself (killed by a signal, the program
under it still running), whose report lacks its summary line or whose exit status is not one of its own, made no
report of its own: Report.not_its_own says why, and a check says "not verified". The report, the program's
output and the exit status are recorded like any measurement, so replay shows the report made on a GPU, and the
parsing here reads it again. A recording made before the report had a file of its own (no "report" key) holds the
report within the output, and is read from there.
"""
from __future__ import annotations

import dataclasses
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import cuda, gpu, stacks
from .errors import ProgramFailed, SanitizerNotFound
from .measure import Records
from .measure import parse as parse_records

# memcheck with the lifetime tracking of stream-ordered allocations: an access before the allocation or
# after the free, in stream order, is an error whatever the timing.
STREAM_ORDER_RACES = ("--tool", "memcheck", "--track-stream-ordered-races", "all")

INSTALL = (
    "compute-sanitizer was not found: looked on the PATH, in $CUDA_HOME/bin, in /usr/local/cuda/bin, next to "
    "nvcc and in pip's nvidia packages. It comes with the CUDA Toolkit, in its bin folder "
    "(https://developer.nvidia.com/cuda-downloads); or `conda install -c conda-forge cuda-sanitizer-api`; or "
    + " or ".join(f"`pip install {s.sanitizer}` (CUDA {s.cuda})" for s in reversed(stacks.STACKS.values()))
    + ", then put its compute-sanitizer on the PATH"
)
LINE = "========="  # memcheck starts every line of its report with this
KEEP = 60_000  # characters of output kept in a recording: the head (the first errors) and the tail (the summary)


def _candidates():
    yield shutil.which("compute-sanitizer")
    if os.environ.get("CUDA_HOME"):
        yield os.path.join(os.environ["CUDA_HOME"], "bin", "compute-sanitizer")
    yield "/usr/local/cuda/bin/compute-sanitizer"
    nvcc = gpu.nvcc_path()
    if nvcc:
        yield str(Path(nvcc).resolve().parent / "compute-sanitizer")
    for site in map(Path, sys.path):
        if (site / "nvidia").is_dir():
            yield from map(str, sorted((site / "nvidia").glob("**/compute-sanitizer")))


def find() -> str | None:
    """compute-sanitizer on the PATH, in $CUDA_HOME/bin, in /usr/local/cuda/bin, next to nvcc or from pip; or None."""
    return next((c for c in _candidates() if c and os.path.isfile(c) and os.access(c, os.X_OK)), None)


def require() -> str:
    """The sanitizer's path, or SanitizerNotFound with what to install."""
    path = find()
    if path is None:
        raise SanitizerNotFound(INSTALL)
    return path


def version(path: str) -> str:
    """The last line of `compute-sanitizer --version` (e.g. "Version 2025.3.1.0 ..."), or "?"."""
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    return (out.strip().splitlines() or ["?"])[-1]


def _clip(text: str) -> str:
    if len(text) <= KEEP:
        return text
    return text[:KEEP * 2 // 3] + f"\n... ({len(text) - KEEP} characters left out) ...\n" + text[-KEEP // 3:]


def run(exe, args=(), tool_args=STREAM_ORDER_RACES, timeout: float = 300) -> dict:
    """Run a built program under compute-sanitizer: its report (the file it wrote), what the program printed, the
    exit status and the command, JSON-able.

    Raises SanitizerNotFound, or ProgramTimedOut when it runs past the timeout (killed with its children).
    """
    sanitizer = require()
    args, tool_args = [str(a) for a in args], [str(a) for a in tool_args]
    t0 = time.perf_counter()
    # a fresh folder (mkdtemp: mode 0700, a random name) and a random file name, named to the sanitizer alone: the
    # program is not told where its report goes
    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / f"{secrets.token_hex(8)}.txt"
        try:
            done = cuda.run(sanitizer, ["--log-file", str(log), *tool_args, str(exe), *args], timeout=timeout,
                            name="compute-sanitizer")
            stdout, stderr, status, killed = done.stdout, done.stderr, 0, done.killed
        except ProgramFailed as e:  # its --error-exitcode, or the program failed under it: the report says which
            stdout, stderr, status, killed = e.stdout, e.stderr, e.returncode, e.killed
        report = log.read_text(errors="replace") if log.is_file() else ""
    output = stdout if not stderr else stdout.rstrip("\n") + "\n" + stderr
    return {"command": " ".join(["compute-sanitizer", *tool_args, cuda.program_name(exe), *args]),
            "version": version(sanitizer), "returncode": status, "seconds": time.perf_counter() - t0,
            "report": _clip(report), "output": _clip(output), **({"killed": killed} if killed else {})}


def error_exitcode(tool_args) -> int | None:
    """The exit status compute-sanitizer gives when it finds an error (`--error-exitcode N`), or None."""
    tool_args = [str(a) for a in tool_args]
    for i, a in enumerate(tool_args):
        if a == "--error-exitcode" and i + 1 < len(tool_args):
            return int(tool_args[i + 1])
        if a.startswith("--error-exitcode="):
            return int(a.split("=", 1)[1])
    return None


def measure(lesson, file, args=(), tool_args=STREAM_ORDER_RACES, name: str = "sanitizer", timeout: float = 300,
            flags=()):
    """A lesson's program under compute-sanitizer: run live (and recorded), or the recording replayed.

    The Result's data is what run() returns. The recording's key is the program's source (with the course
    header and the build flags) and both argument lists. Live without a sanitizer: SanitizerNotFound.
    """
    if lesson.live:
        require()
    source = lesson.key_source(lesson.source(file), flags)

    def under_sanitizer(args, tool_args):
        return run(lesson.compile(file, flags), args, tool_args, timeout)

    params = {"args": [str(a) for a in args], "tool_args": [str(a) for a in tool_args]}
    return lesson.measure(name, under_sanitizer, params=params, source=source)


# -- reading the report ---------------------------------------------------------------------------------
NOT_ERRORS = ("COMPUTE-SANITIZER", "ERROR SUMMARY", "LEAK SUMMARY", "Target application returned", "Warning",
              "Note", "Error: Target application")


def error_blocks(text: str) -> list[list[str]]:
    """The report's errors: each a header line (one space after =========) with its indented lines."""
    blocks, current = [], None
    for line in text.splitlines():
        if not line.startswith(LINE):
            continue
        line = line.rstrip()
        body = line[len(LINE):]
        if body.startswith(" ") and body[1:2].strip():  # a header
            current = None if body.strip().startswith(NOT_ERRORS) else [line]
            if current:
                blocks.append(current)
        elif current is not None and body.strip():
            current.append(line)
    return blocks


TARGET_FAILED = "Target application returned an error"  # where it passes on the program's own non-zero status


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


API_ERROR = re.compile(r"Program hit (?P<error>\w+) \(error \d+\) due to .* on CUDA API call to (?P<call>\w+)\.")


@dataclasses.dataclass
class Report:
    """What compute-sanitizer said about one run."""

    output: str  # what the program printed (with the report in it, in a recording made before --log-file)
    returncode: int | None = None
    command: str = ""
    version: str = ""
    errors: int | None = None  # from the report's last "ERROR SUMMARY: N errors"; None if it has no summary
    summary: str | None = None  # that line, as printed
    blocks: list = dataclasses.field(default_factory=list)  # every error, as error_blocks() gives them
    kind: str | None = None  # the first error's header ("Use-before-alloc on allocation of size ...", ...)
    address: str | None = None  # the first error's "Address ..." line, if any
    # Where: from the first error that says where (an "at ..." line). A lifetime error (Use-before-alloc,
    # Use-after-free) names only the allocation; the accesses that follow it name the kernel and the line.
    location: str | None = None  # "file.cu:line", if the report gives one
    function: str | None = None  # the kernel or function it names
    located: str | None = None  # the header of the error they come from (kind's, or a later one's)
    report: str = ""  # the sanitizer's own report: the file it wrote (the output, in an older recording)
    from_file: bool = False  # the report is that file (run() since --log-file), not read out of the output
    killed: list = dataclasses.field(default_factory=list)  # processes still running when it ended (killed then)

    def not_its_own(self, error_exitcode: int | None = None) -> str:
        """Why this report cannot be taken for compute-sanitizer's own ('' where it can): it did not end by itself (a
        signal; processes under it still running when it ended), its report lacks the summary it writes when it ends,
        or it exited with a status that is not one of its own. Its own (Compute Sanitizer's options): 0; its
        --error-exitcode where it found an error; else the status the program under it exited with, which it passes
        on and announces in its report ("Target application returned an error"). A program can kill its sanitizer
        and write a report of its own in its place: that ends here, as "not verified". An older recording (its
        report read out of the output) is read as it was."""
        if not self.from_file:
            return ""
        if self.returncode is not None and self.returncode < 0:
            return (f"compute-sanitizer was killed by signal {_signal_name(-self.returncode)}: it did not end by "
                    "itself, so its report is not its own")
        if self.killed:
            return (f"compute-sanitizer ended while the program under it still ran ({'; '.join(self.killed)}): it "
                    "did not end by itself, so its report is not its own")
        if self.summary is None:
            return (f"compute-sanitizer's report has no summary line (\"ERROR SUMMARY: N errors\", which it writes "
                    f"when it ends; exit status {self.returncode})")
        if self.returncode not in (0, error_exitcode, None) and TARGET_FAILED not in self.report:
            return (f"compute-sanitizer exited with status {self.returncode}, which is not one of its own (0, its "
                    f"--error-exitcode {error_exitcode}, or the program's, which its report then announces: "
                    f"\"{TARGET_FAILED}\")")
        return ""

    def found_errors(self, error_exitcode: int | None = None) -> bool | None:
        """Did compute-sanitizer find an error? Its report counts more than 0, or it exited with `error_exitcode`
        (its --error-exitcode, 99 in the labs' checks): True. Its report counts 0 and the exit status is another:
        False. No summary and another exit status: None, it cannot tell. The exit status counts where the report
        is the sanitizer's own file; an older recording (the course's own run, recorded on a GPU) is read by its
        summary, as it was."""
        if self.errors or (self.from_file and error_exitcode is not None and self.returncode == error_exitcode):
            return True
        return None if self.errors is None else False

    def expected_api_errors(self, expected: dict) -> list[str]:
        """The reported errors that are API calls failing as the program expects ({call: error}, e.g. a query an
        imported pool refuses, and the cudaGetLastError that clears it): "cudaX -> cudaErrorY" for each."""
        found = []
        for block in self.blocks:
            m = API_ERROR.search(block[0])
            if m and expected.get(m["call"]) == m["error"]:
                found.append(f"{m['call']} -> {m['error']}")
        return found

    def first_error(self, limit: int | None = None) -> str:
        """The first error's lines, at most `limit` of them ('' if there is none)."""
        first = self.blocks[0] if self.blocks else []
        if limit is not None and len(first) > limit:
            first = first[:limit] + [f"{LINE} ..."]
        return "\n".join(first)

    def located_error(self, limit: int | None = None) -> str:
        """The lines of the first error that says where (an "at ..." line), at most `limit` ('' if none does)."""
        block = next((b for b in self.blocks if any(t.startswith("at ") for t in _bodies(b))), [])
        if limit is not None and len(block) > limit:
            block = block[:limit] + [f"{LINE} ..."]
        return "\n".join(block)

    def shortened(self, limit: int = 14) -> str:
        """The first error (at most `limit` lines) and the summary line: what to show a reader."""
        return "\n".join(p for p in (self.first_error(limit), self.summary) if p)

    def where(self) -> str:
        """Where the first located error happened: ' at file.cu:line in kernel', or '' if no error says."""
        return (f" at {self.location}" if self.location else "") + (f" in {self.function}" if self.function else "")

    def headline(self) -> str:
        """The first error in one line, with where the first located error happened, as far as the report says."""
        if not self.kind:
            return "no error block in the report"
        if self.located is None or any(t.startswith("at ") for t in _bodies(self.blocks[0])):
            return self.kind + self.where()
        return f"{self.kind}; then {self.located}{self.where()}"

    def tail(self, n: int = 8) -> str:
        """The report's last lines (the program's, where the report is empty)."""
        return "\n".join((self.report.strip() or self.output.strip()).splitlines()[-n:])

    @property
    def records(self) -> Records:
        """The JSON lines the program itself printed under the sanitizer."""
        return parse_records(self.output)


def parse(run_or_output) -> Report:
    """Read a report: from what run() returns (or its recording), or from the sanitizer's report text.

    The report is data["report"], the file compute-sanitizer wrote; never the program's output, unless the data
    has no report of its own (a recording made before --log-file, or text given), which then holds it. The last
    summary line counts: the sanitizer writes its summary after the program has ended."""
    data = run_or_output if isinstance(run_or_output, dict) else {"output": run_or_output}
    text = data["report"] if "report" in data else data["output"]
    m = ([None] + list(re.finditer(rf"^{LINE} ERROR SUMMARY: (\d+) errors?.*$", text, re.M)))[-1]
    report = Report(data["output"], data.get("returncode"), data.get("command", ""), data.get("version", ""),
                    int(m[1]) if m else None, m[0].rstrip() if m else None, error_blocks(text), report=text,
                    from_file="report" in data, killed=list(data.get("killed", [])))
    if not report.blocks:
        return report
    report.kind = report.blocks[0][0][len(LINE):].strip()
    report.address = next((t for t in _bodies(report.blocks[0]) if t.startswith("Address")), None)
    for block in report.blocks:  # where: the first error with an "at ..." line
        at = next((t for t in _bodies(block) if t.startswith("at ")), None)
        if at is None:
            continue
        report.located = block[0][len(LINE):].strip()
        loc = re.search(r" in ([^\s:]+):(\d+)(?::(.+))?$", at)
        if loc:
            report.location = f"{Path(loc[1]).name}:{loc[2]}"
            report.function = loc[3] or re.sub(r"\+0x[0-9a-fA-F]+$", "", at[3:at.rfind(" in ")]).strip()
        else:
            report.function = re.sub(r"\+0x[0-9a-fA-F]+$", "", at[3:]).strip()
        break
    return report


def _bodies(block: list[str]) -> list[str]:
    """An error's indented lines, without the ========= and the indentation."""
    return [line[len(LINE):].strip() for line in block[1:]]
