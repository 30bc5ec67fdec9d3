"""Lab 4 (capture it): plausible wrong answers are rejected by the lab's own check, naming what is wrong.

Each test puts a wrong answer into the solution's regions and runs the lab's set-up, %%writefile and check
cells (tests/labcheck.py) in this session's mode. The words asserted come from the check's reading of the
code, which judges them live and in replay alike (in replay the run is "not checked" for code that is not
the recorded solution). Slow-but-OK: each run takes about 10 s in replay.
"""
from labcheck import Lab, regions

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
    LAB.passes()


def test_the_generated_lab_names_every_missing_call():
    LAB.rejected("lab", None, "cudaStreamBeginCapture is not called", "cudaGraphLaunch is not called",
                 "cudaDeviceGraphMemTrim is not called")


def test_an_allocation_made_once_before_the_capture_is_not_captured():
    check = LAB.rejected("allocated before the capture",
                         lambda cu: regions(cu, {0: ALLOCATED_BEFORE_CAPTURE, 2: FREED_AT_THE_END}),
                         "the allocation is not captured", "the free is not captured")
    # every call is there (ok); only where two of them stand is wrong (live, the run adds what it measured)
    assert "calls cudaStreamBeginCapture, cudaStreamEndCapture, cudaGraphInstantiate, cudaGraphLaunch, " \
           "cudaGraphExecDestroy and cudaDeviceGraphMemTrim" in check.printed


def test_trimming_the_stream_ordered_pool_is_not_the_graph_trim():
    LAB.rejected("stream-ordered pool trimmed instead", lambda cu: regions(cu, {3: POOL_TRIM_INSTEAD}),
                 "cudaDeviceGraphMemTrim is not called")
