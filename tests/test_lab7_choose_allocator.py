"""Lab 7 (choose an allocator for a trace): the check grades the replay of the learner's choice.

Every answer's choice.py is written once, in ANSWERS; the tiers name the answers they try:
- in-process, any mode: the run-time half (labchecks.lab7.grade) on canned replay records shaped like what each
  answer's replay shows (made-up numbers for the test, never recorded), in the replayer's format: `steps` values of
  "held" for each pass that "passes" names (the first, sampled cold pass, then each round's cold and warm passes);
- the whole check (labchecks.lab7.lab7) on a lesson whose replayer runs are canned by their trace and arguments
  (`replays`): choice.py read for real, in its own process, the replayer's arguments built for real (a run the check
  asks for with other arguments than the canned ones fails the test), the replay canned. Wrong answers that only a
  run catches (over the budget in a cold pass only, a trim that never comes, forgeries) are rejected here, in replay,
  and a learner's own trace is read and shown, never graded;
- through the notebook (tests/labcheck.py), any mode: the solution passes, right answers written in other styles
  pass (in replay: "All checks passed" where their replayer arguments are the recorded solution's, else "passed
  what could be checked"), and answers wrong before anything runs are rejected with the reason;
- live only (a GPU): wrong and right answers replayed for real.
"""
import contextlib
import io
import json
import sys
import time
from pathlib import Path

import pytest

from labcheck import LIVE, Lab, all_passed, live_only, passed, unverified
from notebook import StandIn

from streamalloc import checks, traces
import streamalloc.labchecks  # noqa: F401  (the package names each lab's function; the module is in sys.modules)

ROOT = Path(__file__).resolve().parent.parent
lab7 = sys.modules["streamalloc.labchecks.lab7"]

LAB = Lab("lab7_choose_allocator", "choice.py")
MiB = 1 << 20
MAX = 2**64 - 1
STEPS = lab7.STEPS
EVENTS = len(lab7.trace().events)
FINISH = checks.Report.finish  # a forging choice.py must not replace it in the check's process
ROUNDS, WARM = 5, 3  # the canned replays' rounds, and each round's warm passes
PASSES = ["cold, sampled"] + [f"round {r} {p}" for r in range(1, ROUNDS + 1)
                              for p in ("cold", *(f"warm {k}" for k in range(1, WARM + 1)))]
COLD = sum("cold" in p for p in PASSES)


def choice(allocator="default", threshold=448 * MiB, reserve=0, trim_every=0, trim_to=0):
    return {"allocator": allocator, "threshold": threshold, "reserve": reserve, "trim_every": trim_every,
            "trim_to": trim_to}


def per_step(held):
    return list(held) if isinstance(held, (list, tuple)) else [held] * STEPS


def record(c, held, grows_warm, us, name=None, cold=None, passes=None):
    """A replay's record as replay_trace.cu prints it: `held` after each step of each warm pass (one value, or
    STEPS), `cold` after each step of each cold pass (default: as warm), `passes` {pass: STEPS values} for single
    passes; `us` a round's median µs a step (one value for every round, or ROUNDS). The timeline, sampled after
    every event of the first pass, shows the step's peak, 1040 MiB, which the budget does not judge."""
    warm, cold = per_step(held), per_step(held if cold is None else cold)
    by = {**{p: cold if "cold" in p else warm for p in PASSES}, **(passes or {})}
    rounds = list(us) if isinstance(us, (list, tuple)) else [us] * ROUNDS
    return {"allocator": name or c["allocator"], "kind": name and "default" or c["allocator"],
            **{k: c[k] for k in ("threshold", "reserve", "trim_every", "trim_to")},
            "steps": STEPS, "events": EVENTS, "rounds": ROUNDS, "work_us": 0,
            "step_us": [u for u in rounds for _ in range(WARM * STEPS)], "round_us": rounds,
            "cold_us": [u * STEPS * 4 for u in rounds], "passes": PASSES, "held": [h for p in PASSES for h in by[p]],
            "peak_reserved": 1040 * MiB, "peak_in_use": 990 * MiB, "grows": grows_warm + 2, "shrinks": grows_warm,
            "grows_warm": grows_warm, "shrinks_warm": grows_warm, "timeline_event": list(range(EVENTS)),
            "timeline_in_use": [0] * EVENTS, "timeline_reserved": [1040 * MiB] * EVENTS}


REFERENCE = [record(choice(threshold=0), 0, 24, 2000.0, "default pool, threshold 0"),
             record(choice(threshold=MAX), 1040 * MiB, 0, 300.0, "default pool, threshold UINT64_MAX")]
SPIKE = [0 if k < 5 else 1024 * MiB for k in range(STEPS)]  # held from the first large request (step 6) on

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
    "a threshold over the budget: keeps 768 MiB of the large request": (
        choice(threshold=768 * MiB), [768 * MiB if h else 300 * MiB for h in SPIKE], 0, 300.0,
        ["held 805,306,368 bytes (768 MiB) after the synchronization that ends step 6 of 12"]),
    "UINT64_MAX trimmed to 0 after every step": (
        choice(threshold=MAX, trim_every=1, trim_to=0), 0, 24, 1900.0, ["driver traffic", "speed"]),
    "a trim after the large requests that keeps more than the budget": (
        choice(threshold=MAX, trim_every=6, trim_to=768 * MiB), 1040 * MiB, 0, 310.0, ["more than the budget"]),
    "a trim after every 12th step: over the budget from step 6 to step 11, in every pass": (
        choice(threshold=MAX, trim_every=12, trim_to=448 * MiB), [*SPIKE[:11], 448 * MiB], 0, 300.0,
        ['ends step 6 of 12 in pass "cold, sampled"', f"{6 * len(PASSES)} step end(s) over it",
         f"in every one of its {len(PASSES)} passes"]),
}
RIGHT = {
    "the solution: a threshold between the working set and the budget": (choice(), 448 * MiB, 2, 330.0),
    "UINT64_MAX with a trim after every sixth step": (choice(threshold=MAX, trim_every=6, trim_to=448 * MiB),
                                                      448 * MiB, 2, 320.0),
    "a pool of its own, the working set reserved up front": (choice("explicit", 448 * MiB, 256 * MiB), 448 * MiB, 2,
                                                             325.0),
    "UINT64_MAX trimmed to 400 MiB after every step": (choice(threshold=MAX, trim_every=1, trim_to=400 * MiB),
                                                       400 * MiB, 2, 340.0),
    "a trim period of UINT64_MAX steps (never), a threshold within the budget": (
        choice(trim_every=MAX), 448 * MiB, 2, 330.0),
}


