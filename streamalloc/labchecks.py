"""The four labs' checking cells: each reads the learner's CUDA file, builds it, runs it, and says in plain
words what is right and what is still wrong (`checks.Report`); in replay it says what it could not check.

A lab's last cell calls one of them: `sa.labchecks.lab1(lesson)`. The targets are the constants at the top
of each function.
"""
from __future__ import annotations

import re

from IPython.display import display

from . import checks, measure, plots, sanitizer

SYNCS = ["cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize"]  # host waits


def lab1(lesson) -> None:
    """Builds pipeline.cu, runs it, and says what is right and what is still wrong."""
    BYTES, ITERATIONS, REPEATS = 4 << 20, 200, 9  # 4 MiB buffers; the program times 9 repeats of 200 iterations
    # Speed, against the limit (pipeline_preallocated: one buffer allocated before the loop, no wait in it), all
    # measured in the same program: yours may take the limit's time plus the larger of OF_LIMIT of it and OF_LOSS
    # of what the original loses per iteration (its time minus the limit's), and must beat the original
    # MIN_SPEEDUP times.
    OF_LIMIT, OF_LOSS, MIN_SPEEDUP = 0.25, 0.04, 1.5
    OTHER_STREAMS = {"0", "NULL", "nullptr", "cudaStreamLegacy", "cudaStreamPerThread"}  # clearly not s
    ALLOCATE = ("cudaMallocAsync", "cudaMallocFromPoolAsync")  # the stream is the last argument of both
    VERSIONS = {"original": "the original", "preallocated": "the limit", "stream_ordered": "yours"}

    report = checks.Report("Lab 1: from synchronous to stream-ordered")
    mine = checks.function_text(report.source(lesson, "pipeline.cu"), "pipeline_stream_ordered")
    if not mine:
        report.wrong("pipeline.cu has no function pipeline_stream_ordered: your version goes there")
    else:
        report.require_calls(mine, {ALLOCATE: "allocate buf in stream order, on s",
                                    "cudaFreeAsync": "free buf in stream order, on s, after its last use"})
        report.forbid_in_loop(mine, ["cudaMalloc", "cudaFree"],
                              "cudaMalloc calls into the driver every iteration, and cudaFree either waits for the "
                              "whole GPU or, on memory from cudaMallocAsync, frees it without waiting for the kernels "
                              "(Guide §15.3); use cudaMallocAsync(&buf, bytes, s) and cudaFreeAsync(buf, s)")
        report.forbid_in_loop(mine, SYNCS, "the host then waits for the GPU in every iteration; cudaFreeAsync on s is "
                                           "already ordered after the kernels, and the caller waits once, after your "
                                           "function")
        allocs = sorted(p for name in ALLOCATE for p in checks.calls(mine, name))
        frees = checks.calls(mine, "cudaFreeAsync")
        if allocs and not any(checks.calls_in_loops(mine, name) for name in ALLOCATE):
            report.wrong("cudaMallocAsync is called outside the loop: in this lab every iteration allocates its own "
                         "buffer, as the original does, and frees it at the end of the iteration")
        aliases = {"s", *re.findall(r"\b(\w+)\s*=\s*s\s*[;,)]", mine)}  # cudaStream_t st = s; is s too
        for where, what in ((allocs, "the allocation"), (frees, "cudaFreeAsync")):
            for p in where:
                name = re.match(r"\w+", mine[p:])[0]
                stream = ((checks.call_arguments(mine, p) or [""])[-1]).strip()
                bare = re.sub(r"^\(\s*cudaStream_t\s*\)\s*", "", stream)
                if bare in aliases:
                    continue
                if bare in OTHER_STREAMS:
                    report.wrong(f"{name} is called on {stream}, not on s, the stream the kernels run on: nothing "
                                 "orders it with the kernels, so the buffer can be used before it is allocated or "
                                 "after it is freed (Guide §15.3); use s")
                else:
                    report.unchecked(f"{name} is called on `{stream}`: the check cannot tell from the code whether "
                                     "that is s, the stream the kernels run on; it must be, or an event must order "
                                     f"{what} with the kernels (Guide §15.3)")
        for a, b in checks.loop_bodies(mine):
            uses = [p for p in checks.calls(mine, "compute") if a <= p < b]
            if uses and any(a <= p < max(uses) for p in frees):
                report.wrong("cudaFreeAsync comes before compute(...) in the loop: in stream order the buffer is then "
                             "freed before the kernels use it; free it after its last use (Guide §15.3)")

    if report.build(lesson, "pipeline.cu"):
        res = report.run(lesson, "pipeline.cu", [BYTES, ITERATIONS, REPEATS], timeout=60,
                         what="the results and the timing")
        if res is not None:
            for version, who in VERSIONS.items():
                r = res.records.one(what="result", version=version)
                report.expect(r["errors"] == 0, f"result ({who}): all {r['slots']} output slots are right",
                              f"result ({who}): output slot {r['first_bad']} is {r['got']}, expected {r['expected']} "
                              f"({r['errors']} of {r['slots']} slots wrong, over {REPEATS} repeats)")
            t = {v: measure.summary(res.records.one(what="time", version=v)["us_per_iteration"]) for v in VERSIONS}
            rows = [{"version": who, "function": "pipeline_" + ("sync" if v == "original" else v),
                     "median µs per iteration": t[v]["median"], "min": t[v]["min"], "max": t[v]["max"]}
                    for v, who in VERSIONS.items()]
            display(plots.Table(rows, res.label, title=f"One iteration ({BYTES >> 20} MiB buffer), over {REPEATS} "
                                                       f"repeats of {ITERATIONS}"))
            o, lim, y = (t[v]["median"] for v in VERSIONS)
            allowed = max(OF_LIMIT * lim, OF_LOSS * (o - lim))
            figures = (f"the original takes {o:.1f} µs per iteration, the limit (one buffer, allocated before the "
                       f"loop) {lim:.1f} µs, yours {y:.1f} µs: {o / y:.1f}× faster than the original, "
                       f"{y - lim:.1f} µs above the limit. Target: at most {lim + allowed:.1f} µs, the limit plus "
                       f"{allowed:.1f} µs (the larger of {OF_LIMIT:.0%} of the limit and {OF_LOSS:.0%} of the "
                       f"{o - lim:.1f} µs the original loses), and at least {MIN_SPEEDUP:g}× faster than the original"
                       f" (medians of {REPEATS} repeats on {res.label})")
            report.expect(y <= lim + allowed and o >= MIN_SPEEDUP * y, f"speed: {figures}",
                          f"speed: {figures}. Something in the loop still makes the host wait, or calls into the "
                          "driver (see the hints)")
    report.finish()


