"""The course's allocation traces: one grammar, read and checked here and, word for word the same, by
include/course_trace.cuh (the CUDA replayer's reader); traces built deterministically; and converters from what
PyTorch, CuPy and RMM record into the course's format (`python -m streamalloc trace IN -o OUT`).

A trace is a text file, one event a line:

    a <id> <bytes> <stream>    allocate block <id> of <bytes> on stream <stream> (0, 1, ...)
    f <id>                     free block <id>, on the stream it was allocated on
    s                          end of a step: the program synchronizes here
    # ...                      a comment: the first is the trace's name, the second where it came from; after
                               them "# steps: ..." (how its steps were found) and "# library: torch" (the
                               library that recorded it: torch, cupy or rmm, as LIBRARIES names them)

Words are separated by spaces or tabs; numbers are written in decimal digits only. A bad trace is refused with one
message naming its line (`TraceError`), the same message the C++ reader prints, before anything runs it. Both readers
read only a regular file of 1 byte to MAX_FILE_BYTES (a folder, a device, a pipe are refused before any read) and at
most MAX_EVENTS events.

Everything read from an input (a pickle, JSON, CSV) is untrusted: what a message quotes of it goes through `shown`,
which writes at most a few dozen characters of any value without walking the whole of it.
"""
from __future__ import annotations

import csv
import dataclasses
import io
import itertools
import json
import os
import pickle
import re
import stat
from pathlib import Path

from .errors import CourseError
from .measure import MiB, mib, nbytes

STEP_RISE = 0.25  # a snapshot's step rises by at least this share of the memory's whole range (low_points)
MOST_EVENTS = 4000  # a trace keeps whole steps up to this many events: enough to show the pattern, quick to replay
# The limits, the same in course_trace.cuh. The replayers keep one slot per block id and one CUDA stream per stream
# number, so ids and streams are bounded rather than trusted: 2**20 ids is a million blocks alive at once (more than
# any framework's step holds), and 64 streams is more than a program uses for its allocations. No GPU has 2**48
# bytes (256 TiB), and below that limit no sum of sizes can overflow a 64-bit count.
MAX_BLOCKS = 1 << 20  # block ids 0 .. MAX_BLOCKS - 1
MAX_STREAMS = 64  # streams 0 .. MAX_STREAMS - 1
MAX_BYTES = 1 << 48  # the largest block, and the most the trace may hold at once
# A trace's file is read whole, and its events kept: both are bounded, the same in course_trace.cuh. Two million
# events is hundreds of a framework's steps; a file of that many is under 64 MiB, and a PyTorch snapshot with its
# stacks (a kilobyte or more an entry) of a few hundred thousand entries under 256 MiB.
MAX_EVENTS = 1 << 21
MAX_FILE_BYTES = 256 << 20
EVENT_FORMS = '"a <id> <bytes> <stream>", "f <id>" or "s"'
# The libraries a converted trace can come from (its "# library:" comment): what recorded it decides which allocators
# replay it in time (lesson 08's your_trace). A comment to the readers: course_trace.cuh and replay_alloc.py skip it.
LIBRARIES = {"torch": "PyTorch", "cupy": "CuPy", "rmm": "RMM"}
FREES = ("free", "free_requested", "free_completed")  # what the converters take as a block's free (_blocks)


class TraceError(CourseError, ValueError):
    """A trace (or a file to convert into one) that the course cannot read: the message names the line or field."""


WORD = re.compile(r"[^ \t\r\f\v]+")  # what C++ reads as words: split on ASCII blanks only, as course_trace.cuh does
WHOLE = re.compile(r"[0-9]+")


def _quoted(line: str) -> str:
    text = line.strip(" \t\r\f\v")
    return text if len(text) <= 60 else text[:57] + "..."


