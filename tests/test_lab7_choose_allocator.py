"""Lab 7 (choose an allocator for a trace): the check grades the replay of the learner's choice.

Four tiers:
- in-process, any mode: the run-time half (labchecks.lab7.grade) on canned replay records shaped like what each
  answer's replay shows (made-up numbers for the test, never recorded);
- the whole check (labchecks.lab7.lab7) on a lesson whose replayer runs are canned by their arguments (`Replays`):
  choice.py read for real, in its own process, the replayer's arguments built for real (a run the check asks for
  with other arguments than the canned ones fails the test), the replay canned. Wrong answers that only a run
  catches (over the budget in the cold pass only, a trim that never comes, forgeries) are rejected here, in replay;
- through the notebook (tests/labcheck.py), any mode: the solution passes, right answers written in other styles
  pass (in replay: "All checks passed" where their replayer arguments are the recorded solution's, else "passed
  what could be checked"), and answers wrong before anything runs are rejected with the reason;
- live only (a GPU): wrong and right answers replayed for real.
"""
import contextlib
import io
import json
import sys
from pathlib import Path

import pytest

from labcheck import LIVE, Lab, live_only, passed, regions

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from streamalloc import checks  # noqa: E402
from streamalloc.lesson import Result  # noqa: E402
import streamalloc.labchecks  # noqa: E402,F401  (the package names each lab's function; the module is in sys.modules)
lab7 = sys.modules["streamalloc.labchecks.lab7"]

LAB = Lab("lab7_choose_allocator", "choice.py")
MiB = 1 << 20
MAX = 2**64 - 1
STEPS = lab7.STEPS
EVENTS = len(lab7.trace().events)
FINISH = checks.Report.finish  # a forging choice.py must not replace it in the check's process


def choice(allocator="default", threshold=448 * MiB, reserve=0, trim_every=0, trim_to=0):
    return {"allocator": allocator, "threshold": threshold, "reserve": reserve, "trim_every": trim_every,
            "trim_to": trim_to}


def per_step(held):
    return list(held) if isinstance(held, (list, tuple)) else [held] * STEPS


def record(c, held, grows_warm, us, name=None, cold=None):
    """A replay's record as replay_trace.cu prints it: `held` after each timed step (one value, or STEPS), `cold`
    after each step of the cold pass (default: as timed), read from the timeline at the step ends; between them the
    timeline shows the step's peak, 1040 MiB, which the budget does not judge."""
    timeline = [1040 * MiB] * EVENTS
    for i, h in zip(lab7.syncs(), per_step(held if cold is None else cold)):
        timeline[i] = h
    return {"allocator": name or c["allocator"], "kind": name and "default" or c["allocator"],
            "threshold": c["threshold"], "reserve": c["reserve"], "trim_every": lab7.trims(c), "trim_to": c["trim_to"],
            "steps": STEPS, "events": EVENTS, "step_us": [us] * (3 * STEPS), "held": per_step(held) * 3,
            "peak_reserved": 1040 * MiB, "peak_in_use": 990 * MiB, "grows": grows_warm + 2, "shrinks": grows_warm,
            "grows_warm": grows_warm, "shrinks_warm": grows_warm, "timeline_event": list(range(EVENTS)),
            "timeline_in_use": [0] * EVENTS, "timeline_reserved": timeline}


REFERENCE = [record(choice(threshold=0), 0, 24, 2000.0, "default pool, threshold 0"),
             record(choice(threshold=MAX), 1040 * MiB, 0, 300.0, "default pool, threshold UINT64_MAX")]
SPIKE = [0 if k < 5 else 1024 * MiB for k in range(STEPS)]  # held from the first large request (step 5) on

