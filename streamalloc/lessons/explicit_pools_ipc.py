"""Lesson 05's plumbing: explicit_pool.cu, pointer_attrs.cu, ipc_pool.cu, ipc_cost.cu, host_pool.cu and
vm_limit.cu's records turned into tables, figures and sentences.

The CUDA, the runs, the assertions and the calls that draw stay in notebooks/05_explicit_pools_ipc.ipynb. Every
sentence here is computed from the records it is given: where the data could say two things, it says which.
"""
from __future__ import annotations

from .. import plots
from ..measure import GiB, med, mib, nbytes, summary


def ok(answer: str) -> bool:
    return answer == "cudaSuccess"


# -- part 1: explicit pools -----------------------------------------------------------------------

def which_pool_table(records, label, block):
    rows = [{"allocation": r["how"],
             "current pool": "default" if r["current_is_default"] else "explicit" if r["current_is_explicit"] else "other",
             "default pool used (MiB)": mib(r["default_used"]), "explicit pool used (MiB)": mib(r["explicit_used"])}
            for r in records.where(step="current")]
    return plots.Table(rows, label, title=f"Which pool each call drew from ({nbytes(block)} blocks)")


def isolation_table(iso, label, block):
    rows = [{"what": "pool A after its block was freed (kept)", "MiB": mib(iso["a_reserved_after_free"])},
            {"what": "pool B after allocating one block", "MiB": mib(iso["b_reserved"])},
            {"what": "pool A after allocating one block again", "MiB": mib(iso["a_reserved"])},
            {"what": "A and B together", "MiB": mib(iso["a_reserved"] + iso["b_reserved"])}]
    return plots.Table(rows, label, title=f"Reserved memory: one {nbytes(block)} block freed into A, then allocated "
                                          "from B and A")


def isolation_text(iso) -> str:
    return (f"A's second allocation got {'the same' if iso['a_again_same_address'] else 'a different'} address as its "
            f"first, and A {'did not grow' if iso['a_reserved'] == iso['a_reserved_after_free'] else 'grew'} (this "
            "driver's choice: the guide lets a pool reuse its free block, it does not promise it); B's allocation came "
            "from B's own memory")


def max_size_text(cap, block) -> str:
    """What the capped pool did: this driver's answer, and what the attribute query said (CUDA 13.3 headers on)."""
    if not cap["supported"]:
        return (f"maxSize could not be used here: {cap['error']} (driver {cap.get('driver', '?')}); a pool's maximum "
                "size needs CUDA 12.2 in the toolkit and the driver")
    text = (f"a pool with maxSize {mib(cap['max_size']):g} MiB, asked for three {nbytes(block)} blocks, answered "
            f"{', '.join(cap['results'])} (this driver's answers: the documentation names no error for it); it "
            f"reserved {mib(cap['reserved']):g} MiB.")
    query = cap.get("max_pool_size_query", "not run (an older program)")
    if ok(query):
        text += f" cudaMemPoolAttrMaxPoolSize read back {mib(cap['max_pool_size_attr']):g} MiB."
    else:
        text += f" cudaMemPoolAttrMaxPoolSize: {query}."
    return text


def plot_destroy(d, label):
    points = ["free_before", "free_allocated", "free_destroyed", "free_freed"]
    names = ["before", "allocated\n(4 blocks)", "after\ncudaMemPoolDestroy", "after the last\ncudaFreeAsync"]
    fig, ax = plots.figure("Destroying a pool with a live allocation: the GPU's free memory", label)
    ax.bar(range(4), [mib(d["free_before"] - d[p]) for p in points], color=["0.7", "tab:orange", "tab:orange", "tab:blue"])
    ax.set_xticks(range(4), names, fontsize=8)
    ax.set_ylabel("MiB taken, against 'before'")
    ax.axhline(mib(d["bytes"]), color="k", linestyle=":", linewidth=1, label="the allocation")
    ax.legend(fontsize=8)
    return fig


