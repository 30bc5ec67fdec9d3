"""Lab 4 (capture it): plausible wrong answers are rejected by the lab's own check, naming what is wrong.

Each test puts a wrong answer into the solution's regions and runs the lab's set-up, %%writefile and check
cells (tests/labcheck.py) in this session's mode. The words asserted come from the check's reading of the
code, which judges them live and in replay alike (in replay the run is "not checked" for code that is not
the recorded solution); live, the run adds what it measured, and some tests assert that too. The run-time
verdicts are also tested on canned output at the end of this file. Slow-but-OK: each run takes about 10 s
in replay.
"""
import importlib
import json

import pytest
from labcheck import LIVE, Lab, Protocol, all_passed, in_the_driver_api, regions, verdict_of

LAB = Lab("lab4_capture_graph", "graph.cu")

# The buffer allocated once before the capture, only the kernels captured, freed at the end.
ALLOCATED_BEFORE_CAPTURE = """\
float *tmp = nullptr;
CHECK(cudaMallocAsync(&tmp, bytes, s));  // once, before the capture
CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
produce<<<blocks, threads, 0, s>>>(tmp, n);
CHECK_LAUNCH();
accumulate<<<blocks, threads, 0, s>>>(tmp, out, n);
CHECK_LAUNCH();
CHECK(cudaStreamEndCapture(s, &graph));
CHECK(cudaGraphInstantiate(&exec, graph, 0));
"""
FREED_AT_THE_END = """\
CHECK(cudaFreeAsync(tmp, s));
CHECK(cudaGraphExecDestroy(exec));
CHECK(cudaGraphDestroy(graph));
CHECK(cudaDeviceSynchronize());
"""
# The stream-ordered pool trimmed instead of the graph allocator: a different pool.
POOL_TRIM_INSTEAD = """\
cudaMemPool_t pool;
CHECK(cudaDeviceGetDefaultMemPool(&pool, dev));
CHECK(cudaMemPoolTrimTo(pool, 0));
"""


def test_an_allocation_made_once_before_the_capture_is_not_captured():
    """The record decides (live): the graph's kernels use memory it does not allocate. In replay the reading only
    points at the line, and the verdict is never "All checks passed"."""
    check = LAB.check("allocated before the capture",
                      lambda cu: regions(cu, {0: ALLOCATED_BEFORE_CAPTURE, 2: FREED_AT_THE_END}))
    assert not all_passed(check.verdict), check.printed
    assert "the allocation is not captured" in check.printed, check.printed
    if LIVE:
        assert check.ename == "LabIncomplete" and "memory the graph does not allocate" in check.evalue, check.evalue


def test_trimming_the_stream_ordered_pool_is_not_the_graph_trim():
    check = LAB.rejected("stream-ordered pool trimmed instead", lambda cu: regions(cu, {3: POOL_TRIM_INSTEAD}),
                         "cudaDeviceGraphMemTrim is not called")
    if LIVE:  # the run shows it: the graph allocator's memory is still there at the end
        assert "at the end the graph allocator still reserves" in check.evalue, check.printed


def test_the_captured_graph_must_be_destroyed_too():
    LAB.rejected("only the executable graph destroyed",
                 lambda cu: regions(cu, {2: "CHECK(cudaGraphExecDestroy(exec));\nCHECK(cudaDeviceSynchronize());"}),
                 "cudaGraphDestroy is not called")


def test_trimming_before_the_destroy_once_the_launches_are_done_passes():
    """The trim frees what no executing or scheduled graph uses: after the launches have completed, an idle
    executable graph that still exists does not stop it."""
    LAB.passes("trimmed before the destroy", lambda cu: regions(cu, {
        2: "CHECK(cudaDeviceGraphMemTrim(dev));  // the launches are done: s was synchronized\n"
           "CHECK(cudaGraphExecDestroy(exec));\nCHECK(cudaGraphDestroy(graph));\nCHECK(cudaDeviceSynchronize());",
        3: ""}))


def test_trimming_while_the_launches_may_still_run_is_rejected():
    """Live, the graph memory at the end decides; in replay the reading points at the trim, never "passed"."""
    launch_and_trim = "CHECK(cudaGraphLaunch(exec, s));\nCHECK(cudaDeviceGraphMemTrim(dev));"
    check = LAB.check("trimmed in the launch loop", lambda cu: regions(cu, {1: launch_and_trim, 3: ""}))
    assert not all_passed(check.verdict), check.printed
    assert "cudaDeviceGraphMemTrim is called before the graph's launches have completed" in check.printed
    if LIVE:
        assert check.ename == "LabIncomplete" and "still reserves" in check.evalue, check.evalue


