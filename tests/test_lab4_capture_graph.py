"""Lab 4 (capture it): plausible wrong answers are rejected by the lab's own check, naming what is wrong.

Each test puts a wrong answer into the solution's regions and runs the lab's set-up, %%writefile and check
cells (tests/labcheck.py) in this session's mode. The words asserted come from the check's reading of the
code, which judges them live and in replay alike (in replay the run is "not checked" for code that is not
the recorded solution); live, the run adds what it measured, and some tests assert that too. The run-time
verdicts are also tested on canned output in tests/test_checks.py. Slow-but-OK: each run takes about 10 s
in replay.
"""
from labcheck import LIVE, Lab, regions

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


def test_the_solution_passes():
    check = LAB.passes()  # its run, live or the recorded one
    assert "while the executable graph exists, the graph allocator reserves" in check.printed
    assert "after cudaDeviceGraphMemTrim the graph allocator reserves 0.0 MiB" in check.printed


def test_the_generated_lab_names_every_missing_call():
    LAB.rejected("lab", None, "the graph is neither captured", "cudaGraphLaunch is not called",
                 "cudaDeviceGraphMemTrim is not called")


def test_an_allocation_made_once_before_the_capture_is_not_captured():
    check = LAB.rejected("allocated before the capture",
                         lambda cu: regions(cu, {0: ALLOCATED_BEFORE_CAPTURE, 2: FREED_AT_THE_END}),
                         "the allocation is not captured", "the free is not captured")
    # every call is there (ok); only where two of them stand is wrong (live, the run adds what it measured)
    assert "calls cudaGraphInstantiate, cudaGraphLaunch, cudaGraphExecDestroy, cudaGraphDestroy and " \
           "cudaDeviceGraphMemTrim" in check.printed and "the kernels are captured too" in check.printed


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
    launch_and_trim = "CHECK(cudaGraphLaunch(exec, s));\nCHECK(cudaDeviceGraphMemTrim(dev));"
    check = LAB.rejected("trimmed in the launch loop", lambda cu: regions(cu, {1: launch_and_trim, 3: ""}),
                         "cudaDeviceGraphMemTrim is called before the graph's launches have completed")
    assert "cudaDeviceGraphMemTrim is not called" not in check.evalue  # it is called: where is what is wrong


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
    check = LAB.rejected("free not captured, auto-free on launch", lambda cu: regions(cu, {0: AUTO_FREE_NOT_CAPTURED}),
                         "the free is not captured", "cudaGraphInstantiateFlagAutoFreeOnLaunch")
    if LIVE:  # every launch runs and the results are right; the last launch's allocation stays
        assert "result of the graph: all" in check.printed, check.printed
        assert "at the end the graph allocator still reserves" in check.evalue, check.printed


# issue 10: the same graph built node by node with the graph API instead of stream capture.
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
    assert "the graph is built node by node" in check.printed, check.printed
    if LIVE:  # the run shows the same graph as the capture gives
        assert "1 memory allocation, 2 kernel, 1 memory free" in check.printed, check.printed


def test_a_graph_built_node_by_node_without_its_free_is_rejected():
    edit = lambda cu: regions(cu, {0: NODE_API.replace(  # noqa: E731
        "CHECK(cudaGraphAddMemFreeNode(&free_node, graph, &accumulate_node, 1, tmp));", "")})
    LAB.rejected("node API without the free node", edit, "without cudaGraphAddMemFreeNode")


# -- answers judged in process: the check fed the lines graph.cu prints on a GPU (canned), no kernel, no nvcc ----
import importlib  # noqa: E402

import pytest  # noqa: E402
from labcheck import CannedLesson, canned_measure, live_only  # noqa: E402

from streamalloc import checks, labchecks, sanitizer  # noqa: E402

LAB4 = importlib.import_module("streamalloc.labchecks.lab4")
MiB = 1 << 20


