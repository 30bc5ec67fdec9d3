"""Lab 5 (one buffer, two processes): ipc_share.cu's results (what the importer read, the order of the two
processes' work on the GPU's clock, the importer's pool at the end), compute-sanitizer's report, then how the
two functions record and wait for the IPC events `ready` and `freed`.

The results decide: the exporter writes its values only after a hand-shake (the importer has imported everything),
SPIN_MS late, into a zeroed buffer, so an importer whose read is not ordered after the writes (TODO 1 or 2: no
`ready`, or one recorded before the writes or on another stream, or waited for on another stream) reads zeros, and
the GPU clock shows it read first. The importer keeps the buffer READ_SPIN_MS and reads it again; at once after its
own free the exporter gives the memory to a next allocation that overwrites it with -1, so an exporter's free not
ordered after the importer's (TODO 3 or 4) shows in that last read, and on the GPU clock. The margins: the recorded
solution's importer read 0.2 ms after the writes and the exporter freed 0.15 ms after the importer (the IPC event's
latency), against 150 and 50 ms. The reading of the code (streams.Order: which stream each call is on, what waits
for what) says which TODO, and judges what no run can show: an importer's own free not ordered after its read, and
three wrong streams that an H100's driver (580) ordered anyway in every run (`ready` recorded on another stream or
the default stream, the importer's wait on another stream: the importer still read 0.3 ms after the writes; see
tests/test_lab5_ipc_pool.py, DRIVER_KEEPS_ORDER).

The fields ipc_share.cu prints are declared in the comment block at the top of its source, in
solutions/lab5_ipc_pool.ipynb.
"""
from __future__ import annotations

from .. import checks, sanitizer
from .common import size
from .streams import HOST_WAITS, Order
from .streams import cannot_tell as say_cannot_tell

TITLE = "Lab 5: one buffer, two processes"
FILE = "ipc_share.cu"
# 16 MiB; the exporter's values come 150 ms after the importer says it is up (the hand-shake), so an importer that
# does not wait on `ready` reads zeros, and the data and the GPU clock show it; the importer reads 50 ms more
ARGS = [16 << 20, 150, 50]
SANITIZER_ARGS = [1 << 20, 5, 5]  # smaller and shorter: the sanitizer slows every access down
SANITIZER = [*sanitizer.STREAM_ORDER_RACES, "--print-limit", "10", "--error-exitcode", "99"]
SHARE = "Guide §15.11.3 Creating and Sharing Allocations from an Exported Pool"


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
        imp, exp = Order(imp), Order(exp)
        written, reads = exp.launch("write_values"), imp.find("check_values")
        if written is None or not reads:
            report.wrong("keep the given kernels: write_values in the exporter, check_values in the importer")
        else:
            refused = res is not None and (res.records.where(process="importer") or [{}])[0].get("used_after") == -1
            ready_recorded_after_the_writes(report, exp, written)
            read_after_ready(report, imp, reads[0])
            freed_in_the_importer_first(report, imp, reads[-1], refused)
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
    last_read(report, imp, exp)
    order(report, imp, exp, res.label)
    importers_pool(report, imp)


def last_read(report, imp, exp):
    """The importer's last read, READ_SPIN_MS after its first: the exporter's next allocation overwrites the memory
    with -1 at once after the exporter's free, so a free that did not wait for the importer shows here."""
    if imp["mismatches"]:
        return  # it read before the values: the first read has said what is wrong
    reuse = ("" if exp.get("reused", True) else " (here the exporter's next allocation did not get buf's address, "
             "so this read cannot show an early free: the GPU clock below decides)")
    over = imp["overwritten"]
    report.expect(imp["last_mismatches"] == 0,
                  f"data: the importer's last read, {exp['read_spin_ms']:g} ms later, found all values still "
                  f"right{reuse}",
                  f"data: the importer's last read found {imp['last_mismatches']:,} values wrong (the first at element "
                  f"{imp['last_first_bad']}; {over:,} hold the -1 that the exporter's next allocation writes at once "
                  "after its free): the exporter freed buf while the importer still used it. The importer must free "
                  "p after its last read and record `freed` after that free, the exporter wait for `freed` before "
                  f"its free (TODO 3 and 4; {SHARE})")


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
    """The imported pool's memory in use at the end, where the driver answers the query. An imported pool may
    refuse cudaMemPoolGetAttribute (an H100's driver: cudaErrorInvalidValue): then the run shows nothing of the
    importer's free, and the reading of TODO 3 decides and says so."""
    used = imp.get("used_after", -1)
    if used < 0:
        return
    report.expect(used == 0, "the importer's pool holds nothing at the end: it freed what it imported",
                  f"the importer's pool still counts {size(used)} in use at the end: the importer never freed p "
                  f"(TODO 3; {SHARE})")


