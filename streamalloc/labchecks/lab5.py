"""Lab 5 (one buffer, two processes): ipc_share.cu's results (what the importer read, the order of the two
processes' work on the GPU's clock, the importer's pool at the end), compute-sanitizer's report, then how the
two functions record and wait for the IPC events `ready` and `freed`.

The results decide: the exporter writes its values only after a hand-shake (the importer has imported everything),
SPIN_MS late, into a zeroed buffer, so a missing `ready` (TODO 1 or 2) reads zeros before the writes and a missing
`freed` (TODO 3 or 4) frees before the importer's free. The reading of the code says which TODO, and catches what a
run cannot show (the importer's free, where the driver refuses the imported pool's query).

The fields ipc_share.cu prints are declared in the comment block at the top of its source, in
solutions/lab5_ipc_pool.ipynb.
"""
from __future__ import annotations

import re

from .. import checks, cppsource, sanitizer
from .common import size

TITLE = "Lab 5: one buffer, two processes"
FILE = "ipc_share.cu"
# 16 MiB; the exporter's values come 150 ms after the importer says it is up (the hand-shake), so an importer that
# does not wait on `ready` reads zeros, and the data and the GPU clock show it; the importer reads 50 ms more
ARGS = [16 << 20, 150, 50]
SANITIZER_ARGS = [1 << 20, 5, 5]  # smaller and shorter: the sanitizer slows every access down
SANITIZER = [*sanitizer.STREAM_ORDER_RACES, "--print-limit", "10", "--error-exitcode", "99"]
SHARE = "Guide §15.11.3 Creating and Sharing Allocations from an Exported Pool"
RECORDS = ("cudaEventRecord", "cudaEventRecordWithFlags")  # the event is the first argument
WAITS = {"cudaStreamWaitEvent": 1, "cudaEventSynchronize": 0}  # where the event stands in each
FREES = ("cudaFreeAsync", "cudaFree")


def lab5(lesson) -> None:
    """Builds ipc_share.cu, runs it (two processes), runs it under compute-sanitizer, and reads the importer and
    the exporter."""
    report = checks.Report(TITLE, lesson)
    res = report.run(FILE, ARGS, timeout=120, what="the data and the order of the two processes")
    if res is not None:
        results(report, res)
    # the importer asks its imported pool for its memory in use, which this driver refuses (notebook 05): that
    # query, and the cudaGetLastError that clears it, are the program's, not the learner's
    report.sanitize(FILE, SANITIZER_ARGS, SANITIZER, timeout=300, clean="no error in either process",
                    errors=", such as an access to the buffer after its free",
                    expected_api_errors={"cudaMemPoolGetAttribute": "cudaErrorInvalidValue",
                                         "cudaGetLastError": "cudaErrorInvalidValue"})
    imp, exp = report.read(FILE, "importer"), report.read(FILE, "exporter")  # with the file's own helpers inlined
    if imp and exp:
        written, read = launch(exp, "write_values"), launch(imp, "check_values")
        if written is None or read is None:
            report.wrong("keep the given kernels: write_values in the exporter, check_values in the importer")
        else:
            ready_recorded_after_the_writes(report, exp, written)
            read_after_ready(report, imp, read)
            freed_in_the_importer_first(report, imp, read)
            exporter_frees_after_freed(report, exp)
    report.finish()


# -- what the run shows ------------------------------------------------------------------------------------------
def results(report, res):
    platform = res.records.where(step="platform")
    if platform and not platform[0].get("ipc", True):
        report.unverified("the sharing between two processes, and everything its run would show",
                          f"this system cannot share a pool between processes ({platform[0]['why']}), so nothing "
                          f"was shared ({res.label})")
        return
    imp, exp = res.records.where(process="importer"), res.records.where(process="exporter", step="shared")
    if not imp or not exp:
        report.wrong(f"the run: the {'importer' if not imp else 'exporter'} printed no result ({res.label})")
        return
    imp, exp = imp[0], exp[0]
    report.expect(exp["importer_status"] == 0, "the importer exited normally",
                  f"the importer exited with status {exp['importer_status']}")
    report.expect(imp["mismatches"] == 0, f"data: the importer read all {imp['checked']:,} values right",
                  f"data: the importer read {imp['mismatches']:,} of {imp['checked']:,} values wrong (the first at "
                  f"element {imp['first_bad']}): it read before the exporter's values were there (the buffer holds "
                  "zeros until then; TODO 1 and 2)")
    order(report, imp, exp, res.label)
    importers_pool(report, imp)


def order(report, imp, exp, label):
    """Both on the GPU's global timer, which the two processes share: stamps of one-thread kernels."""
    early = (exp["written_ns"] - imp["read_start_ns"]) / 1e6
    report.expect(early <= 0, f"order: the importer started reading {-early:.3f} ms after the exporter's values were "
                              f"written (GPU clock; {label})",
                  f"order: the importer started reading {early:.3f} ms before the exporter's values were written "
                  f"(GPU clock; {label}): it must wait on `ready`, recorded after the writes (TODO 1 and 2; {SHARE})")
    first = (imp["past_free_ns"] - exp["free_start_ns"]) / 1e6
    report.expect(first <= 0, f"order: the exporter's free began {-first:.3f} ms after the importer was past its free "
                              "(GPU clock)",
                  f"order: the exporter's free began {first:.3f} ms before the importer was past its own free (GPU "
                  "clock): the importer must free first, and the exporter wait on `freed`, recorded after that free "
                  f"(TODO 3 and 4; {SHARE})")


