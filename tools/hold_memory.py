"""Hold all but N GiB of a GPU's memory until killed, so that the course can be run as if on a smaller GPU.

For the T4-readiness run (issue 9): on an 80 GB GPU, `python tools/hold_memory.py --leave 15 &` leaves about
15 GiB free, as on a T4; the course's sizes adapt to lesson.machine.memory_free. The memory is plain device
memory from cudaMalloc (CuPy's runtime.malloc: never managed memory, never a pool that could give it back),
in 1 GiB pieces, touched with cudaMemset so that it is really backed. It is held until the process gets
SIGTERM or SIGINT (kill PID), then freed.

    python tools/hold_memory.py --leave 15 [--device 0] &   # prints one line when it holds the memory
"""
from __future__ import annotations

import argparse
import signal
import sys
import time

GiB = 1 << 30


def plan(free: int, leave: int, piece: int = GiB) -> list[int]:
    """The sizes to allocate so that about `leave` bytes stay free: whole pieces, then the remainder."""
    take = max(0, free - leave)
    return [piece] * (take // piece) + ([take % piece] if take % piece else [])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="tools/hold_memory.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--leave", type=float, required=True, help="GiB to leave free")
    parser.add_argument("--device", type=int, default=0)
    args = parser.parse_args(argv)
    if args.leave < 0:
        parser.error("--leave must be 0 or more")
    try:
        import cupy
        rt = cupy.cuda.runtime
        rt.setDevice(args.device)
        free, total = rt.memGetInfo()
    except Exception as e:
        print(f"hold_memory: no GPU to hold memory on ({e})", file=sys.stderr)
        return 1
    held = []
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    try:
        for size in plan(free, int(args.leave * GiB)):
            p = rt.malloc(size)  # cudaMalloc: plain device memory
            held.append(p)
            rt.memset(p, 0, size)
        rt.deviceSynchronize()
    except Exception as e:
        for p in held:
            rt.free(p)
        print(f"hold_memory: could not allocate ({e})", file=sys.stderr)
        return 1
    now_free = rt.memGetInfo()[0]
    print(f"hold_memory: holding {sum(1 for _ in held)} allocations on GPU {args.device}; "
          f"{now_free / GiB:.1f} GiB of {total / GiB:.1f} GiB left free; kill this process to free them", flush=True)
    while not stop:
        time.sleep(0.5)
    for p in held:
        rt.free(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