def graded(c, held, grows, us, /, cold=None, **changed):
    """The run-time half on a canned replay of `c` (with `changed` keys of its record replaced)."""
    report = checks.Report(lab7.TITLE)
    mine = {**record(c, held, grows, us, cold=cold), **changed}
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
    assert f"in every one of its {len(PASSES)} passes ({COLD} cold, each from a fresh state" in str(report)
    assert not [m for m, _ in report.marks if m == checks.UNVERIFIED], str(report)


def test_the_budget_holds_in_the_cold_passes_too():
    """Over the budget after steps 1 to 5 of each cold pass only (a reservation kept until the first trim): the run
    alone says so, naming the pass and the step, though every warm pass keeps to the budget."""
    cold = [1024 * MiB] * 5 + [448 * MiB] * 7
    report = checks.Report(lab7.TITLE)
    c = choice("explicit", 448 * MiB, 256 * MiB)  # what explain() finds nothing wrong with: the run decides
    lab7.grade(report, c, REFERENCE, record(c, 448 * MiB, 2, 320.0, cold=cold), "a canned run")
    text = str(report)
    assert report.failed and 'the synchronization that ends step 1 of 12 in pass "cold, sampled"' in text, text
    assert f'{5 * COLD} step end(s) over it, in "cold, sampled", "round 1 cold", "round 2 cold" and 3 more' in text


def test_one_round_s_cold_pass_over_the_budget_is_found():
    """A breach in one pass of the 21 (round 3's cold pass, its last step) is named with its pass and step."""
    c = choice()
    report = checks.Report(lab7.TITLE)
    mine = record(c, 448 * MiB, 2, 330.0, passes={"round 3 cold": [448 * MiB] * 11 + [BUDGET_PLUS_ONE]})
    lab7.grade(report, c, REFERENCE, mine, "a canned run")
    text = str(report)
    assert report.failed and 'ends step 12 of 12 in pass "round 3 cold"' in text, text
    assert '(1 step end(s) over it, in "round 3 cold")' in text, text


BUDGET_PLUS_ONE = lab7.BUDGET + 1


@pytest.mark.parametrize("case,changed,missing", [
    ("the last pass cut short", lambda r: {"held": r["held"][:-1]}, '"round 5 warm 3"'),
    ("a step end that is null", lambda r: {"held": [None] + r["held"][1:]}, '"cold, sampled"'),
    ("no passes named", lambda r: {"passes": []}, "a cold pass (the record names none)"),
    ("no held at all", lambda r: {"held": None, "passes": None}, "names no passes with their step ends"),
    ("no cold pass named", lambda r: {"passes": [p.replace("cold", "first") for p in PASSES]},
     "a cold pass (the record names none)"),
])
def test_a_pass_whose_step_ends_are_missing_is_not_verified(case, changed, missing):
    """Never passed: the budget may have broken where nothing was recorded."""
    c = choice()
    mine = record(c, 448 * MiB, 2, 330.0)
    report = graded(c, 448 * MiB, 2, 330.0, **changed(mine))
    text = str(report)
    assert not report.failed, text
    unverified = [t for m, t in report.marks if m == checks.UNVERIFIED]
    assert unverified and unverified[0].startswith("the memory held after each step of every pass"), text
    assert missing in unverified[0], text
    assert "in every one of its" not in text, text


def test_a_breach_in_a_pass_cut_short_is_still_wrong():
    c = choice(threshold=MAX)
    mine = record(c, 1040 * MiB, 0, 300.0)
    report = graded(c, 1040 * MiB, 0, 300.0, held=mine["held"][:5])
    assert report.failed and 'in pass "cold, sampled"' in str(report), str(report)


def test_only_the_step_ends_count_toward_the_budget():
    """The timeline's values (1040 MiB in `record`: what a step needs while it runs) are not step ends."""
    report = graded(choice(), 448 * MiB, 2, 330.0)
    assert not report.failed and "held at most 469,762,048 bytes (448 MiB)" in str(report), str(report)


def test_the_time_target_has_its_margin_from_the_same_run():
    """UINT64_MAX takes 300 µs, threshold 0 2000 µs: the target is 300 + max(75, 425) = 725 µs. A miss under 5 % of
    yours is too close to call (not verified, never wrong); 770 µs, 45 µs over, is past it."""
    assert not graded(choice(), 448 * MiB, 2, 724.0).failed
    close = graded(choice(), 448 * MiB, 2, 726.0)
    assert not close.failed and "Yours is 1.0 µs over the target, less than 5% of yours (36.3 µs)" in str(close)
    assert graded(choice(), 448 * MiB, 2, 770.0).failed


