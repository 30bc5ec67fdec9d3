"""Notebook 07's Python programs and the cells that read their output.

The programs only measure on a GPU; here they must fail cleanly without one. The cells that read their output
run on canned JSON lines shaped like the programs' (the numbers are made up for the test, never recorded),
so a broken table, plot or check shows before a GPU run, and a wrong result must fail a check.
"""
import subprocess
import sys
from pathlib import Path

import pytest

from notebook import StandIn, code_cells, run_cells
from notebook import programs as written

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "07_frameworks.ipynb"

MiB = 1 << 20
UINT64_MAX = 2**64 - 1
DEFAULT, CREATED, RMM_POOL = 0x5000, 0x6000, 0x7000


def cells():
    return [{"source": src} for src in code_cells(NOTEBOOK.stem)]


def programs():
    """{file name: source} of every program the notebook writes with %%writefile."""
    return written(NOTEBOOK.stem)


def test_the_notebook_writes_its_programs_and_their_helper_module():
    assert sorted(programs()) == ["alloc_probe.py", "bare.py", "cuda_core_pools.py", "cupy_pools.py", "cupy_race.py",
                                  "floor.cu", "rmm_pools.py", "torch_alloc.py"]
    for name, src in programs().items():
        if name.endswith(".py"):
            compile(src, name, "exec")
        assert "usage:" in src or name == "alloc_probe.py", name
    helper = programs()["alloc_probe.py"]
    assert "json.dumps" in helper and "def cost_loops" in helper
    # one helper module, which every program but bare.py (written apart) and cupy_race.py (no loop) imports
    for name in ("cupy_pools.py", "torch_alloc.py", "cuda_core_pools.py", "rmm_pools.py"):
        src = programs()[name]
        assert "from alloc_probe import cost_loops, emit, gpu_turn, pool_of, pool_state" in src, name
        assert src.index("gpu_turn()  #") > src.index("from alloc_probe import"), name  # its turn after its imports
        assert "def emit" not in src and "def pool_of" not in src and "def per_iteration" not in src, name
    assert "alloc_probe" not in programs()["bare.py"] and "streamalloc" not in programs()["bare.py"]  # written apart


def test_the_four_programs_recordings_follow_their_helper_module(tmp_path):
    from streamalloc import replay
    for name, src in programs().items():
        if name.endswith(".py"):
            (tmp_path / name).write_text(src)
    keys = {n: replay.program_key(tmp_path / n) for n in ("cupy_pools.py", "bare.py")}
    (tmp_path / "alloc_probe.py").write_text(programs()["alloc_probe.py"].replace("WARMUP = 5", "WARMUP = 6"))
    assert replay.program_key(tmp_path / "cupy_pools.py") != keys["cupy_pools.py"]  # the helper changed: re-record
    assert replay.program_key(tmp_path / "bare.py") == keys["bare.py"]  # bare.py imports no helper


def _gpu_here():
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


ARGS = {"cupy_pools.py": ["MemoryPool", "3", str(MiB)], "cupy_race.py": [str(MiB), "1000"], "bare.py": ["cupy", str(MiB), "3"],
        "torch_alloc.py": ["native", "3", str(4 * MiB), str(MiB)], "rmm_pools.py": ["own", "3", str(MiB), str(MiB)],
        "cuda_core_pools.py": ["3", str(MiB)]}


