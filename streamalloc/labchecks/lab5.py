"""Lab 5 (one buffer, two processes): ipc_share.cu's results (what the importer read, the order of the two
processes' work on the GPU's clock, the importer's pool at the end), compute-sanitizer's report, and the record of
both processes' CUDA calls (streamalloc.calls), which decides the order; the reading of the code only explains.

The results: the exporter writes its values only after a hand-shake (the importer has imported everything), SPIN_MS
late, into a zeroed buffer, so an importer whose read is not ordered after the writes reads zeros, and the GPU clock
shows it read first; at once after its own free the exporter gives the memory to a next allocation that overwrites it
with -1, so an exporter's free not ordered after the importer's shows in the importer's last read.

The record (both processes write to it: the importer is the same program, started by the exporter with the recorder
inherited) decides what no run has to show, on two argument sets (TRACE_ARGS): is every check_values of the importer
ordered after the exporter's write_values, through `ready` (TODO 1, 2)? Is the importer's free of p ordered after its
last read (TODO 3)? Is the exporter's free of buf ordered after the importer's free, through `freed` (TODO 3, 4)?
The IPC events link the two processes by their handle, the imported pointer to the exported one by its export
data. A wrong stream that an H100's driver (580) happened to keep in order in every run (`ready` recorded on another
stream or on the default stream, the importer's wait on another stream) is not ordered in the record: rejected.

The fields ipc_share.cu prints are declared in the comment block at the top of its source, in
solutions/lab5_ipc_pool.ipynb.
"""
from __future__ import annotations

from .. import checks, measure, sanitizer
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
# the recorded runs (bytes, spin ms, read spin ms): small and short, two sizes so that no default hides a mistake
TRACE_ARGS = [[1 << 20, 5, 2], [3 << 20, 2, 5]]
IMPORTER, EXPORTER = "importer", "exporter"  # ipc_share.cu's marks (course::section): which process is which


def lab5(lesson) -> None:
    """Builds ipc_share.cu, runs it (two processes), runs it under compute-sanitizer, records both processes' CUDA
    calls on two argument sets, and reads the importer and the exporter."""
    report = checks.Report(TITLE, lesson)
    res = report.run(FILE, ARGS, timeout=120, what="the data and the order of the two processes")
    shares = True
    if res is not None:
        shares = results(report, res)
    # the importer asks its imported pool for its memory in use, which this driver refuses (notebook 05): that
    # query, and the cudaGetLastError that clears it, are the program's, not the learner's
    report.sanitize(FILE, SANITIZER_ARGS, SANITIZER, timeout=300, clean="no error in either process",
                    errors=", such as an access to the buffer after its free",
                    expected_api_errors={"cudaMemPoolGetAttribute": "cudaErrorInvalidValue",
                                         "cudaGetLastError": "cudaErrorInvalidValue"})
    traced = shares and report.trace(FILE, TRACE_ARGS, what="the order of the two processes' work, from the record "
                                                            "of their calls")
    if traced:
        recorded_order(report, traced)
    with report.reading(decided=bool(traced)):  # the reading explains: it points at the line
        imp, exp = report.read(FILE, "importer"), report.read(FILE, "exporter")  # the file's own helpers inlined
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


# -- what the record of both processes' calls shows (streamalloc.calls) -------------------------------------------
def recorded_order(report, traced):
    """On the record of each run: the importer's reads after the exporter's writes (through `ready`), its free after
    its last read, and the exporter's free after the importer's (through `freed`). However the code is written."""
    found, settings = {}, []  # finding -> (why, in which runs)
    for args, rec in traced:
        settings.append(f"a {measure.nbytes(args[0])} buffer")
        seen = shared_buffer(rec)
        if isinstance(seen, str):
            report.wrong(f"the record of the run with {settings[-1]} {seen}: keep the given code that shares buf "
                         "between the two processes")
            return
        for key, why in one_run(rec, *seen).items():
            found.setdefault(key, (why, []))[1].append(settings[-1])
    runs = f"recorded over two runs of both processes, with {checks.english(settings)}"
    findings = [("read", f"order (record): every check_values of the importer is ordered after the exporter's "
                        f"write_values, through `ready` ({runs})"),
               ("free", f"order (record): the importer frees p after its last check_values ({runs})"),
               ("freed", f"order (record): the exporter frees buf after the importer's free of p, through `freed` "
                         f"({runs})")]
    for key, good in findings:
        if key not in found:
            report.ok(good)
        else:
            report.wrong(_said(*found[key]))
    for key in [k for k in found if k not in dict(findings)]:
        report.wrong(_said(*found[key]))


