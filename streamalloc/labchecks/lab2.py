"""Lab 2 (tune the pool): tuned.cu's reserved memory, speed, trim and threshold, then its code.

The fields tuned.cu prints are declared in the comment block at the top of its source, in
solutions/lab2_tune_pool.ipynb.
"""
from __future__ import annotations

from .. import checks, cppsource, measure
from .common import MiB, judge_speed, size, within_limit

TITLE = "Lab 2: tune the pool"
FILE, FUNCTION = "tuned.cu", "tuned_loop"
BYTES, ITERATIONS = 64 * MiB, 100  # 64 MiB per iteration (a T4 has 15 GB), 100 iterations per loop
# Speed, against the limit (the same loop on one buffer from cudaMalloc), measured in the same program: yours may
# take the limit's time plus the larger of OF_LIMIT of it and OF_LOSS of what threshold 0 loses per iteration,
# and must be MIN_SPEEDUP times faster than threshold 0.
OF_LIMIT, OF_LOSS, MIN_SPEEDUP = 0.25, 0.04, 1.5
THRESHOLD = "cudaMemPoolAttrReleaseThreshold"
CACHE = "Guide §15.7 Physical Page Caching Behavior"


def lab2(lesson) -> None:
    """Builds tuned.cu, runs it, and reads tuned_loop."""
    report = checks.Report(TITLE, lesson)
    bytes_ = iteration_bytes(lesson)
    res = report.run(FILE, [bytes_, ITERATIONS], timeout=120, what="the results, the pool's memory and the timing")
    if res is not None:
        recs = res.records
        summary = {loop: recs.one(loop=loop, summary=True) for loop in ("threshold 0", "limit", "yours")}
        its = {loop: [r for r in recs.where(loop=loop) if "it" in r] for loop in summary}
        results(report, summary)
        keeps_its_memory(report, its["yours"], summary["yours"], bytes_)
        speed(report, its, res.label)
        trimmed(report, summary["yours"])
        threshold_restored(report, summary["yours"])
    code = report.read(FILE, FUNCTION)
    loop = given_loop(report, code) if code else None
    if loop:
        threshold_set_before_the_loop(report, code, loop, bytes_)
        trim_after_the_loop(report, code, loop)
        threshold_put_back(report, code, loop)
    report.finish()


