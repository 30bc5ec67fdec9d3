"""What a program did with CUDA: the record of its calls (runtime and driver), and the order they put its GPU work in.

    res = lesson.run("race.cu", args, trace=True)     # built with -cudart shared, run with the recorder preloaded
    rec = res.calls                                   # a Calls (None where nothing could be recorded)
    rec.buffers                                       # every stream-ordered allocation: its allocation, uses, free
    rec.problems()                                    # uses not ordered after their allocation or before their free
    rec.before(a, b)                                  # is operation a done before operation b starts?
    rec.launches("consume"), rec.named("cudaFreeAsync")

The recorder (include/calltrace.cpp) writes one JSON object per CUDA call, runtime or driver (a driver call under its
runtime twin's name, streamalloc/ordering.py), to a file the course creates (never the program's stdout). Live, each
line carries a tag keyed by a secret of the run that the program is never handed, and each process's lines are
numbered without a gap up to its "end": `read` finds a line the recorder did not write, or one taken out (`forged`). From it this module builds the happens-before order of the GPU's work, as the CUDA Programming
Guide defines it (§15.3 API Fundamentals; the runtime API's stream and event semantics): work on one stream runs in
the order it was enqueued; cudaStreamWaitEvent orders a stream after the event's most recent record made before the
wait was called; a host wait (cudaStreamSynchronize, cudaEventSynchronize, cudaDeviceSynchronize, a cudaEventQuery
or cudaStreamQuery that answered cudaSuccess, cudaFree of memory from cudaMalloc) orders everything that thread
enqueues afterwards; the legacy default stream waits for, and is waited for by, every blocking stream; an IPC
event links the two processes that share it. Each operation carries a vector clock (for every stream, the last
operation on it that must finish first), so "is a before b" is one look-up.

How the program is written (macros, members, lambdas, helpers, the C++ overloads) changes nothing here: every one
of those reaches the runtime through the same calls.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import secrets
import shutil
import struct
import tempfile
from pathlib import Path

from . import cuda, ordering

FLAGS = ["-cudart", "shared"]  # the recorder interposes the shared runtime's symbols
SOURCE = Path(__file__).parent / "include" / "calltrace.cpp"
LEGACY = ("0x0", "0x1")  # the legacy default stream: 0 and cudaStreamLegacy
PER_THREAD = "0x2"  # cudaStreamPerThread
NON_BLOCKING = 1  # cudaStreamNonBlocking
ENQUEUED = set(ordering.recorded(enqueues="stream"))  # GPU work on the stream it names
ALLOC_NODE, FREE_NODE, KERNEL_NODE = 10, 11, 0  # cudaGraphNodeTypeMemAlloc, MemFree, Kernel
SYNCS = ordering.recorded(waits="always")
QUERIES = ordering.recorded(waits="on success")  # a host wait where they answered cudaSuccess (the work was done)
HOST_TO_DEVICE, DEVICE_TO_HOST, DEVICE_TO_DEVICE = 1, 2, 3  # cudaMemcpyKind; device to device makes the host wait
# for nothing, and cudaMemcpyDefault (4: the driver's cuMemcpy) may be either


@dataclasses.dataclass(eq=False)
class Op:
    """One piece of GPU work the program enqueued (or a host call that stands for one)."""

    call: dict  # the recorded line
    stream: tuple  # (pid, stream) or (pid, "per-thread", tid)
    index: int  # its position on its stream, from 1
    clock: dict  # stream -> the last index on it that is done before this op starts (itself included)
    captured: bool = False  # enqueued into a stream capture: part of a graph, not run here

    @property
    def what(self) -> str:
        c = self.call
        return kernel_name(c.get("kernel", "?")) if c["call"] == "cudaLaunchKernel" else c["call"]

    @property
    def section(self) -> str:
        return self.call.get("in", "")

    def pointers(self) -> list[int]:
        c = self.call
        values = c.get("args") or [] if c["call"] == "cudaLaunchKernel" else [c.get("dst"), c.get("src")]
        return [int(v, 16) for v in values if v]


@dataclasses.dataclass(eq=False)
class Buffer:
    """One allocation: where it came from, what used it, and its free."""

    ptr: int
    size: int
    alloc: dict  # the recorded call
    alloc_op: Op | None  # None: a host call (cudaMalloc, an imported pointer)
    uses: list = dataclasses.field(default_factory=list)  # Ops
    free: dict | None = None
    free_op: Op | None = None  # cudaFreeAsync
    free_clock: dict | None = None  # a host free: what its thread had waited for (cudaFree)
    late_uses: list = dataclasses.field(default_factory=list)  # uses enqueued after the free call
    key: int | None = None  # the export data's key, for an exported or imported pointer

    @property
    def stream_ordered(self) -> bool:
        return self.alloc["call"] == "cudaMallocAsync"


@dataclasses.dataclass
class Problem:
    buffer: Buffer
    use: Op
    kind: str  # "before its allocation", "after its free", "enqueued after its free"


def kernel_name(mangled: str) -> str:
    """A kernel's name as written, from the symbol the driver gives (_Z7consumePKiPi -> consume,
    _ZN6course4spinEy -> course::spin); the symbol itself where it is not mangled."""
    if not mangled.startswith("_Z"):
        return mangled
    s, parts = mangled[2:], []
    nested = s.startswith("N")
    s = s[1:] if nested else s
    while s and s[0].isdigit():
        n = 0
        while s and s[0].isdigit():
            n, s = n * 10 + int(s[0]), s[1:]
        parts.append(s[:n])
        s = s[n:]
        if not nested:
            break
    return "::".join(parts) or mangled


def host_waits(lines) -> list[str]:
    """The calls among `lines` that made the host wait for the GPU: a synchronize, a query that answered cudaSuccess
    (a polling loop), a cudaMemcpy host to device or device to host that succeeded."""
    return [c["call"] for c in lines if c["call"] in SYNCS or (c["call"] in QUERIES and c["ret"] == 0)
            or (c["call"] == "cudaMemcpy" and c["ret"] == 0 and c.get("kind") in (HOST_TO_DEVICE, DEVICE_TO_HOST))]


def merge(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        if out.get(k, 0) < v:
            out[k] = v
    return out


def parse(text: str) -> list[dict]:
    """The recorded lines, in the order they happened (by the monotonic clock across processes), as they are; a line
    without the recorder's head is left out (verify says so)."""
    return verify(text, None)[0]