# (choice, what its replay holds after a step, how often it grows once warm, µs a step; words of the verdict)
WRONG = {
    "threshold 0: gives everything back at each sync": (
        choice(threshold=0), 0, 24, 2000.0, ["driver traffic", "24 times", "speed"]),
    "UINT64_MAX without a trim: keeps the large request's memory": (
        choice(threshold=MAX), 1040 * MiB, 0, 300.0, ["memory: your allocator held", "more than the budget"]),
    "cudaMalloc: every block from the driver": (
        choice("malloc"), 0, 96, 3000.0, ["driver traffic", "96 times"]),
    "a threshold below one step's working set": (
        choice(threshold=64 * MiB), 64 * MiB, 12, 900.0, ["driver traffic", "12 times"]),
    "UINT64_MAX trimmed to 0 after every step": (
        choice(threshold=MAX, trim_every=1, trim_to=0), 0, 24, 1900.0, ["driver traffic", "speed"]),
    "a trim after the large requests that keeps more than the budget": (
        choice(threshold=MAX, trim_every=6, trim_to=768 * MiB), 1040 * MiB, 0, 310.0, ["more than the budget"]),
    "a trim after every 12th step: over the budget from step 5 to step 10, in every pass": (
        choice(threshold=MAX, trim_every=12, trim_to=448 * MiB), [*SPIKE[:11], 448 * MiB], 0, 300.0,
        ["after step 5's synchronization in the cold (first) pass", "24 step end(s) over it", "timed pass 3"]),
}
RIGHT = {
    "the solution: a threshold between the working set and the budget": (choice(), 448 * MiB, 2, 330.0),
    "UINT64_MAX with a trim after every sixth step": (choice(threshold=MAX, trim_every=6, trim_to=448 * MiB),
                                                      448 * MiB, 2, 320.0),
    "a pool of its own, the working set reserved up front": (choice("explicit", 448 * MiB, 256 * MiB), 448 * MiB, 2,
                                                             325.0),
    "UINT64_MAX trimmed to 400 MiB after every step": (choice(threshold=MAX, trim_every=1, trim_to=400 * MiB),
                                                       400 * MiB, 2, 340.0),
}


def graded(c, held, grows, us, cold=None):
    report = checks.Report(lab7.TITLE)
    mine = record(c, held, grows, us, cold=cold)
    lab7.explain(report, c)
    lab7.grade(report, c, REFERENCE, lab7.yours(REFERENCE + [mine], c), "a canned run")
    return report


@pytest.mark.parametrize("name", list(WRONG))
def test_a_wrong_answer_s_replay_is_rejected_with_the_reason(name):
    c, held, grows, us, words = WRONG[name]
    report = graded(c, held, grows, us)
    assert report.failed, str(report)
    text = str(report)
    for w in words:
        assert w in text, f"{name}: {w!r} not in\n{text}"


@pytest.mark.parametrize("name", list(RIGHT))
def test_a_right_answer_s_replay_passes(name):
    report = graded(*RIGHT[name])
    assert not report.failed, str(report)
    assert [m for m, _ in report.marks if m == checks.OK] and "speed:" in str(report)
    assert "in every pass (the cold one and 3 timed)" in str(report)


def test_the_budget_holds_in_the_cold_pass_too():
    """Over the budget after steps 0 to 4 of the first pass only (a reservation kept until the first trim): the run
    alone says so, naming the pass and the step, though every timed pass keeps to the budget."""
    cold = [1024 * MiB] * 5 + [448 * MiB] * 7
    report = checks.Report(lab7.TITLE)
    c = choice("explicit", 448 * MiB, 256 * MiB)  # what explain() finds nothing wrong with: the run decides
    lab7.grade(report, c, REFERENCE, record(c, 448 * MiB, 2, 320.0, cold=cold), "a canned run")
    text = str(report)
    assert report.failed and "after step 0's synchronization in the cold (first) pass" in text, text
    assert "5 step end(s) over it, in the cold (first) pass)" in text, text


def test_only_the_step_ends_count_toward_the_budget():
    """The timeline's values between step ends (1040 MiB in `record`) are what a step needs while it runs."""
    report = graded(choice(), 448 * MiB, 2, 330.0)
    assert not report.failed and "held at most 469,762,048 bytes (448 MiB)" in str(report), str(report)


def test_the_time_target_has_its_margin_from_the_same_run():
    """UINT64_MAX takes 300 µs, threshold 0 2000 µs: the target is 300 + max(75, 425) = 725 µs."""
    assert not graded(choice(), 448 * MiB, 2, 724.0).failed
    assert graded(choice(), 448 * MiB, 2, 726.0).failed


