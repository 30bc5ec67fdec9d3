"""Lab 6 (upload ahead): first_launch.cu's results, the graph allocator's memory before the first timed launch and
the first launch's time against the reference's, then the record of its calls: is the graph timed as "yours"
uploaded into the stream it is launched into, before its first launch?

The record decides (streamalloc.calls): a cudaGraphUpload of the very exec the timed loop launches (by handle, made
after that exec's instantiation; an instantiation with cudaGraphInstantiateFlagUpload and an upload stream counts),
enqueued before its first cudaGraphLaunch, the last such upload into the stream of that launch. It is made with two
launch counts that are not the default, so an upload guarded by the count the check happens to use is found out. An
upload into another stream, or into the legacy stream 0, is WRONG even where the launch waits for it: the course
grades what the guide advises for every driver, "Using different streams for graph upload and graph launch behaves
similarly to switching streams, likely resulting in remap operations" (§16.5.1), not what this driver happens to do;
the timing still reports what it cost here. The reading of the code explains; where no run can be had (replay of code
other than the recorded solution) it only points at the line.

The fields first_launch.cu prints are declared in the comment block at the top of its source, in
solutions/lab6_upload_ahead.ipynb.
"""
from __future__ import annotations

from .. import checks, cppsource, measure
from ..measure import MiB
from .common import never_named, shared_gpu, show, stream_words
from .streams import Order, cannot_tell

TITLE = "Lab 6: upload ahead"
FILE = "first_launch.cu"
ELEMENTS, LAUNCHES = 1 << 24, 20  # 64 MiB of floats per allocation; timed launches of each graph
TRACE_ARGS = [[1 << 16, 3], [1 << 14, 6]]  # the recorded runs: two launch counts, neither the default
TIMED = "timed"  # first_launch.cu's mark (course::section) around the timed launches of your graph
# The first launch without upload must be slower than the later ones by at least this much for the timing to
# say anything: NOTICE_US, or NOTICE_OF_LATER of a later launch, whichever is larger.
NOTICE_US, NOTICE_OF_LATER = 30.0, 0.25
# Yours passes the timing if its first launch keeps at most this share of the reference's extra time.
KEEP_AT_MOST = 0.5
UPLOAD = ("cudaGraphUpload", "cudaGraphInstantiateWithParams")  # the second with cudaGraphInstantiateFlagUpload
FIRST_LAUNCH = "Guide §16.5.1 First Launch / cudaGraphUpload"
SWITCHING = ("'Using different streams for graph upload and graph launch behaves similarly to switching streams, "
             "likely resulting in remap operations'")  # the guide's words, cited with FIRST_LAUNCH
NAMES = {("cudaGraphUpload", "cudaGraphInstantiateFlagUpload"):  # one of them, or the graph is never uploaded
         f"the graph is not uploaded, so the first launch maps the graph's memory ({FIRST_LAUNCH})"}


def lab6(lesson) -> None:
    """Builds first_launch.cu, runs it, records its calls, and reads how main uploads the graph."""
    report = checks.Report(TITLE, lesson)
    res = report.run(FILE, [ELEMENTS, LAUNCHES], timeout=120, what="the results, the graph memory and the timing")
    if res is not None:
        recs = res.records
        results(report, recs)
        mapped_ahead(report, recs)
        timing(report, recs, res.label)
    traced = report.trace(FILE, TRACE_ARGS, what="the upload of your graph before its first launch, from the record "
                                                 "of its calls")
    if traced:
        recorded_upload(report, traced)
    unnamed = never_named(report, report.source(FILE), NAMES)  # a call the file never names is not made
    with report.reading(decided=bool(traced) or res is not None):  # the reading explains: it points at the line
        code = report.read(FILE, "main")  # with the file's own helpers inlined: capture, timed_launches
        if code:
            say = report.note if res is not None else report.wrong  # with a run, the run has judged
            if not unnamed:
                uploaded(report, code, say)
            no_launch_outside_the_loop(code, say)
    report.finish()


