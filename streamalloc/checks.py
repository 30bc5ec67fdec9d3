"""Lab checks: build and run the learner's code and say, in plain words, what is right and what is wrong.

    report = sa.checks.Report("Lab 1: from synchronous to stream-ordered")
    src = report.source(lesson, "pipeline.cu")          # the learner's CUDA, as written
    report.require_calls(src, ["cudaMallocAsync", "cudaFreeAsync"])
    report.forbid_in_loop(src, ["cudaMalloc", "cudaFree"])
    res = report.run(lesson, "pipeline.cu", args)       # None if it could not run (said why)
    ...
    report.finish()                                      # prints the list; raises LabIncomplete if wrong

In replay a run cannot happen unless the code is exactly the recorded solution; the report then says
what it could not check and why, and checks what needs no GPU (it compiles, the calls are there).
"""
from __future__ import annotations

import re

from .errors import CompileError, CourseError, NvccNotFound, RecordingError


class LabIncomplete(CourseError):
    """The lab's check found something still wrong; the message lists it."""


def strip_comments(src: str) -> str:
    src = re.sub(r"/\*.*?\*/", " ", src, flags=re.S)
    return re.sub(r"//[^\n]*", "", src)


def calls(src: str, name: str) -> list[int]:
    """Offsets where `name(` is called in code (comments ignored; cudaMalloc does not match cudaMallocAsync)."""
    return [m.start() for m in re.finditer(rf"\b{re.escape(name)}\s*\(", strip_comments(src))]


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
    bodies = loop_bodies(src)
    return sum(any(a <= pos < b for a, b in bodies) for pos in calls(src, name))


class Report:
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
        missing = [n for n in names if not calls(src, n)]
        if missing:
            self.wrong(f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not called{': ' + why if why else ''}")
        else:
            self.ok(f"calls {', '.join(names)}")

    def forbid_in_loop(self, src: str, names, why: str = ""):
        found = [n for n in names if calls_in_loops(src, n)]
        if found:
            self.wrong(f"{', '.join(found)} is still called inside the loop{': ' + why if why else ''}")
        else:
            self.ok(f"no {' or '.join(names)} inside a loop")

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

    def run(self, lesson, file, args=(), timeout: float = 120, flags=()):
        """Run the learner's program (live) or its recording (replay); None if it could not, with the reason."""
        try:
            return lesson.run(file, args, timeout=timeout, flags=flags)
        except RecordingError:
            self.unchecked("the results and the timing: there is no GPU here, and only the recorded solution can be "
                           "replayed; your code differs from it. Run this lab on a GPU to check them")
        except CourseError as e:
            self.wrong(str(e))
        return None

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
