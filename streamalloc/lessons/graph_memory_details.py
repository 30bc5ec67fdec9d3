"""Lesson 06b's plumbing: the tables built from graph_free.cu, oob_free.cu, upload_undo.cu, trim_give.cu, va_share.cu,
child_move.cu and exec_update.cu's records, and the sentences that report what the driver did.

The CUDA, the runs and the assertions stay in notebooks/06b_graph_memory_details.ipynb. Sizes follow lesson 06's rule
(graph_memory_nodes.block_size).
"""
from __future__ import annotations

from .. import plots
from ..measure import med, mib

UNDO_WAYS = ["no upload", "upload", "upload, then churn", "upload, then graph", "upload, then trim"]


def steps_table(records, label: str, title: str, keys=("way", "step", "error")) -> plots.Table:
    """One row per step record: its keys, then the graph allocator's memory in MiB."""
    rows = []
    for r in records:
        row = {k: r[k] for k in keys if k in r}
        for k in ("graph_used", "graph_reserved", "free"):
            if k in r:
                row[k.replace("_", " ") + " MiB"] = mib(r[k])
        rows.append(row)
    return plots.Table(rows, label, title=title)


# -- oob_free.cu -------------------------------------------------------------------------------------------------
def oob_rows(ways) -> list[dict]:
    rows = []
    for r in ways:
        t0 = r["reader_start_ns"]
        rows.append({"way": r["way"], "reader ran µs": (r["reader_stop_ns"] - t0) / 1e3,
                     "B's fill started µs after the reader": (r["b_fill_start_ns"] - t0) / 1e3,
                     "B finished while the reader ran": r["b_done_while_reader_ran"],
                     "reserved after A / after B (MiB)": f"{mib(r['reserved_after_a']):g} / {mib(r['reserved_after_b']):g}",
                     "A's / B's address": f"{r['a_address']} / {r['b_address']}"})
    return rows


# -- upload_undo.cu ------------------------------------------------------------------------------------------------
def undo_rows(trials) -> list[dict]:
    """Per way: medians and ranges of the launch's host and GPU time, and what was reserved before it."""
    rows = []
    for w in UNDO_WAYS:
        rs = trials.where(way=w)
        if not rs:
            continue
        call, gpu = [r["call_us"] for r in rs], [r["gpu_us"] for r in rs]
        rows.append({"before the launch": w, "trials": len(rs),
                     "reserved before the launch MiB": med([mib(r["reserved_before_launch"]) for r in rs]),
                     "launch call µs (median)": med(call), "call µs min-max": f"{min(call):.0f}-{max(call):.0f}",
                     "launch GPU µs (median)": med(gpu), "GPU µs min-max": f"{min(gpu):.0f}-{max(gpu):.0f}"})
    return rows


def undone(trials, way: str, field: str = "gpu_us") -> str:
    """'costlier', 'as cheap' or 'within the noise': a way's launches against the launches right after an upload, with
    margin: costlier only where every trial of it is above 1.5× every trial after an upload (a remap costs several
    times a mapped launch; a few µs is not one), as cheap where none is above 1.5× their median."""
    base = [r[field] for r in trials.where(way="upload")]
    other = [r[field] for r in trials.where(way=way)]
    if max(other) < min(base) or max(other) <= 1.5 * med(base):
        return "as cheap"
    if min(other) > 1.5 * max(base):
        return "costlier"
    return "within the noise"


# -- trim_give.cu ------------------------------------------------------------------------------------------------
def trim_rows(steps) -> list[dict]:
    return [{"step": r["step"], "cudaMalloc asked MiB": mib(r["asked"]) if r["asked"] else "-", "result": r["error"],
             "free MiB (cudaMemGetInfo)": mib(r["free"]), "graph reserved MiB": mib(r["graph_reserved"])}
            for r in steps]


# -- child_move.cu / exec_update.cu ------------------------------------------------------------------------------
def child_rows(attempts) -> list[dict]:
    return [{"attempt": r["attempt"], "error": r["error"],
             "bytes right": f"{r['right']:,} / {r['bytes']:,}" if r.get("bytes") else "-",
             "resultInfo.result": {None: "-", -1: "not set"}.get(r.get("update_result"), r.get("update_result"))}
            for r in attempts]


def update_rows(updates) -> list[dict]:
    return [{"offered as the update": r["attempt"], "cudaGraphExecUpdate": r["error"], "resultInfo.result": r["result"],
             "error node named": r["error_node"], "launch after it": r["launch"],
             "kernel's address is the original's": r["address_seen"] == r["original_address"],
             "value / bytes the kernel was given": f"0x{r['value_seen']:02X} / {r['bytes_seen']:,}",
             "bytes right": f"{r['right']:,}"} for r in updates]


__all__ = ["steps_table", "oob_rows", "undo_rows", "undone",
           "trim_rows", "child_rows", "update_rows", "UNDO_WAYS"]


def trim_text(held, filled, before, trim) -> str:
    """What §16.6's program found: the checked promise, and what this driver did before the trim."""
    said = f"checked: after cudaDeviceGraphMemTrim, cudaMalloc had the {mib(held):g} MiB the graph allocator held. "
    if before["error"] == "cudaSuccess" and before["graph_reserved"] < filled["graph_reserved"]:
        return said + (f"On this driver the same cudaMalloc had succeeded before the trim too: to satisfy it the driver "
                       f"released the idle graph memory itself (the graph allocator's reserve went from "
                       f"{mib(filled['graph_reserved']):g} to {mib(before['graph_reserved']):g} MiB), so the trim found "
                       "nothing left to release. §16.6 promises the memory after a trim; getting it without one is this "
                       "driver's choice.")
    return said + (f"On this driver the same cudaMalloc returned {before['error']} before the trim; the trim raised "
                   f"cudaMemGetInfo's free memory by {mib(trim['free'] - filled['free']):g} MiB.")