HEAD = {"seq": int, "t": int, "pid": int, "tid": int, "call": str, "ret": int}  # first on every line calltrace.cpp writes


def malformed(line) -> str:
    """What a JSON line lacks of the head the recorder writes on every line ("" for nothing)."""
    if not isinstance(line, dict):
        return "not a JSON object"
    wrong = [k for k, kind in HEAD.items() if type(line.get(k)) is not kind]
    return f"no {' or '.join(repr(k) for k in wrong)} of the right type" if wrong else ""


def verify(text: str, key: str | None, cut_short: bool = False) -> tuple[list[dict], list[str]]:
    """The record's lines in the order they happened, and what shows that something other than the recorder wrote into
    it: live (`key`, the run's secret), a line without its valid tag, a line repeated, a line taken out (each process
    numbers its lines 0, 1, ... and ends with "end"; a program cut short by a crash or a timeout may end without it).
    A record from a recording or a test (`key` None) is taken as it is: it did not come from a program run here. A line
    without the recorder's head (`malformed`) is left out and named in either case: nothing reads a record by it."""
    lines, forged = [], []
    rows = (text or "").splitlines()
    for i, row in enumerate(rows):
        m = TAGGED.match(row)
        try:
            line = json.loads(row)
        except ValueError:
            if key is None or (i == len(rows) - 1 and not text.endswith("\n")):
                continue  # a line cut short by a crash
            forged.append(f"a line that is not the recorder's JSON: {row[:80]!r}")
            continue
        if key is not None and not (m and tag(key, m["body"]) == m["tag"]):
            forged.append(f"a line without the run's tag: {row[:80]!r}")
            continue
        if malformed(line):
            forged.append(f"a line that is not the recorder's ({malformed(line)}): {row[:80]!r}")
            continue
        lines.append(line)
    if key is not None:
        forged += _numbering(lines, cut_short)
    return sorted(lines, key=lambda c: (c["t"], c["pid"], c["seq"])), forged