def shown(value, most: int = 60) -> str:
    """A value read from an input, written in at most `most` characters: the containers' items one at a time until
    the room is spent, never repr() of the whole (a 450-byte pickle can hold a tree of shared references that repr
    would walk for ever, or lists nested 10**5 deep that it cannot walk at all)."""
    out, size, todo = [], 0, [(False, value)]  # (True, text) to write as it is, (False, a value) to write
    while todo and size <= most:
        literal, v = todo.pop()
        if literal:
            text = v
        elif type(v) in (list, tuple, dict):
            items = itertools.islice(v.items() if type(v) is dict else v, most)
            brackets = {list: "[]", tuple: "()", dict: "{}"}[type(v)]
            parts = []
            for item in items:
                parts += [(True, ", ")] + ([(False, item[0]), (True, ": "), (False, item[1])] if type(v) is dict
                                           else [(False, item)])
            todo += [(True, brackets[1])] + parts[1:][::-1]
            text = brackets[0]
        elif isinstance(v, int) and not isinstance(v, bool) and v.bit_length() > 200:
            text = f"<a number of {v.bit_length()} bits>"
        elif isinstance(v, (str, bytes)):
            text = repr(v[:most + 1])
        elif v is None or isinstance(v, (bool, int, float)):
            text = repr(v)
        else:
            text = f"<{type(v).__name__}>"
        out.append(text)
        size += len(text)
    text = "".join(out)
    return text if size <= most and not todo else text[:most - 3] + "..."


def _count(n: int, word: str) -> str:
    """'1 step', '2 steps', '1,024 events'."""
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def read_file(path, what: str = "") -> bytes:
    """The bytes of a file the course reads (`what`: "the trace " for a trace): a path that is no regular file (a
    folder, a device such as /dev/zero, a pipe that would wait for a writer), an empty file and one over
    MAX_FILE_BYTES are refused before a byte is read, with the words course_trace.cuh uses."""
    try:
        st = os.stat(path)
    except OSError as e:
        raise TraceError(f"cannot open {what}{path}: {e.strerror or e}") from None
    if stat.S_ISDIR(st.st_mode):
        raise TraceError(f"{path}: a folder, not a file")
    if not stat.S_ISREG(st.st_mode):
        raise TraceError(f"{path}: not a regular file (a device, a pipe or a socket)")
    if st.st_size == 0:
        raise TraceError(f"{path}: empty (0 bytes)")
    if st.st_size > MAX_FILE_BYTES:
        raise TraceError(f"{path}: {st.st_size} bytes, over the {MAX_FILE_BYTES >> 20} MiB the course reads")
    try:
        with open(path, "rb") as f:
            return f.read(MAX_FILE_BYTES)  # no more, should it grow while it is read
    except OSError as e:
        raise TraceError(f"cannot open {what}{path}: {e.strerror or e}") from None


def _number(word: str, most: int):
    """The value of a word of decimal digits up to `most`, else None."""
    if not WHOLE.fullmatch(word) or len(word.lstrip("0")) > 15:  # 10**15 is over 2**48, the largest limit
        return None
    return int(word) if int(word) <= most else None


def _parse(text: str, where: str | None):
    """(comments, events) of a trace's text; the first thing wrong is a TraceError naming its line."""
    at = (lambda n: f"line {n}") if where is None else (lambda n: f"{where}:{n}")
    comments, events, alive, freed = [], [], {}, {}
    held, sizes = 0, {}
    for n, line in enumerate(text.split("\n"), 1):
        words = WORD.findall(line)
        if not words:
            continue
        if words[0].startswith("#"):
            comments.append(line.strip().lstrip("#").strip())
            continue
        if not ((words[0] == "a" and len(words) == 4) or (words[0] == "f" and len(words) == 2) or words == ["s"]):
            raise TraceError(f"{at(n)}: not an event: '{_quoted(line)}' (an event is {EVENT_FORMS})")
        if len(events) == MAX_EVENTS:
            raise TraceError(f"{at(n)}: more than {MAX_EVENTS} events: a trace holds at most {MAX_EVENTS}")
        if words[0] == "s":
            events.append(("s",))
            continue
        block = _number(words[1], MAX_BLOCKS - 1)
        if block is None:
            raise TraceError(f"{at(n)}: the block id '{words[1]}' is not a whole number from 0 to {MAX_BLOCKS - 1}")
        if words[0] == "f":
            if block not in alive:
                why = f"line {freed[block]} freed it already" if block in freed else "it was never allocated"
                raise TraceError(f"{at(n)}: frees block {block}, which is not allocated: {why}")
            del alive[block]
            freed[block] = n
            held -= sizes[block]
            events.append(("f", block))
            continue
        size = _number(words[2], MAX_BYTES)
        if not size:
            raise TraceError(f"{at(n)}: the size '{words[2]}' is not a whole number of bytes from 1 to 2**48")
        stream = _number(words[3], MAX_STREAMS - 1)
        if stream is None:
            raise TraceError(f"{at(n)}: the stream '{words[3]}' is not a whole number from 0 to {MAX_STREAMS - 1}")
        if block in alive:
            raise TraceError(f"{at(n)}: allocates block {block}, which is still allocated (since line {alive[block]})")
        held += size
        if held > MAX_BYTES:
            raise TraceError(f"{at(n)}: with this allocation the trace holds {held} bytes at once, over 2**48")
        alive[block], sizes[block] = n, size
        events.append(("a", block, size, stream))
    head = f"{where}: " if where is not None else ""
    if not any(e[0] == "a" for e in events):
        raise TraceError(f"{head}no allocation: a trace needs at least one line \"a <id> <bytes> <stream>\"")
    if not any(e[0] == "s" for e in events):
        raise TraceError(f"{head}no step: a trace needs at least one line \"s\" (the end of a step)")
    return comments, events


