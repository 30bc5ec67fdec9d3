"""Lab 1 (from synchronous to stream-ordered): pipeline.cu's results, memory, speed and races, then its code.

The fields pipeline.cu prints are declared in the comment block at the top of its source, in
solutions/lab1_stream_ordered.ipynb.
"""
from __future__ import annotations

import re

from .. import checks, cppsource, measure, sanitizer
from .common import SYNCS, leaked, show, within_limit

TITLE = "Lab 1: from synchronous to stream-ordered"
FILE, FUNCTION = "pipeline.cu", "pipeline_stream_ordered"
BYTES, ITERATIONS, REPEATS = 4 << 20, 200, 9  # 4 MiB buffers; 9 timed repeats of 200 iterations
SANITIZER_ARGS = [64 << 10, 4, 1]  # small: the sanitizer slows every access down
SANITIZER = [*sanitizer.STREAM_ORDER_RACES, "--print-limit", "10", "--error-exitcode", "99"]
# Speed, against the limit (pipeline_preallocated: one buffer allocated before the loop, no wait in it), all
# measured in the same program: yours may take the limit's time plus the larger of OF_LIMIT of it and OF_LOSS
# of what the original loses per iteration (its time minus the limit's), and must beat the original
# MIN_SPEEDUP times.
OF_LIMIT, OF_LOSS, MIN_SPEEDUP = 0.25, 0.04, 1.5
OTHER_STREAMS = {"0", "NULL", "nullptr", "cudaStreamLegacy", "cudaStreamPerThread"}  # clearly not s
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
        speed(report, res.records, res.label)
    report.sanitize(FILE, SANITIZER_ARGS, SANITIZER, clean="no stream-ordered race: every use of buf is ordered "
                    "after its allocation and before its free",
                    errors=f", such as a use of buf not ordered before its free ({ORDER})")
    code = report.read(FILE, FUNCTION)
    if code:
        calls_the_stream_ordered_api(report, code)
        nothing_synchronous_in_the_loop(report, code)
        a_fresh_buffer_every_iteration(report, code)
        on_the_kernels_stream(report, code)
        freed_after_the_kernels(report, code)
    report.finish()


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


def speed(report, records, label):
    t = {v: measure.summary(records.one(what="time", version=v)["us_per_iteration"]) for v in VERSIONS}
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
    report.expect(y <= lim + allowed and o >= MIN_SPEEDUP * y, f"speed: {figures}",
                  f"speed: {figures}. Something in the loop still makes the host wait, or calls into the "
                  "driver (see the hints)")


# -- what the code explains ---------------------------------------------------------------------------------------
def calls_the_stream_ordered_api(report, code):
    report.require_calls(code, {ALLOCATE: "allocate buf in stream order, on s",
                                "cudaFreeAsync": "free buf in stream order, on s, after its last use"})


def nothing_synchronous_in_the_loop(report, code):
    report.forbid_in_loop(code, ["cudaMalloc", "cudaFree"],
                          f"cudaMalloc calls into the driver every iteration, and cudaFree either waits for the "
                          f"whole GPU or, on memory from cudaMallocAsync, frees it without waiting for the kernels "
                          f"({ORDER}); use cudaMallocAsync(&buf, bytes, s) and cudaFreeAsync(buf, s)")
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
    """The allocation and the free on s (or a name given to s); another stream is said, one the reading cannot
    resolve is a note: compute-sanitizer's report decides."""
    names = cppsource.aliases(code, "s")
    for p in sorted(p for name in (*ALLOCATE, "cudaFreeAsync") for p in cppsource.calls(code, name)):
        api = re.match(r"\w+", code[p:])[0]
        stream = ((cppsource.call_arguments(code, p) or [""])[-1]).strip()
        bare = re.sub(r"^\(\s*cudaStream_t\s*\)\s*", "", stream)
        if bare in names:
            continue
        if bare in OTHER_STREAMS:
            report.wrong(f"{api} is called on {stream}, not on s, the stream the kernels run on: nothing orders it "
                         f"with the kernels, so the buffer can be used before it is allocated or after it is freed "
                         f"({ORDER}); use s")
        else:
            report.note(f"{api} is called on `{stream}`: the check cannot tell from the source whether that is s, "
                        "the stream the kernels run on; compute-sanitizer's report decides. If it is another stream, "
                        f"an event must order it with the kernels ({ORDER})")


def freed_after_the_kernels(report, code):
    frees = cppsource.calls(code, "cudaFreeAsync")
    for a, b in cppsource.loop_bodies(code):
        uses = [p for p in cppsource.calls(code, "compute") if a <= p < b]
        if uses and any(a <= p < max(uses) for p in frees):
            report.wrong(f"cudaFreeAsync comes before compute(...) in the loop: in stream order the buffer is then "
                         f"freed before the kernels use it; free it after its last use ({ORDER})")
            return
