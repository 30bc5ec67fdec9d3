"""Lesson 05c's plumbing: pools_by_location.cu and numa_ipc_pool.cu's records turned into tables and sentences.

The CUDA, the runs, the assertions and the calls stay in notebooks/05c_pools_by_location.ipynb. Every sentence here
is computed from the records it is given.
"""
from __future__ import annotations

from .. import plots
from ..measure import mib


def ok(answer) -> bool:
    return answer == "cudaSuccess"


def needs(versions) -> str | None:
    """Why the program measured nothing (built with a runtime that lacks the calls), or None."""
    return f"needs {versions['needs']}: {versions['why']}" if "needs" in versions else None


def lookup_table(records, label):
    rows = [{"location, allocation type": r["place"], "cudaMemGetDefaultMemPool": r["default"],
             "cudaMemGetMemPool": r["current"], "current is the default": r["current_is_default"]}
            for r in records.where(step="lookup")]
    return plots.Table(rows, label, title="The pool the runtime names for each location and allocation type")


def set_current_text(r) -> str:
    if not ok(r["create"]):
        return f"{r['place']}: no explicit pool there ({r['create']}), so nothing to make current"
    text = (f"{r['place']}: cudaMemSetMemPool with a pool of that location answered {r['set']}; cudaMemGetMemPool "
            f"{'named it' if r['current_is_new_pool'] else 'did not name it'}")
    if "device_current_is_new_pool" in r:
        text += f", and so did cudaDeviceGetMemPool" if r["device_current_is_new_pool"] else ", cudaDeviceGetMemPool did not"
    return text + (f"; a pool of another location answered {r['set_other_location']} and the current pool "
                   f"{'stayed' if r['still_new_pool'] else 'changed'}")


def allocate_table(records, label):
    rows = []
    for r in records.where(step="allocate"):
        made = r["how"] if "(" in r["how"] else f"cudaMemPoolCreate(device 0, managed): {r['how']}"  # its answer
        rows.append({"pool": r["pool"], "made": made, "device 0's access": r.get("set_access", "-"),
                     "cudaMallocFromPoolAsync": r.get("malloc", "-"),
                     "kernel wrote": ("every value" if r.get("wrong") == 0 else f"{r['wrong']} wrong") if r.get("ran")
                     else "not run", "cudaPointerGetAttributes": r.get("memory_type", "-"),
                     "used MiB": mib(r["used"]) if "used" in r else "-"})
    return plots.Table(rows, label, title="Allocating from the host's default pool and from a managed pool")


def query_text(records) -> str:
    out = []
    for r in records.where(step="query"):
        if not ok(r["location_type_query"]):
            out.append(f"{r['pool']}: {r['location_type_query']}")
        else:
            out.append(f"{r['pool']}: location type {r['location_type']}, id {r['location_id']}, allocation type "
                       f"{r['allocation_type']}, export handle types {r['handle_types']:#x}; setting the location type "
                       f"answered {r['set_location_type']}")
    return "query-only attributes: " + "; ".join(out)


def numa_text(platform, imp, exp) -> str:
    if not platform["ipc"]:
        why = platform.get("why") or f"{platform.get('failed_at')} answered {platform.get('error')}"
        return f"no IPC pool on a host NUMA node here: {why}"
    return (f"a pool on host NUMA node {platform['numa_node']} (the GPU's nearest: {platform['host_numa_id']}) was "
            f"exported as a file descriptor; device 0's access in the exporter {exp['gpu_access_before']} → "
            f"{exp['gpu_access_after']}, in the importer {imp['gpu_access_before']} → {imp['gpu_access_after']}; the "
            f"importer's kernel found {imp['mismatches']} wrong of {imp['checked']}; cudaPointerGetAttributes says "
            f"{exp['memory_type']} in the exporter, {imp['memory_type']} in the importer")
