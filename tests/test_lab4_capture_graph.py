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