def test_the_speed_s_repeats_are_the_rounds_not_the_steps():
    """The steps of a round vary with the trace (a large request's step is slow): that spread is no margin. The
    rounds' medians decide: 800 µs in every round is 75 µs over the 725 µs target, whatever the steps' spread; rounds
    that spread from 700 to 900 µs (median 800) leave it to the noise (not verified, never wrong). Your replay is a
    run of its own, not paired with the reference replays' rounds: the spread is the margin."""
    steps = [100.0, 5000.0] * (ROUNDS * WARM * STEPS // 2)
    report = graded(choice(), 448 * MiB, 2, 800.0, step_us=steps)
    assert report.failed and "Yours is 75.0 µs over the target, more than the 0.0 µs spread" in str(report), str(report)
    report = graded(choice(), 448 * MiB, 2, [700.0, 750.0, 800.0, 850.0, 900.0])
    text = str(report)
    assert not report.failed and "not verified" in text and "the median of 5 rounds' medians" in text, text
    assert "Yours is 75.0 µs over the target, within the 100.0 µs spread of the repeats" in text, text


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
    """The replayer reads trim_every as the 64-bit count it is: a replay that trimmed every sixth step when asked
    for 2**32 + 6 (the value cut to 32 bits) is not the one asked for."""
    c = choice(threshold=MAX, trim_every=2**32 + 6, trim_to=448 * MiB)
    report = checks.Report(lab7.TITLE)
    lab7.grade(report, c, REFERENCE, {**record(c, 448 * MiB, 2, 320.0), "trim_every": 6}, "a canned run")
    assert report.failed and "another setting" in str(report)


TRIMS = [(0, 0), (1, 0), (1, 448 * MiB), (6, 0), (6, 448 * MiB), (12, 0), (13, 448 * MiB), (2**32 + 6, 448 * MiB),
         (2**63, 0), (MAX, 448 * MiB)]


@pytest.mark.parametrize("trim_every,trim_to", TRIMS)
@pytest.mark.parametrize("allocator,threshold,reserve", [("explicit", MAX, 1024 * MiB), ("default", MAX, 768 * MiB),
                                                         ("explicit", 600 * MiB, 1024 * MiB),
                                                         ("explicit", 513 * MiB, 513 * MiB)])
def test_a_reservation_over_the_budget_is_wrong_before_it_runs_whatever_the_trim(allocator, threshold, reserve,
                                                                                  trim_every, trim_to):
    """The pool keeps min(reserve, threshold) from the reservation's synchronization on, before each round's first
    step: no trim, which comes after a step, undoes that."""
    report = checks.Report(lab7.TITLE)
    lab7.explain(report, choice(allocator, threshold, reserve, trim_every, trim_to))
    text = str(report)
    assert report.failed and "more than the budget" in text and "from before the first step of every round" in text
    assert ("too late" in text) == (0 < trim_every <= STEPS), text


@pytest.mark.parametrize("trim_every,trim_to", TRIMS)
def test_a_reservation_the_threshold_gives_back_at_once_is_a_note(trim_every, trim_to):
    """1 GiB reserved at a threshold of 448 MiB: the synchronization after the reservation keeps 448 MiB at most."""
    report = checks.Report(lab7.TITLE)
    lab7.explain(report, choice("explicit", 448 * MiB, 1024 * MiB, trim_every, trim_to))
    assert not report.failed and "goes back at once" in str(report), str(report)


def test_the_arguments_name_uint64_max_as_the_replayer_reads_it():
    assert lab7.arguments(choice(threshold=MAX, trim_every=6, trim_to=5)) == ["default", "max", 0, 6, 5]


@pytest.mark.parametrize("every", [0, 1, 6, 12, 13, 2**31, 2**32 + 6, 2**32 + 1, 2**63, MAX])
def test_trim_every_reaches_the_replayer_as_the_64_bit_value_it_is(every):
    """The replayer reads trim_every as a 64-bit count of steps: every value goes as given."""
    assert lab7.arguments(choice(threshold=MAX, trim_every=every, trim_to=5))[3] == every


# -- every answer's choice.py, once ------------------------------------------------------------------------------
HEAD = "MiB = 1 << 20\nUINT64_MAX = 2**64 - 1\n"
OWN = ROOT / "build" / "lab7-tests" / "my-service.trace"  # a learner's own trace, written by the tests that use it
BAD_OWN = ROOT / "build" / "lab7-tests" / "broken.trace"
FORGED = ('{"allocator": "default", "kind": "default", "threshold": 469762048, "reserve": 0, "trim_every": 0, '
          '"trim_to": 0, "steps": 12, "passes": ["cold, sampled"], "held": [0], "grows_warm": 0, "round_us": [1.0]}')


def simple(allocator='"default"', threshold="448 * MiB", reserve="0", trims="0, 0", extra=""):
    return (HEAD + f"allocator = {allocator}\nthreshold = {threshold}\nreserve = {reserve}\n"
            f"trim_every, trim_to = {trims}\n" + extra)


ANSWERS = {
    # right
    "the solution": simple(),
    "numpy integers": (
        "import numpy as np\nMiB = np.int64(1 << 20)\nallocator = 'default'\nthreshold = np.int64(448) * MiB\n"
        "reserve = np.uint64(0)\ntrim_every, trim_to = np.int32(0), np.int64(0)\n"),
    "shifts": simple(threshold="7 << 26", trims="0 << 20, 0"),
    "computed from the budget": (
        "MiB = 2**20\nBUDGET = 512 * MiB\nSTEP = 256 * MiB\nallocator = 'default'\n"
        "threshold = BUDGET - (BUDGET - STEP) // 4   # between a step's working set and the budget\n"
        "reserve = 0\ntrim_every = trim_to = 0\n"),
    "a helper function computing the threshold": (
        "def keep(budget_mib, step_mib):\n    # three quarters of the way from one step's needs to the budget\n"
        "    return (step_mib + (budget_mib - step_mib) * 3 // 4) << 20\n\n"
        "allocator = 'default'\nthreshold = keep(512, 256)\nreserve = trim_every = trim_to = 0\n"),
    "constants from a dict": (
        "SETTINGS = {\n    'allocator': 'default',\n    'threshold': 448 * 1024 * 1024,\n    'reserve': 0,\n"
        "    'trim_every': 0,\n    'trim_to': 0,\n}\nglobals().update(SETTINGS)\n"),
    "a dict unpacked into names": (
        "S = dict(allocator='default', threshold=448 << 20, reserve=0, trim_every=0, trim_to=0)\n"
        "allocator, threshold, reserve, trim_every, trim_to = (S[k] for k in\n"
        "    ('allocator', 'threshold', 'reserve', 'trim_every', 'trim_to'))\n"),
    "one line, comments, a print": (
        "# my choice\nimport streamalloc.measure as m; print('choosing')\n"
        "allocator, threshold, reserve, trim_every, trim_to = ('default',  # the device's pool\n"
        "    448 * m.MiB, 0, 0, 0)\n"),
    "a float with a whole value": simple(threshold="0.4375 * 2**30"),
    "a class as a namespace": (
        "class Pool:\n    kind = 'default'\n    keep = 448 << 20\n\n"
        "allocator, threshold = Pool.kind, Pool.keep\nreserve = trim_every = trim_to = 0\n"),
    "a trim period longer than the trace (never)": simple(trims="2**40, 0"),
    "trim_every as np.uint64(UINT64_MAX) (never)": (
        "import numpy as np\nallocator = 'default'\nthreshold = 448 << 20\nreserve = 0\n"
        "trim_every = np.uint64(2**64 - 1)\ntrim_to = 0\n"),
    "a helper function, a pool of its own": (
        "def mib(n):\n    return n * 1024 * 1024\n\nallocator = 'explicit'\nthreshold = mib(448)\nreserve = mib(256)\n"
        "trim_every, trim_to = 0, 0\n"),
    "a pool of its own, a reservation within the budget and a trim": (
        "import numpy as np\nMiB = 1 << 20\nallocator = 'explicit'\nthreshold = np.uint64(2**64 - 1)\n"
        "reserve = 256 * MiB\ntrim_every = np.uint64(6)\ntrim_to = np.int64(448) * MiB\n"),
    "numpy's UINT64_MAX, trimmed after every sixth step": (
        "import numpy as np\nallocator = 'default'\nthreshold = np.iinfo(np.uint64).max\nreserve = 0\n"
        "trim_every = np.int64(6)\ntrim_to = np.uint64(448 << 20)\n"),
    "UINT64_MAX trimmed to 400 MiB after every step": simple(threshold="UINT64_MAX", trims="1, 400 * MiB"),
    "the threshold written as the budget minus a margin": simple(threshold="(512 - 64) << 20"),
    "the solution, with a trace of one's own": simple(extra=f"trace = {str(OWN)!r}\n"),
    "the solution, with a trace of one's own as a pathlib.Path": simple(
        extra=f"import pathlib\ntrace = pathlib.Path({str(OWN)!r})\n"),
    "the solution, with a trace file that is not a trace": simple(extra=f"trace = {str(BAD_OWN)!r}\n"),
    "the solution, with a trace file that is not there": simple(extra="trace = 'no/such/file.trace'\n"),
    "the solution, with a trace that is a number": simple(extra="trace = 5\n"),
    "the solution, trace left at None": simple(extra="trace = None\n"),
    # wrong: refused before anything runs
    "an allocator the replayer does not have": simple(allocator='"pool"'),
    "the allocator given as True": simple(allocator="True"),
    "a threshold that is not a number of bytes": simple(threshold='"lots"'),
    "a threshold written as a string of digits": simple(threshold='"469762048"'),
    "a negative threshold": simple(threshold="-1"),
    "a threshold above UINT64_MAX": simple(threshold="2**64"),
    "a threshold above UINT64_MAX, as a float": simple(threshold="2.0**64"),
    "a negative reservation": simple(reserve="-1"),
    "a trim period that is a number of steps, not bytes": simple(trims="-6, 0"),
    "a trim period given as True": simple(trims="True, 448 * MiB"),
    "a trim period given as numpy's True": "import numpy as np\n" + simple(trims="np.True_, 448 * MiB"),
    "a trim period of 2.5 steps": simple(trims="2.5, 448 * MiB"),
    "a trim period of np.float64(2.5) steps": "import numpy as np\n" + simple(trims="np.float64(2.5), 448 * MiB"),
    "a threshold that is not a whole number": simple(threshold="1e9 / 3"),
    "choice.py raises": simple(threshold="448 * MB"),
    "choice.py does not parse": simple(threshold="448 * * MiB"),
    "a name left out": HEAD + 'allocator = "default"\nthreshold = 448 * MiB\nreserve = trim_every = 0\n',
    "choice.py ends its process": "import os\nos._exit(0)\n",
    "a reservation kept over the budget": simple('"explicit"', "UINT64_MAX", "1024 * MiB"),
    "a reservation over the budget, trimmed after every step": simple('"explicit"', "UINT64_MAX", "1024 * MiB",
                                                                      "1, 448 * MiB"),
    "a reservation over the budget, kept by a threshold over it, trimmed after every sixth step": simple(
        '"default"', "640 * MiB", "1024 * MiB", "6, 0"),
    "a choice.py that replaces Report.finish, with a reservation over the budget": (
        "import streamalloc.checks\nstreamalloc.checks.Report.finish = lambda self: None\n" + HEAD
        + 'allocator = "default"\nthreshold = UINT64_MAX\nreserve = 768 * MiB\ntrim_every = 6\ntrim_to = 448 * MiB\n'),
    "a choice.py that prints what the check reads, with a reservation over the budget": (
        HEAD + 'import json\nprint(json.dumps({"allocator": {"str": "default"}, "threshold": {"int": 0}, '
        '"reserve": {"int": 0}, "trim_every": {"int": 0}, "trim_to": {"int": 0}}))\n'
        'allocator = "explicit"\nthreshold = reserve = 640 * MiB\ntrim_every, trim_to = 1, 0\n'),
    # wrong: only the run shows it
    "threshold 0": simple(threshold="0"),
    "UINT64_MAX without a trim": simple(threshold="UINT64_MAX"),
    "cudaMalloc": simple(allocator='"malloc"'),
    "a threshold below the working set, computed": simple(threshold="2 * 32 * MiB"),
    "a threshold over the budget": simple(threshold="768 * MiB"),
    "trimmed to 0 after every step": simple(threshold="UINT64_MAX", trims="1, 0"),
    "a trim that keeps more than the budget": simple(threshold="UINT64_MAX", trims="6, 768 * MiB"),
    "a trim after every 12th step, written with numpy": (
        "import numpy as np\n" + HEAD + 'allocator = "default"\nthreshold = np.uint64(UINT64_MAX)\n'
        'reserve = np.int64(0)\ntrim_every, trim_to = np.int32(12), np.int64(448) * MiB\n'),
    "trim_every 2**32 + 6 (never, in 12 steps)": simple(threshold="UINT64_MAX", trims="2**32 + 6, 448 * MiB"),
    "a reservation within the budget, over it in the cold passes until the first trim": simple(
        '"explicit"', "UINT64_MAX", "512 * MiB", "6, 448 * MiB"),
    "a choice.py that replaces Report.finish and the budget (UINT64_MAX, no trim)": (
        "import streamalloc.checks\nstreamalloc.checks.Report.finish = lambda self: None\n"
        "import streamalloc.labchecks.lab7 as l\nl.budget = lambda *a: None\n" + simple(threshold="UINT64_MAX")),
    "a choice.py that prints a forged record and verdict (UINT64_MAX, no trim)": (
        f"print('{FORGED}')\nprint('All checks passed.')\n" + simple(threshold="UINT64_MAX")),
    "UINT64_MAX without a trim, with a trace of one's own": simple(threshold="UINT64_MAX",
                                                                   extra=f"trace = {str(OWN)!r}\n"),
    "UINT64_MAX without a trim, with a trace file that is not a trace": simple(threshold="UINT64_MAX",
                                                                               extra=f"trace = {str(BAD_OWN)!r}\n"),
}


@pytest.fixture
def own_traces():
    """The learner's own traces that ANSWERS name: a good one (two steps, one stream) and one that is not a trace."""
    OWN.parent.mkdir(parents=True, exist_ok=True)
    OWN.write_text("# my service\n# written by hand\n"
                   "a 0 1048576 0\na 1 2097152 0\nf 0\nf 1\ns\na 2 4194304 0\nf 2\ns\n")
    BAD_OWN.write_text("# broken\na 0 1048576 0\nfree 0\ns\n")
    return OWN


# -- answers refused before anything runs: the whole check, and through the notebook -----------------------------
REFUSED = {
    "an allocator the replayer does not have": ["allocator is 'pool'"],
    "the allocator given as True": ["allocator is True: choose one of 'malloc', 'default', 'explicit'"],
    "a threshold that is not a number of bytes": ["threshold is 'lots'", "a whole number of bytes"],
    "a threshold written as a string of digits": ["threshold is '469762048': it must be a whole number of bytes"],
    "a negative threshold": ["threshold is -1: it must be a whole number of bytes from 0 to UINT64_MAX"],
    "a threshold above UINT64_MAX": ["threshold is 18446744073709551616: it must be"],
    "a threshold above UINT64_MAX, as a float": ["threshold is 18446744073709551616: it must be"],
    "a negative reservation": ["reserve is -1"],
    "a trim period that is a number of steps, not bytes": ["trim_every is -6", "a whole number of steps"],
    "a trim period given as True": ["trim_every is True: it must be a whole number of steps"],
    "a trim period given as numpy's True": ["trim_every is np.True_: it must be a whole number of steps"],
    "a trim period of 2.5 steps": ["trim_every is 2.5: it must be a whole number of steps"],
    "a trim period of np.float64(2.5) steps": ["trim_every is np.float64(2.5): it must be a whole number of steps"],
    "a threshold that is not a whole number": ["threshold is 333333333.3"],
    "choice.py raises": ["choice.py does not run: NameError", "(line 4)"],
    "choice.py does not parse": ["choice.py does not run: SyntaxError"],
    "a name left out": ["trim_to is not set"],
    "choice.py ends its process": ["ended its Python process"],
    "a reservation kept over the budget": ["more than the budget"],
    "a reservation over the budget, trimmed after every step": [
        "reserve: 1,073,741,824 bytes (1024 MiB) reserved up front and kept", "whatever a trim gives back later",
        "a trim after every 1 step(s) comes only after a step, too late"],
    "a reservation over the budget, kept by a threshold over it, trimmed after every sixth step": [
        "the pool holds 671,088,640 bytes (640 MiB) from before the first step of every round"],
    "a choice.py that replaces Report.finish, with a reservation over the budget": ["more than the budget"],
    "a choice.py that prints what the check reads, with a reservation over the budget": ["more than the budget"],
}
NO_RUN = {k for k in REFUSED if "reservation" not in k}  # refused before the replayer is even asked for


# -- the whole check, its replays canned by their trace and arguments ------------------------------------------
REPLAYER = Lab("lab7_choose_allocator", "replay_trace.cu").cuda()
TRACE_LINE = {"trace_events": EVENTS, "trace_steps": STEPS, "trace_streams": 2, "trace_peak": 1039104000}
SPIKY = f"{traces.slug(lab7.trace().name)}.trace"


def replays(folder, text, runs, replayer=REPLAYER, live=True, refuse=None):
    """A lesson whose replay_trace.cu runs are canned, keyed by their arguments after the trace, and, for a trace
    other than the spiky service, by the trace file's name first (a run asked with others fails the test; `keys`:
    those asked, in order); choice.py is the answer's, read by the check as in a notebook. A run on the trace file
    named `refuse` raises what the replayer says of a bad trace."""
    keys = []

    def outputs(file, args):
        trace = Path(str(args[0])).name
        if trace == refuse:
            raise checks.CourseError("replay_trace exited with status 2: my-service.trace:3: too many streams")
        key = (() if trace == SPIKY else (trace,)) + tuple(str(a) for a in args[1:])
        keys.append(key)
        assert key in runs, f"the check ran {file} with {key}, not one of {list(runs)}"
        return [TRACE_LINE, *runs[key]]
    lesson = StandIn(folder, outputs, live=live, label="a canned run",
                     files={"choice.py": text, "replay_trace.cu": replayer})
    lesson.keys = keys
    return lesson


def whole(tmp_path, text, c=None, mine=None, replayer=REPLAYER, own=None, live=True):
    """lab7(lesson) on choice.py `text`, its replay `mine` canned for the arguments of choice `c`, and `own` canned
    for the same arguments on the learner's trace OWN: (error, printed, lesson)."""
    args = tuple(map(str, lab7.arguments(c))) if c else None
    runs = {("all",): REFERENCE, **({args: [mine]} if c else {}), **({(OWN.name, *args): [own]} if own else {})}
    lesson, printed = replays(tmp_path, text, runs, replayer, live), io.StringIO()
    with contextlib.redirect_stdout(printed):
        try:
            lab7.lab7(lesson)
            error = None
        except checks.LabIncomplete as e:
            error = e
    assert checks.Report.finish is FINISH, "choice.py replaced Report.finish in the check's process"
    return error, printed.getvalue(), lesson


class AnySetting(dict):
    """Canned runs for a refused choice whose replay still goes ahead (explain() has said what is wrong; the run's
    figures are shown): the references, and `mine` for whatever setting the check asks for, as asked."""

    def __init__(self, mine):
        super().__init__({("all",): REFERENCE})
        self.mine = mine

    def __contains__(self, key):
        return True

    def __getitem__(self, key):
        if key == ("all",):
            return REFERENCE
        kind, threshold, reserve, every, to = key
        return [{**self.mine, "allocator": kind, "kind": kind, "reserve": int(reserve), "trim_every": int(every),
                 "threshold": MAX if threshold == "max" else int(threshold), "trim_to": int(to)}]


@pytest.mark.parametrize("name", list(REFUSED))
def test_the_check_refuses_a_wrong_choice_with_the_reason(name, tmp_path):
    lesson = replays(tmp_path, ANSWERS[name], AnySetting(record(choice(), 1024 * MiB, 0, 300.0)))
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), pytest.raises(checks.LabIncomplete) as e:
        lab7.lab7(lesson)
    for w in REFUSED[name]:
        assert w in str(e.value), f"{name}: {w!r} not in {e.value}"
    assert "Traceback" not in str(e.value) + printed.getvalue()
    assert name not in NO_RUN or not lesson.keys, lesson.keys
    assert checks.Report.finish is FINISH, "choice.py replaced Report.finish in the check's process"