def _numbering(lines: list[dict], cut_short: bool) -> list[str]:
    """Each process's lines numbered 0, 1, ... without a gap or a repeat, up to its "end" (unless it was cut short)."""
    out = []
    for pid in dict.fromkeys(c["pid"] for c in lines):
        mine = sorted((c for c in lines if c["pid"] == pid), key=lambda c: c["seq"])
        seqs = [c["seq"] for c in mine]
        if len(set(seqs)) != len(seqs):
            out.append(f"process {pid}: a line written twice")
        elif seqs != list(range(len(seqs))):
            out.append(f"process {pid}: {seqs[-1] + 1 - len(seqs)} of its lines taken out")
        elif mine[-1]["call"] != ordering.END and not cut_short:
            out.append(f"process {pid}: its last lines taken out (the record does not reach its end)")
    return out


TAGGED = re.compile(r'^(?P<body>.*),"tag":"(?P<tag>[0-9a-f]{16})"\}$')
MASK = 2**64 - 1


def tag(key: str, body: str) -> str:
    """A line's tag: SipHash-2-4 of its text under the run's key (32 hex digits), as the recorder computes it."""
    return f"{siphash(bytes.fromhex(key), body.encode()):016x}"


def siphash(key: bytes, data: bytes) -> int:
    """SipHash-2-4 (Aumasson and Bernstein) of `data` under a 16-byte key."""
    k0, k1 = struct.unpack("<QQ", key)
    v = [k0 ^ 0x736f6d6570736575, k1 ^ 0x646f72616e646f6d, k0 ^ 0x6c7967656e657261, k1 ^ 0x7465646279746573]

    def rounds(n):
        v0, v1, v2, v3 = v
        for _ in range(n):
            v0 = (v0 + v1) & MASK; v1 = ((v1 << 13) | (v1 >> 51)) & MASK; v1 ^= v0; v0 = ((v0 << 32) | (v0 >> 32)) & MASK
            v2 = (v2 + v3) & MASK; v3 = ((v3 << 16) | (v3 >> 48)) & MASK; v3 ^= v2
            v0 = (v0 + v3) & MASK; v3 = ((v3 << 21) | (v3 >> 43)) & MASK; v3 ^= v0
            v2 = (v2 + v1) & MASK; v1 = ((v1 << 17) | (v1 >> 47)) & MASK; v1 ^= v2; v2 = ((v2 << 32) | (v2 >> 32)) & MASK
        v[:] = v0, v1, v2, v3

    whole = len(data) - len(data) % 8
    words = list(struct.unpack(f"<{whole // 8}Q", data[:whole]))
    words.append(int.from_bytes(data[whole:], "little") | (len(data) & 0xFF) << 56)
    for w in words:
        v[3] ^= w
        rounds(2)
        v[0] ^= w
    v[2] ^= 0xFF
    rounds(4)
    return v[0] ^ v[1] ^ v[2] ^ v[3]


def read(text: str, key: str | None = None, cut_short: bool = False) -> "Calls":
    """The record of a run as Calls; `forged` says what shows that it is not the recorder's alone (see verify)."""
    lines, forged = verify(text, key, cut_short)
    rec = Calls(lines)
    rec.forged, rec.cut_short = forged + rec.forged, cut_short
    return rec


