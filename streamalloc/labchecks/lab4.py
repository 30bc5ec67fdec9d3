"""Lab 4 (capture it): graph.cu's graph, results and graph memory, then how its code builds, launches and frees
the graph (by stream capture, or node by node with the graph API).

The run decides the order inside the graph: graph.cu reads the graph back (its nodes, what each allocates, frees or
touches, and its edges), and the free node must come after every node that touches the allocation, each of which
must come after the allocation node (Guide §16.3, "A program must guarantee that operations accessing graph
memory are ordered after the allocation node [and] before the operation freeing the memory"). No timing can show
a free that does not wait inside a graph (the graph keeps its memory mapped), so the edges decide, and
compute-sanitizer, which §16.4.2 names for accesses outside an allocation's lifetime, runs the program too.

The fields graph.cu prints are declared in the comment block at the top of its source, in
solutions/lab4_capture_graph.ipynb.
"""
from __future__ import annotations

from .. import checks, cppsource, measure, sanitizer
from .common import MiB, SYNCS, show
from .streams import Order, cannot_tell

TITLE = "Lab 4: capture it"
FILE = "graph.cu"
N, LAUNCHES, ITERATIONS = 1 << 22, 100, 100  # 16 MiB of floats per allocation; graph launches; loop iterations
NEEDED = {  # the calls the lab asks for, however the graph is built, and why
    ("cudaGraphInstantiate", "cudaGraphInstantiateWithFlags"): "a graph is launched as an executable graph (TODO 1)",
    ("cudaGraphLaunch",): "launch the executable graph in the timed loop (TODO 2)",
    ("cudaGraphExecDestroy",): "destroy the executable graph at the end (TODO 3)",
    ("cudaGraphDestroy",): "destroy the graph too, at the end (TODO 3)",
    ("cudaDeviceGraphMemTrim",): "without it the graph allocator keeps its physical memory after the graph is "
                                 "destroyed (Graph Memory Nodes, Physical Memory Footprint) (TODO 4)",
}
NODES = ("cudaGraphAddMemAllocNode", "cudaGraphAddMemFreeNode")  # the graph built node by node
SANITIZER_ARGS = [1 << 16, 3, 3]  # small and short: the sanitizer slows every access down
SANITIZER = [*sanitizer.STREAM_ORDER_RACES, "--print-limit", "10", "--error-exitcode", "99"]
LIFETIME = "Guide §16.3 API Fundamentals: accesses ordered after the allocation node, before the free"


def lab4(lesson) -> None:
    """Builds graph.cu, runs it, and reads how main builds, launches and frees the graph."""
    report = checks.Report(TITLE, lesson)
    res = report.run(FILE, [N, LAUNCHES, ITERATIONS], timeout=60, what="the results and the graph memory")
    if res is not None:
        recs = res.records
        mem = {r["phase"]: r for r in recs.where(what="graph_mem")}
        tables(recs, mem, res.label)
        the_graph_allocates_and_frees(report, recs.one(what="graph"))
        the_free_follows_every_use(report, recs.where(what="graph_node"))
        results(report, recs)
        graph_memory(report, mem)
    report.sanitize(FILE, SANITIZER_ARGS, SANITIZER, timeout=300, clean="no access outside tmp's lifetime",
                    errors=", such as an access to tmp after its free node")
    code = report.read(FILE, "main")
    if code:
        report.require_calls(code, NEEDED)
        if cppsource.calls(code, "cudaStreamBeginCapture") or not any(cppsource.calls(code, n) for n in NODES):
            captured(report, code)
        else:
            built_node_by_node(report, code, ran=res is not None)
        launched_in_the_loop(report, code)
        trimmed_once_the_launches_completed(report, code)
    report.finish()


def mib(nbytes):
    return f"{nbytes / MiB:.1f} MiB"


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


def the_graph_allocates_and_frees(report, graph):
    report.expect(graph["alloc_nodes"] >= 1 and graph["free_nodes"] >= 1,
                  f"the graph has {graph['nodes']} nodes: {graph['alloc_nodes']} memory allocation, "
                  f"{graph['kernel_nodes']} kernel, {graph['free_nodes']} memory free",
                  ("there is no graph: `graph` is still empty after TODO 1" if not graph["captured"] else
                   f"the graph has {graph['nodes']} nodes but {graph['alloc_nodes']} memory allocation and "
                   f"{graph['free_nodes']} memory free nodes: the allocation and the free of tmp must be in the graph, "
                   "with the kernels"))


