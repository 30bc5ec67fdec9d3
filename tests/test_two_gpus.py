"""Programs that need two GPUs: `lesson.run(..., gpus=2)` runs them live on a machine with two, and everywhere
else replays a recording made on one, or says plainly that the lesson has not yet run on two GPUs."""
import pytest

from streamalloc import cuda, gpu, lesson, replay
from streamalloc.errors import MissingRecording, NotYetRecorded, StaleRecording

H100 = gpu.Machine(gpu="NVIDIA H100 80GB HBM3", compute_capability="9.0", pools_supported=True, date="2026-01-01",
                   driver="580.1", driver_cuda="13.0", nvcc="13.0")
H200 = gpu.Machine(gpu="NVIDIA H200", compute_capability="9.0", pools_supported=True, date="2026-02-02",
                   driver="580.2", driver_cuda="13.0", nvcc="13.0")
NAME = "05b_two_gpus"


@pytest.fixture
def setup(recordings, tmp_path, monkeypatch):
    """A replaying lesson (no nvcc, so nothing compiles), a program in tmp_path, a one-GPU reference set."""
    monkeypatch.setenv("STREAMALLOC_MODE", "replay")
    monkeypatch.delenv("STREAMALLOC_RECORD", raising=False)
    monkeypatch.setattr(gpu, "nvcc_path", lambda: None)
    monkeypatch.setattr(replay, "_started", set())
    prog = tmp_path / "peer.cu"
    prog.write_text('#include "course.cuh"\nint main() { return 0; }\n')
    ref = lesson.Lesson(NAME, quiet=True)
    replay.save(H100, NAME, "peer", ref.key_source(prog), ["1"], {"stdout": '{"gpus": 1}\n', "gpus": 1})
    return prog


def start():
    return lesson.Lesson(NAME, quiet=True)


def record_on_two(prog, args=("1",), stdout='{"gpus": 2}\n'):
    replay.save(H200, NAME, "peer", start().key_source(prog), list(args), {"stdout": stdout, "gpus": 2})


def test_not_yet_recorded_says_so(setup):
    les = start()
    assert les.reference_gpu == "nvidia-h100-80gb-hbm3"
    assert les.machine_with(2) is None
    with pytest.raises(NotYetRecorded, match="has not yet run on 2 GPUs") as e:
        les.run(setup, [1], gpus=2)
    assert isinstance(e.value, MissingRecording)  # what the course's replay handling already knows
    assert "peer needs 2 GPUs" in str(e.value) and "replays" in str(e.value)


def test_one_gpu_programs_are_unchanged(setup):
    record_on_two(setup)
    res = start().run(setup, [1])
    assert res.stdout == '{"gpus": 1}\n' and res.label.startswith("NVIDIA H100 80GB HBM3, replayed from")


def test_replays_the_set_recorded_on_two_gpus(setup):
    record_on_two(setup)
    les = start()
    assert les.machine_with(2).gpu == "NVIDIA H200" and les.machine_with(3) is None
    res = les.run(setup, [1], gpus=2)
    assert res.replayed and res.records == [{"gpus": 2}]
    assert res.label == ("2x NVIDIA H200, needs 2 GPUs; replayed from a recording of 2026-02-02 "
                         "(driver 580.2, CUDA 13.0, nvcc 13.0)")
    with pytest.raises(NotYetRecorded, match="has not yet run on 3 GPUs"):
        les.run(setup, [1], gpus=3)


def test_changed_code_is_stale_not_missing(setup):
    record_on_two(setup)
    setup.write_text(setup.read_text() + "int unused = 1;\n")
    with pytest.raises(StaleRecording, match="code changed"):
        start().run(setup, [1], gpus=2)


def test_a_run_on_fewer_gpus_does_not_count(setup):
    replay.save(H200, NAME, "peer", start().key_source(setup), ["1"], {"stdout": "", "gpus": 1})
    with pytest.raises(NotYetRecorded):
        start().run(setup, [1], gpus=2)


def live(les, gpus_here, machine, monkeypatch, stdout=""):
    """Make a replaying lesson behave as live on a machine with `gpus_here` GPUs; cuda.run returns stdout."""
    les.mode = gpu.Mode(True, "a test says so")
    les.machine = les.here = machine
    les.__dict__["gpus_here"] = gpus_here
    monkeypatch.setattr(les, "compile", lambda path, flags=(): None)
    calls = []

    def fake_run(exe, args, timeout):
        calls.append(args)
        return cuda.Completed(list(args), stdout, "", 0, 0.5)

    monkeypatch.setattr(cuda, "run", fake_run)
    return calls


def test_live_with_one_gpu_replays_and_never_runs(setup, monkeypatch):
    les = start()
    calls = live(les, 1, H100, monkeypatch)
    with pytest.raises(NotYetRecorded, match="this machine has 1"):
        les.run(setup, [1], gpus=2)
    record_on_two(setup)
    res = les.run(setup, [1], gpus=2)
    assert calls == [] and res.replayed and "needs 2 GPUs; replayed from" in res.label


def test_live_with_two_gpus_runs_and_the_recorder_notes_the_count(setup, monkeypatch):
    monkeypatch.setenv("STREAMALLOC_RECORD", "1")
    les = start()
    calls = live(les, 2, H200, monkeypatch, stdout='{"measured": 7}\n')
    assert les.machine_with(2) is H200
    res = les.run(setup, [1], gpus=2)
    assert calls == [["1"]] and not res.replayed and res.label == "NVIDIA H200, live"
    monkeypatch.delenv("STREAMALLOC_RECORD")
    again = start().run(setup, [1], gpus=2)  # replay finds what the recorder wrote
    assert again.records == [{"measured": 7}] and again.label.startswith("2x NVIDIA H200, needs 2 GPUs; replayed")
