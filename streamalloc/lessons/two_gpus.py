"""Lesson 05b's plumbing: where the numbers come from (two GPUs, or a recording made on two), and
current_device.cu, pool_access.cu, access_cost.cu, peer_free.cu, memcpy_device.cu and graph_peer.cu's records
turned into tables, a figure and sentences.

The CUDA, the runs, the assertions and the calls that draw stay in notebooks/05b_two_gpus.ipynb. Every sentence
here is computed from the records it is given: where the data could say two things, it says which.
"""
from __future__ import annotations

from .. import plots
from ..measure import med, mib, nbytes, summary


# -- which machine ------------------------------------------------------------------------------------

def where_from(lesson, two) -> str:
    """One line: live on two GPUs here, replayed from a recording made on two, or not yet run on two."""
    if two is None:
        return ("THIS LESSON HAS NOT YET RUN ON TWO GPUs. There is no machine with two GPUs here and no recording made "
                "on one, so nothing below is measured: each program is written and compiled, not run. On a machine "
                "with two GPUs every cell runs live.")
    if lesson.live and two is lesson.here:
        return f"Live on {lesson.gpus_here} GPUs: {two.describe()}"
    why = (f"live, but this machine has {lesson.gpus_here} GPU" if lesson.live
           else f"replay mode, because {lesson.mode.reason}")
    return f"{why}: the numbers below are replayed from a recording made on two GPUs, {two.gpu}, on {two.date}."


def not_measured(lesson, program) -> str:
    """What a cell shows instead of measurements while this lesson has not yet run on two GPUs."""
    done = "compiled by nvcc" if lesson.compile(program) else "written (no nvcc here to compile it)"
    return f"{program}: {done}; not run, because this lesson has not yet run on two GPUs."


def capable(*results) -> bool:
    """False where a program found that the two GPUs cannot access each other (cudaDeviceCanAccessPeer 0)."""
    return not any(r.get("peer_capable") is False for res in results for r in res.records)


NOT_CAPABLE = "The two GPUs of the recording cannot access each other (cudaDeviceCanAccessPeer is 0): nothing to check."


# -- 1. allocation ignores the current device -----------------------------------------------------------

STEPS = ("start", "cudaMallocAsync on device 1's stream", "cudaMallocAsync on device 0's stream")


def current_device_table(cd, label):
    return plots.Table([r for r in cd if "used0" in r], label, title="Both devices' current pools, with device 0 current",
                       columns=["step", "current_device", "ptr_device", "used0", "reserved0", "used1", "reserved1"])


def current_device_text(on1, check) -> str:
    return (f"With device 0 current, cudaMallocAsync on device 1's stream returned memory of device {on1['ptr_device']}: "
            f"device 1's pool went to {mib(on1['used1']):g} MiB used, device 0's stayed at {on1['used0']} bytes. Device 1 "
            f"wrote and read all {check['elements']} elements.\n"
            f"cudaFreeAsync of it, with device 0 current, returned {check['free_with_device0_current']} (what this driver "
            "does; the guide speaks only of the allocation).")


# -- 2. access is per pool --------------------------------------------------------------------------------

def pool_access_tables(peer, pool):
    tables = [plots.Table([r for r in res.records if "read" in r or "access" in r], res.label, title=title,
                          columns=["access", "device0", "device1", "read", "error", "elements", "wrong"])
              for res, title in ((peer, "peer: cudaDeviceEnablePeerAccess only"), (pool, "pool: cudaMemPoolSetAccess only"))]
    fault = peer.records.where(after_the_fault=True)
    if fault:
        tables.append(plots.Table(fault, peer.label, title="peer: after the read of the pool buffer",
                                  columns=["device1_synchronize", "device1_cudaMalloc", "device0_synchronize"]))
    return tables


