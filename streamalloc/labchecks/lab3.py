"""Lab 3 (fix the race): race.cu's results, compute-sanitizer's report and the pool's memory, then the order its
loop puts the two streams in.

The fields race.cu prints are declared in the comment block at the top of its source, in
solutions/lab3_fix_the_race.ipynb.
"""
from __future__ import annotations

from .. import calls, checks, sanitizer
from ..calls import SYNCS
from .common import leaked, show
from .streams import Order

TITLE = "Lab 3: fix the race"
FILE = "race.cu"
ARGS = [1 << 20, 16, 2000, 200]           # elements, iterations, fill µs, consume µs
SANITIZER_ARGS = [1 << 14, 3, 300, 30]    # smaller: the sanitizer slows every memory access down
TRACE_ARGS = [[1 << 14, 3, 300, 30], [1 << 12, 5, 100, 10]]  # the recorded runs: two settings, so no default hides
LOOP = "loop"  # race.cu's mark (course::section) around its loop
SANITIZER = [*sanitizer.STREAM_ORDER_RACES, "--print-limit", "10", "--show-backtrace", "device",
             "--error-exitcode", "99"]
ORDER = "Guide §15.3 API Fundamentals"


def lab3(lesson) -> None:
    """Builds race.cu, runs it, runs it under compute-sanitizer, and reads the order of its loop."""
    report = checks.Report(TITLE, lesson)
    res = report.run(FILE, ARGS, timeout=60, what="the results")
    if res is not None:
        results(report, res)
        gpu_clock_order(report, res.records)
        every_block_freed(report, res.records)
    report.sanitize(FILE, SANITIZER_ARGS, SANITIZER, timeout=180, clean="no stream-ordered race",
                    errors=", such as an access to buf not ordered after its allocation or before its free")
    traced = report.trace(FILE, TRACE_ARGS, what="the order of the two streams' work, from the record of its calls",
                          partial=True)
    if traced:
        recorded_order(report, traced)
    with report.reading(decided=bool(traced)):  # the reading explains: it points at the line
        order = Order(report.read(FILE, "main"), loop_with="cudaFreeAsync")  # main, its own helpers inlined
        if order.missing("cudaMallocAsync", "fill_slow", "consume", "cudaFreeAsync"):
            report.wrong("the loop must still allocate buf (cudaMallocAsync), fill it (fill_slow<<<...>>>), read it "
                         "(consume<<<...>>>) and free it (cudaFreeAsync)")
        else:
            read_after_the_fill(report, order)
            freed_after_the_read(report, order)
            as_many_events_as_needed(report, order)
        report.forbid_in_loop(report.read(FILE, "main"), SYNCS, "let the streams wait for each other on the GPU, "
                                                                "with events; a host wait in the loop stalls both streams")
    report.finish()