@dataclasses.dataclass
class Trace:
    name: str
    source: str  # where it came from, in words
    events: list  # ("a", id, bytes, stream), ("f", id), ("s",)
    how: str = ""  # how its steps were found, where a converter had to choose (a comment "# steps: ...")
    library: str = ""  # the library that recorded it, a key of LIBRARIES (a comment "# library: ..."); "" unknown
    # what a converter left out of the recording, counted and named: the command says it (summary); the file does not
    # hold it, so that a trace converted again is the same file (a recording's key holds a trace file's bytes)
    left_out: str = ""

    # -- the file ---------------------------------------------------------------------------------------------
    def text(self) -> str:
        head = [f"# {self.name}", f"# {self.source}"] + ([f"# steps: {self.how}"] if self.how else []) \
            + ([f"# library: {self.library}"] if self.library else [])
        return "\n".join(head + [" ".join(map(str, e)) for e in self.events]) + "\n"

    def write(self, folder) -> Path:
        path = Path(folder) / f"{slug(self.name)}.trace"
        path.write_text(self.text())
        return path

    @classmethod
    def parse(cls, text: str, name: str = "", source: str = "", where: str | None = None) -> "Trace":
        """A trace file's text. Anything wrong is a TraceError naming its line ("line 3: ...", or "<where>:3: ...")."""
        comments, events = _parse(text, where)
        fields = dict(c.split(": ", 1) for c in comments[2:] if ": " in c)  # "steps: ...", "library: ..."
        comments += ["", ""]
        return cls(name or comments[0], source or comments[1], events, fields.get("steps", ""),
                   fields.get("library", ""))

    def check(self) -> None:
        """The events obey the grammar, as a file of them would be read (the message names the line it would have)."""
        _parse(self.text(), self.name or "trace")

    def one_stream(self) -> "Trace":
        """The same events, every block on stream 0: what the trace asks of an allocator without its streams."""
        events = [("a", e[1], e[2], 0) if e[0] == "a" else e for e in self.events]
        return Trace(f"{self.name}, one stream", f"{self.source}; every block on stream 0", events, self.how,
                     self.library)

    # -- what it asks for -------------------------------------------------------------------------------------
    def in_use(self) -> list[int]:
        """Bytes allocated and not yet freed after each event."""
        size, live, out = {}, 0, []
        for e in self.events:
            if e[0] == "a":
                size[e[1]] = e[2]
                live += e[2]
            elif e[0] == "f":
                live -= size[e[1]]
            out.append(live)
        return out

    def stats(self) -> dict:
        allocs = [e for e in self.events if e[0] == "a"]
        sizes = [e[2] for e in allocs]
        use = self.in_use()
        step_ends = [use[i] for i, e in enumerate(self.events) if e[0] == "s"]
        return {"trace": self.name, "events": len(self.events), "allocations": len(allocs),
                "frees": sum(e[0] == "f" for e in self.events), "steps": sum(e[0] == "s" for e in self.events),
                "streams": len({e[3] for e in allocs}), "peak": max(use, default=0),
                "smallest": min(sizes, default=0), "largest": max(sizes, default=0),
                "distinct sizes": len(set(sizes)), "kept across steps": max(step_ends, default=0)}


def load(path) -> Trace:
    """The trace in a file; anything wrong is a TraceError naming "<path>:<line>", as the CUDA replayer says it."""
    return Trace.parse(read_file(path, "the trace ").decode("utf-8", errors="replace"), where=str(path))