def pool_access_text(peer) -> str:
    bad = peer.records.one(read="pool buffer")
    out = (f"With peer access and no pool access, device 1's read of the pool buffer ended in {bad['error']}"
           + (f", {bad['wrong']} of {bad['elements']} elements wrong" if "wrong" in bad else "") + ".")
    for f in peer.records.where(after_the_fault=True):
        out += (f"\nAfter it, on device 1: cudaDeviceSynchronize {f['device1_synchronize']}, cudaMalloc "
                f"{f['device1_cudaMalloc']}; on device 0: cudaDeviceSynchronize {f['device0_synchronize']}.")
    return out + ("\nWith cudaMemPoolSetAccess and no peer access, device 1 read both pool buffers, the one allocated "
                  "before the call and the one after it, without an error or a wrong value.")


# -- 3. what access costs ---------------------------------------------------------------------------------

def by_reserve(grants) -> list[dict]:
    """The grants of pools holding memory, pooled by what the pool reserved (several allocation sizes may share
    one reserve): {"reserved", "grant_us", "revoke_us"}, smallest reserve first."""
    out: dict[int, dict] = {}
    for r in grants:
        if r["size"] > 0:
            g = out.setdefault(r["reserved"], {"reserved": r["reserved"], "grant_us": [], "revoke_us": []})
            g["grant_us"] += r["grant_us"]
            g["revoke_us"] += r.get("revoke_us", [])
    return [out[k] for k in sorted(out)]


def access_cost_figure(cost):
    """Left: cudaMemPoolSetAccess's host time against the pool's reserved memory; right: a pool miss, mapped or not."""
    grants, misses = cost.records.where(part="set_access"), cost.records.where(part="miss")
    fig, (ax1, ax2) = plots.figure("Device 1's access to a pool of device 0", cost.label, ncols=2)
    held = by_reserve(grants)
    plots.series(ax1, [g["reserved"] for g in held], [summary(g["grant_us"]) for g in held], "grant (read-write)")
    if all(g["revoke_us"] for g in held):
        plots.series(ax1, [g["reserved"] for g in held], [summary(g["revoke_us"]) for g in held], "revoke (none)")
    ax1.set(title="cudaMemPoolSetAccess", xlabel="pool's reserved memory", ylabel="host time (µs)", yscale="log")
    plots.bytes_axis(ax1)
    for mapped, name in ((False, "device 0 only"), (True, "also mapped for device 1")):
        rs = misses.where(peer_mapped=mapped)
        plots.series(ax2, [r["size"] for r in rs], [summary(r["us"]) for r in rs], name)
    ax2.set(title="cudaMallocFromPoolAsync, pool miss", xlabel="allocation", ylabel="host time (µs)", yscale="log")
    plots.bytes_axis(ax2)
    for ax in (ax1, ax2):
        ax.legend()
    return fig


def grant_table(grants, label):
    rows = [{"allocation held": nbytes(r["size"]) if r["size"] else "none", "pool's reserved memory": nbytes(r["reserved"]),
             "grant, median µs": med(r["grant_us"]),
             "revoke, median µs": med(r["revoke_us"]) if r["revoke_us"] else r["revoke_error"]} for r in grants]
    return plots.Table(rows, label, title="cudaMemPoolSetAccess, device 1 read-write, then none")


def miss_rows(misses) -> list[dict]:
    """Median miss times per allocation size, split by what went just before. access_cost.cu's pools take turns:
    an untimed round (mapped, then device 0 only), then at every even repeat device 0's pool first, at every odd
    one the mapped pool first. So at an even repeat device 0's miss follows one of its own pool and the mapped
    pool's follows device 0's; at an odd repeat the other way round."""
    rows = []
    for size in sorted({r["size"] for r in misses}):
        plain, mapped = (misses.one(size=size, peer_mapped=m)["us"] for m in (False, True))
        own = (med(plain[0::2]), med(mapped[1::2]))    # each after a miss of its own pool
        other = (med(plain[1::2]), med(mapped[0::2]))  # each after a miss of the other pool
        rows.append({"allocation": nbytes(size),
                     "after its own: device 0 only, µs": own[0], "after its own: mapped, µs": own[1],
                     "after its own: ratio": own[1] / own[0],
                     "after the other's: device 0 only, µs": other[0], "after the other's: mapped, µs": other[1],
                     "after the other's: ratio": other[1] / other[0]})
    return rows


