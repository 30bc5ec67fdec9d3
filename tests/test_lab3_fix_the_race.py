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


# -- issue 19: wrong answers and right ones written differently, judged in process on canned runs ----------------
# Each answer goes through labchecks.lab3 with the output an H100's run of it would print (CannedLesson): the results
# (every element of every iteration) and compute-sanitizer judge first; the reading of the loop explains, following
# aliases, helpers and lambdas, and says "cannot tell" where it cannot follow a stream or an event.
import pytest  # noqa: E402

from labcheck import CLEAN, CannedLesson, canned_measure, live_only  # noqa: E402
from streamalloc import checks, labchecks, sanitizer  # noqa: E402

RACE = ("========= COMPUTE-SANITIZER\n========= Invalid __global__ read of size 4 bytes\n"
        "=========     at consume(const int *, int *, int, unsigned int)+0x1f0 in race.cu:41\n"
        "=========     Address 0x7f3a00000000 is out of bounds\n========= ERROR SUMMARY: 1 error\n")


def run_lines(read_early=False, freed_early=False, leaked=0):
    """What race.cu prints (16 iterations of 2^20 elements, fill 2 ms, consume 0.2 ms): a consumer that does not wait
    for the fill reads this iteration's "being filled" mark; a free that does not wait for the read lets the next
    iteration's fill mark the block first."""
    rows = []
    for it in range(16):
        got = -(it + 1) if read_early else -(it + 2) if freed_early and it < 15 else None
        rows.append({"iter": it, "errors": 0 if got is None else 1 << 20, "first_bad": -1 if got is None else 0,
                     "expected": 0 if got is None else 1000 * (it + 1), "got": 0 if got is None else got,
                     "read_after_fill_us": -1790.0 if read_early else 11.0, "same_block_next": it < 15,
                     "next_fill_after_read_us": -185.0 if freed_early else 4.0})
    bad = sum(r["errors"] > 0 for r in rows)
    return rows + [{"n": 1 << 20, "iters": 16, "fill_us": 2000, "consume_us": 200, "bad_iters": bad,
                    "errors": bad << 20, "same_block": 15, "pool_used_end": leaked}]


def judged(tmp_path, edit, lines, monkeypatch, capsys, report=CLEAN):
    monkeypatch.setattr(sanitizer, "measure", canned_measure("compute-sanitizer race 16384 3 300 30", 0))
    try:
        labchecks.lab3(CannedLesson(tmp_path, LAB, lines, report, edit))
        said = ""
    except checks.LabIncomplete as e:
        said = str(e)
    return said, capsys.readouterr().out


FILL = "        fill_slow<<<grid, block, 0, producer>>>(buf, n, it, fill_us);\n"
FREE = "CHECK(cudaFreeAsync(buf, producer));"


def record_before_the_fill(cu):
    cu = regions(cu, ["CHECK(cudaStreamWaitEvent(consumer, filled, 0));", ONLY_TODO_2])
    return cu.replace(FILL, "        CHECK(cudaEventRecord(filled, producer));  // before the fill\n" + FILL, 1)


ANSWERS_WRONG = {  # name: (edit, the run's output, its sanitizer report, words the verdict must hold, who decides)
    "the event recorded before the fill": (
        record_before_the_fill, run_lines(read_early=True), RACE,
        ["results: 16 of 16 iterations wrong", "order (GPU clock): the consumer started reading before its fill",
         "consume on `consumer` is not ordered after fill_slow"], "reading"),
    "the wait before the record": (
        lambda cu: regions(cu, ["CHECK(cudaStreamWaitEvent(consumer, filled, 0));\n"
                                "CHECK(cudaEventRecord(filled, producer));", ONLY_TODO_2]),
        run_lines(read_early=True), RACE, ["consume on `consumer` is not ordered after fill_slow"], "reading"),
    "the wait on another name for the producer": (
        lambda cu: regions(cu, ["cudaStream_t reader = producer;  // meant: the consumer\n"
                                "CHECK(cudaEventRecord(filled, producer));\n"
                                "CHECK(cudaStreamWaitEvent(reader, filled, 0));", ONLY_TODO_2]),
        run_lines(read_early=True), RACE, ["consume on `consumer` is not ordered after fill_slow on `producer`"],
        "reading"),
    "the free waits for the wrong event": (
        lambda cu: regions(cu, [ONLY_TODO_1, "CHECK(cudaEventRecord(consumed, consumer));\n"
                                             "CHECK(cudaStreamWaitEvent(producer, filled, 0));"]),
        run_lines(freed_early=True), RACE, ["cudaFreeAsync on `producer` is not ordered after consume"], "reading"),
    "a lambda with the streams the wrong way round": (
        lambda cu: regions(cu, ["auto order = [&](cudaStream_t from, cudaStream_t to, cudaEvent_t e) {\n"
                                "    CHECK(cudaEventRecord(e, from));\n    CHECK(cudaStreamWaitEvent(to, e, 0));\n};\n"
                                "order(producer, consumer, filled);", "order(producer, consumer, consumed);"]),
        run_lines(freed_early=True), RACE, ["cudaFreeAsync on `producer` is not ordered after consume"], "reading"),
    "the free left out": (
        lambda cu: regions(cu, [ONLY_TODO_1, ONLY_TODO_2]).replace(FREE, "// freed at the end, for speed", 1),
        run_lines(leaked=16 << 22), CLEAN, ["leak: after the loop and a device synchronization"], "run"),
    "the consumer's record through a pointer, on the producer": (
        lambda cu: regions(cu, [ONLY_TODO_1, "cudaEvent_t *done = &consumed;\n"
                                             "CHECK(cudaEventRecord(*done, producer));  // meant: the consumer\n"
                                             "CHECK(cudaStreamWaitEvent(producer, *done, 0));"]),
        run_lines(freed_early=True), RACE, ["results: 15 of 16 iterations wrong", "order (GPU clock): the next "
                                            "iteration's fill began writing into the same block", "compute-sanitizer found"],
        "run"),
}


