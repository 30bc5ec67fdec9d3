"""Lab 2 (tune the pool): the check says where the threshold and the trim must go, for each wrong answer.

The solution's tuned.cu, edited, goes through the lab's check (tests/labcheck.py, this session's mode); the
messages asserted come from reading the code, so a GPU run and a replay give them alike.
"""
import pytest

from labcheck import Lab, in_function, regions

LAB = Lab("lab2_tune_pool", "tuned.cu")
FUNCTION = "tuned_loop"


def test_the_solution_passes():
    assert "cudaMemPoolAttrReleaseThreshold is set before the loop" in LAB.passes().printed


def test_the_lab_as_given_is_incomplete():
    LAB.rejected("lab", None, "the release threshold is never set", "cudaMemPoolTrimTo is not called")


SET = ("const uint64_t keep_all = UINT64_MAX;\n"
       "CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, (void *)&keep_all));")
TRIM = "CHECK(cudaMemPoolTrimTo(pool, 0));"
LOOP_TOP = "        const auto t0 = Clock::now();\n"
LOOP_END = "        trace.reserved.push_back(get(pool, cudaMemPoolAttrReservedMemCurrent));\n"


def indented(code, spaces=8):
    return "".join(" " * spaces + line + "\n" for line in code.splitlines())


WRONG = {
    # the brief's wrong answer: the threshold set after the loop, where it no longer changes anything in it
    "threshold set after the loop": (
        lambda t: regions(t, ["", SET + "\n" + TRIM]),
        ["cudaMemPoolAttrReleaseThreshold is set after the loop"]),
    "threshold set inside the loop": (
        lambda t: in_function(regions(t, ["", TRIM]), FUNCTION, LOOP_TOP, LOOP_TOP + indented(SET)),
        ["cudaMemPoolAttrReleaseThreshold is set inside the loop"]),
    "trimmed inside the loop": (
        lambda t: in_function(regions(t, [SET, ""]), FUNCTION, LOOP_END, LOOP_END + indented(TRIM)),
        ["cudaMemPoolTrimTo is called inside the loop"]),
    "never trimmed": (
        lambda t: regions(t, [SET, ""]),
        ["cudaMemPoolTrimTo is not called"]),
    "another attribute set instead of the threshold": (
        lambda t: regions(t, ["const int yes = 1;\n"
                              "CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolReuseAllowOpportunistic, (void *)&yes));",
                              TRIM]),
        ["the release threshold is never set"]),
}


@pytest.mark.parametrize("name", list(WRONG))
def test_a_wrong_answer_is_rejected_with_the_reason(name):
    edit, expected = WRONG[name]
    LAB.rejected(name, edit, *expected, built=True)  # valid CUDA: only the check catches it
