"""Which of several settings is faster, from rounds in which they took turns: the course's one verdict rule.

Notebook 08's verdicts and the labs' speed findings (labchecks/common.py, judge_speed) decide with it. Its input is
each setting's time in each round, the settings having taken turns within a round (A B C, A B C, ...), so that what
the machine does meanwhile (a clock that ramps, another process, a drift over the run) hits a round's settings alike
and cancels in their differences. decide() names a winner only where

  (a) an exact two-sided Wilcoxon signed-rank test on the paired differences (the same round's times subtracted)
      rejects "no difference" at ALPHA, after Holm's correction over the comparisons made (the best, by median,
      against each other setting), and
  (b) the lead is practical: the median of the paired differences is at least LEAST of the slower setting's time and
      more than the timer's resolution (a parameter).

Otherwise it is a tie, of the best and every setting it could not be separated from. This is criterion.rs's rule for
benchmarks: a change is named only past a significance test at 5 % and a noise threshold.

Why the signed-rank test and not the sign test: both are exact and assume no distribution of the times, and both
need the same rounds before they can reject at all (the smallest two-sided p of n rounds is 2/2**n: five rounds
cannot reach 5 %, 2/32; nine reach 2/512). The sign test counts only which setting won each round, so with nine
rounds and three comparisons its first Holm step (5 %/3) needs all nine rounds; the signed-rank test also weighs by
how much, so it finds a real difference in fewer rounds. Its one assumption, differences symmetric about zero when
the settings are the same, holds for settings that take turns: swapping two identical settings' names changes
nothing, so each difference is as likely as its negative. tests/test_compare.py draws identical settings under
several noise shapes and measures the rate of false winners, and the power against a real 10 % difference.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Callable, Mapping, Sequence

import numpy as np

from .measure import med

ALPHA = 0.05  # the test's level, for the whole family of comparisons (Holm)
LEAST = 0.05  # the smallest lead worth naming: a share of the slower setting's time


def signed_rank_p(differences: Sequence[float]) -> float:
    """The exact two-sided p of Wilcoxon's signed-rank test that the differences are centred on zero. Zero
    differences are left out (Wilcoxon's rule); tied magnitudes share their mean rank, and the null distribution is
    that of these very ranks under every choice of signs (exact with ties)."""
    d = np.asarray(differences, dtype=float)
    d = d[d != 0]
    if d.size == 0:
        return 1.0
    size = np.abs(d)
    ranks = np.empty(d.size)
    ranks[np.argsort(size, kind="stable")] = np.arange(1, d.size + 1)
    ordered = np.sort(size)
    if np.any(ordered[1:] == ordered[:-1]):  # ties: each takes the mean of their ranks
        for value in np.unique(size):
            ranks[size == value] = ranks[size == value].mean()
    doubled = np.rint(2 * ranks).astype(int)  # a mean rank is a whole or a half: doubled, a whole number
    dist = null_distribution(tuple(sorted(doubled.tolist())))
    w = int(doubled[d > 0].sum())
    return float(min(1.0, 2 * min(dist[:w + 1].sum(), dist[w:].sum())))


@functools.lru_cache(maxsize=256)
def null_distribution(doubled: tuple) -> np.ndarray:
    """P(the positive ranks sum to w), w = 0 ... sum(doubled), with each (doubled) rank's sign a coin toss: built one
    rank at a time. Cached: without ties, n rounds always have the ranks 1 ... n."""
    dist = np.zeros(sum(doubled) + 1)
    dist[0] = 1.0
    for r in doubled:
        dist[r:] = 0.5 * dist[r:] + 0.5 * dist[:-r]
        dist[:r] *= 0.5
    dist.flags.writeable = False
    return dist


def smallest_p(n: int) -> float:
    """The smallest two-sided p that n paired rounds can give (every round one way): 2/2**n."""
    return 2.0 / 2**n


def holm(p: Mapping[str, float]) -> dict[str, float]:
    """Holm's step-down adjustment: each p multiplied by the number of hypotheses not yet rejected before it, and
    never below an earlier one's; a comparison is rejected at ALPHA where its adjusted p is at most ALPHA."""
    out, running = {}, 0.0
    for i, (name, value) in enumerate(sorted(p.items(), key=lambda kv: kv[1])):
        running = max(running, min(1.0, (len(p) - i) * value))
        out[name] = running
    return out


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What decide() found. `ranked`: the settings, lowest median first; `group`: the best and every setting not
    separated from it (one name: a winner); `p`: each other setting's Holm-adjusted p against the best; `lead`: the
    median of its paired differences from the best (positive: the best was faster); `n`: the paired rounds."""
    ranked: tuple
    medians: dict
    group: tuple
    p: dict
    lead: dict
    scale: dict
    n: int
    alpha: float = ALPHA
    least: float = LEAST
    resolution: float = 0.0

    @property
    def best(self) -> str:
        return self.ranked[0]

    @property
    def winner(self) -> str | None:
        return self.group[0] if len(self.group) == 1 and len(self.ranked) > 1 else None

    @property
    def comparisons(self) -> int:
        return len(self.ranked) - 1

    @property
    def decidable(self) -> bool:
        """Can n rounds reject at all, at the first step of Holm's correction (ALPHA over the comparisons)?"""
        return self.comparisons > 0 and smallest_p(self.n) <= self.alpha / self.comparisons

    def practical(self, name: str) -> bool:
        """Is the best's lead over `name` worth naming: at least `least` of name's time, and above the resolution?"""
        lead = self.lead[name]
        return lead >= self.least * self.scale[name] and lead > self.resolution

    def separated(self, name: str) -> bool:
        return self.p[name] <= self.alpha and self.practical(name)


def decide(rounds: Mapping[str, Sequence[float]], alpha: float = ALPHA, least: float = LEAST,
           resolution: float = 0.0, scale: Mapping[str, float] | None = None) -> Verdict:
    """The verdict on settings' times, {name: [time in round 1, round 2, ...]}, paired by round index (the settings
    took turns within each round; every setting has the same number of rounds). `scale`: {name: the time that
    `least` is a share of} (default: the median of its rounds), for times measured above a floor, whose share would
    be of the wrong figure. `resolution`: the timer's, in the rounds' unit."""
    counts = {len(v) for v in rounds.values()}
    if len(counts) != 1 or 0 in counts:
        raise ValueError("paired rounds: every setting needs the same number of rounds, at least one; here "
                         + (", ".join(f"{name} has {len(v)}" for name, v in rounds.items()) or "no setting"))
    values = {name: np.asarray(v, dtype=float) for name, v in rounds.items()}
    medians = {name: med(v.tolist()) for name, v in values.items()}
    ranked = tuple(sorted(values, key=lambda name: medians[name]))
    best, others = ranked[0], ranked[1:]
    raw = {o: signed_rank_p(values[o] - values[best]) for o in others}
    lead = {o: med((values[o] - values[best]).tolist()) for o in others}
    scale = {name: abs(float((scale or medians)[name])) for name in ranked}
    v = Verdict(ranked, medians, (), holm(raw), lead, scale, counts.pop(), alpha, least, resolution)
    return dataclasses.replace(v, group=tuple(name for name in ranked if name == best or not v.separated(name)))


def number(x: float) -> str:
    """A time as the sentences show it: one decimal below 100, whole above."""
    return f"{x:,.1f}" if abs(x) < 100 else f"{x:,.0f}"


def sentence(v: Verdict, what: str, unit: str = "µs", figure: Callable[[str], str] | None = None,
             name: Callable[[str], str] = str) -> str:
    """One sentence for people: the winner and by how much, or a tie and why. `figure(setting)` is its figure in
    words (default: its median and the unit), `name(setting)` its name as the sentence shows it (Markdown, say)."""
    figure = figure or (lambda s: f"{number(v.medians[s])} {unit}")
    show = lambda s: f"{name(s)}, {figure(s)}"  # noqa: E731
    if len(v.ranked) == 1:
        return f"only {name(v.best)} was measured: {figure(v.best)}"
    rounds = f"{v.n} paired rounds"
    if v.winner:
        runner_up = v.ranked[1]
        test = (f"p = {v.p[runner_up]:.2g}" if v.comparisons == 1 else
                f"p ≤ {max(v.p.values()):.2g} against each other setting, Holm-corrected over {v.comparisons}")
        return (f"the cheapest {what} is {show(v.best)}, ahead of {show(runner_up)}, by {number(v.lead[runner_up])} "
                f"{unit} (the median of the differences in {rounds}; exact signed-rank test, {test})")
    tied = "; ".join(show(s) for s in v.group)
    if not v.decidable:
        over = (f" over {v.comparisons} comparisons: the smallest two-sided p of {rounds} is 2/{2**v.n}, above "
                f"{v.alpha:.0%}/{v.comparisons}") if v.comparisons > 1 else \
            f": the smallest two-sided p of {rounds} is 2/{2**v.n}"
        return f"a tie for the cheapest {what}: {tied}. {v.n} rounds cannot decide at {v.alpha:.0%}{over}"
    why = [f"{name(s)} (p = {v.p[s]:.2g})" if v.p[s] > v.alpha else
           f"{name(s)} (p = {v.p[s]:.2g}, but by {number(v.lead[s])} {unit}, less than {v.least:.0%} of its "
           f"{number(v.scale[s])} {unit}" + (" or the timer's resolution" if v.resolution else "") + ")"
           for s in v.group[1:]]
    return (f"a tie for the cheapest {what}: {tied}. In {rounds}, {name(v.best)} is not ahead of "
            + ", ".join(why) + f" at {v.alpha:.0%} (exact signed-rank test, Holm's correction) by a practical margin")
