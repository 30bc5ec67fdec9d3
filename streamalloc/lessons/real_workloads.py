"""Lesson 08's plumbing: the traces' runs, and the tables, verdicts, timelines and sentences made from the replays.
The trace model itself (the format, the reader both replayers share, the converters) is streamalloc/traces.py.

The CUDA replayer, the Python programs that record and replay traces, the runs and the assertions stay in
notebooks/08_real_workloads.ipynb (and solutions/lab7_choose_allocator.ipynb); this module holds the rest.

Every setting is timed in ROUNDS rounds (but for a trace or a setting replayed for its footprint only, which has no
timed round: timed(r)), each from a fresh state, the settings of one replayer taking turns. A setting's figure is the
median of its rounds, shown with the range of its middle rounds (its interquartile range: of five, the second to the
fourth). A verdict is the course's rule (streamalloc/compare.py), on the rounds paired by their index: a setting is
named only where an exact signed-rank test on the paired rounds separates it from every other at 5 % (Holm's
correction) by at least 5 % of the other's whole time per step; otherwise it is a tie, and says so (five rounds, as
recordings made before nine hold, can never decide: their smallest p is 2/32).
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from .. import compare, plots, replay, together
from ..errors import RecordingError
from ..measure import HOST_RESOLUTION_US, med, mib
from ..traces import LIBRARIES as TRACE_ORIGINS
from ..traces import Trace

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
ROUNDS = 9  # the replayers time each setting in this many rounds (replay_alloc.py's ROUNDS; replay_trace.cu's argument)


@dataclasses.dataclass(frozen=True)
class Replayer:
    """One of replay_alloc.py's libraries (the program's own branch for it is in replay_alloc.py)."""

    library: str  # whose allocators it replays, as the tables name the library
    requires: tuple  # the modules it needs (RMM replays through CuPy's arrays, and says where RMM is missing)
    paired: bool = False  # one of PyTorch's two backends: two processes whose rounds take turns (--pair)


# replay_alloc.py's libraries, one row each: the tables below are read from it
REPLAYERS = {"cupy": Replayer("CuPy", ("cupy",)), "torch": Replayer("PyTorch", ("torch",), paired=True),
             "torch-async": Replayer("PyTorch", ("torch",), paired=True), "rmm": Replayer("RMM", ("cupy",))}
REQUIRES = {name: r.requires for name, r in REPLAYERS.items()}
PAIRED = tuple(name for name, r in REPLAYERS.items() if r.paired)
BUSY_US = 50  # µs of GPU work per block for the busy-GPU replay: tens of µs, as a small layer's kernels take


def held_by_pass(r: dict) -> dict[str, list]:
    """{pass name: what the allocator held after each of its steps}, from a replay's "held" and "passes"."""
    n = r["steps"]
    return {name: r["held"][k * n:(k + 1) * n] for k, name in enumerate(r["passes"])}


def timed(r: dict) -> bool:
    """Was the setting timed? A trace replayed for its footprint only (and RMM's pool at its default size, the same
    pool as the sized one) has its sampled passes and no timed rounds."""
    return bool(r.get("round_us"))


def step_us(r: dict) -> float | None:
    """A setting's time per step: the median of its rounds' medians (None where it was not timed)."""
    return med(r["round_us"]) if timed(r) else None


# Each replayer's floor: the same loop on one buffer, with no allocator. A Python loop costs more than a C++ one,
# so an allocator's own cost is its time per step above the floor of its own loop (RMM replays through CuPy arrays),
# timed in the same process (replay_alloc.py's "process") and in the same round: a Python loop's time differs
# between processes, and a machine drifts. replay_trace.cu's floor (which has no "process") is CUDA_FLOOR.
CUDA_FLOOR = "one buffer (no allocator)"
LIBRARIES = {None: "CUDA (C++)", **{name: r.library for name, r in REPLAYERS.items()}}


def library(r: dict) -> str:
    """The library whose real choices a setting is one of: its times are ranked only against theirs."""
    return LIBRARIES.get(r.get("process"), str(r.get("process")))


def is_floor(r: dict) -> bool:
    return r["allocator"].startswith("one buffer")


def floor_of(r: dict, results) -> dict | None:
    return next((f for f in results if f.get("trace") == r.get("trace") and is_floor(f) and f.get("work_us") ==
                 r.get("work_us") and f.get("process") == r.get("process") and not f.get("skipped")), None)


