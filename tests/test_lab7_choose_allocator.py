"""Lab 7 (choose an allocator for a trace): the check grades the replay of the learner's choice.

Three tiers, as for the other labs:
- in-process, any mode: the run-time half (labchecks.lab7.grade) on canned replay records shaped like what each
  answer's replay shows (made-up numbers for the test, never recorded): six wrong answers rejected with the reason,
  four right ones, written differently, passed;
- through the notebook (tests/labcheck.py), any mode: the solution passes (once recorded), the lab as given and
  choices the replayer cannot take are rejected before anything runs;
- live only (a GPU): the same wrong and right answers replayed for real, listed in /work/notes/nb08-gpu.md.
"""
import sys
from pathlib import Path

import pytest

from labcheck import Lab, live_only, regions

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from streamalloc import checks  # noqa: E402
import streamalloc.labchecks  # noqa: E402,F401  (the package names each lab's function; the module is in sys.modules)
lab7 = sys.modules["streamalloc.labchecks.lab7"]

LAB = Lab("lab7_choose_allocator", "choice.py")
MiB = 1 << 20
MAX = 2**64 - 1
STEPS = lab7.STEPS


def choice(allocator="default", threshold=448 * MiB, reserve=0, trim_every=0, trim_to=0):
    return {"allocator": allocator, "threshold": threshold, "reserve": reserve, "trim_every": trim_every,
            "trim_to": trim_to}


def record(c, held, grows_warm, us, name=None):
    return {"allocator": name or c["allocator"], "kind": name and "default" or c["allocator"],
            "threshold": c["threshold"], "reserve": c["reserve"], "trim_every": c["trim_every"], "trim_to": c["trim_to"],
            "steps": STEPS, "step_us": [us] * (3 * STEPS), "held": [held] * (3 * STEPS), "peak_reserved": 1040 * MiB,
            "peak_in_use": 990 * MiB, "grows": grows_warm + 2, "shrinks": grows_warm, "grows_warm": grows_warm,
            "shrinks_warm": grows_warm}


REFERENCE = [record(choice(threshold=0), 0, 24, 2000.0, "default pool, threshold 0"),
             record(choice(threshold=MAX), 1040 * MiB, 0, 300.0, "default pool, threshold UINT64_MAX")]

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


def graded(c, held, grows, us):
    report = checks.Report(lab7.TITLE)
    mine = record(c, held, grows, us)
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
    assert report.failed and "printed no replay of your setting" in str(report)


def test_a_reservation_over_the_budget_is_wrong_before_it_runs():
    report = checks.Report(lab7.TITLE)
    lab7.explain(report, choice("explicit", MAX, 1024 * MiB))
    assert report.failed and "more than the budget" in str(report)


def test_the_arguments_name_uint64_max_as_the_replayer_reads_it():
    assert lab7.arguments(choice(threshold=MAX, trim_every=6, trim_to=5)) == ["default", "max", 0, 6, 5]


# -- through the notebook ---------------------------------------------------------------------------------------
def test_the_solution_passes():
    assert "memory: your allocator held at most" in LAB.passes().printed


def test_the_lab_as_given_is_incomplete():
    LAB.rejected("lab", None, "allocator is None")


def answer(allocator='"default"', threshold="448 * MiB", reserve="0", trims="0, 0"):
    return lambda text: regions(text, [f"allocator = {allocator}", f"threshold = {threshold}", f"reserve = {reserve}",
                                       f"trim_every, trim_to = {trims}"])


BAD_CHOICES = {
    "an allocator the replayer does not have": (answer(allocator='"pool"'), ["allocator is 'pool'"]),
    "a threshold that is not a number of bytes": (answer(threshold='"lots"'), ["threshold is 'lots'"]),
    "a negative reservation": (answer(reserve="-1"), ["reserve is -1"]),
    "choice.py raises": (answer(threshold="448 * MB"), ["choice.py does not run: NameError"]),
    "a reservation kept over the budget": (answer(allocator='"explicit"', threshold="UINT64_MAX", reserve="1024 * MiB"),
                                           ["more than the budget"]),
}


@pytest.mark.parametrize("name", list(BAD_CHOICES))
def test_a_choice_the_check_refuses_before_running(name):
    edit, words = BAD_CHOICES[name]
    LAB.rejected(name, edit, *words)


LIVE_WRONG = {
    "threshold 0": (answer(threshold="0"), ["driver traffic"]),
    "UINT64_MAX without a trim": (answer(threshold="UINT64_MAX"), ["more than the budget"]),
    "cudaMalloc": (answer(allocator='"malloc"'), ["driver traffic"]),
    "a threshold below the working set": (answer(threshold="64 * MiB"), ["driver traffic"]),
    "trimmed to 0 after every step": (answer(threshold="UINT64_MAX", trims="1, 0"), ["driver traffic"]),
    "a trim that keeps more than the budget": (answer(threshold="UINT64_MAX", trims="6, 768 * MiB"),
                                               ["more than the budget"]),
}
LIVE_RIGHT = {
    "UINT64_MAX with a trim after every sixth step": answer(threshold="UINT64_MAX", trims="6, 448 * MiB"),
    "a pool of its own with the working set reserved": answer(allocator='"explicit"', reserve="256 * MiB"),
    "UINT64_MAX trimmed to 400 MiB after every step": answer(threshold="UINT64_MAX", trims="1, 400 * MiB"),
    "the threshold written as the budget minus a margin": answer(threshold="(512 - 64) << 20"),
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