@pytest.mark.parametrize("name", sorted(ARGS))
def test_programs_fail_cleanly_without_a_gpu(name, tmp_path):
    if _gpu_here():
        pytest.skip("a GPU is here: the notebook runs these programs live")
    path = tmp_path / name
    path.write_text(programs()[name])
    (tmp_path / "alloc_probe.py").write_text(programs()["alloc_probe.py"])  # beside them, as lesson.build has it
    done = subprocess.run([sys.executable, str(path), *ARGS[name]], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    assert done.returncode != 0
    assert not [line for line in done.stdout.splitlines() if line.startswith("{")], "no numbers without a GPU"
    assert f"{name} needs" in done.stderr and "GPU" in done.stderr, done.stderr


# -- canned output, shaped like each program's -------------------------------------------------------------------
def _state(threshold, reserved=0, used=0):
    return {"threshold": threshold, "reserved": reserved, "used": used}


def _loops(sizes, slow=300.0, fast=20.0, array=True, **extra):
    """alloc_probe.cost_loops' lines (floor.cu's, with array=False and no extra fields)."""
    lines = []
    for n in sizes:
        lines.append({"size": n, "loop": "preallocated", "us": [fast + i % 3 for i in range(5)]})
        lines.append({"size": n, "loop": "allocate-use-free", "us": [slow + i for i in range(5)], **extra})
        lines.append({"size": n, "loop": "calls", "us": [5.0 + i for i in range(5)]})
        if array:
            lines.append({"size": n, "loop": "array calls", "us": [8.0 + i for i in range(5)]})
    return lines


BARE = {"cupy": ["cudaMallocAsync", "CuPy MemoryPool", "CuPy without a pool", "CuPy MemoryAsyncPool"],
        "torch": ["PyTorch native"], "rmm": ["RMM CudaAsyncMemoryResource"], "cuda.core": ["cuda.core DeviceMemoryResource"]}


def canned(name, args, race_fixed_overwritten=0, backend_ignored=False, race_reused=True, bare_factor=1.0,
           floor_threshold=UINT64_MAX, bare_missing=(), async_stats_zero=False, async_pool_kept=False,
           cupy_other_ways=False):
    """The JSON lines a program of the notebook prints for these arguments (made-up numbers)."""
    if name == "floor":
        return [{"what": "pool", "runtime": 13000, "threshold_before": 0, "threshold": floor_threshold,
                 "from_default_pool": True}] + _loops([int(a) for a in args[1:]], slow=40.0, fast=15.0, array=False)
    if name == "bare":
        if args[0] in bare_missing:
            return [{"bare": args[0], "not_installed": f"No module named '{args[0]}'"}]
        return [{"bare": b, "us": [bare_factor * 305.0 + i for i in range(5)]} for b in BARE[args[0]]]
    if name == "cupy_pools":
        allocator, sizes = args[0], [int(a) for a in args[2:]]
        after = UINT64_MAX if allocator == "MemoryAsyncPool" else 0
        lines = [{"library": "CuPy 14.2.0", "allocator": allocator, "same_pool": True, "default_pool": DEFAULT,
                  "came_from": 0 if allocator in ("MemoryPool", "none") else DEFAULT, "before": _state(0),
                  "after": _state(after), "limit": after if allocator == "MemoryAsyncPool" else None,
                  "CUPY_GPU_MEMORY_LIMIT": None}]
        if allocator == "MemoryAsyncPool":
            lines.append({"current_demo": True, "created_pool": CREATED, "came_from": CREATED,
                          "created_state": _state(UINT64_MAX, 2 * MiB, MiB), "came_from_after_reset": DEFAULT,
                          "reads": {"used_bytes": 0 if cupy_other_ways else MiB, "get_limit": UINT64_MAX},
                          "default_state": _state(UINT64_MAX),
                          "current_after_default_ctor": CREATED if cupy_other_ways else DEFAULT})
        return lines + _loops(sizes, default_pool=_state(0), cupy_cache=sizes[-1], array=allocator != "cudaMallocAsync")
    if name == "cupy_race":
        n, delay_us = int(args[0]), int(args[1])
        return [{"allocator": a, "a_waits_for_b": w, "warmed_up": True, "same_address": race_reused,
                 "overwritten": race_fixed_overwritten if w else (n if race_reused else 0), "elements": n,
                 "host_gap_us": 150.0, "delay_us": float(delay_us)}
                for a in ("MemoryPool", "MemoryAsyncPool") for w in (False, True)]
    if name == "torch_alloc":
        backend, sizes = args[0], [int(a) for a in args[3:]]
        asynchronous = backend == "cudaMallocAsync"
        zero = asynchronous and async_stats_zero  # PyTorch: some of that backend's stats "are always reported as zero"
        steps = [{"us": 50.0, "allocated": (i % 8 + 1) * 10 * MiB, "reserved": (i % 8 + 2) * 10 * MiB} for i in range(200)]
        stats = ({"allocated_bytes.all.peak": 9 * MiB, "reserved_bytes.all.peak": 99 * MiB} if asynchronous else
                 {"allocated_bytes.all.peak": 9 * MiB, "segment.all.peak": 3, "num_alloc_retries": 0 or 1})
        return [{"library": "PyTorch 2.11.0", "backend": "native" if backend_ignored else backend, "asked": backend, "default_pool": DEFAULT,
                 "came_from": DEFAULT if asynchronous else 0, "before": _state(0),
                 "after": _state(UINT64_MAX if asynchronous else 0)},
                {"empty_cache": True, "in_use": 16 * MiB,
                 "before": {"allocated": 16 * MiB, "reserved": 0 if zero else 80 * MiB, "default_pool": _state(0, 82 * MiB)},
                 "after": {"allocated": 16 * MiB, "reserved": 0 if zero else 16 * MiB,
                           "default_pool": _state(0, 82 * MiB if asynchronous and async_pool_kept else 16 * MiB)}},
                {"varying": True, "steps": steps, "max_allocated": 80 * MiB, "max_reserved": 100 * MiB},
                {"memory_stats": True, "keys": 120, "nonzero": stats}] + _loops(sizes, default_pool=_state(0), reserved=0)
    if name == "rmm_pools":
        mode = args[0]
        doc = ("Memory resource that uses cudaMallocAsync/cudaFreeAsync ... initial_pool_size : int | str, optional "
               "Initial pool size in bytes. If provided, the pool will be primed by allocating and immediately "
               "deallocating this amount of memory ... If not provided, the release threshold is set to the maximum "
               "representable uint64_t value")
        if mode == "own":
            initial, sizes = int(args[2]), [int(a) for a in args[3:]]
            made = [{"library": "RMM 26.10.0", "initial_pool_size": size, "device_memory_taken": size or 0,
                     "came_from": RMM_POOL, "default_pool": DEFAULT, "own_pool": True,
                     "pool": _state(UINT64_MAX, max(size or 0, 2 * MiB)), "before": _state(0), "after": _state(0),
                     "doc": doc} for size in (initial, None)]
            return made + [x for x in _loops(sizes, default_pool=_state(0), array=False) if x["loop"] != "calls"]
        n = int(args[1])
        separate = mode == "separate"
        return [{"mode": mode, "round": r, "size": n, "rmm_pool_is_default": mode == "shared-default-pool",
                 "cupy_pool_is_default": mode != "shared-through-rmm", "one_pool": not separate,
                 "reserved": (2 if separate else 1) * n, "thresholds": [UINT64_MAX] * (2 if separate else 1),
                 "device_memory_taken": (2 if separate else 1) * n} for r in range(3)]
    if name == "cuda_core_pools":
        sizes = [int(a) for a in args[1:]]
        return [{"library": "cuda.core 1.2.0", "api": "cuda.core", "same_pool": True, "default_pool": DEFAULT,
                 "came_from": DEFAULT, "before": _state(0), "after": _state(UINT64_MAX), "own_view": UINT64_MAX}] \
            + _loops(sizes, default_pool=_state(0), array=False)
    raise AssertionError(f"the notebook runs a program the test does not know: {name}")


def run_notebook(tmp_path, shared=None, **bad):
    """The notebook's cells, on a stand-in whose runs print canned()'s lines; `lesson.requires`: what each run asked
    to import (bare.py's by the library it tries); `shared`: other processes computing on its GPU."""
    import matplotlib.pyplot as plt

    plt.close("all")  # the figures of the runs before (each test runs the notebook once or twice)
    lesson = StandIn(tmp_path, lambda file, args: canned(Path(file).stem, [str(a) for a in args], **bad), shared=shared)
    ns = run_cells(NOTEBOOK.stem, lesson)
    lesson.requires = {(f"bare {args[0]}" if Path(f).stem == "bare" else Path(f).stem): req for f, args, req in lesson.asked}
    return lesson, ns


def test_the_cells_read_canned_output(tmp_path, capsys):
    lesson, ns = run_notebook(tmp_path)
    assert lesson.requires["torch_alloc"] == ("cupy", "torch") and lesson.requires["rmm_pools"] == ("cupy", "rmm")
    assert lesson.requires["cuda_core_pools"] == ("cupy", "cuda.core")
    assert lesson.requires["bare torch"] == ("cupy",) and lesson.requires["bare cupy"] == ("cupy",)  # bare.py says what is missing
    assert [s for s, _, _ in ns["summary"].rows] == [
        "CuPy MemoryPool (the default)", "CuPy MemoryAsyncPool", "CuPy without a pool", "cudaMallocAsync, no library pool",
        "PyTorch backend:native", "PyTorch backend:cudaMallocAsync", "RMM CudaAsyncMemoryResource()",
        "cuda.core DeviceMemoryResource (cuda.core)"]
    out = capsys.readouterr().out
    assert "checked: bare.py lies within a factor of 3" in out and "rank those settings in the same order" in out
    # Python's own overhead, computed from the canned medians: Python's preallocated loop (21) minus C++'s (16)
    assert "through CuPy's binding cost 5.0 µs more than in C++" in out
    assert len(lesson.figures) >= 2 and all(0 < b[0] <= b[1] for _, _, b in lesson.figures.values())
    rows = {r["bare.py"]: r for r in ns["checked"]}
    assert len(rows) == 7 and rows["CuPy MemoryPool"]["predicted for bare.py µs"] == 302.0 + 10.0 - 7.0


def test_a_library_missing_where_bare_ran_is_reported_not_measured(tmp_path, capsys):
    _, ns = run_notebook(tmp_path, bare_missing=("rmm",))
    out = capsys.readouterr().out
    assert "(rmm: not installed where bare.py ran, not measured)" in out
    row = next(r for r in ns["checked"] if r["bare.py"] == "rmm")
    assert row["bare.py µs"].startswith("not measured") and row["bare ÷ predicted"] is None


def test_the_bare_check_and_the_floor_fail_on_wrong_data(tmp_path):
    with pytest.raises(AssertionError, match="bare.py and the main figures disagree"):
        run_notebook(tmp_path, bare_factor=10.0)
    with pytest.raises(AssertionError, match="the floor runs on the default pool at UINT64_MAX"):
        run_notebook(tmp_path, floor_threshold=0)


def test_empty_cache_under_cudamallocasync_is_judged_by_the_default_pool_not_by_pytorchs_statistics(tmp_path):
    """PyTorch documents some of backend:cudaMallocAsync's statistics as always zero: a memory_reserved() of 0 is no
    failure; the default pool keeping the freed 64 MiB after empty_cache() is."""
    run_notebook(tmp_path, async_stats_zero=True)
    with pytest.raises(AssertionError, match="cudaMallocAsync: empty_cache.. should release the freed 64 MiB"):
        run_notebook(tmp_path, async_pool_kept=True)


def test_what_memoryasyncpool_does_beyond_its_documentation_is_reported_not_asserted(tmp_path, monkeypatch):
    """CuPy calls MemoryAsyncPool experimental and documents neither which pool used_bytes() reads nor that its
    constructor makes its pool current: another CuPy doing otherwise is a findings row and its own sentence."""
    import IPython.display

    from streamalloc import plots

    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda *objs, **kw: shown.extend(objs))
    monkeypatch.setattr(plots.Table, "_ipython_display_", lambda self: shown.append(self), raising=False)
    run_notebook(tmp_path, cupy_other_ways=True)
    rows = {r["finding"]: r["measured"] for t in shown if isinstance(t, plots.Table) for r in t.rows if "finding" in r}
    assert rows["MemoryAsyncPool('default') makes the default pool current"] == "no", rows
    assert rows["used_bytes() reads the pool resolved at construction"] == "no"
    said = "".join(m.data for m in shown if isinstance(getattr(m, "data", None), str))
    assert "did not make its pool current" in said and "a constructor that changes" not in said
    assert "did not both read the pool it was built with" in said


