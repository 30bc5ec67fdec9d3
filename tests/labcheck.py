"""Running a lab's check cell on a given answer, for the tests of tests/test_lab*.py.

    lab = Lab("lab1_stream_ordered", "pipeline.cu")
    check = lab.check("solution")                      # solutions/lab1_stream_ordered.ipynb as it is
    check = lab.check("lab")                           # labs/lab1_stream_ordered.ipynb as git tracks it: the stubs
    check = lab.check("cudaFree left in the loop",     # the solution with a wrong answer in its regions
                      lambda cu: regions(cu, ["CHECK(cudaMallocAsync(&buf, bytes, s));", "", "CHECK(cudaFree(buf));"]))
    check.ename, check.evalue, check.printed           # the check's error (None if it passed) and what it printed
    lab.passes("solution"); lab.rejected(case, edit, *words)   # the same, with the usual assertions
    lab.cuda(edit)                                     # the solution's CUDA of self.file (edited), as text

    @live_only                                         # a wrong answer only a run on a GPU can catch
    def test_...(): ...

Only the notebook's set-up cell, its %%writefile cells and its check cell run, in a Jupyter kernel in the
notebook's folder (live; in replay, in the test's process: `run_check` says why), in this session's mode
(STREAMALLOC_MODE, which conftest.py sets from the machine: live on a GPU, replay elsewhere). Every run also writes what the check printed and showed, and its error, to
build/lab_checks/<notebook>-<case>.txt, so that a run on a GPU leaves a record of each check's words.

In replay a run can only give the recorded solution's numbers, so the check says "not verified" for the
run-time half of any other answer (never "solved"); a wrong answer that only the run can catch is a `live_only` test here,
and tests/test_checks.py feeds the run-time half canned output of such answers in any mode.
"""
from __future__ import annotations

import dataclasses
import os
import re
import subprocess
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
NoSuchKernel = pytest.importorskip("jupyter_client.kernelspec").NoSuchKernel  # nbclient raises it, has none of its own
# (below the importorskips: these need nbformat)
from make_labs import BEGIN, END  # the generator's own markers of a solution region
from streamalloc import verdict
from streamalloc.verdict import SOLVED, UNVERIFIED  # noqa: F401  (for the lab tests)
from notebook import CLEAN, StandIn, run_cells  # noqa: F401  (CLEAN: for the lab tests)

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "build" / "lab_checks"
CELL_TIMEOUT = 600  # s; live, a check builds, runs and may run compute-sanitizer
LIVE = os.environ.get("STREAMALLOC_MODE") == "live"  # conftest.py decides the mode before the tests load
live_only = pytest.mark.skipif(not LIVE, reason="only a run on a GPU catches this answer: in replay the check "
                                                "cannot run code other than the recorded solution's")


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:60] or "case"


def regions(text: str, bodies) -> str:
    """`text` with its CUDA solution regions replaced, markers and all.

    `bodies` is a list (every region, in order) or a dict {index: body} (the other regions stay solved).
    A body is written without indentation: each of its lines gets the indentation of its region's marker.
    """
    bodies = dict(enumerate(bodies)) if isinstance(bodies, (list, tuple)) else bodies
    out, count, inside = [], 0, None
    for line in text.splitlines(keepends=True):
        begin = BEGIN.match(line.rstrip("\n"))
        if begin:
            inside, count = (count, begin["indent"]), count + 1
            if inside[0] not in bodies:
                out.append(line)
            else:
                out += [f"{begin['indent']}{ln}\n" if ln else "\n" for ln in bodies[inside[0]].splitlines()]
        elif inside and END.match(line.rstrip("\n")):
            if inside[0] not in bodies:
                out.append(line)
            inside = None
        elif not inside or inside[0] not in bodies:
            out.append(line)
    assert max(bodies, default=-1) < count, f"there are only {count} solution regions"
    return "".join(out)


def in_function(text: str, function: str, old: str, new: str) -> str:
    """Replace `old` by `new` once, in the definition of `function` and after it only."""
    start = text.index(f"void {function}(")
    assert old in text[start:], old
    return text[:start] + text[start:].replace(old, new, 1)


SHOWN: list = []  # the verdicts shown in this test, in order (tests/conftest.py's shown_verdicts)


_LAST = object()


def last_word() -> str | None:
    """The word of the last verdict a check showed in this test (streamalloc.verdict), or None if none did."""
    return SHOWN[-1].word if SHOWN else None


def _verdict(v):
    return (SHOWN[-1] if SHOWN else None) if v is _LAST else v


def all_passed(v=_LAST) -> bool:
    """Solved, with no note (the prose: "All checks passed."): of a Verdict, by default the last one shown."""
    v = _verdict(v)
    return v is not None and v.word == SOLVED and not v.finding


def noted(text: str = "", v=_LAST) -> bool:
    """Solved with a note (the prose: "Passed, with a note: ..."), the note starting with `text`."""
    v = _verdict(v)
    return v is not None and v.word == SOLVED and bool(v.finding) and v.finding.startswith(text)


def unverified(text: str = "", v=_LAST) -> bool:
    """Not verified, with `text` in what was not (the prose: "Passed what could be checked here; not verified ...")."""
    v = _verdict(v)
    return v is not None and v.word == UNVERIFIED and text in v.finding


@dataclasses.dataclass
class Check:
    ename: str | None  # the check's error ("LabIncomplete"), None if it passed
    evalue: str  # its message
    printed: str  # what the check printed (the report)
    verdict: object = None  # the streamalloc.verdict.Verdict its cell showed, as the runner reads it; None if none

    @property
    def word(self) -> str | None:
        """solved, in progress or not verified (streamalloc.verdict), or None where the check showed no verdict."""
        return self.verdict.word if self.verdict else None


@dataclasses.dataclass
class Lab:
    name: str  # "lab1_stream_ordered"
    file: str  # the CUDA file whose %%writefile cell the wrong answers edit

    @property
    def solution(self) -> Path:
        return ROOT / "solutions" / f"{self.name}.ipynb"

    @property
    def lab(self) -> Path:
        return ROOT / "labs" / f"{self.name}.ipynb"

    def cuda(self, edit=None) -> str:
        """The CUDA of self.file as the solution's %%writefile cell writes it, with `edit` applied."""
        from streamalloc.course import written_files

        for _, file, text in written_files(self.solution):
            if file == self.file:
                return edit(text) if edit else text
        raise LookupError(f"{self.solution.name} has no %%writefile cell for {self.file}")

    def canned(self, tmp_path, records, sanitizer_output: str = CLEAN, edit=None, name: str = "stand-in",
               calls=None) -> StandIn:
        """A lesson whose self.file is the solution's CUDA (with `edit` applied), whose runs print `records` as a GPU's
        would, whose sanitizer run prints `sanitizer_output` (with `canned_measure`) and whose traced runs record
        `calls(args)` (None: not recorded). `name` "stand-in" makes it the learner's code, the lab's the course's."""
        return StandIn(tmp_path, lambda file, args: records, live=True, name=name, files={self.file: self.cuda(edit)},
                       calls=calls, sanitizer_output=sanitizer_output)

    def check(self, case: str, edit=None) -> Check:
        """Run the check on the lab (case "lab"), the solution ("solution"), or the solution with `edit`
        applied to the CUDA of self.file (case: the wrong answer, in a few words)."""
        notebook = self.lab if case == "lab" else self.solution
        if not notebook.exists():
            pytest.skip(f"{notebook.relative_to(ROOT)} does not exist (labs/ is made by tools/make_labs.py)")
        return run_check(notebook, case, self.file, edit)

    def passes(self, case: str = "solution", edit=None) -> Check:
        """The check must pass: solved (streamalloc.verdict) live, and for the recorded solution in replay; in replay any
        other answer passes what could be checked and says what was not verified without a GPU."""
        check = self.check(case, edit)
        assert check.ename is None, f"{case}: {check.ename}: {check.evalue}\n{check.printed}"
        if LIVE or case == "solution":  # live everything runs; in replay the recorded solution does
            assert passed(check), check.printed
        else:  # another answer's run has no recording: what only a run shows is said to be not verified
            assert unverified("not verified without a GPU:", check.verdict), check.printed
        return check

    def wrong(self, case: str, edit, *words: str) -> Check:
        """A wrong answer: live, rejected with `words` (what its run, record or sanitizer showed); in replay, where
        only the recorded code's runs exist, never "solved"."""
        if LIVE:
            return self.rejected(case, edit, *words, built=True)
        check = self.check(case, edit)
        assert check.ename in (None, "LabIncomplete"), f"{case}: the check itself failed: {check.ename}: {check.evalue}"
        assert not all_passed(check.verdict), check.printed
        assert check.ename or unverified("not verified without a GPU:", check.verdict), check.printed  # never solved
        assert "does not compile" not in check.printed, f"{case}: a wrong answer of these tests must compile"
        return check

    def rejected(self, case: str, edit, *words: str, built: bool = False) -> Check:
        """The check must raise LabIncomplete with every one of `words` in its message; the answer must compile
        (with built=True, the check must also have said "it compiles": nvcc was there to build it)."""
        check = self.check(case, edit)
        if LIVE and check.ename is None and timing_unverified_on_shared_gpu(check):
            pytest.skip(f"{case}: only its timing could reject it, and other processes compute on this GPU (the check "
                        "said so, not verified): run this test alone on the GPU to decide it")
        assert check.ename == "LabIncomplete", f"{case}: not rejected: {check.ename}: {check.evalue}\n{check.printed}"
        assert "does not compile" not in check.evalue, f"{case}: a wrong answer of these tests must compile"
        for w in words:
            assert w in check.evalue, f"{case}: {w!r} is not in the check's message: {check.evalue}"
        assert not built or "it compiles" in check.printed, check.printed
        return check


class Protocol:
    """The tests every CUDA lab's answers get, generated from its data: a lab's test file declares

        class TestProtocol(Protocol):
            lab = LAB
            right = {name: edit}                  # right answers, in styles the check was not written against
            wrong = {name: (edit, words)}         # wrong answers, and the words their live rejection must hold
            driver = {name: edit}                 # right answers written against the driver API
            solution_says = ("...",)              # what the solution's report holds (live and replayed)
            stubs_say = ("...",)                  # what the unsolved lab's live rejection holds

    and gets: the solution passes; the lab as given is rejected (live with `stubs_say`; in replay by its recorded run
    with `stubs_read`, or, with `stubs_replayed = False`, never "passed", its report saying `stubs_read`); every right answer and every
    driver-API answer passes (in replay: passes what could be checked, never rejected), its report holding none of
    `right_lacks`; every wrong answer is rejected live with its words and is never "All checks passed" in replay
    (`Lab.wrong`). What is particular to a lab stays in its file as tests of its own."""

    lab: Lab
    right: dict = {}
    wrong: dict = {}
    driver: dict = {}
    solution_says: tuple = ()
    solution_says_live: tuple = ()
    solution_lacks: tuple = ()
    stubs_say: tuple = ()
    stubs_replayed = True  # in replay the unsolved lab's recorded run rejects it (LabIncomplete)
    stubs_read: tuple = ()  # in replay: what the rejection (or, stubs_replayed False, the report) says of the stubs
    right_lacks: tuple = ()

    def pytest_generate_tests(self, metafunc):
        for arg in ("right", "wrong", "driver"):
            if arg in metafunc.fixturenames:
                metafunc.parametrize(arg, list(getattr(self, arg)))

    def test_the_solution_passes(self):
        printed = self.lab.passes().printed
        for w in (*self.solution_says, *(self.solution_says_live if LIVE else ())):
            assert w in printed, printed
        for w in self.solution_lacks:
            assert w not in printed, printed

    def test_the_lab_as_given_is_rejected(self):
        if LIVE:
            self.lab.rejected("lab", None, *self.stubs_say)
            return
        if self.stubs_replayed:  # its recorded run (or what the file never names) rejects it, with `stubs_read`
            self.lab.rejected("lab", None, *self.stubs_read)
            return
        check = self.lab.check("lab")
        assert not all_passed(check.verdict), check.printed
        for w in self.stubs_read:
            assert w in check.printed, check.printed

    def test_a_right_answer_passes(self, right):
        printed = self.lab.passes(right, self.right[right]).printed
        for w in self.right_lacks:
            assert w not in printed, printed

    def test_a_wrong_answer_is_rejected(self, wrong):
        edit, words = self.wrong[wrong]
        self.lab.wrong(wrong, edit, *words)

    def test_a_right_answer_in_the_driver_api_passes(self, driver):
        printed = self.lab.passes(driver, self.driver[driver]).printed
        for w in self.right_lacks:
            assert w not in printed, printed


