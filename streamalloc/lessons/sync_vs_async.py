"""Lesson 01 (sync vs async): reading its programs' records, and the tables, figures and text built from them.

Each class wraps one program's result and answers the questions the notebook asks of it; the functions at
the end write the lesson's conclusions from those answers. Nothing here measures.
"""
from __future__ import annotations

import statistics

import matplotlib.pyplot as plt
from IPython.display import Markdown

from .. import measure, plots
from ..measure import med, nbytes

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
HIT, MISS = "cudaMallocAsync (pool hit)", "cudaMallocAsync (pool miss)"
LOOPS = {"sync": "cudaMalloc + kernel + cudaFree", "async": "cudaMallocAsync + kernel + cudaFreeAsync",
         "prealloc": "kernel on a preallocated buffer (the limit)"}


def pow2_at_most(x) -> int:
    return 1 << (int(x).bit_length() - 1)


def size_axis(ax, sizes):
    """A log2 axis of byte sizes, labelled every factor of 4."""
    plots.bytes_axis(ax)
    lo, hi = min(sizes), max(sizes)
    ax.set_xticks([t for t in (2 ** k for k in range(0, 41, 2)) if lo <= t <= hi])
    ax.tick_params(axis="x", labelsize=8, labelrotation=30)
    ax.set_xlabel("allocation size")


# -- section 1: host_cost.cu ------------------------------------------------------------------------------
class HostCost:
    """host_cost.cu's records: cost(call, size) is the median host time of one call, in µs."""
    CALLS = ["cudaMalloc", "cudaFree", MISS, HIT, "cudaFreeAsync"]

    def __init__(self, res):
        self.res, self.label = res, res.label
        self.sizes = sorted({r["size"] for r in res.records})

    def __call__(self, call, size) -> float:
        return med(self.res.records.one(call=call, size=size)["us"])

    def table(self, largest):
        shown = sorted({s for s in (4 * KiB, 64 * KiB, 1 * MiB, 4 * MiB, 64 * MiB, 256 * MiB, largest)
                        if s in self.sizes})
        return plots.Table([{"size": nbytes(s), **{c: round(self(c, s), 2) for c in self.CALLS}} for s in shown],
                           self.label, title="Median host time per call (µs), 25 calls each")


def miss_vs_malloc(cost: HostCost, largest) -> Markdown:
    """What this GPU did where the notebook asserts nothing: a pool miss against cudaMalloc, from 2 MiB up."""
    ratio = {s: cost(MISS, s) / cost("cudaMalloc", s) for s in cost.sizes if s >= 2 * MiB}
    lo, hi = min(ratio.values()), max(ratio.values())
    return Markdown(
        f"Pool hit at 4 MiB: {cost(HIT, 4 * MiB):.2f} µs; `cudaMalloc` at 4 MiB: {cost('cudaMalloc', 4 * MiB):.1f} µs. "
        f"At {nbytes(largest)}: pool hit {cost(HIT, largest):.2f} µs, `cudaMalloc` {cost('cudaMalloc', largest):.0f} µs, "
        f"`cudaFree` {cost('cudaFree', largest):.0f} µs. A pool miss costs {lo:.2f} to {hi:.2f} times a `cudaMalloc` "
        f"of the same size from 2 MiB up (at {nbytes(largest)}: {ratio[largest]:.2f} times)"
        + (": on this GPU growing the pool is never cheaper than `cudaMalloc`." if lo >= 1 else "."))


# -- section 2: does_it_wait.cu ---------------------------------------------------------------------------
class Waits:
    """does_it_wait.cu's records: wait(call, size) summarizes what one call did while the long kernel ran."""
    CALLS = ["no call (control)", "cudaFree", "cudaFreeAsync", "cudaFree of a cudaMallocAsync pointer",
             "cudaMalloc", HIT, "cudaMallocAsync (pool grows)"]

    def __init__(self, res, spin_ms):
        self.res, self.label, self.spin_ms = res, res.label, spin_ms
        self.sizes = sorted({r["size"] for r in res.records})
        self.reps = len({r["rep"] for r in res.records})

    def __call__(self, call, size) -> dict:
        rows = self.res.records.where(call=call, size=size)
        return {"host_us": med(r["host_us"] for r in rows), "kernel_us": med(r["kernel_us"] for r in rows),
                "returned_early": sum(r["running_after"] for r in rows),
                "overlapped": sum(r["other_start_us"] < 0 for r in rows),
                "other_start_us": med(r["other_start_us"] for r in rows), "n": len(rows)}

    def plot(self):
        fig, axes = plots.figure(f"Host time of each call made while a {self.spin_ms} ms kernel runs", self.label,
                                 ncols=len(self.sizes), size=(6.4, 4.2))
        for ax, size in zip(axes if len(self.sizes) > 1 else [axes], self.sizes):
            stats = [self(c, size) for c in self.CALLS]
            colors = ["tab:red" if s["returned_early"] == 0 else "tab:green" if s["returned_early"] == s["n"]
                      else "tab:orange" for s in stats]
            ax.barh(range(len(self.CALLS)), [max(s["host_us"], 0.01) for s in stats], color=colors)
            ax.axvline(med(s["kernel_us"] for s in stats), color="0.3", linestyle="--",
                       label="the kernel's own duration")
            ax.set_yticks(range(len(self.CALLS)), self.CALLS, fontsize=8)
            ax.invert_yaxis()
            ax.set_xscale("log")
            ax.set_xlabel(f"host time of the call (µs, median of {self.reps})")
            ax.set_title(f"{nbytes(size)}; red: waited for the kernel, green: returned while it ran", fontsize=9)
            ax.legend(fontsize=8, loc="center right")
        plt.show()

    def table(self):
        return plots.Table(
            [{"size": nbytes(size), "call": c, "host time (µs)": round(s["host_us"], 2),
              "kernel (ms)": round(s["kernel_us"] / 1000, 2),
              "returned while the kernel ran": f"{s['returned_early']}/{s['n']}",
              "kernel on `other` ran beside it": f"{s['overlapped']}/{s['n']}",
              "`other` started, relative to the kernel's end (ms)": round(s["other_start_us"] / 1000, 3)}
             for size in self.sizes for c in self.CALLS for s in [self(c, size)]],
            self.label, title=f"Each call made while the long kernel runs (medians of {self.reps} repeats)")


