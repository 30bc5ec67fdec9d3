"""Lab 1 (from synchronous to stream-ordered): pipeline.cu's results, memory, speed and races, the record of what
your function did with the CUDA runtime, then its code.

The fields pipeline.cu prints are declared in the comment block at the top of its source, in
solutions/lab1_stream_ordered.ipynb.
"""
from __future__ import annotations

from .. import calls, checks, cppsource, measure, sanitizer
from ..calls import SYNCS
from .common import judge_speed, leaked, show, within_limit
from .streams import DEFAULT, Order

TITLE = "Lab 1: from synchronous to stream-ordered"
FILE, FUNCTION = "pipeline.cu", "pipeline_stream_ordered"
BYTES, ITERATIONS, REPEATS = 4 << 20, 200, 9  # 4 MiB buffers; 9 timed repeats of 200 iterations
SANITIZER_ARGS = [64 << 10, 4, 1]  # small: the sanitizer slows every access down
# The recorded runs (streamalloc.calls): two settings, so that nothing right only for the defaults passes. One
# repeat each: the harness calls your function for its warm-up (`iterations`), its probe (1) and each repeat.
TRACE_ARGS = [[64 << 10, 4, 1], [32 << 10, 7, 1]]
YOURS = "yours"  # pipeline.cu's mark (course::section) around each call of pipeline_stream_ordered
SANITIZER = [*sanitizer.STREAM_ORDER_RACES, "--print-limit", "10", "--error-exitcode", "99"]
# Speed, against the limit (pipeline_preallocated: one buffer allocated before the loop, no wait in it), all
# measured in the same program: yours may take the limit's time plus the larger of OF_LIMIT of it and OF_LOSS
# of what the original loses per iteration (its time minus the limit's), and must beat the original
# MIN_SPEEDUP times.
OF_LIMIT, OF_LOSS, MIN_SPEEDUP = 0.25, 0.04, 1.5
OTHER_STREAMS = {"0", "NULL", "nullptr", "cudaStreamLegacy", "cudaStreamPerThread",
                 DEFAULT}  # clearly not s
KERNELS = ("fill_transform", "reduce_sum")  # compute's kernels, which use buf
ALLOCATE = ("cudaMallocAsync", "cudaMallocFromPoolAsync")  # the stream is the last argument of both
VERSIONS = {"original": "the original", "preallocated": "the limit", "stream_ordered": "yours"}
REUSE = "Guide §15.9 Memory Reuse Policies"
ORDER = "Guide §15.3 API Fundamentals"


def lab1(lesson) -> None:
    """Builds pipeline.cu, runs it and runs it under compute-sanitizer; reads pipeline_stream_ordered."""
    report = checks.Report(TITLE, lesson)
    res = report.run(FILE, [BYTES, ITERATIONS, REPEATS], timeout=120, what="the results, the memory and the timing")
    if res is not None and not leaks(report, res.records):
        results(report, res.records)
        free_waits(report, res.records)
        speed(report, res.records, res.label)
    report.sanitize(FILE, SANITIZER_ARGS, SANITIZER, clean="no stream-ordered race: every use of buf is ordered "
                    "after its allocation and before its free",
                    errors=f", such as a use of buf not ordered before its free ({ORDER})")
    traced = report.trace(FILE, TRACE_ARGS, what="what your function did with the CUDA runtime, from the record "
                                                 "of its calls", partial=True)
    decided = bool(traced) and recorded(report, traced)
    with report.reading(decided=decided):  # the reading explains: it points at the line
        code = report.read(FILE, FUNCTION)
        if code:
            calls_the_stream_ordered_api(report, code)
            nothing_synchronous_in_the_loop(report, code)
            a_fresh_buffer_every_iteration(report, code)
            if not freed_after_the_kernels(report, code):
                on_the_kernels_stream(report, code)
    report.finish()


# -- what the record of the program's calls shows (streamalloc.calls) ---------------------------------------------