SHARED = "This GPU is shared with"


def timing_unverified_on_shared_gpu(check: Check) -> bool:
    """Live on a GPU other processes compute on, a check leaves the speed or timing unverified and says why
    (labchecks.common.shared_gpu): nothing else was left unverified."""
    return (SHARED in check.printed and check.word == UNVERIFIED
            and re.fullmatch(r"not verified here: the (speed|timing)\.", check.verdict.finding) is not None)


def passed(check: Check) -> bool:
    """A right answer's verdict: all checks passed; live on a shared GPU, also every check passed but the timing,
    which the check left unverified because the GPU was shared."""
    return all_passed(check.verdict) or (LIVE and timing_unverified_on_shared_gpu(check))


def unsolved(path: Path) -> str | None:
    """A notebook's text as the course wrote it: the file, unless it is a lab its learner solved in place
    (runner.edited_lab); then the lab as git tracks it (staged, else committed), or None where git has no copy."""
    from streamalloc import runner

    if not runner.edited_lab(path):
        return path.read_text()
    done = subprocess.run(["git", "show", f":{path.relative_to(ROOT).as_posix()}"], cwd=ROOT, capture_output=True,
                          text=True)
    return done.stdout if done.returncode == 0 else None


def _cells(notebook: Path, file: str, edit):
    text = unsolved(notebook)
    if text is None:
        pytest.skip(f"{notebook.relative_to(ROOT)} is solved in place, and no git copy holds the lab as given")
    nb = nbformat.reads(text, as_version=4)
    keep, edited = [], False
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        first, _, body = cell.source.partition("\n")
        if first.startswith("%%writefile"):
            if edit and first.endswith("/" + file):
                new = edit(body)
                assert new != body, f"the edit leaves {file} as it was"
                cell.source, edited = first + "\n" + new, True
            keep.append(cell)
        elif "sa.start(" in cell.source or "check" in cell.metadata.get("tags", []):
            keep.append(cell)
    assert edited or not edit, f"{notebook.name} has no %%writefile cell for {file}"
    nb.cells = keep
    return nb