def seed_verdicts(wait: Waits, cost: HostCost) -> Markdown:
    """What section 2 measured, set against what seeds 001-003 and the guide say."""
    size, big = wait.sizes[0], wait.sizes[-1]
    f, fa, fo = wait("cudaFree", size), wait("cudaFreeAsync", size), wait("cudaFree of a cudaMallocAsync pointer", size)
    m, mbig = wait("cudaMalloc", size), wait("cudaMalloc", big)
    lines = [f"**Measured on {plots.md(wait.label)}**, with a kernel of {f['kernel_us'] / 1000:.1f} ms:", ""]
    if f["returned_early"] == 0:
        lines.append(f"- `cudaFree` of a {nbytes(size)} buffer from `cudaMalloc`, which the kernel never touched, "
                     f"returned after {f['host_us'] / 1000:.1f} ms, when the kernel had finished "
                     f"({f['n']}/{f['n']} repeats): it waited for work that does not use the buffer. Seed 003's "
                     "`// Synchronizes!` on `cudaFree` is right, and seed 002's \"the relevant operations\" is too "
                     "narrow.")
    else:
        lines.append(f"- `cudaFree` of a {nbytes(size)} buffer from `cudaMalloc` returned while the kernel ran in "
                     f"{f['returned_early']}/{f['n']} repeats ({f['host_us']:.1f} µs, median), and a kernel issued "
                     f"after it on another stream did not start before the long kernel ended in "
                     f"{f['n'] - f['overlapped']}/{f['n']}: the device serialized where the host did not wait, the "
                     "other sense of §15.1's \"causes GPU to synchronize\".")
    lines.append(f"- `cudaFreeAsync` returned after {fa['host_us']:.1f} µs with the kernel still running "
                 f"({fa['returned_early']}/{fa['n']}): the free waits in the stream, not on the host.")
    if fo["returned_early"] == fo["n"]:
        lines.append(f"- `cudaFree` of a pointer from `cudaMallocAsync` returned after {fo['host_us']:.1f} µs with the "
                     "kernel still running: no synchronization for stream-ordered memory, as Guide §15.3 *API "
                     "Fundamentals* says. It is then the program's job to make sure no work still uses the memory.")
    else:
        lines.append(f"- `cudaFree` of a pointer from `cudaMallocAsync` took {fo['host_us'] / 1000:.2f} ms and returned "
                     f"while the kernel ran in {fo['returned_early']}/{fo['n']} repeats: on this driver it did wait, "
                     "although Guide §15.3 *API Fundamentals* says it performs no further synchronization.")
    for s, sz in ((m, size), (mbig, big)):
        if s["returned_early"] == s["n"]:
            host = (f"returned after {s['host_us']:.1f} µs while the kernel was still running "
                    f"({s['returned_early']}/{s['n']}): the host does not wait for the GPU")
        elif s["returned_early"] == 0:
            host = f"waited for the kernel: {s['host_us'] / 1000:.1f} ms ({s['n']}/{s['n']} repeats)"
        else:
            host = f"returned while the kernel ran in only {s['returned_early']}/{s['n']} repeats"
        if s["returned_early"] and s["overlapped"] == s["n"]:
            dev = ("a kernel issued on another stream after it started "
                   f"{-s['other_start_us'] / 1000:.1f} ms before the long kernel ended: nothing serialized the streams")
        elif s["returned_early"] and s["overlapped"] == 0:
            dev = ("yet a kernel issued on another stream after it did not start until the long kernel had ended: "
                   "the device was serialized, although the host was not")
        elif s["returned_early"]:
            dev = f"a kernel on another stream ran beside the long one in {s['overlapped']}/{s['n']} repeats"
        else:
            dev = "so everything issued after it waits too"
        lines.append(f"- `cudaMalloc` of {nbytes(sz)} {host}; {dev}.")
    lines.append("")
    if any(s["returned_early"] < s["n"] or s["overlapped"] < s["n"] for s in (m, mbig)):
        lines.append("So seed 003's \"Implicitly synchronizes the device\" for `cudaMalloc` holds on this GPU, in the "
                     "cases above where it waited or serialized.")
    else:
        lines.append("So seed 003's \"Implicitly synchronizes the device\" is wrong for `cudaMalloc` on this GPU: it "
                     "neither made the host wait nor kept another stream from running. The guide says more than "
                     "this GPU did: Guide §15.1 *Introduction* says that `cudaMalloc` and `cudaFree` make the GPU "
                     "synchronize, and the *Implicit Synchronization* section lists \"a device memory allocation\"; "
                     "here only `cudaFree` of `cudaMalloc` memory synchronized. The guide states what a program must be "
                     "ready for, not what every driver does: portable code still treats `cudaMalloc` as a possible "
                     "synchronization.")
    lines.append(f"Seed 001's claim that `cudaMalloc` \"blocks the host thread until the requested memory has been "
                 f"allocated\" is true and says little: the call takes the {cost('cudaMalloc', 4 * MiB):.0f} µs of "
                 "section 1 to get and map memory, and returns a pointer that can be used at once. Blocking on its "
                 "own work is not the same as waiting for the GPU.")
    return Markdown("\n".join(lines))