def calls_of_yours(rec) -> list[list[dict]]:
    """The recorded lines of each call of your function (between the harness's course::section marks), in order."""
    spans = []
    for c in rec.lines:
        if c["call"] == "section" and c.get("name") == YOURS:
            spans.append([])
        elif c["in"] == YOURS and spans and c["call"] != "section":
            spans[-1].append(c)
    return spans


def recorded(report, traced) -> bool:
    """On the record of every call of your function in both runs, however the code is written: no cudaMalloc or
    cudaFree, no host wait; each iteration's kernels use a buffer of their own from cudaMallocAsync (or
    cudaMallocFromPoolAsync), freed in the same call; every use of each buffer ordered after its allocation and before
    its free, on whatever stream, through stream order or events. False where the record has no call of your
    function (the harness's marks are gone): then it decides nothing."""
    sync_calls, waits, few, shared, unfreed, late, early, settings = [], [], [], [], [], [], [], []
    allocs = iterations = 0
    for args, rec in traced:
        size, iters, repeats = args
        spans = calls_of_yours(rec)
        if not spans:
            report.unverified("what your function did, from the record of its calls",
                              f"the record of the run with the arguments {' '.join(map(str, args))} has no call of "
                              f"your function: the harness's course::section(\"{YOURS}\") marks around it are gone")
            return False
        want = ([iters, 1] + [iters] * repeats)[:len(spans)]  # the harness's calls: warm-up, probe, timed repeats
        settings.append(f"{len(spans)} call(s) of your function of {'+'.join(map(str, want))} iterations with "
                        f"{size:,}-byte buffers")
        call_of = {id(c): k for k, span in enumerate(spans) for c in span}
        for k, (span, n) in enumerate(zip(spans, want)):
            sync_calls += [c["call"] for c in span if c["call"] in ("cudaMalloc", "cudaFree")]
            waits += calls.host_waits(span)
            mine = [b for b in rec.all_buffers if b.stream_ordered and call_of.get(id(b.alloc)) == k]
            allocs, iterations = allocs + len(mine), iterations + n
            fills = [op for op in rec.launches("fill_transform", YOURS) if call_of.get(id(op.call)) == k]
            own = [next((b for b in mine if op in b.uses or op in b.late_uses), None) for op in fills]
            if len(mine) < n and not (rec.cut_short and k == len(spans) - 1):  # a crash cuts the last call short
                few.append(f"{len(mine)} allocation(s) in a call of {n} iteration(s)")
            if None in own or len({id(b) for b in own}) < len(own):
                shared.append(n)
            for b in mine:
                if b.free is None:
                    if not rec.cut_short:  # a crash stops the program before its frees
                        unfreed.append(b)
                elif call_of.get(id(b.free)) != k:
                    late.append(b)
        mine = [b for b in rec.all_buffers if b.stream_ordered and id(b.alloc) in call_of]
        s = next((op.stream for op in rec.launches("fill_transform", YOURS)), None)  # compute's stream: s
        early += [(p, s) for p in rec.problems() if p.buffer in mine]
    seen = f"recorded over {' and '.join(settings)}"
    report.expect(not sync_calls, f"no cudaMalloc or cudaFree in your function (record; {seen})",
                  f"your function called {checks.english(sorted(set(sync_calls)))} ({len(sync_calls)} time(s), "
                  f"{seen}): " + "; ".join(WHY_NOT[c] for c in sorted(set(sync_calls)) if c in WHY_NOT))
    report.expect(not waits, "no host wait in your function (record)",
                  f"{checks.english(sorted(set(waits)))} made the host wait inside your function ({len(waits)} "
                  f"time(s), {seen}): the host then waits for the GPU in every iteration where it is called. "
                  "cudaFreeAsync on s is already ordered after the kernels, and the caller waits once, after your "
                  "function")
    report.expect(not few and not shared and allocs,
                  f"a fresh buffer every iteration: {allocs} cudaMallocAsync in {iterations} iterations, each "
                  f"iteration's kernels on a buffer of their own (record)",
                  f"not a fresh buffer every iteration: {allocs} stream-ordered allocation(s) in {iterations} "
                  f"iterations ({seen}" + (f"; {few[0]}" if few else "") + "). In this lab every iteration allocates "
                  "its own buffer with cudaMallocAsync, as the original does with cudaMalloc, and frees it at the end "
                  "of the iteration: the point is an allocation that costs (almost) nothing")
    if not allocs:  # nothing stream-ordered was allocated: nothing to free or to order (said above)
        return True
    report.expect(not unfreed and not late, "every buffer your function allocated is freed in the same call (record)",
                  f"{len(unfreed) + len(late)} buffer(s) your function allocated "
                  + (f"were never freed{f' ({len(unfreed)})' if late else ''}" if unfreed else "")
                  + (" and " if unfreed and late else "")
                  + (f"were freed outside the call that allocated them{f' ({len(late)})' if unfreed else ''}"
                     if late else "")
                  + f" ({seen}): free every buffer in the iteration that allocated it, with cudaFreeAsync(buf, s), "
                  "or the pool's memory in use grows with every call")
    if not early:
        report.ok(f"order (record): every use of each buffer (fill_transform, reduce_sum) is ordered after its "
                  f"allocation and before its free ({seen})")
        return True
    p, s = early[0]
    b, where = p.buffer, stream_name(p.use.stream, s)
    if p.kind == "before its allocation":
        first = (f"{p.use.what} on {where} is not ordered after the {b.alloc['call']} of its buffer on "
                 f"{stream_name(b.alloc_op.stream, s)}: it can use the buffer before it is allocated")
    elif p.kind == "after its free" and b.free_op is None:
        first = (f"the host freed the buffer with {b.free['call']} before {p.use.what} on {where} had finished with "
                 "it: nothing made the host wait for the kernels")
    elif p.kind == "after its free":
        first = (f"{p.use.what} on {where} is not done before the cudaFreeAsync of its buffer on "
                 f"{stream_name(b.free_op.stream, s)}: nothing orders that free after the kernels")
    else:
        first = f"{p.use.what} on {where} was launched after its buffer's free: it uses freed memory"
    report.wrong(f"order (record): {len(early)} use(s) of your buffers not ordered after their allocation or before "
                 f"their free ({seen}). The first: {first}. The pool can then hand buf's memory to another allocation "
                 "while the kernels still use it. Allocate before compute(...), free after it with "
                 "cudaFreeAsync(buf, s), or on another stream only after it waits for an event recorded on s after "
                 f"the kernels ({ORDER}; {REUSE})")
    return True


