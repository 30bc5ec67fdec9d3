"""Lab 6 (upload ahead): the check grades what first_launch.cu measured; its reading of the code explains, and
judges only where no run can be had.

Two kinds of tests. The notebook tests run the lab's set-up, %%writefile and check cells (tests/labcheck.py) in
this session's mode: in replay, code other than the recorded solution cannot run, so the verdicts there come
from reading the code, and a right answer passes only what could be checked. The canned tests feed the check's
run-time half the output a GPU run of each answer would print (made-up numbers of the shape the H100 gives), so
every verdict that needs a run is tested here without a GPU.
"""
import inspect
import json
from pathlib import Path

import pytest
from labcheck import LIVE, Lab, live_only, regions

from streamalloc import checks, labchecks
from streamalloc.labchecks.lab6 import ELEMENTS, LAUNCHES
from streamalloc.lesson import Result

LAB = Lab("lab6_upload_ahead", "first_launch.cu")
MiB = 1 << 20


# -- the notebook, in this session's mode ---------------------------------------------------------------------
def test_the_solution_passes():
    check = LAB.passes()
    if LIVE:
        assert "uploaded ahead: before the first timed launch the graph allocator already reserved" in check.printed


def test_no_upload_is_rejected():
    check = LAB.rejected("no upload", lambda cu: regions(cu, [""]), "the graph is not uploaded" if not LIVE else
                         "nothing was mapped before the first timed launch")
    assert "cudaGraphLaunch is called in main" not in check.evalue


def test_a_warm_up_launch_instead_of_an_upload_is_rejected():
    words = ("cudaGraphLaunch is called in main",) if not LIVE else ("one launch too many",)
    LAB.rejected("warm-up launch", lambda cu: regions(cu, ["CHECK(cudaGraphLaunch(exec, s));"]), *words)


def test_upload_into_another_stream_then_an_event_is_judged_by_its_timing():
    """Right but different: the memory is mapped ahead; whether launching into s remaps is the driver's choice
    (§16.5.1: 'likely'). In replay it cannot run and passes on its reading; live, the timing decides, and a
    rejection must name the reason."""
    answer = ("CHECK(cudaGraphUpload(exec, s2));\ncudaEvent_t uploaded;\nCHECK(cudaEventCreate(&uploaded));\n"
              "CHECK(cudaEventRecord(uploaded, s2));\nCHECK(cudaStreamWaitEvent(s, uploaded, 0));")
    check = LAB.check("upload into s2, event wait", lambda cu: regions(cu, [answer]))
    assert "cudaGraphUpload uploads into `s2`" in check.printed and "The timing decides" in check.printed
    if check.ename:
        assert LIVE and check.ename == "LabIncomplete" and "the first launch is still slow" in check.evalue, check.evalue
    elif LIVE:  # passed, with its note (never "All checks passed" where checks.py has that verdict)
        assert "Passed, with a note" in check.printed or "Passed, with a note" not in inspect.getsource(
            checks.Report.finish), check.printed
    else:  # its run cannot be replayed: passed only what the reading could check
        assert "All checks passed" not in check.printed, check.printed
        assert "Passed what could be checked here; not verified without a GPU: " in check.printed, check.printed


# -- the run-time half, on canned output ----------------------------------------------------------------------
class CannedLesson:
    """A lesson whose first_launch.cu is the solution's (the learner's code: no lesson name) and whose run prints
    the given lines, as a GPU's would."""

    live = True

    def __init__(self, tmp_path, records, edit=None):
        self.path = tmp_path / LAB.file
        self.path.write_text(LAB.cuda(edit))
        self.stdout = "".join(json.dumps(r) + "\n" for r in records)

    def source(self, file):
        return self.path

    def compile(self, file, flags=()):
        return Path("canned")

    def run(self, file, args=(), timeout=120, flags=()):
        assert [int(a) for a in args] == [ELEMENTS, LAUNCHES]
        return Result(file, list(args), self.stdout, "", 0.1, False, "a canned run")


