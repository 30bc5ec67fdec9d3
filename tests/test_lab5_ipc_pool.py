"""Lab 5 (one buffer, two processes): the check's verdicts on canned runs, right and wrong, and on answers
written differently; the reading of the code on the generated lab's stubs; and the lab's own check cell
(tests/labcheck.py) in this session's mode, with wrong answers only a run catches run on a GPU only.

The canned outputs are what ipc_share.cu prints (one JSON line per process, the fields its header declares),
with the GPU-clock stamps of the situation each test describes: no GPU, nvcc or sanitizer is needed for them.
"""

import importlib

import pytest

from labcheck import CLEAN, CannedLesson, Lab, canned_measure, live_only, regions
from streamalloc import checks, labchecks, sanitizer

LAB = Lab("lab5_ipc_pool", "ipc_share.cu")
LAB5 = importlib.import_module("streamalloc.labchecks.lab5")  # the module (labchecks.lab5 is its check)
MiB = 1 << 20
REFUSED = "cudaErrorInvalidValue"  # what an H100's driver answers cudaMemPoolGetAttribute on an imported pool


def run_lines(read_early=False, exporter_first=False, not_freed=False, status=0, platform=True, refused=False):
    """What the two processes print: times in ns on the GPU's clock, the writes done at t = 1 s, 150 ms after the
    hand-shake; an importer that reads early reads at once after it, the zeroed buffer (every value wrong)."""
    t = 1_000_000_000
    if not platform:
        return [{"process": "exporter", "step": "platform", "ipc": False,
                 "why": "the GPU or driver offers no POSIX file-descriptor handle for pools"}]
    n = 16 * MiB // 4
    read = t - 149_000_000 if read_early else t + 20_000
    past_free = read + 50_500_000
    free_start = read + 100_000 if exporter_first else past_free + 15_000
    used = -1 if refused else 16 * MiB if not_freed else 0
    return [{"process": "importer", "checked": n, "mismatches": n if read_early else 0,
             "first_bad": 0 if read_early else -1, "read_start_ns": read, "past_free_ns": past_free,
             "used_after": used, "used_query": REFUSED if refused else "cudaSuccess"},
            {"process": "exporter", "step": "shared", "bytes": 16 * MiB, "spin_ms": 150.0, "read_spin_ms": 50.0,
             "written_ns": t, "free_start_ns": free_start, "importer_status": status}]


def Canned(tmp_path, lines, edit=None, sanitizer_output=CLEAN, name=None):
    """The lab's solution (or an edit of it) whose two processes print `lines`: the learner's code unless `name`."""
    return CannedLesson(tmp_path, LAB, lines, sanitizer_output, edit, name=name)


@pytest.fixture(autouse=True)
def canned_sanitizer(monkeypatch):
    monkeypatch.setattr(sanitizer, "measure",
                        canned_measure("compute-sanitizer --tool memcheck ipc_share 1048576 5 5", 0))


def verdict(lesson):
    """The check's error message ('' if it passed)."""
    try:
        labchecks.lab5(lesson)
    except checks.LabIncomplete as e:
        return str(e)
    return ""


def test_the_solution_with_a_right_run_passes(tmp_path, capsys):
    assert verdict(Canned(tmp_path, run_lines())) == ""
    out = capsys.readouterr().out
    assert "the importer read all 4,194,304 values right" in out
    assert "the importer started reading 0.020 ms after the exporter's values were written" in out
    assert "the importer's pool holds nothing at the end" in out
    assert "compute-sanitizer finds no error in either process" in out and "All checks passed" in out
    # the run's findings come first, the reading's last
    assert out.index("data:") < out.index("compute-sanitizer") < out.index("importer: waits for `ready`")


def test_an_importer_that_reads_before_the_values_are_there_is_told_why(tmp_path):
    said = verdict(Canned(tmp_path, run_lines(read_early=True)))
    assert "data: the importer read 4,194,304 of 4,194,304 values wrong" in said
    assert "order: the importer started reading 149.000 ms before the exporter's values were written" in said
    assert "TODO 1 and 2" in said and "exporter's free" not in said


