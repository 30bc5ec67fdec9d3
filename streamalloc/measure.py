"""Measuring: read the JSON lines programs print, summarize repeats, time calls from Python.

The rules (COURSE.md): warm up first; time device work with events on the stream that does the
work, host-side API cost with a host clock around the call; repeat and report median and spread.
"""
from __future__ import annotations

import json
import statistics
import time


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


def host_times(fn, repeat: int = 50, warmup: int = 5) -> list[float]:
    """Seconds each call of fn() takes on the host clock, after warm-up calls that are not counted."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def event_times(fn, stream, repeat: int = 20, warmup: int = 3) -> list[float]:
    """Milliseconds of device time that fn() enqueues on `stream`, by CuPy events recorded on that stream."""
    import cupy

    for _ in range(warmup):
        fn()
    stream.synchronize()
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    times = []
    for _ in range(repeat):
        start.record(stream)
        fn()
        stop.record(stream)
        stop.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, stop))
    return times


def dumps(obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))