def run_output(before=64 * MiB, first=80.0, ref_first=900.0, later=70.0, times=LAUNCHES, ref_times=LAUNCHES):
    """What first_launch.cu prints; `times` is how many launches' worth `out` holds."""
    out = [{"what": "graph_mem", "phase": p, "reserved": r, "used": r} for p, r in
           (("reference instantiated", 0), ("yours instantiated", 0), ("yours before the first launch", before),
            ("end", 0))]
    for graph, f in (("reference", ref_first), ("yours", first)):
        out.append({"what": "launches", "graph": graph, "latency_us": [f] + [later] * (LAUNCHES - 1),
                    "call_us": [5.0] * LAUNCHES, "gpu_us": [60.0] * LAUNCHES})
    for graph, held in (("reference", ref_times), ("yours", times)):
        bad = held != LAUNCHES  # element 1 (i % 1000 == 1): 1.5 per launch
        out.append({"what": "result", "graph": graph, "n": ELEMENTS, "times": LAUNCHES,
                    "errors": ELEMENTS - ELEMENTS // 1000 if bad else 0, "first_bad": 1 if bad else -1,
                    "expected": 1.5 * LAUNCHES if bad else 1.0 * LAUNCHES, "got": 1.5 * held if bad else 1.0 * LAUNCHES})
    return out


def verdict(tmp_path, edit=None, **kw):
    try:
        labchecks.lab6(CannedLesson(tmp_path, run_output(**kw), edit))
    except checks.LabIncomplete as e:
        return str(e)
    return ""


def test_canned_solution_passes(tmp_path, capsys):
    assert verdict(tmp_path) == ""
    out = capsys.readouterr().out
    assert "All checks passed" in out and "calls cudaGraphUpload" in out
    assert out.index("result of your graph") < out.index("uploaded ahead") < out.index("the timing:") \
        < out.index("calls cudaGraphUpload")  # the run's findings first, the reading's last
    assert "uploaded ahead: before the first timed launch the graph allocator already reserved 64.0 MiB" in out
    assert "your first launch took 80 µs, your later ones 70 µs; without upload the first took 900 µs" in out


def test_canned_no_upload_fails_on_memory_and_timing(tmp_path, capsys):
    v = verdict(tmp_path, before=0, first=900.0, edit=lambda cu: regions(cu, [""]))
    assert "nothing was mapped before the first timed launch" in v and "the first launch is still slow" in v
    # with a run, the reading explains (a note), the run has judged
    assert "the graph is not uploaded" not in v
    assert "note" in capsys.readouterr().out


def test_canned_warm_up_launch_fails_on_the_result(tmp_path, capsys):
    v = verdict(tmp_path, times=LAUNCHES + 1, edit=lambda cu: regions(cu, ["CHECK(cudaGraphLaunch(exec, s));"]))
    assert "result of your graph: element 1 is 31.5, expected 30" in v and "one launch too many" in v
    assert "cudaGraphLaunch is called in main, outside the timed loop" in capsys.readouterr().out


def test_canned_upload_into_another_stream_that_remaps_fails_on_timing(tmp_path):
    v = verdict(tmp_path, first=850.0)
    assert "the first launch is still slow" in v and "§16.5.1" in v and "nothing was mapped" not in v


def test_canned_gpu_whose_first_launch_is_not_slower_leaves_the_timing_to_the_memory(tmp_path, capsys):
    assert verdict(tmp_path, ref_first=75.0, first=74.0) == ""
    out = capsys.readouterr().out
    assert "the timing cannot judge here" in out and "was not measurably slower" in out
    assert "the graph memory mapped before the first launch decides" in out and "uploaded ahead:" in out


@pytest.mark.parametrize("later,ref_first,judged", [(70.0, 95.0, False), (70.0, 120.0, True), (1000.0, 1200.0, False),
                                                    (1000.0, 1300.0, True)])
def test_canned_timing_is_judged_only_above_the_noticeable_difference(tmp_path, capsys, later, ref_first, judged):
    verdict(tmp_path, later=later, ref_first=ref_first, first=later)
    assert ("was not measurably slower" not in capsys.readouterr().out) == judged


# -- answers a learner would write, judged in process on the run a GPU gives them (canned) ------------------------
NEW_STREAM = "cudaStream_t up;\nCHECK(cudaStreamCreateWithFlags(&up, cudaStreamNonBlocking));\n"
WRONG = {  # name: (the TODO's body, what the run shows, words of the verdict)
    "no upload": ("", dict(before=0, first=900.0), ["nothing was mapped before the first timed launch",
                                                    "the first launch is still slow"]),
    "a warm-up launch instead": ("CHECK(cudaGraphLaunch(exec, s));", dict(times=LAUNCHES + 1),
                                 ["one launch too many"]),
    "upload, then trimmed before the loop": ("CHECK(cudaGraphUpload(exec, s));\nCHECK(cudaDeviceSynchronize());\n"
                                             "CHECK(cudaDeviceGraphMemTrim(0));",
                                             dict(before=0, first=900.0), ["nothing was mapped before the first"]),
    "the reference uploaded, not exec": ("CHECK(cudaGraphUpload(ref, s));", dict(before=0, first=900.0),
                                         ["nothing was mapped before the first timed launch"]),
    "upload into another stream that remaps": (NEW_STREAM + "CHECK(cudaGraphUpload(exec, up));",
                                               dict(first=850.0), ["the first launch is still slow"]),
    "upload into the default stream that remaps": ("CHECK(cudaGraphUpload(exec, 0));", dict(first=850.0),
                                                   ["the first launch is still slow"]),
}