def stream_name(stream, s) -> str:
    """A recorded stream in the learner's words: s (the stream compute's kernels run on), a default stream, another."""
    if stream == s:
        return "s"
    return {"legacy": "the legacy default stream (0)", "per-thread": "the per-thread default stream"}.get(
        stream[1], f"another stream ({stream[1]})")


# -- what the run shows ------------------------------------------------------------------------------------------
def leaks(report, records) -> bool:
    """Every buffer allocated in an iteration must be freed: the pool's memory in use after one call of your
    function (with s synchronized) is what it was before."""
    m = records.one(what="memory", version="stream_ordered")
    return leaked(report, m["pool_used_before"], m["pool_used_after"], BYTES, "your function returned and s was "
                  "synchronized", "free every buffer, in the iteration that allocated it, with cudaFreeAsync(buf, s) "
                  "(the program stopped there: nothing was timed)")


def results(report, records):
    for version, who in VERSIONS.items():
        r = records.one(what="result", version=version)
        report.expect(r["errors"] == 0, f"result ({who}): all {r['slots']} output slots are right",
                      f"result ({who}): output slot {r['first_bad']} is {r['got']}, expected {r['expected']} "
                      f"({r['errors']} of {r['slots']} slots wrong, over {REPEATS} repeats)")


def free_waits(report, records):
    """The probe: one iteration of your function with the reduce held `hold_ms` after the fill wrote buf; `delay_ms`
    after your function returned, another stream allocates the same size from the same pool and writes over what it
    gets. A free ordered after the kernels keeps buf's block from it until the reduce has read it."""
    p = records.one(what="probe", version="stream_ordered")
    setting = (f"one iteration with the reduce held {p['hold_ms']:g} ms after the fill wrote buf, and another stream "
               f"allocating {p['bytes']:,} bytes from the same pool {p['delay_ms']:g} ms after your function returned "
               "and writing into them at once")
    report.expect(p["errors"] == 0,
                  f"the free waits for the kernels: in the probe ({setting}) the reduce read what the fill wrote",
                  f"the free does not wait for the kernels: in the probe ({setting}) the reduce summed {p['got']} "
                  f"instead of {p['expected']}: buf's memory was handed to the other stream and overwritten before the "
                  f"reduce read it. Free buf with cudaFreeAsync(buf, s) after compute(...): in stream order after the "
                  f"kernels ({ORDER}; {REUSE})")