def test_an_importer_that_skips_its_wait_is_told_by_its_results_first(tmp_path):
    """The run of an importer without TODO 2 (the hand-shake makes it read the zeroed buffer during the exporter's
    spin): the data and the GPU clock say it is wrong, then the reading says which line is missing."""
    said = verdict(Canned(tmp_path, run_lines(read_early=True), lambda cu: regions(cu, {0: ""})))
    data, order, reading = (said.index(w) for w in ("data: the importer read 4,194,304 of 4,194,304 values wrong",
                                                    "order: the importer started reading 149.000 ms before",
                                                    "importer: nothing waits for `ready` before check_values"))
    assert data < order < reading and "TODO 2" in said[reading:]


def test_the_given_code_keeps_the_hand_shake():
    """The run can show a missing wait only if the exporter's values come after the importer is up: the exporter
    zeroes the buffer, waits for Imported before its spin and write_values, and sends Recorded after TODO 1; the
    importer has imported everything before it sends Imported, and goes on to TODO 2 only on Recorded. After the
    hand-shake the importer only launches its kernels, well within the check's spin of 100 to 200 ms."""
    cu = LAB.cuda()
    split = cu.index("static int exporter(")
    importer, exporter = cu[:split], cu[split:]

    def in_order(code, *steps):
        at = [code.index(step) for step in steps]
        assert at == sorted(at), [step for step, _ in sorted(zip(steps, at), key=lambda x: x[1])]

    in_order(exporter, "cudaMemsetAsync(buf, 0, bytes, s)", "proc::send(child.sock, share)",
             "proc::recv<Imported>(child.sock)", ">>>(static_cast<unsigned long long>(spin_ms * 1e6))",
             "write_values<<<", "cudaEventRecord(ready, s)", "proc::send(child.sock, Recorded{1})")
    in_order(importer, "static int importer(", "cudaMemPoolImportPointer(", "cudaIpcOpenEventHandle(&ready",
             "proc::send(sock, Imported{1})", "proc::recv<Recorded>(sock)", "cudaStreamWaitEvent(s, ready, 0)",
             "check_values<<<")
    assert 100 <= LAB5.ARGS[1] <= 200 and LAB5.ARGS[2] <= 100  # the whole run well under 2 s


def test_an_exporter_that_frees_first_is_told_why(tmp_path):
    said = verdict(Canned(tmp_path, run_lines(exporter_first=True)))
    assert "order: the exporter's free began 50.400 ms before the importer was past its own free" in said
    assert "TODO 3 and 4" in said and "data:" not in said


def test_an_importer_that_never_frees_is_caught_by_its_pool(tmp_path):
    said = verdict(Canned(tmp_path, run_lines(not_freed=True)))
    assert "the importer's pool still counts 16,777,216 bytes (16 MiB) in use at the end" in said


def test_a_pool_that_refuses_the_query_lets_the_reading_decide(tmp_path, capsys):
    """An H100's driver: the imported pool refuses cudaMemPoolGetAttribute; the run does not show the free, so
    it is not said to be verified by the pool: the reading of TODO 3 decides, and says so."""
    assert verdict(Canned(tmp_path, run_lines(refused=True))) == ""
    out = capsys.readouterr().out
    assert f"this driver refuses cudaMemPoolGetAttribute on an imported pool ({REFUSED})" in out
    assert "the reading of the importer's code decides that (TODO 3, below)" in out
    assert "the importer's pool holds nothing" not in out
    assert "importer: frees p after reading it, then records `freed`" in out and "All checks passed" in out
    not_freed = lambda cu: regions(cu, {1: "CHECK(cudaEventRecord(freed, s));\n"})  # noqa: E731
    said = verdict(Canned(tmp_path, run_lines(refused=True), not_freed))
    assert "importer: p is not freed after check_values" in said and "TODO 3" in said


def test_a_failed_importer_and_a_sanitizer_error_are_said(tmp_path):
    report = ("========= COMPUTE-SANITIZER\n========= Invalid __global__ read of size 4 bytes\n"
              "=========     at check_values(const int *, unsigned long, unsigned long long *)+0x90 in ipc_share.cu:120\n"
              "=========     Address 0x7f0000000000 is out of bounds\n=========\n========= ERROR SUMMARY: 1 error\n")
    said = verdict(Canned(tmp_path, run_lines(status=1), sanitizer_output=report))
    assert "the importer exited with status 1" in said and "compute-sanitizer found 1 error(s)" in said


