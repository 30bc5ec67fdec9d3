"""Lab 1 (from synchronous to stream-ordered): the check names what is still synchronous in a wrong answer.

Run with tests/labcheck.py in this session's mode. Most words asserted are the check's reading of the code,
said live and in replay alike; a `live_only` answer passes that reading and only the run catches it (its
run-time verdict is also tested on canned output in tests/test_checks.py). Each wrong answer is valid
CUDA: only the check catches it.
"""
import pytest

from labcheck import LIVE, Lab, both, in_function, live_only, regions

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
    assert "whether cudaMallocAsync on `streams[0]` is ordered before the kernels on s: cannot tell from the " \
           "source: the run decides" in check.printed, check.printed


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
    """issue 10: cudaFreeAsync(buf, t) on a stream of its own. issue 19: t is made in the loop and no event orders it,
    so the reading can tell (live, compute-sanitizer and the probe show it too)."""
    edit = lambda t: regions(t, ["CHECK(cudaMallocAsync(&buf, bytes, s));", "",  # noqa: E731
                                 "cudaStream_t t;\nCHECK(cudaStreamCreateWithFlags(&t, cudaStreamNonBlocking));\n"
                                 "CHECK(cudaFreeAsync(buf, t));  // not ordered after the kernels on s\n"
                                 "CHECK(cudaStreamDestroy(t));"])
    check = LAB.rejected("freed on another stream", edit, "cudaFreeAsync is called on `t`, and nothing orders it",
                         built=True)
    if LIVE:  # the run shows it too: the probe's sum, or (as on the H100 in the last live run) the program failing
        assert "compute-sanitizer found" in check.evalue and any(
            w in check.evalue for w in ("the free does not wait for the kernels", "pipeline exited with status"))


# -- issue 19: wrong answers and right ones written differently, judged in process on canned runs ----------------
# Each answer goes through labchecks.lab1 with the output a GPU's run of it would print (CannedLesson): where the
# reading decides, the words asserted are the reading's; where only the run can tell, the canned run is what the
# probe shows, and a live_only test below runs the answer through the notebook on a GPU.

from labcheck import CLEAN, CannedLesson, canned_measure  # noqa: E402
from streamalloc import checks, labchecks, sanitizer  # noqa: E402

MiB = 1 << 20
WANT = 25165824 + MiB  # slot 0: factor 1 times the input's sum, plus n


def run_lines(free_waits=True, leaked=0, yours=10.1, others=(76.0, 8.6)):
    """What pipeline.cu prints on an H100 for an answer: a right one, one whose free does not wait (the probe's
    reduce sums the other stream's -1s), or one that leaks (the program stops before timing)."""
    out = [{"what": "memory", "version": v, "pool_used_before": 0, "pool_used_after": leaked if v == "stream_ordered"
            else 0, "pool_reserved": 4 * MiB} for v in ("original", "preallocated", "stream_ordered")]
    if leaked:
        return out
    out.append({"what": "probe", "version": "stream_ordered", "hold_ms": 25, "delay_ms": 1, "bytes": 4 * MiB,
                "errors": 0 if free_waits else 1, "expected": WANT, "got": WANT if free_waits else 2**64 - MiB})
    for version, us in (("original", others[0]), ("preallocated", others[1]), ("stream_ordered", yours)):
        out.append({"what": "time", "version": version, "bytes": 4 * MiB, "iterations": 200,
                    "us_per_iteration": [us] * 9})
        out.append({"what": "result", "version": version, "slots": 1800, "errors": 0, "first_bad": -1,
                    "expected": 0, "got": 0})
    return out


def judged(tmp_path, edit, lines, monkeypatch, capsys):
    """(the check's error message or '', what it printed) for the answer `edit` whose run printed `lines`."""
    monkeypatch.setattr(sanitizer, "measure", canned_measure("compute-sanitizer pipeline 65536 4 1", 0))
    try:
        labchecks.lab1(CannedLesson(tmp_path, LAB, lines, CLEAN, edit))
        said = ""
    except checks.LabIncomplete as e:
        said = str(e)
    return said, capsys.readouterr().out


