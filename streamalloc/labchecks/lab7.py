"""Lab 7 (choose an allocator for a trace): replays the spiky service trace with the learner's choice and grades
what it held after every step of every pass (each round's cold pass included), its traffic with the driver and its
time per step; then explains from choice.py.

The learner's choice is choice.py (solutions/lab7_choose_allocator.ipynb), which sets `allocator`, `threshold`,
`reserve`, `trim_every` and `trim_to`, and may set `trace`, the path of a trace of their own. It is run in a Python
process of its own (READER), never in the check's: it may import and print what it likes, and nothing it does there
reaches the check. That process writes the values, after choice.py has run, as JSON into a file the check names (not
to stdout, where choice.py's prints go); the check takes only a number, one of KINDS, or a path from each.
replay_trace.cu is notebook 08's replayer, and must be the course's, as the solution writes it: its records are then
the course's own, and choice.py reaches it only through those checked numbers.

The replayer replays a setting in rounds, each from a fresh state (the reservation made again), and records what the
allocator held after every step's synchronization in every pass ("held", `steps` values a pass, in the order "passes"
names them): the budget is judged on all of them, and a pass whose step ends are missing is not verified, never
passed. The learner's own trace is replayed with the same choice and its figures are shown, marked "not graded": the
verdict is on the spiky service alone.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

from .. import checks, cppsource, cuda, measure, traces
from ..errors import CourseError, ProgramFailed, ProgramTimedOut
from ..measure import MiB, UINT64_MAX, nbytes
from .common import judge_speed, size, within_limit

TITLE = "Lab 7: choose an allocator for a trace"
LESSON, FILE, REPLAYER = "lab7_choose_allocator", "choice.py", "replay_trace.cu"
WORKING, SPIKE_EVERY, STEPS = 256 * MiB, 6, 12  # the trace: traces.spiky_service(STEPS, SPIKE_EVERY, WORKING)
BUDGET = 512 * MiB  # what the allocator may hold after any step's synchronization, in every pass
# Time per step: at most the default pool at UINT64_MAX (which never gives memory back) plus the larger of OF_KEEP of
# it and OF_LOSS of what threshold 0 loses against it, both measured in the same check on the GPU at hand.
OF_KEEP, OF_LOSS = 0.25, 0.25
KINDS = ("malloc", "default", "explicit")
NAMES = ("allocator", "threshold", "reserve", "trim_every", "trim_to")
OPTIONAL = ("trace",)  # a trace of the learner's own, replayed with the choice and not graded
WHAT = {"threshold": "a whole number of bytes from 0 to UINT64_MAX",
        "reserve": "a whole number of bytes from 0 to UINT64_MAX",
        "trim_every": "a whole number of steps from 0 (never) to UINT64_MAX: a trim after every trim_every-th step",
        "trim_to": "a whole number of bytes from 0 to UINT64_MAX"}
READ_TIMEOUT = 60  # s: choice.py only sets five names (an import of numpy or of the course takes a second or two)
CACHE = "Guide §15.7 Physical Page Caching Behavior"
ASIDE = "not graded"  # the mark of what the check shows of the learner's own trace: it never changes the verdict

# Run as `python -c READER <out.json> <choice.py>`: runs choice.py, then writes each name's value into out.json as
# {"int": n} (an int, a numpy integer, a float with a whole value), {"str": s} (a str, or a path such as
# pathlib.Path), or {"other": repr}; or {"error": ...}.
READER = r"""
import json, numbers, operator, os, runpy, sys, traceback
out, path = sys.argv[1], sys.argv[2]
def value(v):
    if isinstance(v, (str, os.PathLike)):
        return {"str": os.fspath(v)}
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
""" % (NAMES + OPTIONAL,)


def trace() -> traces.Trace:
    return traces.spiky_service(STEPS, SPIKE_EVERY, WORKING)


def spikes() -> int:
    return sum(1 for k in range(STEPS) if k % SPIKE_EVERY == SPIKE_EVERY - 1)


def lab7(lesson) -> None:
    """Reads choice.py, replays the trace with it and with the two reference settings, and grades the replay; then
    replays the learner's own trace, if choice.py names one, and shows its figures, not graded."""
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
        your_trace(report, lesson, choice)
    report.finish()


