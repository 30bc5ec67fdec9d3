"""Lab 2 (tune the pool): the check says where the threshold and the trim must go, for each wrong answer.

The solution's tuned.cu, edited, goes through the lab's check (tests/labcheck.py, this session's mode). Most
messages asserted come from reading the code, so a GPU run and a replay give them alike; a `live_only`
answer passes that reading and only the run catches it (its run-time verdict is also tested on canned
output in tests/test_checks.py).
"""
import pytest

from labcheck import Lab, in_function, live_only, regions

LAB = Lab("lab2_tune_pool", "tuned.cu")
FUNCTION = "tuned_loop"


def test_the_solution_passes():
    assert "cudaMemPoolAttrReleaseThreshold is set before the loop" in LAB.passes().printed


def test_the_lab_as_given_is_incomplete():
    LAB.rejected("lab", None, "the release threshold is never set", "cudaMemPoolTrimTo is not called")


SET = ("const uint64_t keep_all = UINT64_MAX;\n"
       "CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, (void *)&keep_all));")
TRIM = "CHECK(cudaMemPoolTrimTo(pool, 0));"
RESTORE = "CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, (void *)&threshold_before));"
AFTER = TRIM + "\n" + RESTORE
LOOP_TOP = "        const auto t0 = course::Clock::now();\n"
LOOP_END = "        trace.reserved_synced.push_back(course::pool_attr(pool, cudaMemPoolAttrReservedMemCurrent));\n"


def indented(code, spaces=8):
    return "".join(" " * spaces + line + "\n" for line in code.splitlines())


WRONG = {
    # the brief's wrong answer: the threshold set after the loop, where it no longer changes anything in it
    "threshold set after the loop": (
        lambda t: regions(t, ["", SET + "\n" + TRIM]),
        ["cudaMemPoolAttrReleaseThreshold is set after the loop"]),
    "threshold set inside the loop": (
        lambda t: in_function(regions(t, ["", AFTER]), FUNCTION, LOOP_TOP, LOOP_TOP + indented(SET)),
        ["cudaMemPoolAttrReleaseThreshold is set inside the loop"]),
    "trimmed inside the loop": (
        lambda t: in_function(regions(t, [SET, RESTORE]), FUNCTION, LOOP_END, LOOP_END + indented(TRIM)),
        ["cudaMemPoolTrimTo is called inside the loop"]),
    "never trimmed": (
        lambda t: regions(t, [SET, RESTORE]),
        ["cudaMemPoolTrimTo is not called"]),
    # the threshold left at UINT64_MAX: the default pool keeps all its memory for the rest of the process
    "threshold not put back": (
        lambda t: regions(t, [SET, TRIM]),
        ["the release threshold is not put back after the loop"]),
    # issue 10: 1 byte reads like a threshold; the reading tells its value (the run, live, shows the pool empty)
    "a 1-byte threshold": (
        lambda t: regions(t, ["const uint64_t threshold = 1;\n"
                              "CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, (void *)&threshold));",
                              AFTER]),
        ["the release threshold set before the loop is 1 byte, less than the 67,108,864 bytes (64 MiB)"]),
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


def threshold(expression):
    return (f"const uint64_t threshold = {expression};\n"
            "CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, (void *)&threshold));")


def test_a_threshold_of_what_an_iteration_allocates_passes():
    """64 MiB, what the loop allocates, is enough: the pool keeps all it needs at every synchronization."""
    LAB.passes("threshold 64 MiB", lambda t: regions(t, [threshold("64ull << 20"), AFTER]))


def test_the_threshold_attribute_through_a_variable_passes():
    """issue 10: the attribute named through a variable is still the release threshold."""
    check = LAB.passes("attribute through a variable", lambda t: regions(t, [
        "const cudaMemPoolAttr attr = cudaMemPoolAttrReleaseThreshold;\nconst uint64_t keep = UINT64_MAX;\n"
        "CHECK(cudaMemPoolSetAttribute(pool, attr, (void *)&keep));",
        "CHECK(cudaMemPoolTrimTo(pool, 0));\nCHECK(cudaMemPoolSetAttribute(pool, attr, (void *)&threshold_before));"]))
    assert "cudaMemPoolAttrReleaseThreshold is set before the loop" in check.printed


@live_only
def test_a_threshold_the_reading_cannot_tell_is_judged_by_the_reserved_memory():
    """A value computed at run time: the reading says it cannot tell, the run decides (here: 1 byte, wrong)."""
    check = LAB.rejected("threshold computed at run time", lambda t: regions(t, [
        "const uint64_t tiny = uint64_t(iters > 0);  // 1, but only the run knows\n"
        "CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, (void *)&tiny));", AFTER]),
        "reserved memory: the pool gave all its memory back", built=True)
    assert "cannot be told from the source" in check.printed
    assert "put back" in check.printed and "cannot tell" not in check.printed


@live_only
def test_a_threshold_below_what_an_iteration_allocates_is_rejected():
    """32 MiB: the pool is never empty after a synchronization, but gives back the other 32 MiB every time and
    maps them again at the next cudaMallocAsync. The code reads right; the reserved memory shows it."""
    check = LAB.rejected("threshold 32 MiB", lambda t: regions(t, [threshold("32ull << 20"), AFTER]),
                         "reserved memory", "less than the 67,108,864 bytes (64 MiB) each iteration allocates", built=True)
    assert "cudaMemPoolAttrReleaseThreshold is set before the loop" in check.printed