def test_a_replay_of_another_setting_is_not_taken_for_yours():
    report = checks.Report(lab7.TITLE)
    c = choice()
    lab7.grade(report, c, REFERENCE, record(choice(threshold=MAX), 448 * MiB, 2, 300.0), "a canned run")
    assert report.failed and "another setting" in str(report)
    report = checks.Report(lab7.TITLE)
    lab7.grade(report, c, REFERENCE, lab7.yours(REFERENCE, c), "a canned run")
    assert report.failed and "printed no single replay of your setting" in str(report)
    report = checks.Report(lab7.TITLE)  # two records of your setting: neither is taken (no last or first match)
    mine = record(c, 448 * MiB, 2, 320.0)
    lab7.grade(report, c, REFERENCE, lab7.yours(REFERENCE + [mine, mine], c), "a canned run")
    assert report.failed and "printed no single replay" in str(report)


def test_a_trim_period_cut_to_32_bits_is_another_setting():
    """2**32 + 6 steps never comes in a pass of 12: the replayer is asked for 0 (never); a replay that trimmed
    every sixth step (the value cut to an int) is not the one asked for."""
    c = choice(threshold=MAX, trim_every=2**32 + 6, trim_to=448 * MiB)
    report = checks.Report(lab7.TITLE)
    lab7.grade(report, c, REFERENCE, {**record(c, 448 * MiB, 2, 320.0), "trim_every": 6}, "a canned run")
    assert report.failed and "another setting" in str(report)


def test_a_reservation_over_the_budget_is_wrong_before_it_runs_whatever_the_trim():
    for trim_every, trim_to in ((0, 0), (1, 448 * MiB), (6, 0), (2**63, 448 * MiB)):
        report = checks.Report(lab7.TITLE)
        lab7.explain(report, choice("explicit", MAX, 1024 * MiB, trim_every, trim_to))
        assert report.failed and "more than the budget" in str(report), (trim_every, str(report))


def test_the_arguments_name_uint64_max_as_the_replayer_reads_it():
    assert lab7.arguments(choice(threshold=MAX, trim_every=6, trim_to=5)) == ["default", "max", 0, 6, 5]


@pytest.mark.parametrize("every,given", [(0, 0), (1, 1), (6, 6), (12, 12), (13, 0), (2**31, 0), (2**32 + 6, 0),
                                         (2**32 + 1, 0), (MAX, 0)])
def test_trim_every_reaches_the_replayer_as_the_64_bit_value_means(every, given):
    """The replayer reads trim_every into an int (course::arg_int): only a value it holds reaches it. A period
    longer than the trace's 12 steps never trims, as 0 (never) does."""
    assert lab7.arguments(choice(threshold=MAX, trim_every=every, trim_to=5))[3] == given


# -- the whole check, its replays canned by their arguments ------------------------------------------------------
REPLAYER = Lab("lab7_choose_allocator", "replay_trace.cu").cuda()
TRACE_LINE = {"trace_events": EVENTS, "trace_steps": STEPS, "trace_streams": 2, "trace_peak": 1039104000}


class Replays:
    """A lesson whose replay_trace.cu runs are canned, keyed by their arguments after the trace (a run asked with
    others fails the test); choice.py is the answer's, read by the check as in a notebook."""

    live, name = True, "canned"

    def __init__(self, folder, text, runs, replayer=REPLAYER):
        self.build = folder
        (folder / "choice.py").write_text(text)
        (folder / "replay_trace.cu").write_text(replayer)
        self.runs, self.asked = runs, []

    def source(self, file):
        return self.build / file

    def compile(self, file, flags=()):
        return Path("canned")

    def run(self, file, args=(), timeout=120, flags=()):
        key = tuple(str(a) for a in args[1:])
        self.asked.append(key)
        assert key in self.runs, f"the check ran {file} with {key}, not one of {list(self.runs)}"
        out = "".join(json.dumps(r) + "\n" for r in [TRACE_LINE, *self.runs[key]])
        return Result(Path(file).stem, [str(a) for a in args], out, "", 0.1, False, "a canned run")