def test_on_a_shared_gpu_a_bare_loop_far_off_is_not_verified_not_failed(tmp_path, capsys):
    """Other processes computing on the GPU can move one process's loop by a factor of 3: there the check says "not
    verified" and the lesson goes on; alone on the GPU the same data fails (above)."""
    run_notebook(tmp_path, shared=2, bare_factor=10.0)
    out = capsys.readouterr().out
    assert "not verified: bare.py is off by more than a factor of 3 for" in out and "on a GPU 2 other process(es)" in out
    assert "checked: bare.py lies within" not in out and "; ;" not in out and ";  (" not in out, out


@pytest.mark.parametrize("bad, message", [({"race_fixed_overwritten": 5}, "once A waits for B"),
                                          ({"backend_ignored": True}, "did not take the backend")])
def test_a_wrong_result_fails_its_check(tmp_path, bad, message):
    with pytest.raises(AssertionError, match=message):
        run_notebook(tmp_path, **bad)


def test_a_race_count_without_reuse_is_shown_as_no_evidence(tmp_path, capsys):
    """Without reuse (CuPy's MemoryPool on the CUDA 12 reference) neither count says anything: the fixed
    variant is not called checked, and the race is not called shown."""
    run_notebook(tmp_path, race_reused=False)
    out = capsys.readouterr().out
    assert "y did not get x's address: no reuse, so the count shows nothing" in out
    assert "y never got x's address: nothing to check" in out and "checked: with A waiting" not in out