def check_fits(peak: int, free_bytes: int) -> None:
    """A trace whose peak is more than the GPU has free cannot be replayed there: the message course_trace.cuh's
    check_fits prints."""
    if peak > free_bytes:
        raise TraceError(f"the trace needs {peak / MiB:.1f} MiB at its peak; this GPU has {free_bytes / MiB:.1f} MiB free")


def slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "trace"


def cut(events: list, most: int | None = MOST_EVENTS) -> list:
    """The events of whole steps, up to `most` events (at least one step); all of them when `most` is None."""
    if most is None:
        return events
    ends = [i + 1 for i, e in enumerate(events) if e[0] == "s"]
    keep = max([n for n in ends if n <= most] or ends[:1] or [len(events)])
    return events[:keep]


def _cut_how(events: list, most, how: str) -> str:
    """`how`, and how many steps cut(events, most) keeps where it leaves some out."""
    total, steps = (sum(e[0] == "s" for e in x) for x in (events, cut(events, most)))
    return f"{how}; kept the first {steps} of {total} steps (at most {most} events)".lstrip("; ") if steps < total else how


def _cut_trace(name: str, source: str, events: list, most, how: str, library: str = "", left_out: str = "") -> Trace:
    """A converted trace: whole steps up to `most` events of `events` (each "a" and "f" with the input's entry that
    made it last, _blocks), within the limits of a trace, else a TraceError naming that entry."""
    trace = Trace(name, source, _within_limits(cut(events, most)), _cut_how(events, most, how), library, left_out)
    trace.check()  # cannot fail now: the grammar's own reader agrees
    return trace


def _within_limits(events: list) -> list:
    """The events without the entries they came from, once within a trace's limits; the first event over one is a
    TraceError naming its entry in the input (not a line of the trace written from it)."""
    out, held, size, origin = [], 0, {}, "the input"
    keep_fewer = "keep fewer steps (--most-events N)"
    for e in events:
        if e[0] == "s":
            out.append(e)
            continue
        origin = e[-1]
        if len(out) >= MAX_EVENTS:
            raise TraceError(f"{origin}: more than {MAX_EVENTS} events, the most a trace holds: {keep_fewer}")
        if e[0] == "f":
            held -= size.pop(e[1])
            out.append(e[:2])
            continue
        _, block, nbytes_, stream = e[:4]
        if block >= MAX_BLOCKS:  # each allocation is a block of its own: ids run past what a trace may name
            raise TraceError(f"{origin}: allocation {block + 1:,}, over the {MAX_BLOCKS:,} blocks a trace may name: "
                             f"{keep_fewer}")
        if stream >= MAX_STREAMS:
            raise TraceError(f"{origin}: a {MAX_STREAMS + 1}th stream, over the {MAX_STREAMS} a trace may use")
        held += nbytes_
        size[block] = nbytes_
        if held > MAX_BYTES:
            raise TraceError(f"{origin}: with this allocation the program holds {held} bytes at once, over 2**48")
        out.append(e[:4])
    if len(out) > MAX_EVENTS:
        raise TraceError(f"{origin}: more than {MAX_EVENTS} events, the most a trace holds: {keep_fewer}")
    return out


def _address_event(entry, where: str):
    """(action, address, bytes, stream, where) from [action, address, bytes, stream] as the converters read it; a
    malformed one is a TraceError naming it."""
    if type(entry) not in (list, tuple) or len(entry) != 4 or not isinstance(entry[0], str):
        raise TraceError(f"{where}: {shown(entry)} is not [action, address, bytes, stream]")
    action, addr, size, stream = entry
    if type(addr) not in (int, str) or type(stream) not in (int, str, type(None)):
        raise TraceError(f"{where}: the address {shown(addr)} or the stream {shown(stream)} is not a number or a name")
    if action == "alloc" and (type(size) is not int or not 0 < size <= MAX_BYTES):
        raise TraceError(f"{where}: the size {shown(size)} is not a whole number of bytes from 1 to 2**48")
    return action, addr, size, stream, where