# -- what the code explains ---------------------------------------------------------------------------------------
# Each finding is ok only where the reading shows the order, WRONG where it shows that the order is missing, and a
# note ("cannot tell from the source: the run decides") where a stream, event or pointer is not a name it can follow.
def _written(op) -> str:
    return f"`{op.written}`" if op.written else "the default stream"


def _unknown(order, ops, start, end) -> list[str]:
    """The arguments, as written, that the reading cannot follow, of `ops` and of the calls between start and end."""
    found = []
    for o in [*ops, *order.unknown_between(start, end)]:
        if o.stream == "?":
            found.append(o.written)
        if o.event == "?":
            found.append(o.args[1] if o.what == "cudaStreamWaitEvent" else o.args[0])
        if o.ptr == "?":
            found.append(o.args[0])
    return list(dict.fromkeys(f"`{a}`" for a in found if a))


def cannot_tell(report, what: str, unknown) -> bool:
    """Say that the reading cannot tell (the run's results decide); True if it said so."""
    if unknown:
        say_cannot_tell(report, what, f"The reading cannot follow {', '.join(unknown)}")
    return bool(unknown)


def waits_before(order, event: str, op, start: int = -1):
    """The waits for `event` after offset `start` (a stream's, or the host's); those that `op` is ordered after; and
    those, with the waits for an event the reading cannot follow, that it cannot tell about."""
    waits = order.find("cudaStreamWaitEvent", event=event, start=start) + order.find(
        "cudaEventSynchronize", event=event, start=start)
    done = [w for w in waits if order.after(op, w)]
    unsure = [w for w in waits if order.after(op, w) is None] + [
        w for w in order.find("cudaStreamWaitEvent") + order.find("cudaEventSynchronize") if w.event == "?"]
    return waits, done, unsure


def ready_recorded_after_the_writes(report, exp, written):
    records = exp.find("cudaEventRecord", event="ready")
    if any(exp.after(r, written) for r in records):
        report.ok(f"exporter: `ready` is recorded on {_written(written)} after write_values")
        return
    unsure = [r for r in records if exp.after(r, written) is None] + exp.find("cudaEventRecord", event="?")
    if cannot_tell(report, "exporter: `ready` after write_values", _unknown(exp, unsure, written.pos, written.pos)):
        return
    late = [r for r in records if r.pos > written.pos]
    if late:
        why = (f"`ready` is recorded on {_written(late[0])}, but write_values writes on {_written(written)}: a record "
               "marks the work of its own stream only, so `ready` completes before the values are written")
    elif records:
        why = "`ready` is recorded before write_values, so it marks a point before the values are there"
    else:
        why = "`ready` is not recorded after write_values, so it marks nothing the importer could wait for (a wait " \
              "on an event never recorded returns at once)"
    report.wrong(f"exporter: {why}: record it on {_written(written)} after the writes (TODO 1; {SHARE})")


def read_after_ready(report, imp, read):
    waits = imp.find("cudaStreamWaitEvent", event="ready") + imp.find("cudaEventSynchronize", event="ready")
    gate = imp.code.find("recv<Recorded>")  # the exporter's message that `ready` is recorded
    if gate >= 0 and waits and all(w.pos < gate for w in waits):
        report.wrong("importer: it waits for `ready` before the exporter says that `ready` is recorded "
                     "(proc::recv<Recorded>): a wait placed before the event's record waits for nothing; wait after "
                     f"that message, before check_values (TODO 2; {SHARE})")
        return
    waits, done, unsure = waits_before(imp, "ready", read, gate)
    if done:
        how = ("the host waits for `ready`" if done[0].what in HOST_WAITS else
               f"{_written(done[0])} waits for `ready`")
        report.ok(f"importer: {how} before check_values reads p on {_written(read)}")
        return
    if cannot_tell(report, "importer: the wait for `ready` before check_values",
                   _unknown(imp, unsure + [read], read.pos, read.pos)):
        return
    early = [w for w in waits if w.pos < read.pos]
    if early:
        why = (f"it waits for `ready` on {_written(early[0])}, but check_values reads on {_written(read)}: a stream's "
               "wait holds back that stream only, so the read can come before the exporter's values")
    elif waits:
        why = "it waits for `ready` only after check_values was enqueued, so the read does not wait"
    else:
        why = "nothing waits for `ready` before check_values reads p, so it can read before the exporter's values " \
              "are there"
    report.wrong(f"importer: {why}: cudaStreamWaitEvent({read.written}, ready, 0) before the read (TODO 2; {SHARE})")


