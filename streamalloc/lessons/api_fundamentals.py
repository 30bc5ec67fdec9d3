"""Lesson 02 (API fundamentals): the tables, figures and text built from its programs' records.

Every sentence is computed from the records it is given; nothing here measures.
"""
from __future__ import annotations

import re

from IPython.display import Markdown

from .. import measure, plots, sanitizer
from ..measure import nbytes


def table(res, columns, title="", records=None):
    """The records a program printed (or the given subset), as a table that names the GPU they come from."""
    rows = [{c: r.get(c, "") for c in columns} for r in (res.records if records is None else records)]
    rows = [{c: "n/a" if v is None else v for c, v in row.items()} for row in rows]  # null: not measured
    return plots.Table(rows, res.label, columns, title)


# -- section 1: pointer_now.cu ----------------------------------------------------------------------------
def pointer_table(res):
    return plots.Table(
        [{"repeat": r["rep"], "pointer": r["ptr"], "cudaMallocAsync (µs)": round(r["malloc_us"]),
          "pointer in hand (ms)": round(r["pointer_at_us"] / 1000, 3), "cudaStreamQuery": r["stream_query"],
          "cudaEventQuery": r["event_query"], "stream reached the allocation (ms)": round(r["reached_at_us"] / 1000, 1),
          "wrong elements": r["errors"], "of": r["n"], "pool reserved before": nbytes(r["reserved_before"]),
          "pool reserved after the call": nbytes(r["reserved_after"])} for r in res.records],
        res.label, title="cudaMallocAsync while the stream is busy: times on the host clock from the launch of the "
        "busy kernel, what the queries said right after, and the result check")


def plot_pointer(res, spin_ms):
    recs = res.records
    fig, ax = plots.figure("The host has the pointer long before the stream reaches the allocation", res.label)
    reps = [r["rep"] for r in recs]
    ax.scatter([r["pointer_at_us"] / 1000 for r in recs], reps, marker="o", label="cudaMallocAsync returned (host)")
    ax.scatter([r["queried_at_us"] / 1000 for r in recs], reps, marker="x",
               label="cudaStreamQuery / cudaEventQuery: not ready")
    ax.scatter([r["reached_at_us"] / 1000 for r in recs], reps, marker="s", label="stream reached the allocation")
    ax.axvline(spin_ms, color="0.5", linestyle="--", linewidth=1, label=f"busy kernel ends ({spin_ms} ms)")
    ax.set_xscale("log")
    ax.set_xlabel("ms after the busy kernel was launched (host clock)")
    ax.set_ylabel("repeat")
    ax.set_yticks(reps)
    ax.legend(fontsize=8, loc="center")


def pool_between_repeats(recs) -> Markdown:
    """What the pool kept between repeats, and what that made of each cudaMallocAsync, from pointer_now's records."""
    thresholds = sorted(set(r["threshold"] for r in recs))
    empty = sum(r["reserved_before"] == 0 for r in recs)
    kept = sum(r["reserved_before"] >= r["bytes"] for r in recs)
    grew = sum(r["reserved_after"] >= r["reserved_before"] + r["bytes"] for r in recs)
    cost = measure.summary([r["malloc_us"] for r in recs])
    ptrs = sorted(set(r["ptr"] for r in recs))
    lines = ["The host held a valid pointer while the stream still had about `SPIN_MS` of work before the "
             "allocation, and could already launch a kernel that uses it: the kernel's result is right because it "
             "runs in the same stream, after the allocation.", ""]
    what = (f"Each repeat ends with a `cudaStreamSynchronize`, and the default pool's release threshold was "
            f"{' / '.join(map(plots.md, thresholds))} bytes. ")
    if empty == len(recs):
        what += ("At that threshold a synchronize hands the freed block back to the device (Guide §15.12 "
                 "*Synchronization API Actions*; §15.7 *Physical Page Caching Behavior*): the pool had 0 bytes "
                 "reserved before the `cudaMallocAsync` of every repeat, and ")
    else:
        what += (f"The pool had 0 bytes reserved before the `cudaMallocAsync` of {empty} of {len(recs)} repeats "
                 f"and kept at least the buffer's {nbytes(recs[0]['bytes'])} in {kept}; ")
    what += (f"in {grew} of {len(recs)} repeats it had grown by the buffer's size when the call returned, before "
             "the stream had reached the allocation. ")
    if grew == len(recs):
        what += ("So every `cudaMallocAsync` here was a pool miss that mapped its memory again, inside the call; "
                 f"the calls took {cost['min']:.0f} to {cost['max']:.0f} µs (median {cost['median']:.0f} µs; "
                 "notebook 01 compares a pool miss with a pool hit). ")
    what += ("The warm-up at the start of each program pays the one-time costs (the process's first "
             "`cudaMallocAsync`, the first launch of each kernel)"
             + ("; it does not warm the pool, which every synchronize at this threshold empties again. "
                if empty == len(recs) else ". ")
             + "Sections 2, 3 and 5 are built the same way, with a synchronize at the end of each repeat.")
    lines += [what, ""]
    if len(ptrs) == 1:
        lines.append(f"The pointer was still {plots.md(ptrs[0])} in all {len(recs)} repeats"
                     + (" although the pool had kept no memory in between. That is consistent with a pool that keeps "
                        "its virtual address range and maps new physical memory into it when it grows again, but a "
                        "pointer value cannot show which physical memory is behind it: the same address does not "
                        "mean the same memory. " if empty == len(recs) else ". "))
    else:
        lines.append(f"The pointer took {len(ptrs)} values in {len(recs)} repeats. ")
    lines[-1] += "Notebook 03 is about what the pool keeps, and when."
    return Markdown("\n".join(lines))