def _blocks(steps) -> tuple[list, str]:
    """The course's events for steps of (action, address, bytes, stream, where), each "a" and "f" with its `where`
    last (from_address_events says how), and what was left out, in words."""
    live, freed, streams, events, next_id, unknown = {}, {}, {}, [], 0, []
    for step in steps:
        for action, addr, size, stream, where in step:
            if action == "alloc":
                if addr in live:  # freed without the free being seen: count it freed here
                    events.append(("f", live.pop(addr), where))
                freed.pop(addr, None)
                live[addr] = next_id
                events.append(("a", next_id, int(size), streams.setdefault(stream, len(streams)), where))
                next_id += 1
            elif action in FREES and addr in live:
                events.append(("f", live.pop(addr), where))
                freed[addr] = [action, where]
            elif action in FREES and addr in freed:  # PyTorch's free_completed follows its free_requested
                if freed[addr][0] != "free_requested" or action != "free_completed":
                    raise TraceError(f"{where}: frees the address {shown(addr)} again ({freed[addr][1]} freed it, and "
                                     "nothing allocated it since): a double free, which the course refuses")
                freed[addr][0] = action
            elif action in FREES:
                unknown.append(where)
        events.append(("s",))
    left_out = ""
    if unknown:
        named = "; ".join(unknown[:3]) + (f"; and {len(unknown) - 3:,} more" if len(unknown) > 3 else "")
        left_out = (f"{_count(len(unknown), 'free')} of an address the recording never allocated (memory allocated "
                    f"before it began?): {named}")
    return events, left_out


def from_address_events(name: str, source: str, steps, most: int | None = MOST_EVENTS, how: str = "",
                        library: str = "") -> Trace:
    """A trace from what a program saw, step by step: each step a list of [action, address, bytes, stream], action
    "alloc" or a free (FREES: PyTorch's history says "free_requested" where the program lets go of a block and
    "free_completed" where the allocator may hand it out again; the first of them is the block's free), stream any
    handle. Addresses are reused, so a block is known by its address from its allocation to its free. A free of an
    address the recording never allocated (memory allocated before it began) is left out, counted and named in
    `left_out`; a second free of a block (a double free) is refused. Streams are numbered in the order they first
    allocate. Whole steps up to `most` events are kept (all with None), and `how` says so when steps were left out;
    `library` names the library that recorded it (LIBRARIES)."""
    return _converted(name, source, [[_address_event(e, f"step {k}, event {i}") for i, e in enumerate(step)]
                                     for k, step in enumerate(steps)], most, how, library)


def _converted(name: str, source: str, steps, most, how: str, library: str) -> Trace:
    """from_address_events of steps whose entries _address_event has read."""
    events, left_out = _blocks(steps)
    return _cut_trace(name, source, events, most, how, library, left_out)


# -- PyTorch: the memory snapshot ---------------------------------------------------------------------------------
class _NoGlobals(pickle.Unpickler):
    """A snapshot is dicts, lists, strings and numbers: a pickle that names any class or function (which unpickling
    would call, so a hostile file could run code) is refused instead."""

    def find_class(self, module, name):
        raise TraceError(f"the pickle names {module}.{name}: a PyTorch memory snapshot holds only dicts, lists, "
                         "strings and numbers, and loading anything else could run code, so it is not loaded")


def read_snapshot(path, data: bytes | None = None) -> dict:
    """The dict in a pickle torch.cuda.memory._dump_snapshot wrote (its bytes `data`, else read from `path` by
    read_file), unpickled without running any code."""
    try:
        got = _NoGlobals(io.BytesIO(read_file(path) if data is None else data)).load()
    except TraceError as e:
        raise TraceError(e.args[0] if e.args[0].startswith(str(path)) else f"{path}: {e}") from None
    except Exception as e:  # a truncated or foreign file: pickle raises many kinds
        raise TraceError(f"{path}: not a pickle PyTorch wrote ({type(e).__name__}: {str(e)[:200]})") from None
    return got


