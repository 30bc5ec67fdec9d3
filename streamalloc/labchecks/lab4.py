"""Lab 4 (capture it): graph.cu's results and graph memory, the record of its calls (the graph's own nodes and
edges, its instantiations and launches), then how its code builds, launches and frees the graph.

The record decides the order inside the graph: at instantiation the course's call recorder (streamalloc.calls) reads
the graph's nodes and edges from the graph itself, and the free node must come after every kernel that uses the
allocation, each of which must come after the allocation node (Guide §16.3, "A program must guarantee that operations
accessing graph memory are ordered after the allocation node [and] before the operation freeing the memory"),
whether the graph was captured or built node by node, and however it was instantiated. No timing can show a free
that does not wait inside a graph (the graph keeps its memory mapped), so the edges decide, and compute-sanitizer,
which §16.4.2 names for accesses outside an allocation's lifetime, runs the program too. The record is made with two
argument sets (elements, launches), so a loop right only for the default count is found out. It also decides the
order around the launches: each launch done before the harness's timing event recorded after it on s, and every one
before the copy back of out, in the record's happens-before order (streams, events, host waits, the legacy stream),
whichever stream the graph is launched into.

The fields graph.cu prints are declared in the comment block at the top of its source, in
solutions/lab4_capture_graph.ipynb.
"""
from __future__ import annotations

from .. import calls, checks, cppsource, measure, sanitizer
from ..calls import SYNCS
from ..measure import MiB
from .common import never_named, show, stream_words
from .streams import Order, cannot_tell

TITLE = "Lab 4: capture it"
FILE = "graph.cu"
N, LAUNCHES, ITERATIONS = 1 << 22, 100, 100  # 16 MiB of floats per allocation; graph launches; loop iterations
TRACE_ARGS = [[1 << 12, 3, 2], [1 << 10, 7, 1]]  # the recorded runs: two launch counts, so no default hides
LOOP = "loop"  # graph.cu's mark (course::section) around its timed loop of launches
NEEDED = {  # the calls the lab asks for, however the graph is built, and why
    ("cudaGraphInstantiate", "cudaGraphInstantiateWithFlags", "cudaGraphInstantiateWithParams"):
        "a graph is launched as an executable graph (TODO 1)",
    ("cudaGraphLaunch",): "launch the executable graph in the timed loop (TODO 2)",
    ("cudaGraphExecDestroy",): "destroy the executable graph at the end (TODO 3)",
    ("cudaGraphDestroy",): "destroy the graph too, at the end (TODO 3)",
    ("cudaDeviceGraphMemTrim",): "destroying a graph does not return its physical memory at once; the trim "
                                 "releases it explicitly (Graph Memory Nodes, Physical Memory Footprint) (TODO 4)",
}
NODES = ("cudaGraphAddMemAllocNode", "cudaGraphAddMemFreeNode", "cudaGraphAddNode")  # built node by node
SANITIZER_ARGS = [1 << 16, 3, 3]  # small and short: the sanitizer slows every access down
SANITIZER = [*sanitizer.STREAM_ORDER_RACES, "--print-limit", "10", "--error-exitcode", "99"]
LIFETIME = "Guide §16.3 API Fundamentals: accesses ordered after the allocation node, before the free"
NON_BLOCKING = ("CUDA Runtime API, cudaStreamCreateWithFlags: a cudaStreamNonBlocking stream \"should perform no implicit "
                "synchronization with stream 0\"")
KERNELS = ("produce", "accumulate")


