"""Lab 6 (upload ahead): the check grades what first_launch.cu measured; its reading of the code explains, and
judges only where no run can be had.

Two kinds of tests. The notebook tests run the lab's set-up, %%writefile and check cells (tests/labcheck.py) in
this session's mode: in replay, code other than the recorded solution cannot run, so the verdicts there come
from reading the code, and a right answer passes only what could be checked. The canned tests feed the check's
run-time half the output a GPU run of each answer would print (made-up numbers of the shape the H100 gives), so
every verdict that needs a run is tested here without a GPU.
"""
import json
import re

import pytest
from labcheck import LIVE, Lab, Protocol, all_passed, in_function, in_the_driver_api, live_only, regions
from notebook import StandIn

from streamalloc import checks, labchecks
from streamalloc.labchecks.lab6 import ELEMENTS, LAUNCHES

LAB = Lab("lab6_upload_ahead", "first_launch.cu")
MiB = 1 << 20


# -- the notebook, in this session's mode ---------------------------------------------------------------------
def test_no_upload_is_rejected():
    check = LAB.rejected("no upload", lambda cu: regions(cu, [""]), "the graph is not uploaded" if not LIVE else
                         "nothing was mapped before the first timed launch")
    assert "cudaGraphLaunch is called in main" not in check.evalue


def test_a_warm_up_launch_instead_of_an_upload_is_rejected():
    words = ("the graph is not uploaded",) if not LIVE else ("one launch too many", "the graph is not uploaded")
    LAB.rejected("warm-up launch", lambda cu: regions(cu, ["CHECK(cudaGraphLaunch(exec, s));"]), *words)


def test_upload_into_another_stream_then_an_event_is_rejected_with_the_guides_words():
    """The memory is mapped ahead, and s waits for the upload; but the guide advises against it for every driver
    (§16.5.1: "likely resulting in remap operations"): live the record rejects it with those words, whatever this
    driver's timing shows; in replay its run cannot be replayed, the reading points at the line, never "passed"."""
    answer = ("CHECK(cudaGraphUpload(exec, s2));\ncudaEvent_t uploaded;\nCHECK(cudaEventCreate(&uploaded));\n"
              "CHECK(cudaEventRecord(uploaded, s2));\nCHECK(cudaStreamWaitEvent(s, uploaded, 0));")
    if LIVE:
        LAB.rejected("upload into s2, event wait", lambda cu: regions(cu, [answer]),
                     "upload (record)", "though that launch waits for it", "likely resulting in remap operations")
        return
    check = LAB.check("upload into s2, event wait", lambda cu: regions(cu, [answer]))
    assert not all_passed(check.verdict), check.printed
    assert "the reading of your code says: cudaGraphUpload uploads into `s2`" in check.printed, check.printed


# -- the run-time half, on canned output ----------------------------------------------------------------------
def canned(tmp_path, records, edit=None):
    """A lesson whose first_launch.cu is the solution's (edited: the learner's code) and whose run prints `records`,
    as a GPU's would; its record: exec uploaded before its first timed launch (into s, or the stream the answer
    uploads into: s2, 0, a stream of its own)."""
    text = LAB.cuda(edit)
    into = re.search(r"cudaGraphUpload\(exec, (s2|0|up)\)", text)
    stream = S if not into else "0x0" if into[1] == "0" else S2

    def outputs(file, args):
        assert [int(a) for a in args] == [ELEMENTS, LAUNCHES]
        return records
    return StandIn(tmp_path, outputs, live=True, files={LAB.file: text},
                   calls=lambda args: upload_record(int(args[1]), stream=stream))


