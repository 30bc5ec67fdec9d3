"""Lesson 08's plumbing: allocation traces (read, written, made from what the trace programs print, or built
deterministically), and the tables, timelines and sentences made from the replays.

The CUDA replayer, the Python programs that record and replay traces, the runs and the assertions stay in
notebooks/08_real_workloads.ipynb (and solutions/lab7_choose_allocator.ipynb); this module holds the rest.

A trace is a text file the replayers read, one event a line:

    a <id> <bytes> <stream>    allocate block <id> of <bytes> on stream <stream> (0, 1, ...)
    f <id>                     free block <id>, on the stream it was allocated on
    s                          end of a step: the program synchronizes here
    # ...                      a comment (the trace's name and where it came from)
"""
from __future__ import annotations

from pathlib import Path

from .. import plots, replay, together
from ..measure import MiB, med, mib, nbytes
from ..traces import ACTIONS, MOST_EVENTS, Trace, built_to_fragment, cut, from_address_events, from_rmm_csv, slug, spiky_service


def made(lesson, runs: dict, make: bool = False, timeout: float = 120) -> dict:
    """The trace programs' results, {key: Result}, for `runs` = {key: (file, args, requires)}. Where they run (in
    replay; live with `make`; while recording) they run at once, without turns (a trace is what a program asked its
    allocator for, the same with the GPU shared). Live otherwise, each is the run that made the reference recording,
    committed with the course (its label says so): making them takes a PyTorch start of seconds, and the replays
    that follow, which time and count, run live on this GPU either way. A program with no such recording runs."""
    if not lesson.live or make or replay.recording():
        return together.run(lesson, runs, timeout=timeout, turns=False)
    got = {k: lesson.reference(file, args) for k, (file, args, _) in runs.items()}
    todo = {k: runs[k] for k, r in got.items() if r is None}
    return {**got, **(together.run(lesson, todo, timeout=timeout, turns=False) if todo else {})}


def size(n: int) -> str:
    """Bytes as the tables show them: MiB with one decimal."""
    return f"{mib(n):,.1f} MiB"


# -- the replays' records --------------------------------------------------------------------------------------
def step_us(r: dict) -> float:
    return med(r["step_us"])


# Each replayer's floor: the same loop on one buffer, with no allocator. A Python loop costs more than a C++ one,
# so an allocator's own cost is its time per step above the floor of its own loop (RMM replays through CuPy arrays),
# timed in the same process (replay_alloc.py's "process"): a Python loop's time differs between processes.
# Each process has one floor per trace; replay_trace.cu's (which has no "process") is CUDA_FLOOR.
CUDA_FLOOR = "one buffer (no allocator)"


def is_floor(r: dict) -> bool:
    return r["allocator"].startswith("one buffer")


def floor_of(r: dict, results) -> dict | None:
    return next((f for f in results if f.get("trace") == r.get("trace") and is_floor(f)
                 and f.get("process") == r.get("process") and not f.get("skipped")), None)


def own_us(r: dict, results) -> float:
    """Time per step above the floor of the same replayer's loop in the same process (0 for a floor; the whole
    time where there is no floor)."""
    if is_floor(r):
        return 0.0
    f = floor_of(r, results)
    return step_us(r) - (step_us(f) if f else 0.0)


# A time below the floor of its own process is the spread of the loop's timing, larger there than what the
# allocator costs.
BELOW_FLOOR = "below its loop's floor: the timing's spread, no allocator cost; left out of the ranking"


def num(x: float):
    """A table's figure: whole above 1000 (so that no column reads 1.358e+04), one decimal below."""
    return round(x) if abs(x) >= 1000 else round(x, 1)


def rows(results: list[dict], trace: Trace) -> list[dict]:
    """One table row per allocator that replayed `trace` (records with "trace" == its name)."""
    peak = trace.stats()["peak"]
    out = []
    for r in results:
        if r.get("trace") != trace.name:
            continue
        if r.get("skipped"):
            out.append({"allocator": r["allocator"], "µs per step": "skipped", "note": r["skipped"]})
            continue
        out.append({"allocator": r["allocator"], "µs per step": num(step_us(r)),
                    "µs above its loop's floor": num(own_us(r, results)),
                    "peak reserved MiB": num(mib(r["peak_reserved"])),
                    # a floor has no allocator: what its library says is in use is its one buffer (PyTorch) or the
                    # trace's live bytes (CuPy, CUDA), not comparable with the allocators' rows
                    "peak in use MiB": "–" if is_floor(r) else round(mib(r["peak_in_use"]), 1),
                    "reserved / trace peak": round(r["peak_reserved"] / peak, 2) if peak else None,
                    "held after a step, MiB": num(mib(max(r["held"], default=0))),
                    "grew / shrank (cold)": f"{r['grows']} / {r['shrinks']}",
                    "grew / shrank (warm)": f"{r['grows_warm']} / {r['shrinks_warm']}",
                    "note": "the floor of its process's loop" if is_floor(r) else
                    "reports less reserved than in use: left out of the conclusion" if not reported(r) else
                    BELOW_FLOOR if own_us(r, results) < 0 else ""})
    return out


def reported(r: dict) -> bool:
    """Did the allocator report what it holds? What it holds covers what it hands out; a smaller figure is not it."""
    return r["peak_reserved"] >= r["peak_in_use"]


def measured(results: list[dict], trace: Trace) -> list[dict]:
    """The replays of `trace` that ran (not skipped) and reported what they hold, excluding the one-buffer floors."""
    return [r for r in results if r.get("trace") == trace.name and not r.get("skipped") and reported(r)
            and not is_floor(r)]


