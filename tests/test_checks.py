"""The lab checks' reading of C++/CUDA source, the report's words, and the run-time halves of the lab checks
fed canned output (no GPU, no nvcc needed)."""
import json

import pytest

from labcheck import Lab
from streamalloc import checks, labchecks, sanitizer
from streamalloc.errors import MissingRecording, StaleRecording
from streamalloc.lesson import Result

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
    assert checks.function_text("int x; void f(int a) { if (a) { g(a, h(1, 2)); } } int y;", "f") == \
        "f(int a) { if (a) { g(a, h(1, 2)); } }"
    assert checks.function_text("void g() {}", "f") == ""
    code = checks.function_text(LOOP, "f")
    assert [checks.call_arguments(code, p) for p in checks.calls(code, "cudaMallocAsync")] == [["&p", "4", "a"]]
    assert [name for name, _ in checks.launches(LOOP)] == ["fill", "read"]
    assert checks.english(["a"]) == "a" and checks.english(["a", "b", "c"], "or") == "a, b or c"


def test_the_stream_order_model():
    order = checks.StreamOrder(LOOP)
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
    assert [text for _, text in report.items] == [
        "cudaFreeAsync and cudaMallocAsync are still called inside the loop",
        "cudaFreeAsync is still called inside the loop",
        "no cudaMalloc or cudaFree inside a loop",
        "cudaGraphLaunch or cudaGraphUpload is not called: launch it"]


def test_what_replay_could_not_check_says_why():
    report = checks.Report("t")
    report.not_replayed("the results", MissingRecording("none"))
    report.not_replayed("the results and the timing", StaleRecording("changed"))
    missing, stale = (text for _, text in report.items)
    assert "no recording of the solution yet" in missing and "timing" not in missing
    assert "your code differs from the recorded solution" in stale


def test_where_calls_stand_against_a_loop():
    report = checks.Report("t")
    say = {"missing": "none", "before": "before", "inside": "inside", "after": "after"}
    for positions in ([], [5, 50], [50, 500], [500]):
        report.placed(positions, (10, 100), "before", say)
    assert report.items == [("WRONG", "none"), ("ok", "before"), ("WRONG", "inside"), ("WRONG", "after")]


# -- the run-time halves of the lab checks, fed canned output ------------------------------------------------
# Live, a wrong answer that reads right is caught only by what its run prints; in replay no such run exists.
# Here each check reads the solution's own code (so its reading passes) and gets the output a GPU run of a
# wrong answer would print: the verdict must come from the run-time half.
MiB = 1 << 20


class CannedLesson:
    """A lesson whose CUDA file is the solution's and whose run prints the given lines, as a GPU run would."""

    live = True

    def __init__(self, tmp_path, lab: Lab, records, sanitizer_output: str = ""):
        self.path = tmp_path / lab.file
        self.path.write_text(lab.cuda())
        self.stdout = "".join(json.dumps(r) + "\n" for r in records)
        self.sanitizer_output = sanitizer_output

    def source(self, file):
        return self.path

    def compile(self, file, flags=()):
        return None  # the report says "not checked: nvcc is not installed here"; the run is canned anyway

    def run(self, file, args=(), timeout=120, flags=()):
        return Result(file, list(args), self.stdout, "", 0.1, False, "a canned run")


def verdict(check, lesson):
    """What the check printed, and its error message ('' if it passed)."""
    try:
        check(lesson)
    except checks.LabIncomplete as e:
        return str(e)
    return ""


def lab1_run(original, limit, yours, bad_slots=0):
    out = []
    for version, us in (("original", original), ("preallocated", limit), ("stream_ordered", yours)):
        out.append({"what": "time", "version": version, "bytes": 4 * MiB, "iterations": 200,
                    "us_per_iteration": [us * (1 + 0.01 * (k % 3 - 1)) for k in range(9)]})
        bad = bad_slots if version == "stream_ordered" else 0
        out.append({"what": "result", "version": version, "slots": 1800, "errors": bad, "first_bad": 7 if bad else -1,
                    "expected": 50 if bad else 0, "got": 0})
    return out


def test_lab1_speed_is_judged_against_the_limit(tmp_path, capsys):
    lab = Lab("lab1_stream_ordered", "pipeline.cu")
    # an H100-like run of the solution, and of an answer whose host waits in every iteration
    assert verdict(labchecks.lab1, CannedLesson(tmp_path, lab, lab1_run(98.0, 8.8, 10.1))) == ""
    assert "the limit plus 3.6 µs" in capsys.readouterr().out
    slow = verdict(labchecks.lab1, CannedLesson(tmp_path, lab, lab1_run(98.0, 8.8, 15.0)))
    assert "speed: the original takes 98.0 µs per iteration, the limit" in slow and "yours 15.0 µs" in slow
    # a T4-like run, where the kernels dominate: a quarter of the limit is the allowance
    assert verdict(labchecks.lab1, CannedLesson(tmp_path, lab, lab1_run(160.0, 52.0, 55.0))) == ""
    assert "speed" in verdict(labchecks.lab1, CannedLesson(tmp_path, lab, lab1_run(160.0, 52.0, 70.0)))
    wrong = verdict(labchecks.lab1, CannedLesson(tmp_path, lab, lab1_run(98.0, 8.8, 10.1, bad_slots=3)))
    assert "result (yours): output slot 7 is 0, expected 50" in wrong and "speed" not in wrong


def lab2_run(kept_after_sync, us_yours, reserved_end=0, threshold=2**64 - 1):
    out = []
    for loop, after_sync, us in (("threshold 0", 0, 200.0), ("yours", kept_after_sync, us_yours)):
        out += [{"loop": loop, "it": it, "us": us, "reserved_after_malloc": 64 * MiB, "reserved_after_sync": after_sync}
                for it in range(100)]
    for loop, th, end in (("threshold 0", 0, 0), ("yours", threshold, reserved_end)):
        out.append({"loop": loop, "summary": True, "bytes": 64 * MiB, "threshold": th, "reserved_end": end,
                    "slots": 100, "errors": 0, "first_bad": -1, "expected": 0, "got": 0})
    return out


def test_lab2_a_pool_that_still_shrinks_is_caught_by_its_reserved_memory(tmp_path):
    lab = Lab("lab2_tune_pool", "tuned.cu")
    assert verdict(labchecks.lab2, CannedLesson(tmp_path, lab, lab2_run(64 * MiB, 14.0))) == ""
    # threshold 32 MiB: never empty, 2.1x faster than threshold 0 (above the target), and still wrong
    half = verdict(labchecks.lab2, CannedLesson(tmp_path, lab, lab2_run(32 * MiB, 95.0, threshold=32 * MiB)))
    assert "reserved memory: the pool still gives memory back and maps it again" in half
    assert "less than the 64 MiB each iteration allocates" in half and "speed" not in half
    empty = verdict(labchecks.lab2, CannedLesson(tmp_path, lab, lab2_run(0, 200.0, threshold=0)))
    assert "it reserved 0 bytes after the synchronization of 100 of 100 iterations" in empty and "speed" in empty
    kept = verdict(labchecks.lab2, CannedLesson(tmp_path, lab, lab2_run(64 * MiB, 14.0, reserved_end=64 * MiB)))
    assert "after your trim the pool still reserves 67,108,864 bytes (64 MiB)" in kept


def lab4_run(trimmed_reserved=0, launched_reserved=32 * MiB):
    mem = {"start": (0, 0), "instantiated": (0, 0), "launched": (launched_reserved, launched_reserved),
           "destroyed": (launched_reserved, launched_reserved), "trimmed": (trimmed_reserved, trimmed_reserved)}
    out = [{"what": "graph_mem", "phase": p, "used": u, "used_high": u, "reserved": r, "reserved_high": r}
           for p, (r, u) in mem.items()]
    out += [{"what": "timing", "loop": loop, "device_us": [28.0] * 100, "host_us": [3.0] * 100}
            for loop in ("stream", "graph")]
    out += [{"what": "result", "loop": loop, "n": 1 << 22, "times": t, "errors": 0, "first_bad": -1, "expected": 0.0,
             "got": 0.0} for loop, t in (("stream", 110), ("graph", 100))]
    out.append({"what": "graph", "captured": True, "instantiated": True, "nodes": 4, "alloc_nodes": 1,
                "free_nodes": 1, "kernel_nodes": 2})
    return out


def test_lab4_memory_left_after_the_trim_is_caught(tmp_path, capsys):
    lab = Lab("lab4_capture_graph", "graph.cu")
    assert verdict(labchecks.lab4, CannedLesson(tmp_path, lab, lab4_run())) == ""
    assert "reserves 32.0 MiB (used: 32.0 MiB) for a 16.0 MiB buffer; it reserves physical memory in chunks, " \
           "here 2× what the graph allocates" in capsys.readouterr().out
    left = verdict(labchecks.lab4, CannedLesson(tmp_path, lab, lab4_run(trimmed_reserved=16 * MiB)))
    assert "at the end the graph allocator still reserves 16.0 MiB" in left
    nothing = verdict(labchecks.lab4, CannedLesson(tmp_path, lab, lab4_run(launched_reserved=0)))
    assert "the graph allocator reserves nothing" in nothing


# A memcheck report of a stream-ordered race (compute-sanitizer's wording, as recorded on the H100; addresses
# made up).
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


@pytest.fixture
def canned_sanitizer(monkeypatch):
    def measure(lesson, file, args=(), tool_args=(), name="sanitizer", timeout=300, flags=()):
        data = {"output": lesson.sanitizer_output, "returncode": 99, "version": "canned",
                "command": "compute-sanitizer --tool memcheck race 16384 3 300 30"}
        return Result(name, [], "", "", 0.1, False, "a canned run", data)
    monkeypatch.setattr(sanitizer, "measure", measure)


def test_report_sanitize_says_what_the_sanitizer_found(tmp_path, canned_sanitizer):
    lesson = CannedLesson(tmp_path, Lab("lab3_fix_the_race", "race.cu"), [], RACE_REPORT)
    report = checks.Report("t")
    found = report.sanitize(lesson, "race.cu", clean="no stream-ordered race", errors=", such as a race")
    assert found.errors == 2 and report.failed
    (mark, text), = report.items
    assert text.startswith("compute-sanitizer found 2 error(s), such as a race (compute-sanitizer --tool memcheck "
                           "race 16384 3 300 30; a canned run). Its first report:")
    assert "Invalid __global__ read of size 4 bytes" in text and "ERROR SUMMARY: 2 errors" in text
    clean = CannedLesson(tmp_path, Lab("lab3_fix_the_race", "race.cu"), [],
                         "========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n")
    report = checks.Report("t")
    report.sanitize(clean, "race.cu", clean="no stream-ordered race")
    assert report.items == [("ok", "compute-sanitizer finds no stream-ordered race: 0 errors (compute-sanitizer "
                                   "--tool memcheck race 16384 3 300 30; a canned run)")]


def test_lab3_wrong_results_and_the_sanitizer_report_are_both_said(tmp_path, canned_sanitizer):
    lab = Lab("lab3_fix_the_race", "race.cu")
    per_iter = [{"iter": it, "errors": 0, "first_bad": -1, "expected": 0, "got": 0} for it in range(16)]
    per_iter[5] = {"iter": 5, "errors": 1000, "first_bad": 3, "expected": 6003, "got": 7003}  # iteration 6's values
    total = {"n": 1 << 20, "iters": 16, "fill_us": 2000, "consume_us": 200, "bad_iters": 1, "errors": 1000,
             "same_block": 15}
    said = verdict(labchecks.lab3, CannedLesson(tmp_path, lab, per_iter + [total], RACE_REPORT))
    assert "results: 1 of 16 iterations wrong" in said and "iteration 6's value" in said and "TODO 2" in said
    assert "compute-sanitizer found 2 error(s)" in said