def test_where_the_gpus_work_hides_the_host_waits_the_speed_is_unverified_not_wrong(tmp_path, monkeypatch, capsys):
    """A GPU whose kernels take most of an iteration (a slow one, or one shared with other work; lab 2 met it live):
    the original within 1.5x of the target cannot tell a right answer from a wrong one by time. A right answer is
    then neither rejected nor "All checks passed"; a wrong one is still rejected by what the run and reading show."""
    busy = (300.0, 260.0)
    said, out = judged(tmp_path, None, run_lines(yours=262.0, others=busy), monkeypatch, capsys)
    assert said == "" and "All checks passed" not in out and "not verified" in out and "the speed: " in out, out
    said, _ = judged(tmp_path, None, run_lines(free_waits=False, yours=262.0, others=busy), monkeypatch, capsys)
    assert "the free does not wait for the kernels" in said and "speed" not in said, said


def body(code):
    """The solution with pipeline_stream_ordered's loop body replaced by `code` (the allocation and free
    regions and the wait region between them)."""
    return lambda t: in_function(regions(t, ["", "", ""]), FUNCTION, "        compute(buf, in, n, it, out + it, s);\n",
                                 "".join(f"        {ln}\n" for ln in code.splitlines()))


DELETER = """struct StreamFree {  // frees in stream order on the stream it holds
    cudaStream_t stream;
    void operator()(int *p) const { CHECK(cudaFreeAsync(p, stream)); }
};

"""
SCRATCH = """struct Scratch {  // a buffer for one iteration: allocated and freed in stream order
    int *p = nullptr;
    cudaStream_t st;
    Scratch(size_t bytes, cudaStream_t stream) : st(stream) { CHECK(cudaMallocAsync(&p, bytes, st)); }
    ~Scratch() { CHECK(cudaFreeAsync(p, st)); }
};

"""


def before_function(text):
    return lambda t: t.replace(f"void {FUNCTION}(", text + f"void {FUNCTION}(", 1)


ANSWERS_WRONG = {  # name: (edit, what its run prints, words the verdict must hold, who decides)
    "freed on an alias of the per-thread stream": (
        body("cudaStream_t done_on = cudaStreamPerThread;\nCHECK(cudaMallocAsync(&buf, bytes, s));\n"
             "compute(buf, in, n, it, out + it, s);\nCHECK(cudaFreeAsync(buf, done_on));"),
        run_lines(free_waits=False), ["the free does not wait for the kernels",
                                      "cudaFreeAsync is called on done_on (cudaStreamPerThread), not on s"], "reading"),
    "cudaFree with no wait": (
        lambda t: regions(t, ["CHECK(cudaMallocAsync(&buf, bytes, s));", "", "CHECK(cudaFree(buf));"]),
        run_lines(free_waits=False), ["cudaFree is still called inside the loop"], "reading"),
    "an owner whose deleter frees on the legacy stream": (
        both(before_function(DELETER), body(
            "CHECK(cudaMallocAsync(&buf, bytes, s));\nstd::unique_ptr<int, StreamFree> owner(buf, StreamFree{0});\n"
            "compute(owner.get(), in, n, it, out + it, s);")),
        run_lines(free_waits=False), ["cudaFreeAsync is called on 0, not on s"], "reading"),
    "a lambda that frees before the kernels": (
        body("auto drop = [&](int *p) { CHECK(cudaFreeAsync(p, s)); };\nCHECK(cudaMallocAsync(&buf, bytes, s));\n"
             "drop(buf);\ncompute(buf, in, n, it, out + it, s);"),
        run_lines(free_waits=False), ["cudaFreeAsync comes before compute(...)"], "reading"),
    "allocated on the per-thread stream in a helper": (
        both(before_function("static int *fresh(size_t bytes, cudaStream_t on) {\n    int *p = nullptr;\n"
                             "    CHECK(cudaMallocAsync(&p, bytes, on));\n    return p;\n}\n\n"),
             body("buf = fresh(bytes, cudaStreamPerThread);\ncompute(buf, in, n, it, out + it, s);\n"
                  "CHECK(cudaFreeAsync(buf, s));")),
        run_lines(), ["cudaMallocAsync is called on cudaStreamPerThread, not on s"], "reading"),
    "every other buffer leaked": (
        lambda t: regions(t, ["CHECK(cudaMallocAsync(&buf, bytes, s));", "",
                              "if (it % 2) CHECK(cudaFreeAsync(buf, s));  // half of them"]),
        run_lines(leaked=100 * 4 * MiB), ["leak: after your function returned", "about 100 buffer(s)"], "run"),
    "freed on a stream picked from an array": (
        body("cudaStream_t streams[2] = {s, cudaStreamPerThread};\nCHECK(cudaMallocAsync(&buf, bytes, s));\n"
             "compute(buf, in, n, it, out + it, s);\nCHECK(cudaFreeAsync(buf, streams[1]));"),
        run_lines(free_waits=False), ["the free does not wait for the kernels", "the reduce summed"], "run"),
    "a stream made in the loop, no event": (
        body("cudaStream_t t;\nCHECK(cudaStreamCreateWithFlags(&t, cudaStreamNonBlocking));\n"
             "CHECK(cudaMallocAsync(&buf, bytes, s));\ncompute(buf, in, n, it, out + it, s);\n"
             "CHECK(cudaFreeAsync(buf, t));\nCHECK(cudaStreamDestroy(t));"),
        run_lines(free_waits=False), ["cudaFreeAsync is called on `t`, and nothing orders it after the kernels"],
        "reading"),
}