# The free left out of the capture, and the graph instantiated to free the previous launch's allocation.
AUTO_FREE_NOT_CAPTURED = """\
CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
float *tmp = nullptr;
CHECK(cudaMallocAsync(&tmp, bytes, s));
produce<<<blocks, threads, 0, s>>>(tmp, n);
CHECK_LAUNCH();
accumulate<<<blocks, threads, 0, s>>>(tmp, out, n);
CHECK_LAUNCH();
CHECK(cudaStreamEndCapture(s, &graph));
CHECK(cudaGraphInstantiateWithFlags(&exec, graph, cudaGraphInstantiateFlagAutoFreeOnLaunch));
"""


def test_a_free_left_out_of_the_capture_is_rejected_even_with_auto_free():
    check = LAB.check("free not captured, auto-free on launch", lambda cu: regions(cu, {0: AUTO_FREE_NOT_CAPTURED}))
    assert not all_passed(check.verdict) and "the free is not captured" in check.printed, check.printed
    if LIVE:  # every launch runs and the results are right; the record's graph has no free node
        assert "result of the graph: all" in check.printed, check.printed
        assert check.ename == "LabIncomplete" and "has no free node" in check.evalue, check.evalue


# The same graph built node by node with the graph API instead of stream capture.
NODE_API = """\
CHECK(cudaGraphCreate(&graph, 0));
cudaMemAllocNodeParams alloc = {};  // tmp: an allocation node, owned by the graph
alloc.poolProps.allocType = cudaMemAllocationTypePinned;
alloc.poolProps.location.type = cudaMemLocationTypeDevice;
alloc.poolProps.location.id = dev;
alloc.bytesize = bytes;
cudaGraphNode_t alloc_node, produce_node, accumulate_node, free_node;
CHECK(cudaGraphAddMemAllocNode(&alloc_node, graph, nullptr, 0, &alloc));
float *tmp = static_cast<float *>(alloc.dptr);
int count = n;
void *produce_args[] = {&tmp, &count};
cudaKernelNodeParams kernel = {};
kernel.func = (void *)produce;
kernel.gridDim = dim3(blocks);
kernel.blockDim = dim3(threads);
kernel.kernelParams = produce_args;
CHECK(cudaGraphAddKernelNode(&produce_node, graph, &alloc_node, 1, &kernel));
void *accumulate_args[] = {&tmp, &out, &count};
kernel.func = (void *)accumulate;
kernel.kernelParams = accumulate_args;
CHECK(cudaGraphAddKernelNode(&accumulate_node, graph, &produce_node, 1, &kernel));
CHECK(cudaGraphAddMemFreeNode(&free_node, graph, &accumulate_node, 1, tmp));  // the graph frees what it allocated
CHECK(cudaGraphInstantiate(&exec, graph, 0));
"""


def test_the_graph_built_node_by_node_passes():
    check = LAB.passes("built with the graph node API", lambda cu: regions(cu, {0: NODE_API}))
    if LIVE:  # the record shows the same graph as the capture gives
        assert "1 allocation node(s), 2 kernel node(s) and 1 free node(s)" in check.printed, check.printed


def test_a_graph_built_node_by_node_without_its_free_is_rejected():
    edit = lambda cu: regions(cu, {0: NODE_API.replace(  # noqa: E731
        "CHECK(cudaGraphAddMemFreeNode(&free_node, graph, &accumulate_node, 1, tmp));", "")})
    check = LAB.check("node API without the free node", edit)
    assert not all_passed(check.verdict) and "without cudaGraphAddMemFreeNode" in check.printed
    if LIVE:  # the second launch fails: the first launch's allocation is still unfreed
        assert check.ename == "LabIncomplete", check.printed




ON_ANOTHER_STREAM = """\
cudaStream_t s2;
CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
CHECK(cudaStreamBeginCapture(s2, cudaStreamCaptureModeGlobal));  // begun on s2, the work on s
{
    float *tmp = nullptr;
    CHECK(cudaMallocAsync(&tmp, bytes, s));
    produce<<<blocks, threads, 0, s>>>(tmp, n);
    CHECK_LAUNCH();
    accumulate<<<blocks, threads, 0, s>>>(tmp, out, n);
    CHECK_LAUNCH();
    CHECK(cudaFreeAsync(tmp, s));
}
CHECK(cudaStreamEndCapture(s2, &graph));
CHECK(cudaGraphInstantiate(&exec, graph, 0));
"""
FREE_NODE_AFTER_PRODUCE = NODE_API.replace("CHECK(cudaGraphAddMemFreeNode(&free_node, graph, &accumulate_node, 1, tmp));",
                                           "CHECK(cudaGraphAddMemFreeNode(&free_node, graph, &produce_node, 1, tmp));")