def test_a_system_without_posix_handles_is_not_verified_not_failed(tmp_path, capsys):
    assert verdict(Canned(tmp_path, run_lines(platform=False))) == ""
    out = capsys.readouterr().out
    assert "this system cannot share a pool between processes" in out
    assert "All checks passed" not in out and "Passed what could be checked here; not verified here: the sharing" in out


def test_the_courses_solution_on_a_system_without_posix_handles_is_not_passed(tmp_path):
    with pytest.raises(checks.Unverified, match="this is the course's own solution.*cannot share a pool"):
        labchecks.lab5(Canned(tmp_path, run_lines(platform=False), name=LAB.name))


RIGHT_BUT_DIFFERENT = {  # the importer frees with cudaFree; the exporter waits for `freed` on the host
    1: "CHECK(cudaFree(p));\nCHECK(cudaEventRecord(freed, s));\n",
    3: "CHECK(cudaEventSynchronize(freed));\n",
}


def test_a_right_answer_written_differently_passes(tmp_path, capsys):
    assert verdict(Canned(tmp_path, run_lines(), lambda cu: regions(cu, RIGHT_BUT_DIFFERENT))) == ""
    assert "All checks passed" in capsys.readouterr().out


def test_an_event_the_reading_cannot_resolve_is_left_to_the_run(tmp_path, capsys):
    """The importer waits through a pointer: the reading cannot tell which event; the run's order decides."""
    through_a_pointer = "cudaEvent_t* which = &ready;\nCHECK(cudaStreamWaitEvent(s, *which, 0));\n"
    edit = lambda cu: regions(cu, {0: through_a_pointer})  # noqa: E731
    assert verdict(Canned(tmp_path, run_lines(), edit)) == ""
    out = capsys.readouterr().out
    assert "the check cannot tell from the source which event or buffer `*which` is" in out
    said = verdict(Canned(tmp_path, run_lines(read_early=True), edit))
    assert "order: the importer started reading" in said and "nothing waits for `ready`" not in said


def test_the_reading_of_the_stubs_names_every_todo(tmp_path):
    said = verdict(Canned(tmp_path, run_lines(), lambda cu: regions(cu, ["", "", "", ""])))
    for todo in ("TODO 1", "TODO 2", "TODO 3", "TODO 4"):
        assert todo in said, said
    assert "`ready` is not recorded after write_values" in said and "p is not freed after check_values" in said


def test_freed_recorded_before_the_free_is_told(tmp_path):
    edit = lambda cu: regions(cu, {1: "CHECK(cudaEventRecord(freed, s));\nCHECK(cudaFreeAsync(p, s));\n"})  # noqa: E731
    said = verdict(Canned(tmp_path, run_lines(), edit))
    assert "`freed` is not recorded after the free of p" in said


# -- the lab's own check cell, in this session's mode -------------------------------------------------------------
def test_the_solution_passes():
    LAB.passes()  # live: its run and sanitizer; in replay: its recording (the course's own code must be verified)


def test_the_generated_lab_names_every_todo():
    LAB.rejected("lab", None, "`ready` is not recorded after write_values", "TODO 1", "nothing waits for `ready`",
                 "TODO 2", "p is not freed after check_values", "TODO 3", "nothing waits for `freed`", "TODO 4")


@live_only
def test_live_an_importer_that_does_not_wait_reads_wrong_values():
    # The results must fail, not only the reading: the exporter's values come 150 ms after the hand-shake, so an
    # importer without its wait reads the zeroed buffer, before the writes on the GPU's clock. (Before the
    # hand-shake, on the H100 on 2026-11-23, the importer's own start outlasted a 50 ms spin and read right values.)
    LAB.rejected("importer does not wait", lambda cu: regions(cu, {0: ""}), "data: the importer read",
                 "values wrong", "order: the importer started reading", "before the exporter's values were written",
                 "nothing waits for `ready`", "TODO 2")


@live_only
def test_live_an_exporter_that_never_records_ready_is_read_too_early():
    # a wait on an event never recorded returns at once: the importer reads the zeroed buffer
    LAB.rejected("exporter does not record ready", lambda cu: regions(cu, {2: ""}), "data: the importer read",
                 "values wrong", "order: the importer started reading", "`ready` is not recorded after write_values",
                 "TODO 1")


@live_only
def test_live_an_exporter_that_does_not_wait_frees_first():
    LAB.rejected("exporter does not wait", lambda cu: regions(cu, {3: ""}), "the exporter's free began", "TODO 4")