@pytest.mark.parametrize("name", list(ANSWERS_WRONG))
def test_issue19_a_wrong_answer_is_told_why(name, tmp_path, monkeypatch, capsys):
    edit, lines, words, _ = ANSWERS_WRONG[name]
    said, printed = judged(tmp_path, edit, lines, monkeypatch, capsys)
    assert said, printed
    for w in words:
        assert w in said, said
    assert "All checks passed" not in printed


@pytest.mark.parametrize("name", [n for n, a in ANSWERS_WRONG.items() if a[3] == "reading"])
def test_issue19_a_wrong_answer_the_reading_sees_is_wrong_with_a_right_run_too(name, tmp_path, monkeypatch, capsys):
    """Were its run to show nothing (timing luck), the reading still names what is wrong."""
    edit, _, words, _ = ANSWERS_WRONG[name]
    said, _ = judged(tmp_path, edit, run_lines(), monkeypatch, capsys)
    assert said and any(w in said for w in words if "does not wait" not in w), said


ANSWERS_RIGHT = {
    "a unique_ptr whose deleter frees on s": both(before_function(DELETER), body(
        "CHECK(cudaMallocAsync(&buf, bytes, s));\nstd::unique_ptr<int, StreamFree> owner(buf, StreamFree{s});\n"
        "compute(owner.get(), in, n, it, out + it, s);")),
    "a scratch object: allocated in its constructor, freed in its destructor": both(before_function(SCRATCH), body(
        "Scratch scratch(bytes, s);\ncompute(scratch.p, in, n, it, out + it, s);")),
    "a lambda that frees, after the kernels": body(
        "auto release = [&](int *p) { CHECK(cudaFreeAsync(p, s)); };\nCHECK(cudaMallocAsync(&buf, bytes, s));\n"
        "compute(buf, in, n, it, out + it, s);\nrelease(buf);"),
    "the stream under other names": body(
        "cudaStream_t work = s;\nauto &same = work;\nCHECK(cudaMallocAsync(&buf, bytes, same));\n"
        "compute(buf, in, n, it, out + it, work);\nCHECK(cudaFreeAsync(buf, (same)));"),
    "freed on another stream after an event": body(
        "static cudaStream_t t = nullptr;\nstatic cudaEvent_t done = nullptr;\n"
        "if (!t) CHECK(cudaStreamCreateWithFlags(&t, cudaStreamNonBlocking));\n"
        "if (!done) CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));\n"
        "CHECK(cudaMallocAsync(&buf, bytes, s));\ncompute(buf, in, n, it, out + it, s);\n"
        "CHECK(cudaEventRecord(done, s));\nCHECK(cudaStreamWaitEvent(t, done, 0));\nCHECK(cudaFreeAsync(buf, t));"),
}