# -- what the record of the program's calls shows (streamalloc.calls) ---------------------------------------------
def recorded_order(report, traced):
    """On the record of every iteration of both runs: is each consume ordered after its buffer's allocation and
    fill, and its buffer's free after the consume? Is there a host wait in the loop? However the code is written."""
    early, late, waits, buffers, settings = [], [], [], 0, []
    for args, rec in traced:
        settings.append(f"{args[1]} iterations of {args[0]:,} elements")
        for b in (b for b in rec.all_buffers if b.stream_ordered and b.alloc["in"] == LOOP):
            buffers += 1
            fills = [u for u in b.uses if u.what == "fill_slow"]
            reads = [u for u in b.uses if u.what == "consume"]
            if not fills or not reads or (b.free is None and not rec.cut_short):
                report.wrong(f"the loop must still allocate buf, fill it (fill_slow), read it (consume) and free it "
                             f"(cudaFreeAsync) in every iteration: the record of {settings[-1]} has an allocation "
                             f"with {len(fills)} fill(s), {len(reads)} read(s) and {'a' if b.free else 'no'} free")
                return
            if not all(rec.before(b.alloc_op, r) and rec.before(f, r) for f in fills for r in reads):
                early.append(args)
            if not all(rec.done_before_free(r, b) for r in reads):
                late.append(args)
        waits += calls.host_waits(c for c in rec.lines if c["in"] == LOOP)
    if not buffers:
        report.wrong("the record of the run has no cudaMallocAsync in the loop: the loop must still allocate buf "
                     "with cudaMallocAsync on the producer, every iteration")
        return
    seen = f"recorded over {' and '.join(settings)}"
    report.expect(not early, f"order (record): every consume is ordered after its buffer's cudaMallocAsync and "
                             f"fill_slow ({seen})",
                  f"order (record): consume is not ordered after fill_slow ({seen}): the consumer can read buf before "
                  "it is allocated and filled. Record an event on the producer after the fill, and make the consumer "
                  f"wait for it (cudaStreamWaitEvent) before it reads (TODO 1; {ORDER})")
    report.expect(not late, f"order (record): every cudaFreeAsync is ordered after the consume that reads its "
                            f"buffer ({seen})",
                  f"order (record): cudaFreeAsync is not ordered after consume ({seen}): the pool can give buf's block "
                  "to the next iteration's cudaMallocAsync while the consumer still reads it. Record an event on the "
                  "consumer after the read, and make the producer wait for it (cudaStreamWaitEvent) before "
                  f"cudaFreeAsync (TODO 2; {ORDER})")
    report.expect(not waits, "no host wait inside the loop (record)",
                  f"{checks.english(sorted(set(waits)))} made the host wait inside the loop ({len(waits)} time(s), "
                  "record): let the streams wait for each other on the GPU, with events; a host wait in the loop "
                  "stalls both streams")


# -- what the run shows ------------------------------------------------------------------------------------------
def what_was_read(got, it, j):
    """Decode a wrong value: whose mark or whose values the consumer of iteration `it` read, and what it means."""
    if got < 0:
        k, what = -got - 1, f"the mark iteration {-got - 1}'s fill writes before its values"
    elif got % 1000 == j % 1000 and got >= 1000:
        k, what = got // 1000 - 1, f"iteration {got // 1000 - 1}'s value"
    else:
        return "a value no fill wrote: the consumer read the block before anything was written to it (TODO 1)"
    if k > it:
        return (f"{what}: a later iteration's fill was already writing into this block, so it had been freed and "
                "handed to the next cudaMallocAsync before the consumer read it (TODO 2)")
    if k == it and got < 0:
        return f"{what}: the consumer read while this iteration's fill was still running (TODO 1)"
    return f"{what}: the consumer read the block before this iteration's fill had written it (TODO 1)"


def results(report, res):
    per_iter = [r for r in res.records if "iter" in r]
    total = next(r for r in res.records if "bad_iters" in r)
    show([{k: v for k, v in r.items() if r["errors"] or k in ("iter", "errors")} for r in per_iter], res.label,
         columns=["iter", "errors", "first_bad", "expected", "got"],
         title="Every iteration's slice of out (first wrong element of each)")
    reuse = (f"the pool returned the previous iteration's block in {total['same_block']} of "
             f"{total['iters'] - 1} iterations")
    bad = [r for r in per_iter if r["errors"]]
    if not bad:
        report.ok(f"results: all {total['iters']} iterations right, {total['n']:,} elements each ({reuse})")
    else:
        r = bad[0]
        report.wrong(f"results: {len(bad)} of {total['iters']} iterations wrong ({total['errors']:,} elements). "
                     f"First: iteration {r['iter']}, element {r['first_bad']}: expected {r['expected']}, "
                     f"got {r['got']}, {what_was_read(r['got'], r['iter'], r['first_bad'])}; {reuse}")


