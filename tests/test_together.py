"""streamalloc.together without a GPU: programs started at once overlap before their turn and never after it."""
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from streamalloc import together

ROOT = Path(__file__).resolve().parent.parent

PROGRAM = '''
import fcntl, json, os, sys, time
start = time.time()
time.sleep(1.5 if sys.argv[1] == "slow" else 0.6)  # its imports
if sys.argv[1] == "early":
    sys.exit("failed before its turn")
imported = time.time()
if os.environ.get("STREAMALLOC_GPU_TURN"):  # started beside others: the GPU is ours alone from here to the end
    turn = os.open(os.environ["STREAMALLOC_GPU_TURN"], os.O_WRONLY | os.O_APPEND)
    os.write(turn, b".")  # this program's imports are done: no program times anything until all say so
    fcntl.flock(turn, fcntl.LOCK_EX)
turn = time.time()
time.sleep(0.3)  # its GPU work
if sys.argv[1] == "fail":
    sys.exit("failed on purpose")
print(json.dumps({"start": start, "imported": imported, "turn": turn, "end": time.time()}))
'''


class Result:
    def __init__(self, stdout):
        self.record = json.loads(stdout)


class LiveLesson:
    """Runs the program for real, as lesson.run does live (a subprocess that inherits the environment)."""
    live = True

    def __init__(self, build):
        self.build = build
        (build / "p.py").write_text(PROGRAM)

    def run(self, file, args=(), timeout=120, requires=()):
        done = subprocess.run([sys.executable, str(self.build / file), *args], capture_output=True, text=True,
                              timeout=timeout)
        if done.returncode:
            raise RuntimeError(done.stderr)
        return Result(done.stdout)


def test_imports_overlap_and_turns_do_not(tmp_path):
    lesson = LiveLesson(tmp_path)
    t0 = time.time()
    out = together.run(lesson, {k: ("p.py", [k], ()) for k in "abcd"})
    wall = time.time() - t0
    spans = sorted((r.record["turn"], r.record["end"]) for r in out.values())
    assert all(a_end <= b_turn for (_, a_end), (b_turn, _) in zip(spans, spans[1:])), f"turns overlapped: {spans}"
    assert wall < 4 * (0.6 + 0.3), f"the imports should have overlapped: {wall:.2f} s"
    assert "STREAMALLOC_GPU_TURN" not in __import__("os").environ


def test_no_turn_starts_while_a_program_still_imports(tmp_path):
    """A timed loop must not share the CPU with another program's imports: every turn starts after the last import."""
    out = together.run(LiveLesson(tmp_path), {k: ("p.py", [k], ()) for k in ("a", "slow", "b")})
    last_import = max(r.record["imported"] for r in out.values())
    assert all(r.record["turn"] >= last_import for r in out.values()), {k: r.record for k, r in out.items()}


def test_a_program_that_fails_before_its_turn_does_not_hold_the_others(tmp_path):
    t0 = time.time()
    with pytest.raises(RuntimeError, match="failed before its turn"):
        together.run(LiveLesson(tmp_path), {"a": ("p.py", ["early"], ()), "b": ("p.py", ["b"], ())}, timeout=30)
    assert time.time() - t0 < 5, "the others went on once the failed program had ended"


def test_a_failure_raises_after_every_program_ended(tmp_path):
    lesson = LiveLesson(tmp_path)
    with pytest.raises(RuntimeError, match="failed on purpose"):
        together.run(lesson, {"a": ("p.py", ["fail"], ()), "b": ("p.py", ["b"], ())})


def test_in_replay_the_runs_are_read_one_after_another(tmp_path):
    calls = []

    class Replay:
        live = False

        def run(self, file, args=(), timeout=120, requires=()):
            calls.append((file, args, timeout, requires))
            return len(calls)

    assert together.run(Replay(), {"x": ("a.py", [1], ("cupy",)), "y": ("b.py", [2], ())}, timeout=5) == {"x": 1, "y": 2}
    assert calls == [("a.py", [1], 5, ("cupy",)), ("b.py", [2], 5, ())]


def test_without_turns_the_programs_run_fully_at_once(tmp_path):
    lesson = LiveLesson(tmp_path)
    out = together.run(lesson, {k: ("p.py", [k], ()) for k in "ab"}, turns=False)
    (a_turn, a_end), (b_turn, b_end) = sorted((r.record["turn"], r.record["end"]) for r in out.values())
    assert b_turn < a_end, "without turns nothing waits"


def test_live_runs_started_together_are_all_recorded(tmp_path, monkeypatch):
    """The real lesson.run in threads: every run's recording lands in the one file of its program (saves take turns)."""
    import streamalloc as sa
    from streamalloc import gpu, replay
    monkeypatch.setenv("STREAMALLOC_BUILD", str(tmp_path / "build"))
    monkeypatch.setenv("STREAMALLOC_RECORDINGS", str(tmp_path / "rec"))
    monkeypatch.setenv("STREAMALLOC_RECORD", "1")
    monkeypatch.delenv("STREAMALLOC_RECORD_TO", raising=False)
    lesson = sa.Lesson("99_together", quiet=True)
    lesson.mode, lesson.machine = gpu.Mode(True, "a test"), gpu.Machine(gpu="Test GPU")
    (lesson.build / "p.py").write_text(PROGRAM)
    out = together.run(lesson, {k: ("p.py", [k], ()) for k in "abcd"})
    assert sorted(out) == list("abcd") and all(r.records[0]["turn"] > 0 for r in out.values())
    runs = replay.read_runs(replay.path_of("test-gpu", "99_together", "p"))
    assert sorted(r["args"][0] for r in runs.values()) == list("abcd")


def test_an_interrupt_stops_each_program_and_the_daemon_it_left(tmp_path):
    """_stop_children (a cell interrupted) asks each program's launcher to stop: the program and a setsid daemon of
    its own both end, and the run returns at once."""
    import threading

    from streamalloc import cuda
    from streamalloc.errors import CourseError

    pid_file, prog = tmp_path / "daemon.pid", tmp_path / "hangs.py"
    prog.write_text(f"import os, time\nif os.fork() == 0:\n    os.setsid()\n    open({str(pid_file)!r}, 'w')"
                    ".write(str(os.getpid()))\n    time.sleep(600)\n    os._exit(0)\ntime.sleep(600)\n")
    ended = []
    thread = threading.Thread(target=lambda: ended.append(pytest.raises(CourseError, cuda.run, sys.executable, [prog],
                                                                        timeout=120)))
    thread.start()
    while not pid_file.exists() or not pid_file.read_text():
        time.sleep(0.05)
    t0 = time.perf_counter()
    together._stop_children(tmp_path)
    thread.join(10)
    assert not thread.is_alive() and ended and time.perf_counter() - t0 < 5
    stat = Path(f"/proc/{pid_file.read_text()}/stat")
    assert not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z", "the daemon still runs"
