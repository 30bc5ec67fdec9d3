"""A lab's check: its findings, each marked, and the verdict.

    report = checks.Report("Lab 1: from synchronous to stream-ordered", lesson)
    code = report.read("pipeline.cu", "pipeline_stream_ordered")  # the learner's function, helpers inlined
    report.require_calls(code, ["cudaMallocAsync", "cudaFreeAsync"])
    report.forbid_in_loop(code, ["cudaMalloc", "cudaFree"])
    res = report.run("pipeline.cu", args)        # builds it; None if it could not run (the report says why)
    report.sanitize("pipeline.cu", args)         # what compute-sanitizer finds
    report.finish()                              # prints the findings and the verdict

Each finding is marked `ok`, `WRONG`, `note` (harmless and of no use, e.g. a release threshold set again in every
iteration of a loop), `cannot tell` (what the source reading cannot tell: "cannot tell from
the source: the run decides"; the run's findings judge it) or `not verified` (with why). The verdict, in
finish():

* anything WRONG: LabIncomplete, listing it;
* a note: "Passed, with a note: ...", never "All checks passed." (with what was not verified, if anything);
* no note, everything verified: "All checks passed.";
* something not verified (in replay, a run of code other than the recorded solution's; no nvcc; no
  compute-sanitizer): for the learner's own code, "Passed what could be checked here; not verified without
  a GPU: ..." (or, where the reading of the source points at something, "Not verified without a GPU: ...", with
  the reading's first point), never "All checks passed"; for the course's own solution (the file is the one in
  solutions/), an error, as a lesson's missing or stale recording is: the course is at fault, not the code.

The verdict is shown as data too (streamalloc.verdict: solved, in progress or not verified, with the first finding),
which is what the runner and the tests read; the sentences above are for people.

The learner's C++ is read by `streamalloc.cppsource`.
"""
from __future__ import annotations

import contextlib
import dataclasses

from . import calls, cppsource, ordering, sanitizer, verdict
from .course import REPO, written_files
from .cuda import NVCC_HELP
from .errors import (CompileError, CourseError, MissingRecording, NvccNotFound, RecordingError, SanitizerNotFound,
                     StaleRecording)

OK, WRONG, NOTE, UNVERIFIED, CANNOT_TELL = "ok", "WRONG", "note", "not verified", "cannot tell"
READING = "reading"  # what the reading of the source says: it explains, and decides nothing
RUN_DECIDES = "cannot tell from the source: the run decides"


class LabIncomplete(CourseError):
    """The lab's check found something still wrong; the message lists it."""

    # IPython shows CourseError's short form: this line, the hint, and the checklist the check printed above it;
    # the message holds every wrong item (tests read it), the red line names only the first of several
    def __init__(self, message: str = "", wrong=()):
        super().__init__(message)
        self.wrong = list(wrong)

    def _render_traceback_(self) -> list[str]:
        lines = super()._render_traceback_()
        if len(self.wrong) > 1 and str(self) in lines[0]:
            lines[0] = lines[0].replace(str(self), f"{len(self.wrong)} things still wrong, listed above; the first: "
                                                   f"{self.wrong[0]}")
        return lines


class Unverified(CourseError):
    """The course's own solution could not be verified here (and no more specific error says why)."""


@dataclasses.dataclass
class Finding:
    mark: str  # OK, WRONG, NOTE, CANNOT_TELL or UNVERIFIED
    text: str
    what: str = ""  # for UNVERIFIED: what was not verified, in a few words
    cause: Exception | None = None  # for UNVERIFIED: the error that stopped it


def english(names, conjunction: str = "and") -> str:
    """Names joined as in a sentence: a; a and b; a, b and c (or another conjunction)."""
    names = list(names)
    return f"{', '.join(names[:-1])} {conjunction} {names[-1]}" if len(names) > 1 else "".join(names)


def solution_source(lesson_name: str, file: str) -> str | None:
    """The CUDA that solutions/<lesson_name>.ipynb writes to `file` (its %%writefile cell), or None."""
    return next((text for _, f, text in written_files(REPO / "solutions" / f"{lesson_name}.ipynb") if f == file), None)


