"""Lesson 03's synchronization cell: what the guide says is checked, what it does not say is reported."""
from types import SimpleNamespace

import matplotlib
import pytest

matplotlib.use("Agg")

from streamalloc.lessons import pools as P  # noqa: E402
from notebook import code_cell  # noqa: E402
from streamalloc.measure import MiB, UINT64_MAX, Records  # noqa: E402

G = 2 * MiB  # the granule of the canned GPU
SEED, HALF, SEED_T = 100 * MiB, 50 * MiB, 256 * MiB


def records(other_releases=False, zero_keeps=False):
    """sync_release.cu's lines at its four thresholds, as a driver that follows §15.7 prints them."""
    out = []
    for arg, t in (("0", 0), (str(HALF), HALF), (str(SEED_T), SEED_T), ("max", UINT64_MAX)):
        alloc = SEED
        kept = alloc if zero_keeps and t == 0 else P.kept_at_sync(alloc, t, G)
        out.append(dict(threshold_arg=arg, threshold=t, bytes=SEED, reserved_start=0, reserved_alloc=alloc,
                        used_free=0, reserved_free=alloc, reserved_other=kept if other_releases else alloc,
                        used_sync=0, reserved_sync=kept, reserved_trim=0))
    return Records(out)


def run_cell(recs):
    cell = code_cell("03_pools", 'zero, mid, seed_case, top_case = by_t["0"]')
    shown = []
    exec(cell, {"sync": SimpleNamespace(records=recs, label="canned GPU"), "by_t": {r["threshold_arg"]: r for r in recs},
                "g": G, "seed_bytes": SEED, "half": HALF, "seed_threshold": SEED_T, "P": P,
                "lesson": SimpleNamespace(live=False), "display": shown.append, "Markdown": lambda s: s,
                "sa": SimpleNamespace(plots=SimpleNamespace(short=lambda label: label))})
    return shown


def test_a_synchronization_that_does_not_cover_the_free_is_reported_not_asserted():
    """The guide names the synchronization that covers the free (§15.12); it does not say another one keeps the
    memory: a driver whose sync of an idle other stream released it is reported (the findings row and the prose)."""
    kept = run_cell(records())
    assert "changed nothing at any threshold" in kept[-1]
    gave = run_cell(records(other_releases=True))
    assert "gave memory back at 2 of 4 thresholds (which the guide allows)" in gave[-1], gave[-1]
    rows = {r["finding"]: r["measured"] for r in gave[0].rows}
    assert rows["syncs of another stream (not covering the free) that gave nothing back"] == "2/4"


def test_a_synchronization_that_keeps_what_lies_above_the_threshold_fails():
    with pytest.raises(AssertionError, match="the sync should bring reserved down to the threshold"):
        run_cell(records(zero_keeps=True))