# -- section 3: seed_style.cu -----------------------------------------------------------------------------
class SeedRuns:
    """seed_style.cu's runs, keyed (warmup, trial): value(warmup, key, loop) is the median over the trials."""

    def __init__(self, runs: dict, trials: int, iters: int, size: int):
        self.runs, self.trials, self.iters, self.bytes = runs, trials, iters, size
        self.label = runs[(0, 0)].label

    @staticmethod
    def _speedup(records) -> float:
        return [r for r in records if "speedup" in r][0]["speedup"]

    def value(self, warmup, key, loop=None) -> float:
        recs = [self.runs[(warmup, t)].records for t in range(self.trials)]
        return med(r.one(loop=loop)[key] if loop else self._speedup(r) for r in recs)

    def table(self):
        return plots.Table(
            [{"warm-up": "yes" if w else "no (as the seed)", "trial (fresh process)": t,
              "sync loop (ms)": round(r.records.one(loop="sync")["ms"], 3),
              "stream-ordered loop (ms)": round(r.records.one(loop="async")["ms"], 3),
              "sync, events on its stream (ms)": round(r.records.one(loop="sync")["stream_ms"], 3),
              "stream-ordered, events on its stream (ms)": round(r.records.one(loop="async")["stream_ms"], 3),
              "speedup": round(self._speedup(r.records), 2)}
             for (w, t), r in self.runs.items()],
            self.label, title=f"Seed 003's benchmark pattern: {self.iters} iterations of {nbytes(self.bytes)}, one "
            "run each (the seed's events on the legacy default stream, and a second pair on the working stream)")


# -- section 4: steady_state.cu and stream_cost.cu ----------------------------------------------------------
class Steady:
    """steady_state.cu's records: per_iter(loop, size) is the median time of one iteration, in µs."""

    def __init__(self, res, reps):
        self.res, self.label, self.reps = res, res.label, reps
        self.sizes = sorted({r["size"] for r in res.records})
        self.iters = res.records[0]["iters"]  # iterations between a timed run's two events

    def per_iter(self, loop, size) -> float:
        return med(self.res.records.one(loop=loop, size=size)["us_per_iter"])

    def speedup(self, size) -> float:
        return self.per_iter("sync", size) / self.per_iter("async", size)

    def to_limit(self, size) -> float:
        return self.per_iter("async", size) / self.per_iter("prealloc", size)

    def plot(self, reference=None):
        """Time per iteration of the three loops, and the two ratios; a reference recording drawn dashed."""
        fig, (ax, ax2) = plots.figure("Allocate, use, free: time per iteration in steady state", self.label, ncols=2)
        for loop, text in LOOPS.items():
            rows = self.res.records.where(loop=loop)
            line = plots.series(ax, [r["size"] for r in rows], [measure.summary(r["us_per_iter"]) for r in rows], text)
            if reference is not None:
                ref_rows = reference.records.where(loop=loop)
                ax.plot([r["size"] for r in ref_rows], [med(r["us_per_iter"]) for r in ref_rows], linestyle="--",
                        color=line.get_color(), label=f"{loop}, {plots.short(reference.label)}")
        size_axis(ax, self.sizes)
        ax.set_yscale("log")
        ax.set_ylabel(f"µs per iteration (median of {self.reps} runs of {self.iters})")
        ax.legend(fontsize=7)
        ax2.plot(self.sizes, [self.speedup(s) for s in self.sizes], marker="o",
                 label="synchronous ÷ stream-ordered (speedup)")
        ax2.plot(self.sizes, [self.to_limit(s) for s in self.sizes], marker="o",
                 label="stream-ordered ÷ preallocated (1 = the limit)")
        ax2.axhline(1, color="0.5", linewidth=0.8)
        size_axis(ax2, self.sizes)
        ax2.set_yscale("log")
        ax2.set_ylabel("ratio of times per iteration")
        ax2.legend(fontsize=8)
        plt.show()

    def tables(self):
        """The H100 marks (reported, not asserted) and every size."""
        marks = []
        for size in (4 * MiB, 64 * MiB):
            if size in self.sizes:
                v = self.speedup(size)
                marks.append({"ratio": f"speedup at {nbytes(size)} (synchronous ÷ stream-ordered)",
                              "measured": f"{v:.1f}x", "H100 mark": "≥ 10x" if size == 4 * MiB else "-",
                              "met": ("yes" if v >= 10 else "no") if size == 4 * MiB else "-"})
        for size in self.sizes:
            if size >= 64 * MiB:
                v = self.to_limit(size)
                marks.append({"ratio": f"stream-ordered ÷ preallocated at {nbytes(size)}", "measured": f"{v:.3f}",
                              "H100 mark": "≤ 1.10", "met": "yes" if v <= 1.10 else "no"})
        every = [{"size": nbytes(s), **{loop: round(self.per_iter(loop, s), 2) for loop in LOOPS},
                  "speedup": round(self.speedup(s), 1), "stream-ordered ÷ preallocated": round(self.to_limit(s), 3)}
                 for s in self.sizes]
        return (plots.Table(marks, self.label, title=f"The correct benchmark's ratios (medians of {self.reps} runs "
                            f"of {self.iters} iterations)"),
                plots.Table(every, self.label, title="µs per iteration, every size"))


