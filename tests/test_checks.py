"""The lab checks' reading of C++/CUDA source (streamalloc.cppsource), the report's words and verdict, and the
run-time halves of the lab checks fed canned output (no GPU, no nvcc needed)."""

import pytest

from labcheck import CannedLesson, Lab, canned_measure, regions
from streamalloc import checks, cppsource, labchecks, sanitizer
from streamalloc.cuda import NVCC_HELP
from streamalloc.errors import MissingRecording, StaleRecording

LOOP = """
void f(int n, cudaStream_t a, cudaStream_t b, cudaEvent_t e) {
    for (int i = 0; i < n; ++i) {
        int *p = nullptr;
        CHECK(cudaMallocAsync(&p, 4, a));  // allocated on a
        fill<<<1, 32, 0, a>>>(p);
        CHECK(cudaEventRecord(e, a));
        CHECK(cudaStreamWaitEvent(b, e, 0));
        read<<<1, 32, 0, b>>>(p);
        CHECK(cudaFreeAsync(p, a));       /* not ordered after read */
    }
}
"""


def test_source_reading():
    assert cppsource.function_text("int x; void f(int a) { if (a) { g(a, h(1, 2)); } } int y;", "f") == \
        "f(int a) { if (a) { g(a, h(1, 2)); } }"
    assert cppsource.function_text("void g() {}", "f") == ""
    code = cppsource.function_text(LOOP, "f")
    assert [cppsource.call_arguments(code, p) for p in cppsource.calls(code, "cudaMallocAsync")] == [["&p", "4", "a"]]
    assert [name for name, _ in cppsource.launches(LOOP)] == ["fill", "read"]
    assert checks.english(["a"]) == "a" and checks.english(["a", "b", "c"], "or") == "a, b or c"


@pytest.mark.parametrize("loop", [
    "for (int i = 0; i < n; ++i) { CHECK(cudaFree(p)); }",
    "for (int i = 0; i < n; ++i) CHECK(cudaFree(p));",
    "for (int i = 0; i < n; ++i)\n    if (i) CHECK(cudaFree(p)); else k();",
    "int i = 0; do { CHECK(cudaFree(p)); } while (++i < n);",
    "int i = 0; do CHECK(cudaFree(p)); while (++i < n);",
    "while (n--) { { CHECK(cudaFree(p)); } }",
])
def test_a_call_in_a_loop_of_any_shape_is_in_the_loop(loop):
    code = f"void f(int n, void *p) {{ g(); {loop} h(); }}"
    assert cppsource.calls_in_loops(code, "cudaFree") == 1, cppsource.loop_bodies(code)
    assert cppsource.calls_in_loops(code, "g") == 0 and cppsource.calls_in_loops(code, "h") == 0


def test_a_loop_body_ends_where_its_statement_ends():
    code = "void f() { for (int i = 0; i < 3; ++i) a(i); b(); while (x) ; c(); }"
    assert cppsource.calls_in_loops(code, "a") == 1
    assert cppsource.calls_in_loops(code, "b") == 0 and cppsource.calls_in_loops(code, "c") == 0


HELPERS = """
static int *take(size_t bytes, cudaStream_t st) {
    int *p = nullptr;
    CHECK(cudaMallocAsync(&p, bytes, st));
    return p;
}
static void order(cudaEvent_t ev, cudaStream_t from, cudaStream_t to) {
    CHECK(cudaEventRecord(ev, from));
    CHECK(cudaStreamWaitEvent(to, ev, 0));
}
void f(int n, cudaStream_t a, cudaStream_t b, cudaEvent_t e1, cudaEvent_t e2) {
    for (int i = 0; i < n; ++i) {
        int *p = take(4, a);
        fill<<<1, 32, 0, a>>>(p);
        order(e1, a, b);
        read<<<1, 32, 0, b>>>(p);
        order(e2, b, a);
        CHECK(cudaFreeAsync(p, a));
    }
}
"""


