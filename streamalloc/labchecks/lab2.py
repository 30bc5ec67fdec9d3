"""Lab 2 (tune the pool): tuned.cu's reserved memory, speed and threshold, then what tuned_loop did with the default
pool, from the record of its CUDA calls (the threshold at every synchronization, the trim and what it left, the value
put back), then its code.

The fields tuned.cu prints are declared in the comment block at the top of its source, in
solutions/lab2_tune_pool.ipynb.
"""
from __future__ import annotations

from .. import checks, cppsource, measure
from ..measure import MiB, nbytes
from .common import judge_speed, size, within_limit

TITLE = "Lab 2: tune the pool"
FILE, FUNCTION = "tuned.cu", "tuned_loop"
BYTES, ITERATIONS = 64 * MiB, 100  # 64 MiB per iteration (a T4 has 15 GB), 100 iterations per loop
# Speed, against the limit (the same loop on one buffer from cudaMalloc), measured in the same program: yours may
# take the limit's time plus the larger of OF_LIMIT of it and OF_LOSS of what threshold 0 loses per iteration,
# and must be MIN_SPEEDUP times faster than threshold 0.
OF_LIMIT, OF_LOSS, MIN_SPEEDUP = 0.25, 0.04, 1.5
THRESHOLD = "cudaMemPoolAttrReleaseThreshold"
RELEASE_THRESHOLD = 4  # cudaMemPoolAttrReleaseThreshold's value in the record (driver_types.h)
# The recorded runs (small: they are not timed): two sizes and iteration counts, and the second starts tuned_loop
# from a release threshold other than 0 (tuned.cu's third argument), so that a value put back is the one found. It
# starts from 1 GiB, more than the pool reserves for its 4 MiB block (a pool reserves in chunks: 32 MiB on an H100),
# and not the UINT64_MAX the loop may use: from there no synchronization after the trim gives memory back (at
# threshold 0 any one would), so what the pool reserves right after tuned_loop returns is what the trim left.
TRACE_ARGS = [[8 * MiB, 3], [4 * MiB, 4, 1024 * MiB]]
RESERVED, USED = 5, 7  # cudaMemPoolAttrReservedMemCurrent, cudaMemPoolAttrUsedMemCurrent (driver_types.h)
YOURS = "yours"  # tuned.cu's mark (course::section) around its call of tuned_loop
HOST_WAITS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")
CACHE = "Guide §15.7 Physical Page Caching Behavior"


def lab2(lesson) -> None:
    """Builds tuned.cu, runs it (timed, then twice with the call recorder), and reads tuned_loop."""
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
        threshold_restored(report, summary["yours"])
    traced = report.trace(FILE, TRACE_ARGS, what="what tuned_loop did with the pool, from the record of its calls")
    if traced:
        recorded_pool(report, traced)
    with report.reading(decided=bool(traced)):  # the reading explains: it points at the line
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
    runs = [[r["us"] for r in its[loop]] for loop in ("threshold 0", "limit", "yours")]  # every iteration's time
    t0, lim, y = (measure.med(times) for times in runs)
    allowed = within_limit(t0, lim, OF_LIMIT, OF_LOSS)
    figures = (f"threshold 0 takes {t0:.1f} µs per iteration, the limit (one buffer from cudaMalloc, no pool) "
               f"{lim:.1f} µs, yours {y:.1f} µs: {t0 / y:.1f}× faster than threshold 0. Target: at most "
               f"{lim + allowed:.1f} µs, the limit plus the larger of {OF_LIMIT:.0%} of it and {OF_LOSS:.0%} of the "
               f"{t0 - lim:.1f} µs threshold 0 loses, and at least {MIN_SPEEDUP:g}× faster than threshold 0 (medians "
               f"of {len(its['yours'])} iterations on {label})")
    judge_speed(report, *runs, allowed, MIN_SPEEDUP, figures,
                "The pool still has to grow in the loop's iterations (see reserved memory)", "threshold 0")


def threshold_restored(report, yours):
    before, after = yours["threshold_before"], yours["threshold_after"]
    report.expect(after == before, f"the default pool's release threshold is back to {size(before)} when tuned_loop "
                                   "returns",
                  f"the default pool's release threshold is left at {size(after)} (it was {size(before)}): the default "
                  "pool is shared by everything in the process that calls cudaMallocAsync, and would keep all its "
                  "memory from now on; put the threshold back to threshold_before after the trim")


# -- what the record of the program's calls shows (streamalloc.calls) ---------------------------------------------
def pool_story(args, rec) -> dict:
    """What tuned_loop did with the pool in one recorded run: the threshold it started from and whether it read it,
    the pool its loop allocated from, the default pool's threshold at each of the loop's synchronizations (the first
    host wait after each cudaFreeAsync), its trims, the pools it set that are not the default one, and the threshold
    it left, and what the pool reserved and had in use when tuned_loop returned (the harness's first readings after it:
    what the trim left)."""
    defaults = {c["pool"] for c in rec.named("cudaDeviceGetDefaultMemPool") if c["ret"] == 0}
    created = {c["pool"] for c in rec.named("cudaMemPoolCreate") if c["ret"] == 0}
    current = next(iter(sorted(defaults)), None)  # the pool cudaMallocAsync takes from, until cudaDeviceSetMemPool
    value: dict = {}  # pool -> its release threshold, as last read or set
    story = {"args": args, "start": None, "read": False, "pools": [], "syncs": [], "trims": [], "sets": [],
             "others": set(), "created": created, "defaults": defaults, "left": {}}
    waiting = False  # a cudaFreeAsync of the loop awaits its synchronization
    for c in rec.lines:
        call, ok, mine = c["call"], c["ret"] == 0, c["in"] == YOURS
        if mine and story["start"] is None:
            story["start"] = next((value[p] for p in defaults if p in value), 0)
        if call == "cudaDeviceSetMemPool" and ok:
            current = c["pool"]
        elif call in ("cudaMemPoolGetAttribute", "cudaMemPoolSetAttribute") and ok and c["attr"] == RELEASE_THRESHOLD:
            if mine and call == "cudaMemPoolGetAttribute" and c["pool"] in defaults and not story["sets"]:
                story["read"] = story["read"] or c["value"] == story["start"]
            if mine and call == "cudaMemPoolSetAttribute":
                if c["pool"] in defaults:  # (allocations and synchronizations of the loop before it, the value)
                    story["sets"].append((len(story["pools"]), len(story["syncs"]), c["value"]))
                else:
                    story["others"].add(c["pool"])
            value[c["pool"]] = c["value"]
        if not mine:
            if story["start"] is not None and call == "cudaMemPoolGetAttribute" and ok and c["pool"] in defaults \
                    and c["attr"] in (RESERVED, USED):
                story["left"].setdefault(c["attr"], c["value"])
            continue
        if call == "cudaMallocAsync" and ok:
            story["pools"].append(c.get("pool") or current)
        elif call == "cudaFreeAsync" and ok:
            waiting = True
        elif call in HOST_WAITS and ok and waiting:
            waiting = False
            story["syncs"].append(next((value[p] for p in defaults if p in value), 0))
        elif call == "cudaMemPoolTrimTo" and ok:
            story["trims"].append((len(story["syncs"]), c["pool"] in defaults, c["pool"], c.get("size", 0)))
        story["end"] = next((value[p] for p in defaults if p in value), 0)  # as tuned_loop leaves it
    return story


def setting(story) -> str:
    """One recorded run, in words: 8 MiB × 3 iterations from threshold 0."""
    args, start = story["args"], story["start"] or 0
    return f"{nbytes(args[0])} × {args[1]} iterations from threshold {nbytes(start) if start else 0}"


def recorded_pool(report, traced):
    """On the record of both runs: the loop allocates from the default pool; tuned_loop reads the threshold it
    starts from; the default pool's threshold is at least what an iteration allocates at every synchronization of the
    loop; the pool is trimmed after the loop, down to what is in use; and the threshold left is exactly the one read,
    whatever it was."""
    stories = [pool_story(args, rec) for args, rec in traced]
    if any(s["start"] is None for s in stories):
        report.wrong("the record has no call made by tuned_loop: tuned.cu's harness marks its call of tuned_loop "
                     "(course::section(\"yours\")); put the given harness back as it was")
        return
    seen = f"recorded over {' and '.join(setting(s) for s in stories)}"
    for s in stories:
        other = [p for p in s["pools"] if p not in s["defaults"]]
        if not s["pools"] or len(s["syncs"]) < len(s["pools"]):
            report.wrong(f"the loop (record): tuned_loop's record ({setting(s)}) has {len(s['pools'])} "
                         f"cudaMallocAsync and {len(s['syncs'])} synchronizations after a cudaFreeAsync: the given "
                         "loop must still allocate, free and synchronize in every iteration; put it back as it was")
            return
        if other:
            report.wrong(f"the loop (record): its cudaMallocAsync took memory from pool {other[0]}, not the device's "
                         f"default pool ({setting(s)}): leave the loop as given, on the default pool, and tune that "
                         "pool (Guide §15.4 Memory Pools and the cudaMemPool_t)")
            return
    unread = [s for s in stories if not s["read"]]
    report.expect(not unread, f"threshold read (record): tuned_loop read the release threshold it started from "
                              f"before changing it ({seen})",
                  f"threshold read (record): tuned_loop did not read the default pool's release threshold before "
                  f"changing it ({setting(unread[0]) if unread else ''}): keep the given line that reads it into "
                  "threshold_before, so that you can put it back")
    kept_during_the_loop(report, stories, seen)
    if trimmed_after_the_loop(report, stories):
        what_the_trim_left(report, stories, seen)
    put_back(report, stories, seen)