def test_a_choice_py_that_leaves_a_daemon_is_read_in_time_and_the_daemon_ends_with_it(tmp_path):
    """choice.py runs as lesson.run runs a Python program (streamalloc/launcher.py): a daemon it leaves (setsid, its
    stdout held) is killed when choice.py ends, and the check reads the settings as it would without it."""
    pid_file = tmp_path / "daemon.pid"
    daemon = (f"import os, time\nif os.fork() == 0:\n    os.setsid()\n    open({str(pid_file)!r}, 'w').write(str(os.getpid()))"
              "\n    time.sleep(600)\n    os._exit(0)\n")
    lesson = replays(tmp_path, daemon + simple(), {})
    report = checks.Report(lab7.TITLE, lesson)
    t0 = time.perf_counter()
    found = lab7.read_choice(report, lesson)
    assert time.perf_counter() - t0 < 10 and not report.failed, str(report)
    assert found and found["threshold"] == 448 * MiB, found
    assert not Path(f"/proc/{pid_file.read_text()}").exists() or " Z " in Path(
        f"/proc/{pid_file.read_text()}/stat").read_text(), "the daemon choice.py left still runs"


# (the choice its choice.py means, what its replay holds after a step, its growths once warm, µs a step, what the cold
# passes hold; words of the verdict)
CANNED_WRONG = {
    "a reservation within the budget, over it in the cold passes until the first trim": (
        choice("explicit", MAX, 512 * MiB, 6, 448 * MiB), 448 * MiB, 2, 300.0, [1100 * MiB] * 5 + [448 * MiB] * 7,
        ['ends step 1 of 12 in pass "cold, sampled"', f"{5 * COLD} step end(s) over it"]),
    "trim_every 2**32 + 6 (never, in 12 steps)": (
        choice(threshold=MAX, trim_every=2**32 + 6, trim_to=448 * MiB), SPIKE, 0, 300.0, None,
        ['ends step 6 of 12 in pass "cold, sampled"', "no trim happens"]),
    "a trim after every 12th step, written with numpy": (
        choice(threshold=MAX, trim_every=12, trim_to=448 * MiB), [*SPIKE[:11], 448 * MiB], 0, 300.0, None,
        ['in pass "cold, sampled"', f"in every one of its {len(PASSES)} passes"]),
    "a choice.py that replaces Report.finish and the budget (UINT64_MAX, no trim)": (
        choice(threshold=MAX), 1024 * MiB, 0, 300.0, None,
        ["memory: your allocator held 1,073,741,824 bytes (1024 MiB) after the synchronization that ends step 1"]),
    "a choice.py that prints a forged record and verdict (UINT64_MAX, no trim)": (
        choice(threshold=MAX), 1024 * MiB, 0, 300.0, None, ["memory: your allocator held", "more than the budget"]),
    "a threshold below the working set, computed": (
        choice(threshold=64 * MiB), 64 * MiB, 12, 900.0, None, ["driver traffic", "12 times"]),
    "a threshold over the budget": (
        choice(threshold=768 * MiB), [768 * MiB if h else 300 * MiB for h in SPIKE], 0, 300.0, None,
        ["held 805,306,368 bytes (768 MiB) after the synchronization that ends step 6 of 12"]),
}
# (the choice its choice.py means, what its replay holds after a step, its growths once warm, µs a step)
CANNED_RIGHT = {
    "the solution": (choice(), 448 * MiB, 2, 330.0),
    "numpy integers": (choice(), 448 * MiB, 2, 330.0),
    "a helper function computing the threshold": (choice(), 448 * MiB, 2, 330.0),
    "a dict unpacked into names": (choice(), 448 * MiB, 2, 330.0),
    "trim_every as np.uint64(UINT64_MAX) (never)": (choice(trim_every=MAX), 448 * MiB, 2, 330.0),
    "a pool of its own, a reservation within the budget and a trim": (
        choice("explicit", MAX, 256 * MiB, 6, 448 * MiB), 448 * MiB, 2, 325.0),
    "numpy's UINT64_MAX, trimmed after every sixth step": (
        choice(threshold=MAX, trim_every=6, trim_to=448 * MiB), 448 * MiB, 2, 320.0),
    "a helper function, a pool of its own": (choice("explicit", 448 * MiB, 256 * MiB), 448 * MiB, 2, 325.0),
}