def own_rounds(r: dict, results) -> list[float]:
    """Per round, the setting's median warm step above its floor's in the same round (the whole time where it has
    no floor; 0 for a floor)."""
    f = floor_of(r, results)
    if is_floor(r):
        return [0.0] * len(r["round_us"])
    return [a - b for a, b in zip(r["round_us"], f["round_us"])] if f else list(r["round_us"])


def own_us(r: dict, results) -> float:
    """Time per step above the floor of the same replayer's loop, round by round: their median."""
    return med(own_rounds(r, results))


@dataclasses.dataclass
class Figure:
    """A setting's figure over its rounds, in round order: the median, and the range of the middle rounds (its
    spread, shown beside it). `whole`: its whole time per step in each round, where `values` are above a floor (the
    verdict's practical margin is a share of the whole time)."""
    name: str
    values: list
    whole: list | None = None

    @property
    def median(self) -> float:
        return med(self.values)

    @property
    def middle(self) -> list:
        """The rounds without the lowest and highest quarter (of five: the second to the fourth): one round that a
        hiccup of the machine slowed is left out of the spread, as an interquartile range leaves it out."""
        k = len(self.values) // 4
        return sorted(self.values)[k:len(self.values) - k]

    @property
    def spread(self) -> float:
        return max(self.middle) - min(self.middle)

    def text(self, unit: str = "µs") -> str:
        f = (lambda x: f"{x:,.1f}") if max(abs(v) for v in self.values) < 100 else (lambda x: f"{x:,.0f}")  # noqa: E731
        return f"{f(self.median)} {unit} (middle rounds {f(min(self.middle))}–{f(max(self.middle))})"


def decision(figures: list[Figure]) -> compare.Verdict:
    """The course's verdict (streamalloc/compare.py) on these figures' rounds, paired by round index: the settings
    of one replayer took turns within each round. Both replayers time a step with a host clock (HOST_RESOLUTION_US)."""
    return compare.decide({f.name: f.values for f in figures}, resolution=HOST_RESOLUTION_US,
                          scale={f.name: med(f.whole or f.values) for f in figures})


def ahead(a: Figure, b: Figure) -> bool:
    """a is faster than b in the paired rounds, past the test at 5 % and by a practical margin."""
    return decision([a, b]).winner == a.name


def leaders(figures: list[Figure]) -> list[Figure]:
    """The lowest figure and every one the verdict cannot separate from it, lowest first: one is a winner, more a
    tie."""
    by = {f.name: f for f in figures}
    return [by[name] for name in decision(figures).group]


def verdict(figures: list[Figure], what: str, unit: str = "µs") -> str:
    """A sentence: the winner, by how much and how sure; or a tie, and why."""
    if not figures:
        return f"no {what} was measured"
    by = {f.name: f for f in figures}
    return compare.sentence(decision(figures), what, unit, figure=lambda name: by[name].text(unit), name=plots.md)


# A setting below the floor of its own process, over the rounds: the floor's loop (views of one buffer) costs that
# library more than this allocator's own calls; reported as measured, and ranked as measured.
BELOW_FLOOR = "below its loop's floor: the floor's views cost more here than this allocator"
NOT_TIMED = "its footprint only: not timed"  # a setting or trace replayed for its footprint only (timed(r) is False)


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
            out.append({"library": library(r), "allocator": r["allocator"], "µs per step": "skipped",
                        "note": r["skipped"]})
            continue
        mine = own(r, results) if timed(r) else None
        out.append({"library": library(r), "allocator": r["allocator"],
                    "µs per step": num(step_us(r)) if mine else "not timed",
                    "above its loop's floor": "–" if is_floor(r) or not mine else num(mine.median),
                    "spread of the rounds": "–" if is_floor(r) or not mine else num(mine.spread),
                    "cold pass ms": round(med(r["cold_us"]) / 1000, 1) if mine else "–",
                    "peak reserved MiB": num(mib(r["peak_reserved"])),
                    # a floor has no allocator: what its library says is in use is its one buffer (PyTorch) or the
                    # trace's live bytes (CuPy, CUDA), not comparable with the allocators' rows
                    "reserved / trace peak": "–" if is_floor(r) else round(r["peak_reserved"] / peak, 2),
                    "grew / shrank (warm)": f"{r['grows_warm']} / {r['shrinks_warm']}",
                    "note": "the floor of its process's loop" if is_floor(r) else
                    "reports less reserved than in use: left out of the conclusions" if not reported(r) else
                    f"{r['again_of']} again: the A/A check" if r.get("again_of") else
                    NOT_TIMED if not mine else BELOW_FLOOR if mine.median < 0 else ""})
    return out