def missed_mark(ss: Steady, cost: HostCost) -> Markdown:
    """Where the 10x mark at 4 MiB is missed, what the two loops' iterations cost; nothing where it is met."""
    if 4 * MiB not in ss.sizes or ss.speedup(4 * MiB) >= 10:
        return Markdown("")
    return Markdown(
        f"The 10x mark is missed at 4 MiB on {plots.md(ss.label)}: an iteration of the synchronous loop takes "
        f"{ss.per_iter('sync', 4 * MiB):.1f} µs (section 1's `cudaMalloc` + `cudaFree` alone cost "
        f"{cost('cudaMalloc', 4 * MiB) + cost('cudaFree', 4 * MiB):.1f} µs on the host), one of the stream-ordered "
        f"loop {ss.per_iter('async', 4 * MiB):.2f} µs; *Where the last microseconds go* below shows what sets the "
        "stream-ordered loop's pace.")


class Budget:
    """stream_cost.cu's records: per size, the GPU and host time per iteration of each loop behind the gate."""

    def __init__(self, res, ss: Steady, iters, reps):
        self.res, self.label, self.iters, self.reps = res, res.label, iters, reps
        self.sizes = sorted({r["size"] for r in res.records})
        self.rows = [self._row(size, ss) for size in self.sizes]

    def gated(self, loop, size, side="gpu_us") -> dict:
        """Summary of one loop's time per iteration with the run queued behind the gate: "gpu_us" or "host_us"."""
        return measure.summary(self.res.records.one(loop=loop, size=size)[side])

    def _row(self, size, ss: Steady) -> dict:
        pre, asy, pair = self.gated("prealloc", size), self.gated("async", size), self.gated("pair", size)
        return {
            "size": nbytes(size), "kernel alone, GPU µs": pre["median"], "stream-ordered, GPU µs": asy["median"],
            "gap, GPU µs": asy["median"] - pre["median"], "pair alone, GPU µs": pair["median"],
            "issue preallocated, host µs": self.gated("prealloc", size, "host_us")["median"],
            "issue stream-ordered, host µs": self.gated("async", size, "host_us")["median"],
            "paced by": "host" if self.gated("async", size, "host_us")["median"] > asy["median"] else "GPU",
            "GPU ratio": asy["median"] / pre["median"],
            "spread of GPU ratio": f"{asy['p25'] / pre['p75']:.3f} .. {asy['p75'] / pre['p25']:.3f}",
            "section 4 ratio": ss.to_limit(size) if size in ss.sizes else float("nan"),
            "addresses": next(r["distinct_ptrs"] for r in self.res.records.where(size=size) if "distinct_ptrs" in r)}

    def not_gated(self) -> list:
        """(size, loop) of every loop whose gate opened before the host had issued all of a run."""
        return [(r["size"], r["loop"]) for r in self.res.records if "gated" in r and r["gated"] < self.reps]

    def table(self):
        return plots.Table(self.rows, self.label, title=f"Per iteration, with each run of {self.iters} queued behind "
                           f"the gate (medians of {self.reps} alternating runs); ratio = stream-ordered ÷ preallocated")

    def plot(self):
        fig, ax = plots.figure("What the allocate-and-free pair adds to an iteration", self.label)
        ax.plot(self.sizes, [r["gap, GPU µs"] for r in self.rows], marker="o", label="GPU: stream-ordered − preallocated")
        ax.plot(self.sizes, [r["pair alone, GPU µs"] for r in self.rows], marker="s",
                label="GPU: the pair alone, no kernel")
        ax.plot(self.sizes, [r["issue stream-ordered, host µs"] - r["issue preallocated, host µs"] for r in self.rows],
                marker="^", label="host: stream-ordered − preallocated, to issue")
        size_axis(ax, self.sizes)
        ax.set_ylabel("µs per iteration")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
        plt.show()