@pytest.mark.parametrize("name", list(CANNED_WRONG))
def test_the_check_rejects_a_wrong_answer_from_what_its_replay_holds(name, tmp_path):
    c, held, grows, us, cold, words = CANNED_WRONG[name]
    error, printed, lesson = whole(tmp_path, ANSWERS[name], c, record(c, held, grows, us, cold=cold))
    assert error is not None, f"{name}: not rejected\n{printed}"
    assert lesson.keys[-1] == tuple(map(str, lab7.arguments(c))), lesson.keys
    for w in words:
        assert w in str(error), f"{name}: {w!r} not in {error}"
    assert not all_passed()


@pytest.mark.parametrize("name", list(CANNED_RIGHT))
def test_the_check_passes_a_right_answer_from_what_its_replay_holds(name, tmp_path):
    c, held, grows, us = CANNED_RIGHT[name]
    error, printed, _ = whole(tmp_path, ANSWERS[name], c, record(c, held, grows, us))
    assert error is None and all_passed(), f"{name}: {error}\n{printed}"


def test_a_trim_period_longer_than_the_trace_is_said_to_never_trim(tmp_path):
    c = choice(trim_every=MAX)
    error, printed, _ = whole(tmp_path, ANSWERS["trim_every as np.uint64(UINT64_MAX) (never)"], c,
                              record(c, 448 * MiB, 2, 330.0))
    assert error is None and "trim_every 18,446,744,073,709,551,615 step(s) (longer than the trace's 12 steps: no " \
                             "trim happens)" in printed, printed