def lab2(lesson) -> None:
    """Builds tuned.cu, runs it, and says what is right and what is still wrong."""
    BYTES, ITERATIONS = 64 << 20, 100  # 64 MiB per iteration, 100 iterations per loop
    TARGET = 2.0      # your loop's median iteration must be at least this many times faster than threshold 0's
    TRIM_TARGET = 0   # bytes the pool may still reserve after your trim


    def size(n):
        return "UINT64_MAX" if n == 2**64 - 1 else f"{n:,} bytes" + (f" ({n / 2**20:g} MiB)" if n >= 2**20 else "")


    report = checks.Report("Lab 2: tune the pool")
    mine = checks.function_text(report.source(lesson, "tuned.cu"), "tuned_loop")
    allocs = checks.calls(mine, "cudaMallocAsync")
    loop = next(((a, b) for a, b in checks.loop_bodies(mine) if any(a <= p < b for p in allocs)), None)
    if not mine:
        report.wrong("tuned.cu has no function tuned_loop: your changes go there")
    elif loop is None:
        report.wrong("tuned_loop has lost the given loop (the one that calls cudaMallocAsync): put it back as it was")
    else:
        sets = [p for p in checks.calls(mine, "cudaMemPoolSetAttribute")
                if "cudaMemPoolAttrReleaseThreshold" in checks.call_arguments(mine, p)]
        report.placed(sets, loop, "before", {
            "missing": "the release threshold is never set: call cudaMemPoolSetAttribute(pool, "
                       "cudaMemPoolAttrReleaseThreshold, &threshold) before the loop (Guide §15.7)",
            "before": "cudaMemPoolAttrReleaseThreshold is set before the loop",
            "inside": "cudaMemPoolAttrReleaseThreshold is set inside the loop: set it once, before the loop",
            "after": "cudaMemPoolAttrReleaseThreshold is set after the loop: while the loop ran the threshold was "
                     "still 0, so the pool gave its memory back at every cudaStreamSynchronize and grew again at the "
                     "next cudaMallocAsync; set it before the loop (Guide §15.7, §15.12)"})
        report.placed(checks.calls(mine, "cudaMemPoolTrimTo"), loop, "after", {
            "missing": "cudaMemPoolTrimTo is not called: after the loop the pool keeps what it reserved until the "
                       "process ends; trim it once, after the loop (Guide §15.7)",
            "after": "cudaMemPoolTrimTo is called after the loop",
            "inside": "cudaMemPoolTrimTo is called inside the loop: that gives the memory back in every iteration, "
                      "as threshold 0 does; call it once, after the loop",
            "before": "cudaMemPoolTrimTo is called before the loop, when there is nothing to trim yet; call it after "
                      "the loop"})

    if report.build(lesson, "tuned.cu"):
        res = report.run(lesson, "tuned.cu", [BYTES, ITERATIONS], timeout=60, what="the results and the timing")
        if res is not None:
            base, yours = res.records.one(loop="threshold 0", summary=True), res.records.one(loop="yours", summary=True)
            for s, who in ((yours, "yours"), (base, "threshold 0")):
                report.expect(s["errors"] == 0, f"result ({who}): all {s['slots']} iterations computed the right sum",
                              f"result ({who}): iteration {s['first_bad']} computed {s['got']}, expected {s['expected']} "
                              f"({s['errors']} of {s['slots']} iterations wrong)")
            its, base_its = ([r for r in res.records.where(loop=name) if "it" in r] for name in ("yours", "threshold 0"))
            threshold = yours["threshold"]
            # From the first synchronization on, the pool must neither give memory back at a synchronization
            # nor grow at the next cudaMallocAsync. (The first allocation may grow it: the given loop left it
            # empty; the first synchronization may trim it down to a threshold above what one iteration uses.)
            gave_back = [r for r in its if r["reserved_after_sync"] < r["reserved_after_malloc"]]
            grew = [b for a, b in zip(its, its[1:]) if b["reserved_after_malloc"] > a["reserved_after_sync"]]
            emptied = [r for r in its if r["reserved_after_sync"] == 0]
            low = (f", less than the {BYTES >> 20} MiB each iteration allocates" if threshold < BYTES else "")
            advice = "; set it before the loop, to at least what the pool reserves for one iteration"
            if emptied:
                report.wrong(f"reserved memory: the pool gave all its memory back and had to grow again: it reserved "
                             f"0 bytes after the synchronization of {len(emptied)} of {len(its)} iterations (the "
                             f"first: iteration {emptied[0]['it']}). The release threshold during your loop was "
                             f"{size(threshold)}{low}{advice}")
            elif grew or any(r["it"] > 0 for r in gave_back):
                r = gave_back[0] if gave_back else grew[0]
                report.wrong(f"reserved memory: the pool still gives memory back and maps it again: after {len(gave_back)} "
                             f"of the {len(its)} synchronizations it reserved less than right after that iteration's "
                             f"cudaMallocAsync, and {len(grew)} allocations had to grow it again (iteration {r['it']}: "
                             f"{size(r['reserved_after_malloc'])} right after cudaMallocAsync, "
                             f"{size(r['reserved_after_sync'])} after the synchronization). The release threshold "
                             f"during your loop was {size(threshold)}{low}{advice}")
            else:
                first = its[0]["reserved_after_sync"] < its[0]["reserved_after_malloc"]
                report.ok(f"reserved memory: {size(its[-1]['reserved_after_sync'])} right after every cudaMallocAsync "
                          f"and after every synchronization of your {len(its)} iterations"
                          + (" (from the first synchronization on, which trimmed the pool to the threshold)" if first
                             else "")
                          + f": the pool neither gave memory back nor had to grow (threshold during the loop: "
                          f"{size(threshold)})")
            t_base, t_mine = (measure.summary([r["us"] for r in rs])["median"] for rs in (base_its, its))
            report.faster(t_base, t_mine, TARGET, "threshold 0", f"{len(its)} iterations", res.label,
                          "The pool still has to grow in the loop's iterations (see reserved memory)")
            end = yours["reserved_end"]
            report.expect(end == TRIM_TARGET, f"at the end the pool reserves {size(end)}, the target",
                          f"after your trim the pool still reserves {size(end)}; the target is {size(TRIM_TARGET)}: after "
                          "the loop, with everything freed and synchronized, call cudaMemPoolTrimTo(pool, 0)")
    report.finish()