def node(i, type_, deps, kernel="", allocation=0):
    return {"what": "graph_node", "id": i, "type": type_, "kernel": kernel, "allocation": allocation, "deps": deps}


CHAIN = [node(0, "alloc", []), node(1, "kernel", [0], "produce"), node(2, "kernel", [1], "accumulate"),
         node(3, "free", [2])]  # the captured solution's graph
FREE_AFTER_PRODUCE_ONLY = CHAIN[:3] + [node(3, "free", [1])]
PRODUCE_BEFORE_THE_ALLOCATION = [CHAIN[0], node(1, "kernel", [], "produce"), CHAIN[2], CHAIN[3]]


def run_lines(nodes=CHAIN, errors=0, trimmed=0):
    n, launches, iters = LAB4.N, LAB4.LAUNCHES, LAB4.ITERATIONS
    mem = lambda phase, r, u: {"what": "graph_mem", "phase": phase, "used": u, "used_high": u,  # noqa: E731
                               "reserved": r, "reserved_high": r}
    allocs = sum(x["type"] == "alloc" for x in nodes)
    reserved = 32 * MiB if allocs else 0
    return [mem("start", 0, 0),
            {"what": "timing", "loop": "stream", "device_us": [28.0] * iters, "host_us": [6.0] * iters},
            {"what": "result", "loop": "stream", "n": n, "times": iters + 10, "errors": 0, "first_bad": -1,
             "expected": 0, "got": 0},
            *nodes,
            {"what": "graph", "captured": bool(nodes), "instantiated": bool(nodes), "nodes": len(nodes),
             "alloc_nodes": allocs, "free_nodes": sum(x["type"] == "free" for x in nodes),
             "kernel_nodes": sum(x["type"] == "kernel" for x in nodes)},
            mem("instantiated", 0, 0),
            {"what": "timing", "loop": "graph", "device_us": [100.0] + [27.0] * (launches - 1),
             "host_us": [9.0] * launches},
            {"what": "result", "loop": "graph", "n": n, "times": launches, "errors": errors,
             "first_bad": 1 if errors else -1, "expected": 150.0 if errors else 0, "got": 75.0 if errors else 0},
            mem("launched", reserved, reserved), mem("destroyed", reserved, reserved), mem("trimmed", trimmed, trimmed)]


SANITIZED = ("========= COMPUTE-SANITIZER\n========= Invalid __global__ read of size 4 bytes\n"
             "=========     at accumulate(const float *, float *, int)+0x90 in graph.cu:25\n"
             "=========     Address 0x7f0000000000 is out of bounds\n=========\n========= ERROR SUMMARY: 1 error\n")


@pytest.fixture()
def canned_sanitizer(monkeypatch):
    monkeypatch.setattr(sanitizer, "measure", canned_measure("compute-sanitizer --tool memcheck graph 65536 3 3", 0))


def verdict(tmp_path, edit=None, sanitizer_output=None, **run):
    from labcheck import CLEAN
    lesson = CannedLesson(tmp_path, LAB, run_lines(**run), sanitizer_output or CLEAN, edit, name=None)
    try:
        labchecks.lab4(lesson)
    except checks.LabIncomplete as e:
        return str(e)
    return ""


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
FREE_CAPTURED_ELSEWHERE = AUTO_FREE_NOT_CAPTURED.replace(
    "CHECK(cudaStreamEndCapture(s, &graph));",
    "cudaStream_t s2;\nCHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));\n"
    "CHECK(cudaFreeAsync(tmp, s2));\nCHECK(cudaStreamEndCapture(s, &graph));").replace(
    "cudaGraphInstantiateWithFlags(&exec, graph, cudaGraphInstantiateFlagAutoFreeOnLaunch)",
    "cudaGraphInstantiate(&exec, graph, 0)")