def _said(why: str, where: list) -> str:
    """A finding of the record, with the runs that showed it and the guide's section beside its TODO."""
    why = f"{why[:-1]}; {SHARE})" if why.endswith(")") and "(TODO" in why else f"{why} ({SHARE})"
    return f"order (record, with {checks.english(where)}): {why}"


def shared_buffer(rec):
    """(exporter's pid, importer's pid, buf, p, write_values, check_values ops), or what the record lacks."""
    pids = {role: next((c["pid"] for c in rec.lines if c["in"] == role), None) for role in (EXPORTER, IMPORTER)}
    exp, imp = pids[EXPORTER], pids[IMPORTER]
    if exp is None or imp is None:
        return f"has no {EXPORTER if exp is None else IMPORTER} process"
    buf = next((b for b in rec.all_buffers if b.alloc["pid"] == exp and b.stream_ordered and b.key is not None), None)
    p = next((b for b in rec.all_buffers if b.alloc["pid"] == imp and buf is not None and b.key == buf.key
              and b.alloc["call"] == "cudaMemPoolImportPointer"), None)
    if buf is None or p is None:
        return "has no buffer exported by the exporter and imported by the importer"
    writes = [u for u in buf.uses if u.what == "write_values"]
    reads = [u for u in p.uses + p.late_uses if u.what == "check_values"]  # late: enqueued after p's free
    if not writes or not reads:
        return f"has {len(writes)} write_values on buf and {len(reads)} check_values on p"
    return exp, imp, buf, p, writes, reads


def _ipc(rec, pid, handle, calls) -> list:
    """The successful calls of `pid` among `calls` on the IPC event whose handle is `handle`."""
    events = {c["event"] for name in ("cudaIpcGetEventHandle", "cudaIpcOpenEventHandle") for c in rec.named(name, pid=pid)
              if c["ret"] == 0 and c["handle"] == handle}
    return [c for name in calls for c in rec.named(name, pid=pid) if c["ret"] == 0 and c.get("event") in events]


def _handle(rec, made_in, opened_in):
    """The handle of the IPC event that process `made_in` exported and `opened_in` opened (None if none)."""
    opened = {c["handle"] for c in rec.named("cudaIpcOpenEventHandle", pid=opened_in) if c["ret"] == 0}
    return next((c["handle"] for c in rec.named("cudaIpcGetEventHandle", pid=made_in)
                 if c["ret"] == 0 and c["handle"] in opened), None)


WAITS = ("cudaStreamWaitEvent", "cudaEventSynchronize", "cudaEventQuery")  # a query counts once it answered success


def _after_free(rec, b) -> list:
    """What b's process did once b was freed: its cudaFreeAsync, or the work its thread enqueued after its cudaFree
    returned (a host free has no place on a stream: what follows it on that thread does)."""
    if b.free_op is not None:
        return [b.free_op]
    f = b.free
    return [op for op in rec.ops if not op.captured and op.call["pid"] == f["pid"] and op.call["tid"] == f["tid"]
            and op.call["seq"] > f["seq"]]