def low_points(events: list) -> tuple[list, int]:
    """The events with a step end ("s") after each low point of the memory in use: a free after which the memory
    in use never again falls lower, and after the memory had risen since the last step's end by at least STEP_RISE of
    the range the memory in use spans over the whole history. A training
    loop's step ends so: what a step allocates (activations, gradients) is freed by its end, and what stays (weights,
    an optimizer's state) stays for good. (Where a first step makes an optimizer's state, it may split in two.)
    The last event ends a step too. Returns (events, number of steps)."""
    use = Trace("", "", events).in_use()
    lowest, low = [0] * len(use), float("inf")
    for i in range(len(use) - 1, -1, -1):
        low = min(low, use[i])
        lowest[i] = low
    # a step rises by a good part of the trace's range before it falls back: a smaller dip (a model's set-up, one
    # layer's temporaries) is not a step's end, but part of the step around it
    rise = STEP_RISE * (max(use, default=0) - min(use, default=0))
    out, high, start, steps = [], 0, 0, 0
    for i, e in enumerate(events):
        out.append(e)
        high = max(high, use[i])
        if e[0] == "f" and use[i] == lowest[i] and high > use[i] and high - start >= rise and i < len(events) - 1:
            out.append(("s",))
            steps += 1
            high = start = use[i]
    return out + [("s",)], steps + 1


TORCH_ACTIONS = ("alloc", "free_requested", "free_completed")  # a history's entries the trace is made of


def from_torch_snapshot(snapshot, device: int | None = None, name: str = "", most: int | None = None,
                        data: bytes | None = None) -> Trace:
    """A trace from PyTorch's memory history: the pickle torch.cuda.memory._dump_snapshot(path) writes (a path), or
    the dict torch.cuda.memory._snapshot() returns, recorded with _record_memory_history(). Its "device_traces" has
    one list per device of entries {"action", "addr", "size", "stream", ...} (PyTorch's "Understanding CUDA Memory
    Usage", torch/cuda/memory.py); "alloc" and a block's free become the trace's events. The free is "free_requested",
    where the program let go of the block (its intent), not "free_completed", where the allocator may hand it out
    again: that one lags it while a stream that Tensor.record_stream named still uses the block, which is the
    allocator's business and not what the program asked for (a history with only "free_completed" uses that). Only
    PyTorch's native allocator records a history: under backend:cudaMallocAsync, _record_memory_history raises
    "cudaMallocAsync does not yet support recordHistory" (c10/cuda/CUDAMallocAsyncAllocator.cpp). The device is the
    one with the most entries unless `device` is given. A history has no step marks: steps end at its low points
    (`low_points`), and `how` says so. `data`: the file's bytes, where they were read already."""
    where = str(snapshot) if isinstance(snapshot, (str, Path)) else "the snapshot"
    snap = read_snapshot(snapshot, data) if isinstance(snapshot, (str, Path)) else snapshot
    traces = snap.get("device_traces") if isinstance(snap, dict) else None
    if not isinstance(traces, list) or not all(isinstance(t, list) for t in traces):
        raise TraceError(f"{where}: not a PyTorch memory snapshot: no \"device_traces\" list (record it with "
                         "torch.cuda.memory._record_memory_history() before torch.cuda.memory._dump_snapshot(path))")
    counts = [sum(isinstance(e, dict) and e.get("action") in TORCH_ACTIONS for e in t) for t in traces]
    if device is None:
        device = max(range(len(counts)), key=lambda d: counts[d], default=0)
        chosen = f"device {device}, the one with the most events"
    else:
        chosen = f"device {device}"
    if not 0 <= device < len(traces) or not counts[device]:
        have = ", ".join(f"{d} ({c})" for d, c in enumerate(counts)) or "none"
        raise TraceError(f"{where}: no allocation recorded on device {device} (devices, with their allocations and "
                         f"frees: {have}); was _record_memory_history() on while the program ran?")
    history = []
    for k, e in enumerate(traces[device]):
        if not isinstance(e, dict) or e.get("action") not in TORCH_ACTIONS:
            continue
        field = next((f for f in ("addr", "size") if f not in e), None)
        if field:
            raise TraceError(f"{where}: device_traces[{device}][{k}] ({e['action']}) has no \"{field}\"")
        history.append(_address_event([e["action"], e["addr"], e["size"], e.get("stream", 0)],
                                      f"{where}: device_traces[{device}][{k}]"))
    events, left_out = _blocks([history])
    events, steps = low_points(events[:-1])
    how = (f"{steps} steps, each ending where the memory in use falls to a low it never goes below again, after "
           f"rising by at least {STEP_RISE:.0%} of its range"
           if steps > 1 else "one step: the memory in use has no low point to end a step at")
    source = f"PyTorch memory snapshot {Path(where).name if where != 'the snapshot' else where}, {chosen}"
    return _cut_trace(name or (Path(where).stem if where != "the snapshot" else "PyTorch snapshot"), source,
                      events, most, how, "torch", left_out)