class Calls:
    """The record of one run (one process, or two that share IPC events), and its happens-before order."""

    def __init__(self, lines: list[dict]):
        self.lines = lines
        self.cut_short = False  # the program crashed or hung: the record stops there (Report.trace sets it)
        self.forged: list[str] = []  # what shows that something other than the recorder wrote into it (read())
        self.ops: list[Op] = []
        self.buffers: list[Buffer] = []
        self.graphs: dict[str, dict] = {}  # exec -> the graph's nodes and edges, as instantiated
        self._streams: dict = {}  # stream -> [count, clock of its last op, blocking, pid]
        self._pending: dict = {}  # stream -> clock its next op must merge (waits since its last op)
        self._host: dict = {}  # (pid, tid) -> clock of what that thread has waited for
        self._events: dict = {}  # event key -> clock of its most recent record
        self._event_keys: dict = {}  # (pid, event) -> key shared by the processes (IPC)
        self._capturing: dict = {}  # stream -> the stream whose capture it belongs to
        self._live: dict = {}  # pid -> live Buffers
        self._exported: dict = {}  # export key -> Buffer
        section: dict = {}  # pid -> the harness's mark (course::section) the calls come under
        for c in lines:
            if c["call"] == "section":
                section[c["pid"]] = c.get("name", "")
            c["in"] = section.get(c["pid"], "")
            try:
                self._step(c)
            except (KeyError, TypeError, ValueError) as e:  # a field of its call missing, or of another type
                self.forged.append(f"a {c['call']} line that is not the recorder's ({type(e).__name__}: {e})")

    # -- building ---------------------------------------------------------------------------------------------
    def _stream(self, c: dict, s: str | None = None) -> tuple:
        s = c.get("stream", "0x0") if s is None else s
        if s in LEGACY:
            return (c["pid"], "legacy")
        if s == PER_THREAD:
            return (c["pid"], "per-thread", c["tid"])
        return (c["pid"], s)

    def _state(self, key):
        if key not in self._streams:
            legacy = key[1] == "legacy"
            self._streams[key] = [0, {}, not legacy and key[1] != "per-thread", key[0]]
        return self._streams[key]

    def _event(self, c: dict) -> tuple:
        return self._event_keys.get((c["pid"], c["event"]), (c["pid"], c["event"]))

    def _enqueue(self, c: dict, stream=None) -> Op:
        key = self._stream(c) if stream is None else stream
        st = self._state(key)
        clock = merge(merge(st[1], self._pending.pop(key, {})), self._host.get((c["pid"], c["tid"]), {}))
        if key[1] == "legacy":  # waits for every blocking stream of its process
            for k, other in self._streams.items():
                if other[2] and other[3] == key[0] and other[0]:
                    clock = merge(clock, other[1])
        elif st[2]:  # a blocking stream waits for the legacy stream
            legacy = self._streams.get((key[0], "legacy"))
            if legacy and legacy[0]:
                clock = merge(clock, legacy[1])
        st[0] += 1
        clock[key] = st[0]
        st[1] = clock
        op = Op(c, key, st[0], clock, captured=key in self._capturing)
        self.ops.append(op)
        return op

    def _host_waits(self, c: dict, clock: dict):
        who = (c["pid"], c["tid"])
        self._host[who] = merge(self._host.get(who, {}), clock)

    def _device_clock(self, pid) -> dict:
        out: dict = {}
        for key, st in self._streams.items():
            if st[3] == pid and key not in self._capturing:
                out = merge(out, st[1])
        return out

    def _step(self, c: dict):
        call, ok = c["call"], c["ret"] == 0
        if call == "cudaStreamCreate" and ok:
            self._streams[self._stream(c)] = [0, {}, not (c.get("flags", 0) & NON_BLOCKING), c["pid"]]
        elif call in ("cudaIpcGetEventHandle", "cudaIpcOpenEventHandle") and ok:
            self._event_keys[(c["pid"], c["event"])] = ("ipc", c["handle"])
            if (c["pid"], c["event"]) in self._events:
                self._events[("ipc", c["handle"])] = self._events.pop((c["pid"], c["event"]))
        elif call == "cudaStreamBeginCapture" and ok:
            self._capturing[self._stream(c)] = self._stream(c)
        elif call == "cudaStreamEndCapture":
            origin = self._stream(c)
            for k in [k for k, o in self._capturing.items() if o == origin]:
                del self._capturing[k]
        elif call == "cudaStreamWaitEvent" and ok:
            key, recorded = self._stream(c), self._events.get(self._event(c))
            if recorded is not None:
                if recorded.get("capture") and key not in self._capturing:
                    self._capturing[key] = recorded["capture"]  # a stream joins the capture (fork)
                self._pending[key] = merge(self._pending.get(key, {}), recorded["clock"])
        elif call in SYNCS + QUERIES and ok:  # what the host waited for (a query: where it answered cudaSuccess)
            on = ordering.RULE[call].waits_for
            if on == "device":
                self._host_waits(c, self._device_clock(c["pid"]))
            elif on == "stream":
                self._host_waits(c, self._state(self._stream(c))[1])
            elif self._events.get(self._event(c)) is not None:
                self._host_waits(c, self._events[self._event(c)]["clock"])
        elif call == "cudaMemcpy":  # on the legacy stream (after every blocking stream, not a non-blocking one)
            op = self._enqueue(c, (c["pid"], "legacy"))
            kind = c.get("kind")
            # the host waits (CUDA Runtime API, "API synchronization behavior"): device to host, for the copy and what
            # it was ordered after ("will return only once the copy has completed"); host to device, for what it was
            # ordered after ("a stream sync is performed before the copy is initiated"; from pageable memory the DMA
            # may still run). Device to device, or cudaMemcpyDefault (whose direction the record does not give), and a
            # copy that failed: for nothing
            if ok and kind in (HOST_TO_DEVICE, DEVICE_TO_HOST):
                self._host_waits(c, op.clock if kind == DEVICE_TO_HOST else
                                 {k: v - (k == op.stream) for k, v in op.clock.items()})
            self._use(op)
        elif call == "cudaMemset":
            self._use(self._enqueue(c, (c["pid"], "legacy")))
        elif call in ENQUEUED and ok:
            op = self._enqueue(c)
            if call == "cudaEventRecord":
                self._events[self._event(c)] = {"clock": op.clock, "capture": self._capturing.get(op.stream)}
            elif call == "cudaMallocAsync" and not op.captured:
                self._allocated(c, op)
            elif call == "cudaFreeAsync" and not op.captured:
                self._freed(c, op)
            elif not op.captured:
                self._use(op)
        elif call == "cudaMalloc" and ok:
            self._allocated(c, None)
        elif call == "cudaMemPoolImportPointer" and ok:
            self._allocated(c, None)
            b = self._live[c["pid"]][-1]
            b.key = c.get("key")
            if b.key in self._exported:  # the import maps the whole exported allocation: a use inside it is a use
                b.size = self._exported[b.key].size
        elif call == "cudaMemPoolExportPointer" and ok:
            b = self._find(c["pid"], int(c["ptr"], 16))
            if b is not None and c.get("key") is not None:
                b.key = c["key"]
                self._exported[c["key"]] = b
        elif call == "cudaFree" and ok:
            b = self._find(c["pid"], int(c["ptr"], 16))
            # cudaFree of cudaMalloc memory waits for the device; of pool memory (stream-ordered or imported), not:
            # "the driver assumes that all accesses to the allocation are complete" (§15.3 API Fundamentals)
            if b is not None and b.alloc["call"] == "cudaMalloc":
                self._host_waits(c, self._device_clock(c["pid"]))
            self._freed(c, None)
        elif call == "cudaGraphInstantiate" and ok:
            self.graphs[c["exec"]] = c.get("nodes") or {}

    def _allocated(self, c: dict, op: Op | None):
        self._live.setdefault(c["pid"], []).append(
            Buffer(int(c["ptr"], 16), c.get("size", 0), c, op))

    def _find(self, pid, ptr: int, live=True) -> Buffer | None:
        pool = self._live.get(pid, []) if live else [b for b in self.buffers if b.alloc["pid"] == pid]
        for b in reversed(pool):
            if b.ptr <= ptr < b.ptr + max(b.size, 1):
                return b
        return None

    def _freed(self, c: dict, op: Op | None):
        b = self._find(c["pid"], int(c["ptr"], 16))
        if b is None or b.ptr != int(c["ptr"], 16):
            return
        self._live[c["pid"]].remove(b)
        b.free, b.free_op = c, op
        if op is None:
            b.free_clock = dict(self._host.get((c["pid"], c["tid"]), {}))
        self.buffers.append(b)

    def _use(self, op: Op):
        for ptr in op.pointers():
            b = self._find(op.call["pid"], ptr)
            if b is not None:
                b.uses.append(op)
                continue
            b = self._find(op.call["pid"], ptr, live=False)
            if b is not None:
                b.late_uses.append(op)

    # -- questions --------------------------------------------------------------------------------------------
    @property
    def all_buffers(self) -> list[Buffer]:
        """Freed buffers, then those still live at the end."""
        return self.buffers + [b for live in self._live.values() for b in live]

    def unfreed(self, stream_ordered=True) -> list[Buffer]:
        """Buffers never freed; none where the program was cut short (it never got to its frees)."""
        if self.cut_short:
            return []
        return [b for live in self._live.values() for b in live if b.stream_ordered or not stream_ordered]

    @staticmethod
    def before(a: Op, b: Op) -> bool:
        """Is a done before b starts, by the rules above?"""
        return b.clock.get(a.stream, 0) >= a.index

    def done_before_free(self, use: Op, b: Buffer) -> bool:
        if b.free_op is not None:
            return self.before(use, b.free_op)
        return b.free_clock is not None and b.free_clock.get(use.stream, 0) >= use.index

    def problems(self) -> list[Problem]:
        """Every use of a buffer not ordered after its allocation, or not done before its free, or enqueued after
        its free; for an exported buffer, the importer's uses count against the exporter's free too."""
        out = []
        for b in self.all_buffers:
            uses = list(b.uses)
            if b.key is not None and b.stream_ordered:  # the exporter's buffer: the importers' uses too
                uses += [u for o in self.all_buffers if o is not b and o.key == b.key for u in o.uses]
            for u in uses:
                if u.captured:
                    continue
                if b.alloc_op is not None and not self.before(b.alloc_op, u):  # an importer's use too (§15.11.3)
                    out.append(Problem(b, u, "before its allocation"))
                if b.free is not None and not self.done_before_free(u, b):
                    out.append(Problem(b, u, "after its free"))
            out += [Problem(b, u, "enqueued after its free") for u in b.late_uses if not u.captured]
        return out

    def named(self, call: str, section: str | None = None, pid=None) -> list[dict]:
        """The recorded calls of one API (in `section`, the harness's mark, if given; in one process, if given)."""
        return [c for c in self.lines if c["call"] == call and (section is None or c["in"] == section)
                and (pid is None or c["pid"] == pid)]

    def launches(self, kernel: str, section: str | None = None) -> list[Op]:
        return [op for op in self.ops if op.call["call"] == "cudaLaunchKernel" and op.what == kernel
                and (section is None or op.section == section)]

    def op_of(self, call: dict) -> Op | None:
        return next((op for op in self.ops if op.call is call), None)

    @property
    def pids(self) -> list[int]:
        return list(dict.fromkeys(c["pid"] for c in self.lines))

    @property
    def kernels_named(self) -> bool:
        """Did the recorder learn the kernels' names and arguments (a CUDA 12.4 driver or newer)?"""
        launches = [op for op in self.ops if op.call["call"] == "cudaLaunchKernel"]
        return bool(launches) and all(op.what != "?" and op.call.get("args") is not None for op in launches)


