"""Lab 5 (one buffer, two processes): right answers in any style pass, wrong ones are rejected by what the two
processes did.

The check decides on the run (what the importer read, the GPU clock of both processes, the importer's pool),
compute-sanitizer, and the record of both processes' CUDA calls (streamalloc.calls), over two argument sets: the
importer's reads after the exporter's writes through `ready`, its free after its last read, the exporter's free after
the importer's through `freed`. The reading of the source only explains. The record's reasoning is tested here in
process on records written the way the recorder writes them for two processes (`ipc_record`), with canned runs
(`run_lines`, what ipc_share.cu prints); every answer below (ANSWERS_RIGHT, ANSWERS_WRONG: its C++ edit, the calls
it makes, and the words the record must say) also runs through the lab's own check cell (tests/labcheck.py) in
this session's mode: live it must pass, or be rejected with those words; in replay (no recording of any code but
the solution's) a right answer is never rejected and a wrong one never gets "All checks passed".
"""

import importlib
import itertools

import pytest

from labcheck import CLEAN, Lab, Protocol, all_passed, both, canned_measure, in_the_driver_api, regions, unverified
from streamalloc import calls, checks, labchecks, sanitizer

LAB = Lab("lab5_ipc_pool", "ipc_share.cu")
LAB5 = importlib.import_module("streamalloc.labchecks.lab5")  # the module (labchecks.lab5 is its check)
MiB = 1 << 20
REFUSED = "cudaErrorInvalidValue"  # what an H100's driver answers cudaMemPoolGetAttribute on an imported pool


def run_lines(read_early=False, exporter_first=False, not_freed=False, status=0, platform=True, refused=False,
              reused=True):
    """What the two processes print: times in ns on the GPU's clock, the writes done at t = 1 s, 150 ms after the
    hand-shake; an importer that reads early reads at once after it, the zeroed buffer (every value wrong); an
    exporter that frees first hands the memory to its next allocation, whose -1s the importer's last read finds
    (where that allocation got buf's address)."""
    t = 1_000_000_000
    if not platform:
        return [{"process": "exporter", "step": "platform", "ipc": False,
                 "why": "the GPU or driver offers no POSIX file-descriptor handle for pools"}]
    n = 16 * MiB // 4
    read = t - 149_000_000 if read_early else t + 20_000
    past_free = read + 50_500_000
    free_start = read + 100_000 if exporter_first else past_free + 15_000
    overwritten = exporter_first and reused
    used = -1 if refused else 16 * MiB if not_freed else 0
    return [{"process": "importer", "checked": n, "mismatches": n if read_early else 0,
             "first_bad": 0 if read_early else -1, "last_mismatches": n if overwritten else 0,
             "last_first_bad": 0 if overwritten else -1, "overwritten": n if overwritten else 0,
             "read_start_ns": read, "past_free_ns": past_free,
             "used_after": used, "used_query": REFUSED if refused else "cudaSuccess"},
            {"process": "exporter", "step": "shared", "bytes": 16 * MiB, "spin_ms": 150.0, "read_spin_ms": 50.0,
             "written_ns": t, "free_start_ns": free_start, "overwritten_ns": free_start + 400_000, "reused": reused,
             "importer_status": status}]


# -- the record of both processes, as the recorder writes it -----------------------------------------------------
SPIN, WRITE, READ = "_ZN6course4spinEyPy", "_Z12write_valuesPim", "_Z12check_valuesPKimPy"


class Proc:
    """One process's calls, appended to the one record both write (the exporter starts the importer: same file)."""

    def __init__(self, log, pid, nbytes, handles):
        self.log, self.pid, self.nbytes, self.handles, self.seq = log, pid, nbytes, handles, 0

    def call(self, api, ret=0, **f):
        self.log.append({"seq": self.seq, "t": len(self.log), "pid": self.pid, "tid": self.pid, "call": api,
                         "ret": ret, **f})
        self.seq += 1

    def new(self):
        return hex(next(self.handles))

    def stream(self):
        s = self.new()
        self.call("cudaStreamCreate", stream=s, flags=1)  # cudaStreamNonBlocking, as ipc_share.cu's streams
        return s

    def event(self):
        e = self.new()
        self.call("cudaEventCreate", event=e, flags=2)
        return e

    def record(self, e, s):
        self.call("cudaEventRecord", event=e, stream=s)

    def wait(self, s, e):
        self.call("cudaStreamWaitEvent", stream=s, event=e)

    def event_sync(self, e):
        self.call("cudaEventSynchronize", event=e)

    def poll(self, e, pending=2):  # course::reached(cudaEventQuery(e)) in a loop: cudaErrorNotReady, then success
        for _ in range(pending):
            self.call("cudaEventQuery", ret=600, event=e)
        self.call("cudaEventQuery", event=e)

    def sync(self, s):
        self.call("cudaStreamSynchronize", stream=s)

    def launch(self, kernel, s, *args):
        self.call("cudaLaunchKernel", stream=s, kernel=kernel, args=list(args))

    def free_async(self, ptr, s):
        self.call("cudaFreeAsync", ptr=ptr, stream=s)

    def free(self, ptr):
        self.call("cudaFree", ptr=ptr)


