"""Lesson 05b's plumbing: where the numbers come from (two GPUs, or a recording made on two), and
peer_link.cu, current_device.cu, pool_access.cu, access_cost.cu, peer_free.cu, memcpy_device.cu, graph_peer.cu and
invisible_import.cu's records turned into tables, a figure and sentences.

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


# -- the link ---------------------------------------------------------------------------------------------

def link_table(links, label):
    return plots.Table(links, label, title="Each ordered pair of GPUs: cudaDeviceCanAccessPeer and cudaDeviceGetP2PAttribute",
                       columns=["device", "peer", "can_access_peer", "performance_rank", "access_supported",
                                "native_atomic_supported", "cuda_array_access_supported"])


def set_access_table(tries, label):
    return plots.Table(tries, label, title="cudaMemPoolSetAccess without checking the peer capability first (§15.10): "
                                           "a pool of `peer`, access for `device`",
                       columns=["device", "peer", "can_access_peer", "pool", "set_access", "next_allocation",
                                "access_after"])


def link_text(links, tries) -> str:
    """What the link table says, and which of §15.10's two cases this machine could show."""
    capable = [r for r in links if r["can_access_peer"]]
    ranks = sorted({r["performance_rank"] for r in links})
    out = (f"{len(capable)} of {len(links)} ordered pairs are peer capable (cudaDeviceCanAccessPeer); performance "
           f"rank {', '.join(map(str, ranks))}; native atomics on {sum(r['native_atomic_supported'] == 1 for r in links)} "
           f"of {len(links)} pairs.")
    if len(capable) == len(links):
        ok = all(r["set_access"] == r["next_allocation"] == "cudaSuccess" for r in tries)
        return out + (f"\nEvery pair is peer capable, so cudaMemPoolSetAccess {'succeeded' if ok else 'did not always succeed'} "
                      "on empty pools and on pools holding memory alike: the failures §15.10 describes (cudaErrorInvalidDevice, "
                      "or a next allocation that fails) need GPUs that are not peer capable, which this machine does not have.")
    bad = [r for r in tries if not r["can_access_peer"]]
    return out + "\nNot peer capable: " + "; ".join(
        f"{r['device']} on {r['peer']}'s {r['pool']} pool: set access {r['set_access']}, next allocation {r['next_allocation']}"
        for r in bad) + "."


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


GAP = 0.05  # a miss "slower" or "faster" than the other: quartiles apart, and medians at least 5% apart (1 µs in 81 is not)


def miss_rows(misses) -> list[dict]:
    """Per allocation size: the median host time of a miss in each pool (with its quartiles), and their ratio.
    access_cost.cu times each miss right after an untimed miss of the same pool, so like is set beside like."""
    rows = []
    for size in sorted({r["size"] for r in misses}):
        plain, mapped = (summary(misses.one(size=size, peer_mapped=m)["us"]) for m in (False, True))
        ratio = mapped["median"] / plain["median"]
        rows.append({"allocation": nbytes(size),
                     "device 0 only: median µs": plain["median"], "device 0 only: p25-p75 µs": f"{plain['p25']:.0f}-{plain['p75']:.0f}",
                     "mapped: median µs": mapped["median"], "mapped: p25-p75 µs": f"{mapped['p25']:.0f}-{mapped['p75']:.0f}",
                     "ratio": ratio,
                     "said": ("slower" if mapped["p25"] > plain["p75"] and ratio >= 1 + GAP else
                              "faster" if mapped["p75"] < plain["p25"] and ratio <= 1 - GAP else "within the spread")})
    return rows


def miss_table(rows, label):
    return plots.Table(rows, label, title="A pool miss, host time, each after an untimed miss of the same pool",
                       columns=["allocation", "device 0 only: median µs", "device 0 only: p25-p75 µs", "mapped: median µs",
                                "mapped: p25-p75 µs", "ratio", "said"])


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
    """What a peer mapping added to a miss, at the smallest and the largest allocation: slower or faster only where
    the quartiles do not overlap."""
    parts = [f"at {row['allocation']}, {row['ratio']:.2f}x ({row['said']})" for row in (rows[0], rows[-1])]
    return ("A miss in the pool mapped for device 1, against the unmapped pool's, each after a miss of its own pool: "
            + "; ".join(parts) + " (this driver's figures, not a promise of the guide).")


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

def pointer_table(mc):
    return plots.Table([r for r in mc.records.where(program="memcpy_device") if "pointer" in r], mc.label,
                       title="Where each allocation lives, as cudaPointerGetAttributes says (§15.13.4)",
                       columns=["pointer", "stream_device", "ptr_device", "ptr_is_device_memory"])


def memcpy_table(mc):
    return plots.Table([r for r in mc.records.where(program="memcpy_device") if "copy" in r], mc.label,
                       title="Async copies of device 1's pool memory",
                       columns=["copy", "current_device", "error", "elements", "wrong"])


def memcpy_text(other, after) -> str:
    works = after["device0_synchronize"] == after["device1_synchronize"] == "cudaSuccess"
    return (f"With device 0 current, cudaMemcpyAsync on device 1's stream ended in {other['error']}"
            + (f", {other['wrong']} of {other['elements']} elements wrong" if "wrong" in other else "")
            + ": this driver's behaviour; the guide says to make the stream's device current. After it, "
            + ("both devices still synchronized without an error (the error was not sticky), and the program freed "
               "everything." if works else f"device 0 synchronized with {after['device0_synchronize']} and device 1 with "
               f"{after['device1_synchronize']}: the process's CUDA work was broken, so it left without cleaning up."))