def test_the_files_own_helpers_are_read_where_they_are_called():
    code = cppsource.inline(HELPERS, "f")
    assert cppsource.calls_in_loops(code, "cudaMallocAsync") == 1
    alloc = cppsource.calls(code, "cudaMallocAsync")[0]
    assert cppsource.call_arguments(code, alloc) == ["&p", "4", "a"]  # the helper's parameter is the caller's a
    order = cppsource.StreamOrder(code)
    assert order.ordered_after("read", "cudaMallocAsync", "fill") and order.ordered_after("cudaFreeAsync", "read")
    assert order.count("cudaEventRecord") == 2 and order.count("cudaStreamWaitEvent") == 2
    assert cppsource.inline(HELPERS, "missing") == ""


def test_names_and_values_the_reading_can_tell():
    code = ("cudaMemPoolAttr attr = cudaMemPoolAttrReleaseThreshold; cudaStream_t st = s; auto t2 = (st);\n"
            "const uint64_t a = 1; uint64_t b = 64ull << 20; uint64_t c = UINT64_MAX; uint64_t d = ~0ull;"
            " size_t e = (size_t)-1; uint64_t f = a * 3; uint64_t g = x + 1;")
    assert cppsource.aliases(code, "cudaMemPoolAttrReleaseThreshold") == {"cudaMemPoolAttrReleaseThreshold", "attr"}
    assert cppsource.aliases(code, "s") == {"s", "st", "t2"}
    values = {v: cppsource.constant(code, f"(void *)&{v}") for v in "abcdefg"}
    assert values == {"a": 1, "b": 64 << 20, "c": 2**64 - 1, "d": 2**64 - 1, "e": 2**64 - 1, "f": 3, "g": None}
    assert cppsource.constant(code, "nope") is None and cppsource.constant(code, "&v[0]") is None


def test_the_stream_order_model():
    order = cppsource.StreamOrder(LOOP)
    assert [op["what"] for op in order.ops] == ["cudaMallocAsync", "fill", "cudaEventRecord", "cudaStreamWaitEvent",
                                                "read", "cudaFreeAsync"]
    assert order.stream("read") == "b" and order.missing("fill", "write") == ["write"]
    assert order.ordered_after("read", "cudaMallocAsync", "fill")  # through the event
    assert not order.ordered_after("cudaFreeAsync", "read")  # a never waits for b
    assert not order.ordered_after("write", "fill")


def test_messages_are_sentences():
    report = checks.Report("t")
    report.forbid_in_loop(LOOP, ["cudaFreeAsync", "cudaMallocAsync", "cudaMalloc"])
    report.forbid_in_loop(LOOP, ["cudaFreeAsync"])
    report.forbid_in_loop(LOOP, ["cudaMalloc", "cudaFree"])
    report.require_calls(LOOP, {("cudaGraphLaunch", "cudaGraphUpload"): "launch it", "cudaFreeAsync": "free"})
    assert [text for _, text in report.marks] == [
        "cudaFreeAsync and cudaMallocAsync are still called inside the loop",
        "cudaFreeAsync is still called inside the loop",
        "no cudaMalloc or cudaFree inside a loop",
        "cudaGraphLaunch or cudaGraphUpload is not called: launch it"]


def test_what_replay_could_not_check_says_why():
    report = checks.Report("t")
    report.not_replayed("the results", MissingRecording("none"))
    report.not_replayed("the results and the timing", StaleRecording("changed"))
    missing, stale = (text for _, text in report.marks)
    assert "no recording of the solution yet" in missing and "timing" not in missing
    assert "your code differs from the recorded solution" in stale
    assert {f.mark for f in report.items} == {checks.UNVERIFIED}


def test_where_calls_stand_against_a_loop():
    report = checks.Report("t")
    say = {"missing": "none", "before": "before", "inside": "inside", "after": "after"}
    for positions in ([], [5, 50], [50, 500], [500]):
        report.placed(positions, (10, 100), "before", say)
    assert report.marks == [("WRONG", "none"), ("ok", "before"), ("WRONG", "inside"), ("WRONG", "after")]