# -- a graph's own order ------------------------------------------------------------------------------------------
class Graph:
    """The nodes and edges of an instantiated graph, as the recorder read them (cudaGraphGetNodes, GetEdges)."""

    def __init__(self, dump: dict):
        self.nodes = {n["id"]: n for n in dump.get("nodes") or []}
        self.after: dict = {k: set() for k in self.nodes}  # node -> nodes that must finish first (transitively)
        preds: dict = {k: set() for k in self.nodes}
        for a, b in dump.get("edges") or []:
            preds.setdefault(b, set()).add(a)
        done: dict = {}

        def ancestors(k, seen=()):
            if k in done:
                return done[k]
            out = set()
            for p in preds.get(k, ()):
                if p not in seen:
                    out |= {p} | ancestors(p, (*seen, k))
            done[k] = out
            return out
        for k in self.nodes:
            self.after[k] = ancestors(k)

    def of_type(self, t: int) -> list[dict]:
        return [n for n in self.nodes.values() if n["type"] == t]

    def kernels(self, name: str | None = None) -> list[dict]:
        return [n for n in self.of_type(KERNEL_NODE) if name is None or kernel_name(n.get("kernel", "?")) == name]

    def before(self, a: dict, b: dict) -> bool:
        return a["id"] in self.after[b["id"]]

    def uses(self, alloc: dict) -> list[dict]:
        lo, hi = int(alloc["ptr"], 16), int(alloc["ptr"], 16) + max(alloc.get("size", 1), 1)
        return [n for n in self.kernels() if any(v and lo <= int(v, 16) < hi for v in n.get("args") or [])]

    def problems(self) -> list[tuple[str, dict, dict]]:
        """Kernels that use a graph allocation without being ordered after its node, or not before its free node."""
        out = []
        frees = self.of_type(FREE_NODE)
        for a in self.of_type(ALLOC_NODE):
            free = next((f for f in frees if f.get("ptr") == a.get("ptr")), None)
            for k in self.uses(a):
                if not self.before(a, k):
                    out.append(("before its allocation", a, k))
                if free is not None and not self.before(k, free):
                    out.append(("after its free", a, k))
        return out


