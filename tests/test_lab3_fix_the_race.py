"""Lab 3 (fix the race): right answers in any style pass, wrong ones are rejected by what the program did.

The check decides on the run (every element of every iteration, the GPU clock), compute-sanitizer, and the record of
the program's CUDA calls (streamalloc.calls: is every consume ordered after its fill, every free after its consume?),
over two argument sets. The reading of the source only explains. So live every answer below is judged by what it did;
in replay (no GPU, and no recording of any code but the solution's) a right answer is never rejected and a wrong one
never gets "All checks passed". The record's reasoning itself is tested in process on records written the way the
recorder writes them (`race_record`).
"""
import pytest

from labcheck import (CLEAN, RACE_REPORT, Lab, Protocol, all_passed, both, canned_measure, in_the_driver_api, regions,
                      verdict_of)
from streamalloc import checks, labchecks, sanitizer

LAB = Lab("lab3_fix_the_race", "race.cu")
MiB = 1 << 20

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


ORDER_HELPER = """\
// Makes `later` wait, on the GPU, for everything enqueued on `earlier` so far.
static void wait_for(cudaStream_t later, cudaStream_t earlier, cudaEvent_t event) {
    CHECK(cudaEventRecord(event, earlier));
    CHECK(cudaStreamWaitEvent(later, event, 0));
}

"""



# -- answers: eight right ones in styles the check was never written against, nine wrong ones --------------------
BOTH = [ONLY_TODO_1, ONLY_TODO_2]
MACRO = """\
#define AFTER(later, earlier, ev) do { CHECK(cudaEventRecord(ev, earlier)); CHECK(cudaStreamWaitEvent(later, ev, 0)); } while (0)
"""
LINK = """\
struct Link {  // one event: `later` waits for what `earlier` has enqueued so far
    cudaEvent_t ev;
    void join(cudaStream_t later, cudaStream_t earlier) const {
        CHECK(cudaEventRecord(ev, earlier));
        CHECK(cudaStreamWaitEvent(later, ev, 0));
    }
};

"""
SWAPPED = """\
// the parameters carry the caller's names in the other roles: `consumer` here is the stream that waits
static void hand_over(cudaStream_t consumer, cudaStream_t producer, cudaEvent_t e) {
    CHECK(cudaEventRecord(e, producer));
    CHECK(cudaStreamWaitEvent(consumer, e, 0));
}

"""


def before_main(text):
    return lambda cu: cu.replace("int main(", text + "int main(", 1)


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
    "a do-while macro defined above main": both(lambda cu: regions(cu, ["AFTER(consumer, producer, filled);",
                                                                      "AFTER(producer, consumer, consumed);"]),
                                                before_main(MACRO)),
    "a member function of a struct": both(lambda cu: regions(cu, ["Link{filled}.join(consumer, producer);",
                                                                  "Link{consumed}.join(producer, consumer);"]),
                                          before_main(LINK)),
    "a helper whose parameters carry the caller's names in other roles": both(
        lambda cu: regions(cu, ["hand_over(consumer, producer, filled);", "hand_over(producer, consumer, consumed);"]),
        before_main(SWAPPED)),
    "the record and the wait in a helper": both(
        lambda cu: regions(cu, ["wait_for(consumer, producer, filled);", "wait_for(producer, consumer, consumed);"]),
        before_main(ORDER_HELPER)),
    "a fresh event every iteration, with flags": lambda cu: regions(cu, [
        "cudaEvent_t ev1;\nCHECK(cudaEventCreateWithFlags(&ev1, cudaEventDisableTiming));\n"
        "CHECK(cudaEventRecordWithFlags(ev1, producer, cudaEventRecordDefault));\n"
        "CHECK(cudaStreamWaitEvent(consumer, ev1, 0));\nCHECK(cudaEventDestroy(ev1));  // released when done",
        "cudaEvent_t ev2;\nCHECK(cudaEventCreateWithFlags(&ev2, cudaEventDisableTiming));\n"
        "CHECK(cudaEventRecord(ev2, consumer));\nCHECK(cudaStreamWaitEvent(producer, ev2, 0));\n"
        "CHECK(cudaEventDestroy(ev2));"]),
}