PRODUCE_WITHOUT_DEPENDENCY = NODE_API.replace(
    "CHECK(cudaGraphAddKernelNode(&produce_node, graph, &alloc_node, 1, &kernel));",
    "CHECK(cudaGraphAddKernelNode(&produce_node, graph, nullptr, 0, &kernel));")

# -- answers in other styles: the notebook's check, in this session's mode ------------------------------------------
# Each answer's source is here and only here: name -> {region: body} (region 0: TODO 1, 1: the launch, 2: TODO 3,
# 3: TODO 4), with ABOVE_MAIN[name] put above main where the answer needs a helper there.
CAPTURE = """\
float *tmp = nullptr;
CHECK(cudaMallocAsync(&tmp, bytes, s));
produce<<<blocks, threads, 0, s>>>(tmp, n);
CHECK_LAUNCH();
accumulate<<<blocks, threads, 0, s>>>(tmp, out, n);
CHECK_LAUNCH();
CHECK(cudaFreeAsync(tmp, s));
"""
GENERIC_NODES = """\
CHECK(cudaGraphCreate(&graph, 0));
cudaGraphNodeParams a = {};  // the generic node API: one call for every kind of node
a.type = cudaGraphNodeTypeMemAlloc;
a.alloc.poolProps.allocType = cudaMemAllocationTypePinned;
a.alloc.poolProps.location.type = cudaMemLocationTypeDevice;
a.alloc.poolProps.location.id = dev;
a.alloc.bytesize = bytes;
cudaGraphNode_t na, np, nc, nf;
#if CUDART_VERSION >= 13000
#define ADD(node, deps, count, params) CHECK(cudaGraphAddNode(&node, graph, deps, nullptr, count, &params))
#else
#define ADD(node, deps, count, params) CHECK(cudaGraphAddNode(&node, graph, deps, count, &params))
#endif
ADD(na, nullptr, 0, a);
float *scratch = static_cast<float *>(a.alloc.dptr);
int count = n;
void *pargs[] = {&scratch, &count};
void *cargs[] = {&scratch, &out, &count};
cudaGraphNodeParams k = {};
k.type = cudaGraphNodeTypeKernel;
k.kernel.func = (void *)produce;
k.kernel.gridDim = dim3(blocks);
k.kernel.blockDim = dim3(threads);
k.kernel.kernelParams = pargs;
ADD(np, &na, 1, k);
k.kernel.func = (void *)accumulate;
k.kernel.kernelParams = cargs;
ADD(nc, &np, 1, k);
cudaGraphNodeParams f = {};
f.type = cudaGraphNodeTypeMemFree;
f.free.dptr = scratch;
ADD(nf, &nc, 1, f);
#undef ADD
CHECK(cudaGraphInstantiate(&exec, graph, 0));
"""
# The graph launched into a stream of the answer's own (TODO 1 makes it, after the solution's capture), and what orders
# the harness's reading after it: its timing events on s and its copy back of out (a cudaMemcpy, on the legacy stream).
CAPTURED = ("CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));\n{\n" + CAPTURE +
            "}\nCHECK(cudaStreamEndCapture(s, &graph));\nCHECK(cudaGraphInstantiate(&exec, graph, 0));\n")
EVENTS = ("cudaEvent_t ready, done;\nCHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));\n"
          "CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));\n")