def lab4(lesson) -> None:
    """Builds graph.cu, runs it, records its calls, and reads how main builds, launches and frees the graph."""
    report = checks.Report(TITLE, lesson)
    res = report.run(FILE, [N, LAUNCHES, ITERATIONS], timeout=60, what="the results and the graph memory")
    if res is not None:
        recs = res.records
        mem = {r["phase"]: r for r in recs.where(what="graph_mem")}
        tables(recs, mem, res.label)
        results(report, recs)
        graph_memory(report, mem)
    report.sanitize(FILE, SANITIZER_ARGS, SANITIZER, timeout=300, clean="no access outside tmp's lifetime",
                    errors=", such as an access to tmp after its free node")
    traced = report.trace(FILE, TRACE_ARGS, what="the graph's nodes and edges and its launches, from the record of "
                                                 "its calls")
    if traced:
        recorded_graph(report, traced)
    unnamed = never_named(report, report.source(FILE), NEEDED)  # a call the file never names is not made
    with report.reading(decided=bool(traced)):  # the reading explains: it points at the line
        code = report.read(FILE, "main")
        if code:
            if not unnamed:
                report.require_calls(code, NEEDED)
            if cppsource.calls(code, "cudaStreamBeginCaptureToGraph"):
                cannot_tell(report, "what the capture into an existing graph holds", "The reading does not follow "
                            "cudaStreamBeginCaptureToGraph; the record of the run reads the graph itself")
            elif cppsource.calls(code, "cudaStreamBeginCapture") or not any(cppsource.calls(code, n) for n in NODES):
                captured(report, code)
            else:
                built_node_by_node(report, code, ran=bool(traced))
            launched_in_the_loop(report, code)
            trimmed_once_the_launches_completed(report, code)
    report.finish()


def in_mib(nbytes):
    return f"{nbytes / MiB:.1f} MiB"


# -- what the record of the program's calls shows (streamalloc.calls) ---------------------------------------------
def recorded_graph(report, traced):
    """On the record of both runs: the exec the timed loop launches, launched as many times as asked, instantiated
    once, and its graph (as instantiated: nodes and edges read from the graph itself) with an allocation node, the
    kernels that use it, and a free node ordered after all of them. However the graph was built or instantiated."""
    settings, shapes = [], set()
    for args, rec in traced:
        n, launches = args[0], args[1]
        settings.append(f"{launches} launches of {n:,} elements")
        launched = [c for c in rec.named("cudaGraphLaunch", LOOP) if c["ret"] == 0]
        made = [c for c in rec.named("cudaGraphInstantiate") if c["ret"] == 0]
        in_loop = [c for c in made if c["in"] == LOOP]
        if len(launched) != launches:
            report.wrong(f"launches (record): with launches = {launches}, the timed loop launched a graph "
                         f"{len(launched)} time(s): it must launch exec once per iteration, {launches} times (TODO 2)")
            return
        if len(in_loop) > 1:
            report.wrong(f"instantiation (record): with launches = {launches}, the timed loop instantiated a graph "
                         f"{len(in_loop)} times: instantiating is the expensive step a graph is built to pay once; "
                         "instantiate once before the loop (TODO 1) and launch the same exec in it (TODO 2)")
            return
        if not read_after_the_launches(report, rec, launched, settings[-1]):
            return
        execs = list(dict.fromkeys(c["exec"] for c in launched))
        for exec_ in execs:
            dump = rec.graphs.get(exec_)
            if dump is None:
                report.wrong(f"the timed loop launches {exec_}, which the record never saw instantiated: launch the "
                             "exec that cudaGraphInstantiate gave (TODO 1 and 2)")
                return
            shape = graph_shape(report, calls.Graph(dump), rec, settings[-1])
            if shape is None:
                return
            shapes.add(shape)
    seen = f"recorded with {' and with '.join(settings)}"
    report.ok(f"launches (record): the timed loop launched the instantiated graph once per iteration, as many times "
              f"as asked, without instantiating it again; each launch is done before the timing event recorded after "
              f"it on s, and all of them before the copy back of out ({seen})")
    report.ok(f"the graph's own edges (record): {'; '.join(sorted(shapes))}: produce and accumulate use tmp only "
              f"after its allocation node, and its free node comes after both ({seen}; {LIFETIME})")