FILL = "        fill_slow<<<grid, block, 0, producer>>>(buf, n, it, fill_us, stamps + it);\n"
FREE = "CHECK(cudaFreeAsync(buf, producer));"

ANSWERS_WRONG = {  # name: (edit, words the live verdict must hold)
    "the event recorded before the fill": (
        lambda cu: regions(cu, ["CHECK(cudaStreamWaitEvent(consumer, filled, 0));", ONLY_TODO_2]).replace(
            FILL, "        CHECK(cudaEventRecord(filled, producer));  // before the fill\n" + FILL, 1),
        ["consume is not ordered after fill_slow"]),
    "the wait before the record": (
        lambda cu: regions(cu, ["CHECK(cudaStreamWaitEvent(consumer, filled, 0));\n"
                                "CHECK(cudaEventRecord(filled, producer));", ONLY_TODO_2]),
        ["consume is not ordered after fill_slow"]),
    "the wait on another name for the producer": (
        lambda cu: regions(cu, ["cudaStream_t reader = producer;  // meant: the consumer\n"
                                "CHECK(cudaEventRecord(filled, producer));\n"
                                "CHECK(cudaStreamWaitEvent(reader, filled, 0));", ONLY_TODO_2]),
        ["consume is not ordered after fill_slow"]),
    "the free waits for the wrong event": (
        lambda cu: regions(cu, [ONLY_TODO_1, "CHECK(cudaEventRecord(consumed, consumer));\n"
                                             "CHECK(cudaStreamWaitEvent(producer, filled, 0));"]),
        ["cudaFreeAsync is not ordered after consume"]),
    "the event the waiting side recorded itself": (
        lambda cu: regions(cu, {0: RECORD_ON_THE_WRONG_STREAM}), ["consume is not ordered after fill_slow"]),
    "a second event object under the same name": (
        lambda cu: regions(cu, ["{\n    cudaEvent_t filled;  // a new event, not the one the consumer waits for\n"
                                "    CHECK(cudaEventCreate(&filled));\n    CHECK(cudaEventRecord(filled, producer));\n}\n"
                                "CHECK(cudaStreamWaitEvent(consumer, filled, 0));", ONLY_TODO_2]),
        ["consume is not ordered after fill_slow"]),
    "the wait skipped on odd iterations": (
        lambda cu: regions(cu, [ONLY_TODO_1, "CHECK(cudaEventRecord(consumed, consumer));\n"
                                             "if (it % 2 == 0) CHECK(cudaStreamWaitEvent(producer, consumed, 0));"]),
        ["cudaFreeAsync is not ordered after consume"]),
    "the first iteration's wait skipped": (
        lambda cu: regions(cu, ["if (it > 0) {\n    CHECK(cudaEventRecord(filled, producer));\n"
                                "    CHECK(cudaStreamWaitEvent(consumer, filled, 0));\n}", ONLY_TODO_2]),
        ["consume is not ordered after fill_slow"]),
    "a host wait in the loop instead of events": (
        lambda cu: regions(cu, ["CHECK(cudaStreamSynchronize(producer));",
                                "CHECK(cudaStreamSynchronize(consumer));"]),
        ["made the host wait inside the loop"]),
    "a lambda with the streams the wrong way round": (
        lambda cu: regions(cu, ["auto order = [&](cudaStream_t from, cudaStream_t to, cudaEvent_t e) {\n"
                                "    CHECK(cudaEventRecord(e, from));\n    CHECK(cudaStreamWaitEvent(to, e, 0));\n};\n"
                                "order(producer, consumer, filled);", "order(producer, consumer, consumed);"]),
        ["cudaFreeAsync is not ordered after consume"]),
}