# -- choice.py --------------------------------------------------------------------------------------------------
def read_choice(report, lesson) -> dict | None:
    """choice.py's five settings, read in a process of their own (READER) and checked to be what the replayer
    takes; None (and WRONG, one finding per problem) where they are not. Its `trace`, if any, goes along as given
    (your_trace judges it, never the verdict)."""
    path = lesson.source(FILE)
    if not path.is_file():
        report.wrong(f"{FILE} is not in {path.parent}: run its cell (%%writefile) above first")
        return None
    report.source(FILE)
    extra = os.environ.get("PYTHONPATH")  # choice.py may import the course (streamalloc.measure.MiB), as the kernel can
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(checks.REPO)] + ([extra] if extra else []))}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "choice.json"
        try:  # as lesson.run runs a Python program: everything it starts ends with it, within the timeout
            cuda.run(sys.executable, ["-c", READER, out, path], timeout=READ_TIMEOUT, cwd=path.parent, env=env, name=FILE)
        except ProgramTimedOut:
            report.wrong(f"{FILE} did not finish within {READ_TIMEOUT} s: it only needs to set {', '.join(NAMES)}")
            return None
        except ProgramFailed:  # it ended its process itself (os._exit): said below, as no values came
            pass
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
        shown = shown_value(v)
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
    given = found.get("trace")
    choice["trace"] = None if not isinstance(given, dict) or given == {"other": "None"} else given
    every = choice["trim_every"]
    report.ok(f"{FILE} (run in a process of its own) sets: allocator {choice['allocator']!r}, threshold "
              f"{size(choice['threshold'])}, reserve {size(choice['reserve'])}, trim_every {every:,} step(s)"
              + (f" (longer than the trace's {STEPS} steps: no trim happens)" if every > STEPS else "")
              + f", trim_to {size(choice['trim_to'])}")
    return choice


def shown_value(v: dict) -> str:
    """A value READER wrote, as the learner would recognize it: '448', 2.5, True."""
    return repr(v["str"]) if "str" in v else str(v.get("int", v.get("other")))


def arguments(choice) -> list:
    """replay_trace.cu's arguments for a choice: allocator threshold reserve trim_every trim_to. trim_every goes as
    the 64-bit count it is (the replayer reads it as one; a period longer than the trace never trims)."""
    return [choice["allocator"], "max" if choice["threshold"] == UINT64_MAX else choice["threshold"],
            choice["reserve"], choice["trim_every"], choice["trim_to"]]


def explain(report, choice):
    """What the choice means, read before it runs: notes, and a reservation that breaks the budget before the first
    step."""
    kind, t, r, every = choice["allocator"], choice["threshold"], choice["reserve"], choice["trim_every"]
    if kind == "malloc":
        report.note("cudaMalloc/cudaFree: every allocation and every free is a call to the driver, and cudaFree "
                    "synchronizes the GPU across its streams (Guide §15.1); threshold, reserve and trims do not apply")
        return
    # The reservation is allocated and freed before each round's first step, and the synchronization after it keeps
    # what the threshold allows: min(reserve, threshold) is held before any step, so no trim, which comes only after
    # a step, can bring it under the budget in time.
    kept = min(r, t)
    if kept > BUDGET:
        trim = (f"; a trim after every {every:,} step(s) comes only after a step, too late"
                if 0 < every <= STEPS else "")
        report.wrong(f"reserve: {size(r)} reserved up front and kept (threshold {size(t)}) is more than the budget of "
                     f"{size(BUDGET)} the allocator may hold between steps: the pool holds {size(kept)} from before "
                     f"the first step of every round, whatever a trim gives back later{trim}")
    elif r > t:
        report.note(f"reserve: the pool keeps at most the threshold ({size(t)}) at a synchronization, so most of the "
                    f"{size(r)} reserved up front goes back at once, at the synchronization after the reservation "
                    f"({CACHE})")
    if 0 < every <= STEPS and choice["trim_to"] > BUDGET:
        report.note(f"trim_to is {size(choice['trim_to'])}, more than the budget of {size(BUDGET)}: a trim keeps at "
                    "least that much (its minBytesToKeep)")


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
    asked = {k: choice[k] for k in ("threshold", "reserve", "trim_every", "trim_to")}
    if choice["allocator"] != "malloc" and any(mine.get(k) != v for k, v in asked.items()):
        shown = {k: mine.get(k) for k in asked}
        report.wrong(f"{REPLAYER} replayed another setting than choice.py's: {shown} (asked: {asked})")
        return
    budget(report, choice, mine)
    traffic(report, mine)
    speed(report, ref_records, mine, label)