FREE_NODE_AFTER_PRODUCE = NODE_API.replace("CHECK(cudaGraphAddMemFreeNode(&free_node, graph, &accumulate_node, 1, tmp));",
                                           "CHECK(cudaGraphAddMemFreeNode(&free_node, graph, &produce_node, 1, tmp));")
PRODUCE_WITHOUT_DEPENDENCY = NODE_API.replace(
    "CHECK(cudaGraphAddKernelNode(&produce_node, graph, &alloc_node, 1, &kernel));",
    "CHECK(cudaGraphAddKernelNode(&produce_node, graph, nullptr, 0, &kernel));")

WRONG = {  # name: (regions, run, words)
    "capture begun on another stream": ({0: ON_ANOTHER_STREAM}, dict(nodes=[]),
                                        ["while the capture is on `s2`", "there is no graph"]),
    "free captured on another stream": ({0: FREE_CAPTURED_ELSEWHERE}, dict(nodes=CHAIN[:3]),
                                        ["cudaFreeAsync is called between", "on `s2`"]),
    "allocated before the capture": ({0: ALLOCATED_BEFORE_CAPTURE, 2: FREED_AT_THE_END},
                                     dict(nodes=[node(0, "kernel", [], "produce", -1),
                                                 node(1, "kernel", [0], "accumulate", -1)]),
                                     ["the allocation is not captured", "the free is not captured"]),
    "free node without all its dependencies": ({0: FREE_NODE_AFTER_PRODUCE}, dict(nodes=FREE_AFTER_PRODUCE_ONLY),
                                               ["free (node 3) does not depend on accumulate (node 2)"]),
    "a kernel node not after the allocation": ({0: PRODUCE_WITHOUT_DEPENDENCY},
                                               dict(nodes=PRODUCE_BEFORE_THE_ALLOCATION),
                                               ["produce (node 1) and accumulate (node 2) do not depend on alloc (node 0)"]),
    "stream-ordered pool trimmed instead": ({3: POOL_TRIM_INSTEAD}, dict(trimmed=32 * MiB),
                                            ["cudaDeviceGraphMemTrim is not called",
                                             "at the end the graph allocator still reserves"]),
    "trimmed after a synchronization of another stream": (
        {2: "cudaStream_t other;\nCHECK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));\n"
            "CHECK(cudaGraphLaunch(exec, s));  // one more launch, then a wait on the wrong stream\n"
            "CHECK(cudaStreamSynchronize(other));\nCHECK(cudaDeviceGraphMemTrim(dev));\n"
            "CHECK(cudaGraphExecDestroy(exec));\nCHECK(cudaGraphDestroy(graph));\nCHECK(cudaDeviceSynchronize());",
         3: ""}, dict(), ["cudaDeviceGraphMemTrim is called before the graph's launches have completed"]),
    "trimmed while the launches may run": ({1: "CHECK(cudaGraphLaunch(exec, s));\nCHECK(cudaDeviceGraphMemTrim(dev));",
                                            3: ""}, dict(),
                                           ["cudaDeviceGraphMemTrim is called before the graph's launches"]),
}


@pytest.mark.parametrize("case", WRONG)
def test_a_wrong_answer_is_rejected_in_process(tmp_path, canned_sanitizer, case):
    bodies, run, words = WRONG[case]
    said = verdict(tmp_path, lambda cu: regions(cu, bodies), **run)
    for w in words:
        assert w in said, f"{case}: {w!r} not in {said}"


def test_the_node_api_never_says_ok_for_edges_it_did_not_read(tmp_path, canned_sanitizer, capsys):
    """Node by node, the free's dependencies are the run's to judge: with a run, its edges say ok or WRONG; the
    reading alone says it cannot tell."""
    verdict(tmp_path, lambda cu: regions(cu, {0: FREE_NODE_AFTER_PRODUCE}), nodes=FREE_AFTER_PRODUCE_ONLY)
    out = capsys.readouterr().out
    assert "its dependencies are for the run to show" not in out and "WRONG" in out


