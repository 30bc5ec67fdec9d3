"""Lesson 04's plumbing: reading reuse.cu, syncs.cu and release_points.cu's records into tables, plots and findings.

The CUDA, the runs, the assertions and the calls that draw stay in notebooks/04_multistream_reuse.ipynb.
"""
from __future__ import annotations

import numpy as np

from .. import plots
from ..measure import med, mib

SCENARIOS = ["same", "event", "sleep", "query", "sync", "pending", "limit"]


def version(v: int) -> str:
    return f"{v // 1000}.{v % 1000 // 10}"


# -- part 2: reuse ------------------------------------------------------------------------------------

class Reuse:
    """reuse.cu's runs of every scenario: {scenario: Result}."""

    def __init__(self, results: dict, block: int):
        self.results, self.block = results, block
        self.label = results["same"].label
        self.meta = results["same"].records.one(program="reuse", kind="meta")
        self.limit_meta = results["limit"].records.one(program="reuse", kind="meta")
        self.max_size = self.limit_meta["max_size"]  # 0 when the limit scenario could not be set up here
        self.policies = list(dict.fromkeys(r["policy"] for r in results["same"].records.where(kind="run")))

    def runs(self, scenario, policy=None, **match):
        rs = self.results[scenario].records.where(kind="run", **match)
        return rs if policy is None else [r for r in rs if r["policy"] == policy]

    def outcome(self, scenario, policy):
        rs = self.runs(scenario, policy)
        if not rs:
            return None
        return {"n": len(rs), "reused": sum(r["reused"] for r in rs), "oom": sum(r["oom"] for r in rs),
                "grown": max(r["reserved_after"] for r in rs) / self.block}

    def count(self, scenario, policy=None, **match):
        rs = self.runs(scenario, policy, **match)
        return f"{sum(r['reused'] for r in rs)}/{len(rs)}"

    def setup_rows(self):
        m = self.meta
        rows = [("A's long kernel (ms)", m["long_kernel_ms"]), ("A's short kernel (ms)", m["short_kernel_ms"]),
                ("CUDA runtime the program was built with", version(m["runtime_version"])),
                ("CUDA version of the driver", version(m["driver_version"])),
                ("a fresh pool reserves for 1 byte (MiB)", mib(m["granularity"]))]
        rows.append(("limit: the pool's maxSize (blocks)", self.max_size / self.block) if self.max_size
                    else ("limit: not run here, because", self.limit_meta["limit_skip"]))
        return plots.Table([{"quantity": k, "value": v} for k, v in rows], self.label, title="The reuse runs' setting")


def cell_text(o, sep):
    if o is None:
        return "not run"
    return f"OOM {o['oom']}/{o['n']}" if o["oom"] else f"{o['reused']}/{o['n']}{sep}{o['grown']:.1f}×"


def plot_reuse(rz: Reuse):
    frac = np.full((len(rz.policies), len(SCENARIOS)), np.nan)
    fig, ax = plots.figure("Does stream B reuse the block stream A freed?", rz.label, size=(12, 5.6))
    for i, pol in enumerate(rz.policies):
        for j, sc in enumerate(SCENARIOS):
            o = rz.outcome(sc, pol)
            if o:
                frac[i, j] = o["reused"] / o["n"]
            ax.text(j, i, cell_text(o, "\n") + ("" if o is None or o["oom"] else " block"), ha="center", va="center",
                    fontsize=8)
    ax.imshow(frac, cmap="RdYlGn", vmin=0, vmax=1, aspect="auto", alpha=0.55)
    ax.set_xticks(range(len(SCENARIOS)), [f"limit\n(maxSize {rz.max_size / rz.block:.2f} blocks)"
                                          if sc == "limit" and rz.max_size else sc for sc in SCENARIOS])
    ax.set_yticks(range(len(rz.policies)), rz.policies)
    ax.set_xlabel("scenario"); ax.set_ylabel("reuse policies of the pool")
    ax.set_title("green: B got A's block; red: a new block (or none: OOM)", fontsize=9)
    return fig


def reuse_table(rz: Reuse):
    rows = [{"policies": pol, **{sc: cell_text(rz.outcome(sc, pol), " · ") for sc in SCENARIOS}} for pol in rz.policies]
    return plots.Table(rows, rz.label, columns=["policies", *SCENARIOS],
                       title="B got A's block (runs) · reserved after B's allocation (blocks)")