def test_the_race_count_is_reported_beside_the_reuse(tmp_path, capsys):
    run_notebook(tmp_path)
    out = capsys.readouterr().out
    assert "MemoryPool: y got x's address and" in out and "no reuse" not in out


def test_the_torch_backends_start_together_and_take_turns():
    """Each backend is a process of its own (PyTorch reads it once); the two start at once so that their imports
    overlap, and each takes its turn on the GPU after its imports, before any CUDA call."""
    runs = [c for c in cells() if '"torch_alloc.py"' in "".join(c["source"]) and "%%writefile" not in "".join(c["source"])]
    assert len(runs) == 1 and "sa.together.run(lesson" in "".join(runs[0]["source"])
    src = programs()["torch_alloc.py"]
    assert src.index("import torch") < src.index("gpu_turn()  #") < src.index("rt.deviceGetDefaultMemPool")


def test_the_programs_run_together_take_their_turn():
    """Every program a cell starts with sa.together.run takes the GPU turn; the rest run alone with lesson.run."""
    together = {name for c in cells() for name in programs() if f'("{name}"' in "".join(c["source"])
                and "sa.together.run(" in "".join(c["source"])}
    assert together == {"cupy_pools.py", "torch_alloc.py", "rmm_pools.py", "cuda_core_pools.py", "bare.py"}
    for name in together:
        assert "STREAMALLOC_GPU_TURN" in programs()[name] or "gpu_turn()" in programs()[name], name
    # bare.py runs in each library's section, beside that library's programs, once per library
    bare_runs = [lib for c in cells() for lib in ("cupy", "torch", "rmm", "cuda.core")
                 if f'("bare.py", ["{lib}", AT, ITERATIONS]' in "".join(c["source"])]
    assert bare_runs == ["cupy", "torch", "rmm", "cuda.core"]