def one_run(rec, exp, imp, buf, p, writes, reads) -> dict:
    """What is wrong in one run's record: {finding: why}, empty when all is right."""
    wrong = {}
    ready, freed = _handle(rec, exp, imp), _handle(rec, imp, exp)
    # TODO 1 and 2: every read after the writes
    late = [r for r in reads if not all(rec.before(w, r) for w in writes)]
    if late:
        records = [rec.op_of(c) for c in _ipc(rec, exp, ready, ["cudaEventRecord"])]
        marks = [e for e in records if e is not None and all(rec.before(w, e) for w in writes)]
        waits = _ipc(rec, imp, ready, WAITS)
        if not marks:
            why = ("the exporter records `ready` only where write_values is not done: before it, or on another stream "
                   "(a record marks what its own stream has enqueued so far)" if records else
                   "the exporter never records `ready` (a host synchronization before the given message would "
                   "order the processes too, §15.11.3, but this lab asks for the IPC events, the order its record "
                   "can see: the messages are not in it)")
            wrong["read"] = (f"{len(late)} of {len(reads)} check_values of the importer are not ordered after the "
                             f"exporter's write_values: {why}. Record `ready` on the stream of write_values, after it "
                             f"(TODO 1)" + ("" if waits else ", and make the importer's stream wait for it (TODO 2)"))
        else:
            mark = marks[0].call
            why = ("nothing in the importer waits for `ready`" if not waits else
                   "the importer's wait for `ready` came before the exporter recorded it (a wait waits for the "
                   "record made before it, and there was none)" if all(w["t"] < mark["t"] for w in waits) else
                   "the importer waits for `ready`, but not on the stream that reads p, or only after the read was "
                   "enqueued (a stream's wait holds back that stream only)")
            wrong["read"] = (f"{len(late)} of {len(reads)} check_values of the importer are not ordered after "
                             f"`ready`, which the exporter records after write_values: {why}. Make the stream that "
                             f"reads p wait for `ready` (cudaStreamWaitEvent) before check_values (TODO 2)")
    # TODO 3: the importer frees p after its last read
    if p.free is None:
        wrong["free"] = "the importer never frees p: free it after its last check_values, before the exporter frees " \
                        "buf (TODO 3)"
    elif not all(rec.done_before_free(r, p) for r in reads) or p.late_uses:
        how = f"{p.free['call']}(p{', stream' if p.free_op else ''})"
        wrong["free"] = (f"the importer's {how} is not ordered after its last check_values: the memory can go while "
                         "the importer still reads it. Free p on the stream that reads it, after the read (TODO 3)")
    # TODO 3 and 4: the exporter's free after the importer's
    if buf.free is None:
        wrong["buf"] = "the exporter never frees buf: keep the given cudaFreeAsync(buf, s)"
    elif p.free is None:  # said above (TODO 3); the exporter's free must still wait for the importer's reads
        if not all(rec.done_before_free(r, buf) for r in reads):
            wrong["freed"] = ("the exporter's free of buf is not ordered after the importer's last check_values: "
                              + ("nothing in the exporter waits for `freed`" if not _ipc(rec, exp, freed, WAITS) else
                                 "the exporter's wait for `freed` does not hold back its free") +
                              ". Make the exporter's stream wait for `freed` before cudaFreeAsync(buf, s) (TODO 4)")
    else:
        after = _after_free(rec, p)
        if not any(rec.done_before_free(o, buf) for o in after):
            records = [rec.op_of(c) for c in _ipc(rec, imp, freed, ["cudaEventRecord"])]
            marks = [e for e in records if e is not None and any(rec.before(o, e) for o in after)]
            if not marks:
                wrong["freed"] = ("the exporter's free of buf is not ordered after the importer's free of p: the "
                                  "importer records `freed` " + ("before its free, or on a stream that does not follow "
                                  "it" if records else "nowhere") + ". Record `freed` after cudaFreeAsync(p, ...), on "
                                  "its stream (TODO 3)")
            else:
                waits = _ipc(rec, exp, freed, WAITS)
                why = ("nothing in the exporter waits for `freed`" if not waits else
                       "the exporter waits for `freed`, but not on the stream that frees buf, or only after that free "
                       "was enqueued")
                wrong["freed"] = (f"the exporter's free of buf is not ordered after `freed`, which the importer "
                                  f"records after its free: {why}. Make the exporter's stream wait for `freed` before "
                                  f"cudaFreeAsync(buf, s) (TODO 4)")
    # whatever else the record shows: a use of either buffer outside its life (the importer's uses count against the
    # exporter's free too), said where nothing above said it
    for problem in rec.problems():
        b, use = problem.buffer, problem.use
        mine = "the importer's" if use.call["pid"] == imp else "the exporter's"
        if b is buf and use.call["pid"] == imp and ("freed" in wrong or "free" in wrong):
            continue  # said above
        if b is p and "free" in wrong:
            continue
        if b is buf and use.call["pid"] == imp and problem.kind != "after its free" and "read" in wrong:
            continue
        which = "buf" if b is buf else "p" if b is p else f"the buffer at {b.alloc.get('ptr')}"
        wrong.setdefault(f"use {which} {problem.kind}", (
            f"{mine} {use.what} uses {which} {problem.kind} ({b.free['call'] if b.free else b.alloc['call']} "
            f"in the {'importer' if b.alloc['pid'] == imp else 'exporter'}): every use must be ordered after the "
            f"allocation and before the free, in both processes (TODO {'4' if b is buf else '3'})"))
    return wrong


# -- what the run shows ------------------------------------------------------------------------------------------
def results(report, res):
    platform = res.records.where(step="platform")
    if platform and not platform[0].get("ipc", True):
        report.unverified("the sharing between two processes, and everything its run would show",
                          f"this system cannot share a pool between processes ({platform[0]['why']}), so nothing "
                          f"was shared ({res.label})")
        return False
    imp, exp = res.records.where(process="importer"), res.records.where(process="exporter", step="shared")
    if not imp or not exp:
        report.wrong(f"the run: the {'importer' if not imp else 'exporter'} printed no result ({res.label})")
        return True
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
    return True


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
    importer's free, and the record of the calls decides."""
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