def read_after_the_launches(report, rec, launched, setting: str) -> bool:
    """The harness reads the launches' work twice: the timing event it records on s after each launch (events it
    created itself, outside your sections), and the copy back of out (the first cudaMemcpy after the loop). Each must
    come after the launches in the record's happens-before order, whatever stream they went into. False (and WRONG,
    naming the launch stream nothing waits for) where one does not."""
    index = {id(c): k for k, c in enumerate(rec.lines)}
    timing = {c["event"] for c in rec.named("cudaEventCreate", "") if c["ret"] == 0}
    stops = [c for c in rec.named("cudaEventRecord", LOOP) if c["ret"] == 0 and c["event"] in timing]
    end = max(index[id(c)] for c in launched)
    copy = next((c for c in rec.lines[end:] if c["call"] == "cudaMemcpy" and c["in"] == ""), None)
    if not stops or copy is None:
        report.wrong(f"the record ({setting}) has no {'timing event recorded in the loop' if not stops else 'copy back'}"
                     " by the harness: put the given harness back as it was")
        return False
    s = rec.op_of(stops[0]).stream  # the harness's stream
    untimed, unread = [], []
    for launch in launched:
        op = rec.op_of(launch)
        stop = next((c for c in stops if index[id(c)] > index[id(launch)]), None)
        if stop is None or not rec.before(op, rec.op_of(stop)):
            untimed.append(op)
        if not rec.before(op, rec.op_of(copy)):
            unread.append(op)
    if not untimed and not unread:
        return True
    where = [launch_stream(rec, w, s) for w in dict.fromkeys(op.stream for op in untimed + unread)]
    late = ([f"{len(untimed)} of {len(launched)} launches are not done before the timing event recorded after them on "
             "s"] if untimed else []) + ([f"{len(unread)} of {len(launched)} not before the copy back of out "
                                          "(cudaMemcpy, on the legacy default stream)"] if unread else [])
    so = " and ".join((["the timing then measures no launch"] if untimed else [])
                      + (["the copy may read out before the graph wrote it"] if unread else []))
    report.wrong(f"order (record, {setting}): the graph is launched into {checks.english(w for w, _ in where)}, which "
                 f"the harness's reading of its work does not wait for: {' and '.join(late)}. {so.capitalize()}. "
                 "Launch exec into s (TODO 2), or make "
                 "s wait for each launch: cudaEventRecord on the launch's stream after it, then "
                 "cudaStreamWaitEvent(s, that event)" + (f" ({NON_BLOCKING})" if any(n for _, n in where) else ""))
    return False


def launch_stream(rec, stream, s) -> tuple[str, bool]:
    """A stream the graph was launched into, in words with how it was made, and whether it is non-blocking."""
    made = next((c for c in rec.named("cudaStreamCreate") if c["ret"] == 0 and (c["pid"], c["stream"]) == stream),
                None)
    words = stream_words(stream, {s: "s"})
    if made is None:
        return words, False
    non_blocking = bool(made.get("flags", 0) & calls.NON_BLOCKING)
    return (f"{words}, a {'non-blocking' if non_blocking else 'blocking'} stream "
            f"{'your code' if made['in'] else 'the harness'} created", non_blocking)


