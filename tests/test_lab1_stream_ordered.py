"""Lab 1 (from synchronous to stream-ordered): the check names what is still synchronous in a wrong answer.

Run with tests/labcheck.py in this session's mode. Most words asserted are the check's reading of the code,
said live and in replay alike; a `live_only` answer passes that reading and only the run catches it (its
run-time verdict is also tested on canned output in tests/test_checks.py). Each wrong answer is valid
CUDA: only the check catches it.
"""
import pytest

from labcheck import LIVE, Lab, in_function, live_only, regions

LAB = Lab("lab1_stream_ordered", "pipeline.cu")
FUNCTION = "pipeline_stream_ordered"


def test_the_solution_passes():
    check = LAB.passes()
    assert "calls cudaMallocAsync and cudaFreeAsync" in check.printed
    assert "WRONG" not in check.printed and "not on s" not in check.printed


def test_the_lab_as_given_is_incomplete():
    LAB.rejected("lab", None, "cudaMallocAsync or cudaMallocFromPoolAsync is not called",
                 "cudaFreeAsync is not called", "cudaMalloc and cudaFree are still called inside the loop",
                 "cudaDeviceSynchronize is still called inside the loop")


WRONG = {
    # the brief's wrong answer: stream-ordered allocation, but the classic free left in the loop
    "cudaFree left in the loop": (
        lambda t: regions(t, ["CHECK(cudaMallocAsync(&buf, bytes, s));", "", "CHECK(cudaFree(buf));"]),
        ["cudaFree is still called inside the loop"]),
    "a synchronization left in the loop": (
        lambda t: regions(t, ["CHECK(cudaMallocAsync(&buf, bytes, s));", "CHECK(cudaStreamSynchronize(s));",
                              "CHECK(cudaFreeAsync(buf, s));"]),
        ["cudaStreamSynchronize is still called inside the loop"]),
    "freed before the kernels": (
        lambda t: regions(t, ["CHECK(cudaMallocAsync(&buf, bytes, s));\nCHECK(cudaFreeAsync(buf, s));", "", ""]),
        ["cudaFreeAsync comes before compute(...)"]),
    "allocated on the legacy default stream": (
        lambda t: regions(t, ["CHECK(cudaMallocAsync(&buf, bytes, 0));", "", "CHECK(cudaFreeAsync(buf, s));"]),
        ["cudaMallocAsync is called on 0, not on s"]),
    "freed on the per-thread default stream": (
        lambda t: regions(t, ["CHECK(cudaMallocAsync(&buf, bytes, s));", "",
                              "CHECK(cudaFreeAsync(buf, cudaStreamPerThread));"]),
        ["cudaFreeAsync is called on cudaStreamPerThread, not on s"]),
    "allocation hoisted out of the loop": (
        lambda t: in_function(regions(t, ["", "", "CHECK(cudaFreeAsync(buf, s));"]), FUNCTION,
                              "    for (int it = 0; it < iters; ++it) {\n        int *buf = nullptr;\n",
                              "    int *buf = nullptr;\n    CHECK(cudaMallocAsync(&buf, bytes, s));\n"
                              "    for (int it = 0; it < iters; ++it) {\n"),
        ["cudaMallocAsync is called outside the loop"]),
}


@pytest.mark.parametrize("name", list(WRONG))
def test_a_wrong_answer_is_rejected_with_the_reason(name):
    edit, expected = WRONG[name]
    LAB.rejected(name, edit, *expected, built=True)  # valid CUDA: only the check catches it


RIGHT = {
    # a local name for s is still s
    "the stream under another name": lambda t: regions(t, [
        "cudaStream_t st = s;  // the same stream\nCHECK(cudaMallocAsync(&buf, bytes, st));", "",
        "CHECK(cudaFreeAsync(buf, st));"]),
    # an explicit pool: here the device's default one, the pool cudaMallocAsync would use
    "allocated from a pool with cudaMallocFromPoolAsync": lambda t: regions(t, [
        "cudaMemPool_t pool;\nCHECK(cudaDeviceGetDefaultMemPool(&pool, 0));\n"
        "CHECK(cudaMallocFromPoolAsync(&buf, bytes, pool, s));", "", "CHECK(cudaFreeAsync(buf, s));"]),
}


HELPER = """static int *take(size_t bytes, cudaStream_t stream) {  // a fresh buffer, in stream order
    int *p = nullptr;
    CHECK(cudaMallocAsync(&p, bytes, stream));
    return p;
}

"""


def rewritten(body: str):
    """The solution with pipeline_stream_ordered's body replaced (and the helper `take` defined before it)."""
    def edit(t):
        start = t.index(f"void {FUNCTION}(")
        open_ = t.index("{", start)
        end = t.index("\n}\n", open_) + 3
        return t[:start] + HELPER + t[start:open_ + 1] + "\n" + body + "}\n" + t[end:]
    return edit