def destroy_text(d) -> str:
    return (f"cudaMemPoolDestroy took {d['destroy_us']:.1f} µs with {nbytes(d['bytes'])} still allocated; the "
            "allocation " + ("was still usable (a kernel wrote it after the destroy)" if d["used_after_destroy"] else
                             "did not read back what a kernel wrote after the destroy"))


# -- part 2: pointer attributes ------------------------------------------------------------------

def attrs_table(res):
    return plots.Table([{"allocated with": r["what"], "MEMPOOL_HANDLE": r["mempool"], "the pool it came from": r["expected_pool"],
                         "CONTEXT": r["context"], "DEVICE_ORDINAL": r["device_ordinal"]} for r in res.records],
                       res.label, title="cuPointerGetAttribute on three allocations")


# -- part 3: IPC ---------------------------------------------------------------------------------

def plot_ipc_timeline(imp, exp, label):
    t0 = exp["written_ns"]
    marks = [("exporter: values written", exp["written_ns"]), ("importer: starts reading", imp["read_start_ns"]),
             ("importer: past its free", imp["freed_ns"]), ("exporter: its free begins", exp["free_start_ns"])]
    fig, ax = plots.figure("Two processes, one buffer: the order on the GPU's clock", label, size=(7.5, 3.0))
    for k, (what, ns) in enumerate(marks):
        ax.plot((ns - t0) / 1e6, k, "o", color="tab:blue" if what.startswith("exporter") else "tab:orange")
        ax.annotate(f"  {what}: {(ns - t0) / 1e6:+.3f} ms", ((ns - t0) / 1e6, k), fontsize=8, va="center")
    ax.set_yticks([]); ax.set_ylim(-0.7, 3.7); ax.invert_yaxis()
    ax.set_xlabel("ms after the exporter's values were written (GPU global timer)")
    ax.set_xlim(-5, max((ns - t0) / 1e6 for _, ns in marks) * 1.9 + 5)
    return fig


def order_text(platform, imp, exp) -> str:
    return (f"the default pool, exported: {platform['default_export']}; all {imp['checked']:,} values right; the "
            f"importer read {(imp['read_start_ns'] - exp['written_ns']) / 1e6:.3f} ms after the writes and the exporter "
            f"freed {(exp['free_start_ns'] - imp['freed_ns']) / 1e6:.3f} ms after the importer's free")


def access_text(imp) -> str:
    """§15.11.2: what the imported pool's access was, and what setting it answered."""
    return (f"the imported pool, from device 0 (its resident device): access {imp['access_before']} on import; "
            f"cudaMemPoolSetAccess: {imp['set_access']}; access then {imp['access_after']}")


def reserved_rows(imp, exp):
    """What the exported and the imported pool did with their memory (the imported pool's refusals stand in)."""
    def mib_or(v):
        return mib(v) if v >= 0 else imp["attribute_query_imported"]
    return [
        {"pool": "exported (threshold 0)", "step": "buffer allocated", "reserved MiB": mib(exp["reserved_allocated"])},
        {"pool": "exported (threshold 0)", "step": "both freed, synchronized", "reserved MiB": mib(exp["reserved_after_sync"])},
        {"pool": "exported (threshold 0)", "step": "cudaMemPoolTrimTo(pool, 0)", "reserved MiB": mib(exp["reserved_after_trim"])},
        {"pool": "not shareable (threshold 0)", "step": "freed, synchronized", "reserved MiB": mib(exp["plain_reserved_after_sync"])},
        {"pool": "imported", "step": "buffer imported", "reserved MiB": mib_or(imp["reserved_while_imported"]),
         "used MiB": mib_or(imp["used_while_imported"])},
        {"pool": "imported", "step": f"threshold 0 ({imp['threshold_on_imported']}), freed, synchronized",
         "reserved MiB": mib_or(imp["reserved_after_free"])},
        {"pool": "imported", "step": f"cudaMemPoolTrimTo ({imp['trim_imported']})", "reserved MiB": mib_or(imp["reserved_after_trim"])},
    ]