# -- CuPy: the allocator hook's log --------------------------------------------------------------------------------
def from_cupy_hook(text: str, name: str = "CuPy trace", source: str = "CuPy, set_allocator hook",
                   most: int | None = None) -> Trace:
    """A trace from the JSON lines notebook 08's cupy_filter.py hook prints: one line a step,
    {"step", "samples", "events": [[action, address, bytes, stream], ...]}, action "alloc" or "free"."""
    steps = []
    for n, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            got = json.loads(line)
        except ValueError as e:
            raise TraceError(f"line {n}: not JSON ({getattr(e, 'msg', e)}): '{_quoted(line)}'") from None
        except RecursionError:
            raise TraceError(f"line {n}: arrays or objects nested too deep to read (a line of the hook's log is "
                             "{\"step\", \"samples\", \"events\": [[action, address, bytes, stream], ...]})") from None
        if not isinstance(got, dict) or not isinstance(got.get("events"), list):
            raise TraceError(f"line {n}: no \"events\" list (a line of the hook's log is "
                             "{\"step\", \"samples\", \"events\": [[action, address, bytes, stream], ...]})")
        steps.append([_address_event(e, f"line {n}, event {k}") for k, e in enumerate(got["events"])])
    if not steps:
        raise TraceError("no step: the hook's log has no line with \"events\"")
    return _converted(name, source, steps, most, f"{_count(len(steps), 'step')}, one a line of the hook's log", "cupy")


# -- RMM: logging_resource_adaptor's CSV ---------------------------------------------------------------------------
ACTIONS = {"allocate": "alloc", "deallocate": "free", "free": "free"}  # RMM's log says "deallocate" (older: "free")


def from_rmm_csv(name: str, source: str, text: str, step_rows=None, most: int | None = MOST_EVENTS) -> Trace:
    """A trace from RMM's logging_resource_adaptor log (CSV: Thread,Time,Action,Pointer,Size,Stream), cut into
    steps after the rows counted in `step_rows` (the log's length at the end of each step); rows after the last
    count make one more step. Without `step_rows` (a log has no step marks) it is one step, and `how` says so."""
    reader = csv.DictReader(io.StringIO(text))
    try:
        rows = list(reader)
    except csv.Error as e:  # a field over csv's limit of 131072 characters, a stray quote: on the line after the
        raise TraceError(f"line {reader.line_num + 1}: not an RMM log ({e})") from None  # last it read whole
    if not rows:
        raise TraceError("not an RMM log: no rows under a header Thread,Time,Action,Pointer,Size,Stream")
    if not {"Action", "Pointer", "Size", "Stream"} <= set(rows[0]):
        raise TraceError(f"not an RMM log: its columns are {shown(list(rows[0]))}")
    events = []
    for n, r in enumerate(rows, 2):  # line 1 is the header
        action = ACTIONS.get((r["Action"] or "").strip(), "other")  # "allocate failure" and others: no event
        size = (r["Size"] or "").strip()
        if action == "alloc" and not WHOLE.fullmatch(size):
            raise TraceError(f"line {n}: the Size '{size}' is not a whole number of bytes")
        events.append(_address_event([action, (r["Pointer"] or "").strip(), int(size) if WHOLE.fullmatch(size) else 0,
                                      (r["Stream"] or "").strip()], f"line {n}"))
    ends = list(step_rows or [])
    how = "" if step_rows else "one step: RMM's log has no step marks"
    if not ends or ends[-1] < len(events):
        ends.append(len(events))
    steps = [events[a:b] for a, b in zip([0] + ends, ends)]
    return _converted(name, source, steps, most, how, "rmm")


# -- the command: python -m streamalloc trace IN -o OUT ------------------------------------------------------------
FORMATS = ("torch", "cupy", "rmm", "course")


def guess_format(data: bytes) -> str | None:
    """The format of a file from its first bytes: a pickle (PyTorch), JSON lines (CuPy's hook), RMM's CSV header, or
    the course's own trace; None when it is none of them."""
    if data[:1] == b"\x80":  # a pickle's protocol mark
        return "torch"
    first = next((ln.strip() for ln in data[:4096].decode("utf-8", "replace").split("\n") if ln.strip()), "")
    if first.startswith("{"):
        return "cupy"
    if {"Action", "Pointer", "Size"} <= set(w.strip() for w in first.split(",")):
        return "rmm"
    if first[:1] in ("#", "a", "f", "s"):
        return "course"
    return None


