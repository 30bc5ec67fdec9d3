"""Lab 3 (fix the race): plausible wrong answers are rejected by the lab's own check, naming what is missing.

Each test puts a wrong answer into the solution's regions and runs the lab's set-up, %%writefile and check
cells (tests/labcheck.py) in this session's mode. The words asserted come from the check's reading of the
loop, which judges them live and in replay alike (in replay the run and the sanitizer are "not checked"
for code that is not the recorded solution). Slow-but-OK: each run takes about 10 s in replay.
"""
from labcheck import Lab, regions

LAB = Lab("lab3_fix_the_race", "race.cu")

ONLY_TODO_1 = """\
CHECK(cudaEventRecord(filled, producer));
CHECK(cudaStreamWaitEvent(consumer, filled, 0));
"""
ONLY_TODO_2 = """\
CHECK(cudaEventRecord(consumed, consumer));
CHECK(cudaStreamWaitEvent(producer, consumed, 0));
"""
RECORD_ON_THE_WRONG_STREAM = """\
CHECK(cudaEventRecord(filled, consumer));
CHECK(cudaStreamWaitEvent(consumer, filled, 0));
"""


def test_the_solution_passes():
    LAB.passes()


def test_the_generated_lab_says_both_orderings_are_missing():
    LAB.rejected("lab", None, "consume on `consumer` is not ordered after fill_slow", "TODO 1",
                 "cudaFreeAsync on `producer` is not ordered after consume", "TODO 2",
                 "cudaEventRecord 0× and cudaStreamWaitEvent 0×")


def test_only_the_wait_before_the_read_is_rejected_for_the_free():
    """The consumer waits for the fill, but nothing orders the producer's free after the read."""
    check = LAB.rejected("only the wait before the read", lambda cu: regions(cu, [ONLY_TODO_1, ""]),
                         "cudaFreeAsync on `producer` is not ordered after consume on `consumer`", "TODO 2",
                         "cudaEventRecord 1× and cudaStreamWaitEvent 1×: 2 of each are needed")
    assert "not ordered after fill_slow" not in check.evalue


def test_only_the_wait_before_the_free_is_rejected_for_the_read():
    """The free waits for the read, but the read does not wait for the allocation and the fill."""
    check = LAB.rejected("only the wait before the free", lambda cu: regions(cu, ["", ONLY_TODO_2]),
                         "consume on `consumer` is not ordered after fill_slow on `producer`", "TODO 1")
    assert "cudaFreeAsync on `producer` is not ordered" not in check.evalue


def test_an_event_recorded_on_the_consumer_orders_nothing():
    """Four calls, as many as needed, but the first event is recorded on the wrong stream."""
    LAB.rejected("event recorded on the consumer", lambda cu: regions(cu, {0: RECORD_ON_THE_WRONG_STREAM}),
                 "consume on `consumer` is not ordered after fill_slow on `producer`")


ORDER_HELPER = """\
// Makes `later` wait, on the GPU, for everything enqueued on `earlier` so far.
static void wait_for(cudaStream_t later, cudaStream_t earlier, cudaEvent_t event) {
    CHECK(cudaEventRecord(event, earlier));
    CHECK(cudaStreamWaitEvent(later, event, 0));
}

"""


def test_the_record_and_the_wait_in_a_helper_pass():
    """issue 10: the same two orderings, written through a helper function of the file."""
    edit = lambda cu: regions(cu, ["wait_for(consumer, producer, filled);",  # noqa: E731
                                   "wait_for(producer, consumer, consumed);"]).replace(
        "int main(", ORDER_HELPER + "int main(", 1)
    check = LAB.passes("record and wait in a helper", edit)
    assert "consume on `consumer` waits for cudaMallocAsync and fill_slow on `producer`" in check.printed
    assert "cudaFreeAsync on `producer` waits for consume on `consumer` (through an event)" in check.printed


def test_the_free_moved_to_the_consumer_passes():
    """One event is enough when the free follows the read in the consumer's own order."""
    edit = lambda cu: regions(cu, [ONLY_TODO_1, ""]).replace(  # noqa: E731
        "CHECK(cudaFreeAsync(buf, producer));", "CHECK(cudaFreeAsync(buf, consumer));")
    check = LAB.passes("free on the consumer", edit)
    assert "(in stream order)" in check.printed and "(1 of each needed)" in check.printed