def run_output(before=64 * MiB, first=80.0, ref_first=900.0, later=70.0, times=LAUNCHES, ref_times=LAUNCHES,
               jitter=0.0):
    """What first_launch.cu prints; `times` is how many launches' worth `out` holds; the later launches alternate
    `jitter` µs around `later`."""
    out = [{"what": "graph_mem", "phase": p, "reserved": r, "used": r} for p, r in
           (("reference instantiated", 0), ("yours instantiated", 0), ("yours before the first launch", before),
            ("end", 0))]
    for graph, f in (("reference", ref_first), ("yours", first)):
        out.append({"what": "launches", "graph": graph,
                    "latency_us": [f] + [later + jitter * (-1) ** i for i in range(LAUNCHES - 1)],
                    "call_us": [5.0] * LAUNCHES, "gpu_us": [60.0] * LAUNCHES})
    for graph, held in (("reference", ref_times), ("yours", times)):
        bad = held != LAUNCHES  # element 1 (i % 1000 == 1): 1.5 per launch
        out.append({"what": "result", "graph": graph, "n": ELEMENTS, "times": LAUNCHES,
                    "errors": ELEMENTS - ELEMENTS // 1000 if bad else 0, "first_bad": 1 if bad else -1,
                    "expected": 1.5 * LAUNCHES if bad else 1.0 * LAUNCHES, "got": 1.5 * held if bad else 1.0 * LAUNCHES})
    return out


def verdict(tmp_path, edit=None, **kw):
    try:
        labchecks.lab6(canned(tmp_path, run_output(**kw), edit))
    except checks.LabIncomplete as e:
        return str(e)
    return ""


def test_canned_solution_passes(tmp_path, capsys):
    assert verdict(tmp_path) == ""
    out = capsys.readouterr().out
    assert all_passed() and "upload (record)" in out
    assert out.index("result of your graph") < out.index("uploaded ahead") < out.index("the timing:") \
        < out.index("upload (record)")  # the run's findings first, the record's after
    assert "uploaded ahead: before the first timed launch the graph allocator already reserved 64.0 MiB" in out
    assert "your first launch took 80 µs, your later ones 70 µs; without upload the first took 900 µs" in out


def test_canned_no_upload_fails_on_memory_and_timing(tmp_path, capsys):
    v = verdict(tmp_path, before=0, first=900.0, edit=lambda cu: regions(cu, [""]))
    assert "nothing was mapped before the first timed launch" in v and "the first launch is still slow" in v
    # a file that never names cudaGraphUpload does not upload: said as such, whatever the run
    assert "the graph is not uploaded" in v


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


def test_canned_a_slow_first_launch_within_the_noise_is_not_verified_never_wrong(tmp_path, capsys):
    """One first launch each: a miss smaller than the later launches' spread could be the noise."""
    assert verdict(tmp_path, first=850.0, jitter=400.0) == ""
    out = capsys.readouterr().out
    assert "not verified" in out and "within the" in out and "spread of the later launches" in out


def test_canned_a_slow_first_launch_on_a_shared_gpu_is_not_verified(tmp_path, capsys, monkeypatch):
    """Eight learners on one H100 (live, 2026-11-27): the solution's first launch took 429 µs against 394 µs without
    upload. On a GPU other processes compute on, one launch cannot tell their work from the learner's."""
    monkeypatch.setattr(StandIn, "shared_with", lambda self: 7, raising=False)
    assert verdict(tmp_path, first=429.0, ref_first=394.0, later=109.0) == ""
    out = capsys.readouterr().out
    assert "This GPU is shared with 7 other processes" in out and "not verified" in out


# -- answers a learner would write, judged in process on the run a GPU gives them (canned) ------------------------
SWITCHING = "behaves similarly to switching streams, likely resulting in remap operations"
NEW_STREAM = "cudaStream_t up;\nCHECK(cudaStreamCreateWithFlags(&up, cudaStreamNonBlocking));\n"
WRONG = {  # name: (the TODO's body, what the run shows, words of the verdict)
    "no upload": ("", dict(before=0, first=900.0), ["nothing was mapped before the first timed launch"]),
    "a warm-up launch instead": ("CHECK(cudaGraphLaunch(exec, s));", dict(times=LAUNCHES + 1),
                                 ["one launch too many"]),
    "upload, then trimmed before the loop": ("CHECK(cudaGraphUpload(exec, s));\nCHECK(cudaDeviceSynchronize());\n"
                                             "CHECK(cudaDeviceGraphMemTrim(0));",
                                             dict(before=0, first=900.0), ["nothing was mapped before the first"]),
    "the reference uploaded, not exec": ("CHECK(cudaGraphUpload(ref, s));", dict(before=0, first=900.0),
                                         ["nothing was mapped before the first timed launch"]),
    "upload into another stream that remaps": (NEW_STREAM + "CHECK(cudaGraphUpload(exec, up));",
                                               dict(first=850.0), ["the first launch is still slow", SWITCHING]),
    "upload into the default stream that remaps": ("CHECK(cudaGraphUpload(exec, 0));", dict(first=850.0),
                                                   ["the first launch is still slow", SWITCHING]),
}