def importers_pool(report, imp):
    """The imported pool's memory in use at the end, where the driver answers the query."""
    used = imp.get("used_after", -1)
    if used < 0:  # an imported pool may refuse cudaMemPoolGetAttribute (an H100's driver: cudaErrorInvalidValue)
        report.note(f"the importer's pool: this driver refuses cudaMemPoolGetAttribute on an imported pool "
                    f"({imp.get('used_query', 'an error')}), so the run cannot show whether the importer freed p; "
                    "the reading of the importer's code decides that (TODO 3, below)")
        return
    report.expect(used == 0, "the importer's pool holds nothing at the end: it freed what it imported",
                  f"the importer's pool still counts {size(used)} in use at the end: the importer never freed p "
                  f"(TODO 3; {SHARE})")


# -- what the code explains ---------------------------------------------------------------------------------------
def launch(code: str, kernel: str) -> int | None:
    return next((p for name, p in cppsource.launches(code) if name == kernel), None)


def uses(code: str, names, value: str, arg=0) -> tuple[list[int], list[tuple[int, str]]]:
    """Calls of `names` whose argument number `arg` (or names[name]) is `value` or a name given to it; and the
    calls whose argument the reading cannot resolve (an expression, not a name: `events[0]`, `*ev`)."""
    wanted = cppsource.aliases(code, value)
    found, unknown = [], []
    for name in names:
        k = names[name] if isinstance(names, dict) else arg
        for p in cppsource.calls(code, name):
            args = cppsource.call_arguments(code, p)
            a = args[k].strip() if len(args) > k else ""
            if a in wanted:
                found.append(p)
            elif a and not re.fullmatch(r"\w+", a):
                unknown.append((p, a))
    return sorted(found), sorted(unknown)


def cannot_tell(report, unknown, what: str) -> bool:
    """Say that the reading cannot tell (the run's results decide); True if it said so."""
    if unknown:
        args = ", ".join(dict.fromkeys(f"`{a}`" for _, a in unknown))
        report.note(f"{what}: the check cannot tell from the source which event or buffer {args} is; the run's data "
                    "and order decide")
    return bool(unknown)


def ready_recorded_after_the_writes(report, exp, written):
    recorded, unknown = uses(exp, RECORDS, "ready")
    if any(p > written for p in recorded):
        report.ok("exporter: `ready` is recorded after write_values")
    elif not cannot_tell(report, [u for u in unknown if u[0] > written], "exporter: `ready` after write_values"):
        report.wrong("exporter: `ready` is not recorded after write_values, so it marks nothing the importer could "
                     "wait for (a wait on an event never recorded returns at once): record it on s after the writes "
                     f"(TODO 1; {SHARE})")


def read_after_ready(report, imp, read):
    waits, unknown = uses(imp, WAITS, "ready")
    if any(p < read for p in waits):
        report.ok("importer: waits for `ready` before check_values reads p")
    elif not cannot_tell(report, [u for u in unknown if u[0] < read], "importer: the wait before check_values"):
        report.wrong("importer: nothing waits for `ready` before check_values reads p, so it can read before the "
                     f"exporter's values are there: cudaStreamWaitEvent(s, ready, 0) before the read (TODO 2; {SHARE})")


def freed_in_the_importer_first(report, imp, read):
    frees, unknown = uses(imp, FREES, "p")
    frees = [p for p in frees if p > read]
    if not frees:
        if not cannot_tell(report, [u for u in unknown if u[0] > read], "importer: the free after check_values"):
            report.wrong("importer: p is not freed after check_values: the imported allocation must be freed in the "
                         f"importer, before the exporter frees it (TODO 3; {SHARE})")
        return
    recorded, unknown = uses(imp, RECORDS, "freed")
    if any(p > frees[0] for p in recorded):
        report.ok("importer: frees p after reading it, then records `freed`")
    elif not cannot_tell(report, [u for u in unknown if u[0] > frees[0]], "importer: `freed` after the free of p"):
        report.wrong("importer: `freed` is not recorded after the free of p, so the exporter's wait on it does not "
                     f"wait for that free: record it on s after cudaFreeAsync(p, s) (TODO 3; {SHARE})")


def exporter_frees_after_freed(report, exp):
    frees = uses(exp, ["cudaFreeAsync"], "buf")[0]
    if not frees:
        report.wrong("exporter: cudaFreeAsync(buf, s) is gone: keep the exporter's free of buf as it was given")
        return
    waits, unknown = uses(exp, WAITS, "freed")
    if any(p < frees[0] for p in waits):
        report.ok("exporter: waits for `freed` before cudaFreeAsync(buf, s)")
    elif not cannot_tell(report, [u for u in unknown if u[0] < frees[0]], "exporter: the wait before its free"):
        report.wrong("exporter: nothing waits for `freed` before cudaFreeAsync(buf, s), so the exporter can free the "
                     f"buffer while the importer still uses it: cudaStreamWaitEvent(s, freed, 0) first (TODO 4; "
                     f"{SHARE})")