def budget_text(budget: Budget, ss: Steady) -> Markdown:
    """Where the stream-ordered loop's last microseconds go, from stream_cost.cu and steady_state.cu."""
    rows = budget.rows
    gaps = [r["gap, GPU µs"] for r in rows]
    pairs = [r["pair alone, GPU µs"] for r in rows]
    gap, pair = statistics.median(gaps), statistics.median(pairs)
    issue_pre = statistics.median(r["issue preallocated, host µs"] for r in rows)
    issue_asy = statistics.median(r["issue stream-ordered, host µs"] for r in rows)
    if pair < 0.5 * gap:
        where = ("less than the gap: most of the gap is not the pair's own work on the stream but what putting it "
                 "between two kernels costs them")
    elif pair > 2 * gap:
        where = "more than the gap: part of the pair's work on the stream overlaps the kernels"
    else:
        where = "about the gap: the gap is mostly the two calls' own work on the stream"
    lo, hi = f"{min(pairs):.2f}", f"{max(pairs):.2f}"
    span = f"about {lo} µs" if lo == hi else f"{lo} to {hi} µs"
    lines = [f"**Measured on {plots.md(budget.label)}:**", "",
             f"- **GPU.** With the run queued, an iteration of the stream-ordered loop takes {min(gaps):.2f} to "
             f"{max(gaps):.2f} µs longer than the kernel alone. The pair alone, with no kernel, takes {span} of GPU "
             f"time per iteration, {where}.",
             f"- **Host.** Issuing an iteration takes the host {issue_asy:.2f} µs for the stream-ordered loop and "
             f"{issue_pre:.2f} µs for the preallocated one (medians over the sizes)."]
    for r, size in zip(rows, budget.sizes):
        if r["paced by"] == "host":
            lines.append(f"- **Pace at {r['size']}.** The host needs longer to issue an iteration of the stream-ordered "
                         f"loop ({r['issue stream-ordered, host µs']:.2f} µs) than the GPU needs to run it "
                         f"({r['stream-ordered, GPU µs']:.2f} µs), so without a gate the host sets the pace (section 4: "
                         f"{ss.per_iter('async', size):.2f} µs per iteration): at this size the two calls' host time "
                         "matters, not their work on the GPU.")
    gpu_paced = [r for r in rows if r["paced by"] == "GPU"]
    if gpu_paced:
        steady = max(r["gap, GPU µs"] for r in gpu_paced) < 2 * min(r["gap, GPU µs"] for r in gpu_paced)
        lines.append(f"- Where the GPU sets the pace ({', '.join(r['size'] for r in gpu_paced)}), the ratio to the limit "
                     "is the GPU's, (kernel + gap) ÷ kernel: " +
                     ", ".join(f"{r['GPU ratio']:.3f} at {r['size']}" for r in gpu_paced) +
                     (". The gap stays within a factor of 2 while the kernel grows, so the ratio falls toward 1."
                      if steady else "."))
    if sorted({r["addresses"] for r in rows}) == [1]:
        lines.append("- **Addresses.** The pool handed back the same address in every iteration of every run at each "
                     "size, so the stream-ordered loop's kernels write the same memory every time, as the "
                     "preallocated loop's do.")
    else:
        lines.append(f"- **Addresses.** The pool handed out {', '.join(plots.md(r['addresses']) for r in rows)} "
                     "distinct addresses per size over all runs.")
    big = [r for s, r in zip(budget.sizes, rows) if s >= 64 * MiB and s in ss.sizes]
    if big:
        missed = [r for r in big if r["section 4 ratio"] > 1.10]
        each = ", ".join(f"{r['size']}: {r['section 4 ratio']:.3f} in section 4, {r['GPU ratio']:.3f} on the GPU"
                         for r in big)
        below = [r["size"] for r in big if r["section 4 ratio"] < 0.98]
        if below:
            lines.append(f"- Section 4's ratio is below 1 at {', '.join(below)}: its preallocated runs were slower than "
                         "its stream-ordered ones, which no allocator can cause; that is run-to-run drift, and the "
                         "GPU-alone ratio here is the one to trust.")
        if not missed:
            lines.append(f"- **The H100 mark** (within 10 % of the limit from 64 MiB up) is met at every size here, "
                         f"by section 4 and by the GPU alone ({each}).")
        else:
            why = []
            for r in missed:
                if r["GPU ratio"] > 1.10:
                    why.append(f"at {r['size']} the pair's GPU time ({r['gap, GPU µs']:.2f} µs) is more than a tenth "
                               f"of the kernel's ({r['kernel alone, GPU µs']:.2f} µs)")
                else:
                    why.append(f"at {r['size']} the GPU alone is within the mark ({r['GPU ratio']:.3f}), so what "
                               f"section 4 adds ({r['section 4 ratio']:.3f}) is the host's pace or run-to-run "
                               "variation, not the allocator's work on the GPU")
            lines.append(f"- **The H100 mark** (within 10 % of the limit from 64 MiB up) is missed by section 4 at "
                         f"{', '.join(r['size'] for r in missed)} ({each}): " + "; ".join(why) + ".")
    return Markdown("\n".join(lines))