LAUNCHER = "cudaStream_t launcher;\nCHECK(cudaStreamCreateWithFlags(&launcher, cudaStreamNonBlocking));\n" + EVENTS
BLOCKING_LAUNCHER = "cudaStream_t launcher;\nCHECK(cudaStreamCreate(&launcher));  // synchronizes with stream 0\n"
RIGHT_ANSWERS = {
    "captured, instantiated with cudaGraphInstantiateWithParams": {0: (
        "CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));\n{\n" + CAPTURE +
        "}\nCHECK(cudaStreamEndCapture(s, &graph));\ncudaGraphInstantiateParams params = {};\n"
        "CHECK(cudaGraphInstantiateWithParams(&exec, graph, &params));")},
    "built with the generic cudaGraphAddNode": {0: GENERIC_NODES},
    "captured into a graph made first (cudaStreamBeginCaptureToGraph)": {0: (
        "CHECK(cudaGraphCreate(&graph, 0));\n"
        "CHECK(cudaStreamBeginCaptureToGraph(s, graph, nullptr, nullptr, 0, cudaStreamCaptureModeGlobal));\n{\n"
        + CAPTURE + "}\nCHECK(cudaStreamEndCapture(s, &graph));\nCHECK(cudaGraphInstantiate(&exec, graph, 0));")},
    "relaxed capture of a lambda, cudaMallocFromPoolAsync": {0: (
        "cudaMemPool_t pool;\nCHECK(cudaDeviceGetDefaultMemPool(&pool, dev));\n"
        "auto iteration = [&](cudaStream_t st) {\n    float *t = nullptr;\n"
        "    CHECK(cudaMallocFromPoolAsync(reinterpret_cast<void **>(&t), bytes, pool, st));\n"
        "    produce<<<blocks, threads, 0, st>>>(t, n);\n    accumulate<<<blocks, threads, 0, st>>>(t, out, n);\n"
        "    CHECK_LAUNCH();\n    CHECK(cudaFreeAsync(t, st));\n};\n"
        "CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));\niteration(s);\n"
        "CHECK(cudaStreamEndCapture(s, &graph));\nCHECK(cudaGraphInstantiateWithFlags(&exec, graph, 0));")},
    "a struct whose members capture and instantiate": {0: (
        "struct Recorder {\n    cudaStream_t st;\n    void begin() { CHECK(cudaStreamBeginCapture(st, "
        "cudaStreamCaptureModeThreadLocal)); }\n    void end(cudaGraph_t *g, cudaGraphExec_t *e) {\n"
        "        CHECK(cudaStreamEndCapture(st, g));\n        CHECK(cudaGraphInstantiate(e, *g, 0));\n    }\n};\n"
        "Recorder rec{s};\nrec.begin();\n{\n" + CAPTURE + "}\nrec.end(&graph, &exec);")},
    "macros, do { } while (0)": {0: (
        "#define BEGIN(st) do { CHECK(cudaStreamBeginCapture((st), cudaStreamCaptureModeGlobal)); } while (0)\n"
        "#define END(st, g, e) do { CHECK(cudaStreamEndCapture((st), &(g))); "
        "CHECK(cudaGraphInstantiate(&(e), (g), 0)); } while (0)\nBEGIN(s);\n{\n" + CAPTURE + "}\nEND(s, graph, exec);"),
        1: "#define LAUNCH(e, st) CHECK(cudaGraphLaunch((e), (st)))\nLAUNCH(exec, s);"},
    "a helper whose parameters are named like the caller's other variables": {0: (
        "one_iteration(out, s, n, blocks, threads, bytes);\nCHECK(cudaStreamEndCapture(s, &graph));\n"
        "CHECK(cudaGraphInstantiate(&exec, graph, 0));")},
    "launched through a lambda, trimmed before the destroy": {
        1: "auto go = [&](cudaStream_t into) { return cudaGraphLaunch(exec, into); };\nCHECK(go(s));",
        2: "CHECK(cudaDeviceGraphMemTrim(dev));  // the launches are done: s was synchronized\n"
           "CHECK(cudaGraphExecDestroy(exec));\nCHECK(cudaGraphDestroy(graph));\nCHECK(cudaDeviceSynchronize());",
        3: ""},
    # the launch stream, in styles the check was not written against: the record's happens-before order decides
    "launched on a launcher stream, with events both ways": {0: CAPTURED + LAUNCHER, 1: (
        "CHECK(cudaEventRecord(ready, s));\nCHECK(cudaStreamWaitEvent(launcher, ready, 0));\n"
        "CHECK(cudaGraphLaunch(exec, launcher));\nCHECK(cudaEventRecord(done, launcher));\n"
        "CHECK(cudaStreamWaitEvent(s, done, 0));")},
    "launched on a launcher stream the host waits for": {0: CAPTURED + LAUNCHER, 1: (
        "CHECK(cudaGraphLaunch(exec, launcher));\nCHECK(cudaStreamSynchronize(launcher));  // done before we go on")},
    "launched by a struct's member function, on s": {1: "const GraphOn go{exec, s};\ngo.launch();"},
}
ABOVE_MAIN = {  # the swapped names: `s` is the element count here, `n` the stream, `out` the block count
    "a helper whose parameters are named like the caller's other variables": """\
static void one_iteration(float *blocks, cudaStream_t n, int s, int out, int threads, size_t bytes) {
    CHECK(cudaStreamBeginCapture(n, cudaStreamCaptureModeGlobal));
    float *tmp = nullptr;
    CHECK(cudaMallocAsync(&tmp, bytes, n));
    produce<<<out, threads, 0, n>>>(tmp, s);
    CHECK_LAUNCH();
    accumulate<<<out, threads, 0, n>>>(tmp, blocks, s);
    CHECK_LAUNCH();
    CHECK(cudaFreeAsync(tmp, n));
}

""",
    "launched by a struct's member function, on s": """\
struct GraphOn {  // an executable graph and the stream it runs in
    cudaGraphExec_t g;
    cudaStream_t into;
    void launch() const { CHECK(cudaGraphLaunch(g, into)); }
};

"""}
FREE_BEFORE_ACCUMULATE = NODE_API.replace(
    "CHECK(cudaGraphAddKernelNode(&accumulate_node, graph, &produce_node, 1, &kernel));\n"
    "CHECK(cudaGraphAddMemFreeNode(&free_node, graph, &accumulate_node, 1, tmp));",
    "CHECK(cudaGraphAddMemFreeNode(&free_node, graph, &produce_node, 1, tmp));\n"
    "CHECK(cudaGraphAddKernelNode(&accumulate_node, graph, &free_node, 1, &kernel));  // after the free: wrong")
