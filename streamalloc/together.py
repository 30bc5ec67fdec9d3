"""together: start several of a notebook's Python programs at once, their GPU work one at a time.

A Python program pays for its imports (PyTorch's take seconds) and its CUDA context's start before it times
anything. `run(lesson, runs)` starts every program of `runs` at once, live, with STREAMALLOC_GPU_TURN naming one file
in the lesson's build folder. Right after its imports (and, if it likes, its context's start: replay_alloc.py starts
it), before anything it times or counts, each program says so (one byte appended to that file) and takes its turn: an
exclusive `flock` on the file, held until it exits (the system lets go of it then, also when the program crashes):

    if os.environ.get("STREAMALLOC_GPU_TURN"):  # started beside others: the GPU is ours alone from here to the end
        turn = os.open(os.environ["STREAMALLOC_GPU_TURN"], os.O_WRONLY | os.O_APPEND)
        os.write(turn, b".")  # this program's imports are done: no program times anything until all say so
        fcntl.flock(turn, fcntl.LOCK_EX)

`run` holds the lock itself until every program has said so (or ended): the imports and context starts overlap, and
no turn starts while another program still imports, so a timed loop never shares the CPU with an import either.
Nothing a program measures overlaps another's GPU work: its kernels, timed loops and cudaMemGetInfo readings run in
its turn alone (the other programs wait, idle, their contexts holding only what a context holds). A
program run here must take its turn (one that does not would run beside the others, and is waited for until it
ends: run it with `lesson.run` instead); run alone, the variable is unset and the lines do nothing. One pair of
programs shares a turn: lesson 08's two PyTorch replays (`replay_alloc.py --pair`), where native's process takes the
turn and hands the GPU to cudaMallocAsync's round by round over a socket, the other saying it has imported and then
running only when handed the GPU. Each program's
timeout counts from its start, its waits included. In replay the recordings are read one after another, as
`lesson.run` reads them.

`turns=False` is for programs whose output does not depend on having the GPU alone, such as lesson 08's allocation
traces (what a program asked its allocator for, in its own process): they run fully at once, with no turn to take.
Nothing that times or counts may run that way.
"""
from __future__ import annotations

import fcntl
import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

TURN = "STREAMALLOC_GPU_TURN"
_one_group = threading.Lock()  # one group at a time in this process: the variable is process-wide


def run(lesson, runs: dict, timeout: float = 120, turns: bool = True) -> dict:
    """{key: (file, args, requires)} -> {key: Result}, as `lesson.run(file, args, timeout=, requires=)` gives them.
    Live, every program starts at once and (`turns`) takes its turn on the GPU; a failure raises once all have ended
    (the first, in the order given), so that no program is left running behind the cell."""
    if not getattr(lesson, "live", False) or len(runs) < 2:
        return {k: lesson.run(f, a, timeout=timeout, requires=r) for k, (f, a, r) in runs.items()}
    turn = Path(lesson.build) / ".gpu_turn"
    turn.write_bytes(b"")  # the programs append a byte each once their imports are done
    with _one_group:
        held = os.open(turn, os.O_RDONLY)
        if turns:
            os.environ[TURN] = str(turn)  # the programs inherit it
            fcntl.flock(held, fcntl.LOCK_EX)  # no program's turn until every program has imported
        pool = ThreadPoolExecutor(max_workers=len(runs), thread_name_prefix="together")
        try:
            futures = {k: pool.submit(lesson.run, f, a, timeout=timeout, requires=r) for k, (f, a, r) in runs.items()}
            if turns:
                _all_imported(turn, futures, timeout)
                fcntl.flock(held, fcntl.LOCK_UN)
            for f in futures.values():  # wait for all before any result or error
                f.exception()
        except KeyboardInterrupt:  # the cell was interrupted: the programs go too
            _stop_children(Path(lesson.build))
            raise
        finally:
            os.close(held)  # lets go of the lock, if an interrupt came first
            pool.shutdown(wait=True)
            os.environ.pop(TURN, None)
    return {k: f.result() for k, f in futures.items()}


def _all_imported(turn: Path, futures: dict, timeout: float) -> None:
    """Wait until every program has appended its byte to `turn` (its imports are done) or has ended (a program
    that failed before its turn), at most `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if turn.stat().st_size >= sum(not f.done() for f in futures.values()):
            return
        time.sleep(0.01)


def _stop_children(build: Path) -> None:
    """Stop this process's children that run a program from `build`: each is the course's launcher (cuda.run), which
    on SIGTERM kills its program and every process that program started, setsid daemons included."""
    me = os.getpid()
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue
        if ppid == me and any(str(build).encode() in a for a in argv):
            try:
                os.kill(int(proc.name), signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass
