"""The lab checks' reading of C++/CUDA source and the report's words (no GPU, no nvcc needed)."""
from streamalloc import checks
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