@pytest.mark.parametrize("case", WRONG)
def test_a_wrong_answer_is_rejected_on_its_run(tmp_path, case):
    body, run, words = WRONG[case]
    said = verdict(tmp_path, lambda cu: regions(cu, [body]), **run)
    for w in words:
        assert w in said, f"{case}: {w!r} not in {said}"


@pytest.mark.parametrize("stream,named", [("s2", "stream 0x52"), ("0", "the legacy default stream (0)")])
def test_an_upload_into_another_stream_is_rejected_even_when_its_timing_passes(tmp_path, capsys, stream, named):
    """The guide's advice decides, not this driver's timing: the run's figures are still reported."""
    said = verdict(tmp_path, lambda cu: regions(cu, [f"CHECK(cudaGraphUpload(exec, {stream}));"]))
    assert said.startswith(f"1 thing still wrong: upload (record): with 3 launches, exec was uploaded into {named}, and "
                           f"the timed loop launches it into s, though that launch waits for it: 'Using "
                           f"different streams for graph upload and graph launch {SWITCHING}' (Guide §16.5.1"), said
    out = capsys.readouterr().out
    assert "the timing: your first launch took 80 µs" in out, out
    assert f"the reading of your code says: cudaGraphUpload uploads into" in out, out


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
    assert all_passed() and "note" not in out, out
    assert "upload (record)" in out


@live_only
@pytest.mark.parametrize("case", ["no upload", "a warm-up launch instead", "upload, then trimmed before the loop"])
def test_live_a_wrong_answer_fails_on_its_run(case):
    body, _, words = WRONG[case]
    LAB.rejected(case, lambda cu: regions(cu, [body]), *words)


@live_only
@pytest.mark.parametrize("case", RIGHT)
def test_live_a_right_answer_passes(case):
    LAB.passes(case, lambda cu: regions(cu, [RIGHT[case]]).replace("int main(", HELPER, 1))


# -- the record's verdicts, on records written by hand in the recorder's format (any mode) --------------------------
from streamalloc import calls  # noqa: E402
import importlib  # noqa: E402

LAB6 = importlib.import_module("streamalloc.labchecks.lab6")

EXEC, OTHER, S, S2 = "0xe1", "0xe2", "0x51", "0x52"


def upload_record(launches, stream=S, uploaded=EXEC, when="before", event=False, sync=True, again=None):
    """first_launch.cu's calls: exec instantiated in capture(), uploaded into `stream` (a list: once into each, in
    order; uploaded=None: not at all), the given synchronization, then the timed launches on s. `again`: exec is
    destroyed and instantiated anew in the TODO, "with upload" (cudaGraphInstantiateWithParams with the upload flag:
    the recorder writes the instantiation, then the upload) or "after the upload" (the upload made before it)."""
    steps = [("cudaStreamCreate", {"stream": S, "flags": 1}), ("cudaStreamCreate", {"stream": S2, "flags": 1}),
             ("cudaLaunchKernel", {"stream": S, "kernel": "_Z7producePfm", "args": ["0x100", None]}),
             ("cudaGraphInstantiate", {"exec": EXEC, "graph": "0xg", "nodes": {}}), ("section", {"name": "yours"})]
    streams = stream if isinstance(stream, list) else [stream]
    up = [("cudaGraphUpload", {"exec": uploaded, "stream": st}) for st in streams] if uploaded else []
    if event:
        up += [("cudaEventRecord", {"event": "0xev", "stream": streams[-1]}),
               ("cudaStreamWaitEvent", {"stream": S, "event": "0xev"})]
    if again:
        anew = [("cudaGraphExecDestroy", {"exec": EXEC}), ("cudaGraphInstantiate", {"exec": EXEC, "graph": "0xh",
                                                                                    "nodes": {}})]
        up = anew + up if again == "with upload" else up + anew
    steps += (up if when == "before" else []) + [("section", {"name": ""})]
    steps += [("cudaDeviceSynchronize", {})] if sync else []
    steps.append(("section", {"name": "timed"}))
    for i in range(launches):
        steps.append(("cudaGraphLaunch", {"exec": EXEC, "stream": S}))
        if i == 0 and when == "after":
            steps += up
        steps.append(("cudaStreamSynchronize", {"stream": S}))
    steps.append(("section", {"name": ""}))
    return "\n".join(json.dumps({"seq": i, "t": i, "pid": 1, "tid": 1, "call": c, "ret": 0, **f})
                     for i, (c, f) in enumerate(steps))


