"""Lesson 03's plumbing: names, the pool script the explorer moves over, plots and the findings it reports.

The CUDA, the runs, the assertions and the calls that draw stay in notebooks/03_pools.ipynb; this module
holds what would otherwise clutter it: formatting, the Python (CuPy) pool script, and the code that turns
measurements into sentences and tables.
"""
from __future__ import annotations

import inspect
import math
from functools import reduce

import matplotlib.pyplot as plt

from .. import plots
from ..measure import MiB, UINT64_MAX, med, mib


def threshold_name(t: int) -> str:
    return "UINT64_MAX" if t == UINT64_MAX else f"{t // MiB} MiB" if t else "0"


def granules(nbytes: int, g: int) -> int:
    """nbytes rounded up to a whole number of granules of g bytes."""
    return -(-nbytes // g) * g


def kept_at_sync(reserved_before: int, threshold: int, g: int, in_use: int = 0) -> int:
    """What a synchronization leaves reserved, by the rule the recordings show: it gives unused memory back a
    granule at a time until reserved <= threshold; memory in use (in_use bytes, whole granules) stays."""
    return max(in_use, min(reserved_before, threshold // g * g))


def yes(v) -> str:
    return "yes" if v else "no"


def findings(title: str, now: list[tuple[str, object]], label: str, ref: list[tuple[str, object]] | None = None,
             ref_label: str = "") -> plots.Table:
    """What a driver did, as data: a table of findings, with the reference recording's beside it when given."""
    ref_map = dict(ref or [])
    rows = [{"finding": k, "measured": yes(v) if isinstance(v, bool) else v} for k, v in now]
    columns = ["finding", "measured"]
    if ref is not None:
        columns.append("reference")
        for r in rows:
            v = ref_map.get(r["finding"], "")
            r["reference"] = yes(v) if isinstance(v, bool) else v
        label = f"{label}; reference: {ref_label}"
    return plots.Table(rows, label, columns=columns, title=title)


# -- section 1: the statistics -------------------------------------------------------------------

def story(records) -> dict:
    """pool_stats.cu's steps by name."""
    return {r["step"]: r for r in records if "step" in r}


def stats_findings(story: dict) -> list[tuple[str, object]]:
    """Driver behaviour in pool_stats.cu's story: the guide defines the highs, it does not promise these numbers."""
    ab, fa, c_in, end = (story[k] for k in ("allocate A and B", "free A, synchronize", "allocate C",
                                            "free B and C, synchronize"))
    return [("used high kept the peak after A was freed", fa["used_high"] == ab["used"]),
            ("reserved high kept the peak after A was freed", fa["reserved_high"] >= ab["reserved"]),
            ("used high after the reset and C = used then", c_in["used_high"] == c_in["used"]),
            ("used high at the end remembers B + C", end["used_high"] == c_in["used"])]


# -- section 2: granularity -----------------------------------------------------------------------

def granularity_requests(top: int) -> list[int]:
    """Every power of two from 1 byte; from 1 KiB on, also +1 byte and 1.5x; 1..16 MiB; 1 KB .. 100 MB; 100 MiB."""
    requests = set()
    for k in range(0, top.bit_length()):
        p = 1 << k
        requests |= {p, p + 1, p + p // 2} if k >= 10 else {p}
    requests |= {m * MiB for m in range(1, 17)} | {10**k for k in range(3, 9)} | {100 * 1024 * 1024}
    return sorted(r for r in requests if r <= top)


def plot_granularity(rows, g, label):
    fig, (ax1, ax2) = plots.figure("What one cudaMallocAsync reserves in the default pool", label, ncols=2)
    xs = [r["request"] for r in rows]
    ax1.plot(xs, [r["reserved"] for r in rows], "o", markersize=3, label="reserved")
    ax1.plot(xs, [max(r["used"], 1) for r in rows], ".", markersize=2, color="0.5", label="used")
    ax1.plot(xs, xs, "--", color="0.6", linewidth=1, label="reserved = request")
    plots.bytes_axis(ax1, "x"); plots.bytes_axis(ax1, "y")
    ax1.set_xlabel("request"); ax1.set_ylabel("bytes"); ax1.legend()
    near = [r for r in rows if r["request"] <= 8 * g]
    ax2.step([mib(r["request"]) for r in near], [mib(r["reserved"]) for r in near], where="post", color="C0")
    ax2.plot([mib(r["request"]) for r in near], [mib(r["reserved"]) for r in near], "o", markersize=3, color="C0")
    ax2.plot([0, mib(near[-1]["request"])], [0, mib(near[-1]["request"])], "--", color="0.6", linewidth=1)
    ax2.set_xlabel("request (MiB)"); ax2.set_ylabel("reserved (MiB)")
    ax2.set_title(f"close up: steps of {mib(g):g} MiB", fontsize=10)
    return fig


def granularity_findings(rows, g) -> list[tuple[str, object]]:
    """What this driver reserved: reported beside the reference, not asserted (the guide names no unit)."""
    whole = sum(r["reserved"] % g == 0 for r in rows)
    exact = sum(r["reserved"] == granules(r["request"], g) for r in rows)
    by = {r["request"]: r for r in rows}
    out = [("granule: what a 1-byte request reserves (MiB)", mib(g)),
           ("greatest common divisor of all reservations (MiB)", mib(reduce(math.gcd, (r["reserved"] for r in rows)))),
           ("requests that reserved a whole number of granules", f"{whole}/{len(rows)}"),
           ("requests that reserved exactly their size rounded up to granules", f"{exact}/{len(rows)}"),
           ("requests whose used = the bytes asked for", f"{sum(r['used'] == r['request'] for r in rows)}/{len(rows)}")]
    for name, req in (("seed 003's 100 MiB reserved (MiB)", 100 * MiB), ("a decimal 100 MB reserved (MiB)", 10**8)):
        if req in by:
            out.append((name, mib(by[req]["reserved"])))
    return out


def granularity_prose(rows, g, gpu: str) -> str:
    exact = all(r["reserved"] == granules(r["request"], g) for r in rows)
    by = {r["request"]: r for r in rows}
    lines = [f"On the {plots.md(gpu)} a request of 1 byte reserved {mib(g):g} MiB, and "
             + ("every request reserved exactly its size rounded up to whole granules of that size."
                if exact else "not every request reserved exactly its size rounded up to such granules (see the table).")
             + " *Used* counts the bytes the program asked for, so *reserved* minus *used* is the rounding."]
    seed = by.get(100 * MiB)
    if seed:
        lines.append(f"Seed 003 asks for `100 * 1024 * 1024` bytes, exactly 100 MiB: the pool reserved "
                     f"{mib(seed['reserved']):g} MiB for it.")
    return " ".join(lines)


# -- section 3: what a synchronization gives back -------------------------------------------------

def sync_rows(records):
    return [{"threshold": threshold_name(r["threshold"]), "reserved after alloc": mib(r["reserved_alloc"]),
             "used after free (no sync)": mib(r["used_free"]),
             "reserved after free (no sync)": mib(r["reserved_free"]),
             "reserved after syncing another stream": mib(r["reserved_other"]),
             "used after sync": mib(r["used_sync"]), "reserved after sync": mib(r["reserved_sync"]),
             "reserved after trim 0": mib(r["reserved_trim"])} for r in records]


def plot_sync(records, label, nbytes):
    fig, ax = plots.figure(f"Reserved memory around the synchronizations ({mib(nbytes):g} MiB freed)", label)
    xs = range(len(records))
    for off, key, what in ((-0.27, "reserved_free", "after cudaFreeAsync, before any sync"),
                           (0.0, "reserved_other", "after synchronizing another stream"),
                           (0.27, "reserved_sync", "after cudaStreamSynchronize of the freeing stream")):
        ax.bar([x + off for x in xs], [mib(r[key]) for r in records], 0.27, label=what)
    ax.set_xticks(list(xs), [threshold_name(r["threshold"]) for r in records])
    ax.set_xlabel("release threshold"); ax.set_ylabel("reserved (MiB)"); ax.legend(fontsize=8)
    return fig


def other_sync_kept(r) -> bool:
    """Did synchronizing the idle other stream (which does not cover the free) leave the reservation as it was?"""
    return r["reserved_other"] == r["reserved_free"]


def sync_findings(records, g) -> list[tuple[str, object]]:
    rule = [r["reserved_sync"] == kept_at_sync(r["reserved_alloc"], r["threshold"], g) for r in records]
    other = [other_sync_kept(r) for r in records]
    return [("syncs that kept exactly the whole granules under the threshold", f"{sum(rule)}/{len(rule)}"),
            ("syncs of another stream (not covering the free) that gave nothing back", f"{sum(other)}/{len(other)}"),
            ("the allocation reserved its size rounded up to granules",
             all(r["reserved_alloc"] == granules(r["bytes"], g) for r in records))]


def sync_prose(by_t, g, nbytes, half, seed_threshold, gpu) -> str:
    zero, mid, seed, top = by_t["0"], by_t[str(half)], by_t[str(seed_threshold)], by_t["max"]
    gave = [t for t, r in by_t.items() if not other_sync_kept(r)]
    other = (f"changed nothing at any threshold (reserved stayed {mib(zero['reserved_other']):g} MiB at threshold 0)"
             if not gave else f"gave memory back at {len(gave)} of {len(by_t)} thresholds (which the guide allows)")
    return (f"**As measured on the {plots.md(gpu)}.** By the freeing stream's synchronization, the pool had given unused "
            f"memory back until it reserved no more than the threshold; memory in use stayed. The {mib(nbytes):g} MiB "
            f"allocation held {mib(zero['reserved_alloc']):g} MiB. After `cudaStreamSynchronize` of the freeing "
            f"stream the pool kept {mib(zero['reserved_sync']):g} MiB at threshold 0, {mib(mid['reserved_sync']):g} MiB "
            f"at threshold {mib(half):g} MiB, {mib(seed['reserved_sync']):g} MiB at seed 003's "
            f"{mib(seed_threshold):g} MiB, and {mib(top['reserved_sync']):g} MiB at `UINT64_MAX`. Synchronizing the "
            f"other stream first {other}, and *used* was already {mib(zero['used_free']):g} MiB right after `cudaFreeAsync`, "
            f"before any synchronization. How much a threshold between keeps, granule by granule, is in the table "
            f"of findings ({mib(g):g} MiB granules on this GPU).")


# -- section 4: trim --------------------------------------------------------------------------------

def plot_trim(steps, keep, block, nblocks, label):
    fig, ax = plots.figure(f"cudaMemPoolTrimTo at threshold UINT64_MAX ({nblocks} blocks of {mib(block):g} MiB)",
                           label, size=(8.5, 4.2))
    names = list(steps)
    ax.bar([i - 0.2 for i in range(len(names))], [mib(steps[n]["used"]) for n in names], 0.4, label="used")
    ax.bar([i + 0.2 for i in range(len(names))], [mib(steps[n]["reserved"]) for n in names], 0.4, label="reserved")
    ax.axhline(mib(keep), color="0.4", linestyle=":", linewidth=1)
    ax.text(len(names) - 0.5, mib(keep), f" keep = {mib(keep):g} MiB", va="bottom", ha="right", fontsize=8,
            color="0.3")
    ax.set_xticks(range(len(names)), [n.replace("trim to keep", f"trim to {mib(keep):g} MiB") for n in names],
                  rotation=25, ha="right")
    ax.set_ylabel("MiB"); ax.legend()
    return fig


# -- section 5: the cost of giving memory back ----------------------------------------------------
MODES = ["threshold 0", "threshold max", "allocated once"]
NAMES = {"threshold 0": "threshold 0 (default)", "threshold max": "threshold UINT64_MAX",
         "allocated once": "allocated once (the limit)"}


def cost_med(res, size, mode, field="us"):
    return med(res.records.one(size=size, mode=mode)[field])


def plot_cost(cost, sizes, ref=None):
    from ..measure import summary

    fig, (ax1, ax2) = plots.figure("A loop that synchronizes every iteration: malloc, kernel, free, sync", cost.label,
                                   ncols=2)
    for mode in MODES:
        plots.series(ax1, sizes, [summary(cost.records.one(size=s, mode=mode)["us"]) for s in sizes], NAMES[mode])
    if ref is not None:  # the reference recording, from another GPU
        for i, mode in enumerate(MODES[:2]):
            ax1.plot(sizes, [cost_med(ref, s, mode) for s in sizes], "--", color=f"C{i}", linewidth=1,
                     label=f"{NAMES[mode]}, {plots.short(ref.label)}")
    plots.bytes_axis(ax1, "x"); ax1.set_yscale("log")
    ax1.set_xlabel("allocation per iteration"); ax1.set_ylabel("µs per iteration (median, IQR band)")
    ax1.legend(fontsize=8)
    for i, mode in enumerate(MODES[:2]):
        ax2.plot(sizes, [cost_med(cost, s, mode, "malloc_us") for s in sizes], "o-", color=f"C{i}", markersize=3,
                 label=f"inside cudaMallocAsync, {NAMES[mode]}")
        ax2.plot(sizes, [cost_med(cost, s, mode, "sync_us") for s in sizes], "s--", color=f"C{i}", markersize=3,
                 label=f"inside cudaStreamSynchronize, {NAMES[mode]}")
    plots.bytes_axis(ax2, "x"); ax2.set_yscale("log")
    ax2.set_xlabel("allocation per iteration"); ax2.set_ylabel("µs (median)"); ax2.legend(fontsize=8)
    ax2.set_title("where the time goes", fontsize=10)
    return fig


def cost_rows(cost, sizes):
    return [{"size MiB": mib(s), "threshold 0 µs": cost_med(cost, s, "threshold 0"),
             "UINT64_MAX µs": cost_med(cost, s, "threshold max"),
             "allocated once µs": cost_med(cost, s, "allocated once"),
             "threshold 0 / UINT64_MAX": cost_med(cost, s, "threshold 0") / cost_med(cost, s, "threshold max")}
            for s in sizes]


def cost_prose(cost, sizes, g) -> str:
    def costs(ss):
        return ", ".join(f"{cost_med(cost, s, 'threshold 0'):.0f} µs at {mib(s):g} MiB" for s in ss)

    small, large = [s for s in sizes if s <= g], [s for s in sizes if s > g]
    lines = ["At threshold 0 every iteration pays twice: the synchronization gives the memory back, and the next "
             "`cudaMallocAsync` takes new memory from the GPU (the right-hand plot splits the time between the two "
             "calls)."]
    if len(small) > 1:
        t = [cost_med(cost, s, "threshold 0") for s in small]
        spread = max(t) / min(t)
        lines.append(f"Every request up to one granule ({mib(g):g} MiB) gets a whole granule, so up to that size the "
                     f"iteration {'costs about the same' if spread < 1.5 else 'still varies'}, within {spread:.2f}x "
                     f"({costs(small)}).")
    if large:
        t = [cost_med(cost, s, "threshold 0") for s in small[-1:] + large]
        grows = all(a < b for a, b in zip(t, t[1:]))
        lines.append(f"Above a granule the pool takes one granule more per {mib(g):g} MiB, and the cost "
                     f"{'grows with the size' if grows else 'changes with the size'} ({costs(large)}).")
    top = sizes[-1]
    lines.append(f"At `UINT64_MAX` the iteration costs {cost_med(cost, top, 'threshold max'):.0f} µs at "
                 f"{mib(top):g} MiB, against {cost_med(cost, top, 'allocated once'):.0f} µs for the buffer "
                 "allocated once.")
    return " ".join(lines)


# -- section 6: the pool script under the sliders -------------------------------------------------
# cudaMemPoolAttr values (driver_types.h), the same as cupy.cuda.runtime.cudaMemPoolAttr*
POOL_ATTR = {"threshold": 4, "reserved": 5, "reserved_high": 6, "used": 7, "used_high": 8}


def current_pool():
    """The device's current pool: the one cudaMallocAsync takes from when no pool is named."""
    import cupy
    from cupy.cuda import runtime as rt

    return rt.deviceGetMemPool(cupy.cuda.Device().id)


def pool_state(*names):
    """Some attributes of the current pool, read now (live only)."""
    from cupy.cuda import runtime as rt

    return {k: rt.memPoolGetAttribute(current_pool(), POOL_ATTR[k]) for k in names}


def script(threshold, size_mib, trim):
    """Run the allocate/free/sync script on the current pool; return used and reserved after every step.

    It starts from an empty pool (trimmed to 0, highs reset) and leaves the threshold as it found it."""
    import cupy
    from cupy.cuda import runtime as rt

    pool = current_pool()
    saved_threshold = rt.memPoolGetAttribute(pool, POOL_ATTR["threshold"])
    held = rt.memPoolGetAttribute(pool, POOL_ATTR["reserved"])
    stream = cupy.cuda.Stream(non_blocking=True)
    blocks, steps = [], []

    def read(step):
        steps.append({"step": step, **{k: rt.memPoolGetAttribute(pool, POOL_ATTR[k])
                                        for k in ("used", "reserved", "used_high", "reserved_high")}})

    def allocate():
        blocks.append(rt.mallocAsync(size_mib * MiB, stream.ptr))

    def free(n):
        for _ in range(n):
            rt.freeAsync(blocks.pop(), stream.ptr)

    try:
        rt.memPoolTrimTo(pool, 0)
        rt.memPoolSetAttribute(pool, POOL_ATTR["used_high"], 0)  # 0 resets a high to the current value
        rt.memPoolSetAttribute(pool, POOL_ATTR["reserved_high"], 0)
        rt.memPoolSetAttribute(pool, POOL_ATTR["threshold"], threshold)
        read("start")
        for i in range(4):
            allocate()
            read(f"allocate #{i + 1}")
        free(2)
        read("free 2")
        stream.synchronize()
        read("synchronize")
        allocate()
        read("allocate 1")
        free(len(blocks))
        read("free all")
        stream.synchronize()
        read("synchronize ")  # a second step of the same name: the trailing space keeps the steps apart
        if trim:
            rt.memPoolTrimTo(pool, 0)
            read("trim to 0")
        else:
            read("no trim")
    finally:
        free(len(blocks))
        stream.synchronize()
        rt.memPoolSetAttribute(pool, POOL_ATTR["threshold"], saved_threshold)
        rt.memPoolTrimTo(pool, held)  # no more than the pool held on entry
    return steps


def script_source() -> str:
    """What the recording of the grid is keyed by, besides pool_grid itself: the script and what it reads."""
    return "\n".join(inspect.getsource(f) for f in (current_pool, script, grid_key)) + repr(POOL_ATTR)


def pool_grid(thresholds, sizes_mib):
    """The script for every slider value: {"threshold|size|trim": steps}."""
    return {grid_key(t, s, trim): script(t, s, trim) for t in thresholds for s in sizes_mib for trim in (False, True)}


def grid_key(threshold, size_mib, trim):
    """Where pool_grid put one setting's steps (JSON keys are strings)."""
    return f"{threshold}|{size_mib}|{int(trim)}"


def at(steps, name):
    return next(s for s in steps if s["step"] == name)


def curves(steps):
    return [(s["used"], s["reserved"]) for s in steps]


def lively_default(data, thresholds, sizes, prefer=(256 * MiB, 128)):
    """A default for the explorer where the first move of any control changes the curves.

    Candidates: the preferred setting first, then every other one (trim off, so the trim box changes the last
    point). The first whose neighbours on every slider, and whose trim box, all draw other curves wins."""
    def neighbours(t, s):
        ti, si = thresholds.index(t), sizes.index(s)
        out = [(thresholds[i], s) for i in (ti - 1, ti + 1) if 0 <= i < len(thresholds)]
        return out + [(t, sizes[i]) for i in (si - 1, si + 1) if 0 <= i < len(sizes)]

    candidates = [prefer] if prefer[0] in thresholds and prefer[1] in sizes else []
    candidates += [(t, s) for t in thresholds for s in sizes if (t, s) != prefer]
    for t, s in candidates:
        here = curves(data[grid_key(t, s, False)])
        moved = [grid_key(*n, False) for n in neighbours(t, s)] + [grid_key(t, s, True)]
        if all(curves(data[k]) != here for k in moved):
            return (t, s, False)
    return (thresholds[0], sizes[0], False)


def plot_script(threshold, size_mib, trim, data=None, label=""):
    """Used and reserved after every step of the script (data: the steps, recorded or measured now)."""
    steps = data
    fig, ax = plots.figure(f"The current pool: threshold {threshold_name(threshold)}, blocks of {size_mib} MiB, "
                           f"{'trim to 0' if trim else 'no trim'} at the end", label, size=(8.5, 4.2))
    x = range(len(steps))
    ax.plot(x, [mib(s["reserved"]) for s in steps], "o-", color="C1", label="reserved")
    ax.plot(x, [mib(s["used"]) for s in steps], "o-", color="C0", label="used")
    ax.plot(x, [mib(s["reserved_high"]) for s in steps], "--", color="C1", linewidth=2.5, alpha=0.4,
            label="reserved high")
    ax.plot(x, [mib(s["used_high"]) for s in steps], "--", color="C0", linewidth=2.5, alpha=0.4, label="used high")
    peak = max(mib(s["reserved_high"]) for s in steps) or 1
    if 0 < threshold < UINT64_MAX:
        ax.axhline(mib(threshold), color="0.5", linestyle="--", linewidth=1)
        ax.text(0, mib(threshold), f" threshold {threshold_name(threshold)}", va="bottom", fontsize=8, color="0.3")
    ax.set_ylim(0, max(peak, mib(threshold) if threshold < UINT64_MAX else 0) * 1.15)
    ax.set_xticks(list(x), [s["step"].strip() for s in steps], rotation=30, ha="right")
    ax.set_ylabel("MiB"); ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    return fig


def grid_rows(data):
    """Reserved MiB at the script's key steps, for every threshold and block size (the trim runs)."""
    rows = []
    for key, steps in data.items():
        t, s, trim = (int(v) for v in key.split("|"))
        if trim:
            first, last = at(steps, "synchronize"), at(steps, "synchronize ")
            rows.append({"threshold": threshold_name(t), "block MiB": s, "reserved high": mib(last["reserved_high"]),
                         "after 1st sync": mib(first["reserved"]),
                         "after 'allocate 1'": mib(at(steps, "allocate 1")["reserved"]),
                         "after last sync": mib(last["reserved"])})
    return rows


def grid_findings(data, g) -> list[tuple[str, object]]:
    """The exact rule and the reuse at UINT64_MAX, over the whole grid: this driver's behaviour."""
    rule, reuse, splits = [], [], []
    for key, steps in data.items():
        t, s, _ = (int(v) for v in key.split("|"))
        first, last = at(steps, "synchronize"), at(steps, "synchronize ")
        held = at(steps, "allocate #2")["reserved"]
        rule += [first["reserved"] == kept_at_sync(at(steps, "free 2")["reserved"], t, g, held),
                 last["reserved"] == kept_at_sync(at(steps, "free all")["reserved"], t, g)]
        if t == UINT64_MAX:
            reuse.append(at(steps, "allocate 1")["reserved"] == first["reserved"])
        if 0 < last["reserved"] < at(steps, "free all")["reserved"] and last["reserved"] % (s * MiB):
            splits.append((t, s, last["reserved"]))
    out = [("synchronizations that kept exactly the whole granules under the threshold", f"{sum(rule)}/{len(rule)}"),
           ("UINT64_MAX: 'allocate 1' reused a freed block (reserved did not grow)", f"{sum(reuse)}/{len(reuse)}")]
    if splits:
        t, s, kept = splits[0]
        out.append((f"a sync kept part of a block (blocks of {s} MiB, threshold {threshold_name(t)})",
                    f"{mib(kept):g} MiB"))
    return out
