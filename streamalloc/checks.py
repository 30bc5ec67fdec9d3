"""Lab checks: build and run the learner's code and say, in plain words, what is right and what is wrong.

    report = sa.checks.Report("Lab 1: from synchronous to stream-ordered")
    src = report.source(lesson, "pipeline.cu")          # the learner's CUDA, as written
    report.require_calls(src, ["cudaMallocAsync", "cudaFreeAsync"])
    report.forbid_in_loop(src, ["cudaMalloc", "cudaFree"])
    res = report.run(lesson, "pipeline.cu", args)       # None if it could not run (said why)
    report.sanitize(lesson, "race.cu", args)            # what compute-sanitizer finds
    ...
    report.finish()                                      # prints the list; raises LabIncomplete if wrong

In replay a run cannot happen unless the code is exactly the recorded solution; the report then says
what it could not check and why, and checks what needs no GPU (it compiles, the calls are there).

Reading the learner's C++/CUDA, with comments ignored: `calls`, `loop_bodies`, `calls_in_loops`,
`function_text`, `call_arguments`, and `StreamOrder`, a small model of the stream operations of a loop.
Every offset these give is one into the comment-free code (`strip_comments(src)`), whichever of them
it comes from, so they can be compared with each other.
"""
from __future__ import annotations

import re

from . import sanitizer
from .errors import (CompileError, CourseError, MissingRecording, NvccNotFound, RecordingError,
                     SanitizerNotFound)


class LabIncomplete(CourseError):
    """The lab's check found something still wrong; the message lists it."""


def strip_comments(src: str) -> str:
    src = re.sub(r"/\*.*?\*/", " ", src, flags=re.S)
    return re.sub(r"//[^\n]*", "", src)


def calls(src: str, name: str) -> list[int]:
    """Offsets where `name(` is called in code (comments ignored; cudaMalloc does not match cudaMallocAsync)."""
    return [m.start() for m in re.finditer(rf"\b{re.escape(name)}\s*\(", strip_comments(src))]


def launches(src: str) -> list[tuple[str, int]]:
    """(kernel, offset) of every kernel launch, `kernel<<<...>>>(...)`, in code (comments ignored)."""
    return [(m[1], m.start()) for m in re.finditer(r"\b(\w+)\s*<<<", strip_comments(src))]


def loop_bodies(src: str) -> list[tuple[int, int]]:
    """(start, end) offsets of the bodies of every for/while loop with braces, in comment-free code."""
    code = strip_comments(src)
    bodies = []
    for m in re.finditer(r"\b(for|while)\s*\(", code):
        depth, i = 0, m.end() - 1
        while i < len(code):  # skip the loop's parenthesized header
            depth += code[i] == "("
            depth -= code[i] == ")"
            i += 1
            if depth == 0:
                break
        j = i
        while j < len(code) and code[j].isspace():
            j += 1
        if j < len(code) and code[j] == "{":
            depth, k = 0, j
            while k < len(code):
                depth += code[k] == "{"
                depth -= code[k] == "}"
                k += 1
                if depth == 0:
                    break
            bodies.append((j, k))
    return bodies


def calls_in_loops(src: str, name: str) -> int:
    """How many calls of `name` stand inside a loop body."""
    bodies = loop_bodies(src)
    return sum(any(a <= pos < b for a, b in bodies) for pos in calls(src, name))


def _closing(code: str, start: int, open_: str, close: str) -> int:
    """The offset just past the bracket that closes the one at code[start] (len(code) if it is never closed)."""
    depth = 0
    for i in range(start, len(code)):
        depth += code[i] == open_
        depth -= code[i] == close
        if depth == 0:
            return i + 1
    return len(code)


def function_text(src: str, name: str) -> str:
    """The definition of the C/C++ function `name`, comments removed, from its name to its closing brace.

    '' if there is none. Offsets found in it (calls, loop_bodies) are offsets into this text."""
    code = strip_comments(src)
    m = re.search(rf"\b{re.escape(name)}\s*\([^;{{}}]*\)\s*\{{", code)
    return code[m.start():_closing(code, m.end() - 1, "{", "}")] if m else ""


def split_arguments(text: str) -> list[str]:
    """Split an argument list at the commas that are not inside brackets; each argument stripped."""
    parts, depth, current = [], 0, ""
    for c in text:
        depth += c in "([{"
        depth -= c in ")]}"
        if c == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += c
    return [p for p in parts + [current.strip()] if p]


def call_arguments(src: str, pos: int) -> list[str]:
    """The arguments, as written, of the call at offset `pos` (as `calls` gives it) in comment-free code."""
    code = strip_comments(src)
    paren = code.index("(", pos)
    return split_arguments(code[paren + 1:_closing(code, paren, "(", ")") - 1])


def english(names, conjunction: str = "and") -> str:
    """Names joined as in a sentence: a; a and b; a, b and c (or another conjunction)."""
    names = list(names)
    return f"{', '.join(names[:-1])} {conjunction} {names[-1]}" if len(names) > 1 else "".join(names)