def judged(**kw):
    report = checks.Report(LAB6.TITLE)
    LAB6.recorded_upload(report, [(a, calls.Calls(calls.parse(upload_record(a[1], **kw(a[1]) if callable(kw) else kw))))
                                  for a in LAB6.TRACE_ARGS])
    return report


def judged_by(make):
    report = checks.Report(LAB6.TITLE)
    LAB6.recorded_upload(report, [(a, calls.Calls(calls.parse(make(a[1])))) for a in LAB6.TRACE_ARGS])
    return report


def test_record_an_upload_on_the_launch_stream_passes():
    report = judged_by(lambda k: upload_record(k))
    assert not report.failed and "uploaded after its instantiation and before its first launch" in str(report)
    assert not [m for m, _ in report.marks if m == checks.NOTE]


def test_record_an_upload_on_another_stream_ordered_by_an_event_is_wrong():
    report = judged_by(lambda k: upload_record(k, stream=S2, event=True, sync=False))
    assert report.failed and "exec was uploaded into stream 0x52, and the timed loop launches it into s, " \
                             "though that launch waits for it" in str(report), str(report)


def test_record_an_instantiation_with_upload_into_the_launch_stream_passes():
    report = judged_by(lambda k: upload_record(k, again="with upload"))
    assert not report.failed and "into the stream that launch goes into" in str(report), str(report)


@pytest.mark.parametrize("make,words", [
    (lambda k: upload_record(k, stream=S2, again="with upload"), "exec was uploaded into stream 0x52"),
    (lambda k: upload_record(k, again="after the upload"), "no cudaGraphUpload was made"),  # of the exec launched
])
def test_record_an_instantiation_with_upload_is_judged_like_an_upload(make, words):
    report = judged_by(make)
    assert report.failed and words in str(report), str(report)


@pytest.mark.parametrize("make,words", [
    (lambda k: upload_record(k, uploaded=None), "no cudaGraphUpload was made"),
    (lambda k: upload_record(k, uploaded=EXEC if k == LAB6.TRACE_ARGS[1][1] else None), "with 3 launches, no"),
    (lambda k: upload_record(k, when="after"), "uploaded only after its first timed launch"),
    (lambda k: upload_record(k, uploaded=OTHER), "not 0xe1, the graph the timed loop launches"),
    (lambda k: upload_record(k, stream=S2, sync=False), "launches it into s: 'Using different streams"),
    (lambda k: upload_record(k, stream="0x0"), "exec was uploaded into the legacy default stream (0)"),
    (lambda k: upload_record(k, stream=[S, S2]), "exec was uploaded into stream 0x52"),  # the last upload decides
])
def test_record_a_wrong_upload_is_found(make, words):
    report = judged_by(make)
    assert report.failed and words in str(report), str(report)


