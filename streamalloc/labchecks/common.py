"""What the labs' checks share."""
from __future__ import annotations

from .. import checks, compare, cppsource, measure, ordering
from ..measure import MiB


def size(n: int) -> str:
    """Bytes in words: UINT64_MAX, 1 byte, 67,108,864 bytes (64 MiB)."""
    if n == 2**64 - 1:
        return "UINT64_MAX"
    return f"{n:,} byte{'s' if n != 1 else ''}" + (f" ({n / MiB:g} MiB)" if n >= MiB else "")


def show(table_rows, label, **kwargs):
    """Display a table under the check (imported here, so that importing the package needs no IPython)."""
    from IPython.display import display

    from .. import plots
    display(plots.Table(table_rows, label, **kwargs))


def _repeats(values) -> list[float]:
    """Repeated timings as a list (a single number is one repeat)."""
    return [float(v) for v in values] if isinstance(values, (list, tuple)) else [float(values)]


def within_limit(original, limit, of_limit: float, of_loss: float) -> float:
    """The time per iteration allowed above the limit: the larger of a share of the limit and a share of what
    the original loses (its time minus the limit's). Both are measured in the same program on the GPU at hand,
    so the allowance scales with the GPU (a T4's kernels are slower, an H100's host overhead dominates). Each is a
    time or its repeats (their medians count)."""
    original, limit = (measure.med(_repeats(v)) for v in (original, limit))
    return max(of_limit * limit, of_loss * (original - limit))


def shared_gpu(report) -> str:
    """Live, on a GPU that other processes compute on: a sentence that says so ('' otherwise, or where it cannot
    tell)."""
    # the lesson's own runs only: a test's canned run (a lesson without shared_with) was not timed on this GPU
    ask = getattr(report.lesson, "shared_with", None)
    n = ask() if ask is not None and getattr(report.lesson, "live", False) else None
    return f"This GPU is shared with {n} other process{'es' if n != 1 else ''}: timings are noisier. " if n else ""


def judge_speed(report, original, limit, yours, allowed: float, min_speedup: float, figures: str, slow: str,
                baseline: str = "the original", paired: bool = False, resolution: float = 0.0) -> None:
    """The speed target: at most limit + allowed, and min_speedup times faster than the original. `original`, `limit`
    and `yours` are each a loop's repeated timings (µs per iteration); the medians are compared. `resolution`: the
    timer's, in µs per iteration.

    Time decides only where it can. When the original itself is not min_speedup times slower than the target (the
    GPU's work hides what the host or the pool costs: a slow GPU, or one shared with other work), a right answer and
    a wrong one take about the same time: the speed is unverified on this run, and the other findings decide. Yours
    at or under the target (medians): passed. Over it, WRONG only past the course's verdict rule
    (streamalloc/compare.py) and by its practical margin, at least compare.LEAST of your time and more than the
    timer's resolution; short of either, or on a GPU that other processes compute on (their work can slow every
    repeat alike), the noise could have decided it: unverified, with the figures, never wrong.

    `paired`: the program's loops took turns, repeat by repeat (lab 1's pipeline.cu: original, limit, yours; original,
    limit, yours; ...), so the k-th repeats of each shared the machine's moment: the target's k-th value (the limit's
    plus `allowed`) is set against yours in the same repeat, and the rule's exact signed-rank test on those pairs
    decides. Not paired (lab 2's loops run one after the other, each timing its own iterations; lab 7's replay of
    your allocator is a run of its own, after the reference replays), no paired test applies: yours must miss the
    target by more than the spread of the repeats (the interquartile range of yours plus the limit's), and by the
    same practical margin. (Where the original over min_speedup would be the lower
    target, the original is not min_speedup times slower than the limit's target: the speed is unverified first.)"""
    o, lim, y = (measure.summary(_repeats(v)) for v in (original, limit, yours))
    target = lim["median"] + allowed
    shared = shared_gpu(report)
    # Past this, the original is min_speedup times the limit's target or more: that target is the lower one, and sets it
    if o["median"] < min_speedup * target:
        report.unverified("the speed", f"{figures}. Here {baseline} itself takes only {o['median'] / target:.2f}× "
                                       f"the target, short of the {min_speedup:g}× that would tell a right answer from "
                                       f"a wrong one: the GPU's work hides the difference on this run. {shared}".strip())
        return
    over = y["median"] - target
    if over <= 0:
        report.ok(f"speed: {figures}")
        return
    if paired:
        decided, beyond, short = paired_miss([v + allowed for v in _repeats(limit)], _repeats(yours), resolution)
    else:
        spread = y["p75"] - y["p25"] + lim["p75"] - lim["p25"]
        margin = max(compare.LEAST * y["median"], resolution)
        decided = over > spread and over >= compare.LEAST * y["median"] and over > resolution
        beyond = f"more than the {spread:.1f} µs spread of the repeats and {compare.LEAST:.0%} of yours"
        short = (f"within the {spread:.1f} µs spread of the repeats (the interquartile ranges of yours and of the "
                 "limit)" if over <= spread else f"less than {compare.LEAST:.0%} of yours ({margin:.1f} µs)")
    if decided and not shared:
        report.wrong(f"speed: {figures}. Yours is {over:.1f} µs over the target, {beyond}. {slow}")
        return
    why = (f"{short}: the noise could have decided it on this run" if not decided else
           f"{beyond}, but other processes compute on this GPU, and their work can slow every repeat alike")
    report.unverified("the speed", f"{figures}. Yours is {over:.1f} µs over the target, {why}. {shared}Run the "
                                   "check again on a GPU nobody else is using to decide it")