# -- the record's reasoning, on records written as the recorder writes them --------------------------------------
def race_record(args, todo1=True, todo2=True, free_on="producer", host_wait=False):
    """The calls race.cu makes for `args`, in the recorder's format, for an answer made of the given orderings."""
    n, iters = args[0], args[1]
    lines, t = [], iter(range(10**6))

    def call(api, **f):
        lines.append({"seq": len(lines), "t": next(t), "pid": 7, "tid": 7, "call": api, "ret": 0, **f})
    call("cudaStreamCreate", stream="0xa", flags=1)
    call("cudaStreamCreate", stream="0xb", flags=1)
    call("cudaMalloc", ptr="0x10000", size=4 * n * iters)
    call("section", name="loop")
    for it in range(iters):
        buf = "0x500000"
        call("cudaMallocAsync", stream="0xa", ptr=buf, size=4 * n)
        call("cudaLaunchKernel", stream="0xa", kernel="_Z9fill_slowPiiijP6Stamps", args=[buf, None, None, None, None])
        if todo1:
            call("cudaEventRecord", event="0xe1", stream="0xa")
            call("cudaStreamWaitEvent", stream="0xb", event="0xe1")
        call("cudaLaunchKernel", stream="0xb", kernel="_Z7consumePKiPiijP6Stamps",
             args=[buf, hex(0x10000 + 4 * n * it), None, None, None])
        if todo2:
            call("cudaEventRecord", event="0xe2", stream="0xb")
            call("cudaStreamWaitEvent", stream="0xa", event="0xe2")
        if host_wait:
            call("cudaStreamSynchronize", stream="0xb")
        call("cudaFreeAsync", stream="0xa" if free_on == "producer" else "0xb", ptr=buf)
    call("section", name="")
    call("cudaDeviceSynchronize")
    return lines


@pytest.mark.parametrize("plan, words", [
    ({}, []),
    ({"todo2": False, "free_on": "consumer"}, []),
    ({"todo1": False}, ["consume is not ordered after fill_slow"]),
    ({"todo2": False}, ["cudaFreeAsync is not ordered after consume"]),
    ({"todo1": False, "todo2": False, "host_wait": True}, ["consume is not ordered after fill_slow",
                                                           "made the host wait inside the loop"]),
])
def test_the_record_decides_the_order(plan, words, tmp_path, monkeypatch, capsys):
    """The check on a right run whose record shows a plan of orderings: the record alone decides."""
    monkeypatch.setattr(sanitizer, "measure", canned_measure("compute-sanitizer race 16384 3 300 30", 0))
    lesson = LAB.canned(tmp_path, run_lines(), CLEAN, calls=lambda args: race_record(args, **plan))
    try:
        labchecks.lab3(lesson)
        said = ""
    except checks.LabIncomplete as e:
        said = str(e)
    printed = capsys.readouterr().out
    for w in words:
        assert w in said, said
    if not words:
        assert said == "" and all_passed(), printed
        assert "recorded over 3 iterations of 16,384 elements and 5 iterations of 4,096 elements" in printed


def test_without_a_record_the_reading_decides_nothing(tmp_path, monkeypatch, capsys):
    """A wrong answer whose run looks right, with no record (replay of code nobody recorded): not verified, never
    rejected by the reading alone, never passed."""
    monkeypatch.setattr(sanitizer, "measure", canned_measure("compute-sanitizer race 16384 3 300 30", 0))
    edit = ANSWERS_WRONG["the wait on another name for the producer"][0]
    labchecks.lab3(LAB.canned(tmp_path, run_lines(), CLEAN, edit))
    printed = capsys.readouterr().out
    assert not all_passed() and "not verified" in printed
    assert "the reading of your code says: consume on `consumer` is not ordered after fill_slow" in printed