def convert(path, fmt: str | None = None, device: int | None = None, most: int | None = None) -> Trace:
    """The trace in a file of any format the command reads, checked; a TraceError says what is wrong."""
    path = Path(path)
    data = read_file(path)
    fmt = fmt or guess_format(data)
    if fmt is None:
        raise TraceError(f"{path}: cannot tell its format (a PyTorch snapshot pickle, a CuPy hook log, an RMM CSV "
                         "log or a course trace): give --format")
    if fmt == "torch":
        return from_torch_snapshot(path, device, path.stem, most, data)
    text = data.decode("utf-8", errors="replace")
    try:
        if fmt == "cupy":
            return from_cupy_hook(text, path.stem, f"CuPy allocator hook log {path.name}", most)
        if fmt == "rmm":
            return from_rmm_csv(path.stem, f"RMM logging_resource_adaptor log {path.name}", text, None, most)
    except TraceError as e:
        raise TraceError(f"{path}: {e}") from None
    trace = Trace.parse(text, where=str(path))  # within every limit: what is left to do is to cut it
    return Trace(trace.name or path.stem, trace.source or f"course trace {path.name}", cut(trace.events, most),
                 _cut_how(trace.events, most, trace.how), trace.library)


def summary(trace: Trace) -> str:
    """One line: events, steps, streams, peak, how the steps were found, which library recorded it, and what was
    left out of the recording."""
    s = trace.stats()
    return (f"{_count(s['events'], 'event')}, {_count(s['steps'], 'step')}, {_count(s['streams'], 'stream')}, "
            f"peak {mib(s['peak']):,.1f} MiB"
            + (f"; steps: {trace.how}" if trace.how else "")
            + (f"; recorded by {LIBRARIES.get(trace.library, trace.library)}" if trace.library else "")
            + (f"; left out: {trace.left_out}" if trace.left_out else ""))


# -- traces built in Python --------------------------------------------------------------------------------------
def built_to_fragment(steps: int = 10, blocks: int = 8) -> Trace:
    """A trace built to fragment a caching allocator: each step allocates `blocks` large short-lived blocks, each
    followed by a small block freed three steps later, and the large sizes grow 15% a step, so the holes the
    large blocks leave are always a little too small for the next step's. Two streams take turns."""
    events, nid, small_live = [], 0, []
    base = [8, 12, 20, 6, 16, 10, 24, 14]
    for k in range(steps):
        large = []
        for i in range(blocks):
            stream = (k + i) % 2
            events.append(("a", nid, int(base[i % len(base)] * MiB * 1.15 ** k) // 512 * 512, stream))
            large.append(nid)
            events.append(("a", nid + 1, (64 << 10) * (1 + (k * blocks + i) % 7), stream))
            small_live.append((k + 3, nid + 1))
            nid += 2
        events += [("f", b) for b in large]
        events += [("f", b) for until, b in small_live if until == k]
        small_live = [(until, b) for until, b in small_live if until != k]
        events.append(("s",))
    return Trace("built to fragment", "Python, deterministic: growing large blocks between small long-lived ones", events)


def spiky_service(steps: int = 12, spike_every: int = 6, working: int = 256 * MiB) -> Trace:
    """Lab 7's trace: a service whose steps each need about `working` bytes in blocks of mixed sizes, and whose
    every `spike_every`-th step also needs a block three times that (a rare large request)."""
    events, nid = [], 0
    parts = [3, 1, 4, 1, 5, 9, 2, 6]  # shares of the working set, allocated in this order
    for k in range(steps):
        held = []
        for i, p in enumerate(parts):
            events.append(("a", nid, working * p // sum(parts) // 512 * 512, i % 2))
            held.append(nid)
            nid += 1
            if i % 3 == 2:  # a block freed in the middle of the step, so the step's blocks overlap
                events.append(("f", held.pop(0)))
        if k % spike_every == spike_every - 1:
            events += [("a", nid, 3 * working, 0), ("f", nid)]
            nid += 1
        events += [("f", b) for b in held] + [("s",)]
    return Trace("spiky service", f"Python, deterministic: {nbytes(working)} a step, 3x that every {spike_every} steps",
                 events)