def lab3(lesson) -> None:
    """Reads race.cu, builds it, runs it, runs it under compute-sanitizer, and says what is still wrong."""
    ARGS = [1 << 20, 16, 2000, 200]           # elements, iterations, fill µs, consume µs
    SANITIZER_ARGS = [1 << 14, 3, 300, 30]    # smaller: the sanitizer slows every memory access down
    SANITIZER = [*sanitizer.STREAM_ORDER_RACES, "--print-limit", "10", "--show-backtrace", "device",
                 "--error-exitcode", "99"]


    def what_was_read(got, it, j):
        """Decode a wrong value: whose mark or whose values the consumer of iteration `it` read, and what it means."""
        if got < 0:
            k, what = -got - 1, f"the mark iteration {-got - 1}'s fill writes before its values"
        elif got % 1000 == j % 1000 and got >= 1000:
            k, what = got // 1000 - 1, f"iteration {got // 1000 - 1}'s value"
        else:
            return "a value no fill wrote: the consumer read the block before anything was written to it (TODO 1)"
        if k > it:
            return (f"{what}: a later iteration's fill was already writing into this block, so it had been freed and "
                    "handed to the next cudaMallocAsync before the consumer read it (TODO 2)")
        if k == it and got < 0:
            return f"{what}: the consumer read while this iteration's fill was still running (TODO 1)"
        return f"{what}: the consumer read the block before this iteration's fill had written it (TODO 1)"


    report = checks.Report("Lab 3: fix the race")
    src = report.source(lesson, "race.cu")
    order = checks.StreamOrder(src)  # the loop's stream operations: what runs on which stream, the events
    if order.missing("cudaMallocAsync", "fill_slow", "consume", "cudaFreeAsync"):
        report.wrong("the loop must still allocate buf (cudaMallocAsync), fill it (fill_slow<<<...>>>), read it "
                     "(consume<<<...>>>) and free it (cudaFreeAsync)")
    else:
        producer, consumer, freer = (order.stream(op) for op in ("fill_slow", "consume", "cudaFreeAsync"))
        report.expect(order.ordered_after("consume", "cudaMallocAsync", "fill_slow"),
                      f"consume on `{consumer}` waits for cudaMallocAsync and fill_slow on `{producer}`: it reads buf "
                      "only once it is allocated and filled",
                      f"consume on `{consumer}` is not ordered after fill_slow on `{producer}`: it can read buf before "
                      "it is allocated and filled. Record an event on the producer after the fill, and make the "
                      "consumer wait for it (cudaStreamWaitEvent) before it reads (TODO 1; Guide §15.3)")
        report.expect(order.ordered_after("cudaFreeAsync", "consume"),
                      f"cudaFreeAsync on `{freer}` waits for consume on `{consumer}` "
                      f"({'in stream order' if freer == consumer else 'through an event'}): buf is freed only after "
                      "its last use",
                      f"cudaFreeAsync on `{freer}` is not ordered after consume on `{consumer}`: the pool can give "
                      "buf's block to the next iteration's cudaMallocAsync while the consumer still reads it. Record an "
                      "event on the consumer after the read, and make the producer wait for it (cudaStreamWaitEvent) "
                      "before cudaFreeAsync (TODO 2; Guide §15.3)")
        needed = 1 + (freer != consumer)
        records = sum(checks.calls_in_loops(src, n) for n in ("cudaEventRecord", "cudaEventRecordWithFlags"))
        waits = checks.calls_in_loops(src, "cudaStreamWaitEvent")
        report.expect(records >= needed and waits >= needed,
                      f"the loop calls cudaEventRecord {records}× and cudaStreamWaitEvent {waits}× "
                      f"({needed} of each needed)",
                      f"the loop calls cudaEventRecord {records}× and cudaStreamWaitEvent {waits}×: {needed} of each "
                      "are needed" + (", one pair before the read and one before the free" if needed == 2 else ""))
    report.forbid_in_loop(src, SYNCS, "let the streams wait for each other on the GPU, with events; a host wait "
                                      "in the loop stalls both streams")

    if report.build(lesson, "race.cu"):
        res = report.run(lesson, "race.cu", ARGS, timeout=60)
        if res is not None:
            per_iter = [r for r in res.records if "iter" in r]
            total = next(r for r in res.records if "bad_iters" in r)
            rows = [{k: v for k, v in r.items() if r["errors"] or k in ("iter", "errors")} for r in per_iter]
            display(plots.Table(rows, res.label, ["iter", "errors", "first_bad", "expected", "got"],
                                   title="Every iteration's slice of out (first wrong element of each)"))
            reuse = (f"the pool returned the previous iteration's block in {total['same_block']} of "
                     f"{total['iters'] - 1} iterations")
            bad = [r for r in per_iter if r["errors"]]
            if not bad:
                report.ok(f"results: all {total['iters']} iterations right, {total['n']:,} elements each ({reuse})")
            else:
                r = bad[0]
                report.wrong(f"results: {len(bad)} of {total['iters']} iterations wrong ({total['errors']:,} elements). "
                             f"First: iteration {r['iter']}, element {r['first_bad']}: expected {r['expected']}, "
                             f"got {r['got']}, {what_was_read(r['got'], r['iter'], r['first_bad'])}; {reuse}")
        report.sanitize(lesson, "race.cu", SANITIZER_ARGS, SANITIZER, timeout=180, clean="no stream-ordered race",
                        errors=", such as an access to buf not ordered after its allocation or before its free")
    report.finish()