def test_an_edited_replayer_is_not_believed(tmp_path):
    """A replayer changed to print a record of its own is refused before it runs: the records are the course's."""
    forged = REPLAYER.replace("int main(int argc, char** argv) {",
                              f'int main(int argc, char** argv) {{\n    std::puts(R"({FORGED})");', 1)
    assert forged != REPLAYER
    text = ANSWERS["UINT64_MAX without a trim"]
    error, printed, lesson = whole(tmp_path, text, replayer=forged)
    assert error is not None and "is not the course's replayer" in str(error), printed
    assert not lesson.keys
    # comments and spacing are not a change
    c = choice(threshold=MAX)
    error, printed, _ = whole(tmp_path, text, c, record(c, 1024 * MiB, 0, 300.0),
                              replayer="// my copy\n" + REPLAYER.replace("    ", "  "))
    assert error is not None and "is not the course's replayer" not in str(error) and "memory:" in str(error)


# -- a trace of one's own: replayed with the choice, shown, never graded -----------------------------------------
def own_record(c):
    return {**record(c, 6 * MiB, 1, 40.0), "steps": 2, "passes": PASSES, "held": [6 * MiB] * (2 * len(PASSES)),
            "peak_reserved": 8 * MiB}


def test_a_trace_of_one_s_own_is_replayed_with_the_choice_and_not_graded(tmp_path, own_traces):
    c = choice()
    name = "the solution, with a trace of one's own"
    error, printed, lesson = whole(tmp_path, ANSWERS[name], c, record(c, 448 * MiB, 2, 330.0), own=own_record(c))
    assert error is None and all_passed(), f"{error}\n{printed}"
    assert lesson.keys[-1] == (OWN.name, *map(str, lab7.arguments(c))), lesson.keys
    assert "not graded  your trace: my-service.trace (8 events, 2 step(s), 1 stream(s), peak 4 MiB), replayed with " \
           "your choice on a canned run: after a step's synchronization it held at most 6,291,456 bytes (6 MiB)" \
           in printed, printed
    assert "The verdict is on the spiky service alone" in printed


