"""A lab's speed finding (labchecks.common.judge_speed) on canned repeats: a clear miss is wrong; a miss within the
noise (the spread of the repeats, or, where the loops took turns, the paired test), within 5 % of yours, or on a
shared GPU is "not verified", never wrong; a lesson's banner says when the GPU is shared."""
import types

import pytest

from streamalloc import checks, gpu, lesson
from streamalloc.labchecks.common import judge_speed, within_limit


def repeats(median, spread=0.0, n=9):
    """n timings around median, spread evenly over +-spread/2 (their interquartile range is about spread/2)."""
    return [median + spread * (k / (n - 1) - 0.5) for k in range(n)]


def judged(yours, limit=repeats(10.0, 0.2), original=repeats(100.0, 2.0), live=False, shared=None, monkeypatch=None,
           **paired):
    """The marks of one speed finding: the target is limit + the larger of 25% of it and 4% of what the original
    loses (3.6 µs: 13.6 µs at these medians), and 1.5x faster than the original. `paired`: judge_speed's `paired`
    and `resolution`."""
    if monkeypatch is not None:
        monkeypatch.setattr(gpu, "other_compute_processes", lambda: shared)
    report = checks.Report("t", types.SimpleNamespace(live=live, shared_with=lambda: lesson.Lesson.shared_with(
        types.SimpleNamespace(live=live))))
    judge_speed(report, original, limit, yours, within_limit(original, limit, 0.25, 0.04), 1.5, "the figures",
                "Something still waits.", **paired)
    return report.marks


def test_within_limit_takes_times_or_their_repeats():
    assert within_limit(100.0, 10.0, 0.25, 0.04) == within_limit(repeats(100.0, 4), repeats(10.0, 1), 0.25, 0.04) \
        == pytest.approx(3.6)


def test_a_fast_answer_passes():
    assert judged(repeats(11.0, 0.3)) == [("ok", "speed: the figures")]


def test_a_clearly_slow_answer_is_wrong():
    (mark, text), = judged(repeats(20.0, 0.4))
    assert mark == "WRONG" and text.startswith("speed: the figures. Yours is 6.4 µs over the target, more than the")
    assert text.endswith("Something still waits.")


def test_a_noisy_borderline_answer_is_not_verified_never_wrong():
    """0.9 µs over the target, with repeats spread over 6 µs: the noise could have decided it."""
    (mark, text), = judged(repeats(14.5, 6.0))
    assert mark == "not verified" and text.startswith("the speed: the figures. Yours is 0.9 µs over the target, "
                                                      "within the")
    assert "the noise could have decided it on this run" in text and "shared" not in text
    # the limit's spread counts as well as yours: tight yours, noisy limit
    (mark, _), = judged(repeats(14.5, 0.2), limit=repeats(10.0, 6.0))
    assert mark == "not verified"


def test_a_miss_under_5_percent_of_yours_is_not_verified_however_tight():
    """0.4 µs over the 13.6 µs target with repeats 0.1 µs apart: beyond the spread, short of the practical margin."""
    (mark, text), = judged(repeats(14.0, 0.1))
    assert mark == "not verified" and "Yours is 0.4 µs over the target, less than 5% of yours (0.7 µs)" in text


DRIFT = [0.0, 3.0, -3.0, 1.5, -1.5, 2.5, -2.5, 0.5, -0.5]  # the machine's moment, shared by a repeat's loops


def turns(median, n=9, noise=()):
    """n repeats of a loop that took turns with the others: the shared drift, and noise of its own."""
    return [median + d + (noise[k] if noise else 0.0) for k, d in enumerate(DRIFT[:n])]


def test_paired_repeats_find_a_miss_the_spread_hides():
    """The loops took turns (lab 1): a 6 µs drift shared by each repeat's loops cancels in the pairs, and yours is
    1.4 µs over the target in every one (10 % of yours): wrong. Unpaired, the same repeats' spread hides it."""
    limit, original = turns(10.0), turns(100.0)
    (mark, text), = judged(turns(15.0), limit, original, paired=True)
    assert mark == "WRONG" and text.startswith("speed: the figures. Yours is 1.4 µs over the target, slower than it "
                                               "in 9 of 9 repeats (exact signed-rank test on the 9 repeats, paired "
                                               "with the limit's, p = 0.0039), by 1.4 µs in their median"), text
    (mark, text), = judged(turns(15.0), limit, original)
    assert mark == "not verified" and "within the" in text and "spread of the repeats" in text
    # a right answer, paired: passed
    assert judged(turns(12.0), limit, original, paired=True) == [("ok", "speed: the figures")]