def graph_shape(report, g, rec, setting: str) -> str | None:
    """What one instantiated graph holds, said in words; None (and WRONG or not verified) where it is not right."""
    kernels = g.kernels()
    if any(k.get("kernel", "?") == "?" or k.get("args") is None for k in kernels):
        report.unverified("the graph's own edges", "this driver cannot tell the recorder which buffers the graph's "
                                                  "kernel nodes were given (a CUDA 12.4 driver or newer can)")
        return None
    missing = [k for k in KERNELS if not g.kernels(k)]
    if missing:
        report.wrong(f"the graph (record, {setting}) has no {checks.english(missing)} kernel node: one launch of "
                     "the graph is one iteration, with both kernels (TODO 1)")
        return None
    allocs, frees = g.of_type(calls.ALLOC_NODE), g.of_type(calls.FREE_NODE)
    users = {id(k) for a in allocs for k in g.uses(a)}
    outside = [k for name in KERNELS for k in g.kernels(name) if id(k) not in users]
    if not allocs or outside:
        elsewhere = any(b.stream_ordered for b in rec.all_buffers for k in outside
                        for v in k.get("args") or [] if v and b.ptr <= int(v, 16) < b.ptr + max(b.size, 1))
        report.wrong(f"the graph (record, {setting}) has {len(allocs)} memory allocation node(s), and "
                     f"{checks.english(sorted({calls.kernel_name(k['kernel']) for k in outside})) or 'no kernel'} "
                     f"use{'s' if len(outside) == 1 else ''} memory the graph does not allocate"
                     + (" (a cudaMallocAsync made outside the graph)" if elsewhere else "")
                     + ": allocate tmp inside the graph (a captured cudaMallocAsync, or an allocation node), so that "
                       "the graph owns its scratch memory (TODO 1)")
        return None
    unfreed = [a for a in allocs if not any(f.get("ptr") == a.get("ptr") for f in frees)]
    if unfreed:
        report.wrong(f"the graph (record, {setting}) allocates tmp but has no free node for it: each launch leaves "
                     "its allocation unfreed, so the next launch fails (unless something outside the graph frees it "
                     "first, §16.3.3), or, with "
                     "cudaGraphInstantiateFlagAutoFreeOnLaunch, frees it first, and the last launch's allocation "
                     "stays in use and keeps its memory after the trim; free tmp in the graph (a captured "
                     "cudaFreeAsync, or a free node), after the kernels that use it (TODO 1)")
        return None
    problems = g.problems()
    if problems:
        kind, _, k = problems[0]
        name = calls.kernel_name(k["kernel"])
        report.wrong(f"the graph's own edges (record, {setting}): {name} is not ordered "
                     + ("after the allocation node: it may touch tmp before it is allocated. Make it depend on the "
                        "allocation node, directly or through others" if kind == "before its allocation" else
                        "before the free node: the free may run while it still uses tmp. Make the free node depend "
                        "on every node that uses tmp, directly or through others")
                     + f" ({len(problems)} such use(s); {LIFETIME})")
        return None
    return (f"{len(allocs)} allocation node(s), {len(kernels)} kernel node(s) and {len(frees)} free node(s)")


# -- what the run shows ------------------------------------------------------------------------------------------
def tables(recs, mem, label):
    show([{"phase": p, "reserved MiB": r["reserved"] / MiB, "used MiB": r["used"] / MiB,
           "reserved high MiB": r["reserved_high"] / MiB, "used high MiB": r["used_high"] / MiB}
          for p, r in mem.items()], label, title="The graph allocator's memory")
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
        rows.append({"loop": "first graph launch", "iterations": 1, "device µs (median)": times["graph"]["device_us"][0],
                     "host µs to enqueue (median)": times["graph"]["host_us"][0]})
    show(rows, label, title="One iteration: uncaptured vs graph (for information)")


def results(report, recs):
    for loop, who in (("graph", "the graph"), ("stream", "the uncaptured loop (given)")):
        r = recs.one(what="result", loop=loop)
        hint = " (out is untouched: was the graph launched?)" if loop == "graph" and r["got"] == 0 else ""
        unit = "launches" if loop == "graph" else "iterations"
        report.expect(r["errors"] == 0, f"result of {who}: all {r['n']:,} elements right after {r['times']} {unit}",
                      f"result of {who} after {r['times']} {unit}: element {r['first_bad']} is {r['got']:g}, expected "
                      f"{r['expected']:g} ({r['errors']:,} of {r['n']:,} wrong){hint}")