def whole(tmp_path, text, args=None, mine=None, replayer=REPLAYER):
    """lab7(lesson) on choice.py `text`, its replay `mine` canned for the replayer `args`: (error, printed, lesson)."""
    runs = {("all",): REFERENCE, **({tuple(map(str, args)): [mine]} if args else {})}
    lesson, printed = Replays(tmp_path, text, runs, replayer), io.StringIO()
    with contextlib.redirect_stdout(printed):
        try:
            lab7.lab7(lesson)
            error = None
        except checks.LabIncomplete as e:
            error = e
    assert checks.Report.finish is FINISH, "choice.py replaced Report.finish in the check's process"
    return error, printed.getvalue(), lesson


HEAD = "MiB = 1 << 20\nUINT64_MAX = 2**64 - 1\n"
MAX_TRIMMED_6 = ("default", "max", 0, 6, 448 * MiB)
FORGED = ('{"allocator": "default", "kind": "default", "threshold": 469762048, "reserve": 0, "trim_every": 0, '
          '"trim_to": 0, "steps": 12, "held": [0], "grows_warm": 0, "step_us": [1.0]}')
# (choice.py, the replayer's arguments it must be run with, the replay canned for them, words of the verdict)
CANNED_WRONG = {
    "over the budget only in the cold pass: a reservation kept until the first trim": (
        HEAD + 'allocator = "explicit"\nthreshold = UINT64_MAX\nreserve = 1 << 30\n'
               'trim_every, trim_to = 6, 448 * MiB\n',
        ("explicit", "max", 1 << 30, 6, 448 * MiB),
        record(choice("explicit", MAX, 1 << 30, 6, 448 * MiB), 448 * MiB, 2, 300.0,
               cold=[1 << 30] * 5 + [448 * MiB] * 7),
        ["reserve: 1,073,741,824 bytes (1024 MiB) reserved up front and kept",
         "after step 0's synchronization in the cold (first) pass"]),
    "UINT64_MAX with trim_every 2**32 + 6: a trim every sixth step only as a 32-bit int reads it": (
        HEAD + 'allocator = "default"\nthreshold = UINT64_MAX\nreserve = 0\ntrim_every = 2**32 + 6\n'
               'trim_to = 448 * MiB\n',
        ("default", "max", 0, 0, 448 * MiB),
        record(choice(threshold=MAX, trim_every=2**32 + 6, trim_to=448 * MiB), SPIKE, 0, 300.0),
        ["after step 5's synchronization in the cold (first) pass", "no trim happens"]),
    "UINT64_MAX trimmed after every 12th step, written with numpy": (
        "import numpy as np\n" + HEAD + 'allocator = "default"\nthreshold = np.uint64(UINT64_MAX)\n'
        'reserve = np.int64(0)\ntrim_every, trim_to = np.int32(12), np.int64(448) * MiB\n',
        ("default", "max", 0, 12, 448 * MiB),
        record(choice(threshold=MAX, trim_every=12, trim_to=448 * MiB), [*SPIKE[:11], 448 * MiB], 0, 300.0),
        ["in the cold (first) pass", "timed pass 1"]),
    "a choice.py that replaces Report.finish (UINT64_MAX, no trim)": (
        "import streamalloc.checks\nstreamalloc.checks.Report.finish = lambda self: None\n"
        "import streamalloc.labchecks.lab7 as l\nl.budget = lambda *a: None\n"
        + HEAD + 'allocator = "default"\nthreshold = UINT64_MAX\nreserve = 0\ntrim_every, trim_to = 0, 0\n',
        ("default", "max", 0, 0, 0),
        record(choice(threshold=MAX), 1024 * MiB, 0, 300.0),
        ["memory: your allocator held 1,073,741,824 bytes (1024 MiB) after step 0's synchronization"]),
    "a choice.py that prints a forged record and verdict (UINT64_MAX, no trim)": (
        HEAD + f"print('{FORGED}')\nprint('All checks passed.')\n"
        'allocator = "default"\nthreshold = UINT64_MAX\nreserve = 0\ntrim_every, trim_to = 0, 0\n',
        ("default", "max", 0, 0, 0),
        record(choice(threshold=MAX), 1024 * MiB, 0, 300.0),
        ["memory: your allocator held", "more than the budget"]),
    "a threshold below one step's working set, computed": (
        HEAD + 'allocator = "default"\nthreshold = 2 * 32 * MiB\nreserve = trim_every = trim_to = 0\n',
        ("default", 64 * MiB, 0, 0, 0),
        record(choice(threshold=64 * MiB), 64 * MiB, 12, 900.0),
        ["driver traffic", "12 times"]),
}
CANNED_RIGHT = {
    "UINT64_MAX trimmed every sixth step, numpy's own UINT64_MAX": (
        "import numpy as np\nallocator = 'default'\nthreshold = np.iinfo(np.uint64).max\nreserve = np.uint64(0)\n"
        "trim_every = np.int64(6)\ntrim_to = np.uint64(448 << 20)\n",
        MAX_TRIMMED_6, record(choice(threshold=MAX, trim_every=6, trim_to=448 * MiB), 448 * MiB, 2, 320.0)),
    "a pool of its own through a helper, with the course's MiB": (
        "from streamalloc.measure import MiB\n\ndef pool(keep, reserve):\n    return 'explicit', keep * MiB, "
        "reserve * MiB, 0, 0\n\nallocator, threshold, reserve, trim_every, trim_to = pool(448, 256)\n",
        ("explicit", 448 * MiB, 256 * MiB, 0, 0),
        record(choice("explicit", 448 * MiB, 256 * MiB), 448 * MiB, 2, 325.0)),
}