WRONG_ANSWERS = {  # name: ({region: body}, words the live rejection names)
    "the free node depends on produce only": ({0: FREE_NODE_AFTER_PRODUCE},
                                              ["accumulate is not ordered before the free node"]),
    "accumulate after the free node (a wrong edge)": ({0: FREE_BEFORE_ACCUMULATE},
                                                      ["accumulate is not ordered before the free node"]),
    "produce not after the allocation node": ({0: PRODUCE_WITHOUT_DEPENDENCY},
                                              ["produce is not ordered after the allocation node"]),
    "no free node, auto-free on launch": ({0: AUTO_FREE_NOT_CAPTURED}, ["has no free node"]),
    "allocated once before the capture": ({0: ALLOCATED_BEFORE_CAPTURE, 2: FREED_AT_THE_END},
                                          ["memory the graph does not allocate"]),
    "re-instantiated before every launch": ({1: "CHECK(cudaGraphExecDestroy(exec));\n"
                                                "CHECK(cudaGraphInstantiate(&exec, graph, 0));\n"
                                                "CHECK(cudaGraphLaunch(exec, s));"}, ["the timed loop instantiated"]),
    "every other iteration launched": ({1: "if (i % 2 == 0) CHECK(cudaGraphLaunch(exec, s));"},
                                       ["launches (record)"]),
    "all launches only for the default count": ({1: "if (launches == 100 || i == 0) CHECK(cudaGraphLaunch(exec, s));"},
                                                ["launches (record)"]),
    # live, the runtime refuses the allocation on s while s2 captures in global mode: the program stops there
    "capture begun on another stream than the work": ({0: ON_ANOTHER_STREAM}, ["graph exited with status 1"]),
    # launched where the harness's timing and copy back do not wait: the record's happens-before order tells
    "launched on a non-blocking launcher nothing waits for": (
        {0: CAPTURED + LAUNCHER, 1: "CHECK(cudaGraphLaunch(exec, launcher));"},
        ["order (record", "a non-blocking stream your code created", "not before the copy back of out"]),
    "s waits on the launcher's event recorded before the launch": (
        {0: CAPTURED + LAUNCHER, 1: "CHECK(cudaEventRecord(done, launcher));  // too early: before the launch\n"
                                    "CHECK(cudaGraphLaunch(exec, launcher));\nCHECK(cudaStreamWaitEvent(s, done, 0));"},
        ["order (record", "launches are not done before the timing event recorded after them on s"]),
    "a non-blocking launcher, s waits on an event of the legacy stream": (
        {0: CAPTURED + LAUNCHER, 1: "CHECK(cudaGraphLaunch(exec, launcher));\n"
                                    "CHECK(cudaEventRecord(done, 0));  // stream 0 waits for every stream?\n"
                                    "CHECK(cudaStreamWaitEvent(s, done, 0));"},
        ["order (record", "a non-blocking stream your code created", "no implicit synchronization with stream 0"]),
    "a blocking launcher: the copy waits for it, the timing does not": (
        {0: CAPTURED + BLOCKING_LAUNCHER, 1: "CHECK(cudaGraphLaunch(exec, launcher));"},
        ["order (record", "a blocking stream your code created", "not done before the timing event"]),
    "launched on the legacy stream 0": ({1: "CHECK(cudaGraphLaunch(exec, 0));"},
                                        ["order (record", "the legacy default stream (0)"]),
}