# -- the stream order of a loop ----------------------------------------------------------------------------
STREAM_OPS = ("cudaMallocAsync", "cudaFreeAsync", "cudaEventRecord", "cudaEventRecordWithFlags", "cudaStreamWaitEvent")
DEFAULT_STREAM = "the default stream"


def _stream(arg: str) -> str:
    arg = (arg or "").strip()
    return DEFAULT_STREAM if arg in ("", "0", "NULL", "nullptr", "cudaStreamLegacy") else arg


def stream_ops(src: str, loop_with: str = "cudaFreeAsync") -> list[dict]:
    """The stream operations of the first loop that calls `loop_with`, in program order.

    Each is {"what": the API call or the kernel's name, "stream": the stream as written, "event": for
    cudaEventRecord (cudaEventRecordWithFlags counts as it) and cudaStreamWaitEvent}. Seen: kernel launches
    (<<<grid, block, shared, stream>>>), cudaMallocAsync, cudaFreeAsync, cudaEventRecord and
    cudaStreamWaitEvent written in the loop itself, not those inside functions it calls. [] if there is no
    such loop.
    """
    code = strip_comments(src)
    uses = calls(src, loop_with)
    body = next(((a, b) for a, b in loop_bodies(src) if any(a <= p < b for p in uses)), None)
    if body is None:
        return []
    a, b = body
    ops = []
    pattern = r"\b(?P<api>" + "|".join(STREAM_OPS) + r")\s*\(|\b(?P<kernel>\w+)\s*<<<"
    for m in re.finditer(pattern, code[a:b]):
        if m["kernel"]:
            config = split_arguments(code[a + m.end():code.find(">>>", a + m.end())])
            ops.append({"what": m["kernel"], "stream": _stream(config[3] if len(config) > 3 else "")})
            continue
        api, args = m["api"], call_arguments(code, a + m.start()) + ["", "", ""]
        if api == "cudaMallocAsync":  # (&ptr, bytes, stream)
            ops.append({"what": api, "stream": _stream(args[2])})
        elif api == "cudaFreeAsync":  # (ptr, stream)
            ops.append({"what": api, "stream": _stream(args[1])})
        elif api == "cudaStreamWaitEvent":  # (stream, event, flags)
            ops.append({"what": api, "stream": _stream(args[0]), "event": args[1]})
        else:  # cudaEventRecord(event, stream), cudaEventRecordWithFlags(event, stream, flags)
            ops.append({"what": "cudaEventRecord", "stream": _stream(args[1]), "event": args[0]})
    return ops


def happens_before(ops: list[dict]) -> list[set[int]]:
    """For each operation, the earlier ones the GPU must have finished before it starts.

    Those before it on its own stream, and, for cudaStreamWaitEvent, everything up to the event's most
    recent cudaEventRecord so far (and all that had to finish before that). One pass through the loop body
    in program order: what an iteration inherits from the one before is not modelled.
    """
    before, last_on, recorded = [], {}, {}
    for k, op in enumerate(ops):
        b = set()
        if op["stream"] in last_on:
            j = last_on[op["stream"]]
            b |= before[j] | {j}
        if op["what"] == "cudaStreamWaitEvent" and op.get("event") in recorded:
            j = recorded[op["event"]]
            b |= before[j] | {j}
        before.append(b)
        last_on[op["stream"]] = k
        if op["what"] == "cudaEventRecord":
            recorded[op["event"]] = k
    return before


class StreamOrder:
    """A small model of the stream operations in a loop: what runs on which stream, and which events are
    recorded and waited for; it answers whether one operation is ordered after another on the GPU.

        order = StreamOrder(src)                       # the loop that calls cudaFreeAsync
        order.missing("cudaMallocAsync", "consume")    # those the loop does not contain
        order.stream("consume")                        # the stream it runs on, as written
        order.ordered_after("consume", "cudaMallocAsync", "fill")  # True if it waits for both

    An operation is named by its API call or its kernel's name; its first occurrence in the loop counts.
    """

    def __init__(self, src: str, loop_with: str = "cudaFreeAsync"):
        self.ops = stream_ops(src, loop_with)
        self.before = happens_before(self.ops)

    def index(self, what: str) -> int | None:
        return next((k for k, op in enumerate(self.ops) if op["what"] == what), None)

    def missing(self, *whats: str) -> list[str]:
        return [w for w in whats if self.index(w) is None]

    def stream(self, what: str) -> str | None:
        k = self.index(what)
        return None if k is None else self.ops[k]["stream"]

    def ordered_after(self, later: str, *earlier: str) -> bool:
        """Does `later` start only once every one of `earlier` has finished (False if one is missing)?"""
        k = self.index(later)
        return k is not None and all(self.index(e) in self.before[k] for e in earlier)


