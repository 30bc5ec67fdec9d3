"""Lab 7 (choose an allocator for a trace): replays the spiky service trace with the learner's choice and grades
what it held between steps, its traffic with the driver and its time per step; then explains from choice.py.

The learner's choice is choice.py (solutions/lab7_choose_allocator.ipynb), which sets `allocator`, `threshold`,
`reserve`, `trim_every` and `trim_to`; replay_trace.cu is notebook 08's replayer, and prints the fields it grades.
"""
from __future__ import annotations

import runpy

from .. import checks, measure
from ..lessons import real_workloads as W
from .common import MiB, size, within_limit

TITLE = "Lab 7: choose an allocator for a trace"
FILE, REPLAYER = "choice.py", "replay_trace.cu"
WORKING, SPIKE_EVERY, STEPS = 256 * MiB, 6, 12  # the trace: W.spiky_service(STEPS, SPIKE_EVERY, WORKING)
BUDGET = 512 * MiB  # what the allocator may hold after any step's synchronization
# Time per step: at most the default pool at UINT64_MAX (which never gives memory back) plus the larger of OF_KEEP of
# it and OF_LOSS of what threshold 0 loses against it, both measured in the same check on the GPU at hand.
OF_KEEP, OF_LOSS = 0.25, 0.25
KINDS = ("malloc", "default", "explicit")
UINT64_MAX = 2**64 - 1
CACHE = "Guide §15.7 Physical Page Caching Behavior"


def trace() -> W.Trace:
    return W.spiky_service(STEPS, SPIKE_EVERY, WORKING)


def spikes() -> int:
    return sum(1 for k in range(STEPS) if k % SPIKE_EVERY == SPIKE_EVERY - 1)


def lab7(lesson) -> None:
    """Reads choice.py, replays the trace with it and with the two reference settings, and grades the replay."""
    report = checks.Report(TITLE, lesson)
    choice = read_choice(report, lesson)
    if choice is not None:
        explain(report, choice)
        path = trace().write(lesson.build)
        ref = report.run(REPLAYER, [path, "all"], timeout=120, what="the reference replays (threshold 0, UINT64_MAX)")
        mine = report.run(REPLAYER, [path, *arguments(choice)], timeout=120,
                          what="the replay with your allocator: what it held, its traffic with the driver, its time")
        if ref is not None and mine is not None:
            grade(report, choice, ref.records, yours(mine.records, choice), mine.label)
    report.finish()


# -- choice.py --------------------------------------------------------------------------------------------------
def read_choice(report, lesson) -> dict | None:
    """choice.py's five settings, checked to be what the replayer takes; None (and WRONG) where they are not."""
    report.source(FILE)
    try:
        ns = runpy.run_path(str(lesson.source(FILE)))
    except Exception as e:  # the learner's file: any error it raises is theirs to see
        report.wrong(f"{FILE} does not run: {type(e).__name__}: {e}")
        return None
    choice, problems = {}, []
    for name in ("allocator", "threshold", "reserve", "trim_every", "trim_to"):
        v = ns.get(name)
        if name == "allocator":
            if v not in KINDS:
                problems.append(f"allocator is {v!r}: choose one of {', '.join(map(repr, KINDS))}")
        elif isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= UINT64_MAX:
            problems.append(f"{name} is {v!r}: it must be a whole number of bytes from 0 to UINT64_MAX"
                            + (" (0: never)" if name == "trim_every" else ""))
        choice[name] = v
    for p in problems:
        report.wrong(f"{FILE}: {p}")
    return None if problems else choice


def arguments(choice) -> list:
    """replay_trace.cu's arguments for a choice: allocator threshold reserve trim_every trim_to."""
    return [choice["allocator"], "max" if choice["threshold"] == UINT64_MAX else choice["threshold"],
            choice["reserve"], choice["trim_every"], choice["trim_to"]]