def iteration_bytes(lesson) -> int:
    """64 MiB, or less on a GPU with less than 1 GiB free (the loops hold one block at a time)."""
    free = getattr(getattr(lesson, "machine", None), "memory_free", None)
    return BYTES if not free or free >= 16 * BYTES else max(MiB, (free // 16) // MiB * MiB)


# -- what the run shows ------------------------------------------------------------------------------------------
def results(report, summary):
    for loop, who in (("yours", "yours"), ("limit", "the limit"), ("threshold 0", "threshold 0")):
        s = summary[loop]
        report.expect(s["errors"] == 0, f"result ({who}): all {s['slots']} iterations computed the right sum",
                      f"result ({who}): iteration {s['first_bad']} computed {s['got']}, expected {s['expected']} "
                      f"({s['errors']} of {s['slots']} iterations wrong)")


def keeps_its_memory(report, its, yours, bytes_):
    """From the first synchronization on, the pool neither gives memory back at a synchronization nor grows at
    the next cudaMallocAsync. (The first allocation may grow it: the given loop left it empty; the first
    synchronization may trim it down to a threshold above what one iteration uses.)"""
    threshold = yours["threshold"]
    gave_back = [r for r in its if r["reserved_after_sync"] < r["reserved_after_malloc"]]
    grew = [b for a, b in zip(its, its[1:]) if b["reserved_after_malloc"] > a["reserved_after_sync"]]
    emptied = [r for r in its if r["reserved_after_sync"] == 0]
    low = f", less than the {size(bytes_)} each iteration allocates" if threshold < bytes_ else ""
    advice = "; set it before the loop, to at least what the pool reserves for one iteration"
    if emptied:
        report.wrong(f"reserved memory: the pool gave all its memory back and had to grow again: it reserved 0 bytes "
                     f"after the synchronization of {len(emptied)} of {len(its)} iterations (the first: iteration "
                     f"{emptied[0]['it']}). The release threshold during your loop was {size(threshold)}{low}{advice}")
    elif grew or any(r["it"] > 0 for r in gave_back):
        r = gave_back[0] if gave_back else grew[0]
        report.wrong(f"reserved memory: the pool still gives memory back and maps it again: after {len(gave_back)} of "
                     f"the {len(its)} synchronizations it reserved less than right after that iteration's "
                     f"cudaMallocAsync, and {len(grew)} allocations had to grow it again (iteration {r['it']}: "
                     f"{size(r['reserved_after_malloc'])} right after cudaMallocAsync, "
                     f"{size(r['reserved_after_sync'])} after the synchronization). The release threshold during "
                     f"your loop was {size(threshold)}{low}{advice}")
    else:
        first = its[0]["reserved_after_sync"] < its[0]["reserved_after_malloc"]
        report.ok(f"reserved memory: {size(its[-1]['reserved_after_sync'])} right after every cudaMallocAsync and "
                  f"after every synchronization of your {len(its)} iterations"
                  + (" (from the first synchronization on, which trimmed the pool to the threshold)" if first else "")
                  + f": the pool neither gave memory back nor had to grow (threshold during the loop: "
                  f"{size(threshold)})")


def speed(report, its, label):
    t0, lim, y = (measure.summary([r["us"] for r in its[loop]])["median"] for loop in ("threshold 0", "limit", "yours"))
    allowed = within_limit(t0, lim, OF_LIMIT, OF_LOSS)
    figures = (f"threshold 0 takes {t0:.1f} µs per iteration, the limit (one buffer from cudaMalloc, no pool) "
               f"{lim:.1f} µs, yours {y:.1f} µs: {t0 / y:.1f}× faster than threshold 0. Target: at most "
               f"{lim + allowed:.1f} µs, the limit plus the larger of {OF_LIMIT:.0%} of it and {OF_LOSS:.0%} of the "
               f"{t0 - lim:.1f} µs threshold 0 loses, and at least {MIN_SPEEDUP:g}× faster than threshold 0 (medians "
               f"of {len(its['yours'])} iterations on {label})")
    judge_speed(report, t0, lim, y, allowed, MIN_SPEEDUP, figures,
                "The pool still has to grow in the loop's iterations (see reserved memory)", "threshold 0")


def trimmed(report, yours):
    end = yours["reserved_end"]
    report.expect(end == 0, "after your trim the pool reserves 0 bytes",
                  f"after your trim the pool still reserves {size(end)}; the target is 0 bytes: after the loop, with "
                  f"everything freed and synchronized, call cudaMemPoolTrimTo(pool, 0) ({CACHE})")


def threshold_restored(report, yours):
    before, after = yours["threshold_before"], yours["threshold_after"]
    report.expect(after == before, f"the default pool's release threshold is back to {size(before)} when tuned_loop "
                                   "returns",
                  f"the default pool's release threshold is left at {size(after)} (it was {size(before)}): the default "
                  "pool is shared by everything in the process that calls cudaMallocAsync, and would keep all its "
                  "memory from now on; put the threshold back to threshold_before after the trim")


# -- what the code explains ---------------------------------------------------------------------------------------
def given_loop(report, code):
    allocs = cppsource.calls(code, "cudaMallocAsync")
    loop = next(((a, b) for a, b in cppsource.loop_bodies(code) if any(a <= p < b for p in allocs)), None)
    if loop is None:
        report.wrong("tuned_loop has lost the given loop (the one that calls cudaMallocAsync): put it back as it was")
    return loop


def default_pools(code) -> set[str] | None:
    """The names that hold the device's default pool, the one the loop's cudaMallocAsync takes from: variables
    cudaDeviceGetDefaultMemPool fills (cudaDeviceGetMemPool too, unless the code sets another current pool), and
    the names given them. None where the reading cannot tell (the current pool is set)."""
    getters = ["cudaDeviceGetDefaultMemPool"] + ([] if cppsource.calls(code, "cudaDeviceSetMemPool")
                                                 else ["cudaDeviceGetMemPool"])
    names = set()
    for getter in getters:
        for p in cppsource.calls(code, getter):
            target = (cppsource.call_arguments(code, p) + [""])[0].lstrip("&").strip()
            names |= cppsource.aliases(code, target)
    return names


def pool_of(report, code, p, api) -> bool | None:
    """Is the pool a call at offset p names the default pool? True, False (a pool the code creates: said), or None
    (the reading cannot tell: said)."""
    arg = (cppsource.call_arguments(code, p) + [""])[0].strip()
    known = default_pools(code)
    same = cppsource.resolve(code, arg)
    if arg in known or same in known:
        return True
    if same and cppsource.calls(code, "cudaMemPoolCreate") and any(
            (cppsource.call_arguments(code, q) + [""])[0].lstrip("&").strip() == same
            for q in cppsource.calls(code, "cudaMemPoolCreate")):
        report.wrong(f"{api} is called on `{arg}`, a pool your code creates with cudaMemPoolCreate, not on the "
                     "default pool that the loop's cudaMallocAsync takes its memory from: set it on the default "
                     "pool, `pool` (Guide §15.4)")
        return False
    report.cannot_tell(f"whether `{arg}` in {api}(`{arg}`, ...) is the default pool, the one the loop's "
                       "cudaMallocAsync takes its memory from")
    return None


def threshold_sets(report, code) -> list[int]:
    """The cudaMemPoolSetAttribute calls that set the default pool's release threshold, the attribute written
    directly or through a name given to it. A call whose attribute or pool the reading cannot resolve does not count
    (it says so: the run's reserved memory decides); one on a pool the code creates is wrong."""
    names = cppsource.aliases(code, THRESHOLD)
    found = []
    for p in cppsource.calls(code, "cudaMemPoolSetAttribute"):
        attr = (cppsource.call_arguments(code, p) + ["", ""])[1]
        if attr in names:
            if pool_of(report, code, p, "cudaMemPoolSetAttribute"):
                found.append(p)
        elif not attr.startswith("cudaMemPoolAttr") and not attr.startswith("cudaMemPoolReuse"):
            report.cannot_tell(f"which attribute cudaMemPoolSetAttribute sets with `{attr}`")
    return found


def threshold_set_before_the_loop(report, code, loop, bytes_):
    undecided = sum(f.mark == checks.CANNOT_TELL for f in report.items)
    sets = threshold_sets(report, code)
    if not sets and sum(f.mark == checks.CANNOT_TELL for f in report.items) > undecided:
        return  # the calls the reading cannot resolve were said: the pool's reserved memory decides
    report.placed(sets, loop, "before", {
        "missing": f"the release threshold is never set: call cudaMemPoolSetAttribute(pool, {THRESHOLD}, &threshold) "
                   f"before the loop ({CACHE})",
        "before": f"{THRESHOLD} is set before the loop",
        "inside": f"{THRESHOLD} is set inside the loop: set it once, before the loop",
        "after": f"{THRESHOLD} is set after the loop only: while the loop ran the threshold was still 0, so the pool "
                 "gave its memory back at every cudaStreamSynchronize and grew again at the next cudaMallocAsync; set "
                 f"it before the loop ({CACHE}, Guide §15.12 Synchronization API Actions)"})
    for p in (p for p in sets if p < loop[0]):
        value_arg = (cppsource.call_arguments(code, p) + ["", "", ""])[2]
        value = cppsource.constant(code, value_arg, before=p)
        if value is None:
            report.cannot_tell(f"the threshold's value (`{value_arg}`)")
        elif value < bytes_:
            report.wrong(f"the release threshold set before the loop is {size(value)}, less than the {size(bytes_)} "
                         "each iteration allocates: the pool keeps that much at a synchronization, gives the rest "
                         "back, and has to grow again at the next cudaMallocAsync; set it to at least what one "
                         f"iteration reserves (UINT64_MAX keeps everything) ({CACHE})")


def trim_after_the_loop(report, code, loop):
    trims = cppsource.calls(code, "cudaMemPoolTrimTo")
    kept = [p for p in trims if pool_of(report, code, p, "cudaMemPoolTrimTo")]
    if trims and not kept:
        return  # said: on another pool (wrong), or one the reading cannot tell (the reserved memory decides)
    report.placed(kept, loop, "after", {
        "missing": "cudaMemPoolTrimTo is not called: after the loop the pool keeps what it reserved until the process "
                   f"ends; trim it once, after the loop ({CACHE})",
        "after": "cudaMemPoolTrimTo is called after the loop",
        "inside": "cudaMemPoolTrimTo is called inside the loop: that gives the memory back in every iteration, as "
                  "threshold 0 does; call it once, after the loop",
        "before": "cudaMemPoolTrimTo is called before the loop, when there is nothing to trim yet; call it after the "
                  "loop"})


def threshold_put_back(report, code, loop):
    sets = threshold_sets(checks.Report(""), code)  # the notes were given above
    if any(p < loop[0] for p in sets):
        report.expect(any(p >= loop[1] for p in sets), "the release threshold is set again after the loop (put back)",
                      "the release threshold is not put back after the loop: the default pool would keep all its "
                      "memory for the rest of the process; set it back to threshold_before after the trim")