def gpu_clock_order(report, records):
    """The order on the GPU's clock, whatever the data showed: each consumer's first read after its fill's last value
    (TODO 1), and, where the next iteration got the same block, the next fill's first mark after this consumer's last
    read (TODO 2)."""
    per_iter = [r for r in records if "iter" in r]
    early = [r for r in per_iter if r["read_after_fill_us"] < 0]
    reused = [r for r in per_iter if r["same_block_next"]]
    overwritten = [r for r in reused if r["next_fill_after_read_us"] < 0]
    if early:
        r = min(early, key=lambda r: r["read_after_fill_us"])
        report.wrong(f"order (GPU clock): the consumer started reading before its fill had written the values in "
                     f"{len(early)} of {len(per_iter)} iterations (iteration {r['iter']}: "
                     f"{-r['read_after_fill_us']:,.1f} µs before): it does not wait for the fill (TODO 1; {ORDER})")
    if overwritten:
        r = min(overwritten, key=lambda r: r["next_fill_after_read_us"])
        report.wrong(f"order (GPU clock): the next iteration's fill began writing into the same block before the "
                     f"consumer had finished reading it in {len(overwritten)} of {len(reused)} iterations that reused "
                     f"the block (iteration {r['iter']}: {-r['next_fill_after_read_us']:,.1f} µs before): the free does "
                     f"not wait for the read (TODO 2; {ORDER})")
    if not early and not overwritten:
        first = min(r["read_after_fill_us"] for r in per_iter)
        report.ok(f"order (GPU clock): every consumer started reading after its fill's last value (at least "
                  f"{first:,.1f} µs after), and no fill wrote into a block before its previous reader was done "
                  f"({len(reused)} of {len(per_iter) - 1} iterations reused the block)")


def every_block_freed(report, records):
    total = next(r for r in records if "bad_iters" in r)
    leaked(report, 0, total["pool_used_end"], ARGS[0] * 4, "the loop and a device synchronization",
           "every iteration's buf must be freed with cudaFreeAsync, after its last use")


# -- what the code explains ---------------------------------------------------------------------------------------
def unresolved(report, order, what):
    report.cannot_tell(what, f"The reading cannot follow {checks.english(order.unresolved)}; the results and "
                             "compute-sanitizer judge it")


def read_after_the_fill(report, order):
    producer, consumer = order.stream("fill_slow"), order.stream("consume")
    ordered = order.ordered_after("consume", "cudaMallocAsync", "fill_slow")
    if ordered is None:
        return unresolved(report, order, f"whether consume on `{consumer}` waits for fill_slow on `{producer}`")
    report.expect(ordered,
                  f"consume on `{consumer}` waits for cudaMallocAsync and fill_slow on `{producer}`: it reads buf only "
                  "once it is allocated and filled",
                  f"consume on `{consumer}` is not ordered after fill_slow on `{producer}`: it can read buf before it "
                  "is allocated and filled. Record an event on the producer after the fill, and make the consumer "
                  f"wait for it (cudaStreamWaitEvent) before it reads (TODO 1; {ORDER})")


def freed_after_the_read(report, order):
    consumer, freer = order.stream("consume"), order.stream("cudaFreeAsync")
    ordered = order.ordered_after("cudaFreeAsync", "consume")
    if ordered is None:
        return unresolved(report, order, f"whether cudaFreeAsync on `{freer}` waits for consume on `{consumer}`")
    report.expect(ordered,
                  f"cudaFreeAsync on `{freer}` waits for consume on `{consumer}` "
                  f"({'in stream order' if order.same_stream('cudaFreeAsync', 'consume') else 'through an event'}): "
                  "buf is freed only after its last use",
                  f"cudaFreeAsync on `{freer}` is not ordered after consume on `{consumer}`: the pool can give buf's "
                  "block to the next iteration's cudaMallocAsync while the consumer still reads it. Record an event on "
                  "the consumer after the read, and make the producer wait for it (cudaStreamWaitEvent) before "
                  f"cudaFreeAsync (TODO 2; {ORDER})")


def as_many_events_as_needed(report, order):
    same = order.same_stream("cudaFreeAsync", "consume")
    if same is None:
        return  # said above
    needed = 1 + (not same)
    records, waits = order.count("cudaEventRecord"), order.count("cudaStreamWaitEvent")
    report.expect(records >= needed and waits >= needed,
                  f"the loop calls cudaEventRecord {records}× and cudaStreamWaitEvent {waits}× ({needed} of each "
                  "needed)",
                  f"the loop calls cudaEventRecord {records}× and cudaStreamWaitEvent {waits}×: {needed} of each are "
                  "needed" + (", one pair before the read and one before the free" if needed == 2 else ""))