# -- what the record of the program's calls shows (streamalloc.calls) ---------------------------------------------
def recorded_upload(report, traced):
    """On the record of both runs: the exec launched in the timed loop, launched as many times as asked, uploaded
    after its instantiation and before its first launch, its last upload before that launch into the launch's
    stream."""
    settings = []
    for args, rec in traced:
        launches = args[1]
        settings.append(f"{launches} launches of {args[0]:,} elements")
        timed = [c for c in rec.named("cudaGraphLaunch", TIMED) if c["ret"] == 0]
        if len(timed) != launches or len({c["exec"] for c in timed}) != 1:
            report.wrong(f"launches (record): with {launches} launches asked, the timed loop launched "
                         f"{len(timed)} time(s), {len({c['exec'] for c in timed})} graph(s): the given loop launches "
                         "exec once per iteration; leave it as it is")
            return
        first = timed[0]
        exec_ = first["exec"]
        at = next(k for k, c in enumerate(rec.lines) if c is first)
        made = [k for k, c in enumerate(rec.lines[:at]) if c["call"] == "cudaGraphInstantiate" and c["ret"] == 0
                and c["exec"] == exec_]
        since = made[-1] if made else 0  # an exec handle can be reused after a destroy: the uploads of this one
        index = {id(c): k for k, c in enumerate(rec.lines)}
        later = [c for c in rec.lines[since:] if c["call"] == "cudaGraphUpload" and c["ret"] == 0]
        mine = [c for c in later if c["exec"] == exec_]
        ahead = [c for c in mine if index[id(c)] < at]
        with_it = f"with {launches} launches"
        if not later:
            report.wrong(f"upload (record): {with_it}, no cudaGraphUpload was made: the first launch maps the "
                         f"graph's memory. Upload exec before the timed loop, whatever the launch count "
                         f"({FIRST_LAUNCH})")
            return
        if not mine:
            others = sorted({c["exec"] for c in later})
            report.wrong(f"upload (record): {with_it}, the program uploaded {checks.english(others)}, not {exec_}, "
                         f"the graph the timed loop launches: upload exec ({FIRST_LAUNCH})")
            return
        if not ahead:
            report.wrong(f"upload (record): {with_it}, exec was uploaded only after its first timed launch: that "
                         f"launch had mapped the memory already; upload before the loop ({FIRST_LAUNCH})")
            return
        upload, launch = rec.op_of(ahead[-1]), rec.op_of(first)  # the last upload says which stream exec is for
        if upload.stream != launch.stream:
            waits = ", though that launch waits for it" if rec.before(upload, launch) else ""
            report.wrong(f"upload (record): {with_it}, exec was uploaded into {stream_words(upload.stream)}, and the "
                         f"timed loop launches it into s{waits}: {SWITCHING} ({FIRST_LAUNCH}). Upload exec into the "
                         "stream you launch it into")
            return
    seen = f"recorded with {' and with '.join(settings)}"
    report.ok(f"upload (record): the graph timed as yours is uploaded after its instantiation and before its first "
              f"launch, into the stream that launch goes into ({seen})")


# -- what the run shows ------------------------------------------------------------------------------------------
def results(report, recs):
    for graph, who in (("yours", "your graph"), ("reference", "the reference (given)")):
        r = recs.one(what="result", graph=graph)
        one_more = r["times"] and abs(r["got"] - r["expected"] / r["times"] * (r["times"] + 1)) < 1e-3
        extra = (" (one launch too many: a launch outside the timed loop ran the graph's work; cudaGraphUpload maps "
                 "its memory without running it)" if graph == "yours" and one_more else "")
        report.expect(r["errors"] == 0, f"result of {who}: all {r['n']:,} elements right after {r['times']} launches",
                      f"result of {who}: element {r['first_bad']} is {r['got']:g}, expected {r['expected']:g} "
                      f"({r['errors']:,} of {r['n']:,} wrong){extra}")


def mapped_ahead(report, recs):
    before = recs.one(what="graph_mem", phase="yours before the first launch")["reserved"]
    bytes_ = ELEMENTS * 4
    report.expect(before >= bytes_,
                  f"uploaded ahead: before the first timed launch the graph allocator already reserved "
                  f"{before / MiB:.1f} MiB for the graph's {bytes_ / MiB:.0f} MiB allocation",
                  f"nothing was mapped before the first timed launch (the graph allocator reserved {before / MiB:.1f} "
                  f"MiB for a {bytes_ / MiB:.0f} MiB allocation): call cudaGraphUpload(exec, s) before the loop "
                  f"({FIRST_LAUNCH})")