@pytest.mark.parametrize("name", list(CANNED_WRONG))
def test_the_check_rejects_a_wrong_answer_from_what_its_replay_holds(name, tmp_path):
    text, args, mine, words = CANNED_WRONG[name]
    error, printed, lesson = whole(tmp_path, text, args, mine)
    assert error is not None, f"{name}: not rejected\n{printed}"
    assert lesson.asked[-1] == tuple(map(str, args)), lesson.asked
    for w in words:
        assert w in str(error), f"{name}: {w!r} not in {error}"
    assert "All checks passed" not in printed


@pytest.mark.parametrize("name", list(CANNED_RIGHT))
def test_the_check_passes_a_right_answer_from_what_its_replay_holds(name, tmp_path):
    text, args, mine = CANNED_RIGHT[name]
    error, printed, _ = whole(tmp_path, text, args, mine)
    assert error is None and "All checks passed." in printed, f"{name}: {error}\n{printed}"


def test_an_edited_replayer_is_not_believed(tmp_path):
    """A replayer changed to print a record of its own is refused before it runs: the records are the course's."""
    forged = REPLAYER.replace("int main(int argc, char** argv) {",
                              f'int main(int argc, char** argv) {{\n    std::puts(R"({FORGED})");', 1)
    assert forged != REPLAYER
    text = HEAD + 'allocator = "default"\nthreshold = UINT64_MAX\nreserve = 0\ntrim_every, trim_to = 0, 0\n'
    error, printed, lesson = whole(tmp_path, text, replayer=forged)
    assert error is not None and "is not the course's replayer" in str(error), printed
    assert not lesson.asked
    # comments and spacing are not a change
    error, printed, _ = whole(tmp_path, text, ("default", "max", 0, 0, 0), record(choice(threshold=MAX), 1024 * MiB, 0,
                                                                                   300.0),
                              replayer="// my copy\n" + REPLAYER.replace("    ", "  "))
    assert error is not None and "is not the course's replayer" not in str(error) and "memory:" in str(error)


# -- through the notebook ---------------------------------------------------------------------------------------
def test_the_solution_passes():
    assert "memory: in every pass (the cold one and 3 timed), your allocator held at most" in LAB.passes().printed


def test_the_lab_as_given_is_incomplete():
    LAB.rejected("lab", None, "allocator is None")


def answer(allocator='"default"', threshold="448 * MiB", reserve="0", trims="0, 0"):
    return lambda text: regions(text, [f"allocator = {allocator}", f"threshold = {threshold}", f"reserve = {reserve}",
                                       f"trim_every, trim_to = {trims}"])


def whole_file(text):
    return lambda _: text


