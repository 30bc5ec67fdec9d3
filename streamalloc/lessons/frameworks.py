"""Lesson 07's plumbing: sizes, names for pools and thresholds, and the tables, plot and sentences built from the
programs' records (alloc_probe.cost_loops' loops, floor.cu's, bare.py's).

The programs, the runs and the assertions stay in notebooks/07_frameworks.ipynb.
"""
from __future__ import annotations

from .. import measure, plots
from ..measure import MiB, UINT64_MAX
LOOPS = ("preallocated", "allocate-use-free", "calls", "array calls")  # alloc_probe.cost_loops' and floor.cu's


# -- sizes: the one rule of this lesson (to be replaced by the course's shared helper for sizes and free memory) --
def budget(machine) -> int:
    """The most one program may hold: a quarter of the memory free when the machine was probed (in replay the
    recorded GPU's, so replay asks for the recorded arguments); 1 GiB where nothing is known."""
    return measure.free_memory(machine, 4 << 30) // 4


def loop_sizes(budget_bytes: int) -> list[int]:
    """The sizes of every cost loop: 1, 4, 16 and 64 MiB, those of which eight fit the budget."""
    return [s * MiB for s in (1, 4, 16, 64) if 8 * s * MiB <= budget_bytes]


def at_size(sizes: list[int]) -> int:
    """The size the tables and the closing note quote: 4 MiB, or the only size there is."""
    return sizes[min(1, len(sizes) - 1)]


# -- names ---------------------------------------------------------------------------------------------------
def threshold_name(t) -> str:
    return "UINT64_MAX" if t == UINT64_MAX else f"{t / MiB:g} MiB" if t else "0"


def came_from(info: dict, pool=None) -> str:
    """Where a program's probe allocation came from, in words."""
    handle = info["came_from"] if pool is None else pool
    if handle == 0:
        return "cudaMalloc (no pool)"
    return "the default pool" if handle == info["default_pool"] else "a pool of its own"


def loop_us(res, size: int, loop: str = "allocate-use-free") -> float:
    return measure.med(res.records.one(size=size, loop=loop)["us"])


def join(items) -> str:
    items = list(items)
    return ", ".join(items[:-1]) + (" and " if len(items) > 1 else "") + (items[-1] if items else "")


# -- every setting's cost, side by side ------------------------------------------------------------------------
class Summary:
    """The settings with cost loops, in the order the lesson ran them: (setting, Result, info record)."""

    def __init__(self, sizes: list[int]):
        self.sizes, self.rows = sizes, []

    def pool_row(self, setting: str, res, info: dict) -> dict:
        """One row of a section's table (and one setting for the last section): where allocations come from,
        the default pool's threshold, the loop's median at the first two sizes."""
        self.rows.append((setting, res, info))
        return {"setting": setting, "library": info["library"], "allocations come from": came_from(info),
                "default pool threshold before": threshold_name(info["before"]["threshold"]),
                "after the library allocated": threshold_name(info["after"]["threshold"]),
                **{f"µs/iteration at {measure.mib(s):g} MiB": loop_us(res, s) for s in self.sizes[:2]},
                "measured": plots.short(res.label)}

    def source(self) -> str:
        labels = {res.label for _, res, _ in self.rows}
        return labels.pop() if len(labels) == 1 else "several sources: see the table's last column"

    def cost_table(self, floor) -> plots.Table:
        """Per setting: where it allocates, the threshold it left, the loop at every size; the C++ floor first."""
        rows = [{"setting": "C++ floor: cudaMallocAsync, default pool at UINT64_MAX", "library": "none (CUDA runtime)",
                 "allocations come from": "the default pool", "threshold before → after": "UINT64_MAX (set)",
                 **{f"{measure.mib(s):g} MiB µs": loop_us(floor, s) for s in self.sizes}, "measured": plots.short(floor.label)}]
        for setting, res, info in self.rows:
            rows.append({"setting": setting, "library": info["library"], "allocations come from": came_from(info),
                         "threshold before → after": f"{threshold_name(info['before']['threshold'])} → "
                                                     f"{threshold_name(info['after']['threshold'])}",
                         **{f"{measure.mib(s):g} MiB µs": loop_us(res, s) for s in self.sizes},
                         "measured": plots.short(res.label)})
        return plots.Table(rows, self.source(), title="One loop, every library: allocate, memset, free, synchronize "
                                                      "(median µs per iteration)")

    def plot(self, floor):
        fig, ax = plots.figure("Allocate, memset, free, synchronize: one iteration, by library", self.source())
        for setting, res, info in self.rows:
            plots.series(ax, self.sizes, [measure.summary(res.records.one(size=s, loop="allocate-use-free")["us"])
                                          for s in self.sizes],
                         f"{setting} (default pool threshold → {threshold_name(info['after']['threshold'])})")
        plots.series(ax, self.sizes, [measure.summary(floor.records.one(size=s, loop="allocate-use-free")["us"])
                                      for s in self.sizes], "C++ floor: cudaMallocAsync at UINT64_MAX",
                     color="k", linestyle="--")
        plots.bytes_axis(ax, "x")
        ax.set_yscale("log")
        ax.set_xlabel("allocation per iteration")
        ax.set_ylabel("µs per iteration (median, IQR band)")
        ax.legend(fontsize=7)
        return fig

    def parts(self, floor, size: int) -> list[dict]:
        """What one iteration is made of, at `size`: the loop; the same loop without the allocator (preallocated);
        the allocator's calls alone; the library's array or tensor calls alone (where measured: "-" where not)."""
        def row(setting, res, library):
            part = {loop: loop_us(res, size, loop) if res.records.where(size=size, loop=loop) else None for loop in LOOPS}
            return {"setting": setting, "library": library, "loop µs": part["allocate-use-free"],
                    "preallocated µs": part["preallocated"],
                    "loop − preallocated µs": part["allocate-use-free"] - part["preallocated"],
                    "allocate + free calls µs": "-" if part["calls"] is None else part["calls"],
                    "through the array/tensor µs": "-" if part["array calls"] is None else part["array calls"]}
        return [row("C++ floor", floor, "none (CUDA runtime)")] + [row(s, r, i["library"]) for s, r, i in self.rows]


