"""Lesson 06's plumbing: the block size, and the tables and plots built from sharing.cu, remap.cu, upload.cu and
compare.cu's records.

The CUDA, the runs and the assertions stay in notebooks/06_graph_memory_nodes.ipynb.
"""
from __future__ import annotations

from .. import measure, plots
from ..measure import MiB, med, mib


# -- sizes: the course's one rule (measure.free_memory, measure.block_size) ---------------------------------------
def free_bytes(machine) -> int:
    """The memory free when the machine was probed (in replay the recorded GPU's); 8 GiB where nothing is known."""
    return measure.free_memory(machine)


def block_size(machine) -> int:
    """The programs' allocation: measure.block_size (64 MiB, or a sixteenth of the free memory on a smaller GPU, in
    whole 2 MiB pages, at least 8 MiB). No program holds more than four at once."""
    return measure.block_size(free_bytes(machine))


def compare_sizes(machine) -> list[int]:
    """compare.cu's sizes: 64 KiB to 256 MiB, those no larger than a sixteenth of the free memory."""
    return [s for s in (64 << 10, 256 << 10, MiB, 4 * MiB, 16 * MiB, 64 * MiB, 256 * MiB) if s <= free_bytes(machine) // 16]


# -- sharing.cu ------------------------------------------------------------------------------------------------
def at_once(r: dict) -> int:
    """The most spins running at one time in a round, from their GPU stamps (a stop before a start at a tie)."""
    edges = sorted([(t, 1) for t in r["start_us"]] + [(t, -1) for t in r["stop_us"]])
    running = most = 0
    for _, step in edges:
        running += step
        most = max(most, running)
    return most


def peak(r: dict) -> int:
    """The graph allocator's most reserved memory in a round: the high-water mark, or what was held before or after."""
    return max(r["graph_reserved_high"], r["reserved_before"], r["graph_reserved"])


def sharing_table(share, block: int, label: str, graphs: int, spin_ms) -> plots.Table:
    return plots.Table([{"phase": r["phase"], "round": r["round"], "streams": ", ".join(map(str, r["stream"])),
                         "cudaGraphLaunch µs": ", ".join(f"{v:.0f}" for v in r["call_us"]), "spins at once": at_once(r),
                         "ms to finish": r["ms"], "reserved before (BLOCKs)": r["reserved_before"] / block,
                         "peak (BLOCKs)": peak(r) / block, "after (BLOCKs)": r["graph_reserved"] / block} for r in share],
                       label, title=f"{graphs} graphs, each holding {block // MiB} MiB while it spins {spin_ms} ms")


# -- remap.cu ----------------------------------------------------------------------------------------------------
def remap_table(rounds, block: int, label: str) -> plots.Table:
    return plots.Table([{"round": r["round"], "A again: call µs": r["again_call_us"][0],
                         "A again: GPU µs": r["again_gpu_us"][0],
                         "A with B's allocation live: call µs": r["held_call_us"][0],
                         "A with B's allocation live: GPU µs": r["held_gpu_us"][0],
                         "reserved after A / after B / after A again (BLOCKs)":
                             f"{r['reserved_after_a'] / block:g} / {r['reserved_after_b'] / block:g} / "
                             f"{r['reserved_after_relaunch'] / block:g}",
                         "B's bytes right": f"{r['b_right']:,} / {r['bytes']:,}"} for r in rounds],
                       label, title=f"Relaunching A while B's allocation ({block // MiB} MiB) is unfreed")


# -- upload.cu ---------------------------------------------------------------------------------------------------
WAYS = ["none", "upload", "other stream"]
WAY_NAMES = {"none": "trim; s busy; nothing", "upload": "trim; s busy; cudaGraphUpload(exec, s)",
             "other stream": "trim; s busy; cudaGraphUpload(exec, s2) at once"}


def upload_rows(upload, block: int) -> list[dict]:
    """One row per way of the trials (medians), after the very first launch and before the new instantiations."""
    ups, new = upload.records.where(what="after_trim"), upload.records.one(what="new_graph")
    rows = [{"before the timed launch": "a new executable graph", "reserved before it (BLOCKs)":
             new["reserved_before_launch"] / block, "upload call µs": "-", "launch call µs": new["call_us"][0],
             "launch GPU µs": new["gpu_us"][0], "later launches: to done µs": "-"}]
    for w in WAYS:
        rs = ups.where(way=w)
        rows.append({"before the timed launch": WAY_NAMES[w],
                     "reserved before it (BLOCKs)": med([r["reserved_before_launch"] for r in rs]) / block,
                     "upload call µs": med([r["upload_call_us"] for r in rs]) if w != "none" else "-",
                     "launch call µs": med([r["call_us"][0] for r in rs]),
                     "launch GPU µs": med([r["gpu_us"][0] for r in rs]),
                     "later launches: to done µs": med([v for r in rs for v in r["done_us"][1:]])})
    for r in upload.records.where(what="instantiate"):
        if "error" in r:
            rows.append({"before the timed launch": "instantiated with cudaGraphInstantiateFlagUpload",
                         "reserved before it (BLOCKs)": r["error"]})
            continue
        rows.append({"before the timed launch": "trim; instantiated " + ("with cudaGraphInstantiateFlagUpload (s)"
                                                                         if r["flag"] == "upload" else "again, no flag"),
                     "reserved before it (BLOCKs)": r["reserved_after_instantiate"] / block, "upload call µs": "-",
                     "launch call µs": r["call_us"][0], "launch GPU µs": r["gpu_us"][0],
                     "later launches: to done µs": med(r["done_us"][1:]) if len(r["done_us"]) > 1 else "-"})
    return rows


def plot_upload(upload, later: int):
    ups = upload.records.where(what="after_trim")
    fig, axes = plots.figure("A launch that has to map, with and without cudaGraphUpload", upload.label, ncols=2,
                             size=(5.2, 4.2))
    for ax, field, title in zip(axes, ("call_us", "gpu_us"), ("host µs in cudaGraphLaunch", "GPU µs of the launch")):
        for i, w in enumerate(WAYS):
            rs = ups.where(way=w)
            ax.scatter([i - 0.1] * len(rs), [r[field][0] for r in rs], color="tab:red", s=14,
                       label="the launch after the trim" if i == 0 else None)
            ax.scatter([i + 0.1] * (len(rs) * later), [v for r in rs for v in r[field][1:]], color="tab:blue", s=8,
                       label="later launches" if i == 0 else None)
        ax.set_xticks(range(len(WAYS)), ["no upload", "upload into s", "upload into s2"])
        ax.set_yscale("log")
        ax.set_title(title, fontsize=9)
    axes[0].legend(fontsize=8)
    return fig


# -- compare.cu --------------------------------------------------------------------------------------------------
COMPARE_WAYS = ["stream", "graph 1", "graph K", "prealloc"]


def compare_names(k: int) -> dict:
    return {"stream": "stream-ordered loop", "graph 1": "graph, 1 iteration per launch",
            "graph K": f"graph, {k} iterations per launch", "prealloc": "preallocated buffer, stream launches"}


def plot_compare(cmp, k: int, label: str):
    names = compare_names(k)
    fig, axes = plots.figure("Allocate, fill, free: per iteration", label, ncols=3, size=(4.6, 4.0))
    for way in COMPARE_WAYS:
        rs = sorted(cmp.where(way=way), key=lambda r: r["bytes"])
        xs = [r["bytes"] for r in rs]
        plots.series(axes[0], xs, [measure.summary(r["host_us"]) for r in rs], names[way])
        plots.series(axes[1], xs, [measure.summary(r["gpu_us"]) for r in rs], names[way])
        axes[2].plot(xs, [r["reserved_peak"] / r["bytes"] for r in rs], marker="o", markersize=3, label=names[way])
    for ax, title in zip(axes, ("host µs to enqueue one iteration", "GPU µs per iteration", "peak reserved / size")):
        plots.bytes_axis(ax)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("allocation size")
    axes[0].set_yscale("log")
    axes[1].set_yscale("log")
    axes[0].legend(fontsize=7)
    return fig


def compare_rows(cmp, at: int, k: int) -> list[dict]:
    names = compare_names(k)
    return [{"way": names[way], "host µs / iteration": med(cmp.one(way=way, bytes=at)["host_us"]),
             "GPU µs / iteration": med(cmp.one(way=way, bytes=at)["gpu_us"]),
             "peak reserved MiB": mib(cmp.one(way=way, bytes=at)["reserved_peak"])} for way in COMPARE_WAYS]


def below_prealloc(cmp, field: str = "gpu_us") -> list[int]:
    """The sizes at which some graph way's median was below the preallocated loop's: where it is no lower bound."""
    out = []
    for r in cmp.where(way="prealloc"):
        graphs = [med(g[field]) for g in cmp.where(bytes=r["bytes"]) if g["way"].startswith("graph")]
        if graphs and min(graphs) < med(r[field]):
            out.append(r["bytes"])
    return out