class Report:
    """A lab check's findings; finish() prints them and gives the verdict."""

    def __init__(self, title: str, lesson=None):
        self.title = title
        self.lesson = lesson
        self.items: list[Finding] = []
        self.files: list[str] = []  # the learner's files this check read or ran
        self._read: list[Finding] | None = None  # inside reading(): what the reading found

    # -- findings -----------------------------------------------------------------------------------------
    def ok(self, text: str):
        (self.items if self._read is None else self._read).append(Finding(OK, text))

    def wrong(self, text: str):
        (self.items if self._read is None else self._read).append(Finding(WRONG, text))

    @contextlib.contextmanager
    def reading(self, decided: bool):
        """The reading of the learner's source, which explains and never decides. `decided`: the record of what the
        program did (Report.trace) judged the order. Then the reading's objections are shown only beside a wrong
        finding of the run, to point at the code; with nothing wrong they are dropped (a macro, a member function
        or a helper the reading cannot follow is no mistake). Undecided (replay of code other than the recorded
        solution, or no record), they are shown as the reading's, marked "reading", and the order stays unverified."""
        self._read = []
        try:
            yield
        finally:
            found, self._read = self._read, None
            if decided and not self.failed:
                found = []
            for f in found:
                if f.mark == WRONG:
                    self.items.append(Finding(READING, f"the reading of your code says: {f.text}"))
                elif f.mark in (CANNOT_TELL, NOTE) and not decided:
                    self.items.append(f)

    def note(self, text: str):
        """Where the code departs from what the guide advises without being wrong: the verdict is then "Passed,
        with a note: ...", never "All checks passed."."""
        self.items.append(Finding(NOTE, text))

    def cannot_tell(self, what: str, why: str = ""):
        """What the source reading cannot tell: "<what>: cannot tell from the source: the run decides" (and why).
        Never ok: the run's findings (results, pool statistics, the sanitizer) judge it."""
        self.items.append(Finding(CANNOT_TELL, f"{what}: {RUN_DECIDES}" + (f". {why}" if why else "")))

    def unverified(self, what: str, why: str, cause: Exception | None = None):
        self.items.append(Finding(UNVERIFIED, f"{what}: {why}", what, cause))

    def expect(self, condition: bool, good: str, bad: str):
        (self.ok if condition else self.wrong)(good if condition else bad)

    @property
    def failed(self) -> bool:
        return any(f.mark == WRONG for f in self.items)

    @property
    def marks(self) -> list[tuple[str, str]]:
        return [(f.mark, f.text) for f in self.items]

    # -- reading the learner's code -------------------------------------------------------------------------
    def source(self, file: str) -> str:
        """The learner's file, as written."""
        if file not in self.files:
            self.files.append(file)
        return self.lesson.source(file).read_text()

    def read(self, file: str, function: str | None = None) -> str:
        """The learner's code without comments: the whole file, or `function` with the file's own helpers it
        calls inlined (cppsource.inline). '' (and WRONG) if the function is not there."""
        src = self.source(file)
        if function is None:
            return cppsource.strip_comments(src)
        code = cppsource.inline(src, function)
        if not code:
            self.wrong(f"{file} has no function {function}: your version goes there")
        return code

    def require_calls(self, code: str, names, why: str = ""):
        """Each name must be called. `names` is a list (one `why` for all), or a dict from a name, or a tuple
        of alternatives, to why it is needed (one message per reason)."""
        needed = names if isinstance(names, dict) else {n: why for n in names}
        found, missing = [], {}
        for alternatives, reason in needed.items():
            alternatives = (alternatives,) if isinstance(alternatives, str) else tuple(alternatives)
            written = [m for n in alternatives for m in (n, *ordering.driver_twins(n))]  # cuMemFreeAsync is cudaFreeAsync
            hit = next((m for m in written if cppsource.calls(code, m)), None)
            # a driver twin named but not called as name(...): taken through a pointer (cudaGetDriverEntryPoint) or
            # a macro's argument; the reading cannot follow it, and must not say it is not called
            named = next((m for m in written if m not in alternatives and cppsource.names(code, m)), None)
            if hit:
                found.append(hit)
            elif named:
                self.cannot_tell(f"{' or '.join(alternatives)}: your code names {named}, not called by that name "
                                 "(through a pointer or a macro)")
            else:
                missing.setdefault(reason, []).append(" or ".join(alternatives))
        for reason, group in missing.items():
            verb = "is" if len(group) == 1 else "are"
            self.wrong(f"{english(group)} {verb} not called{': ' + reason if reason else ''}")
        if not missing and found:
            self.ok(f"calls {english(found)}")
        return not missing

    def forbid_in_loop(self, code: str, names, why: str | dict = ""):
        """WRONG if one of `names` is called inside a loop, with `why` (or, a dict, the reasons of those found)."""
        found = [n for n in names if cppsource.calls_in_loops(code, n)]
        if found:
            why = "; ".join(why[n] for n in found if why.get(n)) if isinstance(why, dict) else why
            self.wrong(f"{english(found)} {'is' if len(found) == 1 else 'are'} still called inside the loop"
                       f"{': ' + why if why else ''}")
        else:
            self.ok(f"no {english(names, 'or')} inside a loop")

    def placed(self, positions, span, good: str, say: dict):
        """Where calls (offsets, as `calls` gives them) stand against a span such as a loop body (start, end):
        "before", "inside" or "after" it. ok(say[good]) if one stands where it should; else wrong() with
        the text for where they stand ("inside" first), or say["missing"] if there are none."""
        a, b = span
        found = {"before" if p < a else "inside" if p < b else "after" for p in positions}
        place = next((p for p in (good, "inside", "before", "after") if p in found), "missing")
        (self.ok if place == good else self.wrong)(say[place])

    # -- building and running -------------------------------------------------------------------------------
    def build(self, file: str, flags=()) -> bool:
        """Compile the learner's file; False if it cannot run (it does not compile, or no nvcc live)."""
        if file not in self.files:
            self.files.append(file)
        try:
            exe = self.lesson.compile(file, flags)
        except CompileError as e:
            self.wrong(str(e).split("\n\nnvcc said:")[0] + "\n" + "\n".join(e.log.splitlines()[:8]))
            return False
        except NvccNotFound as e:
            self.unverified("whether it compiles, and everything its runs would show",
                            "nvcc is not installed here (how to get it: below)", e)
            return False
        if exe is None:  # replay without nvcc: a recording of this very code would show that it built
            self.unverified("whether it compiles", "nvcc is not installed here (how to get it: below)",
                            NvccNotFound(NVCC_HELP))
        elif not any(f.mark == OK and f.text == "it compiles" for f in self.items):  # a file run twice: said once
            self.ok("it compiles")
        return True

    def _compiled_where_recorded(self, res):
        """A run replayed from a recording of this exact code shows that it compiled where it was recorded."""
        for k, f in enumerate(self.items):
            if f.mark == UNVERIFIED and f.what == "whether it compiles" and res.replayed:
                self.items[k] = Finding(OK, f"it compiles: the recording of this exact code shows it built and ran "
                                            f"({res.label})")

    def not_replayed(self, what: str, error: RecordingError):
        """Say that `what` could not be verified here: replay has only the recorded solution's runs."""
        if self.checks_solution():  # the course's own code: its recording is what is missing or out of date
            why = f"there is no GPU here, and {error}"
        elif isinstance(error, MissingRecording):
            why = "there is no GPU here, and no recording of the solution yet to replay"
        else:
            why = ("there is no GPU here, and only the recorded solution can be replayed: your code differs from "
                   "the recorded solution")
        self.unverified(what, f"{why}. Run this lab on a GPU to check it", error)

    def run(self, file: str, args=(), timeout: float = 120, flags=(), what: str = "the results"):
        """Build and run the learner's program (live) or its recording (replay); None if it could not, with the
        reason. `what` names what the run is for ("the results and the timing"), for the note when it cannot."""
        if not self.build(file, flags):
            return None
        try:
            res = self.lesson.run(file, args, timeout=timeout, flags=flags)
        except RecordingError as e:
            self.not_replayed(what, e)
            return None
        except CourseError as e:  # it crashed, or ran past its timeout
            self.wrong(str(e))
            return None
        self._compiled_where_recorded(res)
        return res

    def trace(self, file: str, arg_sets, timeout: float = 120, what: str = "the order of the GPU's work",
              partial: bool = False):
        """Run the program once per argument set with the course's call recorder (streamalloc.calls): live it runs,
        in replay the recording of the same code and arguments is read. Returns [(args, calls.Calls)], or None with
        the reason said (not recorded in replay, a crash, a driver that cannot name kernels' arguments). A run that
        crashes or hangs is WRONG; with `partial`, the check can judge its record up to then (`Calls.cut_short`:
        the order of what it did, not what it never got to), else the crash alone decides."""
        if not self.build(file, calls.FLAGS):
            return None
        out = []
        for args in arg_sets:
            try:
                rec = self.lesson.run(file, args, timeout=timeout, trace=True).calls
            except RecordingError as e:
                self.not_replayed(what, e)
                return None
            except CourseError as e:  # it crashed, or ran past its timeout: its record up to then still shows why
                self.wrong(f"with the arguments {' '.join(map(str, args))}: {e}")
                text = getattr(e, "call_record", None)
                if not (partial and text):
                    return None
                rec = calls.read(text, getattr(e, "call_key", None), cut_short=True)
            if rec is not None and rec.forged:  # never a verdict from a record the program wrote into
                self.unverified(what, f"the record of the program's CUDA calls is not the recorder's alone "
                                      f"({'; '.join(rec.forged[:2])}): something else wrote into it or took lines out "
                                      "of it, so it cannot decide")
                return None
            if rec is None or not rec.lines:
                self.unverified(what, "the course's call recorder recorded nothing (it needs the program built with "
                                      "-cudart shared and a Linux loader that honours LD_PRELOAD)")
                return None
            if not rec.kernels_named:
                self.unverified(what, "this driver cannot tell the recorder which buffers each kernel was given "
                                      "(cuFuncGetParamInfo needs a driver for CUDA 12.4 or newer)")
                return None
            out.append((list(args), rec))
        return out

    def sanitize(self, file: str, args=(), tool_args=sanitizer.STREAM_ORDER_RACES, name: str = "sanitizer",
                 timeout: float = 180, clean: str = "nothing wrong", errors: str = "", expected_api_errors=None):
        """Run the program under compute-sanitizer (live; replayed otherwise) and say what it found.

        `clean` says what 0 errors means ("no stream-ordered race"), `errors` what its errors are (", such as
        ..."); the report is shortened to its first error. `expected_api_errors` ({call: error}) names API calls
        the program makes knowing they fail: reported, not counted as wrong. Returns the parsed report, or None."""
        what = "the check under compute-sanitizer"
        if file not in self.files:
            self.files.append(file)
        try:
            res = sanitizer.measure(self.lesson, file, args, tool_args, name=name, timeout=timeout)
        except SanitizerNotFound as e:
            self.unverified(what, str(e), e)
            return None
        except NvccNotFound as e:
            self.unverified(what, "nvcc is not installed here (how to get it: below)", e)
            return None
        except RecordingError as e:
            self.not_replayed(what, e)
            return None
        except CourseError as e:  # it crashed or ran past its timeout
            self.wrong(f"compute-sanitizer did not finish: {e}")
            return None
        found = sanitizer.parse(res.data)  # its report file and exit status: nothing the program prints
        how = f"{found.command}; {res.label}"
        flagged = found.found_errors(sanitizer.error_exitcode(tool_args))
        forged = found.not_its_own(sanitizer.error_exitcode(tool_args))
        if forged:
            self.unverified(what, f"{forged} ({how}). Its last lines:\n{found.tail()}")
        elif flagged is None:
            self.unverified(what, f"compute-sanitizer wrote no error summary in its report (exit status "
                                  f"{found.returncode}); its last lines:\n{found.tail()}")
        elif not flagged:
            self.ok(f"compute-sanitizer finds {clean}: 0 errors ({how})")
        elif not found.errors:
            self.wrong(f"compute-sanitizer exited with status {found.returncode}, the status it gives when it finds an "
                       f"error, though its report counts {found.errors if found.errors is not None else 'none'} "
                       f"({how}). Its last lines:\n{found.tail()}")
        elif expected_api_errors and len(found.expected_api_errors(expected_api_errors)) == found.errors:
            calls = found.expected_api_errors(expected_api_errors)
            self.ok(f"compute-sanitizer finds {clean}: its {found.errors} report(s) are the calls the program makes "
                    f"knowing they fail ({', '.join(calls)}), no memory error ({how})")
        else:
            self.wrong(f"compute-sanitizer found {found.errors} error(s){errors} ({how}). Its first report:\n"
                       + found.shortened())
        return found

    def faster(self, base: float, mine: float, target: float, base_name: str, over: str, label: str, hint: str):
        """Is `mine` (µs per iteration) at least `target` times faster than `base`? With the figures either way."""
        speedup = base / mine
        figures = (f"{base_name} takes {base:.1f} µs per iteration, yours {mine:.1f} µs: {speedup:.1f}× faster "
                   f"(target: at least {target:g}×; medians of {over} on {label})")
        self.expect(speedup >= target, f"speed: {figures}", f"speed: {figures}. {hint}")

    # -- the verdict --------------------------------------------------------------------------------------------
    def checks_solution(self) -> bool:
        """Is every file this check read the course's own solution (solutions/, comments and spacing aside)?"""
        name = getattr(self.lesson, "name", None)
        if not name or not self.files:
            return False
        for file in self.files:
            mine, solution = self.lesson.source(file), solution_source(name, file)
            if solution is None or not mine.is_file():
                return False
            if cppsource.normalized(mine.read_text()) != cppsource.normalized(solution):
                return False
        return True

    def __str__(self) -> str:
        width = max(len(f.mark) for f in self.items) if self.items else 0
        lines = [self.title]
        for f in self.items:
            first, *rest = f.text.splitlines() or [""]
            lines.append(f"  {f.mark.ljust(width)}  {first}")
            lines += [" " * (width + 4) + r for r in rest]
        return "\n".join(lines)

    def finish(self):
        """Print the findings; show the verdict (streamalloc.verdict: its word as data, its prose for people); raise
        LabIncomplete if one is WRONG; say what was not verified, and why."""
        print(self)
        if self.failed:
            wrong = [f.text.splitlines()[0] for f in self.items if f.mark == WRONG]
            things = "1 thing" if len(wrong) == 1 else f"{len(wrong)} things"
            verdict.show(verdict.Verdict(verdict.IN_PROGRESS, wrong[0], f"\nNot solved yet: {things} still wrong."))
            raise LabIncomplete(f"{things} still wrong: " + "; ".join(wrong), wrong)
        unverified = [f for f in self.items if f.mark == UNVERIFIED]
        notes = "; ".join(f.text.splitlines()[0] for f in self.items if f.mark == NOTE)
        if not unverified:
            verdict.show(verdict.Verdict(verdict.SOLVED, notes, f"\nPassed, with a note: {notes}" if notes
                                         else "\nAll checks passed."))
            return
        whats = "; ".join(dict.fromkeys(f.what for f in unverified))
        live = getattr(self.lesson, "live", False)
        noise = live and all(f.what in ("the speed", "the timing") for f in unverified)  # noise, a shared GPU
        if self.checks_solution() and not noise:  # the course's own code: what it could not verify is its fault
            causes = [f.cause for f in unverified if f.cause is not None]
            cause = next((c for c in causes if isinstance(c, RecordingError)), causes[0] if causes else None)
            kind = type(cause) if isinstance(cause, (MissingRecording, StaleRecording, NvccNotFound,
                                                     SanitizerNotFound)) else Unverified
            reasons = "; ".join(f"{f.what}: {f.cause}" if isinstance(f.cause, RecordingError)
                                else f.text.splitlines()[0] for f in unverified)
            raise kind(f"{self.title}: this is the course's own solution, and its check could not verify: {reasons}"
                       + (f"\n{NVCC_HELP}" if isinstance(cause, NvccNotFound) else ""))
        nvcc = any(isinstance(f.cause, NvccNotFound) for f in unverified)
        read = [f.text.splitlines()[0] for f in self.items if f.mark == READING]
        said = (f"not verified {'here' if live else 'without a GPU'}: {whats}."
                + (f"\nWith a note: {notes}" if notes else ""))
        meanwhile = (f"\nMeanwhile {read[0]}" + (f" (and {len(read) - 1} more, above)" if len(read) > 1 else "")
                     + "; the reading explains, and only a run decides.") if read else ""
        # with the reading pointing at something, nothing is said to have passed: the run may well reject it. The
        # data's finding (the runner's summary, cut at 300 characters) names the reading's point first
        first = (f"{read[0]}{' (and more)' if len(read) > 1 else ''}; " if read else "") + said.replace("\n", " ")
        said += meanwhile
        verdict.show(verdict.Verdict(verdict.UNVERIFIED, first,
                                     ("\n" + said[0].upper() + said[1:] if read
                                      else "\nPassed what could be checked here; " + said)
                                     + (f"\n{NVCC_HELP}" if nvcc else "")
                                     + ("" if live else "\nRun this lab on a GPU (live mode) for the rest of the check.")))