def the_free_follows_every_use(report, nodes):
    """From the graph's own edges: every node that touches an allocation comes after its alloc node, and the free
    node of that allocation after every one of them."""
    if not nodes:
        return
    deps = {n["id"]: set(n["deps"]) for n in nodes}

    def ancestors(i, seen=None):
        seen = set() if seen is None else seen
        for d in deps.get(i, ()):
            if d not in seen:
                seen.add(d)
                ancestors(d, seen)
        return seen

    name = {n["id"]: (n["kernel"] if n["type"] == "kernel" else n["type"]) + f" (node {n['id']})" for n in nodes}
    for a in (n for n in nodes if n["type"] == "alloc"):
        users = [n for n in nodes if n["allocation"] == a["id"] and n["type"] not in ("alloc", "free")]
        frees = [n for n in nodes if n["type"] == "free" and n["allocation"] == a["id"]]
        early = [name[u["id"]] for u in users if a["id"] not in ancestors(u["id"])]
        report.expect(not early, f"the graph's edges: {checks.english([name[u['id']] for u in users]) or 'no node'} "
                                 f"come after {name[a['id']]}",
                      f"the graph's edges: {checks.english(early)} {'does' if len(early) == 1 else 'do'} not depend on "
                      f"{name[a['id']]}, so {'it' if len(early) == 1 else 'they'} may touch tmp before it is "
                      f"allocated ({LIFETIME})")
        for f in frees:
            before = ancestors(f["id"])
            loose = [name[u["id"]] for u in users if u["id"] not in before]
            report.expect(not loose, f"the graph's edges: {name[f['id']]} comes after every node that touches the "
                                     f"allocation ({checks.english([name[u['id']] for u in users]) or 'none'})",
                          f"the graph's edges: {name[f['id']]} does not depend on {checks.english(loose)}, which "
                          f"{'touches' if len(loose) == 1 else 'touch'} the allocation: the free may run while "
                          f"{'it' if len(loose) == 1 else 'they'} still use{'s' if len(loose) == 1 else ''} tmp. Make the free node "
                          f"depend on every node that uses tmp, directly or through others ({LIFETIME})")


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
                  f"while the executable graph exists, the graph allocator reserves {mib(launched['reserved'])} "
                  f"(used: {mib(launched['used'])}) for a {mib(N * 4)} buffer{chunk}",
                  "while the executable graph exists, the graph allocator reserves nothing: the graph allocates no "
                  "memory of its own (is the allocation in the graph, and the graph launched?)")
    if launched["reserved"] > 0:
        report.expect(trimmed["reserved"] <= start["reserved"] and trimmed["used"] <= start["used"],
                      f"after cudaDeviceGraphMemTrim the graph allocator reserves {mib(trimmed['reserved'])}, as at the "
                      f"start ({mib(start['reserved'])}); between TODO 3 and TODO 4 it reserved "
                      f"{mib(destroyed['reserved'])} (used: {mib(destroyed['used'])})",
                      f"at the end the graph allocator still reserves {mib(trimmed['reserved'])} (at the start: "
                      f"{mib(start['reserved'])}; used: {mib(trimmed['used'])}): once the graph's launches have "
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
          "cudaStreamEndCapture, so each launch leaves its allocation unfreed: the next launch then fails, "
          "or, with cudaGraphInstantiateFlagAutoFreeOnLaunch, frees it first, but the last launch's "
          "allocation stays in use and keeps its memory reserved after the trim; capture the free with the "
          "rest (TODO 1)")
    kernels = {name for name, _ in cppsource.launches(code)}
    where(kernels, "a kernel", "the kernels are captured too",
          "no kernel is launched inside the captured region: capture produce and accumulate (TODO 1)")


def built_node_by_node(report, code, ran: bool):
    """Built with the graph API: an allocation node, kernel nodes and a free node. Their dependencies are read
    from the graph at run time (the_free_follows_every_use), not from the source."""
    missing = [n for n in (*NODES, "cudaGraphAddKernelNode") if not cppsource.calls(code, n)]
    report.expect(not missing, "the graph is built node by node: cudaGraphAddMemAllocNode, cudaGraphAddKernelNode "
                               "and cudaGraphAddMemFreeNode are called",
                  f"the graph is built node by node, without {' or '.join(missing)}: it needs an allocation node, "
                  "the kernels and a free node of tmp (TODO 1)")
    if not missing and not ran:
        cannot_tell(report, "whether the free node depends on every node that uses tmp", "The run reads the "
                    "graph's own edges")


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