# -- 6. graph allocations and peer access -------------------------------------------------------------------

def graph_table(graph_reads, label):
    return plots.Table(graph_reads, label, title="Device 1 reads a graph allocation of device 0",
                       columns=["mode", "peer_capable", "error", "elements", "wrong", "device0_synchronize"])


def graph_text(node, before, after_capture) -> str:
    return (f"node API with device 1 in accessDescs: all {node['elements']} values read; access set before the "
            f"capture: all {before['elements']} read; access set after the capture: {after_capture['error']}"
            + (f", {after_capture['wrong']} wrong" if "wrong" in after_capture else "")
            + " (what this driver did: §16.7.2 says the graph maps the allocation for device 0 only, and §16.7 that an "
            "address reused by graph allocations may carry other mappings, but \"relying on these extra mappings is still "
            "an error\").")


# -- 7. a pool from a GPU the importer cannot see --------------------------------------------------------------

IMPORT_COLUMNS = ["device_count", "visible_gpus", "import_pool", "get_access_before", "access_before", "location_type_query",
                  "location_type", "location_invisible", "import_pointer", "pointer_attributes", "ptr_device",
                  "set_access", "access_after", "read", "elements", "wrong", "destroy_pool"]


def import_table(got, label):
    """The importer's steps, one row each: the call, and what it returned or said."""
    rows = [{"step": k, "answer": got[k]} for k in IMPORT_COLUMNS if k in got]
    return plots.Table(rows, label, title="The importer, started with CUDA_VISIBLE_DEVICES = device 0's UUID; the pool "
                                          "is device 1's", columns=["step", "answer"])


def import_text(platform, got, done) -> str:
    seen = ("its one GPU is device 0 (the same UUID)" if got["visible_gpus"] == 1 and got.get("uuid0") == platform["uuid0"]
            else f"it saw {got['visible_gpus']} GPUs")
    out = (f"The importer ran with CUDA_VISIBLE_DEVICES={platform['uuid0']}: {seen}. Importing device 1's pool returned "
           f"{got['import_pool']}")
    if got["import_pool"] == "cudaSuccess":
        out += (f"; its access from device 0 was '{got['access_before']}' ({got['get_access_before']}); importing the pointer "
                f"returned {got['import_pointer']}")
        if "ptr_device" in got:
            out += (f", whose attributes name device {got['ptr_device']}: a number in the importer's own list, whose only GPU, "
                    "device 0, is not the pool's (the pool's GPU has no number there; section 7's text says why)")
        if "set_access" in got:
            out += f"; cudaMemPoolSetAccess for device 0 returned {got['set_access']} ('{got['access_after']}')"
        if "read" in got:
            out += (f"; device 0's kernel read the pool's memory with {got['read']}"
                    + (f", {got['wrong']} of {got['elements']} values wrong" if "wrong" in got else ""))
    out += (f". The pool's location type: {got['location_type_query']}"
            + (f" ({got['location_type']}, invisible: {got['location_invisible']})" if "location_type" in got else "")
            + f". The importer exited with {done['importer_status']}; then the exporter freed.")
    return out


# -- what was measured ----------------------------------------------------------------------------------

def conclusion(label, f: dict) -> str:
    """The lesson's findings, from the values the notebook's cells read (keys missing where not measured)."""
    out = [f"Measured on {label}."]
    if "links" in f:
        capable = sum(bool(r["can_access_peer"]) for r in f["links"])
        failed = [r for r in f["tries"] if not r["can_access_peer"]]
        out.append(f"- The link (15.10): {capable} of {len(f['links'])} ordered pairs peer capable; cudaMemPoolSetAccess "
                   "on a peer-capable pair succeeded on empty pools and pools holding memory alike; "
                   + (f"on the others it, or the next allocation, failed ({len(failed)} tries)." if failed else
                      "what fails between GPUs that are not peer capable is cited, not shown (no such pair here)."))
    out += [
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
                f"{last['ratio']:.2f}x the time of an unmapped one, each after a miss of its own pool ({last['said']})."]
    if "ev" in f:
        out.append(f"- A free ordered after device 1's use by an event left the next allocation intact ({f['ev']['wrong']} "
                   f"wrong); without the event {f['no_ev']['wrong']} elements were overwritten; a free on device 1's stream "
                   f"returned {f['ps']['free_error']}.")
    if "node" in f:
        out.append(f"- Graph allocations (16.7): device 1 read one made with accessDescs ({f['node']['error']}) and one "
                   f"captured with the pool's access set before the capture ({f['before']['error']}); with the access set "
                   f"after the capture: {f['after_capture']['error']}.")
    out.append(f"- Copies (15.13.1, 15.13.4): each pointer's attributes named its allocation's device, which the copies "
               f"made current or passed to cudaMemcpyPeerAsync; with the stream's device current {f['right']['wrong']} "
               f"wrong, cudaMemcpyPeerAsync from the other device {f['peer_copy']['wrong']} wrong; with another device "
               f"current: {f['other']['error']}.")
    if "imported" in f:
        got = f["imported"]
        out.append(f"- A pool of a GPU the importer cannot see (15.11.2): the import returned {got['import_pool']}"
                   + (f"; after cudaMemPoolSetAccess for its own GPU ({got['set_access']}) the importer read the values "
                      f"({got.get('read', 'not read')}, {got.get('wrong', '-')} wrong)" if "set_access" in got else "")
                   + f"; location type: {got['location_type_query']}.")
    return "\n".join(out)