def guide_rows(imp, exp):
    """Each statement of §15.11.4 and §15.11.5 that the run tests, beside what this driver did.

    Returns dicts with "section", "the guide says", "this driver" and "agrees" (True, False, or None where the
    run could not tell)."""
    kept_sync = exp["reserved_after_sync"] >= exp["reserved_allocated"] > 0
    # a trim can only be seen to do nothing where something was left to trim
    kept_trim = exp["reserved_after_trim"] >= exp["reserved_after_sync"] if exp["reserved_after_sync"] else None
    rows = [
        ("§15.11.4", "an IPC pool does not give physical memory back: the release threshold is ignored",
         f"the exported pool held {mib(exp['reserved_allocated']):g} MiB, and {mib(exp['reserved_after_sync']):g} MiB "
         "after its buffer was freed and the stream synchronized at threshold 0", kept_sync),
        ("§15.11.4", "cudaMemPoolTrimTo is a no-op on an IPC pool",
         f"after cudaMemPoolTrimTo(pool, 0) it held {mib(exp['reserved_after_trim']):g} MiB", kept_trim),
        ("§15.11.5", "an imported pool cannot allocate",
         f"cudaMallocFromPoolAsync answered {imp['malloc_from_imported']}", not ok(imp["malloc_from_imported"])),
        ("§15.11.5", "an imported pool cannot be set current",
         f"cudaDeviceSetMemPool answered {imp['set_current_imported']}", not ok(imp["set_current_imported"])),
        ("§15.11.5", "an imported pool's release threshold is ignored and cudaMemPoolTrimTo is a no-op (the calls "
         "take, and do nothing)", f"setting the threshold answered {imp['threshold_on_imported']}, the trim "
         f"{imp['trim_imported']}", ok(imp["threshold_on_imported"]) and ok(imp["trim_imported"])),
        ("§15.11.5", "usage statistics answer for the allocations imported into the process",
         f"the queries answered {imp['attribute_query_imported']}"
         + (f", used {mib(imp['used_while_imported']):g} MiB" if imp["used_while_imported"] >= 0 else ""),
         ok(imp["attribute_query_imported"]) and imp["used_while_imported"] >= imp["bytes"]),
    ]
    return [{"section": s, "the guide says": g, "this driver": d, "agrees": a} for s, g, d, a in rows]


def guide_table(rows, label):
    words = {True: "yes", False: "DIFFERS", None: "not tested"}
    return plots.Table([{**r, "agrees": words[r["agrees"]]} for r in rows], label,
                       columns=["section", "the guide says", "this driver", "agrees"],
                       title="IPC pools: the guide's limitations beside this driver")


def disagreements_text(rows) -> str:
    differ = [r for r in rows if r["agrees"] is False]
    tested = [r for r in rows if r["agrees"] is not None]
    if not differ:
        return f"This driver did what §15.11.4 and §15.11.5 say, on all {len(tested)} points tested."
    return (f"This driver differs from the guide on {len(differ)} of the {len(tested)} points tested:\n"
            + "\n".join(f"- {r['section']}: the guide says {r['the guide says']}; here, {r['this driver']}." for r in differ))


def cost_rows(ce, ci):
    calls = [("pool", "cudaMemPoolExportPointer", ce["export_pointer_us"]),
             ("pool", "cudaMemPoolImportPointer", ci["import_pointer_us"]),
             ("pool", "cudaFree (imported)", ci["free_imported_us"]),
             ("legacy", "cudaIpcGetMemHandle", ce["get_handle_us"]),
             ("legacy", "cudaIpcOpenMemHandle", ci["open_handle_us"]),
             ("legacy", "cudaIpcCloseMemHandle", ci["close_handle_us"])]
    rows = []
    for way, call, us in calls:
        s = summary(us[1:])
        rows.append({"way": way, "call": call, "first µs": us[0], "median µs (the others)": s["median"],
                     "p25": s["p25"], "p75": s["p75"], "max": s["max"]})
    return rows


