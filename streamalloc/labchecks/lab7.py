"""Lab 7 (choose an allocator for a trace): replays the spiky service trace with the learner's choice and grades
what it held after every step of every pass (the cold, first one included), its traffic with the driver and its
time per step; then explains from choice.py.

The learner's choice is choice.py (solutions/lab7_choose_allocator.ipynb), which sets `allocator`, `threshold`,
`reserve`, `trim_every` and `trim_to`. It is run in a Python process of its own (READER), never in the check's: it
may import and print what it likes, and nothing it does there reaches the check. That process writes the five
values, after choice.py has run, as JSON into a file the check names (not to stdout, where choice.py's prints go);
the check takes only a number, or one of KINDS, from each. replay_trace.cu is notebook 08's replayer, and must be
the course's, as the solution writes it: its records are then the course's own, and choice.py reaches it only
through those checked numbers.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from .. import checks, cppsource, measure
from ..measure import UINT64_MAX
from ..lessons import real_workloads as W
from .common import MiB, judge_speed, size, within_limit

TITLE = "Lab 7: choose an allocator for a trace"
LESSON, FILE, REPLAYER = "lab7_choose_allocator", "choice.py", "replay_trace.cu"
WORKING, SPIKE_EVERY, STEPS = 256 * MiB, 6, 12  # the trace: W.spiky_service(STEPS, SPIKE_EVERY, WORKING)
BUDGET = 512 * MiB  # what the allocator may hold after any step's synchronization, in every pass
# Time per step: at most the default pool at UINT64_MAX (which never gives memory back) plus the larger of OF_KEEP of
# it and OF_LOSS of what threshold 0 loses against it, both measured in the same check on the GPU at hand.
OF_KEEP, OF_LOSS = 0.25, 0.25
KINDS = ("malloc", "default", "explicit")
NAMES = ("allocator", "threshold", "reserve", "trim_every", "trim_to")
WHAT = {"threshold": "a whole number of bytes from 0 to UINT64_MAX",
        "reserve": "a whole number of bytes from 0 to UINT64_MAX",
        "trim_every": "a whole number of steps from 0 (never) to UINT64_MAX: a trim after every trim_every-th step",
        "trim_to": "a whole number of bytes from 0 to UINT64_MAX"}
READ_TIMEOUT = 60  # s: choice.py only sets five names (an import of numpy or of the course takes a second or two)
CACHE = "Guide §15.7 Physical Page Caching Behavior"

# Run as `python -c READER <out.json> <choice.py>`: runs choice.py, then writes each name's value into out.json as
# {"int": n} (an int, a numpy integer, a float with a whole value), {"str": s}, or {"other": repr}; or {"error": ...}.
READER = r"""
import json, numbers, operator, runpy, sys, traceback
out, path = sys.argv[1], sys.argv[2]
def value(v):
    if isinstance(v, str):
        return {"str": str(v)}
    if not isinstance(v, bool):  # numpy's bool is no index and no numbers.Real: it lands in "other" too
        try:
            return {"int": int(operator.index(v))}
        except TypeError:
            pass
        if isinstance(v, numbers.Real) and float(v).is_integer():
            return {"int": int(v)}
    return {"other": repr(v)[:80]}
try:
    ns = runpy.run_path(path)
    found = {k: value(ns[k]) for k in %r if k in ns}
except BaseException as e:
    here = [f.lineno for f in traceback.extract_tb(e.__traceback__) if f.filename == path]
    line = e.lineno if isinstance(e, SyntaxError) else (here[-1] if here else None)
    found = {"error": f"{type(e).__name__}: {e}", "line": line}
with open(out, "w") as f:
    json.dump(found, f)