# -- sections 2-5: the patterns --------------------------------------------------------------------------
def same_stream_text(res, spin_ms) -> Markdown:
    recs = res.records
    empty = sum(r["reserved_before"] == 0 for r in recs)
    return Markdown(
        f"Enqueueing allocate + kernel + copy + free took {measure.med(recs.values('enqueue_us')):.0f} µs (median) "
        f"while the stream had {spin_ms} ms of work ahead; every element was right. The pool was empty before the "
        f"allocation in {empty} of {len(recs)} repeats"
        + (", so that time includes mapping the buffer's memory (a pool miss, as in section 1)." if empty else "."))


def freeasync_of_malloc_text(res) -> Markdown:
    waited = sum(not r["busy_after_free"] for r in res.records)
    return Markdown(
        f"`cudaFreeAsync` of `cudaMalloc` memory: median {measure.med(res.records.values('free_call_us')):.0f} µs; "
        + ("it returned while the stream was still busy in every repeat." if not waited else
           f"in {waited} of {len(res.records)} repeats the stream was idle when it returned: it waited."))


def probe_text(probe, spin_ms) -> Markdown:
    """What cudaFree of stream-ordered memory did while its stream was busy: reported, not asserted."""
    busy = sum(r["busy_after_free"] for r in probe)
    ms = measure.med(r["free_call_us"] for r in probe) / 1000
    if busy == len(probe):
        text = (f"`cudaFree` returned after {ms:.3f} ms (median) while the {spin_ms} ms kernel was still running, in "
                "every repeat: it did not wait. A kernel still using the buffer would have kept using freed memory: "
                "the `cudaStreamSynchronize` before `cudaFree` is what makes the pattern right.")
    elif busy == 0:
        text = (f"On this GPU and driver `cudaFree` waited for the busy stream ({ms:.1f} ms, median) before returning, "
                "although the guide (§15.3 *API Fundamentals*) promises no such synchronization for stream-ordered "
                "memory. Do not rely on it: the synchronization before `cudaFree` is what the guide asks for.")
    else:
        text = (f"`cudaFree` returned while the stream was still busy in {busy} of {len(probe)} repeats ({ms:.3f} ms "
                "median): it cannot be relied on to wait.")
    return Markdown(text)