def answer(name, bodies):
    above = ABOVE_MAIN.get(name, "")
    return lambda cu: regions(cu, bodies).replace("int main(", above + "int main(", 1)


# -- the record's verdicts, on records written by hand in the recorder's format (any mode) --------------------------
from streamalloc import calls, checks  # noqa: E402

LAB4 = importlib.import_module("streamalloc.labchecks.lab4")
TMP, OUT, EXEC, S = "0x7000000", "0x9000000", "0xe1", "0x51"


def graph(edges, free=True, alloc=True, produce_arg=TMP):
    nodes = ([{"id": "a", "type": 10, "ptr": TMP, "size": 4096}] if alloc else []) + [
        {"id": "p", "type": 0, "kernel": "_Z7producePfi", "args": [produce_arg, None]},
        {"id": "c", "type": 0, "kernel": "_Z10accumulatePKfPfi", "args": [TMP, OUT, None]}]
    nodes += [{"id": "f", "type": 11, "ptr": TMP}] if free else []
    return {"nodes": nodes, "edges": [list(e) for e in edges]}


CHAIN_EDGES = [("a", "p"), ("p", "c"), ("c", "f")]


def launch_on(stream, exec_=EXEC):
    return [("cudaGraphLaunch", {"exec": exec_, "stream": stream})]


def record(dump, launches, instantiations_in_loop=0, exec_=EXEC, yours=(), launch=None):
    """graph.cu's calls as the recorder writes them: s made non-blocking, the harness's timing events, the graph
    instantiated in your section (after `yours`, lines of your own), the timed loop (each iteration: the start event on
    s, `launch(i)`'s lines, by default exec launched on s, the stop event on s), s synchronized, the copy back of out."""
    lines = [("cudaStreamCreate", {"stream": S, "flags": 1}), ("cudaMalloc", {"ptr": OUT, "size": 4096}),
             ("cudaLaunchKernel", {"stream": S, "kernel": "_Z7producePfi", "args": ["0x100", None]})]
    lines += [("cudaEventCreate", {"event": hex(0xe000 + k), "flags": 0}) for k in range(2 * launches)]
    lines += [("section", {"name": "yours"}), *yours,
              ("cudaGraphInstantiate", {"exec": exec_, "graph": "0xg", "nodes": dump}), ("section", {"name": "loop"})]
    for i in range(launches):
        lines.append(("cudaEventRecord", {"event": hex(0xe000 + i), "stream": S}))
        if i < instantiations_in_loop:
            lines.append(("cudaGraphInstantiate", {"exec": exec_, "graph": "0xg", "nodes": dump}))
        lines += launch(i) if launch else launch_on(S, exec_)
        lines.append(("cudaEventRecord", {"event": hex(0xe000 + launches + i), "stream": S}))
    lines += [("section", {"name": ""}), ("cudaStreamSynchronize", {"stream": S}),
              ("cudaMemcpy", {"dst": "0x55000", "src": OUT, "size": 4096, "kind": 2})]
    out = [{"seq": i, "t": i, "pid": 1, "tid": 1, "call": c, "ret": 0, **f} for i, (c, f) in enumerate(lines)]
    return calls.Calls(calls.parse("\n".join(json.dumps(x) for x in out)))


def judged(make):
    """recorded_graph on the two argument sets; make(launches) -> Calls."""
    report = checks.Report(LAB4.TITLE)
    LAB4.recorded_graph(report, [(args, make(args[1])) for args in LAB4.TRACE_ARGS])
    return report


def test_record_the_solution_s_graph_passes():
    report = judged(lambda k: record(graph(CHAIN_EDGES), k))
    assert not report.failed, str(report)
    assert "1 allocation node(s), 2 kernel node(s) and 1 free node(s)" in str(report)
    assert "recorded with 3 launches of 4,096 elements and with 7 launches of 1,024 elements" in str(report)