def test_a_sanitizer_report_fails_the_check(tmp_path, monkeypatch):
    monkeypatch.setattr(sanitizer, "measure", canned_measure("compute-sanitizer graph 65536 3 3", 99))
    said = verdict(tmp_path, sanitizer_output=SANITIZED)
    assert "compute-sanitizer found 1 error(s), such as an access to tmp after its free node" in said


ALIASED = """\
cudaStream_t cs = s;  // the same stream, another name
CHECK(cudaStreamBeginCapture(cs, cudaStreamCaptureModeThreadLocal));
float *tmp = nullptr;
CHECK(cudaMallocAsync(reinterpret_cast<void **>(&tmp), bytes, cs));
produce<<<blocks, threads, 0, cs>>>(tmp, n);
CHECK_LAUNCH();
accumulate<<<blocks, threads, 0, cs>>>(tmp, out, n);
CHECK_LAUNCH();
CHECK(cudaFreeAsync(tmp, cs));
CHECK(cudaStreamEndCapture(cs, &graph));
CHECK(cudaGraphInstantiateWithFlags(&exec, graph, 0));
"""
FORK_JOIN = """\
cudaStream_t side;
cudaEvent_t fork, join;
CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
float *tmp = nullptr;
CHECK(cudaMallocAsync(&tmp, bytes, s));
CHECK(cudaEventRecord(fork, s));
CHECK(cudaStreamWaitEvent(side, fork, 0));  // side joins the capture (Guide §16.3.2)
produce<<<blocks, threads, 0, side>>>(tmp, n);
CHECK_LAUNCH();
CHECK(cudaEventRecord(join, side));
CHECK(cudaStreamWaitEvent(s, join, 0));
accumulate<<<blocks, threads, 0, s>>>(tmp, out, n);
CHECK_LAUNCH();
CHECK(cudaFreeAsync(tmp, s));
CHECK(cudaStreamEndCapture(s, &graph));
CHECK(cudaGraphInstantiate(&exec, graph, 0));
"""
FORK_JOIN_NODES = [node(0, "alloc", []), node(1, "other", [0], allocation=-1), node(2, "kernel", [1], "produce"),
                   node(3, "kernel", [2], "accumulate"), node(4, "free", [3])]

RIGHT = {
    "captured through another name, thread-local mode": ({0: ALIASED}, CHAIN),
    "built node by node": ({0: NODE_API}, CHAIN),
    "fork and join across two streams": ({0: FORK_JOIN}, FORK_JOIN_NODES),
    "trimmed before the destroy": ({2: "CHECK(cudaDeviceGraphMemTrim(dev));  // the launches are done\n"
                                        "CHECK(cudaGraphExecDestroy(exec));\nCHECK(cudaGraphDestroy(graph));\n"
                                        "CHECK(cudaDeviceSynchronize());", 3: ""}, CHAIN),
}


@pytest.mark.parametrize("case", RIGHT)
def test_a_right_answer_written_differently_passes_in_process(tmp_path, canned_sanitizer, capsys, case):
    bodies, nodes = RIGHT[case]
    assert verdict(tmp_path, lambda cu: regions(cu, bodies), nodes=nodes) == ""
    out = capsys.readouterr().out
    assert "All checks passed" in out and "note" not in out, out
    assert "comes after every node that touches the allocation" in out


@live_only
@pytest.mark.parametrize("case", ["free node without all its dependencies", "a kernel node not after the allocation",
                                  "capture begun on another stream", "free captured on another stream"])
def test_live_a_wrong_graph_is_rejected_on_its_run(case):
    bodies, _, words = WRONG[case]  # the first words: the graph's edges (the run), or the reading of the capture
    LAB.rejected(case, lambda cu: regions(cu, bodies), words[0])


@live_only
@pytest.mark.parametrize("case", RIGHT)
def test_live_a_right_graph_passes(case):
    LAB.passes(case, lambda cu: regions(cu, RIGHT[case][0]))