def freed_in_the_importer_first(report, imp, read, refused: bool):
    """The importer frees p ordered after its last read, then records `freed` ordered after that free."""
    frees = [f for f in imp.find("cudaFreeAsync") + imp.find("cudaFree") if f.ptr in ("p", "?")]
    verdict = {id(f): _free_after(imp, f, read) for f in frees}
    good = [f for f in frees if f.ptr == "p" and verdict[id(f)]]
    if not good:
        unsure = [f for f in frees if verdict[id(f)] is None or f.ptr == "?"]
        if cannot_tell(report, "importer: the free of p after its last read",
                       _unknown(imp, unsure, read.pos, max([f.pos for f in frees] + [read.pos])) or
                       [f"`{f.what}({f.args[0] if f.args else ''})`" for f in unsure]):
            return
        mine = [f for f in frees if f.ptr == "p"]
        if not mine:
            why = "p is not freed after check_values: the imported allocation must be freed in the importer"
        elif all(f.pos < read.pos for f in mine):
            why = "p is freed before its last read (check_values): no access may follow the free"
        else:
            f = next(f for f in mine if f.pos > read.pos)
            why = (f"p is freed on {_written(f)}, which does not wait for check_values on {_written(read)}: the free "
                   "is not ordered after the read, which may then touch memory already freed")
        report.wrong(f"importer: {why}; free it on {_written(read)} after the read, before the exporter frees it "
                     f"(TODO 3; {SHARE})")
        return
    free = good[0]
    records = imp.find("cudaEventRecord", event="freed")
    after_free = [r for r in records if (r.pos > free.pos if free.what == "cudaFree" else imp.after(r, free))]
    run = " (the run cannot show the importer's free: this driver refuses the imported pool's query)" if refused else ""
    if after_free:
        report.ok(f"importer: frees p after its last read ({free.what} on {_written(free) if free.stream else 'the host'}"
                  f"), then records `freed` after that free{run}")
        return
    unsure = [r for r in records if imp.after(r, free) is None] + imp.find("cudaEventRecord", event="?")
    if cannot_tell(report, "importer: `freed` after the free of p", _unknown(imp, unsure, free.pos, free.pos)):
        return
    late = [r for r in records if r.pos > free.pos]
    why = (f"`freed` is recorded on {_written(late[0])}, but p is freed on {_written(free)}: the record does not "
           "follow the free" if late else "`freed` is not recorded after the free of p")
    report.wrong(f"importer: {why}, so the exporter's wait on it does not wait for that free: record it on "
                 f"{_written(free)} after cudaFreeAsync(p, {free.written}) (TODO 3; {SHARE})")


def _free_after(imp, free, read):
    """Is this free ordered after the read? cudaFree (a host call) is, when the host waited for the read first;
    otherwise the API says only that cudaFree may synchronize: the reading cannot tell."""
    if free.pos < read.pos:
        return False
    verdict = imp.after(free, read)
    return None if free.what == "cudaFree" and not verdict else verdict


def exporter_frees_after_freed(report, exp):
    frees = exp.find("cudaFreeAsync", ptr="buf")
    if not frees:
        report.wrong("exporter: cudaFreeAsync(buf, s) is gone: keep the exporter's free of buf as it was given")
        return
    free = frees[0]
    waits, done, unsure = waits_before(exp, "freed", free)
    if done:
        report.ok(f"exporter: waits for `freed` before cudaFreeAsync(buf, {free.written})")
        return
    if cannot_tell(report, "exporter: the wait for `freed` before its free",
                   _unknown(exp, unsure + [free], free.pos, free.pos)):
        return
    early = [w for w in waits if w.pos < free.pos]
    why = (f"it waits for `freed` on {_written(early[0])}, but frees buf on {_written(free)}: the free does not wait"
           if early else "nothing waits for `freed` before cudaFreeAsync(buf, s)")
    report.wrong(f"exporter: {why}, so the exporter can free the buffer while the importer still uses it: "
                 f"cudaStreamWaitEvent({free.written}, freed, 0) first (TODO 4; {SHARE})")