# -- recording a run ----------------------------------------------------------------------------------------------
def recorder(out_dir: Path) -> Path:
    """The recorder library, built once per content and nvcc (streamalloc.cuda builds it like a program)."""
    return cuda.build_library(SOURCE, out_dir=out_dir)


class Channel:
    """How a record reaches the check and not the program: a file in a private folder, made here, and a random key;
    the recorder takes both out of the program's environment before its code runs (calltrace.cpp). `env` is the
    environment of the run; `text()` what was recorded; `close()` removes the folder."""

    def __init__(self, library: Path, runtime_dir: str | None):
        self.folder = Path(tempfile.mkdtemp(prefix="calls-"))  # mode 0700
        self.path = self.folder / "calls.jsonl"
        self.path.touch(mode=0o600)
        self.key = secrets.token_hex(16)
        env = dict(os.environ)
        env["LD_PRELOAD"] = " ".join(filter(None, [str(library), env.get("LD_PRELOAD", "")]))
        env.update(STREAMALLOC_CALLS=str(self.path), STREAMALLOC_CALLS_KEY=self.key)
        env.pop("STREAMALLOC_CALLS_SEQ", None)
        if runtime_dir:
            env["LD_LIBRARY_PATH"] = ":".join(filter(None, [runtime_dir, env.get("LD_LIBRARY_PATH", "")]))
        self.env = env

    def text(self) -> str:
        return self.path.read_text() if self.path.is_file() else ""

    def close(self):
        shutil.rmtree(self.folder, ignore_errors=True)