def timing(report, recs, label):
    lat = {g: recs.one(what="launches", graph=g)["latency_us"] for g in ("reference", "yours")}
    later = {g: measure.summary(v[1:])["median"] for g, v in lat.items()}
    first = {g: v[0] for g, v in lat.items()}
    show([{"graph": g, "first launch µs": first[g], "later launches µs (median)": later[g],
           "first minus later µs": first[g] - later[g]} for g in lat], label,
         title="From cudaGraphLaunch to the end of the wait, per launch")
    extra_ref, extra = first["reference"] - later["reference"], first["yours"] - later["yours"]
    notice = max(NOTICE_US, NOTICE_OF_LATER * later["reference"])
    figures = (f"your first launch took {first['yours']:.0f} µs, your later ones {later['yours']:.0f} µs; without "
               f"upload the first took {first['reference']:.0f} µs, the later ones {later['reference']:.0f} µs "
               f"({label})")
    if extra_ref < notice:  # nothing to win on this GPU: the graph memory above decides
        report.note(f"the timing cannot judge here: on this GPU the first launch without upload was not measurably "
                    f"slower ({figures}; at least {notice:.0f} µs more is needed to judge); the graph memory mapped "
                    "before the first launch decides")
        return
    # one first launch each: the noise is read from the later launches' spread (interquartile ranges of both graphs)
    spread = sum(measure.summary(v[1:])["p75"] - measure.summary(v[1:])["p25"] for v in lat.values())
    over = extra - KEEP_AT_MOST * extra_ref
    shared = shared_gpu(report)
    if over <= 0:
        report.ok(f"the timing: {figures}")
    elif over > spread and not shared:
        report.wrong(f"the timing: the first launch is still slow: {figures}. Upload into the stream you launch into: "
                     f"a graph uploaded into another stream is likely remapped when it is launched into s "
                     f"({FIRST_LAUNCH})")
    else:
        why = (f"within the {spread:.0f} µs spread of the later launches" if over <= spread else
               "but other processes compute on this GPU, and one launch each cannot tell their work from yours")
        report.unverified("the timing", f"your first launch took {over:.0f} µs more than half of what upload saves, "
                                        f"{why}: {figures}. {shared}The graph memory mapped before the first launch "
                                        "decides")


# -- what the code explains ---------------------------------------------------------------------------------------
def uploaded(report, code, say):
    """An upload (or an instantiation with cudaGraphInstantiateFlagUpload) of exec before the timed launches, into
    the stream they launch into, followed through the names given to it."""
    found = [name for name in UPLOAD if cppsource.calls(code, name)]
    if not found:
        say("the graph is not uploaded: cudaGraphUpload(exec, s) is not called before the timed loop, so the first "
            f"launch maps the graph's memory ({FIRST_LAUNCH})")
        return
    order = Order(code)
    launches = [op for op in order.find("cudaGraphLaunch") if op.ptr == "exec"]
    first = launches[0].pos if launches else None
    uploads = order.find("cudaGraphUpload")
    if not uploads:  # cudaGraphInstantiateWithParams: the flag and the stream are in its parameters
        report.ok(f"calls {checks.english(found)}")
        return
    late = [u for u in uploads if first is not None and u.pos > first]
    if late and len(late) == len(uploads):
        say("cudaGraphUpload is called only after the timed launches have begun: the first launch has mapped the "
            f"memory already; upload before the loop ({FIRST_LAUNCH})")
        return
    up = next(u for u in uploads if u not in late)
    where = launches[0].stream if launches else "s"
    if up.ptr not in ("exec", "?"):
        say(f"cudaGraphUpload uploads `{up.args[0]}`, not exec, the graph the timed loop launches ({FIRST_LAUNCH})")
    elif "?" in (up.ptr, up.stream, where):
        report.ok(f"calls {checks.english(found)} before the timed launches")
        cannot_tell(report, f"which graph and stream cudaGraphUpload({', '.join(up.args)}) uploads",
                    "The graph memory mapped before the first launch, and the timing, judge it")
    elif up.stream != where:
        report.wrong(f"cudaGraphUpload uploads into {_stream(up)}, the loop launches into "
                     f"{_stream(launches[0]) if launches else '`s`'}: {SWITCHING} ({FIRST_LAUNCH}); upload into the "
                     "stream you launch into")
    else:
        report.ok(f"calls {checks.english(found)} into {_stream(up)}, the stream the timed loop launches into, "
                  "before the loop")


def _stream(op) -> str:
    return "the default stream" if op.written in ("0", "", "nullptr", "NULL") else f"`{op.written}`"


def no_launch_outside_the_loop(code, say):
    """timed_launches (inlined) launches in its loop; a launch outside any loop runs the graph's work once more."""
    launches = cppsource.calls(code, "cudaGraphLaunch")
    outside = [p for p in launches if p not in cppsource.in_loops(code, launches)]
    if outside:
        say("cudaGraphLaunch is called in main, outside the timed loop: a launch runs the graph's work, so out gets "
            "one launch more than the loop's; cudaGraphUpload maps the memory without running anything")