""" % (NAMES,)


def trace() -> W.Trace:
    return W.spiky_service(STEPS, SPIKE_EVERY, WORKING)


def spikes() -> int:
    return sum(1 for k in range(STEPS) if k % SPIKE_EVERY == SPIKE_EVERY - 1)


def syncs() -> list[int]:
    """The trace's step ends: the index of each "s" event, where the replayer's timeline reads what is held."""
    return [i for i, e in enumerate(trace().events) if e[0] == "s"]


def lab7(lesson) -> None:
    """Reads choice.py, replays the trace with it and with the two reference settings, and grades the replay."""
    report = checks.Report(TITLE, lesson)
    choice = read_choice(report, lesson)
    if choice is not None:
        explain(report, choice)
    if choice is not None and course_replayer(report, lesson):
        path = trace().write(lesson.build)
        ref = report.run(REPLAYER, [path, "all"], timeout=120, what="the reference replays (threshold 0, UINT64_MAX)")
        mine = report.run(REPLAYER, [path, *arguments(choice)], timeout=120,
                          what="the replay with your allocator: what it held, its traffic with the driver, its time")
        if ref is not None and mine is not None:
            grade(report, choice, ref.records, yours(mine.records, choice), mine.label)
    report.finish()


# -- choice.py --------------------------------------------------------------------------------------------------
def read_choice(report, lesson) -> dict | None:
    """choice.py's five settings, read in a process of their own (READER) and checked to be what the replayer
    takes; None (and WRONG, one finding per problem) where they are not."""
    path = lesson.source(FILE)
    if not path.is_file():
        report.wrong(f"{FILE} is not in {path.parent}: run its cell (%%writefile) above first")
        return None
    report.source(FILE)
    extra = os.environ.get("PYTHONPATH")  # choice.py may import the course (streamalloc.measure.MiB), as the kernel can
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(checks.REPO)] + ([extra] if extra else []))}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "choice.json"
        try:
            subprocess.run([sys.executable, "-c", READER, str(out), str(path)], cwd=path.parent, env=env,
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           timeout=READ_TIMEOUT)
        except subprocess.TimeoutExpired:
            report.wrong(f"{FILE} did not finish within {READ_TIMEOUT} s: it only needs to set {', '.join(NAMES)}")
            return None
        try:
            found = json.loads(out.read_text())
        except (OSError, ValueError):
            found = None
    if not isinstance(found, dict):
        report.wrong(f"{FILE} ended its Python process before its names could be read (os._exit, or a crash): "
                     f"it only needs to set {', '.join(NAMES)}")
        return None
    if "error" in found:
        line = found.get("line")
        report.wrong(f"{FILE} does not run: {found['error']}" + (f" (line {line})" if line and
                                                                  f"line {line}" not in str(found["error"]) else ""))
        return None
    choice, problems = {}, []
    for name in NAMES:
        v = found.get(name)
        if not isinstance(v, dict) or not v:
            problems.append(f"{name} is not set")
            continue
        shown = repr(v["str"]) if "str" in v else v.get("int", v.get("other"))
        if name == "allocator":
            choice[name] = v.get("str")
            if choice[name] not in KINDS:
                problems.append(f"allocator is {shown}: choose one of {', '.join(map(repr, KINDS))}")
        else:
            choice[name] = v.get("int")
            if type(choice[name]) is not int or not 0 <= choice[name] <= UINT64_MAX:
                problems.append(f"{name} is {shown}: it must be {WHAT[name]}")
    for p in problems:
        report.wrong(f"{FILE}: {p}")
    if problems:
        return None
    report.ok(f"{FILE} (run in a process of its own) sets: allocator {choice['allocator']!r}, threshold "
              f"{size(choice['threshold'])}, reserve {size(choice['reserve'])}, trim_every {choice['trim_every']:,} "
              f"step(s), trim_to {size(choice['trim_to'])}")
    return choice


def trims(choice) -> int:
    """trim_every as the replayer is given it. It counts each pass's steps from 1 and trims where the count is a
    multiple of trim_every: a period longer than the trace never trims, and goes as 0 (never), so that the 64-bit
    value never reaches the replayer's int cut to 32 bits (2**32 + 6 would trim every sixth step there)."""
    return choice["trim_every"] if choice["trim_every"] <= STEPS else 0


def arguments(choice) -> list:
    """replay_trace.cu's arguments for a choice: allocator threshold reserve trim_every trim_to."""
    return [choice["allocator"], "max" if choice["threshold"] == UINT64_MAX else choice["threshold"],
            choice["reserve"], trims(choice), choice["trim_to"]]


def explain(report, choice):
    """What the choice means, read before it runs: notes, and a reservation that breaks the budget before the first
    step."""
    kind, t, r = choice["allocator"], choice["threshold"], choice["reserve"]
    if kind == "malloc":
        report.note("cudaMalloc/cudaFree: every allocation and every free is a call to the driver, and cudaFree "
                    "waits for the device; threshold, reserve and trims do not apply")
        return
    if r > BUDGET and t >= r:
        report.wrong(f"reserve: {size(r)} reserved up front and kept (threshold {size(t)}) is more than the budget of "
                     f"{size(BUDGET)} the allocator may hold between steps: the pool holds it from before the first "
                     "step, whatever a trim gives back later")
    if r > t:
        report.note(f"reserve: the pool keeps at most the threshold ({size(t)}) at a synchronization, so most of the "
                    f"{size(r)} reserved up front goes back at the first one ({CACHE})")
    if choice["trim_every"] and choice["trim_to"] > BUDGET:
        report.note(f"trim_to is {size(choice['trim_to'])}, more than the budget of {size(BUDGET)}: a trim keeps up "
                    "to that much")