def plot_free_calls(groups, spin_ms, label):
    """Host time of each free call of sections 2-5 (median, min-max), and whether the stream was still busy after."""
    fig, ax = plots.figure("Host time of the free call; the stream had a busy kernel", label, size=(8.0, 4.2))
    names = [g[0] for g in groups]
    stats = [measure.summary([r["free_call_us"] for r in g[1]]) for g in groups]
    ax.bar(range(len(names)), [s["median"] for s in stats],
           yerr=[[s["median"] - s["min"] for s in stats], [s["max"] - s["median"] for s in stats]], capsize=3)
    for i, (name, recs) in enumerate(groups):
        measured = [r["busy_after_free"] for r in recs if r.get("busy_after_free") is not None]
        text = f"busy after: {sum(measured)}/{len(measured)}" if measured else "stream idle\n(synchronized)"
        ax.annotate(text, (i, stats[i]["median"]), textcoords="offset points", xytext=(0, 8), ha="center", fontsize=7)
    ax.axhline(spin_ms * 1000, color="0.5", linestyle="--", linewidth=1, label=f"busy kernel ({spin_ms} ms)")
    ax.set_yscale("log")
    ax.set_ylabel("µs on the host clock (median, min-max)")
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, fontsize=7)
    ax.legend(fontsize=8)
    return plots.Table([{"call": n.replace("\n", " "), **{k: round(v, 1) for k, v in s.items() if k != "n"},
                         "repeats": s["n"]} for n, s in zip(names, stats)], label, title="Host time of the free call (µs)")


def patterns_table(rows, label):
    out = []
    for pattern in dict.fromkeys(r["pattern"] for r in rows):  # in order of appearance
        runs = [r for r in rows if r["pattern"] == pattern]
        out.append({"pattern": pattern, "repeats": len(runs), "right": sum(r["ok"] for r in runs),
                    "wrong elements": sum(r["errors"] for r in runs), "elements per repeat": runs[0]["n"]})
    return plots.Table(out, label, title="The four patterns of §15.3, every element checked")


# -- section 6: race.cu ---------------------------------------------------------------------------------
def block_reused(rec) -> bool:
    """p and the other buffer had the same address while the pool held the block: the same memory, reused."""
    return rec["same_address"] and rec["reserved_before"] >= rec["bytes"]


def race_table(rows, label):
    return plots.Table([{"scenario": rec["scenario"], "mode": rec["mode"], "pool": rec["pool"], "exit status": 0,
                         "p": rec["p"], "other buffer": rec["other"], "pool reserved before": nbytes(rec["reserved_before"]),
                         "block reused": block_reused(rec), "outside lifetime": rec["outside_lifetime"],
                         "wrong elements": rec["errors"], "of": rec["n"], "a wrong value": rec["first_wrong"]}
                        for rec in rows], label,
                       title="race.cu: every CUDA call succeeded; how many elements of b's result are not 7")


def plot_race(rows, label):
    fig, ax = plots.figure("A missing event: wrong results, no CUDA error", label)
    labels = [f"{rec['scenario']}\n{rec['mode']}" + ("\n(default threshold)" if rec["pool"] == "default" else "")
              for rec in rows]
    fractions = [rec["errors"] / rec["n"] for rec in rows]
    colors = ["tab:green" if rec["mode"] == "fixed" else "tab:red" if rec["pool"] == "keep" else "tab:orange"
              for rec in rows]
    ax.bar(range(len(labels)), fractions, color=colors)
    for i, rec in enumerate(rows):
        ax.annotate(f"exit 0\n{'block reused' if block_reused(rec) else 'not reused'}", (i, fractions[i]),
                    textcoords="offset points", xytext=(0, 4), ha="center", fontsize=7)
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_ylim(0, 1.25)
    ax.set_ylabel("fraction of b's result that is wrong")


def race_text(race) -> Markdown:
    """What each racy run did to b's result, from its record."""
    lines = []
    for scenario in ("before-alloc", "after-free"):
        racy = race[scenario, "racy"]
        if block_reused(racy):
            lines.append(f"- *{scenario}*: the racy version exited 0 and {plots.md(racy['errors'])} of "
                         f"{plots.md(racy['n'])} elements of `b`'s result are wrong (one is "
                         f"{plots.md(racy['first_wrong'])}, not 7): `b` used the block while it held another buffer's data.")
        else:
            lines.append(f"- *{scenario}*: the racy version exited 0, `b`'s access was outside `p`'s lifetime, but this "
                         f"pool gave `p` a different block, so `b`'s result came out {'right' if racy['ok'] else 'wrong'} "
                         f"({plots.md(racy['errors'])} wrong elements): the bug is there, the damage depends on the pool.")
    return Markdown("\n".join(lines))


