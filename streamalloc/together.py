"""together: start several of a notebook's Python programs at once, their GPU work one at a time.

A Python program pays for its imports (PyTorch's take seconds) before it touches the GPU. `run(lesson, runs)`
starts every program of `runs` at once, live, with STREAMALLOC_GPU_TURN naming one lock file in the lesson's build
folder. Each program takes its turn right after its imports, before its first CUDA call that makes a context: an
exclusive `flock` on that file, held until it exits (the system lets go of it then, also when the program crashes):

    if os.environ.get("STREAMALLOC_GPU_TURN"):  # started beside others: the GPU is ours alone from here to the end
        fcntl.flock(os.open(os.environ["STREAMALLOC_GPU_TURN"], os.O_RDWR | os.O_CREAT), fcntl.LOCK_EX)

So the imports overlap and nothing on the GPU does: no program's context start, kernels, timed loops or
cudaMemGetInfo readings run beside another's. A program run here must take its turn (one that does not would run
beside the others: run it with `lesson.run` instead); run alone, the variable is unset and the lines do nothing.
Each program's timeout counts from its start, its wait for the turn included. In replay the recordings are read
one after another, as `lesson.run` reads them.

`turns=False` is for programs whose output does not depend on having the GPU alone, such as lesson 08's allocation
traces (what a program asked its allocator for, in its own process): they run fully at once, with no turn to take.
Nothing that times or counts may run that way.
"""
from __future__ import annotations

import os
import signal
import threading
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
    turn.touch()
    with _one_group:
        if turns:
            os.environ[TURN] = str(turn)  # the programs inherit it
        pool = ThreadPoolExecutor(max_workers=len(runs), thread_name_prefix="together")
        try:
            futures = {k: pool.submit(lesson.run, f, a, timeout=timeout, requires=r) for k, (f, a, r) in runs.items()}
            for f in futures.values():  # wait for all before any result or error
                f.exception()
        except KeyboardInterrupt:  # the cell was interrupted: the programs go too
            _stop_children(Path(lesson.build))
            raise
        finally:
            pool.shutdown(wait=True)
            os.environ.pop(TURN, None)
    return {k: f.result() for k, f in futures.items()}


def _stop_children(build: Path) -> None:
    """Kill this process's children that run a program from `build` (each is its own process group)."""
    me = os.getpid()
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue
        if ppid == me and any(str(build).encode() in a for a in argv):
            try:
                os.killpg(int(proc.name), signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