def run_check(notebook: Path, case: str, file: str, edit=None) -> Check:
    """Run the set-up, %%writefile and check cells; the check's outcome. A failure before the check fails the test.

    Live, in a Jupyter kernel. In replay, in this process (`in_process`): nothing of it can run on a GPU, so the
    kernel would only add its start to the same verdict (the same Lesson, the same nvcc build of the answer, the same
    replay). The notebooks as saved (cases "solution" and "lab") run in a kernel all the same: nbval runs every cell
    of solutions/ and labs/, these cells among them, and fails a solution's check that raises and a lab's that does
    not raise LabIncomplete (its `raises-exception` tag, conftest.py); the words are asserted here."""
    nb = _cells(notebook, file, edit)
    if not LIVE and notebook.stem not in IN_A_KERNEL:
        return in_process(notebook, nb, case)
    client = nbclient.NotebookClient(nb, kernel_name="python3", timeout=CELL_TIMEOUT, allow_errors=True,
                                     resources={"metadata": {"path": str(notebook.parent)}})
    try:
        client.execute()
    except NoSuchKernel:
        pytest.skip("no python3 Jupyter kernel")
    *before, check = nb.cells
    assert "check" in check.metadata.get("tags", []), f"{notebook.name}: its last code cell is not the check"
    for cell in before:
        errors = [o for o in cell.outputs if o.output_type == "error"]
        assert not errors, f"a cell before the check failed: {errors[0].ename}: {errors[0].evalue}"
    printed = "".join(o.get("text", "") for o in check.outputs if o.output_type == "stream")
    errors = [o for o in check.outputs if o.output_type == "error"]
    shown = verdict.read(check.outputs)
    result = Check(errors[0].ename, errors[0].evalue, printed, shown) if errors else Check(None, "", printed, shown)
    _write(notebook, case, check.outputs, result)
    return result


IN_A_KERNEL = {"lab5_ipc_pool"}  # its answers run in a kernel in every mode (two processes share a pool)
START = re.compile(r"^lesson = sa\.start\((?P<name>\"[^\"]+\"|'[^']+')\)\s*$", re.M)


def in_process(notebook: Path, nb, case: str) -> Check:
    """The check cell run here, as the kernel runs it: in the notebook's folder, on `lesson = sa.start(name)` (the
    set-up cell's last line, in this session's mode), with each %%writefile cell's file written where %%writefile
    writes it; what it displays (tables) is kept apart from what it prints, as a kernel's outputs are."""
    import contextlib
    import io
    from unittest import mock

    import streamalloc as sa
    from streamalloc.course import writefile_cells

    *cells, check = nb.cells
    assert "check" in check.metadata.get("tags", []), f"{notebook.name}: its last code cell is not the check"
    setup = next(c for c in cells if "sa.start(" in c.source)
    name = START.search(setup.source)
    assert name, f"{notebook.name}: its set-up cell does not end with lesson = sa.start(\"...\")"
    shown, printed = [], io.StringIO()
    cwd = os.getcwd()
    os.chdir(notebook.parent)  # as Jupyter starts the kernel: the lesson's build folder is the notebook's
    try:
        with contextlib.redirect_stdout(printed), mock.patch("IPython.display.display", lambda *a, **k: shown.extend(a)):
            lesson = sa.start(name["name"][1:-1])
            for _, file, text in writefile_cells(cells):
                (lesson.build / file).write_text(text)
            printed.seek(0)  # the set-up's banner is the set-up cell's output, not the check's
            printed.truncate()
            try:
                run_cells(notebook.stem, lesson, [check.source])
                result = Check(None, "", printed.getvalue())
            except Exception as e:  # noqa: BLE001  the check's verdict, as the kernel's error output gives it
                result = Check(type(e).__name__, str(e), printed.getvalue())
    finally:
        os.chdir(cwd)
    outputs = [nbformat.v4.new_output("stream", name="stdout", text=result.printed)] + [
        nbformat.v4.new_output("display_data", data=x._repr_mimebundle_() if hasattr(x, "_repr_mimebundle_")
                               else {"text/plain": repr(x)}) for x in shown]
    result.verdict = verdict.read(outputs)  # as the kernel's outputs give it
    _write(notebook, case, outputs, result, here="in the test's process")
    return result


def _write(notebook: Path, case: str, outputs, result: Check, here: str = "in a Jupyter kernel"):
    """build/lab_checks/<notebook>-<case>.txt: the check's outputs in order (printed and shown), and its error."""
    parts = [f"{notebook.relative_to(ROOT)}, case {case!r}, STREAMALLOC_MODE={os.environ.get('STREAMALLOC_MODE', '')}"
             + f" ({here})"]
    for o in outputs:
        if o.output_type == "stream":
            parts.append(o.text.rstrip("\n"))
        elif o.output_type in ("display_data", "execute_result"):
            parts.append(o.get("data", {}).get("text/plain", "").rstrip("\n"))
    parts.append(f"{result.ename}: {result.evalue}" if result.ename else "(the check raised nothing)")
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{notebook.stem}-{slug(case)}.txt").write_text("\n\n".join(parts) + "\n")