@pytest.mark.parametrize("name", list(ANSWERS_RIGHT))
def test_issue19_a_right_answer_written_differently_passes(name, tmp_path, monkeypatch, capsys):
    said, printed = judged(tmp_path, ANSWERS_RIGHT[name], run_lines(), monkeypatch, capsys)
    assert said == "", said
    assert "All checks passed." in printed and "WRONG" not in printed and "cannot tell" not in printed, printed
    assert "calls cudaMallocAsync and cudaFreeAsync" in printed and "the free waits for the kernels" in printed


def test_issue19_a_stream_the_reading_cannot_follow_is_left_to_the_run(tmp_path, monkeypatch, capsys):
    """streams[0] is s here: the reading says it cannot tell, never ok, and the probe's right run decides."""
    edit = body("cudaStream_t streams[1] = {s};\nCHECK(cudaMallocAsync(&buf, bytes, streams[0]));\n"
                "compute(buf, in, n, it, out + it, s);\nCHECK(cudaFreeAsync(buf, streams[0]));")
    said, printed = judged(tmp_path, edit, run_lines(), monkeypatch, capsys)
    assert said == "" and checks.RUN_DECIDES in printed and "`streams[0]`" in printed, printed


# what a run shows of a free that does not wait: the probe's wrong sum, compute-sanitizer's report, a failing program
RUN_SHOWS_EARLY_FREE = ("the free does not wait for the kernels", "use of buf not ordered before its free",
                        "exited with status")


@pytest.mark.parametrize("name", [n for n, a in ANSWERS_WRONG.items() if a[3] == "run"])
@live_only
def test_issue19_live_a_wrong_answer_only_the_run_catches(name):
    """The reading cannot reject these: the run must, by the probe's wrong sum (the canned run's words) or by
    compute-sanitizer's report of a use not ordered before the free (what the H100 showed for the array's stream)."""
    edit, _, words, _ = ANSWERS_WRONG[name]
    check = LAB.rejected(name, edit, built=True)
    assert all(w in check.evalue for w in words) or RUN_SHOWS_EARLY_FREE[1] in check.evalue, check.evalue


@pytest.mark.parametrize("name", ["freed on an alias of the per-thread stream", "cudaFree with no wait",
                                  "an owner whose deleter frees on the legacy stream",
                                  "a lambda that frees before the kernels"])
@live_only
def test_issue19_live_the_probe_shows_a_free_that_does_not_wait(name):
    """The reading rejects these too; here the run must show it as well: the probe's wrong sum, compute-sanitizer's
    report of a use not ordered before the free, or the program failing. (Live on the H100 the sanitizer, not the
    probe, showed all four: the probe's other stream did not get the freed block there.)"""
    check = LAB.rejected(name, ANSWERS_WRONG[name][0], built=True)
    assert any(w in check.evalue for w in RUN_SHOWS_EARLY_FREE), f"{name}: only the reading rejected it: {check.evalue}"


SLOWER = "freed on another stream after an event"  # right in what it does, but the lab's speed target rejects it


@pytest.mark.parametrize("name", [n for n in ANSWERS_RIGHT if n != SLOWER])
@live_only
def test_issue19_live_a_right_answer_written_differently_passes(name):
    LAB.passes(name, ANSWERS_RIGHT[name])


@live_only
def test_issue19_live_a_free_on_another_stream_after_an_event_is_right_but_misses_the_speed_target():
    """Live on the H100 its event and cross-stream wait each iteration cost about 11 µs over the limit (target: 4.7 µs
    over it): every result is right and only the speed is wrong, which is what the check must say."""
    check = LAB.rejected(SLOWER, ANSWERS_RIGHT[SLOWER], "1 thing(s) still wrong: speed:", built=True)
    assert "result (yours): all" in check.printed and "no leak" in check.printed, check.printed