def graph_memory(report, mem):
    launched, start, destroyed, trimmed = (mem[p] for p in ("launched", "start", "destroyed", "trimmed"))
    chunk = (f"; it reserves physical memory in chunks, here {launched['reserved'] / (N * 4):g}× what the graph "
             "allocates" if launched["reserved"] > N * 4 else "")
    report.expect(launched["reserved"] > 0,
                  f"while the executable graph exists, the graph allocator reserves {in_mib(launched['reserved'])} "
                  f"(used: {in_mib(launched['used'])}) for a {in_mib(N * 4)} buffer{chunk}",
                  "while the executable graph exists, the graph allocator reserves nothing: the graph allocates no "
                  "memory of its own (is the allocation in the graph, and the graph launched?)")
    if launched["reserved"] > 0:
        report.expect(trimmed["reserved"] <= start["reserved"] and trimmed["used"] <= start["used"],
                      f"after cudaDeviceGraphMemTrim the graph allocator reserves {in_mib(trimmed['reserved'])}, as at the "
                      f"start ({in_mib(start['reserved'])}); between TODO 3 and TODO 4 it reserved "
                      f"{in_mib(destroyed['reserved'])} (used: {in_mib(destroyed['used'])})",
                      f"at the end the graph allocator still reserves {in_mib(trimmed['reserved'])} (at the start: "
                      f"{in_mib(start['reserved'])}; used: {in_mib(trimmed['used'])}): once the graph's launches have "
                      "completed, call cudaDeviceGraphMemTrim, and let the graph free what it allocates (TODO 1, 3 "
                      "and 4)")


# -- what the code explains ---------------------------------------------------------------------------------------
def captured(report, code):
    """Built by stream capture: the allocation, the kernels and the free between BeginCapture and EndCapture, on
    the capturing stream (or on a stream that joined the capture by waiting for an event recorded in it)."""
    order = Order(code)
    begins, ends = order.find("cudaStreamBeginCapture"), order.find("cudaStreamEndCapture")
    if not begins or not ends:
        report.wrong("the graph is neither captured (cudaStreamBeginCapture ... cudaStreamEndCapture on s) nor built "
                     f"node by node ({' and '.join(NODES)}): capture one iteration into `graph` (TODO 1)")
        return
    b = begins[0]
    e = next((op for op in ends if op.pos > b.pos), None)
    if e is None:
        report.wrong("cudaStreamEndCapture comes before cudaStreamBeginCapture: the capture must begin first")
        return
    if "?" not in (b.stream, e.stream) and b.stream != e.stream:
        report.wrong(f"the capture is begun on `{b.written}` and ended on `{e.written}`: it must end on the stream it "
                     "began on (TODO 1)")
    streams = {b.stream}  # the capturing stream, and those that join it by waiting for an event recorded in it
    for op in order.ops:
        if b.pos < op.pos < e.pos and op.what == "cudaStreamWaitEvent" and any(
                r.stream in streams for r in order.find("cudaEventRecord", event=op.event, start=b.pos, end=op.pos)):
            streams.add(op.stream)
    inside = [op for op in order.ops if b.pos < op.pos < e.pos]

    def where(whats, what: str, good: str, missing: str):
        ops = [op for op in inside if op.what in whats]
        on = [op for op in ops if op.stream in streams and op.stream != "?"]
        if on:
            report.ok(good + f" (on `{on[0].written}`, captured)")
        elif any(op.stream == "?" or b.stream == "?" for op in ops):
            cannot_tell(report, f"whether {what} is captured", "The reading cannot follow the stream "
                        f"{', '.join(dict.fromkeys(f'`{op.written}`' for op in ops + [b]))}")
        elif ops:
            report.wrong(f"{what} is called between cudaStreamBeginCapture and cudaStreamEndCapture, but on "
                         f"`{ops[0].written}`, while the capture is on `{b.written}`: work on a stream that is not "
                         "capturing runs at once and is not in the graph; issue it on the capturing stream (TODO 1)")
        else:
            report.wrong(missing)

    where(("cudaMallocAsync", "cudaMallocFromPoolAsync"), "cudaMallocAsync",
          "cudaMallocAsync is inside the captured region: the graph gets a memory allocation node",
          "the allocation is not captured: cudaMallocAsync is not called between cudaStreamBeginCapture and "
          "cudaStreamEndCapture, so the graph has no allocation node and owns no memory; allocate tmp inside "
          "the capture, on s (TODO 1)")
    where(("cudaFreeAsync",), "cudaFreeAsync",
          "cudaFreeAsync is inside the captured region: the graph gets a memory free node",
          "the free is not captured: cudaFreeAsync is not called between cudaStreamBeginCapture and "
          "cudaStreamEndCapture, so each launch leaves its allocation unfreed: the next launch then fails (unless "
          "something outside the graph frees it first, §16.3.3), "
          "or, with cudaGraphInstantiateFlagAutoFreeOnLaunch, frees it first, but the last launch's "
          "allocation stays in use and keeps its memory reserved after the trim; capture the free with the "
          "rest (TODO 1)")
    kernels = {name for name, _ in cppsource.launches(code)}
    where(kernels, "a kernel", "the kernels are captured too",
          "no kernel is launched inside the captured region: capture produce and accumulate (TODO 1)")