def default_threshold_text(rec, kept) -> Markdown:
    """What the racy before-alloc run did with the pool at its default release threshold, from its record."""
    where = "at the same address as the earlier buffer" if rec["same_address"] else "at another address"
    text = (f"**The same bug at the default release threshold.** The last run is the racy *before-alloc* run "
            f"again with the pool's release threshold left at {plots.md(rec['threshold'])} bytes. The synchronize after the "
            f"earlier buffer's free decided what the pool kept: {nbytes(rec['reserved_before'])} when `p` was "
            f"allocated ({nbytes(kept['reserved_before'])} in the run that keeps freed memory), and `p` came {where}. "
            f"`b` still ran outside `p`'s lifetime and every CUDA call succeeded. ")
    if rec["ok"]:
        text += ("This time every element of `b`'s result came out 7: `b` read memory that held zeros, and "
                 "0 + 7 is the right answer. The bug is there and a check of the result cannot see it; only "
                 "the 9s of the earlier buffer, kept in the pool, made it visible above. ")
    else:
        text += (f"{plots.md(rec['errors'])} of {plots.md(rec['n'])} elements of `b`'s result were wrong (one is "
                 f"{plots.md(rec['first_wrong'])}: `b` read {rec['first_wrong'] - 7} where `p` was to hold 0). ")
    if rec["reserved_before"] == 0:
        text += ("The pool had given the block back, so `cudaMallocAsync` got memory for `p` anew (section 1 "
                 "saw the same): that is what `b` read.")
    return Markdown(text)


# -- section 7: the sanitizer's reports -------------------------------------------------------------------
def sanitizer_table(san, seconds, label):
    if not san:
        return "no sanitizer runs: there is no compute-sanitizer here (see above for how to get it)"
    rows = [{"scenario": s, "mode": m, "sanitizer exit": v.returncode, "errors": v.errors, "printed": len(v.blocks),
             "first error": v.kind or "", "first located error": v.located or "", "at": v.location or "",
             "kernel": v.function or "", "program's result": "printed" if v.records else "none",
             "seconds": seconds[s, m]} for (s, m), v in san.items()]
    return plots.Table(rows, label, title="compute-sanitizer --tool memcheck --track-stream-ordered-races all, "
                       "on race.cu")


def what_the_reports_hold(san) -> Markdown:
    """What each racy report contained, in words, from the parsed reports."""
    if not san:
        return Markdown("(No sanitizer reports here: nothing to read.)")
    lines = []
    for (scenario, mode), v in san.items():
        if mode != "racy":
            continue
        # what the sanitizer printed goes in as text: a recording's could hold markup
        text = (f"- *{scenario}*, racy: {plots.md(v.errors)} error(s) counted, {len(v.blocks)} printed. The first is "
                f"{plots.code(v.kind)}")
        text += f" ({plots.md(v.address)})" if v.address else ""
        if v.located and v.located_error() != v.first_error():
            same = sum(b[0][len(sanitizer.LINE):].strip() == v.located for b in v.blocks)
            text += (f": it names the allocation, not a kernel. The kernel and the line come from the errors after "
                     f"it: {plots.code(v.located)} at {plots.code(v.location)} in {plots.code(v.function)} ({same} of "
                     "the printed errors).")
        elif v.located:
            text += f", at {plots.code(v.location)} in {plots.code(v.function)}."
        else:
            text += ", and no printed error names a kernel or a line: the report names the allocation only."
        if v.records:
            r = v.records[0]
            text += (f" The program ran to its end under the sanitizer and printed its result ({plots.md(r['errors'])} wrong "
                     f"elements, one {plots.md(r['first_wrong'])}).")
        else:
            failed = next((re.sub(r"^\S*/", "", line) for line in v.output.splitlines() if " failed: " in line), None)
            text += (" The program did not get to print its result"
                     + (f": its next check failed ({plots.code(failed)}), after memcheck had ended the context at the bad "
                        "access." if failed else "."))
        lines.append(text)
    fixed = [f"*{s}*" for (s, m), v in san.items() if m == "fixed" and v.errors == 0]
    if fixed:
        lines.append(f"- The fixed runs ({', '.join(fixed)}): 0 errors, and the right result.")
    return Markdown("\n".join(lines))