def kept_during_the_loop(report, stories, seen):
    for s in stories:
        bytes_ = s["args"][0]
        low = [(i, v) for i, v in enumerate(s["syncs"]) if v < bytes_]
        if not low:
            continue
        i, v = low[0]
        why = ""
        if s["others"]:
            mine = [p for p in s["others"] if p in s["created"]]
            why = (f" Your cudaMemPoolSetAttribute set the threshold of pool {sorted(s['others'])[0]}"
                   + (", one your code created with cudaMemPoolCreate," if mine else "")
                   + " not of the default pool that the loop's cudaMallocAsync takes its memory from.")
        elif s["sets"] and any(w >= bytes_ for w in s["syncs"]):
            why = " It was high at other synchronizations of the loop only: set it once, before the loop, and put it " \
                  "back only after the loop."
        elif not s["sets"]:
            why = " tuned_loop never set the default pool's threshold."
        report.wrong(f"threshold during the loop (record): at the synchronization of iteration {i} "
                     f"({len(low)} of {len(s['syncs'])}; {setting(s)}) the default pool's release threshold was "
                     f"{size(v)}, less than the {size(bytes_)} an iteration allocates: the pool will try to give its "
                     f"memory back there, and the next cudaMallocAsync then has to grow it again.{why} Set it before the loop's first "
                     f"cudaMallocAsync (TODO 1; {CACHE}, Guide §15.12 Synchronization API Actions)")
        return
    values = sorted({v for s in stories for v in s["syncs"]})
    report.ok(f"threshold during the loop (record): at every synchronization of the loop the default pool's release "
              f"threshold was {checks.english([size(v) for v in values], 'or')}, at least what an iteration "
              f"allocates ({seen})")
    inside = max(sum(0 < m and n < len(s["syncs"]) for m, n, _ in s["sets"]) for s in stories)
    if inside:  # harmless, and no use: the pool reads the threshold only at a synchronization
        report.note(f"the release threshold is set {inside} time(s) inside the loop (record): once, before the loop, "
                    "is enough")


def trimmed_after_the_loop(report, stories) -> bool:
    """Once, on the default pool, after the loop's last synchronization, in both runs: False (and WRONG) if not."""
    for s in stories:
        n = len(s["syncs"])
        after = [t for t in s["trims"] if t[0] == n and t[1]]
        inside = [t for t in s["trims"] if 0 < t[0] < n and t[1]]
        elsewhere = sorted({t[2] for t in s["trims"] if not t[1]})
        if inside:
            report.wrong(f"trim (record): cudaMemPoolTrimTo ran inside the loop, after the synchronization of "
                         f"iteration {inside[0][0] - 1} ({setting(s)}): that gives the memory back in every iteration, "
                         f"as threshold 0 does; call it once, after the loop (TODO 2; {CACHE})")
            return False
        if not after:
            other = (f"; your cudaMemPoolTrimTo trimmed pool {elsewhere[0]}, not the default pool the loop allocates "
                     "from" if elsewhere else "")
            report.wrong(f"trim (record): tuned_loop did not trim the default pool after the loop ({setting(s)})"
                         f"{other}: call cudaMemPoolTrimTo(pool, 0) once the loop is over (TODO 2; {CACHE})")
            return False
    return True