def table(results, trace: Trace, label: str) -> plots.Table:
    s = trace.stats()
    return plots.Table(rows(results, trace), label,
                       title=f"{trace.name}: {s['events']} events, {s['steps']} steps, peak asked {size(s['peak'])}")


def conclusion(results, trace: Trace, gpu: str, slack: float = 1.25) -> str:
    """Which allocator fits this trace, from the replays: the cheapest (time per step above its loop's floor), the
    smallest footprint, and the cheapest of those whose peak reserved is within `slack` of the smallest."""
    done = measured(results, trace)
    if not done:
        return f"**{plots.md(trace.name)}**: no allocator replayed it here."
    cost = {r["allocator"]: own_us(r, results) for r in done}
    name = lambda r: plots.md(r["allocator"])  # noqa: E731  a recorded name goes in as text, never as markup
    us = lambda r: f"{cost[r['allocator']]:.0f} µs a step above its loop's floor, {step_us(r):.0f} in all"  # noqa: E731
    below = [r for r in done if cost[r["allocator"]] < 0]
    timed = [r for r in done if cost[r["allocator"]] >= 0] or done
    fastest = min(timed, key=lambda r: cost[r["allocator"]])
    smallest = min(done, key=lambda r: r["peak_reserved"])
    fits = min((r for r in timed if r["peak_reserved"] <= slack * smallest["peak_reserved"]),
               key=lambda r: cost[r["allocator"]], default=fastest)
    peak = trace.stats()["peak"]
    worst = max(done, key=lambda r: r["peak_reserved"])
    text = (f"**{plots.md(trace.name)}** on {plots.md(gpu)}: the cheapest is {name(fastest)} ({us(fastest)}; peak reserved "
            f"{size(fastest['peak_reserved'])}); the smallest footprint is {name(smallest)} "
            f"({size(smallest['peak_reserved'])}, {smallest['peak_reserved'] / peak:.2f}× the {size(peak)} the "
            f"trace asks for at its peak; {us(smallest)}). ")
    if below and timed is not done:
        text += ("Left out of the ranking, below its loop's floor: "
                 + ", ".join(f"{name(r)} ({cost[r['allocator']]:.0f} µs)" for r in below)
                 + "; there the spread of the loop's timing is larger than what the allocator costs. ")
    if fits is fastest:
        text += f"The cheapest is also within {slack:g}× of the smallest footprint: it fits this trace. "
    else:
        text += (f"Of the allocators within {slack:g}× of the smallest footprint, {name(fits)} is cheapest "
                 f"({us(fits)}); the cheapest overall holds "
                 f"{fastest['peak_reserved'] / fits['peak_reserved']:.2f}× as much at the peak. ")
    up_front = worst["grows"] <= 2 and worst["peak_reserved"] > 2 * peak  # a starting size, not the trace's doing
    text += (f"The largest footprint is {name(worst)}'s, {worst['peak_reserved'] / peak:.2f}× the trace's peak"
             + (f" (what it held grew {worst['grows']} times over the cold pass: most of it was the size the allocator "
                "starts with, not what the trace asked)" if up_front else "")
             + (f", and it took memory from the driver {worst['grows_warm']} times in a warm replay" if
                worst["grows_warm"] else "") + ".")
    churn = [r for r in done if r["grows_warm"] > 0 and r["shrinks_warm"] > 0]
    if churn:
        text += (" Still taking memory from the driver and giving it back once warm (times taken/given): "
                 + ", ".join(f"{name(r)} ({r['grows_warm']}/{r['shrinks_warm']})" for r in churn) + ".")
    return text


# -- the timeline and the explorer -----------------------------------------------------------------------------
def timeline(r: dict) -> dict:
    return {"event": r["timeline_event"], "in_use": r["timeline_in_use"], "reserved": r["timeline_reserved"]}


def grid(results) -> dict:
    """{"trace|allocator": what a timeline needs}, for the explorer."""
    return {f"{r['trace']}|{r['allocator']}": {**timeline(r), "peak_reserved": r["peak_reserved"],
                                               "step_us": step_us(r)}
            for r in results if not r.get("skipped")}


def plot_timeline(trace_name: str, allocator: str, data=None, label: str = "", trace: Trace | None = None):
    """Reserved and in use over one cold replay (the largest value of each span of events), as PyTorch's memory
    viewer draws it; with `trace`, what the trace itself asks for beside them."""
    fig, ax = plots.figure(f"{trace_name}: {allocator}", label, size=(8.5, 3.8))
    ax.fill_between(data["event"], [mib(v) for v in data["reserved"]], step="post", color="C1", alpha=0.3,
                    label="reserved from the driver")
    ax.step(data["event"], [mib(v) for v in data["in_use"]], where="post", color="C0", label="in use")
    if trace is not None:
        ax.plot(range(len(trace.events)), [mib(v) for v in trace.in_use()], color="0.3", linewidth=0.6,
                label="asked for by the trace")
    ax.set_xlabel("event of the trace")
    ax.set_ylabel("MiB")
    ax.set_title(f"{data['step_us']:.0f} µs a step, peak reserved {size(data['peak_reserved'])}", fontsize=9)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    return fig


def explorer(results, traces: dict, label: str):
    """A widget over the recorded replays: pick a trace and an allocator, see its timeline."""
    from .. import widgets

    data = grid(results)
    names = list(traces)
    every = [{k.split("|", 1)[1] for k in data if k.split("|", 1)[0] == t} for t in names]
    allocators = [a for a in dict.fromkeys(k.split("|", 1)[1] for k in data) if all(a in e for e in every)]
    return widgets.Explorer(
        data, lambda t, a, data=None, label="": plot_timeline(t, a, data, label, traces[t]),
        {"trace": names, "allocator": allocators}, default=(names[0], allocators[0]),
        key=lambda t, a: f"{t}|{a}", label=label)