SOLUTION = {  # the four TODOs of the solution, as calls: each takes the process that makes them
    "todo1": lambda E: E.record(E.ready, E.s),
    "todo2": lambda I: I.wait(I.s, I.ready),
    "todo3": lambda I: (I.free_async(I.p, I.s), I.record(I.freed, I.s)),
    "todo4": lambda E: E.wait(E.s, E.freed),
}
NOTHING = lambda P: None  # noqa: E731  a TODO left as the stub leaves it


def ipc_record(args, before_writes=NOTHING, before_recorded=NOTHING, **todos):
    """The calls ipc_share.cu's two processes make for `args`, in the order the socket's messages put them, with the
    given TODOs (the solution's where not given). `before_writes`: exporter calls before its spin and write_values;
    `before_recorded`: importer calls before it hears that `ready` is recorded (while the exporter spins)."""
    todo = {**SOLUTION, **todos}
    nbytes, log, handles = args[0], [], itertools.count(0x1000, 0x10)
    E, I = Proc(log, 4100, nbytes, handles), Proc(log, 4200, nbytes, handles)
    E.call("section", name="exporter")
    I.call("section", name="importer")
    I.s = I.stream()
    E.s = E.stream()
    E.ready = E.event()
    E.stamps = "0x7e0000000000"
    E.call("cudaMalloc", ptr=E.stamps, size=48)
    E.buf = "0x7f0000000000"
    E.call("cudaMallocAsync", ptr=E.buf, size=nbytes, stream=E.s, pool="0x5")
    E.call("cudaMemsetAsync", dst=E.buf, size=nbytes, stream=E.s)
    E.call("cudaMemPoolExportPointer", ptr=E.buf, key=0xabcdef)
    E.call("cudaIpcGetEventHandle", event=E.ready, handle=0x11111)
    I.p = "0x7a0000000000"
    I.call("cudaMemPoolImportPointer", ptr=I.p, pool="0x6", key=0xabcdef)
    I.ready = I.new()
    I.call("cudaIpcOpenEventHandle", event=I.ready, handle=0x11111)
    I.freed = I.event()
    I.call("cudaIpcGetEventHandle", event=I.freed, handle=0x22222)
    I.bad, I.stamps = "0x7b0000000000", "0x7c0000000000"
    I.call("cudaMalloc", ptr=I.bad, size=48)
    I.call("cudaMalloc", ptr=I.stamps, size=32)
    I.call("cudaMemcpy", dst=I.bad, src="0x7ffc00000000", size=48, kind=1)
    before_recorded(I)  # the importer is up (Imported sent); the exporter spins
    before_writes(E)
    E.launch(SPIN, E.s, hex(5_000_000), None)
    E.launch(WRITE, E.s, E.buf, hex(nbytes // 4))
    E.launch(SPIN, E.s, "0x0", E.stamps)
    todo["todo1"](E)  # then Recorded
    todo["todo2"](I)
    I.launch(SPIN, I.s, "0x0", I.stamps)
    I.launch(READ, I.s, I.p, hex(nbytes // 4), I.bad)
    I.launch(SPIN, I.s, hex(2_000_000), None)
    I.launch(READ, I.s, I.p, hex(nbytes // 4), hex(int(I.bad, 16) + 24))
    todo["todo3"](I)
    I.launch(SPIN, I.s, "0x0", hex(int(I.stamps, 16) + 16))  # then Freed
    E.freed = E.new()
    E.call("cudaIpcOpenEventHandle", event=E.freed, handle=0x22222)
    todo["todo4"](E)
    E.launch(SPIN, E.s, "0x0", hex(int(E.stamps, 16) + 16))
    E.free_async(E.buf, E.s)
    E.call("cudaMallocAsync", ptr=E.buf, size=nbytes, stream=E.s, pool="0x5")  # the next owner, at buf's address
    E.call("cudaMemsetAsync", dst=E.buf, size=nbytes, stream=E.s)
    E.launch(SPIN, E.s, "0x0", hex(int(E.stamps, 16) + 32))
    E.free_async(E.buf, E.s)
    I.sync(I.s)
    I.call("cudaMemPoolGetAttribute", ret=1, pool="0x6", attr=5, value=0)
    I.call("cudaMemcpy", dst="0x7ffc00000100", src=I.bad, size=48, kind=2)
    E.sync(E.s)
    E.call("cudaMemcpy", dst="0x7ffc00000200", src=E.stamps, size=48, kind=2)
    I.free(I.bad)
    I.free(I.stamps)
    E.free(E.stamps)
    return log


def traced(plan):
    """A function of the run's arguments giving its record, for Lab.canned's `calls`."""
    return lambda args: ipc_record(args, **plan)


def Canned(tmp_path, lines, edit=None, sanitizer_output=CLEAN, name=None, plan=None):
    """The lab's solution (or an edit of it) whose two processes print `lines` and whose traced runs record the calls
    of `plan` (the solution's by default; False: no record, as in replay of code nobody recorded)."""
    return LAB.canned(tmp_path, lines, sanitizer_output, edit, name=name,
                        calls=None if plan is False else traced(plan or {}))


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


RECORDED = "recorded over two runs of both processes, with a 1 MiB buffer and a 3 MiB buffer"


def test_the_solution_with_a_right_run_passes(tmp_path, capsys):
    assert verdict(Canned(tmp_path, run_lines())) == ""
    out = capsys.readouterr().out
    assert "the importer read all 4,194,304 values right" in out
    assert "the importer started reading 0.020 ms after the exporter's values were written" in out
    assert "the importer's pool holds nothing at the end" in out
    assert "compute-sanitizer finds no error in either process" in out and all_passed()
    assert f"every check_values of the importer is ordered after the exporter's write_values, through `ready` " \
           f"({RECORDED})" in out
    assert "the importer frees p after its last check_values" in out
    assert "the exporter frees buf after the importer's free of p, through `freed`" in out
    assert out.index("data:") < out.index("compute-sanitizer") < out.index("order (record)")
    assert "the reading of your code" not in out  # the record decided, and found nothing wrong: the reading has nothing to point at


def test_an_importer_that_reads_before_the_values_are_there_is_told_why(tmp_path):
    said = verdict(Canned(tmp_path, run_lines(read_early=True), plan={"todo2": NOTHING}))
    assert "data: the importer read 4,194,304 of 4,194,304 values wrong" in said
    assert "order: the importer started reading 149.000 ms before the exporter's values were written" in said
    assert "TODO 1 and 2" in said and "exporter's free" not in said


def test_an_importer_that_skips_its_wait_is_told_by_its_results_then_its_record(tmp_path, capsys):
    """The run of an importer without TODO 2: the data and the GPU clock say it is wrong, the record says why, and
    the reading points at the line."""
    said = verdict(Canned(tmp_path, run_lines(read_early=True), lambda cu: regions(cu, {0: ""}),
                          plan={"todo2": NOTHING}))
    data, order, record = (said.index(w) for w in ("data: the importer read 4,194,304 of 4,194,304 values wrong",
                                                   "order: the importer started reading 149.000 ms before",
                                                   "nothing in the importer waits for `ready`"))
    assert data < order < record and "TODO 2" in said[record:]
    assert "the reading of your code says: importer: nothing waits for `ready` before check_values" in \
        capsys.readouterr().out


def test_the_given_code_keeps_the_hand_shake():
    """The run can show a missing wait only if the exporter's values come after the importer is up: the exporter
    zeroes the buffer, waits for Imported before its spin and write_values, and sends Recorded after TODO 1; the
    importer has imported everything before it sends Imported, and goes on to TODO 2 only on Recorded. After the
    hand-shake the importer only launches its kernels, well within the check's spin of 100 to 200 ms. Each process
    marks itself for the record (course::section)."""
    cu = LAB.cuda()
    split = cu.index("static int exporter(")
    importer, exporter = cu[:split], cu[split:]

    def in_order(code, *steps):
        at = [code.index(step) for step in steps]
        assert at == sorted(at), [step for step, _ in sorted(zip(steps, at), key=lambda x: x[1])]

    in_order(exporter, 'course::section("exporter")', "cudaMemsetAsync(buf, 0, bytes, s)",
             "proc::send(child.sock, share)", "proc::recv<Imported>(child.sock)",
             ">>>(static_cast<unsigned long long>(spin_ms * 1e6))", "write_values<<<", "cudaEventRecord(ready, s)",
             "proc::send(child.sock, Recorded{1})")
    in_order(importer, "static int importer(", 'course::section("importer")', "cudaMemPoolImportPointer(",
             "cudaIpcOpenEventHandle(&ready", "proc::send(sock, Imported{1})", "proc::recv<Recorded>(sock)",
             "cudaStreamWaitEvent(s, ready, 0)", "check_values<<<")
    assert 100 <= LAB5.ARGS[1] <= 200 and LAB5.ARGS[2] <= 100  # the whole run well under 2 s
    sizes = [a[0] for a in LAB5.TRACE_ARGS]
    assert len(set(sizes)) == 2 and LAB5.ARGS[0] not in sizes and all(s % 4 == 0 for s in sizes)


def test_an_exporter_that_frees_first_is_told_why(tmp_path):
    said = verdict(Canned(tmp_path, run_lines(exporter_first=True), plan={"todo4": NOTHING}))
    assert "data: the importer's last read found 4,194,304 values wrong" in said
    assert "4,194,304 hold the -1 that the exporter's next allocation writes at once after its free" in said
    assert "order: the exporter's free began 50.400 ms before the importer was past its own free" in said
    assert "TODO 3 and 4" in said and "data: the importer read" not in said
    assert "nothing in the exporter waits for `freed`" in said


def test_an_early_free_without_reuse_is_left_to_the_gpu_clock(tmp_path):
    said = verdict(Canned(tmp_path, run_lines(exporter_first=True, reused=False)))
    assert "data: the importer's last read" not in said and "the exporter's free began 50.400 ms before" in said


def test_an_importer_that_never_frees_is_caught_by_its_pool_and_its_record(tmp_path):
    said = verdict(Canned(tmp_path, run_lines(not_freed=True), plan={"todo3": lambda I: I.record(I.freed, I.s)}))
    assert "the importer's pool still counts 16,777,216 bytes (16 MiB) in use at the end" in said
    assert "the importer never frees p" in said


def test_a_pool_that_refuses_the_query_lets_the_record_decide(tmp_path, capsys):
    """An H100's driver: the imported pool refuses cudaMemPoolGetAttribute, so the run does not show the importer's
    free; the record does."""
    assert verdict(Canned(tmp_path, run_lines(refused=True))) == ""
    out = capsys.readouterr().out
    assert "the importer's pool holds nothing" not in out and "note" not in out
    assert "the importer frees p after its last check_values" in out and all_passed()
    not_freed = lambda cu: regions(cu, {1: "CHECK(cudaEventRecord(freed, s));\n"})  # noqa: E731
    said = verdict(Canned(tmp_path, run_lines(refused=True), not_freed,
                          plan={"todo3": lambda I: I.record(I.freed, I.s)}))
    assert "the importer never frees p" in said and "TODO 3" in said


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
    assert not all_passed() and unverified("not verified here: the sharing")


def test_the_courses_solution_on_a_system_without_posix_handles_is_not_passed(tmp_path):
    with pytest.raises(checks.Unverified, match="this is the course's own solution.*cannot share a pool"):
        labchecks.lab5(Canned(tmp_path, run_lines(platform=False), name=LAB.name))


def test_the_record_of_the_stubs_names_every_todo(tmp_path, capsys):
    said = verdict(Canned(tmp_path, run_lines(), lambda cu: regions(cu, ["", "", "", ""]),
                          plan={k: NOTHING for k in SOLUTION}))
    for todo in ("TODO 1", "TODO 2", "TODO 3", "TODO 4"):
        assert todo in said, said
    assert "the exporter never records `ready`" in said and "the importer never frees p" in said
    assert "nothing in the exporter waits for `freed`" in said
    out = capsys.readouterr().out  # the reading points at the lines
    assert "the reading of your code says: exporter: `ready` is not recorded after write_values" in out


def test_without_a_record_the_reading_decides_nothing(tmp_path, capsys):
    """A wrong answer whose run looks right, with no record (replay of code nobody recorded): not verified, never
    rejected by the reading alone, never passed."""
    edit = ANSWERS_WRONG["importer waits on another stream"][0]
    assert verdict(Canned(tmp_path, run_lines(), edit, plan=False)) == ""
    out = capsys.readouterr().out
    assert not all_passed() and "not verified" in out
    assert "the reading of your code says: importer: it waits for `ready` on `w`, but check_values reads on `s`" in out


def test_an_event_the_reading_cannot_follow_is_left_to_the_record(tmp_path, capsys):
    """The importer waits through a pointer: the reading cannot tell which event; the record can."""
    through_a_pointer = "cudaEvent_t* which = &ready;\nCHECK(cudaStreamWaitEvent(s, *which, 0));\n"
    edit = lambda cu: regions(cu, {0: through_a_pointer})  # noqa: E731
    assert verdict(Canned(tmp_path, run_lines(), edit)) == ""
    assert all_passed()
    assert verdict(Canned(tmp_path, run_lines(), edit, plan=False)) == ""
    out = capsys.readouterr().out
    assert "cannot tell from the source: the run decides. The reading cannot follow `*which`" in out
    assert not all_passed()


# -- the record's links between the two processes (streamalloc.calls) ------------------------------------------
def test_the_ipc_events_and_the_shared_buffer_link_the_two_processes():
    rec = calls.Calls(calls.parse("\n".join(map(__import__("json").dumps, ipc_record([1 << 20])))))
    buf = next(b for b in rec.all_buffers if b.alloc["pid"] == 4100 and b.key)
    p = next(b for b in rec.all_buffers if b.alloc["pid"] == 4200 and b.key)
    assert p.size == buf.size == 1 << 20  # the import maps the whole exported allocation
    write = rec.launches("write_values")[0]
    reads = rec.launches("check_values")
    assert len(reads) == 2 and all(rec.before(write, r) for r in reads)  # through `ready`
    assert all(rec.done_before_free(r, buf) for r in reads) and rec.before(p.free_op, buf.free_op)  # through `freed`
    assert rec.problems() == []


def test_the_importers_uses_count_against_the_exporters_allocation_and_free():
    plan = {"todo1": NOTHING, "todo2": NOTHING, "todo4": NOTHING}
    rec = calls.Calls(calls.parse("\n".join(map(__import__("json").dumps, ipc_record([1 << 20], **plan)))))
    kinds = {(pr.use.what, pr.kind) for pr in rec.problems() if pr.buffer.alloc["pid"] == 4100}
    assert kinds == {("check_values", "before its allocation"), ("check_values", "after its free")}


def test_a_cudaFree_of_an_imported_pointer_waits_for_nothing():
    """§15.3: cudaFree of pool memory performs no synchronization; only cudaFree of cudaMalloc memory waits."""
    for plan, ordered in (({"todo3": lambda I: (I.free(I.p), I.record(I.freed, I.s))}, False),
                          ({"todo3": lambda I: (I.sync(I.s), I.free(I.p), I.record(I.freed, I.s))}, True)):
        rec = calls.Calls(calls.parse("\n".join(map(__import__("json").dumps, ipc_record([1 << 20], **plan)))))
        p = next(b for b in rec.all_buffers if b.alloc["pid"] == 4200 and b.key)
        assert all(rec.done_before_free(r, p) for r in p.uses) is ordered


# -- answers: each one's C++ (the edit of ipc_share.cu), the calls it makes (its plan), the words of its verdict --
NEW_STREAM = "cudaStream_t {0};\nCHECK(cudaStreamCreateWithFlags(&{0}, cudaStreamNonBlocking));\n"


def above_importer(text):
    return lambda cu: cu.replace("static int importer(", text + "static int importer(", 1)



def record_before_the_writes(cu):
    """`ready` recorded before write_values: the record moved up, TODO 1 left empty."""
    spin = "    course::spin<<<1, 1, 0, s>>>(static_cast<unsigned long long>(spin_ms * 1e6));"
    return regions(cu, {2: ""}).replace(spin, "    CHECK(cudaEventRecord(ready, s));\n" + spin, 1)


def wait_before_the_record(cu):
    """The importer waits for `ready` before the exporter says it is recorded: TODO 2 moved above the message."""
    gate = "    proc::recv<Recorded>(sock);"
    return regions(cu, {0: ""}).replace(gate, "    CHECK(cudaStreamWaitEvent(s, ready, 0));\n" + gate, 1)


MACROS = """\
#define MARK(ev, st) CHECK(cudaEventRecord((ev), (st)))
#define HOLD(st, ev) do { CHECK(cudaStreamWaitEvent((st), (ev), 0)); } while (0)

"""
WRAPPER = """\
struct IpcEvent {  // one IPC event: the side that marks a point records it, the side that must not pass it waits
    cudaEvent_t ev;
    void mark(cudaStream_t st) const { CHECK(cudaEventRecord(ev, st)); }
    void hold(cudaStream_t st) const { CHECK(cudaStreamWaitEvent(st, ev, 0)); }
};

"""
SWAPPED = """\
// the parameters carry the caller's names in the other roles: `s` here is the event, `ready` the stream
static void hold_until(cudaEvent_t s, cudaStream_t ready) { CHECK(cudaStreamWaitEvent(ready, s, 0)); }

"""
OWNER = """\
#include <memory>

"""


def second_stream_free(I):
    I.f, I.j = I.stream(), I.event()
    I.record(I.j, I.s)
    I.wait(I.f, I.j)
    I.free_async(I.p, I.f)
    I.record(I.freed, I.f)


def joined_wait(I):
    I.w, I.j = I.stream(), I.event()
    I.wait(I.w, I.ready)
    I.record(I.j, I.w)
    I.wait(I.s, I.j)


ANSWERS_RIGHT = {  # name: (the edit, the calls it makes where they differ from the solution's)
    "macros, one a do-while": (
        both(lambda cu: regions(cu, ["HOLD(s, ready);", "CHECK(cudaFreeAsync(p, s));\nMARK(freed, s);",
                                     "MARK(ready, s);", "HOLD(s, freed);"]), above_importer(MACROS)), {}),
    "a struct wrapping the events": (
        both(lambda cu: regions(cu, ["IpcEvent{ready}.hold(s);", "CHECK(cudaFreeAsync(p, s));\n"
                                     "IpcEvent{freed}.mark(s);", "IpcEvent{ready}.mark(s);",
                                     "IpcEvent{freed}.hold(s);"]), above_importer(WRAPPER)), {}),
    "cudaEventRecordWithFlags": (
        lambda cu: regions(cu, {1: "CHECK(cudaFreeAsync(p, s));\n"
                                   "CHECK(cudaEventRecordWithFlags(freed, s, cudaEventRecordDefault));",
                                2: "CHECK(cudaEventRecordWithFlags(ready, s, cudaEventRecordDefault));"}), {}),
    "a helper whose parameters carry the caller's names in other roles": (
        both(lambda cu: regions(cu, {0: "hold_until(ready, s);", 3: "hold_until(freed, s);"}),
             above_importer(SWAPPED)), {}),
    "the importer frees on a second stream, joined to s by an event": (
        lambda cu: regions(cu, {1: NEW_STREAM.format("f") + "cudaEvent_t read_done;\n"
                                   "CHECK(cudaEventCreateWithFlags(&read_done, cudaEventDisableTiming));\n"
                                   "CHECK(cudaEventRecord(read_done, s));\nCHECK(cudaStreamWaitEvent(f, read_done, 0));\n"
                                   "CHECK(cudaFreeAsync(p, f));\nCHECK(cudaEventRecord(freed, f));"}),
        {"todo3": second_stream_free}),
    "host waits that poll cudaEventQuery (course::reached)": (
        lambda cu: regions(cu, {0: "while (!course::reached(cudaEventQuery(ready))) {}",
                                3: "while (!course::reached(cudaEventQuery(freed))) {}"}),
        {"todo2": lambda I: I.poll(I.ready), "todo4": lambda E: E.poll(E.freed)}),
    "host waits with cudaEventSynchronize": (
        lambda cu: regions(cu, {0: "CHECK(cudaEventSynchronize(ready));", 3: "CHECK(cudaEventSynchronize(freed));"}),
        {"todo2": lambda I: I.event_sync(I.ready), "todo4": lambda E: E.event_sync(E.freed)}),
    "cudaFree after the importer waited for its reads": (
        lambda cu: regions(cu, {1: "CHECK(cudaStreamSynchronize(s));\nCHECK(cudaFree(p));\n"
                                   "CHECK(cudaEventRecord(freed, s));"}),
        {"todo3": lambda I: (I.sync(I.s), I.free(I.p), I.record(I.freed, I.s))}),
    "a lambda that records on s": (
        lambda cu: regions(cu, {1: "auto mark = [&](cudaEvent_t e) { CHECK(cudaEventRecord(e, s)); };\n"
                                   "CHECK(cudaFreeAsync(p, s));\nmark(freed);",
                                2: "auto mark = [&](cudaEvent_t e) { CHECK(cudaEventRecord(e, s)); };\nmark(ready);"}),
        {}),
    "a std::shared_ptr owner of p whose deleter frees it on s": (
        both(lambda cu: regions(cu, {1: "{\n    std::shared_ptr<int> owner(p, [&](int* q) { CHECK(cudaFreeAsync(q, s)); "
                                        "});\n}  // the owner goes: p is freed here\nCHECK(cudaEventRecord(freed, s));"}),
             above_importer(OWNER)), {}),
    "aliases for the stream and the events": (
        lambda cu: regions(cu, {0: "cudaStream_t reader = s;\nCHECK(cudaStreamWaitEvent(reader, ready, 0));",
                                2: "cudaEvent_t written = ready;\nCHECK(cudaEventRecordWithFlags(written, s, 0));"}), {}),
    "the wait on another stream, joined to s by an event": (
        lambda cu: regions(cu, {0: NEW_STREAM.format("w") + "cudaEvent_t joined;\n"
                                   "CHECK(cudaEventCreateWithFlags(&joined, cudaEventDisableTiming));\n"
                                   "CHECK(cudaStreamWaitEvent(w, ready, 0));\nCHECK(cudaEventRecord(joined, w));\n"
                                   "CHECK(cudaStreamWaitEvent(s, joined, 0));"}),
        {"todo2": joined_wait}),
}

READY_NOT_AFTER = "the exporter records `ready` only where write_values is not done"
NOT_ON_THE_READER = "the importer waits for `ready`, but not on the stream that reads p"


def other_stream(attr, then):
    def plan(P):
        setattr(P, attr, P.stream())
        then(P, getattr(P, attr))
    return plan


ANSWERS_WRONG = {  # name: (the edit, the calls it makes, what its data run shows, words the verdict must hold)
    "ready recorded before the writes": (
        record_before_the_writes, {"todo1": NOTHING, "before_writes": lambda E: E.record(E.ready, E.s)},
        dict(read_early=True), [READY_NOT_AFTER, "TODO 1"]),
    "ready recorded on another stream": (
        lambda cu: regions(cu, {2: NEW_STREAM.format("s2") + "CHECK(cudaEventRecord(ready, s2));"}),
        {"todo1": other_stream("s2", lambda E, s2: E.record(E.ready, s2))}, dict(read_early=True),
        [READY_NOT_AFTER, "TODO 1"]),
    "ready recorded on the default stream": (
        lambda cu: regions(cu, {2: "CHECK(cudaEventRecord(ready, 0));"}),
        {"todo1": lambda E: E.record(E.ready, "0x0")}, dict(read_early=True), [READY_NOT_AFTER, "TODO 1"]),
    "importer waits on another stream": (
        lambda cu: regions(cu, {0: NEW_STREAM.format("w") + "CHECK(cudaStreamWaitEvent(w, ready, 0));"}),
        {"todo2": other_stream("w", lambda I, w: I.wait(w, I.ready))}, dict(read_early=True),
        [NOT_ON_THE_READER, "TODO 2"]),
    "importer waits before the record": (
        wait_before_the_record, {"todo2": NOTHING, "before_recorded": lambda I: I.wait(I.s, I.ready)},
        dict(read_early=True), ["came before the exporter recorded it", "TODO 2"]),
    "importer waits on a local event under the same name": (
        lambda cu: regions(cu, {0: "{\n    cudaEvent_t ready;  // a new event, not the exporter's\n"
                                   "    CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));\n"
                                   "    CHECK(cudaEventRecord(ready, s));\n    CHECK(cudaStreamWaitEvent(s, ready, 0));\n}"}),
        {"todo2": lambda I: (setattr(I, "mine", I.event()), I.record(I.mine, I.s), I.wait(I.s, I.mine))},
        dict(read_early=True), ["nothing in the importer waits for `ready`", "TODO 2"]),
    "importer records ready itself before its wait": (
        lambda cu: regions(cu, {0: "CHECK(cudaEventRecord(ready, s));\nCHECK(cudaStreamWaitEvent(s, ready, 0));"}),
        {"todo2": lambda I: (I.record(I.ready, I.s), I.wait(I.s, I.ready))}, dict(read_early=True),
        ["are not ordered after `ready`", "TODO 2"]),
    "importer's wait skipped by an if, right only for the default size": (
        lambda cu: regions(cu, {0: "if (n >= (size_t(4) << 20)) CHECK(cudaStreamWaitEvent(s, ready, 0));"}),
        {"todo2": lambda I: I.wait(I.s, I.ready) if I.nbytes // 4 >= 4 << 20 else None}, dict(),
        ["nothing in the importer waits for `ready`", "TODO 2"]),
    "importer frees on another stream, records freed on s": (
        lambda cu: regions(cu, {1: NEW_STREAM.format("f") + "CHECK(cudaFreeAsync(p, f));\n"
                                   "CHECK(cudaEventRecord(freed, s));"}),
        {"todo3": other_stream("f", lambda I, f: (I.free_async(I.p, f), I.record(I.freed, I.s)))}, dict(),
        ["the importer's cudaFreeAsync(p, stream) is not ordered after its last check_values", "TODO 3"]),
    "importer frees with cudaFree, without waiting for its reads": (
        lambda cu: regions(cu, {1: "CHECK(cudaFree(p));\nCHECK(cudaEventRecord(freed, s));"}),
        {"todo3": lambda I: (I.free(I.p), I.record(I.freed, I.s))}, dict(),
        ["the importer's cudaFree(p) is not ordered after its last check_values", "TODO 3"]),
    "importer frees before its last read": (
        lambda cu: regions(cu, {0: "CHECK(cudaStreamWaitEvent(s, ready, 0));\nCHECK(cudaFreeAsync(p, s));",
                                1: "CHECK(cudaEventRecord(freed, s));"}),
        {"todo2": lambda I: (I.wait(I.s, I.ready), I.free_async(I.p, I.s)), "todo3": lambda I: I.record(I.freed, I.s)},
        dict(exporter_first=True), ["is not ordered after its last check_values", "TODO 3"]),
    "importer never frees (a leak in the importer)": (
        lambda cu: regions(cu, {1: "CHECK(cudaEventRecord(freed, s));"}),
        {"todo3": lambda I: I.record(I.freed, I.s)}, dict(not_freed=True), ["the importer never frees p", "TODO 3"]),
    "freed recorded before the importer's free": (
        lambda cu: regions(cu, {1: "CHECK(cudaEventRecord(freed, s));\nCHECK(cudaFreeAsync(p, s));\n"}),
        {"todo3": lambda I: (I.record(I.freed, I.s), I.free_async(I.p, I.s))}, dict(),
        ["the importer records `freed` before its free", "TODO 3"]),
    "exporter waits for ready instead of freed": (
        lambda cu: regions(cu, {3: "CHECK(cudaStreamWaitEvent(s, ready, 0));"}),
        {"todo4": lambda E: E.wait(E.s, E.ready)}, dict(exporter_first=True),
        ["nothing in the exporter waits for `freed`", "TODO 4"]),
    "exporter waits for freed on another stream": (
        lambda cu: regions(cu, {3: NEW_STREAM.format("w") + "CHECK(cudaStreamWaitEvent(w, freed, 0));"}),
        {"todo4": other_stream("w", lambda E, w: E.wait(w, E.freed))}, dict(exporter_first=True),
        ["the exporter waits for `freed`, but not on the stream that frees buf", "TODO 4"]),
    "exporter does not wait": (
        lambda cu: regions(cu, {3: ""}), {"todo4": NOTHING}, dict(exporter_first=True),
        ["nothing in the exporter waits for `freed`", "TODO 4"]),
    "exporter's wait skipped by an if, right only for the default size": (
        lambda cu: regions(cu, {3: "if (bytes >= (size_t(16) << 20)) CHECK(cudaStreamWaitEvent(s, freed, 0));"}),
        {"todo4": lambda E: E.wait(E.s, E.freed) if E.nbytes >= 16 << 20 else None}, dict(),
        ["nothing in the exporter waits for `freed`", "TODO 4"]),
}
# Live on an H100 (driver 580) these came out right in every run: the importer's read still came after the writes,
# an order the driver kept that the API does not promise. The record rejects them whatever the driver did.
DRIVER_KEEPS_ORDER = ["ready recorded on another stream", "ready recorded on the default stream",
                      "importer waits on another stream"]


@pytest.mark.parametrize("name", list(ANSWERS_RIGHT))
def test_a_right_answer_passes_on_its_record(name, tmp_path, capsys):
    edit, plan = ANSWERS_RIGHT[name]
    assert verdict(Canned(tmp_path, run_lines(), edit, plan=plan)) == ""
    out = capsys.readouterr().out
    assert all_passed() and "note" not in out and "WRONG" not in out, out


@pytest.mark.parametrize("name", list(ANSWERS_WRONG))
def test_a_wrong_answer_is_rejected_on_its_run_and_its_record(name, tmp_path):
    edit, plan, run, words = ANSWERS_WRONG[name]
    said = verdict(Canned(tmp_path, run_lines(**run), edit, plan=plan))
    for w in words:
        assert w in said, f"{name}: {w!r} not in {said}"


@pytest.mark.parametrize("name", list(ANSWERS_WRONG))
def test_the_record_rejects_a_wrong_answer_even_when_its_run_came_out_right(name, tmp_path, capsys):
    """What a driver may do: keep an order the API does not promise (DRIVER_KEEPS_ORDER), so that the run shows
    nothing. The record alone rejects it, with the TODO, and the reading points at the line."""
    edit, plan, _, words = ANSWERS_WRONG[name]
    said = verdict(Canned(tmp_path, run_lines(), edit, plan=plan))
    assert all(w in said for w in words), said
    assert "order (record, with a 1 MiB buffer and a 3 MiB buffer)" in said


# -- right answers in the driver API, its functions taken through cudaGetDriverEntryPoint as notebook 05 takes them
# (regions: 0 the importer's wait, 1 its free and `freed`, 2 the exporter's `ready`, 3 the exporter's wait)
DRIVER_RIGHT = {
    "every TODO through the driver": in_the_driver_api([
        "CU_CALL(cuStreamWaitEvent, (CUstream)s, (CUevent)ready, 0);",
        "CU_CALL(cuMemFreeAsync, (CUdeviceptr)p, (CUstream)s);\nCU_CALL(cuEventRecord, (CUevent)freed, (CUstream)s);",
        "CU_CALL(cuEventRecord, (CUevent)ready, (CUstream)s);",
        "CU_CALL(cuStreamWaitEvent, (CUstream)s, (CUevent)freed, 0);"]),
    "the importer's free and its mark through the driver": in_the_driver_api({
        1: "CU_CALL(cuMemFreeAsync, (CUdeviceptr)p, (CUstream)s);\nCU_CALL(cuEventRecord, (CUevent)freed, (CUstream)s);"}),
    "both marks with cuEventRecordWithFlags": in_the_driver_api({
        1: "CHECK(cudaFreeAsync(p, s));\nCU_CALL(cuEventRecordWithFlags, (CUevent)freed, (CUstream)s, 0);",
        2: "CU_CALL(cuEventRecordWithFlags, (CUevent)ready, (CUstream)s, 0);"}),
}


# -- the lab's own check cell, in this session's mode: the protocol every lab's answers get (labcheck.Protocol) -------
class TestProtocol(Protocol):
    lab = LAB
    driver = DRIVER_RIGHT
    right = {name: edit for name, (edit, _) in ANSWERS_RIGHT.items()}
    wrong = {name: (edit, ("order (record", *words)) for name, (edit, _, _, words) in ANSWERS_WRONG.items()}
    stubs_say = ("the exporter never records `ready`", "TODO 1", "TODO 2", "the importer never frees p", "TODO 3",
                 "nothing in the exporter waits for `freed`", "TODO 4")  # the record names every TODO