def explain(report, choice):
    """What the choice means, read before it runs: notes, and the settings that cannot meet the budget."""
    kind, t, r = choice["allocator"], choice["threshold"], choice["reserve"]
    if kind == "malloc":
        report.note("cudaMalloc/cudaFree: every allocation and every free is a call to the driver, and cudaFree "
                    "waits for the device; threshold, reserve and trims do not apply")
        return
    if r > BUDGET and t >= r and not choice["trim_every"]:
        report.wrong(f"reserve: {size(r)} reserved up front and kept (threshold {size(t)}) is more than the budget of "
                     f"{size(BUDGET)} the allocator may hold between steps")
    if r > t:
        report.note(f"reserve: the pool keeps at most the threshold ({size(t)}) at a synchronization, so most of the "
                    f"{size(r)} reserved up front goes back at the first one ({CACHE})")
    if choice["trim_every"] and choice["trim_to"] > BUDGET:
        report.note(f"trim_to is {size(choice['trim_to'])}, more than the budget of {size(BUDGET)}: a trim keeps up "
                    "to that much")


# -- the replay -------------------------------------------------------------------------------------------------
def yours(records, choice) -> dict | None:
    """The replay of your setting among the records (the replayer names a single setting by its kind)."""
    found = [r for r in records if r.get("allocator") == choice["allocator"] and r.get("kind") == choice["allocator"]]
    return found[-1] if found else None


def grade(report, choice, ref_records, mine: dict | None, label: str):
    """The run-time half: what your allocator held after each step, how often it grew once warm, its time."""
    if mine is None:
        report.wrong(f"{REPLAYER} printed no replay of your setting ({choice['allocator']}): it did not run as given")
        return
    asked = {"threshold": choice["threshold"], "reserve": choice["reserve"], "trim_every": choice["trim_every"]}
    if choice["allocator"] != "malloc" and any(mine.get(k) != v for k, v in asked.items()):
        report.wrong(f"{REPLAYER} replayed another setting than choice.py's: {mine} (asked: {asked})")
        return
    budget(report, mine)
    traffic(report, mine)
    speed(report, ref_records, mine, label)


def budget(report, mine):
    held = max(mine["held"], default=0)
    worst = mine["held"].index(held) % mine["steps"] if mine["held"] else 0
    report.expect(held <= BUDGET,
                  f"memory: your allocator held at most {size(held)} after a step's synchronization (budget "
                  f"{size(BUDGET)}); its peak while a step ran was {size(mine['peak_reserved'])}",
                  f"memory: your allocator held {size(held)} after step {worst}'s synchronization, more than the budget "
                  f"of {size(BUDGET)}: it keeps what the large request took. Let it give memory back down to the "
                  f"budget at a synchronization (a release threshold, {CACHE}) or trim it after the steps that need "
                  f"more (cudaMemPoolTrimTo)")


def traffic(report, mine):
    allowed = 2 * spikes()  # one growth per large request, with a margin for the pool's layout
    grows = mine["grows_warm"]
    report.expect(grows <= allowed,
                  f"driver traffic: once warm, your allocator took memory from the driver {grows} time(s) in "
                  f"{mine['steps']} steps (allowed: {allowed}, two per step with a large request)",
                  f"driver traffic: once warm, your allocator took memory from the driver {grows} times in "
                  f"{mine['steps']} steps (allowed: {allowed}, two per step with a large request) and gave it back "
                  f"{mine['shrinks_warm']} times: it gives back at a synchronization what the next step needs again. "
                  f"Keep at least what one ordinary step uses ({size(WORKING)} of requests, a little more reserved)")


def speed(report, ref_records, mine, label):
    by = {r.get("allocator"): r for r in ref_records}
    t0, keep = by.get("default pool, threshold 0"), by.get("default pool, threshold UINT64_MAX")
    if t0 is None or keep is None:
        report.wrong(f"{REPLAYER} all printed no reference replays (threshold 0 and UINT64_MAX): it was changed")
        return
    a, b, y = (measure.med(r["step_us"]) for r in (t0, keep, mine))
    target = b + within_limit(a, b, OF_KEEP, OF_LOSS)
    figures = (f"threshold 0 takes {a:.0f} µs a step, UINT64_MAX {b:.0f} µs, yours {y:.0f} µs; target: at most "
               f"{target:.0f} µs, UINT64_MAX plus the larger of {OF_KEEP:.0%} of it and {OF_LOSS:.0%} of what threshold "
               f"0 loses (medians of {len(mine['step_us'])} steps on {label})")
    report.expect(y <= target, f"speed: {figures}",
                  f"speed: {figures}. Your allocator still pays for memory it gave back (see driver traffic)")