@pytest.mark.parametrize("case", WRONG)
def test_a_wrong_answer_is_rejected_on_its_run(tmp_path, case):
    body, run, words = WRONG[case]
    said = verdict(tmp_path, lambda cu: regions(cu, [body]), **run)
    for w in words:
        assert w in said, f"{case}: {w!r} not in {said}"


@pytest.mark.parametrize("stream", ["s2", "0"])
def test_an_upload_into_another_stream_is_a_note_even_when_its_timing_passes(tmp_path, capsys, monkeypatch, stream):
    """Issue 19: an upload into another stream than the launches is never "All checks passed": its finding is a
    note (checks.Report's verdict for a note: "Passed, with a note")."""
    marks = []
    finish = checks.Report.finish
    monkeypatch.setattr(checks.Report, "finish", lambda self: (marks.extend(self.marks), finish(self))[1])
    assert verdict(tmp_path, lambda cu: regions(cu, [f"CHECK(cudaGraphUpload(exec, {stream}));"])) == ""
    notes = [text for mark, text in marks if mark == checks.NOTE]
    assert any("cudaGraphUpload uploads into" in t and "likely resulting in remap operations" in t for t in notes)
    out = capsys.readouterr().out
    if "Passed, with a note" in inspect.getsource(checks.Report.finish):  # the verdict that a note gives
        assert "All checks passed" not in out and "Passed, with a note" in out, out


def test_a_stream_the_reading_cannot_follow_is_never_ok(tmp_path, capsys):
    streams = "cudaStream_t pair[2] = {s, s2};\nCHECK(cudaGraphUpload(exec, pair[0]));"
    assert verdict(tmp_path, lambda cu: regions(cu, [streams])) == ""
    out = capsys.readouterr().out
    assert "cannot tell from the source: the run decides" in out and "the stream the timed loop launches into" not in out


HELPER = """static void map_ahead(cudaGraphExec_t g, cudaStream_t st) {  // a learner's helper
    CHECK(cudaGraphUpload(g, st));
}

int main("""
RIGHT = {
    "through another name": "cudaStream_t launch_stream = s;\nCHECK(cudaGraphUpload(exec, launch_stream));",
    "then a stream synchronization": "CHECK(cudaGraphUpload(exec, s));\nCHECK(cudaStreamSynchronize(s));",
    "then an event the host waits for": "cudaEvent_t uploaded;\nCHECK(cudaEventCreate(&uploaded));\n"
                                        "CHECK(cudaGraphUpload(exec, s));\nCHECK(cudaEventRecord(uploaded, s));\n"
                                        "CHECK(cudaEventSynchronize(uploaded));",
    "in a helper function": "map_ahead(exec, s);",
}


@pytest.mark.parametrize("case", RIGHT)
def test_a_right_answer_written_differently_passes(tmp_path, capsys, case):
    edit = lambda cu: regions(cu, [RIGHT[case]]).replace("int main(", HELPER, 1)  # noqa: E731
    assert verdict(tmp_path, edit) == ""
    out = capsys.readouterr().out
    assert "All checks passed" in out and "note" not in out, out
    assert "the stream the timed loop launches into, before the loop" in out


@live_only
@pytest.mark.parametrize("case", ["no upload", "a warm-up launch instead", "upload, then trimmed before the loop"])
def test_live_a_wrong_answer_fails_on_its_run(case):
    body, _, words = WRONG[case]
    LAB.rejected(case, lambda cu: regions(cu, [body]), *words)


@live_only
@pytest.mark.parametrize("case", RIGHT)
def test_live_a_right_answer_passes(case):
    LAB.passes(case, lambda cu: regions(cu, [RIGHT[case]]).replace("int main(", HELPER, 1))