def held(mine) -> list[tuple[str, list]]:
    """What the allocator held after each step's synchronization (and trim), pass by pass, as (the pass's name, its
    values): "held" has `steps` values for each pass "passes" names, in that order. A pass the values run short of
    gets fewer (none), and values beyond the named passes go under "a pass the record does not name"."""
    n, names, values = mine.get("steps"), mine.get("passes"), mine.get("held")
    if type(n) is not int or n <= 0 or not isinstance(names, list) or not isinstance(values, list):
        return []
    out = [(str(name), values[k * n:(k + 1) * n]) for k, name in enumerate(names)]
    extra = values[len(names) * n:]
    return out + ([("a pass the record does not name", extra)] if extra else [])


def passes_named(names: list) -> str:
    """Passes in a sentence: '"round 1 cold"', or the first three and how many more."""
    quoted = [f'"{n}"' for n in names]
    return checks.english(quoted if len(quoted) <= 4 else quoted[:3] + [f"{len(quoted) - 3} more"])


def budget(report, choice, mine):
    passes, n = held(mine), mine.get("steps")
    over = [(name, step, h) for name, values in passes for step, h in enumerate(values)
            if type(h) is int and h > BUDGET]
    if over:
        name, step, most = over[0]
        names = list(dict.fromkeys(p for p, _, _ in over))
        where = f"every one of its {len(passes)} passes" if len(names) == len(passes) else passes_named(names)
        never = (f" (trim_every {choice['trim_every']:,} is longer than the trace's {STEPS} steps: no trim happens)"
                 if choice["trim_every"] > STEPS else "")
        report.wrong(f"memory: your allocator held {size(most)} after the synchronization that ends step {step + 1} "
                     f"of {n} in pass \"{name}\", more than the budget of {size(BUDGET)} ({len(over)} step end(s) over "
                     f"it, in {where}){never}: it keeps what the large request (or the reservation) took. Let it give "
                     f"memory back down to the budget at a synchronization (a release threshold, {CACHE}) or trim it "
                     "after the steps that need more (cudaMemPoolTrimTo), from the first step of every round on")
        return
    # a pass whose step ends are not all there is not verified: the budget may have broken where nothing was recorded
    what = "the memory held after each step of every pass"
    if not passes:
        report.unverified(what, "the replayer's record names no passes with their step ends (\"passes\", \"held\")")
        return
    missing = [name for name, values in passes if len(values) != n or any(type(h) is not int for h in values)]
    if not any("cold" in name for name, _ in passes):
        missing.append("a cold pass (the record names none)")
    if missing:
        report.unverified(what, f"the replayer's record lacks the step ends of {passes_named(missing)}")
    complete = [(name, values) for name, values in passes if name not in missing]
    if not complete:
        return
    cold = sum("cold" in name for name, _ in complete)
    which = f"the {len(complete)} passes it recorded whole" if missing else f"every one of its {len(complete)} passes"
    most = max(h for _, values in complete for h in values)
    report.ok(f"memory: in {which} ({cold} cold, each from a fresh state, and {len(complete) - cold} warm), your "
              f"allocator held at most {size(most)} after a step's synchronization (budget {size(BUDGET)}); its peak "
              f"while a step ran was {size(mine['peak_reserved'])}")


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
    # The repeats are the rounds' medians ("round_us"), not the steps. A round's steps differ by the trace's own
    # pattern (a step with the large request takes many times an ordinary one), so their spread would be the trace's
    # shape, not noise; and they share one state of the pool and the GPU, so it would miss what changes from one fresh
    # start to the next, which is what moved notebook 08's winners from run to run. Each round starts fresh, and its
    # median varies as a rerun would: their spread is judge_speed's margin, their median the time compared.
    rounds = [r.get("round_us") for r in (t0, keep, mine)]
    if not all(isinstance(v, list) and v for v in rounds):
        report.unverified("the speed", f"{REPLAYER} printed no medians of its rounds (round_us) to compare")
        return
    a, b, y = (measure.med(v) for v in rounds)
    target = b + within_limit(a, b, OF_KEEP, OF_LOSS)
    figures = (f"threshold 0 takes {a:.0f} µs a step, UINT64_MAX {b:.0f} µs, yours {y:.0f} µs; target: at most "
               f"{target:.0f} µs, UINT64_MAX plus the larger of {OF_KEEP:.0%} of it and {OF_LOSS:.0%} of what threshold "
               f"0 loses (the median of {len(rounds[2])} rounds' medians of their warm steps, each round from a fresh "
               f"state, on {label})")
    # not paired (your replay is a run of its own, after the reference replays): with margin over the spread of the
    # rounds and 5 % of yours, and never wrong on a GPU other processes share (common.judge_speed)
    judge_speed(report, *rounds, target - b, 1.0, figures,
                "Your allocator still pays for memory it gave back (see driver traffic)", baseline="threshold 0")