def lab4(lesson) -> None:
    """Reads graph.cu, builds it, runs it, and says what is right and what is still wrong."""
    N, LAUNCHES, ITERATIONS = 1 << 22, 100, 100  # 16 MiB of floats per allocation; graph launches; loop iterations
    MiB = 1 << 20
    NEEDED = {  # the calls the lab asks for, and why
        ("cudaStreamBeginCapture",): "start capturing s before the iteration's work (TODO 1)",
        ("cudaStreamEndCapture",): "end the capture after the iteration's work, which gives the graph (TODO 1)",
        ("cudaGraphInstantiate", "cudaGraphInstantiateWithFlags"): "a graph is launched as an executable graph (TODO 1)",
        ("cudaGraphLaunch",): "launch the executable graph in the timed loop (TODO 2)",
        ("cudaGraphExecDestroy",): "destroy the executable graph at the end (TODO 3)",
        ("cudaGraphDestroy",): "destroy the captured graph too, at the end (TODO 3)",
        ("cudaDeviceGraphMemTrim",): "without it the graph allocator keeps its physical memory after the graph is "
                                     "destroyed (Graph Memory Nodes, Physical Memory Footprint) (TODO 4)",
    }


    def mib(nbytes):
        return f"{nbytes / MiB:.1f} MiB"


    report = checks.Report("Lab 4: capture it")
    src = report.source(lesson, "graph.cu")
    calls = checks.calls
    report.require_calls(src, NEEDED)

    begins, ends = calls(src, "cudaStreamBeginCapture"), calls(src, "cudaStreamEndCapture")
    if begins and ends:
        b = begins[0]
        e = next((p for p in ends if p > b), None)
        if e is None:
            report.wrong("cudaStreamEndCapture comes before cudaStreamBeginCapture: the capture must begin first")
        else:
            inside = lambda name: any(b < p < e for p in calls(src, name))  # noqa: E731
            kernels = [name for name, p in checks.launches(src) if b < p < e]
            report.expect(inside("cudaMallocAsync"),
                          "cudaMallocAsync is inside the captured region: the graph gets a memory allocation node",
                          "the allocation is not captured: cudaMallocAsync is not called between "
                          "cudaStreamBeginCapture and cudaStreamEndCapture, so the graph has no allocation node and "
                          "owns no memory; allocate tmp inside the capture, on s (TODO 1)")
            report.expect(inside("cudaFreeAsync"),
                          "cudaFreeAsync is inside the captured region: the graph gets a memory free node",
                          "the free is not captured: cudaFreeAsync is not called between cudaStreamBeginCapture and "
                          "cudaStreamEndCapture, so each launch leaves its allocation unfreed: the next launch then "
                          "fails, or, with cudaGraphInstantiateFlagAutoFreeOnLaunch, frees it first, but the last "
                          "launch's allocation stays in use and keeps its memory reserved after the trim; capture the "
                          "free with the rest (TODO 1)")
            report.expect(bool(kernels), f"the kernels are captured too ({', '.join(kernels) or '-'})",
                          "no kernel is launched inside the captured region: capture produce and accumulate (TODO 1)")
    if calls(src, "cudaGraphLaunch"):
        report.expect(checks.calls_in_loops(src, "cudaGraphLaunch") > 0, "cudaGraphLaunch is called in the loop",
                      "cudaGraphLaunch is not called inside the timed loop: the graph is to be launched once per "
                      "iteration (TODO 2)")
    trims, graph_launches = calls(src, "cudaDeviceGraphMemTrim"), calls(src, "cudaGraphLaunch")
    if trims and graph_launches:  # the trim frees only what no executing or scheduled graph uses: after a wait for them
        done = min((p for name in SYNCS for p in calls(src, name) if p > max(graph_launches)), default=None)
        report.expect(done is not None and max(trims) > done,
                      "cudaDeviceGraphMemTrim is called once the graph's launches have completed (after a "
                      "synchronization that follows them)",
                      "cudaDeviceGraphMemTrim is called before the graph's launches have completed: it frees only "
                      "memory that no executing or scheduled graph uses, so trim once the graph's launches have "
                      "completed, after a synchronization that follows the last cudaGraphLaunch (TODO 4)")

    if report.build(lesson, "graph.cu"):
        res = report.run(lesson, "graph.cu", [N, LAUNCHES, ITERATIONS], timeout=60,
                         what="the results and the graph memory")
        if res is not None:
            recs = res.records
            graph = recs.one(what="graph")
            mem = {r["phase"]: r for r in recs.where(what="graph_mem")}
            display(plots.Table([{"phase": p, "reserved MiB": r["reserved"] / MiB, "used MiB": r["used"] / MiB,
                                     "reserved high MiB": r["reserved_high"] / MiB, "used high MiB": r["used_high"] / MiB}
                                    for p, r in mem.items()], res.label, title="The graph allocator's memory"))
            times = {r["loop"]: r for r in recs.where(what="timing")}
            rows = []
            for loop, r in times.items():
                dev = r["device_us"][1:] if loop == "graph" else r["device_us"]  # the first launch maps memory
                host = r["host_us"][1:] if loop == "graph" else r["host_us"]
                d, h = measure.summary(dev), measure.summary(host)
                rows.append({"loop": "graph launches" if loop == "graph" else "uncaptured loop", "iterations": d["n"],
                             "device µs (median)": d["median"], "p25": d["p25"], "p75": d["p75"],
                             "host µs to enqueue (median)": h["median"]})
            if "graph" in times:
                rows.append({"loop": "first graph launch", "iterations": 1,
                             "device µs (median)": times["graph"]["device_us"][0],
                             "host µs to enqueue (median)": times["graph"]["host_us"][0]})
            display(plots.Table(rows, res.label, title="One iteration: uncaptured vs graph (for information)"))

            report.expect(graph["alloc_nodes"] >= 1 and graph["free_nodes"] >= 1,
                          f"the captured graph has {graph['nodes']} nodes: {graph['alloc_nodes']} memory allocation, "
                          f"{graph['kernel_nodes']} kernel, {graph['free_nodes']} memory free",
                          ("nothing was captured: `graph` is still empty after TODO 1" if not graph["captured"] else
                           f"the captured graph has {graph['nodes']} nodes but {graph['alloc_nodes']} memory allocation "
                           f"and {graph['free_nodes']} memory free nodes: cudaMallocAsync and cudaFreeAsync must be "
                           "captured with the kernels"))
            for loop, who in (("graph", "the graph"), ("stream", "the uncaptured loop (given)")):
                r = recs.one(what="result", loop=loop)
                hint = " (out is untouched: was the graph launched?)" if loop == "graph" and r["got"] == 0 else ""
                unit = "launches" if loop == "graph" else "iterations"
                report.expect(r["errors"] == 0,
                              f"result of {who}: all {r['n']:,} elements right after {r['times']} {unit}",
                              f"result of {who} after {r['times']} {unit}: element {r['first_bad']} is {r['got']:g}, "
                              f"expected {r['expected']:g} ({r['errors']:,} of {r['n']:,} wrong){hint}")
            launched, start, destroyed, trimmed = (mem[p] for p in ("launched", "start", "destroyed", "trimmed"))
            chunk = (f"; it reserves physical memory in chunks, here {launched['reserved'] / (N * 4):g}× what the "
                     "graph allocates" if launched["reserved"] > N * 4 else "")
            report.expect(launched["reserved"] > 0,
                          f"while the executable graph exists, the graph allocator reserves {mib(launched['reserved'])} "
                          f"(used: {mib(launched['used'])}) for a {mib(N * 4)} buffer{chunk}",
                          "while the executable graph exists, the graph allocator reserves nothing: the graph allocates "
                          "no memory of its own (is cudaMallocAsync captured, and the graph launched?)")
            if launched["reserved"] > 0:
                report.expect(trimmed["reserved"] <= start["reserved"],
                              f"after cudaDeviceGraphMemTrim the graph allocator reserves {mib(trimmed['reserved'])}, as "
                              f"at the start ({mib(start['reserved'])}); between TODO 3 and TODO 4 it reserved "
                              f"{mib(destroyed['reserved'])} (used: {mib(destroyed['used'])})",
                              f"at the end the graph allocator still reserves {mib(trimmed['reserved'])} (at the start: "
                              f"{mib(start['reserved'])}; used: {mib(trimmed['used'])}): once the graph's launches have "
                              "completed, call cudaDeviceGraphMemTrim, and let the graph free what it allocates "
                              "(TODO 1, 3 and 4)")
    report.finish()
