"""A lab check's report (streamalloc.checks): its words, its marks and its verdict, "passed" only for what it
verified, on stand-in lessons (no GPU, no nvcc needed). The reading of the source is tests/test_cppsource.py's; each
lab's verdicts on canned runs are in its own tests/test_labN_*.py."""

import pytest
from labcheck import RACE_REPORT, Lab, SHOWN, all_passed, noted, regions, unverified
from notebook import StandIn

from streamalloc import checks, labchecks
from streamalloc.cuda import NVCC_HELP
from streamalloc.errors import MissingRecording, StaleRecording

pytestmark = pytest.mark.usefixtures("canned_sanitizer")  # compute-sanitizer prints what a stand-in lesson says
LAB1 = Lab("lab1_stream_ordered", "pipeline.cu")
LOOP = """
void f(int n, cudaStream_t a) {
    for (int i = 0; i < n; ++i) {
        CHECK(cudaMallocAsync(&p, 4, a));
        CHECK(cudaFreeAsync(p, a));
    }
}
"""


def test_english_lists():
    assert checks.english(["a"]) == "a" and checks.english(["a", "b", "c"], "or") == "a, b or c"


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
def replayed(tmp_path, lab: Lab, edit=None, error=StaleRecording("its code changed"), live=False, compiled=None):
    """A lesson in replay without nvcc (what `compile` gives: None) whose recording does not match: its runs, traced
    runs and sanitizer runs raise `error`; only the reading can be checked."""
    def fails(*_):
        raise error
    return StandIn(tmp_path, fails, live=live, name=lab.name, files={lab.file: lab.cuda(edit)}, calls=fails,
                   sanitizer_output=None, compiled=compiled)


LAB3 = Lab("lab3_fix_the_race", "race.cu")
MOVED_FREE = ("CHECK(cudaEventRecord(filled, producer));\nCHECK(cudaStreamWaitEvent(consumer, filled, 0));",
              "// the free goes to the consumer, after its read, in stream order")


def moved_free(cu):  # a right answer other than the solution: the free on the consumer, one event
    return regions(cu, MOVED_FREE).replace("CHECK(cudaFreeAsync(buf, producer));", "CHECK(cudaFreeAsync(buf, consumer));")


def test_a_learners_answer_in_replay_is_never_all_passed(tmp_path, capsys):
    labchecks.lab3(replayed(tmp_path, LAB3, moved_free))
    out = capsys.readouterr().out
    assert unverified("not verified without a GPU: whether it compiles; the results; the check under "
                      "compute-sanitizer; the order of the two streams' work, from the record of its calls.")
    assert NVCC_HELP in out and "Run this lab on a GPU" in out


def test_the_courses_own_solution_that_cannot_be_replayed_fails(tmp_path, capsys):
    with pytest.raises(StaleRecording, match="this is the course's own solution"):
        labchecks.lab3(replayed(tmp_path, LAB3))
    with pytest.raises(MissingRecording, match="no recording"):
        labchecks.lab3(replayed(tmp_path, LAB3, error=MissingRecording("no recording")))
    # comments and spacing do not make it the learner's code
    with pytest.raises(StaleRecording):
        labchecks.lab3(replayed(tmp_path, LAB3, lambda cu: "// a comment\n" + cu.replace("    ", "  ")))
    assert SHOWN == []  # no verdict at all: the course's error instead


def test_without_nvcc_live_nothing_that_needs_it_passes(tmp_path, capsys):
    labchecks.lab3(replayed(tmp_path, LAB3, moved_free, live=True, compiled=checks.NvccNotFound(NVCC_HELP)))
    out = capsys.readouterr().out
    assert unverified("not verified here: whether it compiles") and NVCC_HELP in out


def test_a_lab_incomplete_shows_its_message_not_the_helpers_frames():
    e = checks.LabIncomplete("1 thing still wrong: x")
    assert e._render_traceback_()[0] == "LabIncomplete: 1 thing still wrong: x"


def test_report_sanitize_says_what_the_sanitizer_found(tmp_path):
    lesson = LAB3.canned(tmp_path, [], RACE_REPORT)
    report = checks.Report("t", lesson)
    found = report.sanitize("race.cu", clean="no stream-ordered race", errors=", such as a race")
    assert found.errors == 2 and report.failed
    (mark, text), = report.marks
    assert text.startswith("compute-sanitizer found 2 error(s), such as a race (compute-sanitizer --tool memcheck "
                           "race 16384 3 300 30; a canned run). Its first report:")
    assert "Invalid __global__ read of size 4 bytes" in text and "ERROR SUMMARY: 2 errors" in text
    report = checks.Report("t", LAB3.canned(tmp_path, []))
    report.sanitize("race.cu", clean="no stream-ordered race")
    assert report.marks == [("ok", "compute-sanitizer finds no stream-ordered race: 0 errors (compute-sanitizer "
                                   "--tool memcheck race 16384 3 300 30; a canned run)")]