def test_a_trace_given_as_a_path_object_is_replayed_too(tmp_path, own_traces):
    c = choice()
    error, printed, lesson = whole(tmp_path, ANSWERS["the solution, with a trace of one's own as a pathlib.Path"], c,
                                   record(c, 448 * MiB, 2, 330.0), own=own_record(c))
    assert error is None and "replayed with your choice" in printed, printed


def test_a_trace_path_is_read_from_the_notebook_s_folder(tmp_path, own_traces, monkeypatch):
    """A relative path is the notebook's folder's (the kernel's working folder), where the learner sees it."""
    c = choice()
    monkeypatch.chdir(OWN.parent)
    build = tmp_path / "build"
    build.mkdir()
    error, printed, _ = whole(build, simple(extra=f"trace = {OWN.name!r}\n"), c, record(c, 448 * MiB, 2, 330.0),
                              own=own_record(c))
    assert error is None and "replayed with your choice" in printed, printed


def test_the_verdict_on_a_wrong_answer_stays_with_the_spiky_service(tmp_path, own_traces):
    c = choice(threshold=MAX)
    error, printed, _ = whole(tmp_path, ANSWERS["UINT64_MAX without a trim, with a trace of one's own"], c,
                              record(c, 1024 * MiB, 0, 300.0), own=own_record(c))
    assert error is not None and "more than the budget" in str(error) and "your trace" not in str(error), error
    assert "replayed with your choice" in printed, printed


@pytest.mark.parametrize("name,words", [
    ("the solution, with a trace file that is not a trace", f"your trace: {BAD_OWN} cannot be replayed: line 3"),
    ("the solution, with a trace file that is not there", "your trace: there is no file"),
    ("the solution, with a trace that is a number", "your trace: trace is 5: it must be the path of a trace file"),
])
def test_a_bad_trace_of_one_s_own_gets_one_message_and_the_graded_part_still_runs(name, words, tmp_path, own_traces):
    c = choice()
    error, printed, lesson = whole(tmp_path, ANSWERS[name], c, record(c, 448 * MiB, 2, 330.0))
    assert error is None and all_passed(), f"{error}\n{printed}"
    assert printed.count("your trace:") == 1 and words in printed, printed
    assert all(a[0] != OWN.name and a[0] != BAD_OWN.name for a in lesson.keys), lesson.keys  # no CUDA for it
    error, printed, _ = whole(tmp_path, ANSWERS["UINT64_MAX without a trim, with a trace file that is not a trace"],
                              choice(threshold=MAX), record(choice(threshold=MAX), 1024 * MiB, 0, 300.0))
    assert error is not None and "more than the budget" in str(error) and "cannot be replayed" in printed


def test_trace_none_is_the_spiky_service_alone(tmp_path):
    c = choice()
    error, printed, _ = whole(tmp_path, ANSWERS["the solution, trace left at None"], c, record(c, 448 * MiB, 2, 330.0))
    assert error is None and all_passed() and "your trace" not in printed, printed