# -- answers in other styles, through the notebook, in this session's mode --------------------------------------
# Each answer's source is here and only here: name -> the TODO's body (ABOVE[name] goes above main; EDITS[name] edits
# the given code too).
def instantiated_with_upload(into):
    """The TODO's body: exec captured and instantiated again, with cudaGraphInstantiateFlagUpload into `into`."""
    return ("CHECK(cudaGraphExecDestroy(exec));\ncudaGraph_t g;\nfloat *t = nullptr;\n"
            "CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));\n"
            "CHECK(cudaMallocAsync(&t, n * sizeof(float), s));\nproduce<<<course::grid(n), 256, 0, s>>>(t, n);\n"
            "accumulate<<<course::grid(n), 256, 0, s>>>(t, out, n);\nCHECK_LAUNCH();\nCHECK(cudaFreeAsync(t, s));\n"
            "CHECK(cudaStreamEndCapture(s, &g));\ncudaGraphInstantiateParams p = {};\n"
            f"p.flags = cudaGraphInstantiateFlagUpload;\np.uploadStream = {into};\n"
            "CHECK(cudaGraphInstantiateWithParams(&exec, g, &p));\nCHECK(cudaGraphDestroy(g));")


EVENT_ON_S2 = "cudaEvent_t up;\nCHECK(cudaEventCreateWithFlags(&up, cudaEventDisableTiming));\n"
RIGHT_ANSWERS = {
    "instantiated again with cudaGraphInstantiateFlagUpload": instantiated_with_upload("s"),
    "a do-while macro": "#define UPLOAD_AHEAD(g, st) do { CHECK(cudaGraphUpload((g), (st))); } while (0)\n"
                        "UPLOAD_AHEAD(exec, s);",
    "a struct's call operator": "struct Uploader {\n    cudaGraphExec_t &e;\n"
                                "    void operator()(cudaStream_t st) const { CHECK(cudaGraphUpload(e, st)); }\n};\n"
                                "Uploader{exec}(s);",
    "a lambda returning the error": "auto ahead = [&](cudaStream_t into) { return cudaGraphUpload(exec, into); };\n"
                                    "CHECK(ahead(s));",
    "a helper with swapped parameter names": "map_ahead(s, exec);",
    "a stream from an array": "cudaStream_t streams[] = {s, s2};\nCHECK(cudaGraphUpload(exec, streams[0]));",
    "a function pointer": "cudaError_t (*up)(cudaGraphExec_t, cudaStream_t) = cudaGraphUpload;\nCHECK(up(exec, s));",
    "a std::shared_ptr owning an upload stream": (
        "std::shared_ptr<CUstream_st> mine(s, [](cudaStream_t) {});  // borrowed: the deleter does nothing\n"
        "CHECK(cudaGraphUpload(exec, mine.get()));"),
    # the upload's stream, in styles the check was not written against: the record's streams decide
    "uploaded into s2, then again into s: the last upload is the launch's stream": (
        "CHECK(cudaGraphUpload(exec, s2));  // first thought\nCHECK(cudaGraphUpload(exec, s));"),
    "the stream chosen at run time": "cudaStream_t into = launches > 1 ? s : s2;\nCHECK(cudaGraphUpload(exec, into));",
    "s waits for an event on s2, then the upload into s": (
        EVENT_ON_S2 + "CHECK(cudaEventRecord(up, s2));\nCHECK(cudaStreamWaitEvent(s, up, 0));\n"
                      "CHECK(cudaGraphUpload(exec, s));"),
}
ABOVE = {"a helper with swapped parameter names": "static void map_ahead(cudaStream_t exec, cudaGraphExec_t s) {\n"
                                                  "    CHECK(cudaGraphUpload(s, exec));\n}\n\n",
         "a std::shared_ptr owning an upload stream": "#include <memory>\n"}