# -- the verdict: "passed" only when verified -------------------------------------------------------------------
class ReplayLesson:
    """A lesson in replay without nvcc whose recording does not match: only the reading can be checked."""

    live = False

    def __init__(self, tmp_path, lab: Lab, edit=None, error=StaleRecording("its code changed")):
        self.name, self.path, self.error = lab.name, tmp_path / lab.file, error
        self.path.write_text(lab.cuda(edit))

    def source(self, file):
        return self.path

    def compile(self, file, flags=()):
        return None  # replay without nvcc

    def run(self, file, args=(), timeout=120, flags=(), trace=False):
        raise self.error

    def measure(self, name, fn, params=None, source=""):
        raise self.error


LAB3 = Lab("lab3_fix_the_race", "race.cu")
MOVED_FREE = ("CHECK(cudaEventRecord(filled, producer));\nCHECK(cudaStreamWaitEvent(consumer, filled, 0));",
              "// the free goes to the consumer, after its read, in stream order")


def moved_free(cu):  # a right answer other than the solution: the free on the consumer, one event
    return regions(cu, MOVED_FREE).replace("CHECK(cudaFreeAsync(buf, producer));", "CHECK(cudaFreeAsync(buf, consumer));")


def test_a_learners_answer_in_replay_is_never_all_passed(tmp_path, capsys):
    labchecks.lab3(ReplayLesson(tmp_path, LAB3, moved_free))
    out = capsys.readouterr().out
    assert "All checks passed" not in out
    assert "Passed what could be checked here; not verified without a GPU: whether it compiles; the results; the " \
           "check under compute-sanitizer; the order of the two streams' work, from the record of its calls." in out
    assert NVCC_HELP in out and "Run this lab on a GPU" in out


def test_the_courses_own_solution_that_cannot_be_replayed_fails(tmp_path, capsys):
    with pytest.raises(StaleRecording, match="this is the course's own solution"):
        labchecks.lab3(ReplayLesson(tmp_path, LAB3))
    with pytest.raises(MissingRecording, match="no recording"):
        labchecks.lab3(ReplayLesson(tmp_path, LAB3, error=MissingRecording("no recording")))
    # comments and spacing do not make it the learner's code
    with pytest.raises(StaleRecording):
        labchecks.lab3(ReplayLesson(tmp_path, LAB3, lambda cu: "// a comment\n" + cu.replace("    ", "  ")))
    assert "All checks passed" not in capsys.readouterr().out


def test_without_nvcc_live_nothing_that_needs_it_passes(tmp_path, capsys):
    class NoNvcc(ReplayLesson):
        live = True

        def compile(self, file, flags=()):
            raise checks.NvccNotFound(NVCC_HELP)

    labchecks.lab3(NoNvcc(tmp_path, LAB3, moved_free))
    out = capsys.readouterr().out
    assert "All checks passed" not in out and "not verified here: whether it compiles" in out and NVCC_HELP in out


def test_a_lab_incomplete_shows_its_message_not_the_helpers_frames():
    e = checks.LabIncomplete("1 thing still wrong: x")
    assert e._render_traceback_()[0] == "LabIncomplete: 1 thing still wrong: x"


# -- the run-time halves of the lab checks, fed canned output ------------------------------------------------
# Live, a wrong answer that reads right is caught only by what its run prints; in replay no such run exists.
# Here each check reads the solution's code (or an edit of it) and gets the output a GPU run of a wrong
# answer would print: the verdict must come from the run-time half.
MiB = 1 << 20


@pytest.fixture(autouse=True)
def canned_sanitizer(monkeypatch):
    monkeypatch.setattr(sanitizer, "measure", canned_measure("compute-sanitizer --tool memcheck race 16384 3 300 30", 99))


def verdict(check, lesson):
    """The check's error message ('' if it passed)."""
    try:
        check(lesson)
    except checks.LabIncomplete as e:
        return str(e)
    return ""


