"""Lab 1 (from synchronous to stream-ordered): the check names what is still synchronous in a wrong answer.

Run with tests/labcheck.py in this session's mode; the words asserted are the check's reading of the code,
said live and in replay alike. Each wrong answer is valid CUDA: only the check catches it.
"""
import pytest

from labcheck import Lab, in_function, regions

LAB = Lab("lab1_stream_ordered", "pipeline.cu")
FUNCTION = "pipeline_stream_ordered"


def test_the_solution_passes():
    check = LAB.passes()
    assert "ok" in check.printed and "calls cudaMallocAsync and cudaFreeAsync" in check.printed


def test_the_lab_as_given_is_incomplete():
    LAB.rejected("lab", None, "cudaMallocAsync and cudaFreeAsync are not called",
                 "cudaMalloc and cudaFree are still called inside the loop",
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