def test_in_replay_a_trace_of_one_s_own_is_read_and_said_to_need_a_gpu(tmp_path, own_traces):
    c = choice()
    error, printed, lesson = whole(tmp_path, ANSWERS["the solution, with a trace of one's own"], c,
                                   record(c, 448 * MiB, 2, 330.0), live=False)
    assert error is None and all_passed(), f"{error}\n{printed}"
    assert "my-service.trace (8 events, 2 step(s), 1 stream(s), peak 4 MiB) is read, not replayed: a trace of your " \
           "own needs a GPU (live mode)" in printed, printed
    assert all(a[0] != OWN.name for a in lesson.keys), lesson.keys


def test_a_replayer_that_refuses_one_s_own_trace_is_said_once(tmp_path, own_traces):
    c = choice()

    runs = {("all",): REFERENCE, tuple(map(str, lab7.arguments(c))): [record(c, 448 * MiB, 2, 330.0)]}
    lesson, printed = replays(tmp_path, ANSWERS["the solution, with a trace of one's own"], runs, refuse=OWN.name), io.StringIO()
    with contextlib.redirect_stdout(printed):
        lab7.lab7(lesson)
    assert all_passed()
    assert "the replayer stopped: replay_trace exited with status 2" in printed.getvalue(), printed.getvalue()


# -- through the notebook ---------------------------------------------------------------------------------------
def whole_file(text):
    return lambda _: text


def test_the_solution_passes():
    assert "memory: in every one of its" in LAB.passes().printed


def test_the_lab_as_given_is_incomplete():
    LAB.rejected("lab", None, "allocator is None")


def test_the_lab_says_trim_every_is_steps_never_bytes():
    """The lab calls trim_every a count of steps wherever it names it, never bytes."""
    for notebook in (LAB.solution, LAB.lab):
        text = json.loads(notebook.read_text())
        for cell in text["cells"]:
            for line in "".join(cell["source"]).splitlines():
                if "trim_every" in line and "bytes" in line:
                    assert "not bytes" in line or "trim_to" in line.split("bytes")[0], (notebook.name, line)


@pytest.mark.parametrize("name", sorted(k for k in REFUSED if k in NO_RUN or "Report.finish" in k or "prints" in k))
def test_a_choice_the_check_refuses_before_running(name):
    check = LAB.rejected(name, whole_file(ANSWERS[name]), *REFUSED[name])
    assert "Traceback" not in check.evalue + check.printed
    assert checks.Report.finish is FINISH, "choice.py replaced Report.finish in the check's process"


# Right answers in styles of their own. "recorded": their replayer arguments are the recorded solution's
# (default 469762048 0 0 0), so replay shows that very run and the check passes; the others need a GPU for the run.
STYLES = {
    "numpy integers": True,
    "shifts": True,
    "computed from the budget": True,
    "a helper function computing the threshold": True,
    "constants from a dict": True,
    "a dict unpacked into names": True,
    "one line, comments, a print": True,
    "a float with a whole value": True,
    "a class as a namespace": True,
    "the solution, with a trace of one's own": True,  # in replay it is read and said to need a GPU
    "the solution, with a trace file that is not a trace": True,
    "a trim period longer than the trace (never)": False,
    "trim_every as np.uint64(UINT64_MAX) (never)": False,
    "a helper function, a pool of its own": False,
    "a pool of its own, a reservation within the budget and a trim": False,
    "numpy's UINT64_MAX, trimmed after every sixth step": False,
}


@pytest.mark.parametrize("name", list(STYLES))
def test_a_right_answer_in_another_style_passes(name, own_traces):
    check = LAB.check(name, whole_file(ANSWERS[name]))
    assert check.ename is None, f"{name}: {check.ename}: {check.evalue}\n{check.printed}"
    if LIVE or STYLES[name]:
        assert passed(check), check.printed
    else:
        assert unverified("not verified without a GPU:", check.verdict), check.printed
    if "trace =" in ANSWERS[name]:
        assert "your trace:" in check.printed, check.printed


LIVE_WRONG = {
    "threshold 0": ["driver traffic"],
    "UINT64_MAX without a trim": ["more than the budget"],
    "cudaMalloc": ["driver traffic"],
    "a threshold below the working set, computed": ["driver traffic"],
    "a threshold over the budget": ["more than the budget"],
    "trimmed to 0 after every step": ["driver traffic"],
    "a trim that keeps more than the budget": ["more than the budget"],
    "a trim after every 12th step, written with numpy": ['in pass "cold, sampled"'],
    "trim_every 2**32 + 6 (never, in 12 steps)": ["no trim happens"],
    "a reservation over the budget, trimmed after every step": ["from before the first step of every round"],
    "UINT64_MAX without a trim, with a trace of one's own": ["more than the budget"],
}
LIVE_RIGHT = ["a pool of its own, a reservation within the budget and a trim", "a helper function, a pool of its own",
              "UINT64_MAX trimmed to 400 MiB after every step", "the threshold written as the budget minus a margin",
              "numpy's UINT64_MAX, trimmed after every sixth step", "trim_every as np.uint64(UINT64_MAX) (never)",
              "the solution, with a trace of one's own"]


@live_only
@pytest.mark.parametrize("name", list(LIVE_WRONG))
def test_live_a_wrong_answer_is_rejected(name, own_traces):
    LAB.rejected(name, whole_file(ANSWERS[name]), *LIVE_WRONG[name])


@live_only
@pytest.mark.parametrize("name", LIVE_RIGHT)
def test_live_a_right_answer_passes(name, own_traces):
    check = LAB.passes(name, whole_file(ANSWERS[name]))
    assert "trace" not in name or "replayed with your choice" in check.printed, check.printed


def test_every_answer_is_tried():
    """Each answer in ANSWERS is named by some tier (none is written and forgotten)."""
    named = (set(REFUSED) | set(CANNED_WRONG) | set(CANNED_RIGHT) | set(STYLES) | set(LIVE_WRONG) | set(LIVE_RIGHT)
             | {"the solution, with a trace of one's own as a pathlib.Path", "the solution, with a trace file that is "
                "not there", "the solution, with a trace that is a number", "the solution, trace left at None",
                "UINT64_MAX without a trim, with a trace file that is not a trace"})
    assert set(ANSWERS) == named, set(ANSWERS) ^ named