def miss_table(rows, label):
    return plots.Table(rows, label, title="A pool miss, median host time, by the miss that went just before it")


def miss_ratios(row) -> tuple[float, float]:
    """(mapped / device 0 only after each pool's own miss, the same after the other pool's)."""
    return row["after its own: ratio"], row["after the other's: ratio"]


def grant_findings(grants) -> dict:
    """The grant on an empty pool; over pools holding memory, by reserve: the smallest and largest median, and
    where each was."""
    held = by_reserve(grants)
    medians = [med(g["grant_us"]) for g in held]
    lo, hi = medians.index(min(medians)), medians.index(max(medians))
    return {"empty_us": med(grants.one(size=0)["grant_us"]), "first": held[0], "last": held[-1],
            "low_us": medians[lo], "low_at": held[lo]["reserved"], "high_us": medians[hi], "high_at": held[hi]["reserved"],
            "first_us": medians[0], "last_us": medians[-1]}


def grant_text(g) -> str:
    """What the grant's cost did as the pool's reserve grew: said from the data, whichever way it went."""
    span = g["last"]["reserved"] / g["first"]["reserved"]
    head = (f"Granting device 1 access to an empty pool took {g['empty_us']:.0f} µs; to a pool holding memory "
            f"({nbytes(g['first']['reserved'])} to {nbytes(g['last']['reserved'])} reserved), {g['low_us']:.0f} µs "
            f"(at {nbytes(g['low_at'])}) to {g['high_us']:.0f} µs (at {nbytes(g['high_at'])}), medians")
    if g["high_us"] < 2 * g["low_us"]:
        versus = (f", {g['low_us'] / g['empty_us']:.0f}x or more what it costs on an empty pool"
                  if g["low_us"] > 2 * g["empty_us"] else "")
        return (head + f": within 2x across a {span:.0f}x range of reserves, so here the grant does not grow with the "
                f"pool{versus}.")
    trend = "grew" if g["last_us"] > g["first_us"] else "fell"
    return head + f": it {trend} from {g['first_us']:.0f} to {g['last_us']:.0f} µs across a {span:.0f}x range of reserves."


def miss_text(rows) -> str:
    """What a peer mapping added to a miss, like with like (each miss after one of its own pool) and in the other
    order, and whether the two orders agree."""
    def said(r):
        return "slower" if r > 1.05 else "faster" if r < 0.95 else "within 5%"
    parts = [f"at {row['allocation']}, {miss_ratios(row)[0]:.2f}x after its own pool's miss and {miss_ratios(row)[1]:.2f}x "
             "after the other's" for row in (rows[0], rows[-1])]
    own, other = miss_ratios(rows[-1])
    if said(own) == said(other):
        verdict = f"at {rows[-1]['allocation']} both orders agree: the mapped pool's miss was {said(own)}"
    else:
        verdict = (f"at {rows[-1]['allocation']} the orders disagree ({said(own)} like with like, {said(other)} after the "
                   "other pool's miss): the miss before changes the next one's time, so the like-with-like figure is the "
                   "fairer measure of the mapping")
    return ("A miss in the pool mapped for device 1, against the unmapped pool's: " + "; ".join(parts) + f". So {verdict} "
            "(this driver's figures, not a promise of the guide).")


# -- 4. a free after another GPU's use --------------------------------------------------------------------

def peer_free_table(pf):
    return plots.Table(pf.records.where(program="peer_free"), pf.label, title="Frees after device 1's use",
                       columns=["scenario", "elements", "same_block", "wrong", "free_error", "used_before_free",
                                "used_after_sync"])


def peer_free_text(ev, no_ev, ps) -> str:
    block = lambda r: "the same" if r["same_block"] else "another"  # noqa: E731
    return (f"event: all {ev['elements']} elements hold 2 (the new allocation was {block(ev)} block).\n"
            f"no_event: {no_ev['wrong']} of {no_ev['elements']} elements were overwritten by device 1 after the free "
            f"({block(no_ev)} block): a race, so its count may differ run to run.\n"
            f"peer_stream: cudaFreeAsync on device 1's stream returned {ps['free_error']}; device 0's pool had "
            f"{mib(ps['used_before_free']):g} MiB in use before it and {mib(ps['used_after_sync']):g} MiB after device 1's "
            "stream finished (this driver's behaviour: the guide does not speak of frees on another device's stream).")