def paired_miss(targets: list, yours: list, resolution: float) -> tuple[bool, str, str]:
    """Yours against the target, repeat by repeat (the loops took turns): (is yours slower past the course's rule,
    the words for a miss it names, the words for one it cannot)."""
    v = compare.decide({"the target": targets, "yours": yours}, resolution=resolution)
    n, p, lead = v.n, v.p.get("yours", v.p.get("the target")), v.lead.get("yours", 0.0)
    slower = sum(b > a for a, b in zip(targets, yours))
    test = f"exact signed-rank test on the {n} repeats, paired with the limit's, p = {p:.2g}"
    beyond = (f"slower than it in {slower} of {n} repeats ({test}), by {lead:.1f} µs in their median, at least "
              f"{compare.LEAST:.0%} of yours")
    short = (f"{n} paired repeats cannot decide at {compare.ALPHA:.0%} (their smallest two-sided p is 2/{2**n})"
             if not v.decidable else "the repeats, paired with the limit's, do not tell yours from the target at "
             f"{compare.ALPHA:.0%} ({test})" if p > compare.ALPHA else
             f"by {lead:.1f} µs in the median of the paired repeats, less than {compare.LEAST:.0%} of yours"
             + (" or the timer's resolution" if resolution else ""))
    return v.winner == "the target", beyond, short


def leaked(report, used_before: int, used_after: int, per_buffer: int, where: str, fix: str) -> bool:
    """The pool's memory in use after the learner's code (synchronized) must be what it was before: a finding."""
    extra = used_after - used_before
    if extra > 0:
        report.wrong(f"leak: after {where} the default pool still has {size(extra)} in use that it did not have "
                     f"before (about {extra / per_buffer:.0f} buffer(s) of {size(per_buffer)}): {fix}")
        return True
    report.ok(f"no leak: after {where} the default pool has no more memory in use than before ({size(used_after)})")
    return False


def never_named(report, src: str, needed: dict) -> bool:
    """A call whose name appears nowhere in the file (comments aside) is not made: wrong, whatever the run. A file that
    names its driver twin (cuMemAllocAsync for cudaMallocAsync: streamalloc/ordering.py) names the call. Token pasting
    (##) can build a name the text does not hold: then nothing is said. True if one was missing."""
    text = cppsource.strip_comments(src)
    if "##" in text:
        return False
    missing = {}
    for names, why in needed.items():
        names = (names,) if isinstance(names, str) else names
        if not any(cppsource.names(text, n) for name in names for n in (name, *ordering.driver_twins(name))):
            missing.setdefault(why, []).append(" or ".join(names))
    for why, group in missing.items():
        report.wrong(f"{checks.english(group)} {'is' if len(group) == 1 else 'are'} not called (the file never "
                     f"names {'it' if len(group) == 1 else 'them'}): {why}")
    return bool(missing)


def stream_words(stream, names=None) -> str:
    """A recorded stream (calls.Op.stream) in words: its name in `names` ({stream: "s"}), a default stream, or its
    handle."""
    if names and stream in names:
        return names[stream]
    return {"legacy": "the legacy default stream (0)", "per-thread": "the per-thread default stream"}.get(
        stream[1], f"stream {stream[1]}")