WRONG_ANSWERS = {  # name: (the TODO's body, words the live rejection names)
    "no upload": ("", ["the graph is not uploaded"]),
    # another stream than the launch's: wrong by the guide's advice (§16.5.1), whatever this driver's timing shows
    "uploaded on s2, s waits for an event": (
        EVENT_ON_S2 + "CHECK(cudaGraphUpload(exec, s2));\nCHECK(cudaEventRecord(up, s2));\n"
                      "CHECK(cudaStreamWaitEvent(s, up, 0));",
        ["upload (record)", "exec was uploaded into stream", "though that launch waits for it", SWITCHING]),
    "uploaded into the legacy stream 0": ("CHECK(cudaGraphUpload(exec, 0));",
                                          ["exec was uploaded into the legacy default stream (0)", SWITCHING]),
    "instantiated with the upload flag into s2": (instantiated_with_upload("s2"),
                                                  ["upload (record)", "exec was uploaded into stream", SWITCHING]),
    "instantiated with the upload flag into stream 0": (instantiated_with_upload("0"),
                                                       ["exec was uploaded into the legacy default stream (0)", SWITCHING]),
    "uploaded into s, then again into s2": ("CHECK(cudaGraphUpload(exec, s));\nCHECK(cudaGraphUpload(exec, s2));",
                                            ["exec was uploaded into stream", SWITCHING]),
    "a warm-up launch instead": ("CHECK(cudaGraphLaunch(exec, s));", ["the graph is not uploaded", "one launch too many"]),
    "uploaded only for the default launch count": ("if (launches == 20) CHECK(cudaGraphUpload(exec, s));",
                                                   ["no cudaGraphUpload was made"]),
    "uploaded only for an even launch count": ("if (launches % 2 == 0) CHECK(cudaGraphUpload(exec, s));",
                                               ["with 3 launches, no cudaGraphUpload was made"]),
    "uploaded only for small launch counts": ("if (launches < 10) CHECK(cudaGraphUpload(exec, s));",
                                              ["nothing was mapped before the first timed launch"]),
    "another exec uploaded": ("cudaGraphExec_t spare = capture(out, n, s);\nCHECK(cudaGraphUpload(spare, s));",
                              ["the graph the timed loop launches"]),
    "uploaded after the first launch": ("", ["uploaded only after its first timed launch"]),
    "uploaded, then trimmed before the loop": ("CHECK(cudaGraphUpload(exec, s));\nCHECK(cudaDeviceSynchronize());\n"
                                               "CHECK(cudaDeviceGraphMemTrim(0));",
                                               ["nothing was mapped before the first"]),
}
EDITS = {"uploaded after the first launch": lambda cu: in_function(
    cu, "timed_launches", "        CHECK(cudaGraphLaunch(exec, s));\n",
    "        CHECK(cudaGraphLaunch(exec, s));\n        if (i == 0) CHECK(cudaGraphUpload(exec, s));  // too late\n")}


def answer(name, body):
    def edit(cu):
        cu = regions(cu, [body]).replace("int main(", ABOVE.get(name, "") + "int main(", 1)
        return EDITS.get(name, lambda c: c)(cu)
    return edit


# -- right answers in the driver API, its functions taken through cudaGetDriverEntryPoint as notebook 05 takes them
DRIVER_RIGHT = {
    "cuGraphUpload into s": in_the_driver_api(["CU_CALL(cuGraphUpload, (CUgraphExec)exec, (CUstream)s);"]),
    "cuGraphUpload, then cuStreamSynchronize": in_the_driver_api([
        "CU_CALL(cuGraphUpload, (CUgraphExec)exec, (CUstream)s);\nCU_CALL(cuStreamSynchronize, (CUstream)s);"]),
    "cuGraphUpload in a lambda, through another name for s": in_the_driver_api([
        "auto map_ahead = [](CUgraphExec g, CUstream st) { CU_CALL(cuGraphUpload, g, st); };\n"
        "cudaStream_t launch_stream = s;\nmap_ahead((CUgraphExec)exec, (CUstream)launch_stream);"]),
}


# -- the protocol every lab's answers get (labcheck.Protocol), from this file's answers ----------------------------
class TestProtocol(Protocol):
    lab = LAB
    driver = DRIVER_RIGHT
    right = {name: answer(name, body) for name, body in RIGHT_ANSWERS.items()}
    wrong = {name: (answer(name, body), words) for name, (body, words) in WRONG_ANSWERS.items()}
    solution_says_live = ("uploaded ahead: before the first timed launch the graph allocator already reserved",)
    stubs_say = ("nothing was mapped before the first timed launch",)  # its run: the first launch mapped the memory
    stubs_read = ("the graph is not uploaded",)  # in replay the stubs' recorded run is not the solution's: the reading