def reported(r: dict) -> bool:
    """Did the allocator report what it holds? What it holds covers what it hands out; a smaller figure is not it."""
    return r["peak_reserved"] >= r["peak_in_use"]


def setting(results: list[dict], trace: str, allocator: str) -> dict:
    """The replay of the trace named `trace` by the setting named `allocator`. A recording whose replayer named its
    settings otherwise (an older replay_trace.cu or replay_alloc.py) has none: a RecordingError naming those it has."""
    got = next((r for r in results if r.get("trace") == trace and r.get("allocator") == allocator
                and not r.get("skipped")), None)
    if got is None:
        have = ", ".join(dict.fromkeys(str(r.get("allocator")) for r in results if r.get("trace") == trace)) or "none"
        raise RecordingError(f"no replay of the trace '{trace}' by the setting '{allocator}' (its replays: {have}): "
                             f"the replayer that made them names its settings otherwise; {replay.RERECORD}")
    return got


def measured(results: list[dict], trace: Trace) -> list[dict]:
    """The replays of `trace` that ran (not skipped) and reported what they hold, excluding the one-buffer floors."""
    return [r for r in results if r.get("trace") == trace.name and not r.get("skipped") and reported(r)
            and not is_floor(r)]


def table(results, trace: Trace, label: str) -> plots.Table:
    s = trace.stats()
    return plots.Table(rows(results, trace), label,
                       title=f"{trace.name}: {s['events']} events, {s['steps']} steps, {s['streams']} stream(s), "
                             f"peak asked {size(s['peak'])}; times: medians of {ROUNDS} rounds")


def by_library(done: list[dict]) -> dict[str, list[dict]]:
    out = {}
    for r in done:
        out.setdefault(library(r), []).append(r)
    return out


def own(r: dict, results) -> Figure:
    """A setting's figure: each round's time per step above its loop's floor (own_rounds), beside its whole time."""
    return Figure(r["allocator"], own_rounds(r, results), r["round_us"])


def figures(results, trace: Trace, lib: str, twins: bool = True) -> list[Figure]:
    """One library's timed settings on this trace, as figures; without the A/A `twins` (a setting replayed again
    under another name, "again_of": the A/A check's, no choice of the library's, and a tie with its setting that would
    hide that setting's win)."""
    return [own(r, results) for r in measured(results, trace) if library(r) == lib and timed(r)
            and (twins or not r.get("again_of"))]


def verdicts(results, trace: Trace) -> dict[str, list[Figure]]:
    """{library: the leaders of its settings on this trace's time per step above the floor}: one is a winner."""
    return {lib: leaders(f) for lib in by_library(measured(results, trace)) if (f := figures(results, trace, lib))}


def conclusion(results, trace: Trace, gpu: str) -> str:
    """Per library, which of its own choices is cheapest on this trace (or a tie); across libraries, only what the
    bindings do not change: the footprint and the traffic with the driver."""
    done = measured(results, trace)
    if not done:
        return f"**{plots.md(trace.name)}** on {plots.md(gpu)}: no allocator replayed it here."
    peak = trace.stats()["peak"]
    lines = [f"**{plots.md(trace.name)}** on {plots.md(gpu)}, time per step above each loop's own floor:"]
    for lib in by_library(done):
        lines.append(f"- {lib}: " + verdict(figures(results, trace, lib, twins=False), "of its settings"))
    ratio = {r["allocator"]: r["peak_reserved"] / peak for r in done}
    small = min(ratio.values())
    near = [a for a, x in sorted(ratio.items(), key=lambda kv: kv[1]) if x <= 1.05 * small]
    worst = max(done, key=lambda r: r["peak_reserved"])
    text = ("\n".join(lines) + f"\n\nAcross libraries, footprint: the smallest peak reserved is "
            f"{small:.2f}× the {size(peak)} the trace asks for at its peak ("
            + ", ".join(plots.md(a) for a in near) + (", within 5% of one another" if len(near) > 1 else "")
            + f"); the largest is {plots.md(worst['allocator'])}'s, {ratio[worst['allocator']]:.2f}×")
    text += (" (most of it the size the allocator starts with, not what the trace asked)" if starting_size(worst, trace)
             else "") + ". "
    churn = [r for r in done if r["grows_warm"] > 0 and r["shrinks_warm"] > 0]
    text += ("Traffic with the driver once warm (times taken/given back in one pass): "
             + ", ".join(f"{plots.md(r['allocator'])} ({r['grows_warm']}/{r['shrinks_warm']})" for r in churn)
             + "; every other allocator kept what it had." if churn else
             "Once warm, no allocator took memory from the driver and gave it back within a pass.")
    return text