def course_replayer(report, lesson) -> bool:
    """replay_trace.cu must be the course's (comments and spacing aside): the check grades what it prints."""
    mine, course = lesson.source(REPLAYER), checks.solution_source(LESSON, REPLAYER)
    if not mine.is_file():
        report.wrong(f"{REPLAYER} is not in {mine.parent}: run its cell (%%writefile) above first")
        return False
    if course is not None and cppsource.normalized(mine.read_text()) != cppsource.normalized(course):
        report.wrong(f"{REPLAYER} is not the course's replayer (its cell was edited): the check grades what the "
                     "course's replayer prints. Run its cell as given")
        return False
    return True


# -- the replay -------------------------------------------------------------------------------------------------
def yours(records, choice) -> dict | None:
    """The replay of your setting among the records: the one record whose name and kind are your allocator (the
    replayer names a single setting by its kind); None where there is none, or more than one."""
    found = [r for r in records if r.get("allocator") == choice["allocator"] and r.get("kind") == choice["allocator"]]
    return found[0] if len(found) == 1 else None


def grade(report, choice, ref_records, mine: dict | None, label: str):
    """The run-time half: what your allocator held after each step of each pass, how often it grew once warm, its
    time."""
    if mine is None:
        report.wrong(f"{REPLAYER} printed no single replay of your setting ({choice['allocator']}): it did not run as "
                     "given")
        return
    asked = {"threshold": choice["threshold"], "reserve": choice["reserve"], "trim_every": trims(choice),
             "trim_to": choice["trim_to"]}
    if choice["allocator"] != "malloc" and any(mine.get(k) != v for k, v in asked.items()):
        shown = {k: mine.get(k) for k in asked}
        report.wrong(f"{REPLAYER} replayed another setting than choice.py's: {shown} (asked: {asked})")
        return
    budget(report, choice, mine)
    traffic(report, mine)
    speed(report, ref_records, mine, label)


def held(mine) -> list[tuple[str, list]]:
    """What the allocator held after each step's synchronization (and trim), pass by pass: the cold pass's read
    from its timeline at the step ends (the replayer samples it after every event; None where it kept only the
    largest value of a span), then each timed pass's ("held")."""
    at = dict(zip(mine.get("timeline_event", []), mine.get("timeline_reserved", [])))
    n = mine["steps"]
    return [("the cold (first) pass", [at.get(i) for i in syncs()])] + [
        (f"timed pass {k // n + 1}", mine["held"][k:k + n]) for k in range(0, len(mine["held"]), n)]


def budget(report, choice, mine):
    passes = held(mine)
    over = [(name, step, h) for name, values in passes for step, h in enumerate(values) if h is not None and h > BUDGET]
    if over:
        name, step, most = over[0]
        where = checks.english(dict.fromkeys(n for n, _, _ in over))
        never = (f" (trim_every {choice['trim_every']} is longer than the trace's {STEPS} steps: no trim happens)"
                 if choice["trim_every"] > STEPS else "")
        report.wrong(f"memory: your allocator held {size(most)} after step {step}'s synchronization in {name}, more "
                     f"than the budget of {size(BUDGET)} ({len(over)} step end(s) over it, in {where}){never}: it "
                     f"keeps what the large request (or the reservation) took. Let it give memory back down to the "
                     f"budget at a synchronization (a release threshold, {CACHE}) or trim it after the steps that "
                     f"need more (cudaMemPoolTrimTo), from the first pass on")
        return
    if any(h is None for _, values in passes for h in values):
        report.unverified("the memory held after each step of the cold pass", "the replayer's timeline kept only the "
                          "largest value of each span of events, not each step's end")
    most = max((h for _, values in passes for h in values if h is not None), default=0)
    report.ok(f"memory: in every pass (the cold one and {len(passes) - 1} timed), your allocator held at most "
              f"{size(most)} after a step's synchronization (budget {size(BUDGET)}); its peak while a step ran was "
              f"{size(mine['peak_reserved'])}")


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
    # with margin over the spread of the steps, and never wrong on a GPU other processes share (common.judge_speed)
    judge_speed(report, t0["step_us"], keep["step_us"], mine["step_us"], target - b, 1.0, figures,
                "Your allocator still pays for memory it gave back (see driver traffic)", baseline="threshold 0")