def built_node_by_node(report, code, ran: bool):
    """Built with the graph API: an allocation node, kernel nodes and a free node (the typed calls, or the generic
    cudaGraphAddNode). Their dependencies are the record's to judge (recorded_graph), not the source's."""
    generic = bool(cppsource.calls(code, "cudaGraphAddNode"))
    missing = [] if generic else [n for n in ("cudaGraphAddMemAllocNode", "cudaGraphAddKernelNode",
                                              "cudaGraphAddMemFreeNode") if not cppsource.calls(code, n)]
    report.expect(not missing, "the graph is built node by node" + (" (cudaGraphAddNode)" if generic else
                                                                    ": cudaGraphAddMemAllocNode, cudaGraphAddKernelNode "
                                                                    "and cudaGraphAddMemFreeNode are called"),
                  f"the graph is built node by node, without {' or '.join(missing)}: it needs an allocation node, "
                  "the kernels and a free node of tmp (TODO 1)")
    if not missing and not ran:
        cannot_tell(report, "whether the free node depends on every node that uses tmp", "The record of the run "
                    "reads the graph's own edges")


def launched_in_the_loop(report, code):
    if cppsource.calls(code, "cudaGraphLaunch"):
        report.expect(cppsource.calls_in_loops(code, "cudaGraphLaunch") > 0, "cudaGraphLaunch is called in the loop",
                      "cudaGraphLaunch is not called inside the timed loop: the graph is to be launched once per "
                      "iteration (TODO 2)")


def trimmed_once_the_launches_completed(report, code):
    """The trim frees only what no executing or scheduled graph uses: after a host wait that covers the launches
    (cudaDeviceSynchronize, a synchronization of the stream they run in, or of an event recorded after them)."""
    order = Order(code)
    trims, launches = cppsource.calls(code, "cudaDeviceGraphMemTrim"), order.find("cudaGraphLaunch")
    if not trims or not launches:
        return
    last = launches[-1]
    if order.host_waited(last, max(trims)):
        report.ok("cudaDeviceGraphMemTrim is called once the graph's launches have completed (after a host "
                  f"synchronization that covers the last launch, on {f'`{last.written}`'})")
    elif last.stream == "?" or any(o.stream == "?" or o.event == "?" for o in order.ops
                                   if o.what in SYNCS and last.pos < o.pos < max(trims)):
        cannot_tell(report, "whether the launches have completed before cudaDeviceGraphMemTrim",
                    "The reading cannot follow the stream or event of a synchronization; the graph memory at the "
                    "end judges it")
    else:
        report.wrong("cudaDeviceGraphMemTrim is called before the graph's launches have completed: it frees only "
                     "memory that no executing or scheduled graph uses, so trim once the graph's launches have "
                     f"completed, after a synchronization that covers the last cudaGraphLaunch (of `{last.written}`: "
                     "cudaStreamSynchronize of that stream, or cudaDeviceSynchronize) (TODO 4)")