def lab1_run(original, limit, yours, bad_slots=0, leaked=0, free_waits=True):
    out = [{"what": "memory", "version": v, "pool_used_before": 0, "pool_used_after": leaked if v == "stream_ordered"
            else 0, "pool_reserved": 4 * MiB} for v in ("original", "preallocated", "stream_ordered")]
    if leaked:
        return out
    want = 1 * 25165824 + 4 * MiB // 4  # slot 0: factor 1 times the input's sum, plus n
    out.append({"what": "probe", "version": "stream_ordered", "hold_ms": 25, "delay_ms": 1, "bytes": 4 * MiB,
                "errors": 0 if free_waits else 1, "expected": want, "got": want if free_waits else 2**64 - MiB})
    for version, us in (("original", original), ("preallocated", limit), ("stream_ordered", yours)):
        out.append({"what": "time", "version": version, "bytes": 4 * MiB, "iterations": 200,
                    "us_per_iteration": [us * (1 + 0.01 * (k % 3 - 1)) for k in range(9)]})
        bad = bad_slots if version == "stream_ordered" else 0
        out.append({"what": "result", "version": version, "slots": 1800, "errors": bad, "first_bad": 7 if bad else -1,
                    "expected": 50 if bad else 0, "got": 0})
    return out


LAB1 = Lab("lab1_stream_ordered", "pipeline.cu")


def test_lab1_speed_is_judged_against_the_limit(tmp_path, capsys):
    # an H100-like run of the solution, and of an answer whose host waits in every iteration
    assert verdict(labchecks.lab1, CannedLesson(tmp_path, LAB1, lab1_run(98.0, 8.8, 10.1))) == ""
    out = capsys.readouterr().out
    assert "the limit plus 3.6 µs" in out and "WRONG" not in out  # no record here: the order is not verified
    slow = verdict(labchecks.lab1, CannedLesson(tmp_path, LAB1, lab1_run(98.0, 8.8, 15.0)))
    assert "speed: the original takes 98.0 µs per iteration, the limit" in slow and "yours 15.0 µs" in slow
    # a T4-like run, where the kernels dominate: a quarter of the limit is the allowance
    assert verdict(labchecks.lab1, CannedLesson(tmp_path, LAB1, lab1_run(160.0, 52.0, 55.0))) == ""
    assert "speed" in verdict(labchecks.lab1, CannedLesson(tmp_path, LAB1, lab1_run(160.0, 52.0, 70.0)))
    wrong = verdict(labchecks.lab1, CannedLesson(tmp_path, LAB1, lab1_run(98.0, 8.8, 10.1, bad_slots=3)))
    assert "result (yours): output slot 7 is 0, expected 50" in wrong and "speed" not in wrong


def only_the_last_freed(cu):
    return regions(cu, ["CHECK(cudaMallocAsync(&buf, bytes, s));", "",
                        "if (it == iters - 1) CHECK(cudaFreeAsync(buf, s));  // only the last one"])


def test_lab1_a_leak_is_caught_by_the_pools_used_memory(tmp_path):
    """Freeing only the last buffer: the reading cannot tell (the free is in the loop); the pool's memory in use
    after the function says 199 buffers were never freed."""
    said = verdict(labchecks.lab1, CannedLesson(tmp_path, LAB1, lab1_run(0, 0, 0, leaked=199 * 4 * MiB),
                                                 edit=only_the_last_freed))
    assert "leak: after your function returned and s was synchronized the default pool still has 834,666,496 " \
           "bytes (796 MiB) in use" in said and "about 199 buffer(s)" in said


RACE_REPORT = """\
========= COMPUTE-SANITIZER
========= Invalid __global__ read of size 4 bytes
=========     at consume(const int *, int *, int, unsigned int)+0x1f0 in race.cu:41
=========     by thread (3,0,0) in block (0,0,0)
=========     Address 0x7f3a00000000 is out of bounds
=========
========= Use-after-free on allocation of size 65,536 bytes at 0x7f3a00000000
=========     Address 0x7f3a00000000 is potentially accessed after it is free'd
=========
========= ERROR SUMMARY: 2 errors
"""


def freed_on_another_stream(cu):
    return regions(cu, ["CHECK(cudaMallocAsync(&buf, bytes, s));", "",
                        "cudaStream_t t;\nCHECK(cudaStreamCreateWithFlags(&t, cudaStreamNonBlocking));\n"
                        "CHECK(cudaFreeAsync(buf, t));  // not ordered after the kernels on s\n"
                        "CHECK(cudaStreamDestroy(t));"])


