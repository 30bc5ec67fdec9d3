"""What a lab's code puts on which stream, and what the GPU must finish before what: the one reading of stream order
that every lab's check uses to explain (its verdict on the order comes from the record of the calls, calls.py).

    order = Order(inline(src, "importer"))              # a function's straight-line code
    read = order.launch("check_values")                 # the first launch of that kernel (an Op), or None
    order.after(order.first("cudaFreeAsync", ptr="p", start=read.pos), read)   # True, False or None
    order = Order(inline(src, "main"), loop_with="cudaFreeAsync")    # the body of the loop that frees
    order.ordered_after("consume", "cudaMallocAsync", "fill_slow")   # by name: True, False or None
    order.stream("consume"), order.missing("fill_slow"), order.same_stream("cudaFreeAsync", "consume")

An operation is ordered after another when it is on the same stream after it, or on a stream that waits
(cudaStreamWaitEvent) for an event recorded after it, or when the host waited for it (cudaStreamSynchronize,
cudaEventSynchronize, cudaDeviceSynchronize) before enqueueing it. Streams and events are followed through the
names given them (`cudaStream_t a = s;`, cppsource.resolve). Where an argument is not one the reading can follow (an
array element it cannot tell, a dereference, a call), the answer is None: the reading cannot tell, and the run
decides. Loops and branches are read as written, once, in program order: what an iteration inherits from the one
before is not modelled.
"""
from __future__ import annotations

import dataclasses
import re

from .. import cppsource, ordering

DEFAULT = "the default stream"
# What the reading follows, from the one table of CUDA's ordering rules (streamalloc/ordering.py). A driver call is read
# as its runtime twin (cuMemFreeAsync as cudaFreeAsync): the same stream and pointer arguments, the same order.
RECORDS = tuple(ordering.written("cudaEventRecord"))
CAPTURE = ("cudaStreamBeginCapture", "cudaStreamEndCapture")
ENQUEUED = {  # API as written: (index of the stream argument (-1: last), index of the pointer argument or None)
    name: (r.stream, r.ptr) for r in ordering.RULES
    if (r.enqueues == "stream" and r.stream is not None and r.call != "cudaEventRecord") or r.call in CAPTURE
    for name in ordering.written(r.call)}
HOST_WAITS = ordering.recorded(waits="always")
SAME_AS = {"cudaMallocFromPoolAsync": "cudaMallocAsync"}  # asked for by name, one counts as the other
NAME = re.compile(r"[A-Za-z_]\w*")


@dataclasses.dataclass
class Op:
    what: str  # the API call, or the kernel's name for a launch
    pos: int  # its offset in the code
    stream: str | None = None  # canonical name; None for a host call; "?" where the reading cannot tell
    event: str | None = None  # for records, waits and cudaEventSynchronize: canonical name or "?"
    ptr: str | None = None  # the pointer argument, canonical, for allocations, frees, memsets, launches' first
    args: tuple = ()  # the arguments as written
    written: str = ""  # the stream argument as written, for messages
    written_event: str = ""  # the event argument as written


def written_stream(arg: str) -> str:
    """A stream argument as written, casts to cudaStream_t and parentheses left out; DEFAULT for the legacy default
    stream (left out, 0, NULL, nullptr, cudaStreamLegacy)."""
    arg = re.sub(r"^\(\s*cudaStream_t\s*\)\s*", "", (arg or "").strip())
    while arg.startswith("(") and arg.endswith(")") and _outer(arg):
        arg = arg[1:-1].strip()
    return DEFAULT if arg in ("", "0", "NULL", "nullptr", "cudaStreamLegacy") else arg


def _outer(text: str) -> bool:
    """Does the parenthesis that opens `text` close at its end?"""
    depth = 0
    for i, c in enumerate(text):
        depth += (c == "(") - (c == ")")
        if depth == 0:
            return i == len(text) - 1
    return False


def _strip(arg: str) -> str:
    arg = re.sub(r"^\(\s*(?:cudaStream_t|cudaEvent_t|void\s*\*\*?|\w+\s*\*+)\s*\)\s*", "", (arg or "").strip())
    arg = re.sub(r"^(?:reinterpret_cast|static_cast)<[^>]*>\s*\((.*)\)$", r"\1", arg).strip()
    while arg.startswith("(") and arg.endswith(")"):
        arg = arg[1:-1].strip()
    return arg.lstrip("&").strip()