# -- the learner's own trace: shown, never graded --------------------------------------------------------------
def aside(report, text: str):
    """A finding about the learner's own trace: shown in the check's list, marked ASIDE, and no part of the verdict
    (neither wrong, nor a note, nor unverified)."""
    report.items.append(checks.Finding(ASIDE, f"your trace: {text}. The verdict is on the spiky service alone"))


def your_trace(report, lesson, choice):
    """choice.py's `trace`, if set: read with the course's trace grammar (traces.Trace.parse) before any CUDA call,
    then replayed live with your choice; what it held, its traffic and its time, or why not."""
    given = choice.get("trace")
    if given is None:
        return
    if "str" not in given:
        aside(report, f"trace is {shown_value(given)}: it must be the path of a trace file, as a string "
                      "(\"my.trace\", relative to this notebook's folder, or absolute)")
        return
    path = Path(given["str"]).expanduser()
    path = path if path.is_absolute() else Path.cwd() / path  # the kernel's folder: the notebook's
    if not path.is_file():
        aside(report, f"there is no file {path}")
        return
    try:
        mine = traces.Trace.parse(path.read_text(), source=str(path))
    except ValueError as e:  # the grammar's own message names the line (a file that is not text is one too)
        aside(report, f"{path} cannot be replayed: {e}")
        return
    stats = mine.stats()
    what = (f"{path.name} ({stats['events']:,} events, {stats['steps']} step(s), {stats['streams']} stream(s), peak "
            f"{nbytes(stats['peak'])})")
    if not getattr(lesson, "live", False):
        aside(report, f"{what} is read, not replayed: a trace of your own needs a GPU (live mode), and in replay only "
                      "the course's recorded runs can be shown")
        return
    try:
        res = lesson.run(REPLAYER, [path, *arguments(choice)], timeout=120)
    except CourseError as e:  # the replayer refused the trace, crashed or ran past its timeout
        aside(report, f"{what}: the replayer stopped: {str(e).splitlines()[0]}")
        return
    r = yours(res.records, choice)
    steps = [h for _, values in held(r) for h in values if type(h) is int] if r else []
    if r is None or not steps or not r.get("round_us") or not r.get("cold_us"):
        aside(report, f"{what}: the replayer printed no replay of your setting with its figures")
        return
    rounds = measure.summary(r["round_us"])
    aside(report, f"{what}, replayed with your choice on {res.label}: after a step's synchronization it held at most "
                  f"{size(max(steps))} (in {len(held(r))} passes), while a step ran up to {size(r['peak_reserved'])}; "
                  f"once warm it took memory from the driver {r['grows_warm']} time(s) in {r['steps']} steps; a warm "
                  f"step took {rounds['median']:.0f} µs (the median of {rounds['n']} rounds' medians, "
                  f"{rounds['min']:.0f} to {rounds['max']:.0f}), a cold pass with its set-up "
                  f"{measure.med(r['cold_us']):.0f} µs")