# -- 5. the copy and the current device ---------------------------------------------------------------------

def memcpy_table(mc):
    return plots.Table(mc.records.where(program="memcpy_device"), mc.label, title="Async copies of device 1's pool memory",
                       columns=["copy", "current_device", "error", "elements", "wrong"])


def memcpy_text(other) -> str:
    return (f"With device 0 current, cudaMemcpyAsync on device 1's stream ended in {other['error']}"
            + (f", {other['wrong']} of {other['elements']} elements wrong" if "wrong" in other else "")
            + ": this driver's behaviour; the guide says to make the stream's device current.")


# -- 6. graph allocations and peer access -------------------------------------------------------------------

def graph_table(graph_reads, label):
    return plots.Table(graph_reads, label, title="Device 1 reads a graph allocation of device 0",
                       columns=["mode", "peer_capable", "error", "elements", "wrong", "device0_synchronize"])


def graph_text(node, before, after_capture) -> str:
    return (f"node API with device 1 in accessDescs: all {node['elements']} values read; access set before the "
            f"capture: all {before['elements']} read; access set after the capture: {after_capture['error']}"
            + (f", {after_capture['wrong']} wrong" if "wrong" in after_capture else "")
            + " (this driver: §16.7.2 says the graph maps for device 0 only, and relying on any extra mapping is an error).")


# -- what was measured ----------------------------------------------------------------------------------

def conclusion(label, f: dict) -> str:
    """The lesson's findings, from the values the notebook's cells read (keys missing where not measured)."""
    out = [f"Measured on {label}.",
           f"- Allocation follows the stream (seed 000, 15.3): with device 0 current, cudaMallocAsync on device 1's "
           f"stream returned memory of device {f['on1']['ptr_device']} (cudaPointerGetAttributes, 15.13.4); only device "
           "1's pool statistics moved."]
    if "acc" in f:
        g, last = f["grants"], f["misses"][-1]
        out += [f"- Access belongs to the pool (15.10): after cudaDeviceEnablePeerAccess the pool still gave device 1 "
                f"'{f['acc']['device1']}' access, and device 1's read of pool memory ended in {f['bad']['error']}; after "
                f"cudaMemPoolSetAccess ('{f['after']['device1']}'), device 1 read blocks allocated before and after the call.",
                f"- Access costs: cudaMemPoolSetAccess took {g['empty_us']:.0f} µs on an empty pool and {g['low_us']:.0f} to "
                f"{g['high_us']:.0f} µs on pools with {nbytes(g['first']['reserved'])} to {nbytes(g['last']['reserved'])} "
                f"reserved (15.10 advises setting it once); at {last['allocation']} a pool miss mapped for device 1 took "
                f"{miss_ratios(last)[0]:.2f}x the time of an unmapped one after its own pool's miss, "
                f"{miss_ratios(last)[1]:.2f}x after the other pool's."]
    if "ev" in f:
        out.append(f"- A free ordered after device 1's use by an event left the next allocation intact ({f['ev']['wrong']} "
                   f"wrong); without the event {f['no_ev']['wrong']} elements were overwritten; a free on device 1's stream "
                   f"returned {f['ps']['free_error']}.")
    if "node" in f:
        out.append(f"- Graph allocations (16.7): device 1 read one made with accessDescs ({f['node']['error']}) and one "
                   f"captured with the pool's access set before the capture ({f['before']['error']}); with the access set "
                   f"after the capture: {f['after_capture']['error']}.")
    out.append(f"- Copies (15.13.1): with the stream's device current {f['right']['wrong']} wrong, cudaMemcpyPeerAsync "
               f"from the other device {f['peer_copy']['wrong']} wrong; with another device current: {f['other']['error']}.")
    return "\n".join(out)