@pytest.mark.parametrize("name", list(ANSWERS_WRONG))
def test_issue19_a_wrong_answer_is_told_why(name, tmp_path, monkeypatch, capsys):
    edit, lines, report, words, _ = ANSWERS_WRONG[name]
    said, printed = judged(tmp_path, edit, lines, monkeypatch, capsys, report)
    assert said, printed
    for w in words:
        assert w in said, said
    assert "All checks passed" not in printed


@pytest.mark.parametrize("name", [n for n, a in ANSWERS_WRONG.items() if a[4] == "reading"])
def test_issue19_a_wrong_answer_the_reading_sees_is_wrong_with_a_right_run_too(name, tmp_path, monkeypatch, capsys):
    edit, _, _, words, _ = ANSWERS_WRONG[name]
    said, _ = judged(tmp_path, edit, run_lines(), monkeypatch, capsys)
    assert said and any(w in said for w in words if not w.startswith("results")), said


def test_issue19_an_event_through_a_pointer_is_never_ok(tmp_path, monkeypatch, capsys):
    edit = ANSWERS_WRONG["the consumer's record through a pointer, on the producer"][0]
    _, printed = judged(tmp_path, edit, run_lines(freed_early=True), monkeypatch, capsys, RACE)
    assert "whether cudaFreeAsync on `producer` waits for consume on `consumer`: cannot tell from the source: the " \
           "run decides" in printed and "`*done`" in printed
    assert "cudaFreeAsync on `producer` waits for consume" not in printed.replace("whether cudaFreeAsync", "")


ANSWERS_RIGHT = {
    "a lambda for both orderings": lambda cu: regions(cu, [
        "auto after = [&](cudaStream_t later, cudaStream_t earlier, cudaEvent_t e) {\n"
        "    CHECK(cudaEventRecord(e, earlier));\n    CHECK(cudaStreamWaitEvent(later, e, 0));\n};\n"
        "after(consumer, producer, filled);", "after(producer, consumer, consumed);"]),
    "the streams and events under other names": lambda cu: regions(cu, [
        "cudaStream_t writer = producer, reader = consumer;\ncudaEvent_t &ready = filled;\n"
        "CHECK(cudaEventRecord(ready, writer));\nCHECK(cudaStreamWaitEvent(reader, ready, 0));",
        "cudaStream_t owner = producer;\nCHECK(cudaEventRecord(consumed, consumer));\n"
        "CHECK(cudaStreamWaitEvent(owner, consumed, 0));"]),
    "one event for both orderings": lambda cu: regions(cu, [
        ONLY_TODO_1, "CHECK(cudaEventRecord(filled, consumer));  // filled again: now the consumer is done\n"
                     "CHECK(cudaStreamWaitEvent(producer, filled, 0));"]),
    "freed by the consumer, through another name": lambda cu: regions(cu, [ONLY_TODO_1, ""]).replace(
        FREE, "cudaStream_t last_user = consumer;\n        CHECK(cudaFreeAsync(buf, last_user));", 1),
}


@pytest.mark.parametrize("name", list(ANSWERS_RIGHT))
def test_issue19_a_right_answer_written_differently_passes(name, tmp_path, monkeypatch, capsys):
    said, printed = judged(tmp_path, ANSWERS_RIGHT[name], run_lines(), monkeypatch, capsys)
    assert said == "", said
    assert "All checks passed." in printed and "WRONG" not in printed and "cannot tell" not in printed, printed
    assert "consume on `consumer` waits for cudaMallocAsync and fill_slow on `producer`" in printed
    assert "waits for consume on `consumer`" in printed


@pytest.mark.parametrize("name", list(ANSWERS_WRONG))
@live_only
def test_issue19_live_a_wrong_answer_is_rejected_by_its_run(name):
    """Every wrong answer's run must show it: wrong results (the consumer read marks), a leak, or a sanitizer error."""
    edit, _, _, words, _ = ANSWERS_WRONG[name]
    LAB.rejected(name, edit, *("iterations wrong" if w.startswith("results:") else w for w in words), built=True)


@pytest.mark.parametrize("name", list(ANSWERS_RIGHT))
@live_only
def test_issue19_live_a_right_answer_written_differently_passes(name):
    LAB.passes(name, ANSWERS_RIGHT[name])