def python_overhead(parts: list[dict]) -> dict:
    """Python's own cost, from the parts: the preallocated loop in Python minus the same loop in C++ (one memset and
    one synchronize through a binding), and each setting's allocator calls minus C++'s cudaMallocAsync+cudaFreeAsync."""
    floor = parts[0]
    return {"binding": measure.med([p["preallocated µs"] for p in parts[1:]]) - floor["preallocated µs"],
            "calls": {p["setting"]: p["allocate + free calls µs"] - floor["allocate + free calls µs"] for p in parts[1:]
                      if p["allocate + free calls µs"] != "-"}}


# -- the bare script beside the figures --------------------------------------------------------------------
# bare.py's name of each setting it runs -> the setting of the main figures it checks, and whether bare.py went
# through the library's array or tensor (then its loop should cost the main loop plus the array's extra calls)
BARE = {"cudaMallocAsync": ("cudaMallocAsync, no library pool", False),
        "CuPy MemoryPool": ("CuPy MemoryPool (the default)", True),
        "CuPy without a pool": ("CuPy without a pool", True),
        "CuPy MemoryAsyncPool": ("CuPy MemoryAsyncPool", True),
        "PyTorch native": ("PyTorch backend:native", True),
        "RMM CudaAsyncMemoryResource": ("RMM CudaAsyncMemoryResource()", False),
        "cuda.core DeviceMemoryResource": (None, False)}  # cuda.core's setting name carries its API: matched below


def bare_rows(bare_runs: dict, summary: Summary, size: int) -> list[dict]:
    """One row per setting bare.py ran: its median beside the main loop's, and what the main figures predict for it
    (the main loop, plus the array's calls minus the allocator's where bare.py went through the array)."""
    rows = []
    settings = {s: (res, info) for s, res, info in summary.rows}
    for res in bare_runs.values():
        for r in res.records:
            if "not_installed" in r:
                rows.append({"bare.py": r["bare"], "bare.py µs": "not measured: not installed where this ran",
                             "main figure": "-", "main loop µs": None, "predicted for bare.py µs": None,
                             "bare ÷ predicted": None, "bare.py measured": plots.short(res.label)})
                continue
            main_name, through_array = BARE.get(r["bare"], (None, False))
            if main_name is None:
                main_name = next((s for s in settings if s.startswith(r["bare"].split()[0])), None)
            main = settings.get(main_name)
            bare_us = measure.med(r["us"])
            row = {"bare.py": r["bare"], "bare.py µs": bare_us, "main figure": main_name or "-",
                   "main loop µs": None, "predicted for bare.py µs": None, "bare ÷ predicted": None,
                   "bare.py measured": plots.short(res.label)}
            if main:
                loop = loop_us(main[0], size)
                extra = loop_us(main[0], size, "array calls") - loop_us(main[0], size, "calls") if through_array else 0.0
                row.update({"main loop µs": loop, "predicted for bare.py µs": loop + extra,
                            "bare ÷ predicted": bare_us / (loop + extra)})
            rows.append(row)
    return rows


def measured(row: dict) -> bool:
    """Whether bare.py measured this row (its library was installed where it ran)."""
    return isinstance(row["bare.py µs"], (int, float))


def ranks_agree(rows: list[dict]) -> bool:
    """Whether bare.py and the main figures put the settings they share in the same order."""
    both = [r for r in rows if r["main loop µs"] is not None]
    return [r["bare.py"] for r in sorted(both, key=lambda r: r["bare.py µs"])] == \
        [r["bare.py"] for r in sorted(both, key=lambda r: r["main loop µs"])]