class Report:
    """A lab check's findings, each marked ok, WRONG or not checked; finish() prints them and judges."""

    def __init__(self, title: str):
        self.title = title
        self.items: list[tuple[str, str]] = []  # (mark, text): ok, wrong, not checked

    def ok(self, text: str):
        self.items.append(("ok", text))

    def wrong(self, text: str):
        self.items.append(("WRONG", text))

    def unchecked(self, text: str):
        self.items.append(("not checked", text))

    @property
    def failed(self) -> bool:
        return any(mark == "WRONG" for mark, _ in self.items)

    def source(self, lesson, file) -> str:
        return lesson.source(file).read_text()

    def require_calls(self, src: str, names, why: str = ""):
        """Each name must be called. `names` is a list (one `why` for all), or a dict from a name, or a tuple
        of alternatives, to why it is needed (one message per reason)."""
        needed = names if isinstance(names, dict) else {n: why for n in names}
        found, missing = [], {}
        for alternatives, reason in needed.items():
            alternatives = (alternatives,) if isinstance(alternatives, str) else tuple(alternatives)
            hit = next((n for n in alternatives if calls(src, n)), None)
            if hit:
                found.append(hit)
            else:
                missing.setdefault(reason, []).append(" or ".join(alternatives))
        for reason, group in missing.items():
            verb = "is" if len(group) == 1 else "are"
            self.wrong(f"{english(group)} {verb} not called{': ' + reason if reason else ''}")
        if not missing:
            self.ok(f"calls {english(found)}")

    def forbid_in_loop(self, src: str, names, why: str = ""):
        found = [n for n in names if calls_in_loops(src, n)]
        if found:
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

    def build(self, lesson, file, flags=()) -> bool:
        try:
            exe = lesson.compile(file, flags)
        except CompileError as e:
            self.wrong(str(e).split("\n\nnvcc said:")[0] + "\n" + "\n".join(e.log.splitlines()[:8]))
            return False
        except NvccNotFound:
            self.unchecked("whether it compiles: nvcc is not installed here")
            return True
        if exe is None:
            self.unchecked("whether it compiles: nvcc is not installed here")
        else:
            self.ok("it compiles")
        return True

    def not_replayed(self, what: str, error: RecordingError):
        """Say that `what` could not be checked here: replay has only the recorded solution's runs."""
        if isinstance(error, MissingRecording):
            why = "there is no GPU here, and no recording of the solution yet to replay"
        else:
            why = ("there is no GPU here, and only the recorded solution can be replayed: your code differs from "
                   "the recorded solution")
        self.unchecked(f"{what}: {why}. Run this lab on a GPU for this check")

    def run(self, lesson, file, args=(), timeout: float = 120, flags=(), what: str = "the results"):
        """Run the learner's program (live) or its recording (replay); None if it could not, with the reason.

        `what` names what the run is for ("the results and the timing"), for the note when it cannot run."""
        try:
            return lesson.run(file, args, timeout=timeout, flags=flags)
        except RecordingError as e:
            self.not_replayed(what, e)
        except CourseError as e:
            self.wrong(str(e))
        return None

    def sanitize(self, lesson, file, args=(), tool_args=sanitizer.STREAM_ORDER_RACES, name: str = "sanitizer",
                 timeout: float = 180, clean: str = "nothing wrong", errors: str = ""):
        """Run the program under compute-sanitizer (live; replayed otherwise) and say what it found.

        `clean` says what 0 errors means ("no stream-ordered race"), `errors` what its errors are (", such as
        ..."); the report is shortened to its first error. Returns the parsed report, or None."""
        what = "the check under compute-sanitizer"
        try:
            res = sanitizer.measure(lesson, file, args, tool_args, name=name, timeout=timeout)
        except SanitizerNotFound as e:
            self.unchecked(f"{what}: {e}")
            return None
        except RecordingError as e:
            self.not_replayed(what, e)
            return None
        except CourseError as e:  # it crashed or ran past its timeout
            self.wrong(f"compute-sanitizer did not finish: {e}")
            return None
        found = sanitizer.parse(res.data)
        how = f"{found.command}; {res.label}"
        if found.errors is None:
            self.unchecked(f"{what}: compute-sanitizer printed no error summary (exit status {found.returncode}); "
                           f"its last lines:\n{found.tail()}")
        elif found.errors == 0:
            self.ok(f"compute-sanitizer finds {clean}: 0 errors ({how})")
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

    def expect(self, condition: bool, good: str, bad: str):
        (self.ok if condition else self.wrong)(good if condition else bad)

    def __str__(self) -> str:
        width = max(len(m) for m, _ in self.items) if self.items else 0
        lines = [self.title]
        for mark, text in self.items:
            first, *rest = text.splitlines() or [""]
            lines.append(f"  {mark.ljust(width)}  {first}")
            lines += [" " * (width + 4) + r for r in rest]
        return "\n".join(lines)

    def finish(self):
        print(self)
        if self.failed:
            wrong = [t.splitlines()[0] for m, t in self.items if m == "WRONG"]
            raise LabIncomplete(f"{len(wrong)} thing(s) still wrong: " + "; ".join(wrong))
        unchecked = sum(m == "not checked" for m, _ in self.items)
        print("\nAll checks passed." + (f" ({unchecked} could not be checked here: see above.)" if unchecked else ""))