def plot_cost(rows, label):
    fig, ax = plots.figure("Sharing one more buffer: per-call host cost (median, p25–p75)", label)
    m = "median µs (the others)"
    for k, r in enumerate(rows):
        ax.barh(k, r[m], xerr=[[r[m] - r["p25"]], [r["p75"] - r[m]]], color="tab:blue" if r["way"] == "pool" else "tab:gray")
    ax.set_yticks(range(len(rows)), [f"{r['way']}: {r['call']}" for r in rows], fontsize=8)
    ax.invert_yaxis(); ax.set_xscale("log"); ax.set_xlabel("µs per call (log scale)")
    return fig


def cost_text(rows, ci) -> str:
    by = {r["call"]: r["median µs (the others)"] for r in rows}
    pool_us = by["cudaMemPoolExportPointer"] + by["cudaMemPoolImportPointer"]
    legacy_us = by["cudaIpcGetMemHandle"] + by["cudaIpcOpenMemHandle"]
    return (f"export + import per buffer: {pool_us:.1f} µs from the shared pool, {legacy_us:.1f} µs with legacy handles; "
            f"sharing the pool itself, once: {ci['import_pool_us']:.1f} µs to import it (this GPU and driver)")


# -- part 4: pools on the host ---------------------------------------------------------------------

def host_pools(records) -> dict:
    """host_pool.cu's lines by kind ("device", "host", "host_numa"), and "versions"."""
    return {r["kind"]: r for r in records if "kind" in r}


def host_rows(pools: dict):
    rows = []
    for kind in ("device", "host", "host_numa"):
        r = pools.get(kind)
        if r is None:
            continue
        if not r["supported"]:
            rows.append({"pool": kind, "created": f"no: {r['error']}"})
            continue
        row = {"pool": kind, "created": "yes", "device 0's access": f"{r['access_before']} → {r['access_after']}",
               "cudaMemPoolSetAccess": r["set_access"]}
        if r["ran"]:
            gbs = r["bytes"] / (med(r["kernel_ms"]) / 1e3) / 1e9
            row.update({"first allocation µs": r["first_alloc_us"], "allocation µs (median)": med(r["alloc_us"]),
                        "GPU write GB/s": gbs, "wrong": r["wrong"], "pointer type": r["memory_type"]})
        rows.append(row)
    return rows


def host_table(pools, label):
    return plots.Table(host_rows(pools), label, title="Pools on the GPU and on the host: access, cost, GPU writes",
                       columns=["pool", "created", "device 0's access", "cudaMemPoolSetAccess", "first allocation µs",
                                "allocation µs (median)", "GPU write GB/s", "wrong", "pointer type"])


def host_text(pools) -> str:
    ran = {k: r for k, r in pools.items() if k != "versions" and r.get("ran")}
    missing = [f"{k} ({r['error']})" for k, r in pools.items() if k != "versions" and not r["supported"]]
    parts = []
    if "device" in ran:
        dev = ran["device"]
        for kind in ("host", "host_numa"):
            if kind in ran:
                r = ran[kind]
                parts.append(f"a kernel wrote the {kind} pool's memory {med(r['kernel_ms']) / med(dev['kernel_ms']):.1f}x "
                             f"slower than the device pool's; device 0's access was {r['access_before']} until "
                             f"cudaMemPoolSetAccess ({r['set_access']})")
    blocked = [f"{k} (device 0's access {r['access_after']}, cudaMemPoolSetAccess {r['set_access']})"
               for k, r in pools.items() if k != "versions" and r["supported"] and not r["ran"]]
    if blocked:
        parts.append("created, but no kernel touched it, device 0 having no access: " + ", ".join(blocked))
    if missing:
        parts.append("not available here: " + ", ".join(missing))
    return "; ".join(parts) or "no pool ran"


# -- part 5: a CPU virtual-memory limit -------------------------------------------------------------