def run_lines(read_early=False, freed_early=False, leaked=0, wrong_once=False):
    """What race.cu prints for 16 iterations of 2^20 elements (fill 2 ms, consume 0.2 ms), right or with a race
    (wrong_once: in iteration 5 only, 1000 elements hold iteration 6's value: its fill came 190 µs early)."""
    rows = []
    for it in range(16):
        got = -(it + 1) if read_early else -(it + 2) if freed_early and it < 15 else None
        rows.append({"iter": it, "errors": 0 if got is None else 1 << 20, "first_bad": -1 if got is None else 0,
                     "expected": 0 if got is None else 1000 * (it + 1), "got": 0 if got is None else got,
                     "read_after_fill_us": -1790.0 if read_early else 11.0, "same_block_next": it < 15,
                     "next_fill_after_read_us": -185.0 if freed_early else 4.0})
    if wrong_once:  # a run in which the next iteration got every block back, the last one's too
        for r in rows:
            r["same_block_next"] = True
        rows[5].update(errors=1000, first_bad=3, expected=6003, got=7003, next_fill_after_read_us=-190.0)
    bad = sum(r["errors"] > 0 for r in rows)
    return rows + [{"n": 1 << 20, "iters": 16, "fill_us": 2000, "consume_us": 200, "bad_iters": bad,
                    "errors": sum(r["errors"] for r in rows), "same_block": 15, "pool_used_end": leaked}]


def test_a_run_that_shows_the_race_is_rejected_whatever_the_record(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sanitizer, "measure", canned_measure("compute-sanitizer race 16384 3 300 30", 0))
    with pytest.raises(checks.LabIncomplete, match="results: 16 of 16 iterations wrong"):
        labchecks.lab3(LAB.canned(tmp_path, run_lines(read_early=True), CLEAN, calls=race_record))

# -- the run-time half on canned output: what a GPU's run of an answer prints decides -----------------------------
def test_canned_wrong_results_and_the_sanitizer_report_are_both_said(tmp_path, canned_sanitizer):
    said = verdict_of(labchecks.lab3, LAB.canned(tmp_path, run_lines(wrong_once=True), RACE_REPORT))
    assert "results: 1 of 16 iterations wrong" in said and "iteration 6's value" in said and "TODO 2" in said
    assert "order (GPU clock): the next iteration's fill began writing into the same block before the consumer had " \
           "finished reading it in 1 of 16 iterations that reused the block (iteration 5: 190.0 µs before)" in said
    assert "compute-sanitizer found 2 error(s)" in said
    assert verdict_of(labchecks.lab3, LAB.canned(tmp_path, run_lines())) == ""


def test_canned_a_block_never_freed_is_a_leak(tmp_path, canned_sanitizer):
    said = verdict_of(labchecks.lab3, LAB.canned(tmp_path, run_lines(leaked=4 * MiB)))
    assert "leak: after the loop and a device synchronization the default pool still has 4,194,304 bytes" in said


# -- right answers in the driver API, its functions taken through cudaGetDriverEntryPoint as notebook 05 takes them
DRIVER_RIGHT = {
    "cuEventRecord and cuStreamWaitEvent": in_the_driver_api([
        "CU_CALL(cuEventRecord, (CUevent)filled, (CUstream)producer);\n"
        "CU_CALL(cuStreamWaitEvent, (CUstream)consumer, (CUevent)filled, 0);",
        "CU_CALL(cuEventRecord, (CUevent)consumed, (CUstream)consumer);\n"
        "CU_CALL(cuStreamWaitEvent, (CUstream)producer, (CUevent)consumed, 0);"]),
    "cuEventRecordWithFlags, the consumer's wait through a helper": in_the_driver_api([
        "auto after = [](CUstream waiter, CUevent e, CUstream maker) {\n"
        "    CU_CALL(cuEventRecordWithFlags, e, maker, 0);\n    CU_CALL(cuStreamWaitEvent, waiter, e, 0);\n};\n"
        "after(consumer, filled, producer);",
        "CU_CALL(cuEventRecordWithFlags, (CUevent)consumed, (CUstream)consumer, 0);\n"
        "CU_CALL(cuStreamWaitEvent, (CUstream)producer, (CUevent)consumed, 0);"]),
}


# -- the protocol every lab's answers get (labcheck.Protocol), from this file's answers ----------------------------
class TestProtocol(Protocol):
    lab = LAB
    right, wrong, driver = ANSWERS_RIGHT, ANSWERS_WRONG, DRIVER_RIGHT
    stubs_say = ("consume is not ordered after fill_slow", "TODO 2")  # the record: both orderings are missing
