"""Lab 5's check (share a buffer between two processes through an IPC pool): to be moved into the labchecks
package as its lab5 module. The solution's checking cell calls `lab5(lesson)`.

Graded on results first: what the importer read (every value), the order of the two processes' work on the
GPU's clock (the importer read after the exporter's writes; the exporter's free began after the importer was
past its free), that the importer's pool holds nothing at the end, and compute-sanitizer's report. Reading
the code only says which TODO a wrong result points to.
"""
from __future__ import annotations

from . import checks, sanitizer

FILE = "ipc_share.cu"
ARGS = [16 << 20, 50, 50]         # 16 MiB buffer; the exporter's values come 50 ms late; the importer reads 50 ms more
SANITIZER_ARGS = [1 << 20, 5, 5]  # smaller and shorter: the sanitizer slows every access down
SANITIZER = [*sanitizer.STREAM_ORDER_RACES, "--print-limit", "10", "--error-exitcode", "99"]
FREES = ("cudaFreeAsync", "cudaFree")


def _uses(text: str, names, event: str, arg: int) -> list[int]:
    """Offsets of calls of `names` whose argument number `arg` is `event` (as written)."""
    return sorted(p for name in names for p in checks.calls(text, name)
                  if len(checks.call_arguments(text, p)) > arg and checks.call_arguments(text, p)[arg] == event)


def waits(text: str, event: str) -> list[int]:
    """Where the code waits for `event`: cudaStreamWaitEvent(s, event, ...) or cudaEventSynchronize(event)."""
    return sorted(_uses(text, ["cudaStreamWaitEvent"], event, 1) + _uses(text, ["cudaEventSynchronize"], event, 0))


def records(text: str, event: str) -> list[int]:
    return _uses(text, ["cudaEventRecord", "cudaEventRecordWithFlags"], event, 0)


def launch(text: str, kernel: str) -> int | None:
    return next((p for name, p in checks.launches(text) if name == kernel), None)


def read_code(report: checks.Report, src: str) -> None:
    """What the code says about the four orderings: explanations for what the run shows."""
    imp, exp = checks.function_text(src, "importer"), checks.function_text(src, "exporter")
    if not imp or not exp:
        report.wrong(f"{FILE} must keep its two functions, importer and exporter: the lab's work goes into them")
        return
    written, read = launch(exp, "write_values"), launch(imp, "check_values")
    if written is None or read is None:
        report.wrong("keep the given kernels: write_values in the exporter, check_values in the importer")
        return
    ready = [p for p in records(exp, "ready") if p > written]
    report.expect(bool(ready), "exporter: `ready` is recorded after write_values",
                  "exporter: `ready` is not recorded after write_values, so it marks nothing the importer could wait "
                  "for (a wait on an event never recorded returns at once): record it on s after the writes "
                  "(TODO 1; Guide §15.11.3)")
    report.expect(any(p < read for p in waits(imp, "ready")),
                  "importer: waits for `ready` before check_values reads p",
                  "importer: nothing waits for `ready` before check_values reads p, so it can read before the "
                  "exporter's values are there: cudaStreamWaitEvent(s, ready, 0) before the read (TODO 2; §15.11.3)")
    frees = [p for p in _uses(imp, FREES, "p", 0) if p > read]
    if not frees:
        report.wrong("importer: p is not freed after check_values: the imported allocation must be freed in the "
                     "importer, before the exporter frees it (TODO 3; §15.11.3)")
    else:
        after = [p for p in records(imp, "freed") if p > frees[0]]
        report.expect(bool(after), "importer: frees p after reading it, then records `freed`",
                      "importer: `freed` is not recorded after the free of p, so the exporter's wait on it does not "
                      "wait for that free: record it on s after cudaFreeAsync(p, s) (TODO 3; §15.11.3)")
    exp_frees = _uses(exp, ["cudaFreeAsync"], "buf", 0)
    report.expect(bool(exp_frees) and any(p < exp_frees[0] for p in waits(exp, "freed")),
                  "exporter: waits for `freed` before cudaFreeAsync(buf, s)",
                  "exporter: nothing waits for `freed` before cudaFreeAsync(buf, s), so the exporter can free the "
                  "buffer while the importer still uses it: cudaStreamWaitEvent(s, freed, 0) first (TODO 4; §15.11.3)")


def judge_run(report: checks.Report, res) -> None:
    """The run's verdicts, from what the two processes printed."""
    platform = res.records.where(step="platform")
    if platform and not platform[0].get("ipc", True):
        report.unchecked(f"the run: this system cannot share a pool between processes ({platform[0]['why']}), so "
                         f"nothing was shared ({res.label})")
        return
    imp = res.records.where(process="importer")
    exp = res.records.where(process="exporter", step="shared")
    if not imp or not exp:
        report.wrong(f"the run: the {'importer' if not imp else 'exporter'} printed no result ({res.label})")
        return
    imp, exp = imp[0], exp[0]
    report.expect(exp["importer_status"] == 0, "the importer exited normally",
                  f"the importer exited with status {exp['importer_status']}")
    report.expect(imp["mismatches"] == 0, f"data: the importer read all {imp['checked']:,} values right",
                  f"data: the importer read {imp['mismatches']:,} of {imp['checked']:,} values wrong (the first at "
                  f"element {imp['first_bad']}): it read before the exporter's values were there (TODO 1 and 2)")
    early = (exp["written_ns"] - imp["read_start_ns"]) / 1e6
    report.expect(early <= 0, f"order: the importer started reading {-early:.3f} ms after the exporter's values were "
                              "written (GPU clock)",
                  f"order: the importer started reading {early:.3f} ms before the exporter's values were written "
                  "(GPU clock): it must wait on `ready`, recorded after the writes (TODO 1 and 2)")
    first = (imp["past_free_ns"] - exp["free_start_ns"]) / 1e6
    report.expect(first <= 0, f"order: the exporter's free began {-first:.3f} ms after the importer was past its free",
                  f"order: the exporter's free began {first:.3f} ms before the importer was past its own free: the "
                  "importer must free first, and the exporter wait on `freed`, recorded after that free (TODO 3 and 4)")
    if imp.get("used_after", -1) < 0:  # this driver refuses attribute queries on an imported pool: the code decides
        return
    report.expect(imp["used_after"] == 0, "the importer's pool holds nothing at the end: it freed what it imported",
                  f"the importer's pool still counts {imp['used_after']:,} bytes in use at the end: the importer never "
                  "freed p (TODO 3)")


def lab5(lesson) -> None:
    """Reads ipc_share.cu, builds it, runs it (two processes), runs it under compute-sanitizer, and says what is
    right and what is still wrong."""
    report = checks.Report("Lab 5: one buffer, two processes")
    read_code(report, report.source(lesson, FILE))
    if report.build(lesson, FILE):
        res = report.run(lesson, FILE, ARGS, timeout=120, what="the data and the order of the two processes")
        if res is not None:
            judge_run(report, res)
        report.sanitize(lesson, FILE, SANITIZER_ARGS, SANITIZER, timeout=300, clean="no error in either process",
                        errors=", such as an access to the buffer after its free")
    report.finish()