def test_paired_repeats_that_cannot_decide_are_not_verified():
    limit, original = turns(10.0), turns(100.0)
    # five repeats: the smallest two-sided p is 2/32
    (mark, text), = judged(turns(20.0, 5), turns(10.0, 5), turns(100.0, 5), paired=True)
    assert mark == "not verified" and "5 paired repeats cannot decide at 5% (their smallest two-sided p is 2/32)" \
        in text and "the noise could have decided it on this run" in text
    # over in some repeats, under in others: the test does not reject
    (mark, text), = judged(turns(15.0, noise=[3, -3, 3, -3, 3, -3, 3, -3, 0]), limit, original, paired=True)
    assert mark == "not verified" and "do not tell yours from the target at 5% (exact signed-rank test" in text
    # over in every repeat, by less than 5 % of yours
    (mark, text), = judged(turns(14.0), limit, original, paired=True)
    assert mark == "not verified" and "by 0.4 µs in the median of the paired repeats, less than 5% of yours" in text
    # over in every repeat by 1.4 µs, within the timer's resolution
    (mark, text), = judged(turns(15.0), limit, original, paired=True, resolution=2.0)
    assert mark == "not verified" and "less than 5% of yours or the timer's resolution" in text


def test_on_a_shared_gpu_a_miss_is_not_verified_and_says_so(monkeypatch):
    (mark, text), = judged(repeats(20.0, 0.4), live=True, shared=3, monkeypatch=monkeypatch)
    assert mark == "not verified" and "This GPU is shared with 3 other processes: timings are noisier." in text
    assert "their work can slow every repeat alike" in text
    (mark, text), = judged(repeats(14.5, 6.0), live=True, shared=1, monkeypatch=monkeypatch)
    assert mark == "not verified" and "shared with 1 other process: timings" in text
    assert judged(repeats(11.0, 0.3), live=True, shared=2, monkeypatch=monkeypatch) == [("ok", "speed: the figures")]
    # alone on the GPU (0), or where it cannot tell (None): a clear miss is wrong
    assert judged(repeats(20.0, 0.4), live=True, shared=0, monkeypatch=monkeypatch)[0][0] == "WRONG"
    assert judged(repeats(20.0, 0.4), live=True, shared=None, monkeypatch=monkeypatch)[0][0] == "WRONG"


def test_in_replay_the_gpu_here_is_not_asked(monkeypatch):
    monkeypatch.setattr(gpu, "other_compute_processes", lambda: pytest.fail("replayed timings: asked for sharing"))
    assert judged(repeats(20.0, 0.4), live=False)[0][0] == "WRONG"


def test_where_the_original_is_not_slow_enough_the_speed_is_not_verified():
    (mark, text), = judged(repeats(20.0, 0.4), original=repeats(15.0, 0.2))
    assert mark == "not verified" and "the GPU's work hides the difference on this run" in text


def test_the_banner_says_when_other_processes_compute_on_the_gpu(monkeypatch):
    here = gpu.Machine(gpu="NVIDIA H100 80GB HBM3", compute_capability="9.0", pools_supported=True, driver="580.1")
    me = types.SimpleNamespace(name="01_sync_vs_async", mode=gpu.Mode(True, "it is here"), here=here, live=True)
    me.shared_with = lambda: lesson.Lesson.shared_with(me)
    monkeypatch.setattr(gpu, "other_compute_processes", lambda: 2)
    assert lesson.Lesson.banner(me).splitlines()[-1] == ("  this GPU is shared with 2 other processes computing on it: "
                                                         "timings are noisier")
    for n in (0, None):
        monkeypatch.setattr(gpu, "other_compute_processes", lambda: n)
        assert "shared" not in lesson.Lesson.banner(me)