def what_the_trim_left(report, stories, seen):
    """What the pool reserved right after tuned_loop returned, beyond what is in use, as the harness read it: nothing.
    First what the runtime API promises: a trim asked to keep at least what an iteration allocates keeps it (or does
    nothing, where the pool holds less), whatever a driver does (an H200's driver released everything on a trim to
    UINT64_MAX, measured live); the finding says the promise and the measured reserve. Then what the trim did: the run
    that starts from a threshold above what the pool reserves is the one where no synchronization after the trim (at
    the threshold put back) can give back what it kept."""
    for s in stories:  # what the runtime API promises first, then what this driver did (measured) beside it
        keep = max([t[3] for t in s["trims"] if t[0] == len(s["syncs"]) and t[1]], default=0)
        if keep >= int(s["args"][0]) and s["left"].get(RESERVED) is not None:
            report.wrong(f"trim (record): your cudaMemPoolTrimTo asks to keep at least {size(keep)} ({setting(s)}), as "
                         f"much as an iteration allocates or more: the runtime API promises that the pool keeps at least "
                         f"minBytesToKeep bytes reserved, and that the trim does nothing where the pool holds less. Right "
                         f"after tuned_loop returned the pool reserved {size(s['left'][RESERVED])} (measured on this "
                         f"GPU's driver; what is released beyond the promise is the driver's choice, not the API's): "
                         f"keep none, cudaMemPoolTrimTo(pool, 0) (TODO 2; {CACHE})")
            return
    for s in stories:
        reserved, used = s["left"].get(RESERVED), s["left"].get(USED)
        if reserved is None or used is None:
            report.wrong(f"trim (record): the record has no reading of the default pool after tuned_loop returned "
                         f"({setting(s)}): tuned.cu's harness reads its reserved and used memory there; put the given "
                         "harness back as it was")
            return
        if reserved > used:
            kept = s["start"] >= reserved  # no synchronization at the threshold put back could release it
            report.wrong(f"trim (record): right after tuned_loop returned, the default pool still reserved "
                         f"{size(reserved)}, {size(reserved - used)} more than the {size(used)} in use ({setting(s)}"
                         + (", a threshold at which no synchronization gives it back: what your trim kept" if kept
                            else "")
                         + "). cudaMemPoolTrimTo(pool, minBytesToKeep) keeps at least minBytesToKeep bytes reserved: "
                         f"once everything is freed and synchronized, keep none (TODO 2; {CACHE})")
            return
    left = checks.english(dict.fromkeys(size(s["left"][RESERVED]) for s in stories), "or")
    report.ok(f"trim (record): cudaMemPoolTrimTo on the default pool after the loop's last synchronization; right after "
              f"tuned_loop returned the pool reserved {left}, nothing beyond what is in use, also from a threshold at "
              f"which no synchronization gives memory back ({seen})")


def put_back(report, stories, seen):
    for s in stories:
        if s["end"] != s["start"]:
            after = [v for _, n, v in s["sets"] if n == len(s["syncs"])]
            report.wrong(f"threshold put back (record): tuned_loop found the default pool's release threshold at "
                         f"{size(s['start'])} and left it at {size(s['end'])} ({setting(s)})"
                         + (f": after the loop it set it to {size(after[-1])}, not to the value it read" if after else
                            ": it did not set it back after the loop on this run") +
                         ". Put back exactly the value tuned_loop read, threshold_before, on every path, not a "
                         "constant that equals it only for some starting threshold: the default pool is shared by "
                         "everything in the process that calls cudaMallocAsync (TODO 2)")
            return
    starts = checks.english([size(s["start"]) for s in stories])
    report.ok(f"threshold put back (record): tuned_loop left the default pool's release threshold at the value it read "
              f"({starts}), on both runs ({seen})")


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
                         "each iteration allocates: the pool keeps that much at a synchronization, tries to give "
                         "the rest back, and then has to grow again at the next cudaMallocAsync; set it to at least what one "
                         f"iteration reserves (UINT64_MAX keeps everything) ({CACHE})")


def trim_after_the_loop(report, code, loop):
    trims = cppsource.calls(code, "cudaMemPoolTrimTo")
    kept = [p for p in trims if pool_of(report, code, p, "cudaMemPoolTrimTo")]
    if trims and not kept:
        return  # said: on another pool (wrong), or one the reading cannot tell (the reserved memory decides)
    report.placed(kept, loop, "after", {
        "missing": "cudaMemPoolTrimTo is not called: after the loop the pool keeps what it reserved until something "
                   "gives it back (never while the threshold stays high, at best at a later synchronization once it "
                   f"is put back); trim it once, after the loop, to give it back now ({CACHE})",
        "after": "cudaMemPoolTrimTo is called after the loop",
        "inside": "cudaMemPoolTrimTo is called inside the loop: that gives the memory back in every iteration, as "
                  "threshold 0 does; call it once, after the loop",
        "before": "cudaMemPoolTrimTo is called before the loop, when there is nothing to trim yet; call it after the "
                  "loop"})


def threshold_put_back(report, code, loop):
    sets = threshold_sets(checks.Report(""), code)  # the notes were given above
    if any(p < loop[0] for p in sets):
        after = [p for p in sets if p >= loop[1]]
        report.expect(bool(after), "the release threshold is set again after the loop (put back)",
                      "the release threshold is not put back after the loop: the default pool would keep all its "
                      "memory for the rest of the process; set it back to threshold_before after the trim")
        for p in after[-1:]:  # a constant is the value found only for one starting threshold
            arg = (cppsource.call_arguments(code, p) + ["", "", ""])[2]
            value = cppsource.constant(code, arg, before=p)
            if value is not None:
                report.wrong(f"the release threshold is put back to a constant, {size(value)} (`{arg}`), not to "
                             "threshold_before, the value tuned_loop read: that is right only when the threshold "
                             f"started at {size(value)}, and the check also starts tuned_loop from another value")