def test_lab1_a_free_on_another_stream_is_caught_by_the_sanitizer(tmp_path, capsys):
    """The right results and speed do not pass it; the sanitizer report of a use not ordered before the free does,
    and the reading, which decides nothing, points at the line beside it."""
    lesson = CannedLesson(tmp_path, LAB1, lab1_run(98.0, 8.8, 10.1), RACE_REPORT, edit=freed_on_another_stream)
    said = verdict(labchecks.lab1, lesson)
    assert "compute-sanitizer found 2 error(s), such as a use of buf not ordered before its free" in said
    assert said.startswith("1 thing still wrong")
    assert ("the reading of your code says: cudaFreeAsync is called on `t`, and nothing orders it after the "
            "kernels on `s`") in capsys.readouterr().out


def lab2_run(kept_after_sync, us_yours, reserved_end=0, threshold=2**64 - 1, threshold_after=0):
    out = []
    for loop, after_sync, us in (("threshold 0", 0, 200.0), ("limit", 0, 12.0), ("yours", kept_after_sync, us_yours)):
        out += [{"loop": loop, "it": it, "us": us, "reserved_after_malloc": 0 if loop == "limit" else 64 * MiB,
                 "reserved_after_sync": after_sync} for it in range(100)]
    for loop, th, end, after in (("threshold 0", 0, 0, 0), ("limit", 0, 0, 0),
                                 ("yours", threshold, reserved_end, threshold_after)):
        out.append({"loop": loop, "summary": True, "bytes": 64 * MiB, "threshold": th, "threshold_before": 0,
                    "threshold_after": after, "reserved_end": end, "used_end": 0, "slots": 100, "errors": 0,
                    "first_bad": -1, "expected": 0, "got": 0})
    return out


LAB2 = Lab("lab2_tune_pool", "tuned.cu")


def test_lab2_a_pool_that_still_shrinks_is_caught_by_its_reserved_memory(tmp_path):
    assert verdict(labchecks.lab2, CannedLesson(tmp_path, LAB2, lab2_run(64 * MiB, 14.0))) == ""
    # threshold 32 MiB: never empty, faster than threshold 0, and still wrong
    half = verdict(labchecks.lab2, CannedLesson(tmp_path, LAB2, lab2_run(32 * MiB, 95.0, threshold=32 * MiB)))
    assert "reserved memory: the pool still gives memory back and maps it again" in half
    assert "less than the 67,108,864 bytes (64 MiB) each iteration allocates" in half
    empty = verdict(labchecks.lab2, CannedLesson(tmp_path, LAB2, lab2_run(0, 200.0, threshold=0)))
    assert "it reserved 0 bytes after the synchronization of 100 of 100 iterations" in empty and "speed" in empty
    kept = verdict(labchecks.lab2, CannedLesson(tmp_path, LAB2, lab2_run(64 * MiB, 14.0, reserved_end=64 * MiB)))
    assert "after your trim the pool still reserves 67,108,864 bytes (64 MiB)" in kept


def test_lab2_a_one_byte_threshold_is_wrong_by_its_results_and_its_value(tmp_path, capsys):
    edit = lambda cu: regions(cu, {0: "const uint64_t keep = 1;\n"  # noqa: E731
                                      "CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, (void *)&keep));"})
    said = verdict(labchecks.lab2, CannedLesson(tmp_path, LAB2, lab2_run(0, 200.0, threshold=1), edit=edit))
    assert "it reserved 0 bytes after the synchronization" in said
    # the reading decides nothing: it points at the value beside the run's finding
    assert "the release threshold set before the loop is 1 byte, less than the 67,108,864 bytes" in \
        capsys.readouterr().out


def test_lab2_the_default_pools_threshold_must_be_put_back(tmp_path):
    said = verdict(labchecks.lab2, CannedLesson(tmp_path, LAB2, lab2_run(64 * MiB, 14.0, threshold_after=2**64 - 1)))
    assert "the default pool's release threshold is left at UINT64_MAX (it was 0 bytes)" in said