@pytest.mark.parametrize("edges,words", [
    ([("a", "p"), ("p", "c"), ("p", "f")], "accumulate is not ordered before the free node"),
    ([("a", "p"), ("p", "f"), ("f", "c")], "accumulate is not ordered before the free node"),
    ([("a", "c"), ("p", "c"), ("c", "f")], "produce is not ordered after the allocation node"),
])
def test_record_a_wrong_edge_is_found(edges, words):
    report = judged(lambda k: record(graph(edges), k))
    assert report.failed and words in str(report), str(report)


def test_record_a_graph_without_its_free_node_or_allocation_is_wrong():
    assert "has no free node" in str(judged(lambda k: record(graph(CHAIN_EDGES[:2], free=False), k)))
    report = judged(lambda k: record(graph([("p", "c")], free=False, alloc=False), k))
    assert report.failed and "memory the graph does not allocate" in str(report)


def test_record_launch_counts_and_instantiations_are_checked_in_both_runs():
    right_for_3_only = judged(lambda k: record(graph(CHAIN_EDGES), 3))
    assert right_for_3_only.failed and "with launches = 7, the timed loop launched a graph 3 time(s)" in \
        str(right_for_3_only)
    again = judged(lambda k: record(graph(CHAIN_EDGES), k, instantiations_in_loop=k))
    assert again.failed and "the timed loop instantiated a graph 3 times" in str(again)

# -- the run-time half on canned output: what a GPU's run of an answer prints decides -----------------------------
from streamalloc import labchecks  # noqa: E402

MiB = 1 << 20


def lab4_run(trimmed_reserved=0, launched_reserved=32 * MiB, alloc_nodes=1, free_nodes=1):
    mem = {"start": (0, 0), "instantiated": (0, 0), "launched": (launched_reserved, launched_reserved),
           "destroyed": (launched_reserved, launched_reserved), "trimmed": (trimmed_reserved, trimmed_reserved)}
    out = [{"what": "graph_mem", "phase": p, "used": u, "used_high": u, "reserved": r, "reserved_high": r}
           for p, (r, u) in mem.items()]
    out += [{"what": "timing", "loop": loop, "device_us": [28.0] * 100, "host_us": [3.0] * 100}
            for loop in ("stream", "graph")]
    out += [{"what": "result", "loop": loop, "n": 1 << 22, "times": t, "errors": 0, "first_bad": -1, "expected": 0.0,
             "got": 0.0} for loop, t in (("stream", 110), ("graph", 100))]
    out.append({"what": "graph", "captured": True, "instantiated": True, "nodes": 2 + alloc_nodes + free_nodes,
                "alloc_nodes": alloc_nodes, "free_nodes": free_nodes, "kernel_nodes": 2})
    return out


def test_canned_memory_left_after_the_trim_is_caught(tmp_path, capsys, canned_sanitizer):
    assert verdict_of(labchecks.lab4, LAB.canned(tmp_path, lab4_run())) == ""
    assert "reserves 32.0 MiB (used: 32.0 MiB) for a 16.0 MiB buffer; it reserves physical memory in chunks, " \
           "here 2× what the graph allocates" in capsys.readouterr().out
    left = verdict_of(labchecks.lab4, LAB.canned(tmp_path, lab4_run(trimmed_reserved=16 * MiB)))
    assert "at the end the graph allocator still reserves 16.0 MiB" in left
    nothing = verdict_of(labchecks.lab4, LAB.canned(tmp_path, lab4_run(launched_reserved=0, free_nodes=0)))
    assert "the graph allocator reserves nothing" in nothing


# -- the order around the launches, on records written by hand: each answer above that launches elsewhere than s ------
L = "0x5e"  # the answer's launcher stream


def made(flags):
    return [("cudaStreamCreate", {"stream": L, "flags": flags})]


def wait(stream, event):
    return ("cudaStreamWaitEvent", {"stream": stream, "event": event})


def mark(event, stream):
    return ("cudaEventRecord", {"event": event, "stream": stream})