# -- a note is not a pass; what the reading cannot tell is never ok ---------------------------------------------
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
    assert finished(report).endswith("\nAll checks passed.\n") and all_passed()  # the prose, and the data
    report.note("the graph is uploaded into s2, the launches go into s (Guide §16.5.1 advises the same stream)")
    out = finished(report)
    assert not all_passed() and SHOWN[-1].word == "solved"
    assert noted("the graph is uploaded into s2, the launches go into s (Guide §16.5.1 advises the same stream)")
    assert out.endswith("\nPassed, with a note: the graph is uploaded into s2, the launches go into s (Guide §16.5.1 "
                        "advises the same stream)\n")
    report.note("a second one")
    finished(report)
    assert SHOWN[-1].finding == ("the graph is uploaded into s2, the launches go into s (Guide §16.5.1 advises the "
                                 "same stream); a second one")


def test_a_note_beside_what_was_not_verified_is_said_too():
    report = checks.Report("t")
    report.note("an upload into another stream")
    report.unverified("the results", "there is no GPU here")
    out = finished(report)
    assert unverified("not verified without a GPU: the results.") and "With a note: an upload into another stream" \
        in SHOWN[-1].finding and "Passed what could be checked here; not verified without a GPU: the results." in out


def test_what_the_reading_cannot_tell_is_never_ok_and_the_run_decides():
    report = checks.Report("t")
    report.cannot_tell("whether `streams[0]` is s", "The reading cannot follow `streams[0]`")
    assert report.marks == [("cannot tell", "whether `streams[0]` is s: cannot tell from the source: the run decides. "
                                            "The reading cannot follow `streams[0]`")]
    assert not report.failed and finished(report) and all_passed()  # the run's findings judged


def test_the_courses_own_solution_live_may_leave_only_the_speed_unverified(tmp_path, capsys):
    """Live on a shared or noisy GPU the solution's speed can be "not verified" (never its fault); anything else the
    course's own solution could not verify is an error."""
    lesson = LAB1.canned(tmp_path, [], name="lab1_stream_ordered")
    report = checks.Report("t", lesson)
    report.files = ["pipeline.cu"]
    report.unverified("the speed", "the noise could have decided it on this run")
    report.finish()
    assert unverified("not verified here: the speed")
    report.unverified("the results", "no run")
    with pytest.raises(checks.Unverified, match="course's own solution"):
        report.finish()


def test_where_the_reading_points_at_something_nothing_is_said_to_have_passed():
    """In replay (undecided) the reading explains and decides nothing: the verdict stays "not verified", but its prose
    no longer says "Passed what could be checked here" under the reading's objections, and the summary's finding
    (cut at 300 characters) names the reading's first point before what was not verified."""
    report = checks.Report("t")
    with report.reading(decided=False):
        report.wrong("cudaFreeAsync is not called: free buf in stream order")
        report.wrong("cudaFree is still called inside the loop")
    report.unverified("the results", "there is no GPU here")
    out = finished(report)
    assert SHOWN[-1].word == "not verified" and not all_passed()
    assert SHOWN[-1].finding.startswith("the reading of your code says: cudaFreeAsync is not called: free buf in "
                                        "stream order (and more); not verified without a GPU: the results.")
    assert "Passed what could be checked" not in out and "\nNot verified without a GPU: the results.\nMeanwhile the " \
        "reading of your code says: cudaFreeAsync is not called: free buf in stream order (and 1 more, above); the " \
        "reading explains, and only a run decides." in out


def test_a_driver_twin_taken_through_a_pointer_is_not_said_to_be_missing():
    """CU_CALL(cuGraphLaunch, ...) or a pointer from cudaGetDriverEntryPoint("cuGraphLaunch"): the reading cannot follow
    the call, so it cannot tell (the run decides), where it used to say "cudaGraphLaunch is not called"; a file that
    names neither is still told so."""
    report = checks.Report("t")
    report.require_calls('CU_CALL(cuGraphLaunch, (CUgraphExec)exec, (CUstream)s);', {"cudaGraphLaunch": "launch it"})
    assert [(f.mark, f.text.split(":")[0]) for f in report.items] == [(checks.CANNOT_TELL, "cudaGraphLaunch")]
    report = checks.Report("t")
    report.require_calls("launch(exec, s);", {"cudaGraphLaunch": "launch it"})
    assert [(f.mark, f.text) for f in report.items] == [(checks.WRONG, "cudaGraphLaunch is not called: launch it")]