def test_lab2_speed_is_judged_against_the_limit(tmp_path):
    slow = verdict(labchecks.lab2, CannedLesson(tmp_path, LAB2, lab2_run(64 * MiB, 40.0)))
    assert "speed: threshold 0 takes 200.0 µs per iteration, the limit (one buffer from cudaMalloc, no pool) " \
           "12.0 µs, yours 40.0 µs" in slow and "at most 19.5 µs" in slow


def lab4_run(trimmed_reserved=0, launched_reserved=32 * MiB, alloc_nodes=1, free_nodes=1):
    mem = {"start": (0, 0), "instantiated": (0, 0), "launched": (launched_reserved, launched_reserved),
           "destroyed": (launched_reserved, launched_reserved), "trimmed": (trimmed_reserved, trimmed_reserved)}
    out = [{"what": "graph_mem", "phase": p, "used": u, "used_high": u, "reserved": r, "reserved_high": r}
           for p, (r, u) in mem.items()]
    out += [{"what": "timing", "loop": loop, "device_us": [28.0] * 100, "host_us": [3.0] * 100}
            for loop in ("stream", "graph")]
    out += [{"what": "result", "loop": loop, "n": 1 << 22, "times": t, "errors": 0, "first_bad": -1, "expected": 0.0,
             "got": 0.0} for loop, t in (("stream", 110), ("graph", 100))]
    out.append({"what": "graph", "captured": True, "instantiated": True, "nodes": 2 + alloc_nodes + free_nodes,
                "alloc_nodes": alloc_nodes, "free_nodes": free_nodes, "kernel_nodes": 2})
    return out


LAB4 = Lab("lab4_capture_graph", "graph.cu")


def test_lab4_memory_left_after_the_trim_is_caught(tmp_path, capsys):
    assert verdict(labchecks.lab4, CannedLesson(tmp_path, LAB4, lab4_run())) == ""
    assert "reserves 32.0 MiB (used: 32.0 MiB) for a 16.0 MiB buffer; it reserves physical memory in chunks, " \
           "here 2× what the graph allocates" in capsys.readouterr().out
    left = verdict(labchecks.lab4, CannedLesson(tmp_path, LAB4, lab4_run(trimmed_reserved=16 * MiB)))
    assert "at the end the graph allocator still reserves 16.0 MiB" in left
    nothing = verdict(labchecks.lab4, CannedLesson(tmp_path, LAB4, lab4_run(launched_reserved=0, free_nodes=0)))
    assert "the graph allocator reserves nothing" in nothing


def test_report_sanitize_says_what_the_sanitizer_found(tmp_path):
    lesson = CannedLesson(tmp_path, LAB3, [], RACE_REPORT)
    report = checks.Report("t", lesson)
    found = report.sanitize("race.cu", clean="no stream-ordered race", errors=", such as a race")
    assert found.errors == 2 and report.failed
    (mark, text), = report.marks
    assert text.startswith("compute-sanitizer found 2 error(s), such as a race (compute-sanitizer --tool memcheck "
                           "race 16384 3 300 30; a canned run). Its first report:")
    assert "Invalid __global__ read of size 4 bytes" in text and "ERROR SUMMARY: 2 errors" in text
    report = checks.Report("t", CannedLesson(tmp_path, LAB3, []))
    report.sanitize("race.cu", clean="no stream-ordered race")
    assert report.marks == [("ok", "compute-sanitizer finds no stream-ordered race: 0 errors (compute-sanitizer "
                                   "--tool memcheck race 16384 3 300 30; a canned run)")]


def lab3_run(pool_used_end=0, bad=False):
    clock = {"read_after_fill_us": 12.0, "same_block_next": True, "next_fill_after_read_us": 3.0}
    per_iter = [{"iter": it, "errors": 0, "first_bad": -1, "expected": 0, "got": 0, **clock} for it in range(16)]
    if bad:
        per_iter[5] = {"iter": 5, "errors": 1000, "first_bad": 3, "expected": 6003, "got": 7003,  # iteration 6's
                       **clock, "next_fill_after_read_us": -190.0}
    total = {"n": 1 << 20, "iters": 16, "fill_us": 2000, "consume_us": 200, "bad_iters": int(bad),
             "errors": 1000 * bad, "same_block": 15, "pool_used_end": pool_used_end}
    return per_iter + [total]