# -- canned runs: a check's run-time half fed the lines a GPU's run would print ------------------------------
RACE_REPORT = """\
========= COMPUTE-SANITIZER
========= Invalid __global__ read of size 4 bytes
=========     at consume(const int *, int *, int, unsigned int)+0x1f0 in race.cu:41
=========     by thread (3,0,0) in block (0,0,0)
=========     Address 0x7f3a00000000 is out of bounds
=========
========= Use-after-free on allocation of size 65,536 bytes at 0x7f3a00000000
=========     Address 0x7f3a00000000 is potentially accessed after it is free'd
=========
========= ERROR SUMMARY: 2 errors
"""  # compute-sanitizer on a use after a free it is not ordered before


def verdict_of(check, lesson) -> str:
    """The check's error message ('' if it passed)."""
    from streamalloc import checks

    try:
        check(lesson)
    except checks.LabIncomplete as e:
        return str(e)
    return ""


def canned_measure(command: str, returncode: int):
    """A stand-in for sanitizer.measure: a stand-in lesson's sanitizer output; any other lesson measures as usual."""
    from streamalloc.lesson import Result

    def measure(lesson, file, args=(), tool_args=(), name="sanitizer", timeout=300, flags=()):
        if not isinstance(lesson, StandIn) or lesson.sanitizer_output is None:
            return lesson.measure(name, None)
        data = {"output": lesson.sanitizer_output, "returncode": returncode, "version": "canned", "command": command}
        return Result(name, [], "", "", 0.1, False, "a canned run", data)
    return measure


DRIVER_API = r"""
#include <cuda.h>  // the driver API's types; its functions are taken through the runtime, as notebook 05 takes them

template <class F> F driver_entry(const char *name) {
    void *fn = nullptr;
    cudaDriverEntryPointQueryResult found;
#if CUDART_VERSION >= 12050
    CHECK(cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &found));
#else
    CHECK(cudaGetDriverEntryPoint(name, &fn, cudaEnableDefault, &found));
#endif
    if (found != cudaDriverEntryPointSuccess || !fn) {
        std::fprintf(stderr, "the driver has no %s\n", name);
        std::exit(1);
    }
    return reinterpret_cast<F>(fn);
}
#define CU_CALL(name, ...)                                                                                \
    do {                                                                                                  \
        static const auto fn_ = driver_entry<decltype(&name)>(#name);                                     \
        const CUresult r_ = fn_(__VA_ARGS__);                                                             \
        if (r_ != CUDA_SUCCESS) {                                                                         \
            std::fprintf(stderr, "%s failed: %d\n", #name, (int)r_);                                     \
            std::exit(1);                                                                                 \
        }                                                                                                 \
    } while (0)
"""


def through_the_driver(text: str) -> str:
    """`text` with DRIVER_API after its last #include: CU_CALL(cuMemFreeAsync, ...) calls the driver API by the
    pointer cudaGetDriverEntryPoint(ByVersion) gives (a program needs no -lcuda for it)."""
    includes = list(re.finditer(r"^#include .*$", text, re.M))
    assert includes, "no #include to put the driver's helper after"
    at = includes[-1].end()
    return text[:at] + "\n" + DRIVER_API + text[at:]


def in_the_driver_api(bodies):
    """An answer written in the driver API: the solution's regions replaced by `bodies` (as `regions` takes them), with
    DRIVER_API's CU_CALL. The record holds its calls under their runtime twins' names, so the check judges it as it
    judges those."""
    return lambda text: regions(through_the_driver(text), bodies)


def both(*edits):
    """One edit made of several, applied in order (an answer that changes two places of a program)."""
    def edit(t):
        for e in edits:
            t = e(t)
        return t
    return edit