# issue 10: right answers the reading used to fail
RIGHT.update({
    "the allocation in a helper function": rewritten("""\
    const size_t bytes = size_t(n) * sizeof(int);
    for (int it = 0; it < iters; ++it) {
        int *buf = take(bytes, s);
        compute(buf, in, n, it, out + it, s);
        CHECK(cudaFreeAsync(buf, s));
    }
"""),
    "a do-while loop": rewritten("""\
    const size_t bytes = size_t(n) * sizeof(int);
    int it = 0;
    do {
        int *buf = nullptr;
        CHECK(cudaMallocAsync(&buf, bytes, s));
        compute(buf, in, n, it, out + it, s);
        CHECK(cudaFreeAsync(buf, s));
    } while (++it < iters);
"""),
})


def braceless(t):
    """A for loop without braces around a call of a helper that allocates, computes and frees."""
    helper = ("static void compute_fresh(size_t bytes, const int *in, int n, int it, u64 *slot, cudaStream_t s) {\n"
              "    int *buf = take(bytes, s);\n    compute(buf, in, n, it, slot, s);\n"
              "    CHECK(cudaFreeAsync(buf, s));\n}\n\n")
    t = rewritten("""\
    const size_t bytes = size_t(n) * sizeof(int);
    for (int it = 0; it < iters; ++it)
        compute_fresh(bytes, in, n, it, out + it, s);
""")(t)
    return t.replace(f"void {FUNCTION}(", helper + f"void {FUNCTION}(", 1)


RIGHT["a for loop without braces, the work in a helper"] = braceless


@pytest.mark.parametrize("name", list(RIGHT))
def test_another_right_answer_passes(name):
    check = LAB.passes(name, RIGHT[name])  # live: its results and speed too; in replay: its code
    assert "not on s" not in check.printed and "cannot tell" not in check.printed, check.printed


def test_a_stream_the_check_cannot_resolve_is_not_checked_not_wrong():
    """A stream passed in some other way is said to be unchecked; the run (live) judges the rest."""
    edit = lambda t: in_function(regions(t, ["CHECK(cudaMallocAsync(&buf, bytes, streams[0]));", "",  # noqa: E731
                                             "CHECK(cudaFreeAsync(buf, streams[0]));"]),
                                 FUNCTION, "    for (int it", "    cudaStream_t streams[1] = {s};\n    for (int it")
    check = LAB.passes("a stream from an array", edit)
    assert "cudaMallocAsync is called on `streams[0]`: the check cannot tell" in check.printed, check.printed


@live_only
def test_a_copy_to_the_host_in_the_loop_is_too_slow():
    """Reading each result on the host, with a synchronous cudaMemcpy: no call the check looks for is there,
    and the results are right; only the time per iteration shows that the host waits in every iteration."""
    edit = lambda t: regions(t, ["CHECK(cudaMallocAsync(&buf, bytes, s));",  # noqa: E731
                                 "u64 seen = 0;  // the host looks at each result as it comes\n"
                                 "CHECK(cudaMemcpy(&seen, out + it, sizeof(u64), cudaMemcpyDeviceToHost));",
                                 "CHECK(cudaFreeAsync(buf, s));"])
    check = LAB.rejected("a cudaMemcpy to the host in the loop", edit, "speed:", built=True)
    assert "calls cudaMallocAsync and cudaFreeAsync" in check.printed and "result (yours): all" in check.printed


def test_freeing_only_the_last_buffer_is_a_leak():
    """issue 10: the free is in the loop, so the reading cannot tell; the pool's memory in use after the function
    (live) shows the 199 buffers never freed. In replay the run of this code cannot be replayed: not verified."""
    edit = lambda t: regions(t, ["CHECK(cudaMallocAsync(&buf, bytes, s));", "",  # noqa: E731
                                 "if (it == iters - 1) CHECK(cudaFreeAsync(buf, s));  // only the last one"])
    if LIVE:
        LAB.rejected("only the last buffer freed", edit, "leak: after your function returned", built=True)
    else:
        check = LAB.passes("only the last buffer freed", edit)
        assert "not verified without a GPU: whether it compiles; the results, the memory and the timing" in \
            check.printed or "not verified without a GPU: the results, the memory and the timing" in check.printed


def test_freeing_on_a_stream_not_ordered_after_the_work():
    """issue 10: cudaFreeAsync(buf, t) on a stream of its own. The reading cannot tell what t is (a note); live,
    compute-sanitizer reports a use of buf not ordered before its free."""
    edit = lambda t: regions(t, ["CHECK(cudaMallocAsync(&buf, bytes, s));", "",  # noqa: E731
                                 "cudaStream_t t;\nCHECK(cudaStreamCreateWithFlags(&t, cudaStreamNonBlocking));\n"
                                 "CHECK(cudaFreeAsync(buf, t));  // not ordered after the kernels on s\n"
                                 "CHECK(cudaStreamDestroy(t));"])
    if LIVE:
        check = LAB.rejected("freed on another stream", edit, "compute-sanitizer found", built=True)
    else:
        check = LAB.passes("freed on another stream", edit)
    assert "cudaFreeAsync is called on `t`: the check cannot tell from the source" in check.printed