def vm_rows(records):
    rows = []
    for r in records:
        if r.get("child_died"):
            rows.append({"limit": f"{r['limit'] / GiB:.1f} GiB", "result": f"died (signal {r['signal']}, exit {r['exit']})"})
        elif "failed_at" in r or "setrlimit" in r:
            rows.append({"limit": "none" if not r["limit"] else f"{r['limit'] / GiB:.1f} GiB",
                         "VmSize after CUDA init, GiB": r["vm_after_init"] / GiB if "vm_after_init" in r else "-",
                         "VmSize after the allocation, GiB": r["vm_after_alloc"] / GiB if "vm_after_alloc" in r else "-",
                         "result": r.get("setrlimit") or ("all steps succeeded" if r["failed_at"] == "nothing"
                                                          else f"{r['failed_at']}: {r['error']}")})
    return rows


def vm_table(records, label):
    return plots.Table(vm_rows(records), label, title="cudaMallocAsync under a virtual-memory limit (RLIMIT_AS)",
                       columns=["limit", "VmSize after CUDA init, GiB", "VmSize after the allocation, GiB", "result"])


# -- the C++ overload, the resident device's access, handle types, cudaFree in both processes ------------------

def overload_text(r) -> str:
    """pool_overload.cu: where the overload's allocation came from, from the pools' UsedMemCurrent."""
    grew = r["explicit_used_after"] - r["explicit_used_before"]
    return (f"cudaMallocAsync(&p, {nbytes(r['bytes'])}, pool, stream): the named pool's UsedMemCurrent grew by "
            f"{mib(grew):g} MiB, the default pool's by {mib(r['default_used_after'] - r['default_used_before']):g} "
            f"MiB; the current pool {'stayed' if r['current_is_default'] else 'was no longer'} the default one, and a "
            f"plain cudaMallocAsync then drew from it ({mib(r['plain_default_used']):g} MiB used)")


def revoke_text(records) -> str:
    return "; ".join(f"{r['pool']} pool: cudaMemPoolSetAccess(device 0, ProtNone) answered {r['set_prot_none']}, "
                     f"device 0's access {r['access_before']} → {r['access_after']}"
                     + (f", and a kernel then wrote {'every value' if r.get('wrong') == 0 else 'wrong values'}"
                        if r["ran"] else ", so no kernel ran")
                     for r in records) + " (the error code is this driver's: the guide names none)"


HANDLE_TYPES = {1: "cudaMemHandleTypePosixFileDescriptor", 2: "cudaMemHandleTypeWin32",
                4: "cudaMemHandleTypeWin32Kmt", 8: "cudaMemHandleTypeFabric"}


def handle_types_text(mask: int) -> str:
    """cudaDevAttrMemoryPoolSupportedHandleTypes, named bit by bit."""
    have = [name for bit, name in HANDLE_TYPES.items() if mask & bit]
    other = [name for bit, name in HANDLE_TYPES.items() if not mask & bit]
    return (f"this GPU and driver offer {', '.join(have) or 'no handle type'} for pools "
            f"(cudaDevAttrMemoryPoolSupportedHandleTypes = {mask:#x}); not offered here: {', '.join(other) or 'none'}")


def sync_free_text(imp, exp) -> str:
    gap_us = (exp["free_called_ns"] - imp["freed_at_ns"]) / 1e3
    return (f"the importer began reading {(imp['read_start_ns'] - exp['written_ns']) / 1e6:.3f} ms after the values "
            f"were written (GPU clock) and found {imp['mismatches']} wrong of {imp['checked']}; its cudaFree answered "
            f"{imp['cudaFree']}, the exporter's {exp['cudaFree']}, {gap_us:.0f} µs later (host clock). On this driver, "
            f"right after the exporter's cudaFree the pool's cudaMemPoolAttrUsedMemCurrent read "
            f"{mib(exp['used_after_free']):g} MiB (reported, not asserted: the guide does not say when memory freed "
            "with cudaFree leaves that count)")