BAD_CHOICES = {
    "an allocator the replayer does not have": (answer(allocator='"pool"'), ["allocator is 'pool'"]),
    "a threshold that is not a number of bytes": (answer(threshold='"lots"'), ["threshold is 'lots'",
                                                                              "a whole number of bytes"]),
    "a negative reservation": (answer(reserve="-1"), ["reserve is -1"]),
    "a trim period that is a number of steps, not bytes": (answer(trims="-6, 0"), ["trim_every is -6",
                                                                                  "a whole number of steps"]),
    "a trim period given as True": (answer(trims="True, 448 * MiB"), ["trim_every is True"]),
    "a threshold that is not a whole number": (answer(threshold="1e9 / 3"), ["threshold is 333333333.3"]),
    "choice.py raises": (answer(threshold="448 * MB"), ["choice.py does not run: NameError", "(line 4)"]),
    "choice.py does not parse": (answer(threshold="448 * * MiB"), ["choice.py does not run: SyntaxError"]),
    "a name left out": (whole_file(HEAD + 'allocator = "default"\nthreshold = 448 * MiB\nreserve = trim_every = 0\n'),
                        ["trim_to is not set"]),
    "choice.py ends its process": (whole_file("import os\nos._exit(0)\n"), ["ended its Python process"]),
    "a reservation kept over the budget": (answer(allocator='"explicit"', threshold="UINT64_MAX", reserve="1024 * MiB"),
                                           ["more than the budget"]),
    "a reservation over the budget, trimmed after every step": (
        answer(allocator='"explicit"', threshold="UINT64_MAX", reserve="1024 * MiB", trims="1, 448 * MiB"),
        ["reserve: 1,073,741,824 bytes (1024 MiB) reserved up front and kept", "whatever a trim gives back later"]),
    "a choice.py that replaces Report.finish, with a reservation over the budget": (
        whole_file("import streamalloc.checks\nstreamalloc.checks.Report.finish = lambda self: None\n" + HEAD
                   + 'allocator = "default"\nthreshold = UINT64_MAX\nreserve = 768 * MiB\ntrim_every = 6\n'
                   'trim_to = 448 * MiB\n'),
        ["more than the budget"]),
    "a choice.py that prints what the check reads, with a reservation over the budget": (
        whole_file(HEAD + 'import json\nprint(json.dumps({"allocator": {"str": "default"}, "threshold": {"int": 0}, '
                   '"reserve": {"int": 0}, "trim_every": {"int": 0}, "trim_to": {"int": 0}}))\n'
                   'allocator = "explicit"\nthreshold = reserve = 640 * MiB\ntrim_every, trim_to = 1, 0\n'),
        ["more than the budget"]),
}


@pytest.mark.parametrize("name", list(BAD_CHOICES))
def test_a_choice_the_check_refuses_before_running(name):
    edit, words = BAD_CHOICES[name]
    check = LAB.rejected(name, edit, *words)
    assert "Traceback" not in check.evalue + check.printed
    assert checks.Report.finish is FINISH, "choice.py replaced Report.finish in the check's process"