# -- section 5: cold_start.cu -----------------------------------------------------------------------------
class ColdStart:
    """cold_start.cu's runs: cost(step, order) is the median over the fresh processes, in µs."""
    ORDERS = ("async_first", "sync_first")

    def __init__(self, runs):
        self.label = runs[0].label
        self.records = measure.Records(r for res in runs for r in res.records)
        self.trials = len({r["trial"] for r in self.records})
        self.steps = list(dict.fromkeys(r["step"] for r in self.records.where(order="async_first", trial=0)))

    def cost(self, step, order) -> float:
        return med(r["us"] for r in self.records.where(order=order, step=step))

    def first_minus_second(self, order="sync_first") -> float:
        """One-time cost of the synchronous loop's calls: first minus second cudaMalloc, cudaFree, kernel (µs)."""
        pairs = [("first cudaMalloc", "second cudaMalloc"), ("first cudaFree", "second cudaFree"),
                 ("first kernel launch + synchronize", "second kernel launch + synchronize")]
        return sum(self.cost(a, order) - self.cost(b, order) for a, b in pairs)

    def plot(self, size):
        fig, ax = plots.figure(f"The first calls of a fresh process ({nbytes(size)}), each timed alone",
                               self.label, size=(8, 4.6))
        for k, order in enumerate(self.ORDERS):
            ax.barh([i + 0.4 * k for i in range(len(self.steps))], [self.cost(st, order) for st in self.steps],
                    height=0.4, label=order.replace("_", " "))
        ax.set_yticks([i + 0.2 for i in range(len(self.steps))], self.steps, fontsize=8)
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.set_xlabel(f"host time (µs, median of {self.trials} fresh processes)")
        ax.legend(fontsize=8)
        plt.show()

    def table(self):
        return plots.Table([{"step": st, **{o: round(self.cost(st, o), 1) for o in self.ORDERS}} for st in self.steps],
                           self.label, title=f"µs, median of {self.trials} fresh processes")


def where_seed_time_goes(seed: SeedRuns, cold: ColdStart, ss: Steady):
    """The seed-style totals beside the steady state and the first-call costs; and the three speedups."""
    rows = []
    for loop, name in (("async", "stream-ordered"), ("sync", "synchronous")):
        cold_ms, warm_ms = seed.value(0, "ms", loop), seed.value(1, "ms", loop)
        rows.append({"loop": name, "what": "seed's pattern, no warm-up (as written)", "ms": round(cold_ms, 3)})
        rows.append({"loop": name, "what": "seed's pattern after a warm-up", "ms": round(warm_ms, 3)})
        rows.append({"loop": name, "what": "difference (no warm-up − after a warm-up)", "ms": round(cold_ms - warm_ms, 3)})
        if seed.bytes in ss.sizes:
            rows.append({"loop": name, "what": f"{seed.iters} × the steady-state iteration (section 4)",
                         "ms": round(seed.iters * ss.per_iter(loop, seed.bytes) / 1000, 3)})
    rows.append({"loop": "stream-ordered", "what": "first cudaMallocAsync of a process (sync_first)",
                 "ms": round(cold.cost("first cudaMallocAsync", "sync_first") / 1000, 3)})
    rows.append({"loop": "synchronous", "what": "first cudaMalloc, cudaFree and kernel launch, minus the second "
                 "ones (sync_first)", "ms": round(cold.first_minus_second() / 1000, 3)})
    three = [
        {"benchmark": "seed 003's pattern, as written", "speedup at 4 MiB": f"{seed.value(0, 'speedup'):.2f}x"},
        {"benchmark": "seed 003's pattern, after a warm-up", "speedup at 4 MiB": f"{seed.value(1, 'speedup'):.2f}x"},
        {"benchmark": f"correct: warm-up, events on the working stream, median of {ss.reps} × {ss.iters}",
         "speedup at 4 MiB": f"{ss.speedup(seed.bytes):.1f}x"}]
    return (plots.Table(rows, seed.label, title="Where the seed's times go"),
            plots.Table(three, ss.label, title="The same question, three answers"))


def seed_story(seed: SeedRuns, cold: ColdStart, ss: Steady) -> Markdown:
    """How much of the seed's cold-minus-warm difference the first calls of section 5 account for."""
    d_async = seed.value(0, "ms", "async") - seed.value(1, "ms", "async")
    d_sync = seed.value(0, "ms", "sync") - seed.value(1, "ms", "sync")
    f_async = cold.cost("first cudaMallocAsync", "sync_first") / 1000
    f_sync = cold.first_minus_second() / 1000
    sync_trials = [seed.runs[(0, t)].records.one(loop="sync")["ms"] for t in range(seed.trials)]
    share = f_async / d_async if d_async > 0 else float("inf")
    lines = [f"**Measured on {plots.md(seed.label)}:**", "",
             f"- The seed's stream-ordered loop takes {d_async:.2f} ms longer without a warm-up than after one. "
             f"The first `cudaMallocAsync` of a fresh process, timed alone in the seed's order, costs {f_async:.2f} ms: "
             + ("about all of that difference." if 0.7 <= share <= 1.3 else f"{100 * share:.0f} % of that difference.")]
    spread = (f"{seed.trials} fresh processes of the seed's pattern alone spread from {min(sync_trials):.2f} to "
              f"{max(sync_trials):.2f} ms")
    if d_sync > 0:
        lines.append(f"- The synchronous loop takes {d_sync:.2f} ms longer without a warm-up. Its first calls "
                     f"(`cudaMalloc`, `cudaFree`, the kernel launch) cost {f_sync:.2f} ms more than the second ones" +
                     (", about all of that difference." if 0.7 <= f_sync / d_sync <= 1.3 else
                      f": {100 * f_sync / d_sync:.0f} % of the difference; the rest is not a first call that section 5 "
                      f"times, and {spread}."))
    else:
        lines.append(f"- The synchronous loop is not slower without a warm-up (it took {-d_sync:.2f} ms less): its first "
                     f"calls (`cudaMalloc`, `cudaFree`, the kernel launch) cost only {f_sync:.2f} ms more than the "
                     f"second ones, which is lost in its run-to-run spread ({spread}).")
    lines.append(f"- So the seed's pattern reports {seed.value(0, 'speedup'):.2f}x; after a warm-up "
                 f"{seed.value(1, 'speedup'):.2f}x; the correct benchmark {ss.speedup(seed.bytes):.1f}x. Even after a "
                 f"warm-up the seed's stream-ordered run is a single run of {seed.iters} iterations: it starts with a "
                 "pool miss (the warm-up ended in a synchronization, where the default pool hands its memory back; "
                 "section 5's table shows what a pool miss after a synchronize costs), and its `stop` event is "
                 "recorded only after `cudaStreamSynchronize` has returned to the host.")
    return Markdown("\n".join(lines))


