"""What the labs' checks share."""
from __future__ import annotations

import re

from .. import checks, cppsource, measure, ordering
from ..calls import SYNCS  # noqa: F401  (host waits; the labs' checks take them from here)
from ..measure import MiB  # noqa: F401  (the labs' checks take it from here)


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
                baseline: str = "the original") -> None:
    """The speed target: at most limit + allowed, and min_speedup times faster than the original. `original`, `limit`
    and `yours` are each a loop's repeated timings (µs per iteration); the medians are compared.

    Time decides only where it can. When the original itself is not min_speedup times slower than the target (the
    GPU's work hides what the host or the pool costs: a slow GPU, or one shared with other work), a right answer and
    a wrong one take about the same time: the speed is unverified on this run, and the other findings decide. Yours
    misses the target by more than the spread of the repeats (the interquartile range of yours plus that of the loop
    that sets the target): WRONG. By less, or on a GPU that other processes compute on (their work can slow every
    repeat alike): the noise could have decided it, so the speed is unverified, with the figures, never wrong."""
    o, lim, y = (measure.summary(_repeats(v)) for v in (original, limit, yours))
    by_limit, by_speedup = lim["median"] + allowed, o["median"] / min_speedup
    target = min(by_limit, by_speedup)
    spread = y["p75"] - y["p25"] + (lim["p75"] - lim["p25"] if by_limit <= by_speedup
                                    else (o["p75"] - o["p25"]) / min_speedup)
    shared = shared_gpu(report)
    if o["median"] < min_speedup * by_limit:
        report.unverified("the speed", f"{figures}. Here {baseline} itself takes only {o['median'] / by_limit:.2f}× "
                                       f"the target, short of the {min_speedup:g}× that would tell a right answer from "
                                       f"a wrong one: the GPU's work hides the difference on this run. {shared}".strip())
        return
    over = y["median"] - target
    if over <= 0:
        report.ok(f"speed: {figures}")
    elif over > spread and not shared:
        report.wrong(f"speed: {figures}. Yours is {over:.1f} µs over the target, more than the {spread:.1f} µs spread "
                     f"of the repeats. {slow}")
    else:
        why = (f"within the {spread:.1f} µs spread of the repeats (the interquartile ranges of yours and of "
               f"{'the limit' if by_limit <= by_speedup else baseline}): the noise could have decided it on this run"
               if over <= spread else f"more than the {spread:.1f} µs spread of the repeats, but other processes "
               "compute on this GPU, and their work can slow every repeat alike")
        report.unverified("the speed", f"{figures}. Yours is {over:.1f} µs over the target, {why}. {shared}Run the "
                                       "check again on a GPU nobody else is using to decide it")


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
        if not any(re.search(rf"\b{n}\b", text) for name in names for n in (name, *ordering.driver_twins(name))):
            missing.setdefault(why, []).append(" or ".join(names))
    for why, group in missing.items():
        report.wrong(f"{checks.english(group)} {'is' if len(group) == 1 else 'are'} not called (the file never "
                     f"names {'it' if len(group) == 1 else 'them'}): {why}")
    return bool(missing)