def speed(report, records, label):
    runs = {v: records.one(what="time", version=v)["us_per_iteration"] for v in VERSIONS}  # the repeats
    t = {v: measure.summary(runs[v]) for v in VERSIONS}
    show([{"version": who, "function": "pipeline_" + ("sync" if v == "original" else v),
           "median µs per iteration": t[v]["median"], "min": t[v]["min"], "max": t[v]["max"]}
          for v, who in VERSIONS.items()], label,
         title=f"One iteration ({BYTES >> 20} MiB buffer), over {REPEATS} repeats of {ITERATIONS}")
    o, lim, y = (t[v]["median"] for v in VERSIONS)
    allowed = within_limit(o, lim, OF_LIMIT, OF_LOSS)
    figures = (f"the original takes {o:.1f} µs per iteration, the limit (one buffer, allocated before the "
               f"loop) {lim:.1f} µs, yours {y:.1f} µs: {o / y:.1f}× faster than the original, "
               f"{y - lim:.1f} µs above the limit. Target: at most {lim + allowed:.1f} µs, the limit plus "
               f"{allowed:.1f} µs (the larger of {OF_LIMIT:.0%} of the limit and {OF_LOSS:.0%} of the "
               f"{o - lim:.1f} µs the original loses), and at least {MIN_SPEEDUP:g}× faster than the original"
               f" (medians of {REPEATS} repeats on {label})")
    # pipeline.cu's versions take turns, repeat by repeat: paired; each repeat is one event-timed loop of ITERATIONS
    judge_speed(report, *runs.values(), allowed, MIN_SPEEDUP, figures,
                "Something in the loop still makes the host wait, or calls into the driver (see the hints)",
                paired=True, resolution=measure.EVENT_RESOLUTION_US / ITERATIONS)


# -- what the code explains ---------------------------------------------------------------------------------------
WHY_NOT = {  # each synchronous call's own reason (a finding names only the calls the code makes)
    "cudaFree": f"cudaFree either waits for the whole GPU or, on memory from cudaMallocAsync, frees it without waiting "
                f"for the kernels ({ORDER}): use cudaFreeAsync(buf, s)",
    "cudaMalloc": "cudaMalloc calls into the driver every iteration: use cudaMallocAsync(&buf, bytes, s)",
}


def calls_the_stream_ordered_api(report, code):
    report.require_calls(code, {ALLOCATE: "allocate buf in stream order, on s",
                                "cudaFreeAsync": "free buf in stream order, on s, after its last use"})