def events_text(seed: SeedRuns) -> Markdown:
    """The seed's events on the legacy default stream against events on the working stream, on the same runs."""
    lines = [f"**Measured on {plots.md(seed.label)}** (medians of {seed.trials} fresh processes, per setting):", ""]
    for loop, name in (("sync", "synchronous"), ("async", "stream-ordered")):
        for w, when in ((0, "as written"), (1, "after a warm-up")):
            legacy, own = seed.value(w, "ms", loop), seed.value(w, "stream_ms", loop)
            lines.append(f"- {name} loop, {when}: {legacy:.3f} ms with the seed's events, {own:.3f} ms with events on "
                         f"the working stream ({legacy - own:+.3f} ms).")
    lines.append("")
    cold_legacy = seed.value(0, "ms", "async") - seed.value(1, "ms", "async")
    cold_own = seed.value(0, "stream_ms", "async") - seed.value(1, "stream_ms", "async")
    if cold_legacy > 0 and cold_own > 0.5 * cold_legacy:
        lines.append(f"Both pairs of events count the cold start ({cold_legacy:.2f} and {cold_own:.2f} ms more without a "
                     "warm-up): it happens on the host, after `start` and before the first kernel, and the GPU's "
                     "timeline runs on while the GPU waits. Moving the events to the working stream does not take it "
                     "out; only a warm-up does.")
    else:
        lines.append(f"Without a warm-up the stream-ordered loop takes {cold_legacy:.2f} ms more with the seed's events "
                     f"and {cold_own:.2f} ms more with events on the working stream.")
    tail = seed.value(1, "ms", "async") - seed.value(1, "stream_ms", "async")
    if tail > 0:
        lines.append(f"After a warm-up, the seed's `stop` adds {tail * 1000:.0f} µs to the stream-ordered loop: the time "
                     "from the end of the work to the host's return from `cudaStreamSynchronize` and the recording of "
                     "`stop`.")
    return Markdown("\n".join(lines))


# -- section 6: cupy_loops --------------------------------------------------------------------------------
def plot_cupy(py: dict, ss: Steady, sizes, label):
    """CuPy's per-iteration medians beside the CUDA program's, as bars; and a table of both."""
    fig, ax = plots.figure("Per-iteration time: CuPy (Python) beside the CUDA program", label, size=(8, 4.2))
    width = 0.13
    for k, (loop, color) in enumerate(zip(LOOPS, ("tab:blue", "tab:orange", "tab:green"))):
        xs = range(len(sizes))
        ax.bar([x + (2 * k - 2.5) * width for x in xs], [med(py[s][loop]) for s in sizes], width,
               color=color, label=f"{loop}, CuPy")
        ax.bar([x + (2 * k - 1.5) * width for x in xs],
               [ss.per_iter(loop, s) if s in ss.sizes else float("nan") for s in sizes], width,
               color=color, alpha=0.45, hatch="//", label=f"{loop}, nvcc (section 4)")
    ax.set_xticks(range(len(sizes)), [nbytes(s) for s in sizes])
    ax.set_yscale("log")
    ax.set_ylabel("µs per iteration (median of 5 runs)")
    ax.legend(fontsize=7, ncols=3)
    plt.show()
    return plots.Table(
        [{"size": nbytes(s), **{f"{loop} CuPy": round(med(py[s][loop]), 2) for loop in LOOPS},
          **{f"{loop} nvcc": round(ss.per_iter(loop, s), 2) for loop in LOOPS if s in ss.sizes},
          "speedup CuPy": round(med(py[s]["sync"]) / med(py[s]["async"]), 1),
          "speedup nvcc": round(ss.speedup(s), 1) if s in ss.sizes else "-"}
         for s in sizes], label, title="µs per iteration; speedup = synchronous ÷ stream-ordered")


