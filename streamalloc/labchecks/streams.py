"""What a function's straight-line code puts on which stream, and what the GPU must finish before what: the
reading that labs 5 and 6 use to say whether one operation is ordered after another.

    order = Order(inline(src, "importer"))
    read = order.launch("check_values")                 # the first launch of that kernel (an Op), or None
    order.after(order.first("cudaFreeAsync", ptr="p", start=read.pos), read)   # True, False or None

An operation is ordered after another when it is on the same stream after it, or on a stream that waits
(cudaStreamWaitEvent) for an event recorded after it, or when the host waited for it (cudaStreamSynchronize,
cudaEventSynchronize, cudaDeviceSynchronize) before enqueueing it. Streams and events are followed through
the names given them (`cudaStream_t a = s;`). Where an argument is not a name the reading can follow (an array
element, a dereference, a call), `after` answers None: the reading cannot tell, and the run decides. Loops and
branches are read as written, once, in program order (the labs' functions have none around these calls).
"""
from __future__ import annotations

import dataclasses
import re

from .. import cppsource

DEFAULT = "the default stream"
RECORDS = ("cudaEventRecord", "cudaEventRecordWithFlags")
ENQUEUED = {  # API: (index of the stream argument (-1: last), index of the pointer argument or None)
    "cudaMallocAsync": (-1, 0), "cudaMallocFromPoolAsync": (-1, 0), "cudaFreeAsync": (1, 0),
    "cudaMemsetAsync": (3, 0), "cudaMemcpyAsync": (4, 0), "cudaGraphLaunch": (1, 0), "cudaGraphUpload": (1, 0),
    "cudaStreamBeginCapture": (0, None), "cudaStreamEndCapture": (0, None),
}
HOST_WAITS = ("cudaStreamSynchronize", "cudaEventSynchronize", "cudaDeviceSynchronize")
NAME = re.compile(r"[A-Za-z_]\w*")


@dataclasses.dataclass
class Op:
    what: str  # the API call, or the kernel's name for a launch
    pos: int  # its offset in the code
    stream: str | None = None  # canonical name; None for a host call; "?" where the reading cannot tell
    event: str | None = None  # for records, waits and cudaEventSynchronize: canonical name or "?"
    ptr: str | None = None  # the pointer argument, canonical, for allocations, frees, memsets, launches' first
    args: tuple = ()  # the arguments as written
    written: str = ""  # the stream (or event) argument as written, for messages


def _strip(arg: str) -> str:
    arg = re.sub(r"^\(\s*(?:cudaStream_t|cudaEvent_t|void\s*\*\*?|\w+\s*\*+)\s*\)\s*", "", (arg or "").strip())
    arg = re.sub(r"^(?:reinterpret_cast|static_cast)<[^>]*>\s*\((.*)\)$", r"\1", arg).strip()
    while arg.startswith("(") and arg.endswith(")"):
        arg = arg[1:-1].strip()
    return arg.lstrip("&").strip()