def reuse_findings(rz: Reuse) -> list[tuple[str, object]]:
    """Which reuse happened where the guide says the allocator may (or tries to): this driver's behaviour."""
    out = [("same stream: A's next allocation got its freed block, all 8 settings", rz.count("same")),
           ("event wait, follow-event-dependencies on: B got A's block", rz.count("event", follow_events=1)),
           ("... and the pool did not grow", "{}/{}".format(
               sum(r["reserved_after"] <= r["reserved_before"] + rz.block // 4 for r in rz.runs("event", follow_events=1)),
               len(rz.runs("event", follow_events=1))))]
    for sc in ("sleep", "query", "sync"):
        out.append((f"{sc}: B got A's block, opportunistic on", rz.count(sc, opportunistic=1)))
        out.append((f"{sc}: B got A's block, opportunistic off", rz.count(sc, opportunistic=0)))
    done = [r["a_done_at_query"] for r in rz.runs("sleep")]
    out.append(("sleep: A's free had completed when asked right after B's allocation",
                f"{sum(d == 1 for d in done)}/{len(done)}"))
    out.append(("pending, all on: B got A's still-pending block", rz.count("pending", "all on")))
    if rz.max_size:
        out.append(("limit, internal dependencies on: B got A's block", rz.count("limit", internal_deps=1)))
        lim = rz.runs("limit")
        out.append(("limit: reserved after B's allocation (blocks)",
                    ", ".join(f"{a / rz.block:.2f}" for a in sorted({r["reserved_after"] for r in lim}))))
    return out


def plot_b_done(rz: Reuse):
    fig, axes = plots.figure("When did stream B's work finish? (green: B reused A's block; gray: B got a new block)",
                             rz.label, ncols=3, size=(5.2, 4.6))
    for ax, sc in zip(axes, ("event", "pending", "limit")):
        ax.set_title(sc)
        if not rz.runs(sc):
            ax.text(0.5, 0.5, "not run on this machine", ha="center", va="center", transform=ax.transAxes)
            continue
        a_ms = med([r["a_ms"] for r in rz.runs(sc)])
        for i, pol in enumerate(rz.policies):
            vals = [r["b_done_ms"] for r in rz.runs(sc, pol) if not r["oom"]]
            if vals:
                ax.bar(i, med(vals), color="tab:green" if any(r["reused"] for r in rz.runs(sc, pol)) else "tab:gray")
            else:
                ax.text(i, 0.02 * a_ms, "OOM", rotation=90, ha="center", va="bottom", fontsize=8, color="tab:red")
        ax.axhline(a_ms, color="tab:red", linestyle="--", linewidth=1, label=f"A's kernel and free done ({a_ms:.0f} ms)")
        ax.set_xticks(range(len(rz.policies)), rz.policies, rotation=60, ha="right", fontsize=8)
        ax.set_xlim(-0.6, len(rz.policies) - 0.4)
        ax.set_ylim(0, 1.4 * max([a_ms] + [r["b_done_ms"] for r in rz.runs(sc)]))
        ax.set_ylabel("B done, ms after A's kernel started")
        ax.legend(fontsize=7, loc="upper left")
    return fig


def timing_rows(rz: Reuse):
    """When B finished and what its allocation call cost, per scenario and setting of interest."""
    picks = [("event", "all on"), ("pending", "all off"), ("pending", "all on")]
    if rz.max_size:
        picks += [("limit", "only internal-deps"), ("limit", "all on"), ("limit", "all off")]
    rows = []
    for sc, pol in picks:
        rs = rz.runs(sc, pol)
        ok = [r for r in rs if not r["oom"]]
        rows.append({"scenario": sc, "policies": pol, "B got A's block": f"{sum(r['reused'] for r in rs)}/{len(rs)}",
                     "OOM": f"{sum(r['oom'] for r in rs)}/{len(rs)}", "A done (ms)": med([r["a_ms"] for r in rs]),
                     "B done (ms)": med([r["b_done_ms"] for r in ok]) if ok else "",
                     "B's allocation call (µs)": med([r["b_alloc_us"] for r in rs])})
    return plots.Table(rows, rz.label, title="When B's work finished (medians), counted from the start of A's kernel")


# -- part 3: what one call does to the pool --------------------------------------------------------------

def thr_name(t):
    return "0" if t == 0 else "max"


def sync_rows(srecs, block):
    rows = []
    for t in sorted({r["threshold"] for r in srecs}):
        for keep in (0, 1):
            for k in dict.fromkeys(r["call"] for r in srecs):
                rs = srecs.where(threshold=t, keep=keep, call=k)
                blocks = lambda f: med([r[f] for r in rs]) / block  # noqa: E731
                rows.append({"threshold": thr_name(t), "keep": keep, "call": k,
                             "reserved enqueued": blocks("reserved_enqueued"), "reserved idle": blocks("reserved_idle"),
                             "reserved after": blocks("reserved_after"), "used after": blocks("used_after"),
                             "call µs": med([r["call_us"] for r in rs])})
    return rows


def plot_syncs(srecs, block, label):
    kinds = list(dict.fromkeys(r["call"] for r in srecs))
    thresholds = sorted({r["threshold"] for r in srecs})
    fig, axes = plots.figure("Reserved memory after one call (release threshold 0 and max)", label, ncols=2,
                             size=(6.4, 4.4))
    x = np.arange(len(kinds))
    for ax, keep in zip(axes, (0, 1)):
        for off, t, what, color in ((-0.27, thresholds[0], "reserved_idle", "0.7"),
                                    (0.0, thresholds[0], "reserved_after", "tab:blue"),
                                    (0.27, thresholds[-1], "reserved_after", "tab:orange")):
            vals = [med([r[what] for r in srecs.where(threshold=t, keep=keep, call=k)]) / block for k in kinds]
            ax.bar(x + off, vals, width=0.27, color=color,
                   label=("before the call (GPU idle), threshold 0" if what == "reserved_idle"
                          else f"after the call, threshold {thr_name(t)}"))
        ax.axhline(keep, color="k", linestyle=":", linewidth=1, label="still in use")
        ax.set_xticks(x, kinds, rotation=40, ha="right", fontsize=8)
        ax.set_ylabel("reserved, in blocks"); ax.set_ylim(0, 1.5 * (keep + 1))
        ax.set_title(f"keep = {keep}: {'one more block still allocated' if keep else 'nothing else allocated'}",
                     fontsize=9)
        ax.legend(fontsize=7, loc="upper left", ncol=2)
    return fig


def sync_findings(srecs, block) -> list[tuple[str, object]]:
    """What this driver did where the guide says nothing definite."""
    low = srecs.where(threshold=0)
    gave_back = lambda r: r["reserved_after"] <= r["reserved_idle"] - block // 2  # noqa: E731
    out = []
    for k in ("none", "event_query", "stream_query", "other_stream"):
        rs = low.where(call=k)
        out.append((f"threshold 0, {k}: gave the freed block back", f"{sum(map(gave_back, rs))}/{len(rs)}"))
    queries = srecs.where(call="event_query") + srecs.where(call="stream_query")
    out.append(("the queries answered that the GPU was done", f"{sum(r['query_said_done'] == 1 for r in queries)}/{len(queries)}"))
    idle = [(r["reserved_idle"] - r["keep"] * block) / block for r in low]
    out.append(("threshold 0, GPU idle, before any call: freed blocks still reserved (min to max)",
                f"{min(idle):.2f} to {max(idle):.2f}"))
    extra = [(r["used_enqueued"] - r["keep"] * block) / block for r in srecs]
    out.append(("used right after cudaFreeAsync was enqueued, besides the kept block (blocks, max)", f"{max(extra):.2f}"))
    return out


# -- part 4: what gives pool memory back -----------------------------------------------------------------
PROMISED = ("cudaStreamSynchronize", "cudaEventSynchronize", "cudaDeviceSynchronize")
GUIDE = {"none": "control", **{a: "promise (§15.7, §15.12)" for a in PROMISED},
         "cudaMemPoolTrimTo": "API: what it can safely release",
         "cudaMemPoolDestroy": "API: once nothing is outstanding"}


def b_reused(r) -> bool:
    """B got A's block: the same address, and the pool did not grow for it."""
    return bool(r.get("b_same_address")) and r["reserved_after_b"] <= r["reserved_after"]


def gave_back(r) -> bool:
    if "reserved_after" in r:
        return r["reserved_after"] <= r["reserved_before"] - r["bytes"] // 2
    return r["free_after"] >= r["free_start"] - r["bytes"] // 2  # the destroyed pool: the device's free memory


def known_state(records) -> str:
    """In how many runs the action started from the state it should: a freed block reserved, nothing in use."""
    ok = [r for r in records if r["reserved_before"] >= r["bytes"] and r["used_before"] == 0]
    return f"{len(ok)}/{len(records)}"


def release_table(res, ref=None):
    """One row per action: at threshold 0, reserved before and after and whether it gave the block back; at
    threshold UINT64_MAX (the block stays), whether stream B then got A's block; with the reference recording's
    answers beside them when given."""
    def counts(records, action, threshold, test):
        rs = records.where(action=action, threshold=threshold)
        if not rs:
            return rs, "(not run)"
        if test is b_reused and "reserved_after" not in rs[0]:
            return rs, "(pool gone)"
        return rs, f"{sum(map(test, rs))}/{len(rs)}"

    rows = []
    for action in dict.fromkeys(r["action"] for r in res.records):
        rs, back = counts(res.records, action, "0", gave_back)
        _, reused = counts(res.records, action, "max", b_reused)
        row = {"action": action, "guide": GUIDE.get(action, "not in the guide"),
               "reserved before MiB": mib(med([r["reserved_before"] for r in rs])),
               "reserved after MiB": mib(med([r["reserved_after"] for r in rs])) if "reserved_after" in rs[0] else "(pool gone)",
               "threshold 0: gave the block back": back, "threshold max: B then got A's block": reused,
               "call µs": med([r["action_us"] for r in rs])}
        if ref is not None and ref.records.where(action=action):
            row["reference: gave back"] = counts(ref.records, action, "0", gave_back)[1]
            row["reference: B got it"] = counts(ref.records, action, "max", b_reused)[1]
        rows.append(row)
    label = res.label + (f"; reference: {ref.label}" if ref is not None else "")
    return plots.Table(rows, label, title="What gives a pool's memory back at release threshold 0, and what lets "
                                          "another stream reuse it where the pool keeps it")