# -- summary ----------------------------------------------------------------------------------------------
def summary(cost: HostCost, wait: Waits, seed: SeedRuns, ss: Steady, budget: Budget, cold: ColdStart, py: dict,
            cupy_sizes, largest):
    """The numbers the lesson measured, in one table; every row names its section."""
    size = wait.sizes[0]
    f, fo, fa, m = (wait(c, size) for c in ("cudaFree", "cudaFree of a cudaMallocAsync pointer", "cudaFreeAsync",
                                             "cudaMalloc"))
    correct = ss.speedup(seed.bytes)
    rows = [
        ("cudaMallocAsync host time, pool hit, 4 MiB", f"{cost(HIT, 4 * MiB):.2f} µs", "1"),
        (f"cudaMallocAsync host time, pool hit, {nbytes(largest)}", f"{cost(HIT, largest):.2f} µs", "1"),
        ("cudaMalloc host time, 4 MiB (idle GPU)", f"{cost('cudaMalloc', 4 * MiB):.1f} µs", "1"),
        ("cudaFree host time, 4 MiB (idle GPU)", f"{cost('cudaFree', 4 * MiB):.1f} µs", "1"),
        ("cold start: first cudaMallocAsync of a process, alone",
         f"{cold.cost('first cudaMallocAsync', 'async_first') / 1000:.3f} ms", "5"),
        ("cold start: first cudaMallocAsync, in the seed's order",
         f"{cold.cost('first cudaMallocAsync', 'sync_first') / 1000:.3f} ms", "5"),
        ("seed 003's benchmark as written: speedup", f"{seed.value(0, 'speedup'):.2f}x", "3"),
        ("seed 003's benchmark after a warm-up: speedup", f"{seed.value(1, 'speedup'):.2f}x", "3"),
        ("correct benchmark: speedup at 4 MiB",
         f"{correct:.1f}x (H100 mark ≥ 10x: {'met' if correct >= 10 else 'not met'})", "4"),
    ]
    if 64 * MiB in ss.sizes:
        big = {s: ss.to_limit(s) for s in ss.sizes if s >= 64 * MiB}
        worst = max(big, key=big.get)
        rows += [("correct benchmark: speedup at 64 MiB", f"{ss.speedup(64 * MiB):.1f}x", "4"),
                 ("stream-ordered ÷ preallocated at 64 MiB",
                  f"{big[64 * MiB]:.3f} (H100 mark ≤ 1.10: {'met' if big[64 * MiB] <= 1.10 else 'not met'})" +
                  "".join(f"; GPU alone, run queued: {r['GPU ratio']:.3f}" for r in budget.rows if r["size"] == "64 MiB"),
                  "4"),
                 ("stream-ordered ÷ preallocated, largest from 64 MiB up",
                  f"{big[worst]:.3f} at {nbytes(worst)} (H100 mark ≤ 1.10: {'met' if big[worst] <= 1.10 else 'not met'})",
                  "4")]
    mid = cupy_sizes[len(cupy_sizes) // 2]
    rows += [
        ("allocate-and-free pair on the GPU, run queued (median over sizes)",
         f"{statistics.median(r['pair alone, GPU µs'] for r in budget.rows):.2f} µs; adds "
         f"{statistics.median(r['gap, GPU µs'] for r in budget.rows):.2f} µs to an iteration", "4"),
        (f"cudaFree of cudaMalloc memory, host time during a {f['kernel_us'] / 1000:.0f} ms kernel ({nbytes(size)})",
         (f"{f['host_us'] / 1000:.2f} ms" if f["host_us"] >= 100 else f"{f['host_us']:.1f} µs")
         + f" (waited for the kernel: {f['n'] - f['returned_early']}/{f['n']}; the next kernel on another stream "
         f"waited for it: {f['n'] - f['overlapped']}/{f['n']})", "2"),
        ("cudaFree of cudaMallocAsync memory, host time during the kernel",
         f"{fo['host_us']:.2f} µs (waited for the kernel: {fo['n'] - fo['returned_early']}/{fo['n']})", "2"),
        ("cudaFreeAsync host time during the kernel", f"{fa['host_us']:.2f} µs", "2"),
        ("cudaMalloc host time during the kernel",
         f"{m['host_us']:.1f} µs (returned while it ran: {m['returned_early']}/{m['n']})", "2"),
        (f"CuPy: speedup at {nbytes(mid)}", f"{med(py[mid]['sync']) / med(py[mid]['async']):.1f}x", "6"),
    ]
    return plots.Table([{"quantity": q, "value": v, "section": sec} for q, v, sec in rows], ss.label,
                       title="01 · sync vs async: the numbers")


def free_takeaway(wait: Waits) -> Markdown:
    """The summary's first point: what cudaFree did during a kernel, for each kind of memory, as measured."""
    size = wait.sizes[0]
    f, fo = wait("cudaFree", size), wait("cudaFree of a cudaMallocAsync pointer", size)

    def did(s):
        if s["returned_early"] == 0:
            return f"waited for the kernel in every repeat ({s['host_us'] / 1000:.1f} ms)"
        if s["returned_early"] == s["n"]:
            serialized = s["n"] - s["overlapped"]
            return (f"returned while the kernel still ran, in every repeat ({s['host_us']:.1f} µs)"
                    + (f", and the next kernel on another stream waited for it in {serialized} of {s['n']} (the "
                       "device serialized)" if serialized else ""))
        return f"waited for the kernel in {s['n'] - s['returned_early']} of {s['n']} repeats"

    guide = ("as Guide §15.3 *API Fundamentals* says (no further synchronization: the program must make sure no "
             "work still uses it)" if fo["returned_early"] == fo["n"] else
             "although Guide §15.3 *API Fundamentals* says it performs no further synchronization: do not count on it")
    return Markdown(
        f"- On {plots.md(wait.label)}, each call made while a kernel that never touched the buffer was running (section 2): "
        f"`cudaFree` of memory from `cudaMalloc` {did(f)}; `cudaFree` of memory from `cudaMallocAsync` {did(fo)}, "
        f"{guide}. `cudaFreeAsync` returned at once and frees in stream order.")