# Right answers in styles of their own. "recorded": their replayer arguments are the recorded solution's
# (default 469762048 0 0 0), so replay shows that very run and the check passes; the others need a GPU for the run.
STYLES = {
    "numpy integers": (True, whole_file(
        "import numpy as np\nMiB = np.int64(1 << 20)\nallocator = 'default'\nthreshold = np.int64(448) * MiB\n"
        "reserve = np.uint64(0)\ntrim_every, trim_to = np.int32(0), np.int64(0)\n")),
    "shifts": (True, answer(threshold="7 << 26", trims="0 << 20, 0")),
    "computed from the budget": (True, whole_file(
        "MiB = 2**20\nBUDGET = 512 * MiB\nSTEP = 256 * MiB\nallocator = 'default'\n"
        "threshold = BUDGET - (BUDGET - STEP) // 4   # between a step's working set and the budget\n"
        "reserve = 0\ntrim_every = trim_to = 0\n")),
    "constants from a dict": (True, whole_file(
        "SETTINGS = {\n    'allocator': 'default',\n    'threshold': 448 * 1024 * 1024,\n    'reserve': 0,\n"
        "    'trim_every': 0,\n    'trim_to': 0,\n}\nglobals().update(SETTINGS)\n")),
    "one line, comments, a print": (True, whole_file(
        "# my choice\nimport streamalloc.measure as m; print('choosing')\n"
        "allocator, threshold, reserve, trim_every, trim_to = ('default',  # the device's pool\n"
        "    448 * m.MiB, 0, 0, 0)\n")),
    "a float with a whole value": (True, answer(threshold="0.4375 * 2**30")),
    "a trim period longer than the trace (never)": (True, answer(trims="2**40, 0")),
    "a class as a namespace": (True, whole_file(
        "class Pool:\n    kind = 'default'\n    keep = 448 << 20\n\n"
        "allocator, threshold = Pool.kind, Pool.keep\nreserve = trim_every = trim_to = 0\n")),
    "a helper function, a pool of its own": (False, whole_file(
        "def mib(n):\n    return n * 1024 * 1024\n\nallocator = 'explicit'\nthreshold = mib(448)\nreserve = mib(256)\n"
        "trim_every, trim_to = 0, 0\n")),
    "numpy's UINT64_MAX, trimmed after every sixth step": (False, whole_file(
        "import numpy as np\nallocator = 'default'\nthreshold = np.iinfo(np.uint64).max\nreserve = 0\n"
        "trim_every = np.int64(6)\ntrim_to = np.uint64(448 << 20)\n")),
}


@pytest.mark.parametrize("name", list(STYLES))
def test_a_right_answer_in_another_style_passes(name):
    recorded, edit = STYLES[name]
    check = LAB.check(name, edit)
    assert check.ename is None, f"{name}: {check.ename}: {check.evalue}\n{check.printed}"
    if LIVE or recorded:
        assert passed(check.printed), check.printed
    else:
        assert "Passed what could be checked here; not verified without a GPU:" in check.printed, check.printed


LIVE_WRONG = {
    "threshold 0": (answer(threshold="0"), ["driver traffic"]),
    "UINT64_MAX without a trim": (answer(threshold="UINT64_MAX"), ["more than the budget"]),
    "cudaMalloc": (answer(allocator='"malloc"'), ["driver traffic"]),
    "a threshold below the working set": (answer(threshold="64 * MiB"), ["driver traffic"]),
    "trimmed to 0 after every step": (answer(threshold="UINT64_MAX", trims="1, 0"), ["driver traffic"]),
    "a trim that keeps more than the budget": (answer(threshold="UINT64_MAX", trims="6, 768 * MiB"),
                                               ["more than the budget"]),
    "a trim after every 12th step": (answer(threshold="UINT64_MAX", trims="12, 448 * MiB"),
                                     ["in the cold (first) pass"]),
    "trim_every 2**32 + 6": (answer(threshold="UINT64_MAX", trims="2**32 + 6, 448 * MiB"), ["no trim happens"]),
    "a reservation kept until the first trim": (
        answer(allocator='"explicit"', threshold="UINT64_MAX", reserve="1 << 30", trims="6, 448 * MiB"),
        ["in the cold (first) pass"]),
}
LIVE_RIGHT = {
    "UINT64_MAX with a trim after every sixth step": answer(threshold="UINT64_MAX", trims="6, 448 * MiB"),
    "a pool of its own with the working set reserved": answer(allocator='"explicit"', reserve="256 * MiB"),
    "UINT64_MAX trimmed to 400 MiB after every step": answer(threshold="UINT64_MAX", trims="1, 400 * MiB"),
    "the threshold written as the budget minus a margin": answer(threshold="(512 - 64) << 20"),
    "numpy's UINT64_MAX trimmed after every sixth step":
        STYLES["numpy's UINT64_MAX, trimmed after every sixth step"][1],
}


@live_only
@pytest.mark.parametrize("name", list(LIVE_WRONG))
def test_live_a_wrong_answer_is_rejected(name):
    edit, words = LIVE_WRONG[name]
    LAB.rejected(name, edit, *words)


@live_only
@pytest.mark.parametrize("name", list(LIVE_RIGHT))
def test_live_a_right_answer_passes(name):
    LAB.passes(name, LIVE_RIGHT[name])