class Order:
    """The stream work of one function, in program order, with what each operation is ordered after."""

    def __init__(self, code: str):
        self.code = cppsource.strip_comments(code)
        self.names = self._name_groups()
        self.blocking = self.blocking_streams()
        self.ops: list[Op] = []
        self.before: list[set[int]] = []
        self._read()

    # -- names ----------------------------------------------------------------------------------------------
    def _name_groups(self) -> dict[str, str]:
        """Each name assigned from another plain name (`cudaStream_t a = s;`, `a = s;`) maps to the first one."""
        root: dict[str, str] = {}
        for m in re.finditer(r"\b(\w+)\s*=\s*\(?\s*(\w+)\s*\)?\s*[;,)]", self.code):
            a, b = m[1], m[2]
            if b.isdigit() or b in ("nullptr", "NULL", "true", "false"):
                continue
            root.setdefault(a, root.get(b, b))
        return root

    def canonical(self, arg: str, stream: bool = False) -> str:
        """The name a stream, event or pointer argument stands for; DEFAULT for the legacy default stream (a
        stream argument left out, 0, nullptr); "?" where the reading cannot tell (not a plain name)."""
        a = _strip(arg)
        if stream and a in ("", "0", "NULL", "nullptr", "cudaStreamLegacy"):
            return "?" if self.blocking else DEFAULT  # the legacy stream waits for blocking streams
        if not NAME.fullmatch(a):
            return "?"
        return self.names.get(a, a)

    # -- reading --------------------------------------------------------------------------------------------
    def _read(self):
        code = self.code
        apis = "|".join((*ENQUEUED, *RECORDS, "cudaStreamWaitEvent", *HOST_WAITS, "cudaFree"))
        for m in re.finditer(rf"\b(?P<api>{apis})\s*\(|\b(?P<kernel>\w+)\s*<<<", code):
            if m["kernel"]:
                end = code.find(">>>", m.end())
                config = cppsource.split_arguments(code[m.end():end])
                paren = code.find("(", end)
                args = tuple(cppsource.call_arguments(code, paren)) if paren >= 0 else ()
                written = config[3] if len(config) > 3 else ""
                self._add(Op(m["kernel"], m.start(), self.canonical(written, True),
                             ptr=self.canonical(args[0]) if args else None, args=args, written=written or "0"))
                continue
            api, args = m["api"], tuple(cppsource.call_arguments(code, m.start()))
            if api in ENQUEUED:
                s, p = ENQUEUED[api]
                written = (args[s] if args and (s < 0 or len(args) > s) else "")
                self._add(Op(api, m.start(), self.canonical(written, True),
                             ptr=self.canonical(args[p]) if p is not None and len(args) > p else None,
                             args=args, written=written or "0"))
            elif api in RECORDS:
                written = args[1] if len(args) > 1 else ""
                self._add(Op("cudaEventRecord", m.start(), self.canonical(written, True),
                             event=self.canonical(args[0]) if args else "?", args=args, written=written or "0"))
            elif api == "cudaStreamWaitEvent":
                written = args[0] if args else ""
                self._add(Op(api, m.start(), self.canonical(written, True),
                             event=self.canonical(args[1]) if len(args) > 1 else "?", args=args, written=written))
            else:  # host calls: the synchronizations, and cudaFree (which the API says may synchronize)
                op = Op(api, m.start(), None, args=args)
                if api == "cudaStreamSynchronize":
                    op.written = args[0] if args else ""
                    op.stream = self.canonical(op.written, True)
                elif api == "cudaEventSynchronize":
                    op.event = self.canonical(args[0]) if args else "?"
                elif api == "cudaFree":
                    op.ptr = self.canonical(args[0]) if args else "?"
                self._add(op)

    def _add(self, op: Op):
        k = len(self.ops)
        b: set[int] = set(self._host_waited())
        if op.stream is not None and op.stream != "?":
            j = self._last(lambda o: o.stream == op.stream and o.what not in HOST_WAITS)
            if j is not None:
                b |= self.before[j] | {j}
        if op.what == "cudaStreamWaitEvent" and op.event != "?":
            j = self._last(lambda o: o.what == "cudaEventRecord" and o.event == op.event)
            if j is not None:
                b |= self.before[j] | {j}
        self.ops.append(op)
        self.before.append(b)
        if op.what in HOST_WAITS:  # what the host waited for: everything later is after it
            self._waited = self._host_waited() | self._waits_for(k)

    def _last(self, test) -> int | None:
        return next((j for j in range(len(self.ops) - 1, -1, -1) if test(self.ops[j])), None)

    def _host_waited(self) -> set[int]:
        return getattr(self, "_waited", set())

    def _waits_for(self, k: int) -> set[int]:
        op, done = self.ops[k], set()
        if op.what == "cudaDeviceSynchronize":
            done = set(range(k))
        elif op.what == "cudaStreamSynchronize" and op.stream != "?":
            j = self._last_before(k, lambda o: o.stream == op.stream and o.what not in HOST_WAITS)
            done = set() if j is None else self.before[j] | {j}
        elif op.what == "cudaEventSynchronize" and op.event != "?":
            j = self._last_before(k, lambda o: o.what == "cudaEventRecord" and o.event == op.event)
            done = set() if j is None else self.before[j] | {j}
        return {j for j in done if self.ops[j].what not in HOST_WAITS}

    def _last_before(self, k, test):
        return next((j for j in range(k - 1, -1, -1) if test(self.ops[j])), None)

    # -- questions --------------------------------------------------------------------------------------------
    def find(self, what: str, ptr: str | None = None, event: str | None = None, start: int = -1,
             end: int | None = None) -> list[Op]:
        """The operations `what` (an API, or a kernel's name) between offsets start and end, of that pointer or
        event (canonical), in program order."""
        return [o for o in self.ops if o.what == what and start < o.pos and (end is None or o.pos < end)
                and (ptr is None or o.ptr == ptr) and (event is None or o.event == event)]

    def first(self, what: str, **kw) -> Op | None:
        found = self.find(what, **kw)
        return found[0] if found else None

    def launch(self, kernel: str) -> Op | None:
        return self.first(kernel)

    def unknown_between(self, a: int, b: int) -> list[Op]:
        """Operations between the offsets whose stream or event the reading cannot tell."""
        return [o for o in self.ops if a <= o.pos <= b and "?" in (o.stream, o.event)]

    def after(self, later: Op | None, earlier: Op | None) -> bool | None:
        """Is `later` ordered after `earlier` on the GPU (or by the host's waits)? None if the reading cannot
        tell: an operation between them, or one of them, on a stream or with an event it cannot follow."""
        if later is None or earlier is None:
            return False
        if earlier.what in HOST_WAITS:  # the host waited there: all it enqueues later comes after
            return earlier.pos < later.pos
        k, j = self.ops.index(later), self.ops.index(earlier)
        if j in self.before[k]:
            return True
        if "?" in (later.stream, earlier.stream) or self.unknown_between(min(earlier.pos, later.pos), later.pos):
            return None
        return False

    def host_waited(self, op: Op, pos: int) -> bool:
        """Has the host, by offset `pos`, waited for `op` to finish (a synchronization that covers it)?"""
        k = self.ops.index(op)
        return any(k in self._waits_for(j) for j, o in enumerate(self.ops) if o.what in HOST_WAITS and o.pos < pos)

    def blocking_streams(self) -> bool:
        """Does the code create a stream that synchronizes with the legacy default stream (cudaStreamCreate, or
        flags other than cudaStreamNonBlocking)? Then work on the default stream is ordered in ways not read here."""
        if cppsource.calls(self.code, "cudaStreamCreate"):
            return True
        return any("cudaStreamNonBlocking" not in " ".join(cppsource.call_arguments(self.code, p)[1:2])
                   for p in cppsource.calls(self.code, "cudaStreamCreateWithFlags"))


CANNOT_TELL = "cannot tell from the source: the run decides"


def cannot_tell(report, what: str, why: str = ""):
    """Say that the reading cannot tell `what`: never ok; the run's findings judge it. Report.cannot_tell gives it
    its own mark where checks.py has one; else it is a note with the same words."""
    mark = getattr(report, "cannot_tell", None)
    if mark is not None:
        mark(what, why)
    else:
        report.note(f"{what}: {CANNOT_TELL}" + (f". {why}" if why else ""))