class Order:
    """The stream work of one function, in program order, with what each operation is ordered after."""

    def __init__(self, code: str, loop_with: str | None = None):
        """The operations of `code`; with `loop_with`, only those in the body of the first loop that calls it (none
        where no loop does): the names are still followed through the whole code."""
        self.code = cppsource.strip_comments(code)
        self.names = self._name_groups()
        self.blocking = self.blocking_streams()
        self.ops: list[Op] = []
        self.before: list[set[int]] = []
        self.within = (0, len(self.code))
        if loop_with:
            uses = cppsource.calls(self.code, loop_with)
            self.within = next(((a, b) for a, b in cppsource.loop_bodies(self.code) if any(a <= p < b for p in uses)),
                               (0, 0))
        self._read()
        self.unresolved = list(dict.fromkeys(  # "`expr`": the streams and events the reading cannot follow
            f"`{w}`" for o in self.ops for w, c in ((written_stream(o.written), o.stream), (o.written_event, o.event))
            if c == "?"))

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

    def handle(self, arg: str, stream: bool = True) -> str:
        """The stream or event an argument names (cppsource.resolve: through the names given it, an element of an
        array its cudaXxxCreate made); DEFAULT for the legacy default stream; "?" where the reading cannot tell."""
        written = written_stream(arg) if stream else (arg or "").strip()
        found = written if written == DEFAULT else cppsource.resolve(self.code, written)
        if found is None:
            return "?"
        if stream and written_stream(found) == DEFAULT:
            return "?" if self.blocking else DEFAULT  # the legacy stream waits for blocking streams
        return written_stream(found) if stream else found

    # -- reading --------------------------------------------------------------------------------------------
    def _read(self):
        code = self.code
        apis = "|".join(n for call in (*HOST_WAITS, "cudaStreamWaitEvent", "cudaFree") for n in ordering.written(call))
        apis = "|".join((*ENQUEUED, *RECORDS, apis))
        a, b = self.within
        for m in re.finditer(rf"\b(?P<api>{apis})\s*\(|\b(?P<kernel>\w+)\s*<<<", code[a:b]):
            start, end = a + m.start(), a + m.end()
            if m["kernel"]:
                close = code.find(">>>", end)
                config = cppsource.split_arguments(code[end:close])
                paren = code.find("(", close)
                args = tuple(cppsource.call_arguments(code, paren)) if paren >= 0 else ()
                written = config[3] if len(config) > 3 else ""
                self._add(Op(m["kernel"], start, self.handle(written),
                             ptr=self.canonical(args[0]) if args else None, args=args, written=written or "0"))
                continue
            api, args = ordering.DRIVER.get(m["api"], m["api"]), tuple(cppsource.call_arguments(code, start))
            if api in ENQUEUED:
                s, p = ENQUEUED[api]
                written = (args[s] if args and (s < 0 or len(args) > s) else "")
                self._add(Op(api, start, self.handle(written),
                             ptr=self.canonical(args[p]) if p is not None and len(args) > p else None,
                             args=args, written=written or "0"))
            elif api in RECORDS:
                written = args[1] if len(args) > 1 else ""
                self._add(Op("cudaEventRecord", start, self.handle(written), event=self._event(args, 0), args=args,
                             written=written or "0", written_event=args[0] if args else ""))
            elif api == "cudaStreamWaitEvent":
                written = args[0] if args else ""
                self._add(Op(api, start, self.handle(written), event=self._event(args, 1), args=args, written=written,
                             written_event=args[1] if len(args) > 1 else ""))
            else:  # host calls: the synchronizations, and cudaFree (which the API says may synchronize)
                op = Op(api, start, None, args=args)
                if api == "cudaStreamSynchronize":
                    op.written = args[0] if args else ""
                    op.stream = self.handle(op.written)
                elif api == "cudaEventSynchronize":
                    op.event, op.written_event = self._event(args, 0), args[0] if args else ""
                elif api == "cudaFree":
                    op.ptr = self.canonical(args[0]) if args else "?"
                self._add(op)

    def _event(self, args, k: int) -> str:
        return self.handle(args[k], stream=False) if len(args) > k else "?"

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

    # -- the same questions by name: the first operation of each API or kernel (cudaMallocFromPoolAsync counts as
    # cudaMallocAsync) ---------------------------------------------------------------------------------------------
    def index(self, what: str) -> int | None:
        return next((k for k, o in enumerate(self.ops) if SAME_AS.get(o.what, o.what) == what), None)

    def count(self, what: str) -> int:
        return sum(SAME_AS.get(o.what, o.what) == what for o in self.ops)

    def missing(self, *whats: str) -> list[str]:
        return [w for w in whats if self.index(w) is None]

    def stream(self, what: str) -> str | None:
        """The stream `what` runs on, as written (DEFAULT for the legacy default stream)."""
        k = self.index(what)
        return None if k is None else written_stream(self.ops[k].written)

    def ordered_after(self, later: str, *earlier: str) -> bool | None:
        """Does `later` start only once every one of `earlier` has finished (False if one is missing)? None where
        the reading cannot tell: a stream or event it reads is one it cannot follow (self.unresolved); then only
        program order on one stream it knows is certain."""
        k = self.index(later)
        if k is None or any(self.index(e) is None for e in earlier):
            return False
        if self.unresolved:
            stream = self.ops[k].stream
            known = stream != "?" and all(self.ops[self.index(e)].stream == stream for e in earlier)
            return True if known and all(self.index(e) < k for e in earlier) else None
        return all(self.index(e) in self.before[k] for e in earlier)

    def same_stream(self, a: str, b: str) -> bool | None:
        """Do operations `a` and `b` run on the same stream (names followed)? None where the reading cannot tell."""
        ka, kb = self.index(a), self.index(b)
        if self.unresolved or ka is None or kb is None:
            return None
        return self.ops[ka].stream == self.ops[kb].stream

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