def test_lab3_wrong_results_and_the_sanitizer_report_are_both_said(tmp_path):
    said = verdict(labchecks.lab3, CannedLesson(tmp_path, LAB3, lab3_run(bad=True), RACE_REPORT))
    assert "results: 1 of 16 iterations wrong" in said and "iteration 6's value" in said and "TODO 2" in said
    assert "order (GPU clock): the next iteration's fill began writing into the same block before the consumer had " \
           "finished reading it in 1 of 16 iterations that reused the block (iteration 5: 190.0 µs before)" in said
    assert "compute-sanitizer found 2 error(s)" in said
    assert verdict(labchecks.lab3, CannedLesson(tmp_path, LAB3, lab3_run())) == ""


def test_lab3_a_block_never_freed_is_a_leak(tmp_path):
    said = verdict(labchecks.lab3, CannedLesson(tmp_path, LAB3, lab3_run(pool_used_end=4 * MiB)))
    assert "leak: after the loop and a device synchronization the default pool still has 4,194,304 bytes" in said


# -- issue 19: a note is not a pass; the reading follows aliases, lambdas and owners, and says what it cannot tell ----
def finished(report) -> str:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        report.finish()
    return out.getvalue()


def test_a_note_is_not_a_pass():
    report = checks.Report("t")
    report.ok("it compiles")
    assert finished(report).endswith("\nAll checks passed.\n")
    report.note("the graph is uploaded into s2, the launches go into s (Guide §16.5.1 advises the same stream)")
    out = finished(report)
    assert "All checks passed" not in out
    assert out.endswith("\nPassed, with a note: the graph is uploaded into s2, the launches go into s (Guide §16.5.1 "
                        "advises the same stream)\n")
    report.note("a second one")
    assert "Passed, with a note: the graph is uploaded into s2, the launches go into s (Guide §16.5.1 advises the " \
           "same stream); a second one" in finished(report)


def test_a_note_beside_what_was_not_verified_is_said_too():
    report = checks.Report("t")
    report.note("an upload into another stream")
    report.unverified("the results", "there is no GPU here")
    out = finished(report)
    assert "All checks passed" not in out and "Passed what could be checked here; not verified without a GPU: " \
           "the results." in out and "With a note: an upload into another stream" in out


def test_what_the_reading_cannot_tell_is_never_ok_and_the_run_decides():
    report = checks.Report("t")
    report.cannot_tell("whether `streams[0]` is s", "The reading cannot follow `streams[0]`")
    assert report.marks == [("cannot tell", "whether `streams[0]` is s: cannot tell from the source: the run decides. "
                                            "The reading cannot follow `streams[0]`")]
    assert not report.failed and finished(report).endswith("All checks passed.\n")  # the run's findings judged


def test_names_are_followed_to_what_they_are():
    code = ("cudaStream_t a = producer; auto &b = a; cudaStream_t c(b); cudaStream_t t = nullptr;"
            " CHECK(cudaStreamCreate(&t)); cudaStream_t u = x; u = y; cudaStream_t w = pick(1);"
            " cudaEvent_t ev[2]; CHECK(cudaEventCreate(&ev[0])); cudaStream_t ss[2] = {s, t}; cudaStream_t p0 = 0;")
    got = {n: cppsource.resolve(code, n) for n in ("a", "b", "c", "t", "u", "w", "ev[0]", "ev[1]", "ss[1]", "*p", "p0",
                                                    "producer", "(a)")}
    assert got == {"a": "producer", "b": "producer", "c": "producer", "t": "t", "u": None, "w": None, "ev[0]": "ev[0]",
                   "ev[1]": None, "ss[1]": None, "*p": None, "p0": "0", "producer": "producer", "(a)": "producer"}