def nothing_synchronous_in_the_loop(report, code):
    report.forbid_in_loop(code, ["cudaMalloc", "cudaFree"], WHY_NOT)
    report.forbid_in_loop(code, SYNCS, "the host then waits for the GPU in every iteration; cudaFreeAsync on s is "
                                       "already ordered after the kernels, and the caller waits once, after your "
                                       "function")


def a_fresh_buffer_every_iteration(report, code):
    allocs = [p for name in ALLOCATE for p in cppsource.calls(code, name)]
    frees = cppsource.calls(code, "cudaFreeAsync")
    if allocs and not cppsource.in_loops(code, allocs):
        report.wrong("cudaMallocAsync is called outside the loop: in this lab every iteration allocates its own "
                     "buffer, as the original does, and frees it at the end of the iteration")
    elif frees and not cppsource.in_loops(code, frees):
        report.wrong("cudaFreeAsync is called outside the loop only: every iteration's buffer must be freed in that "
                     "iteration, or all but the last leak")


def on_the_kernels_stream(report, code):
    """The allocation before the kernels and the free after them, in the GPU's order: on s (or a name given to s),
    or on another stream ordered by an event. Where the reading cannot tell which stream or event a call names, it
    says so: the probe and compute-sanitizer decide."""
    order = Order(code, loop_with="cudaFreeAsync")
    kernels = [op.what for op in order.ops if op.what in KERNELS]
    if not kernels or order.missing("cudaMallocAsync", "cudaFreeAsync") or any(
            cppsource.calls_in_loops(code, name) for name in SYNCS):
        return  # said above, or the host orders them (a wait in the loop: said above)
    for api, ordered, where in (("cudaMallocAsync", order.ordered_after(kernels[0], "cudaMallocAsync"), "before"),
                                ("cudaFreeAsync", order.ordered_after("cudaFreeAsync", kernels[-1]), "after")):
        stream = order.stream(api)
        if ordered:
            continue
        raw = written_stream(code, api)
        if ordered is None:
            report.cannot_tell(f"whether {api} on `{raw}` is ordered {where} the kernels on s",
                               f"The reading cannot follow {checks.english(order.unresolved)}")
        elif stream == DEFAULT or cppsource.resolve(code, raw) in OTHER_STREAMS:
            same = cppsource.resolve(code, raw)
            raw += f" ({same})" if same and same != raw else ""
            report.wrong(f"{api} is called on {raw}, not on s, the stream the kernels run on: nothing orders it "
                         f"with the kernels, so the buffer can be used before it is allocated or after it is freed "
                         f"({ORDER}); use s")
        else:
            report.wrong(f"{api} is called on `{raw}`, and nothing orders it {where} the kernels on "
                         f"`{order.stream(kernels[0])}`: record an event after the kernels and make `{raw}` wait "
                         f"for it, or use s ({ORDER})")


def written_stream(code, api) -> str:
    """The stream argument of the first call of `api` (cudaMallocAsync: or cudaMallocFromPoolAsync) in a loop."""
    names = ALLOCATE if api == "cudaMallocAsync" else (api,)
    at = min(cppsource.in_loops(code, [p for n in names for p in cppsource.calls(code, n)]), default=None)
    args = cppsource.call_arguments(code, at) if at is not None else []
    return (args[-1] if api != "cudaFreeAsync" else (args + ["", ""])[1]).strip() if args else "?"


def freed_after_the_kernels(report, code) -> bool:
    """A free that stands before the last use of buf in the loop body frees it, in stream order, before that use."""
    frees = cppsource.calls(code, "cudaFreeAsync")
    for a, b in cppsource.loop_bodies(code):
        uses = [p for p in cppsource.calls(code, "compute") if a <= p < b]
        uses += [p for name, p in cppsource.launches(code) if name in KERNELS and a <= p < b]
        if uses and any(a <= p < max(uses) for p in frees):
            report.wrong(f"cudaFreeAsync comes before compute(...) in the loop: in stream order the buffer is then "
                         f"freed before the kernels use it; free it after its last use ({ORDER})")
            return True
    return False