ORDER_RECORDS = {  # name (of RIGHT_ANSWERS or WRONG_ANSWERS): (your lines before the loop, one iteration's launch)
    "launched on a launcher stream, with events both ways": (
        made(1), lambda i: [mark("0xr", S), wait(L, "0xr"), *launch_on(L), mark("0xd", L), wait(S, "0xd")]),
    "launched on a launcher stream the host waits for": (
        made(1), lambda i: [*launch_on(L), ("cudaStreamSynchronize", {"stream": L})]),
    "launched by a struct's member function, on s": ((), lambda i: launch_on(S)),
    "launched on a non-blocking launcher nothing waits for": (made(1), lambda i: launch_on(L)),
    "s waits on the launcher's event recorded before the launch": (
        made(1), lambda i: [mark("0xd", L), *launch_on(L), wait(S, "0xd")]),
    "a non-blocking launcher, s waits on an event of the legacy stream": (
        made(1), lambda i: [*launch_on(L), mark("0xd", "0x0"), wait(S, "0xd")]),
    "a blocking launcher: the copy waits for it, the timing does not": (made(0), lambda i: launch_on(L)),
    "launched on the legacy stream 0": ((), lambda i: launch_on("0x0")),
}


def ordered(name):
    yours, launch = ORDER_RECORDS[name]
    return judged(lambda k: record(graph(CHAIN_EDGES), k, yours=yours, launch=launch))


@pytest.mark.parametrize("name", [n for n in ORDER_RECORDS if n in RIGHT_ANSWERS])
def test_record_a_launch_the_harness_waits_for_passes_wherever_it_goes(name):
    report = ordered(name)
    assert not report.failed, str(report)
    assert "each launch is done before the timing event recorded after it on s, and all of them before the copy " \
           "back of out" in str(report)


@pytest.mark.parametrize("name", [n for n in ORDER_RECORDS if n in WRONG_ANSWERS])
def test_record_a_launch_the_harness_does_not_wait_for_is_named(name):
    report = ordered(name)
    assert report.failed, str(report)
    for w in WRONG_ANSWERS[name][1]:
        assert w in str(report), f"{w!r} not in {report}"


def test_record_the_unwaited_launch_stream_is_named_with_what_it_misses():
    said = str(ordered("launched on a non-blocking launcher nothing waits for"))
    assert "order (record, 3 launches of 4,096 elements): the graph is launched into stream 0x5e, a non-blocking " \
           "stream your code created, which the harness's reading of its work does not wait for: 3 of 3 launches " \
           "are not done before the timing event recorded after them on s and 3 of 3 not before the copy back of " \
           "out" in said, said
    blocking = str(ordered("a blocking launcher: the copy waits for it, the timing does not"))
    assert "3 of 3 launches are not done before the timing event" in blocking and "copy back of out (" not in blocking


def test_every_order_record_is_an_answer_of_this_file():
    assert set(ORDER_RECORDS) <= set(RIGHT_ANSWERS) | set(WRONG_ANSWERS)


# -- the protocol every lab's answers get (labcheck.Protocol), from this file's answers ----------------------------
NEVER_CALLED = ("cudaGraphInstantiate or cudaGraphInstantiateWithFlags or cudaGraphInstantiateWithParams is not called",
                "cudaGraphLaunch is not called", "cudaDeviceGraphMemTrim is not called")


# right answers in the driver API, its functions taken through cudaGetDriverEntryPoint as notebook 05 takes them
# (regions: 0 the capture and instantiation, 1 the launch, 2 the destroy and the wait, 3 the trim)
DRIVER_RIGHT = {
    "launched and trimmed through the driver": in_the_driver_api({
        1: "CU_CALL(cuGraphLaunch, (CUgraphExec)exec, (CUstream)s);", 3: "CU_CALL(cuDeviceGraphMemTrim, (CUdevice)dev);"}),
    "instantiated with cuGraphInstantiateWithFlags": in_the_driver_api({0: CAPTURED.replace(
        "CHECK(cudaGraphInstantiate(&exec, graph, 0));", "CU_CALL(cuGraphInstantiateWithFlags, (CUgraphExec *)&exec, "
        "(CUgraph)graph, 0);")}),
    "the executable graph destroyed and the context synchronized through the driver": in_the_driver_api({
        2: "CU_CALL(cuGraphExecDestroy, (CUgraphExec)exec);\nCHECK(cudaGraphDestroy(graph));\nCU_CALL(cuCtxSynchronize);"}),
}


class TestProtocol(Protocol):
    lab = LAB
    driver = DRIVER_RIGHT
    right = {name: answer(name, bodies) for name, bodies in RIGHT_ANSWERS.items()}
    wrong = {name: (answer(name, bodies), words) for name, (bodies, words) in WRONG_ANSWERS.items()}
    solution_says = ("while the executable graph exists, the graph allocator reserves",
                     "after cudaDeviceGraphMemTrim the graph allocator reserves 0.0 MiB")
    stubs_say = stubs_read = NEVER_CALLED  # what the file never names is not called, in any mode