LAMBDA_AND_ALIAS = """
void f(int n, cudaStream_t producer, cudaStream_t consumer, cudaEvent_t e1, cudaEvent_t e2) {
    cudaStream_t reader = consumer;
    auto after = [&](cudaStream_t later, cudaStream_t earlier, cudaEvent_t e) {
        CHECK(cudaEventRecord(e, earlier));
        CHECK(cudaStreamWaitEvent(later, e, 0));
    };
    for (int i = 0; i < n; ++i) {
        int *p = nullptr;
        CHECK(cudaMallocAsync(&p, 4, producer));
        fill<<<1, 32, 0, producer>>>(p);
        after(reader, producer, e1);
        read<<<1, 32, 0, consumer>>>(p);
        after(producer, reader, e2);
        CHECK(cudaFreeAsync(p, producer));
    }
}
"""


def test_lambdas_and_aliases_are_followed_in_the_stream_order():
    order = cppsource.StreamOrder(cppsource.inline(LAMBDA_AND_ALIAS, "f"))
    assert order.ordered_after("read", "cudaMallocAsync", "fill") and order.ordered_after("cudaFreeAsync", "read")
    assert order.count("cudaEventRecord") == 2 and not order.unresolved
    swapped = LAMBDA_AND_ALIAS.replace("after(producer, reader, e2)", "after(reader, producer, e2)")
    assert cppsource.StreamOrder(cppsource.inline(swapped, "f")).ordered_after("cudaFreeAsync", "read") is False
    unknown = LAMBDA_AND_ALIAS.replace("after(producer, reader, e2)", "after(producer, *which, e2)")
    order = cppsource.StreamOrder(cppsource.inline(unknown, "f"))
    assert order.ordered_after("cudaFreeAsync", "read") is None and order.unresolved == ["`*which`"]
    assert order.ordered_after("fill", "cudaMallocAsync") is True  # one known stream, in program order


OWNERS = """
struct Release { cudaStream_t stream; void operator()(int *p) const { CHECK(cudaFreeAsync(p, stream)); } };
struct Scratch {
    int *p = nullptr;
    cudaStream_t st;
    Scratch(size_t bytes, cudaStream_t s) : st(s) { CHECK(cudaMallocAsync(&p, bytes, st)); }
    ~Scratch() { CHECK(cudaFreeAsync(p, st)); }
};
void f(int n, cudaStream_t s) {
    auto drop = [s](int *q) { CHECK(cudaFreeAsync(q, s)); };
    for (int i = 0; i < n; ++i) {
        std::unique_ptr<int, Release> a(take(4, s), Release{s});
        std::unique_ptr<int, decltype(drop)> b(take(4, s), drop);
        std::unique_ptr<int, Release> c(take(4, s));
        Scratch d(4, s);
        use<<<1, 1, 0, s>>>(a.get(), b.get(), c.get(), d.p);
    }
}
"""


def test_an_owners_deleter_frees_at_the_end_of_its_block():
    code = cppsource.inline(OWNERS, "f")
    frees = [cppsource.call_arguments(code, p) for p in cppsource.calls(code, "cudaFreeAsync")]
    assert sorted(frees) == [["a", "s"], ["b", "s"], ["c", "c.stream"], ["d.p", "s"]]  # c: its stream is not known
    use = code.index("use<<<")
    body = next((a, b) for a, b in cppsource.loop_bodies(code) if a <= use < b)
    assert all(body[0] <= p < body[1] and p > use for p in cppsource.calls(code, "cudaFreeAsync"))
    assert [cppsource.call_arguments(code, p) for p in cppsource.calls(code, "cudaMallocAsync")] == [["&d.p", "4", "s"]]
    assert cppsource.resolve(code, "c.stream") is None


def test_the_courses_own_solution_live_may_leave_only_the_speed_unverified(tmp_path, capsys):
    """Live on a shared or noisy GPU the solution's speed can be "not verified" (never its fault); anything else the
    course's own solution could not verify is an error."""
    lesson = CannedLesson(tmp_path, LAB1, [], name="lab1_stream_ordered")
    report = checks.Report("t", lesson)
    report.files = ["pipeline.cu"]
    report.unverified("the speed", "the noise could have decided it on this run")
    report.finish()
    assert "not verified here: the speed" in capsys.readouterr().out
    report.unverified("the results", "no run")
    with pytest.raises(checks.Unverified, match="course's own solution"):
        report.finish()
