"""Measuring: read the JSON lines programs print, summarize repeats, and name sizes.

The rules (AUTHORING.md, "The CUDA programs"): warm up first; time device work with events on the stream
that does the work, host-side API cost with a host clock around the call; repeat and report median and
spread. The notebooks' small helpers live here, one name, one meaning:

    med(values)   the median of repeated measurements, a float
    mib(n)        n bytes in MiB, a float (for axes and arithmetic)
    nbytes(n)     n bytes as a human-readable size: 4194304 -> "4 MiB", 1536 -> "1.5 KiB"
    KiB, MiB, GiB, UINT64_MAX
    EVENT_RESOLUTION_US, HOST_RESOLUTION_US   the timers' resolutions, for a verdict's margin (streamalloc/compare.py)
    free_memory(lesson.machine)   the free GPU memory the lesson's sizes come from (the recorded one in replay)
    block_size(free)              one allocation's size: 64 MiB, or a sixteenth of `free` in 2 MiB pages
"""
from __future__ import annotations

import json
import statistics

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
UINT64_MAX = 2**64 - 1  # the largest release threshold: keep everything
# Timers' resolutions, in µs: the smallest difference a time can show (streamalloc/compare.py's `resolution`).
EVENT_RESOLUTION_US = 0.5  # cudaEventElapsedTime: "a resolution of around 0.5 microseconds" (CUDA Runtime API)
HOST_RESOLUTION_US = 0.001  # std::chrono::steady_clock and Python's time.perf_counter count nanoseconds on Linux


class Records(list):
    """The JSON objects a program printed, one per line, in order."""

    def where(self, **match) -> "Records":
        return Records(r for r in self if all(r.get(k) == v for k, v in match.items()))

    def one(self, **match) -> dict:
        found = self.where(**match)
        if len(found) != 1:
            raise LookupError(f"expected one record with {match}, found {len(found)}")
        return found[0]

    def values(self, field: str) -> list:
        return [r[field] for r in self if field in r]


def parse(stdout: str) -> Records:
    """Every line that is a JSON object becomes a record; other lines are ignored (they are for humans)."""
    out = Records()
    for line in stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise ValueError(f"a program printed a line that looks like JSON but is not: {line!r} ({e})") from None
    return out


def summary(values) -> dict:
    """Median and spread (quartiles, min, max) of repeated measurements."""
    vals = sorted(float(v) for v in values)
    if not vals:
        raise ValueError("no measurements to summarize")
    q = statistics.quantiles(vals, n=4, method="inclusive") if len(vals) > 1 else [vals[0]] * 3
    return {"median": statistics.median(vals), "p25": q[0], "p75": q[2], "min": vals[0], "max": vals[-1],
            "n": len(vals)}


def med(values) -> float:
    """The median of repeated measurements."""
    vals = [float(v) for v in values]
    if not vals:
        raise ValueError("no measurements to take the median of")
    return statistics.median(vals)


def mib(n) -> float:
    """Bytes in MiB (2**20 bytes), as a float."""
    return n / MiB


def nbytes(n) -> str:
    """A byte count as people write it: 4194304 -> '4 MiB', 1536 -> '1.5 KiB', 100 -> '100 B'."""
    n = int(n)
    for unit, scale in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if abs(n) >= scale:
            return f"{n / scale:g} {unit}"
    return f"{n} B"


def dumps(obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


# -- sizes from the free memory of the machine the numbers come from ------------------------------------------
def free_memory(machine, otherwise: int = 8 * GiB) -> int:
    """The free GPU memory of `machine` in bytes: pass `lesson.machine` (live: this GPU; replay: the recorded one, so
    that sizes computed from it are the recorded arguments); `otherwise` where it is not known."""
    return int(getattr(machine, "memory_free", None) or otherwise)


def block_size(free: int, most: int = 64 * MiB, share: int = 16, least: int = 8 * MiB, page: int = 2 * MiB) -> int:
    """One allocation's size for a lesson: `most`, or a `share`-th of `free` on a GPU with less, rounded down to
    whole `page`s, never under `least`. block_size(free_memory(lesson.machine)) is 64 MiB on a GPU with 1 GiB free."""
    return max(least, min(most, free // share) // page * page)