def cold(results, trace: Trace) -> list[Figure]:
    """CUDA's settings, each round's set-up and cold pass in ms: when does reserving up front pay off?"""
    return [Figure(r["allocator"], [us / 1000 for us in r["cold_us"]])
            for r in measured(results, trace) if library(r) == "CUDA (C++)" and timed(r)]


def reserved_short(results, trace: Trace) -> list[str]:
    """Where the explicit pool, reserved to the trace's peak up front, still had to grow in its cold pass."""
    return [f"{plots.md(r['trace'])}: it grew {r['grows']} time(s) in the cold pass, to {size(r['peak_reserved'])}"
            for r in measured(results, trace) if r.get("kind") == "explicit" and r["grows"] > 0]


def paired(idle: list[dict], busy: list[dict]):
    """(idle, busy) records of each setting both replays ran, floors left out."""
    for r0 in idle:
        r1 = next((r for r in busy if r["allocator"] == r0["allocator"]), None)
        if r1 is not None and not is_floor(r0):
            yield r0, r1


def busy_rows(idle: list[dict], busy: list[dict]) -> list[dict]:
    """CUDA's settings on one trace with the GPU idle and busy: the time above the floor (which does the same GPU work
    with no allocator), and how much of it the GPU's work hid."""
    out = []
    for r0, r1 in paired(idle, busy):
        a, b = own(r0, idle), own(r1, busy)
        out.append({"allocator": r0["allocator"],
                    f"above the floor, {r0['work_us']:g} µs of work a block": f"{num(a.median)} ± {num(a.spread / 2)}",
                    f"above the floor, {r1['work_us']:g} µs of work a block": f"{num(b.median)} ± {num(b.spread / 2)}",
                    "µs per step with the work": num(step_us(r1)), "floor with the work": num(step_us(floor_of(r1, busy)))})
    return out


def busy_sentence(idle: list[dict], busy: list[dict]) -> str:
    """What the GPU's work hid, setting by setting, and the verdict with the GPU busy."""
    parts = [f"{plots.md(r0['allocator'])} {own_us(r0, idle):,.0f} → {own_us(r1, busy):,.0f} µs"
             for r0, r1 in paired(idle, busy)]
    figs = [own(r, busy) for r in busy if not is_floor(r)]
    work = busy[0]["work_us"] if busy else BUSY_US
    return (f"Above the floor, idle → with {work:g} µs of work a block: " + "; ".join(parts)
            + f". With the GPU busy, {verdict(figs, 'setting')}.")


def streams_sentence(results, two: Trace, one: Trace) -> str:
    """Which allocators the second stream costs memory, and how much is left on one stream."""
    rows_ = streams_rows(results, two, one)
    if not rows_:
        return "No allocator replayed both traces here."
    grew = [r for r in rows_ if r["2 streams: reserved / peak"] > 1.1 * r["1 stream: reserved / peak"]]
    text = ("The second stream costs memory where an allocator caches per stream: "
            + ", ".join(f"{plots.md(r['allocator'])} ({r['1 stream: reserved / peak']:.2f}× on one stream, "
                        f"{r['2 streams: reserved / peak']:.2f}× on two)" for r in grew) + ". ") if grew else \
        "No allocator reserved more than 10% more with two streams than with one. "
    starts = {r["allocator"] for r in measured(results, one) if starting_size(r, one)}
    left = [r for r in rows_ if r["allocator"] not in starts] or rows_
    worst = max(left, key=lambda r: r["1 stream: reserved / peak"])
    return text + (f"On one stream, what is left is the fragmentation: at most {worst['1 stream: reserved / peak']:.2f}× "
                   f"the trace's peak ({plots.md(worst['allocator'])})"
                   + (f", leaving out the size {', '.join(plots.md(a) for a in sorted(starts))} starts with" if starts
                      else "") + ".")


def starting_size(r: dict, trace: Trace) -> bool:
    """Most of what it reserved is the size the allocator starts with, not what the trace asked: it grew at most twice
    in its cold pass, to more than twice the trace's peak."""
    return r["grows"] <= 2 and r["peak_reserved"] > 2 * trace.stats()["peak"]


def hook_log(result, folder) -> Path:
    """cupy_filter.py's hook log (section 1's run), as a file: what a learner's own CuPy hook would write."""
    path = Path(folder) / "cupy_hook_log.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in result.records))
    return path


# The replayers that time a trace recorded by each library (its "# library:" comment, traces.LIBRARIES): that
# library's own; the others replay it for its footprint only, a time being compared within one library and a
# footprint across them
TIMED_BY = {origin: tuple(name for name, r in REPLAYERS.items() if r.library == shown)
            for origin, shown in TRACE_ORIGINS.items()}


def your_runs(file: Path, library: str, available=None) -> dict:
    """replay_alloc.py's runs for a learner's trace recorded by `library`: {lib: (file, args, requires)}, the libraries
    in TIMED_BY[library] timed, every other for its footprint; only those whose modules import (`available`: a
    function of the module names, lesson.missing_modules by default)."""
    from ..lesson import missing_modules

    available = available or (lambda mods: not missing_modules(mods))
    return {lib: ("replay_alloc.py", [lib, *(["--pair"] if lib in PAIRED else []),
                                      *([] if lib in TIMED_BY.get(library, ()) else ["--footprint"]), str(file)], req)
            for lib, req in REQUIRES.items() if available(req)}


def your_trace(lesson, path, timeout: float = 120) -> list:
    """A learner's trace file (a PyTorch snapshot, a CuPy hook log, an RMM log or a course trace) converted as
    `python -m streamalloc trace` converts it, then replayed live through replay_trace.cu and replay_alloc.py: the
    allocators of the library that recorded it timed (TIMED_BY), the rest for the footprint: what to display. In
    replay nothing can run a new trace."""
    from IPython.display import Markdown

    from .. import traces

    if not lesson.live:
        return [Markdown("A trace of your own needs a GPU: in replay this notebook shows what the reference GPU "
                         "recorded, and no recording holds your trace. Run the notebook live on a GPU and this cell "
                         "replays it there.")]
    try:
        mine = traces.convert(path)
    except traces.TraceError as e:
        return [Markdown(f"Your trace cannot be replayed: {plots.md(str(e))}")]
    file = mine.write(lesson.build)
    cpp = lesson.run("replay_trace.cu", [str(file), "all", "0", str(ROUNDS)], timeout=timeout)
    runs = your_runs(file, mine.library)  # both PyTorch processes or neither (--pair): they need the same module
    py = together.run(lesson, runs, timeout=timeout) if runs else {}
    results = [{**r, "trace": mine.name} for r in cpp.records[1:]] + [
        r for run in py.values() for r in run.records if "allocator" in r]
    origin = traces.LIBRARIES.get(mine.library)
    timed_here = (f"{origin}'s allocators timed, the other libraries' for the footprint" if origin else
                  "it names no library that recorded it: every library's allocators for the footprint only")
    left = ", ".join(lib for lib in REQUIRES if lib not in runs)
    return [Markdown(f"`python -m streamalloc trace {plots.md(Path(path).name)} -o {file.name}`: "
                     f"{plots.md(traces.summary(mine))}. Replayed: CUDA's allocators timed, {timed_here}"
                     + (f" (not here, its modules missing: {left})." if left else ".")),
            table(results, mine, cpp.label), Markdown(conclusion(results, mine, plots.short(cpp.label)))]


def streams_rows(results, two: Trace, one: Trace) -> list[dict]:
    """Peak reserved against the trace's peak, with its blocks on two streams and on one."""
    out = []
    for r2 in measured(results, two):
        r1 = next((r for r in measured(results, one) if r["allocator"] == r2["allocator"]), None)
        if r1 is not None:
            out.append({"library": library(r2), "allocator": r2["allocator"],
                        "2 streams: reserved / peak": round(r2["peak_reserved"] / two.stats()["peak"], 2),
                        "1 stream: reserved / peak": round(r1["peak_reserved"] / one.stats()["peak"], 2)})
    return out


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
    speed = "not timed" if data["step_us"] is None else f"{data['step_us']:.0f} µs a step"
    ax.set_title(f"{speed}, peak reserved {size(data['peak_reserved'])}", fontsize=9)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    return fig


def explorer(results, traces: dict, label: str):
    """A widget over the recorded replays: pick a trace and an allocator, see its timeline."""
    from .. import widgets

    data = grid([r for r in results if not r.get("skipped") and not is_floor(r) and reported(r)])
    names = list(traces)
    every = [{k.split("|", 1)[1] for k in data if k.split("|", 1)[0] == t} for t in names]
    allocators = [a for a in dict.fromkeys(k.split("|", 1)[1] for k in data) if all(a in e for e in every)]
    return widgets.Explorer(
        data, lambda t, a, data=None, label="": plot_timeline(t, a, data, label, traces[t]),
        {"trace": names, "allocator": allocators}, default=(names[0], allocators[0]),
        key=lambda t, a: f"{t}|{a}", label=label)
