"""Notebook 08's Python side, without a GPU: its programs (the Python replayer's reading, loop and settings on
stand-ins, the C++ replayer built), and the notebook's cells run end to end on canned output. The trace model is
tests/test_traces.py's; an input file's part in a recording's key, tests/test_replay.py's.

The canned output comes from a toy model of the replayers written here (a pool that keeps its peak, one that gives
everything back at a synchronization): its numbers are made up for the test, never recorded, and only exercise the
cells' tables, conclusions, timeline explorer and assertions, which must fail on a wrong result.
"""
import inspect
import itertools
import json
import os
import sys
import time
from pathlib import Path

import pytest
from notebook import StandIn, code_cells, run_cells
from notebook import programs as written

import streamalloc as sa
from streamalloc.course import REPO
from streamalloc.lessons import real_workloads as W
from streamalloc.traces import Trace, built_to_fragment, from_address_events, from_rmm_csv, slug

NAME = "08_real_workloads"
NOTEBOOK = REPO / "notebooks" / f"{NAME}.ipynb"
MiB = 1 << 20


def cells():
    return code_cells(NAME)


def programs():
    return written(NAME)


# -- the programs --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("library", ["", "torch"])
def test_the_python_replayer_reads_a_trace_as_the_module_writes_it(library, tmp_path):
    """A trace's comments (its name, source, steps and the library that recorded it) are not events to it."""
    t = built_to_fragment()
    t.library, t.how = library, "one a step" if library else ""
    name, events = replayer().read_trace(t.write(tmp_path))
    assert name == t.name and events == t.events


def test_the_notebook_writes_its_programs_and_they_parse():
    assert sorted(programs()) == ["cupy_filter.py", "replay_alloc.py", "replay_trace.cu", "torch_step.py"]
    for name, src in programs().items():
        if name.endswith(".py"):
            compile(src, name, "exec")
        assert "usage:" in src, name


# -- the cells, on canned output -----------------------------------------------------------------------------------
def toy(trace: Trace, name: str, kind: str, keep: bool, us: float, spread: float = 0.0, work_us: float = 0,
        process: str | None = None, rounds: int = W.ROUNDS, falling: bool = False) -> dict:
    """A made-up replay record in the replayers' format: a pool that keeps its peak (keep) or gives back all that is
    unused at each step; its rounds' medians (W.ROUNDS of them, or none: its footprint only) spread evenly over
    `spread` µs around `us`, rising from round to round (or `falling`: noise the others' rounds do not share)."""
    use = trace.in_use()
    reserved, top = [], 0
    for u in use:
        top = max(top, u) if keep else u
        reserved.append(top)
    ends = [u for u, e in zip(use, trace.events) if e[0] == "s"]
    warm = [max(use) if keep else u for u in ends]
    changes = lambda r: (sum(b > a for a, b in zip([0] + r, r)), sum(b < a for a, b in zip([0] + r, r)))  # noqa: E731
    g, s = changes(reserved)
    warms = ["warm 1"] if process else ["warm 1", "warm 2", "warm 3"]
    passes = ["cold, sampled", "warm, sampled"] + [f"round {r} {p}" for r in range(1, rounds + 1)
                                                   for p in ["cold", *warms]]
    round_us = [us + spread * (k / max(rounds - 1, 1) - 0.5) for k in range(rounds)][::-1 if falling else 1]
    record = {"allocator": name, "kind": kind, "threshold": 0, "reserve": 0, "trim_every": 0, "trim_to": 0,
              "work_us": work_us, "steps": len(ends), "events": len(trace.events), "rounds": rounds,
              "step_us": [u for u in round_us for _ in range(len(warms) * len(ends))], "round_us": round_us,
              "cold_us": [2 * us * len(ends)] * rounds, "passes": passes,
              "held": [h for p in passes for h in (ends if "cold" in p else warm)],
              "peak_reserved": max(reserved), "peak_in_use": max(use), "grows": g, "shrinks": s,
              "grows_warm": 0 if keep else g, "shrinks_warm": 0 if keep else s,
              "timeline_event": list(range(len(use))), "timeline_in_use": use, "timeline_reserved": reserved}
    return {**record, "process": process} if process else record


def canned(break_keep=False, spread=0.0, again_us=0.0):
    """What the notebook's programs print, from the toy model: outputs(file, args) for a StandIn. again_us: how far the
    A/A twin's rounds lie from its setting's (0: the same figures). With `spread`, the explicit pool's rounds fall
    while the others' rise: noise the pairing cannot cancel."""
    def outputs(file, args):
        if file == "torch_step.py":
            steps = [[["alloc", 1000 + k * 10 + i, (i + 1) * MiB, 7] for i in range(4)]
                     + [["free_completed", 1000 + k * 10 + i, (i + 1) * MiB, 7] for i in range(1, 4)] for k in range(4)]
            return [{"model": "toy", "torch": "0", "parameters": 1, "lengths": [1, 2, 3, 4]}] \
                + [{"step": k, "events": e} for k, e in enumerate(steps)]
        if file == "cupy_filter.py" and args[0] == "hook":
            return [{"step": k, "events": [["alloc", 5, MiB << k, 1], ["free", 5, MiB << k, 1]]} for k in range(4)]
        if file == "cupy_filter.py":
            return [{"skipped": "RMM is not installed in this Python (canned)"}]
        if file == "replay_trace.cu":
            t = Trace.parse(Path(args[0]).read_text())
            head = {"trace_events": len(t.events), "trace_steps": t.stats()["steps"], "trace_streams": 1,
                    "trace_peak": t.stats()["peak"]}
            work = float(args[2]) if len(args) > 2 else 0.0
            n = int(args[3]) if len(args) > 3 else 5  # replay_trace.cu's own default
            keep = toy(t, "default pool, threshold UINT64_MAX", "default", True, 100.0 + work, spread, work, rounds=n)
            if break_keep:
                keep["held"] = [0] * len(keep["held"])
            return [head, toy(t, "cudaMalloc", "malloc", False, 300.0 + 2 * work, 0.0, work, rounds=n),
                    toy(t, "default pool, threshold 0", "default", False, 200.0 + work, 0.0, work, rounds=n),
                    keep, toy(t, "explicit pool, peak reserved up front", "explicit", True, 90.0 + work, spread, work,
                              rounds=n, falling=True),
                    toy(t, "one buffer (no allocator)", "one-buffer", True, 50.0 + work, 0.0, work, rounds=n)]
        assert file == "replay_alloc.py", file
        lib, paths = args[0], [a for a in args[1:] if a not in ("--footprint", "--pair")]
        footprint = args[args.index("--footprint") + 1:] if "--footprint" in args else []
        pair = {"turns_with": {"torch": "torch-async", "torch-async": "torch"}[lib]} if "--pair" in args else {}
        out = [{"library": lib, "torch": "0.0+cu130", "backend": "cudaMallocAsync" if lib == "torch-async" else "native"}] \
            if lib.startswith("torch") else []
        for p in paths:
            t = Trace.parse(Path(p).read_text())
            n = 0 if p in footprint else W.ROUNDS
            if lib == "rmm":
                out.append({"trace": t.name, "allocator": "RMM pool", "skipped": "RMM is not installed (canned)"})
            else:
                out.append({**toy(t, f"{lib} pool", "python", lib != "torch-async", 400.0, process=lib, rounds=n),
                            "trace": t.name, **pair})
            if lib == "torch-async":  # the A/A twin: the same setting again, `again_us` from it
                out.append({**toy(t, f"{lib} pool (again)", "python", False, 400.0 + again_us, process=lib, rounds=n),
                            "trace": t.name, "again_of": f"{lib} pool", **pair})
        return out
    return outputs


def lesson_08(tmp_path, outputs=None):
    return StandIn(tmp_path, outputs or canned(), name=NAME, label="Test GPU, replayed from a canned run")


def test_the_cells_run_on_canned_output_and_conclude_from_it(tmp_path, capsys):
    """W.ROUNDS (nine) rounds, the explicit pool 10 µs a step ahead of the pool at UINT64_MAX in every one: named,
    with its lead and p; the A/A twin is a tie, and the busy GPU's cudaMalloc time a key figure."""
    lesson = lesson_08(tmp_path)
    ns = run_cells(NAME, lesson)
    printed = capsys.readouterr().out
    assert "No RMM trace" in printed and "RMM is not installed" in printed
    assert "torch-async: PyTorch 0.0+cu130, backend cudaMallocAsync" in printed  # the build says its CUDA
    aa = [line for line in printed.splitlines() if "of the two" in line]
    assert len(aa) == 3 and all("tie" in line for line in aa), aa  # the A/A check on each timed trace
    assert set(ns["traces"]) == {"PyTorch training step", "CuPy filter pipeline", "built to fragment",
                                 "built to fragment, one stream"}
    assert len(lesson.figures) == 2 and all(v > 0 for v, _, _ in lesson.figures.values())
    t = ns["traces"]["built to fragment"]
    text = W.conclusion(ns["results"], t, "Test GPU")
    assert ("CUDA (C++): the cheapest of its settings is explicit pool, peak reserved up front, 40.0 µs (middle rounds "
            "40.0–40.0), ahead of default pool, threshold UINT64_MAX, 50.0 µs (middle rounds 50.0–50.0), by 10.0 µs "
            "(the median of the differences in 9 paired rounds; exact signed-rank test, p ≤ 0.012 against each other "
            "setting, Holm-corrected over 3)") in text, text
    # the A/A twin is no choice of PyTorch's: its own check, not a setting the library's verdict weighs
    pytorch = next(line for line in text.splitlines() if line.startswith("- PyTorch: "))
    assert pytorch.startswith("- PyTorch: a tie for the cheapest of its settings: torch pool") and "(again)" not in \
        pytorch, pytorch
    assert text.count("Test GPU") == 1 and "threshold 0 (" in text  # it gave memory back once warm
    assert (tmp_path / "cupy_hook_log.jsonl").read_text().count("\n") == 4  # the hook log, as a learner's file


def test_five_rounds_are_a_tie_that_says_why(tmp_path, capsys, monkeypatch):
    """The committed recordings made before nine rounds hold five: however far apart, no setting is named (the
    smallest two-sided p of five paired rounds is 2/32), the sentence says so, and no busy-GPU time is a key figure."""
    monkeypatch.setattr(W, "ROUNDS", 5)
    lesson = lesson_08(tmp_path)
    ns = run_cells(NAME, lesson)
    assert len(lesson.figures) == 1 and "within the noise, so no key figure" in capsys.readouterr().out
    text = W.conclusion(ns["results"], ns["traces"]["built to fragment"], "Test GPU")
    assert ("CUDA (C++): a tie for the cheapest of its settings: explicit pool, peak reserved up front, 40.0 µs "
            "(middle rounds 40.0–40.0); default pool, threshold UINT64_MAX, 50.0 µs") in text, text
    assert "5 rounds cannot decide at 5% over 3 comparisons: the smallest two-sided p of 5 paired rounds is 2/32" in text
    assert "the cheapest of its settings is" not in text


def test_a_winner_within_the_noise_is_a_tie(tmp_path):
    """The explicit pool (90 µs) and the pool at UINT64_MAX (100 µs), each spread over 30 µs across the rounds, the
    explicit pool's falling as the other's rise: the pairing cannot cancel it, a tie, named as one."""
    ns = run_cells(NAME, lesson_08(tmp_path, canned(spread=30.0)))
    text = W.conclusion(ns["results"], ns["traces"]["built to fragment"], "Test GPU")
    assert "CUDA (C++): a tie for the cheapest of its settings: explicit pool, peak reserved up front, 40.0 µs" in text
    assert "; default pool, threshold UINT64_MAX, 50.0 µs" in text and "is not ahead of default pool, " \
        "threshold UINT64_MAX (p = " in text, text
    assert [f.name for f in W.verdicts(ns["results"], ns["traces"]["built to fragment"])["CUDA (C++)"]] == [
        "explicit pool, peak reserved up front", "default pool, threshold UINT64_MAX"]


def test_figures_and_verdicts():
    """A figure's spread is the range of its middle rounds (one slow round is left out), shown, never the verdict: a
    winner is faster in the rounds paired by index past the exact test at 5 % (Holm), by at least 5 % of the other's
    whole time; else it is a tie."""
    a = W.Figure("a", [10, 11, 12, 13, 90])  # one slow round
    assert a.median == 12 and a.middle == [11, 12, 13] and a.spread == 2
    # five rounds: never a winner, however far apart
    assert not W.ahead(a, W.Figure("c", [90, 91, 92, 93, 190]))
    a = W.Figure("a", [10, 11, 12, 13, 14, 15, 16, 17, 18], [100] * 9)  # above a floor: 100 µs a step in all
    drifted = W.Figure("d", [v + 3 for v in a.values], [103] * 9)  # 3 µs slower in every round, 3 % of its step
    far = W.Figure("f", [v + 8 for v in a.values], [108] * 9)  # 8 µs slower in every round, 7 % of its step
    noisy = W.Figure("n", [24, 5, 22, 3, 20, 1, 30, 9, 28], [108] * 9)  # slower in some rounds, faster in others
    assert W.ahead(a, far) and not W.ahead(far, a) and not W.ahead(a, drifted) and not W.ahead(a, noisy)
    assert W.ahead(W.Figure("a", a.values), W.Figure("d", drifted.values))  # no whole time: 3 µs is 18 % of 17 µs
    assert [f.name for f in W.leaders([far, noisy, a])] == ["a", "n"]
    assert "the cheapest x is a, 14.0 µs" in W.verdict([a, far], "x")
    assert "a tie for the cheapest x: a" in W.verdict([a, noisy, far], "x")
    assert W.verdict([a], "x").startswith("only a was measured: 14.0 µs")
    assert W.verdict([], "x") == "no x was measured"


def test_a_pool_at_uint64_max_that_keeps_nothing_fails_the_cells(tmp_path):
    with pytest.raises(AssertionError, match="keeps its peak across syncs"):
        run_cells(NAME, lesson_08(tmp_path, canned(break_keep=True)))


def test_a_recording_whose_replayer_names_a_setting_otherwise_is_one_message(tmp_path):
    """A recording made by a replay_trace.cu that named its settings otherwise: the cell that needs a setting names it
    and the names the recording has, where it raised a bare KeyError or ValueError."""
    base = canned()

    def renamed(file, args):
        out = base(file, args)
        return [{**r, "allocator": "cudaMalloc (synchronous)"} if r.get("allocator") == "cudaMalloc" else r
                for r in out] if file == "replay_trace.cu" else out

    with pytest.raises(sa.errors.RecordingError, match=r"no replay of the trace 'built to fragment' by the setting "
                       r"'cudaMalloc' \(its replays: cudaMalloc \(synchronous\), default pool, threshold 0, .*re-record"):
        run_cells(NAME, lesson_08(tmp_path, renamed))
    with pytest.raises(sa.errors.RecordingError, match="by the setting 'default pool, threshold 0'"):
        W.setting([{"trace": "t", "allocator": "default pool, threshold 0", "skipped": "no"}], "t",
                  "default pool, threshold 0")


def test_the_table_marks_a_skipped_allocator():
    t = built_to_fragment()
    rows = W.rows([{"trace": t.name, "allocator": "RMM pool", "skipped": "not installed"},
                   {**toy(t, "x", "default", True, 10.0), "trace": t.name}], t)
    assert rows[0]["µs per step"] == "skipped" and rows[1]["reserved / trace peak"] == 1.0


def test_replay_trace_cu_builds(tmp_path):
    """The replayer compiles with the course's include folder (where nvcc is): as the notebook writes it, into the
    shared programs folder, so that where notebook 08 or lab 7 built it already this is that build (a program is
    there only where nvcc built exactly this text, header, flags and nvcc)."""
    from streamalloc import cuda, gpu
    from streamalloc.course import programs_folder, written_programs
    if gpu.nvcc_path() is None:
        pytest.skip("no nvcc here")
    src = tmp_path / "replay_trace.cu"
    src.write_text(dict(written_programs(NOTEBOOK))["replay_trace.cu"])
    assert cuda.build(src, arch=cuda.arch_flags("9.0", False), out_dir=programs_folder()).exists()


def test_the_lab_uses_notebook_08_s_replayer_unchanged():
    assert written("lab7_choose_allocator")["replay_trace.cu"] == programs()["replay_trace.cu"]


@pytest.mark.parametrize("name,args", [("cupy_filter.py", ["hook", "2"]), ("replay_alloc.py", ["cupy", "TRACE"])])
def test_a_program_without_a_gpu_says_so(name, args, tmp_path):
    """Without a usable GPU the programs exit non-zero with a message, and print no trace or measurement."""
    import subprocess
    try:
        import cupy
        if cupy.cuda.runtime.getDeviceCount() > 0:
            pytest.skip("a GPU is here")
    except ImportError:
        pytest.skip("CuPy is not installed")
    except Exception:
        pass
    (tmp_path / name).write_text(programs()[name])
    args = [str(built_to_fragment().write(tmp_path)) if a == "TRACE" else a for a in args]
    done = subprocess.run([sys.executable, str(tmp_path / name), *args], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "needs a CUDA GPU" in done.stderr and "{" not in done.stdout, done


def replayer():
    """replay_alloc.py as the notebook writes it, imported as a module: importing it runs nothing (main() runs only
    as a program), imports no library and touches no GPU."""
    import types
    module = types.ModuleType("replay_alloc")
    module.__file__ = "replay_alloc.py"
    exec(compile(programs()["replay_alloc.py"], "replay_alloc.py", "exec"), module.__dict__)
    return module


class FakeAllocator:
    """Stands for a library in replay_alloc.py's loop: holds the most it ever had in use (a pool at UINT64_MAX)."""

    name = "fake pool"

    def __init__(self):
        self.top, self.live, self.closed = 0, 0, False

    def stream(self, i):
        import contextlib
        return contextlib.nullcontext()

    def allocate(self, nbytes):
        return bytearray(1)

    def sync(self):
        pass

    def in_use(self, live=0):
        self.live = live
        self.top = max(self.top, live)
        return live

    def reserved(self):
        return self.top

    def close(self):
        self.closed = True


def test_the_python_replayer_s_loop_and_record_on_a_stand_in(tmp_path, monkeypatch, capsys):
    """replay_alloc.py's replay and measure (everything but the libraries) on a stand-in allocator: the in-use curve
    is the trace's own, the record has every field the lesson module reads, and the tables take it."""
    rep = replayer()
    t = built_to_fragment()
    a = FakeAllocator()
    out = rep.replay(t.events, a, True)
    assert out["in_use"] == t.in_use() and out["shrinks"] == 0 and out["grows"] > 0
    made = []
    units = rep.measure(t.name, t.events, [("stand-in", lambda first: made.append(first) or a, {})], 5, {"process": "x"})
    next(units)
    assert made == [True] and not capsys.readouterr().out, "a unit at a time: first the sampled passes, no record yet"
    assert len(list(units)) == 5, "then one unit per round"
    record = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    steps = t.stats()["steps"]
    assert made == [True] + [False] * 5, "sampled once from a fresh state, then five rounds, each from a fresh state"
    assert a.closed and record["peak_in_use"] == t.stats()["peak"] and len(record["step_us"]) == 5 * steps
    assert len(record["round_us"]) == len(record["cold_us"]) == 5 and len(record["held"]) == len(record["passes"]) * steps
    assert record["passes"][:3] == ["cold, sampled", "warm, sampled", "round 1 cold"] and record["process"] == "x"
    assert (record["trace_peak"], record["trace_largest"]) == (t.stats()["peak"], t.stats()["largest"])
    assert len(record["timeline_event"]) == len(record["timeline_in_use"]) <= 256
    row = W.rows([record], t)[0]
    assert row["reserved / trace peak"] == 1.0 and row["grew / shrank (warm)"] == "0 / 0"
    made.clear()  # a trace replayed for its footprint only (--footprint), and a setting in UNTIMED: sampled, not timed
    assert len(list(rep.measure(t.name, t.events, [("stand-in", lambda first: made.append(first) or a, {})], 0))) == 1
    list(rep.measure(t.name, t.events, [(next(iter(rep.UNTIMED)), lambda first: made.append(first) or a, {})], 5))
    for line in capsys.readouterr().out.strip().splitlines():
        record = json.loads(line)
        assert record["rounds"] == 0 and record["round_us"] == record["cold_us"] == record["step_us"] == []
        assert record["passes"] == ["cold, sampled", "warm, sampled"] and record["peak_in_use"] == t.stats()["peak"]
        row = W.rows([record], t)[0]
        assert row["µs per step"] == "not timed" and row["note"] == W.NOT_TIMED and row["reserved / trace peak"] == 1.0
        assert not W.figures([record], t, W.library(record))  # no time to rank
    assert made == [True, True]



def test_each_setting_is_set_against_the_floor_of_its_own_process_round_by_round():
    """A Python loop's time differs between processes: each setting is set against the floor timed in its own process,
    in the same round, not another's. A setting below its floor is marked (the floor's views cost more there than the
    allocator), and PyTorch's three settings are ranked together, CuPy's apart."""
    t = built_to_fragment()
    recs = [{**toy(t, name, "python", True, us, process=p), "trace": t.name} for name, us, p in
            (("one buffer (PyTorch loop)", 500.0, "torch"), ("PyTorch native", 600.0, "torch"),
             ("PyTorch cudaMallocAsync", 400.0, "torch-async"),
             ("one buffer (PyTorch loop, cudaMallocAsync's process)", 500.0, "torch-async"),
             ("CuPy MemoryPool", 700.0, "cupy"), ("one buffer (CuPy loop)", 200.0, "cupy"))]
    drift = [0.0, 20.0, -20.0, 10.0, -10.0, 30.0, -30.0, 5.0, -5.0]  # the floor drifts: each round against its own
    recs[0]["round_us"] = [500.0 + d for d in drift]
    recs[1]["round_us"] = [600.0 + d for d in drift]
    assert W.own_rounds(recs[1], recs) == [100.0] * 9 and W.own_us(recs[4], recs) == 500 and W.own_us(recs[5], recs) == 0
    rows = {r["allocator"]: r for r in W.rows(recs, t)}
    assert rows["PyTorch cudaMallocAsync"]["above its loop's floor"] == -100 and "below" in rows["PyTorch cudaMallocAsync"]["note"]
    assert rows["PyTorch native"]["note"] == "" and rows["PyTorch native"]["spread of the rounds"] == 0
    text = W.conclusion(recs, t, "Test GPU")
    assert "- PyTorch: the cheapest of its settings is PyTorch cudaMallocAsync, -100 µs" in text, text
    assert "- CuPy: only CuPy MemoryPool was measured: 500 µs" in text, text


def test_table_figures_are_whole_above_a_thousand():
    assert W.num(13576.34) == 13576 and W.num(662.84) == 662.8 and sa.plots.Table._fmt(W.num(40702.0)) == "40702"


def test_the_programs_run_together_take_their_turn_after_their_imports():
    """The replays, which time and count, start together and take the GPU turn (STREAMALLOC_GPU_TURN) before they
    touch the GPU; the trace programs, whose output is what they asked for, run at once without turns; the C++
    replayer runs alone with lesson.run."""
    (replays,) = [src for src in cells() if "sa.together.run(" in src]
    (traces,) = [src for src in cells() if "W.made(" in src]
    assert '"torch_step.py"' in traces and '"cupy_filter.py"' in traces
    assert "turns=False" in inspect.getsource(W.made)
    assert "turns=False" not in replays and '"replay_alloc.py"' in replays and "replay_trace.cu" not in replays
    turn = "turn = os.open(os.environ[TURN]"
    rep = programs()["replay_alloc.py"]
    measure = rep.index("    for k in range(units):  # each next() runs one unit")
    assert rep.index("import rmm  # noqa") < rep.index("turns = Turns(") < rep.index(turn) < measure
    # each context starts before its turn, beside the other programs' imports: nothing timed waits for one
    assert rep.index("torch.cuda.mem_get_info()\n") < rep.index(turn) and rep.index("runtime.memGetInfo()\n") < rep.index(turn)
    assert "STREAMALLOC_GPU_TURN" not in programs()["torch_step.py"] + programs()["cupy_filter.py"]


class FakeTorch:
    """Just enough of torch for replay_alloc.py's Torch class: the expandable_segments setting, and segments made
    under it as PyTorch's snapshot reports them."""

    def __init__(self, new_api=True):
        import types
        self.expandable, self.segments, self.calls = False, [], []
        old = self.set if not new_api else lambda conf: pytest.fail("the call deprecated since PyTorch 2.11")
        cuda = types.SimpleNamespace(
            empty_cache=lambda: self.segments.clear(), reset_peak_memory_stats=lambda: None, synchronize=lambda: None,
            mem_get_info=lambda: (1 << 30, 2 << 30),
            memory=types.SimpleNamespace(_set_allocator_settings=old, _snapshot=lambda: {"segments": self.segments}))
        self.cuda, self.uint8 = cuda, "uint8"
        self._C = types.SimpleNamespace(_accelerator_setAllocatorSettings=self.set) if new_api else types.SimpleNamespace()

    def set(self, conf):
        self.calls.append(conf)
        key, _, value = conf.partition(":")
        assert key == "expandable_segments" and value in ("True", "False"), conf
        self.expandable = value == "True"

    def empty(self, n, dtype=None, device=None):
        import types
        address = 1 << 30 + len(self.segments)
        self.segments.append({"address": address - 4096, "total_size": 2 * n, "is_expandable": self.expandable})
        self.segments.insert(0, {"address": 0, "total_size": 4096, "is_expandable": not self.expandable})  # another
        return types.SimpleNamespace(data_ptr=lambda: address)


@pytest.mark.parametrize("new_api", [True, False])
def test_one_process_replays_pytorch_native_with_and_without_expandable_segments(monkeypatch, new_api):
    """The torch library's settings: native, its one-buffer floor, then native with expandable_segments:True, each
    emptying the cache and setting expandable_segments before it makes a segment (through the call PyTorch 2.11 has,
    or the older one); each reports what its segments were. backend:cudaMallocAsync stays a process of its own and
    switches nothing."""
    fake = FakeTorch(new_api)
    monkeypatch.setitem(sys.modules, "torch", fake)
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "restored after the test")  # the program sets it at its top
    rep = replayer()
    for library, names in (("torch", ["PyTorch native", "one buffer (PyTorch loop)", "PyTorch native, expandable_segments"]),
                           ("torch-async", ["PyTorch cudaMallocAsync", "one buffer (PyTorch loop, cudaMallocAsync's process)",
                                            "PyTorch cudaMallocAsync (again)"])):
        made = [(name, make(True), fields) for name, make, fields in rep.settings(library, 64, 64)]
        assert [n for n, _, _ in made] == names
        said = {n: a.setting()["segments_expandable"] for n, a, _ in made}
        if library == "torch":
            assert said == {names[0]: ["False"], names[1]: None, names[2]: ["True"]}  # the floor makes no segment to ask about
            assert fake.calls == ["expandable_segments:False", "expandable_segments:False", "expandable_segments:True"]
        else:  # nothing switched under the async backend; the A/A twin says what it repeats
            assert said == dict.fromkeys(names) and len(fake.calls) == 3
            assert [f for _, _, f in made] == [{}, {}, {"again_of": "PyTorch cudaMallocAsync"}]


def switch_ignored(file, args):
    """PyTorch's native process, where the run-time switch to expandable_segments did not take."""
    out = canned()(file, args)
    if file == "replay_alloc.py" and args[0] == "torch":
        for p in [a for a in args[1:args.index("--footprint")] if a != "--pair"]:
            t = Trace.parse(Path(p).read_text())
            for name, said in (("PyTorch native", ["False"]), ("PyTorch native, expandable_segments", ["False"])):
                out.append({**toy(t, name, "python", True, 400.0), "trace": t.name, "segments_expandable": said})
    return out


def test_an_expandable_setting_whose_segments_were_not_expandable_fails_the_cell(tmp_path):
    with pytest.raises(AssertionError, match="expandable_segments did not apply"):
        run_cells(NAME, lesson_08(tmp_path, switch_ignored))


class LiveStub:
    """A live lesson whose reference holds a run of some programs: which programs ran, which came from it."""
    live, name = True, "08_real_workloads"

    def __init__(self, recorded, build):
        self.recorded, self.ran, self.build = recorded, [], build

    def reference(self, file, args=()):
        return f"recorded {file}" if file in self.recorded else None

    def run(self, file, args=(), timeout=120, requires=()):
        self.ran.append(file)
        return f"ran {file}"


RUNS = {"torch": ("torch_step.py", [4], ("torch",)), "hook": ("cupy_filter.py", ["hook", 12], ("cupy",))}


def test_live_the_traces_are_the_committed_ones_unless_asked_or_recording(monkeypatch, tmp_path):
    """Live, a trace comes from the reference recording (its PyTorch start costs seconds); MAKE_TRACES or recording
    makes it here, and a program the reference has no run of runs."""
    lesson = LiveStub({"torch_step.py", "cupy_filter.py"}, tmp_path)
    assert W.made(lesson, RUNS) == {"torch": "recorded torch_step.py", "hook": "recorded cupy_filter.py"}
    assert lesson.ran == []
    assert W.made(lesson, RUNS, make=True) == {"torch": "ran torch_step.py", "hook": "ran cupy_filter.py"}
    lesson = LiveStub({"cupy_filter.py"}, tmp_path)
    assert W.made(lesson, RUNS) == {"torch": "ran torch_step.py", "hook": "recorded cupy_filter.py"}
    lesson = LiveStub({"torch_step.py", "cupy_filter.py"}, tmp_path)
    monkeypatch.setattr(sa.replay, "recording", lambda: True)
    assert W.made(lesson, RUNS) == {"torch": "ran torch_step.py", "hook": "ran cupy_filter.py"}


VERDICTS = """import json
print("VERDICTS " + json.dumps({f"{name}|{lib}": [f.name for f in top]
                                for name, t in timed.items() for lib, top in W.verdicts(results, t).items()}))"""


def test_the_reference_sets_name_the_same_winners(monkeypatch):
    """Replayed from each committed reference set (CUDA 13, and the CUDA 12 stack), 08 names, per trace and library,
    the same winner, or a tie in one that holds the other's winner: no set contradicts another. RMM's log and the
    hook's trace are one trace (replayed once) in both."""
    from notebook import executed

    from streamalloc import replay

    sets = [s for s in replay.available() if not replay.supplement(s) and not replay.another_model(s)
            and (replay.root() / s / NAME).is_dir()]
    assert len(sets) >= 2, f"two reference sets of {NAME}: {sets}"
    got = {}
    for name in sets:
        text, _ = executed(NAME, monkeypatch, env={"STREAMALLOC_MODE": "replay", "STREAMALLOC_REFERENCE": name},
                           then=VERDICTS)
        assert "RMM's log gives the hook's trace, event for event" in text, name
        got[name] = json.loads(text.split("VERDICTS ", 1)[1].splitlines()[0])
    first, *rest = sets
    for other in rest:
        assert got[first].keys() == got[other].keys()
        for key, a in got[first].items():
            b = got[other][key]
            agree = set(a) & set(b)  # the same winner, a tie holding the other's winner, or two ties that overlap
            assert agree, f"{key}: {first} names {a}, {other} names {b}"


def test_pytorch_s_current_stream_is_switched_only_where_the_trace_changes_stream(monkeypatch):
    """replay_alloc.py's Torch: each allocation and each free runs with its block's stream current, as `with
    torch.cuda.stream(s)` around each event gave it, but torch.cuda.set_stream is called only where the stream
    changes; close() makes the default stream current again."""
    import types

    calls, seen = [], []

    class Tensor:
        def __init__(self, n):
            self.n = n
            seen.append(("alloc", n, calls[-1] if calls else None))

        def __getitem__(self, _):
            return self

        def fill_(self, _):
            return self

        def __del__(self):
            seen.append(("free", self.n, calls[-1] if calls else None))

    streams = iter(range(100))
    cuda = types.SimpleNamespace(
        empty_cache=lambda: None, reset_peak_memory_stats=lambda: None, synchronize=lambda: None,
        mem_get_info=lambda: (1 << 30, 2 << 30), memory_stats_as_nested_dict=lambda: {},
        Stream=lambda: f"stream {next(streams)}", set_stream=calls.append, default_stream=lambda: "default")
    fake = types.SimpleNamespace(cuda=cuda, uint8="uint8", empty=lambda n, dtype=None, device=None: Tensor(n))
    monkeypatch.setitem(sys.modules, "torch", fake)
    rep = replayer()
    a = rep.Torch("PyTorch cudaMallocAsync")
    events = [("a", 0, 10, 0), ("a", 1, 11, 1), ("a", 2, 12, 1), ("f", 0), ("f", 1), ("f", 2), ("s",)]
    rep.replay(events, a, False)
    assert calls == ["stream 0", "stream 1", "stream 0", "stream 1"], calls  # four changes of stream, no more
    assert seen == [("alloc", 10, "stream 0"), ("alloc", 11, "stream 1"), ("alloc", 12, "stream 1"),
                    ("free", 10, "stream 0"), ("free", 11, "stream 1"), ("free", 12, "stream 1")], seen
    a.close()
    assert calls[-1] == "default"


@pytest.mark.parametrize("args", [["cupy", "--footprint"], ["cupy"]])
def test_the_python_replayer_without_a_trace_says_how_to_call_it(args, tmp_path):
    """No trace named (or only the --footprint mark): the usage, before any import or CUDA call, and no record."""
    import subprocess
    (tmp_path / "replay_alloc.py").write_text(programs()["replay_alloc.py"])
    done = subprocess.run([sys.executable, str(tmp_path / "replay_alloc.py"), *args], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode != 0 and "usage: replay_alloc.py <library> [--pair] <trace>..." in done.stderr, done
    assert "Traceback" not in done.stderr and not done.stdout, done


# -- the recordings: what each replay reports in use is the trace's -----------------------------------------------
def recorded_runs(folder: Path, program: str) -> list[dict]:
    """(args, records) of each recorded run of `program` in a set's folder of lesson 08 (none where it has none)."""
    from streamalloc import measure, replay
    path = folder / f"{program}.json"
    return [(r["args"], measure.parse(r.get("stdout", ""))) for r in replay.read_runs(path).values()] \
        if path.is_file() else []


def recorded_traces(folder: Path) -> dict:
    """{name: Trace} of the traces 08 replays, rebuilt from the set's own recordings of the programs that made them
    (as section 1 and section 5 build them: the hook's log, converted, is "cupy_hook_log")."""
    from streamalloc import traces
    got = {"built to fragment": built_to_fragment(), "built to fragment, one stream": built_to_fragment().one_stream()}
    for args, records in recorded_runs(folder, "torch_step"):
        got["PyTorch training step"] = from_address_events("", "", [s["events"] for s in records[1:]])
    for args, records in recorded_runs(folder, "cupy_filter"):
        if args[0] == "hook":
            got["CuPy filter pipeline"] = from_address_events("", "", [r["events"] for r in records])
            got["cupy_hook_log"] = traces.from_cupy_hook("".join(json.dumps(r) + "\n" for r in records))
        elif not records[0].get("skipped"):
            got["CuPy filter pipeline, RMM's log"] = from_rmm_csv("", "", records[0]["rmm_csv"],
                                                                   records[0]["step_rows"])
    return got


def near(value: int, target: int) -> bool:
    """Within an allocator's rounding of `target`: 3 %, or 8 MiB for a small trace."""
    return abs(value - target) <= max(0.03 * target, 8 * MiB)


def replays_of(folder: Path):
    """(trace's name, record) of every replay recorded in the set, C++ and Python (skipped libraries left out); a
    C++ run's trace is told by its file (slug of the name), and its peak is held to the rebuilt trace's."""
    known = recorded_traces(folder)
    by_file = {slug(name): name for name in known}
    for args, records in recorded_runs(folder, "replay_trace"):
        name = by_file[args[0].split("#", 1)[0].removesuffix(".trace")]
        assert records[0]["trace_peak"] == known[name].stats()["peak"], f"{folder}: {name}, rebuilt otherwise"
        yield from ((name, r) for r in records[1:])
    for _, records in recorded_runs(folder, "replay_alloc"):
        yield from ((r["trace"], r) for r in records if "allocator" in r and not r.get("skipped"))


def calibration_problems(folder: Path) -> tuple[int, list[str]]:
    """How many replays a set holds, and what is wrong with them: every setting's peak in use is the trace's peak
    (within its rounding), and reports no less reserved than that; a floor holds one buffer, the trace's largest
    block (the smaller of what it reports in use and reserved: replay_trace.cu counts the trace's bytes in use for
    every setting, reading no library, so there what it holds is cudaMemGetInfo's)."""
    known = {name: t.stats() for name, t in recorded_traces(folder).items()}
    seen, problems = 0, []
    for name, r in replays_of(folder):
        s = known[name]
        seen += 1
        said = f"{folder.parent.name}: {name}, {r['allocator']} ({r.get('process', 'C++')}):"
        if W.is_floor(r):
            held = min(r["peak_in_use"], r["peak_reserved"])
            if not near(held, s["largest"]):
                problems.append(f"{said} a floor holds {held / MiB:.1f} MiB, not one buffer of {s['largest'] / MiB:.1f}")
            continue
        if not near(r["peak_in_use"], s["peak"]):
            problems.append(f"{said} peak in use {r['peak_in_use'] / MiB:.1f} MiB, the trace's {s['peak'] / MiB:.1f}")
        if r["peak_reserved"] < r["peak_in_use"]:
            problems.append(f"{said} reserved {r['peak_reserved'] / MiB:.1f} MiB, less than in use")
    return seen, problems


def test_every_recorded_setting_holds_the_trace_s_peak_and_a_floor_one_buffer():
    """From every committed set of 08's recordings (whichever are there: a set re-recorded replaces its runs), no replay
    measures the replayer's own buffers: each setting's peak in use is the trace's peak, within 3 % or 8 MiB (the
    allocator's rounding), it reports at least that reserved, and each floor holds one buffer of the trace's largest
    block. (The runs recorded before replay_alloc.py let go of its settings' buffers fail here: every PyTorch setting
    held the warm-up's 84 MiB buffer beside the trace's.)"""
    from streamalloc import replay
    folders = [replay.root() / s / NAME for s in replay.available() if (replay.root() / s / NAME).is_dir()]
    seen, problems = 0, []
    for folder in folders:
        n, wrong = calibration_problems(folder)
        seen, problems = seen + n, problems + wrong
    assert seen, f"no replay of 08 is recorded in {folders}"
    assert not problems, f"{len(problems)} of {seen} replays measure more than the trace:\n" + "\n".join(problems)


def test_the_calibration_check_finds_a_replayer_s_own_buffer(tmp_path):
    """calibration_problems on a set made here: a replay that holds the trace and nothing more passes; one that holds a
    buffer of its own beside it (in use, in its floor, or reserved below what it reports in use) is named."""
    from streamalloc import replay
    folder = tmp_path / "set" / NAME
    folder.mkdir(parents=True)
    t = built_to_fragment()
    s = t.stats()
    extra = 84 * MiB

    def record(r):
        return {"trace": t.name, "allocator": r[0], "process": "torch", "peak_in_use": r[1], "peak_reserved": r[2]}

    def write(rows):
        runs = {"k": {"args": ["torch"], "source_sha": "x", "stdout": "".join(json.dumps(record(r)) + "\n" for r in rows)}}
        (folder / "replay_alloc.json").write_text(json.dumps({"runs": runs}))
        return calibration_problems(folder)

    right = [("PyTorch native", s["peak"] + MiB, s["peak"] + 40 * MiB), ("one buffer (PyTorch loop)", s["largest"],
                                                                           s["largest"] + 2 * MiB)]
    assert write(right) == (2, []), "within the rounding"
    assert replay.read_runs(folder / "replay_alloc.json")
    for wrong, what in (([("PyTorch native", s["peak"] + extra, s["peak"] + extra)], "peak in use"),
                        ([("one buffer (PyTorch loop)", s["largest"] + extra, s["largest"] + extra)], "a floor holds"),
                        ([("PyTorch cudaMallocAsync", s["peak"], s["peak"] - 40 * MiB)], "less than in use")):
        n, problems = write(wrong)
        assert n == 1 and len(problems) == 1 and what in problems[0], problems


# -- replay_alloc.py: no buffer of its own outlives its setting --------------------------------------------------
class Memory:
    """A stand-in for PyTorch's and CuPy's arrays, counting the ones alive: an array made by `empty`, and a view of
    it (a slice), which keeps it alive as a real view keeps its storage."""

    def __init__(self):
        import weakref
        self.alive = weakref.WeakSet()

    def empty(self, n, *args, **kwargs):
        memory = self

        class Array:
            def __init__(self, nbytes, base=None):
                self.nbytes, self.base = nbytes, base
                if base is None:
                    memory.alive.add(self)

            def __getitem__(self, cut):
                return Array(min(self.nbytes, cut.stop or self.nbytes), self.base or self)

            def fill(self, value):
                return self

            fill_ = fill

            def data_ptr(self):
                return id(self)

        return Array(n)

    def torch(self):
        import types
        cuda = types.SimpleNamespace(
            empty_cache=lambda: None, reset_peak_memory_stats=lambda: None, synchronize=lambda: None,
            memory_stats_as_nested_dict=lambda: {}, memory_stats=lambda: {}, Stream=object, set_stream=lambda s: None,
            default_stream=lambda: None, memory=types.SimpleNamespace(_snapshot=lambda: {"segments": []}))
        return types.SimpleNamespace(cuda=cuda, uint8="uint8", empty=self.empty,
                                     _C=types.SimpleNamespace(_accelerator_setAllocatorSettings=lambda conf: None))

    def cupy(self):
        import contextlib
        import types
        memory = self

        class Pool:
            def __init__(self):
                self.held = []

            def malloc(self, n):
                return n

            def used_bytes(self):
                return 0

            total_bytes = used_bytes

            def free_all_blocks(self):
                pass

        allocator = {}
        cuda = types.SimpleNamespace(MemoryPool=Pool, MemoryAsyncPool=Pool, get_default_memory_pool=Pool,
                                     set_allocator=lambda f: allocator.update(now=f),
                                     Stream=lambda non_blocking=False: contextlib.nullcontext(),
                                     Device=lambda: types.SimpleNamespace(synchronize=lambda: None))
        return types.SimpleNamespace(cuda=cuda, uint8="uint8", empty=memory.empty,
                                     get_default_memory_pool=Pool)


@pytest.mark.parametrize("library", ["torch", "torch-async", "cupy"])
def test_no_buffer_of_the_replayer_outlives_its_setting(library, monkeypatch):
    """Each setting is made only when nothing of the one before is alive (no array, no view of its one buffer, which
    would keep the buffer: a library would count it in use beside the trace), through the sampled passes and every
    round; the warm-up leaves nothing either. On stand-ins of PyTorch's and CuPy's arrays that count what is alive."""
    memory = Memory()
    monkeypatch.setitem(sys.modules, "torch", memory.torch())
    monkeypatch.setitem(sys.modules, "cupy", memory.cupy())
    rep = replayer()
    t = built_to_fragment(steps=3)
    peak, largest = rep.trace_facts(t.events)
    made = []

    def fresh(name, make):
        def build(first):
            assert not memory.alive, f"{name} is made while {len(memory.alive)} array(s) of another setting live"
            made.append(name)
            return make(first)
        return build

    list(rep.warm_up(library, t.events))
    assert not memory.alive, "the warm-up's floor let go of its buffer"
    settings = [(name, fresh(name, make), fields) for name, make, fields in rep.settings(library, largest, peak)]
    list(rep.measure(t.name, t.events, settings, 2))
    assert not memory.alive and len(made) == 3 * len(settings), made


def test_the_floor_reports_one_buffer_of_the_trace_s_largest_block(monkeypatch):
    """CuPy's floor says it holds its one buffer (the trace's largest block), in use and reserved, as PyTorch's says
    through memory_allocated(): what the recordings' test holds a floor to."""
    memory = Memory()
    monkeypatch.setitem(sys.modules, "cupy", memory.cupy())
    rep = replayer()
    floor = rep.CuPy("one buffer (CuPy loop)", None, 1234)
    assert floor.in_use(live=99) == floor.reserved() == 1234
    floor.close()
    assert not memory.alive


# -- replay_alloc.py --pair: PyTorch's two processes take turns round by round --------------------------------------
def paired(rep, units, follower=None):
    """Native's side (the leader) and cudaMallocAsync's (`follower`, or one that runs every unit) run their units in two
    threads through Turns, as the two processes do: [(side, unit, "start" | "end")] in the order they ran, and the
    leader's end ("exit: <message>" where it stopped)."""
    import threading
    log, lock = [], threading.Lock()

    def note(*what):
        with lock:
            log.append(what)

    def side(library):
        turns = rep.Turns(library, units, timeout=10)
        for k in range(units):
            turns.before(k)
            note(library, k, "start")
            time.sleep(0.002)  # another part running now would show between start and end
            note(library, k, "end")
            turns.after(k)
        turns.finish()

    def leader():
        try:
            side("torch")
            note("torch", "done")
        except SystemExit as e:
            note("torch", f"exit: {e}")

    threads = [threading.Thread(target=leader), threading.Thread(target=follower or (lambda: side("torch-async")))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return log


def test_pytorch_s_two_processes_take_turns_unit_by_unit_in_alternating_order(monkeypatch, tmp_path):
    """With --pair, unit k (the warm-up, a trace's sampled passes, a round) runs native's part then cudaMallocAsync's
    where k is even, the other way round where k is odd: one part at a time, round r of one next to round r of the
    other, and native's process (which holds the GPU's turn for both) ends after the other's last part."""
    monkeypatch.setenv("STREAMALLOC_GPU_TURN", str(tmp_path / ".gpu_turn"))
    log = paired(replayer(), 5)
    parts = [e[:2] for e in log if e[-1] == "start"]
    L, F = "torch", "torch-async"
    assert parts == [(L, 0), (F, 0), (F, 1), (L, 1), (L, 2), (F, 2), (F, 3), (L, 3), (L, 4), (F, 4)], parts
    starts_and_ends = [e for e in log if len(e) == 3]
    assert all(a[:2] == b[:2] and (a[2], b[2]) == ("start", "end")
               for a, b in zip(starts_and_ends[::2], starts_and_ends[1::2])), "one part at a time"
    assert log[-1] == (L, "done") and log[-2] == (F, 4, "end"), "the leader's turn ends after the other's last part"


def test_a_pair_whose_other_process_ends_early_stops_with_a_message(monkeypatch, tmp_path):
    monkeypatch.setenv("STREAMALLOC_GPU_TURN", str(tmp_path / ".gpu_turn"))
    rep = replayer()

    def quits():
        turns = rep.Turns("torch-async", 3, timeout=10)
        turns.peer.close()  # it crashed after it connected

    log = paired(rep, 3, follower=quits)
    assert log[-1] == ("torch", "exit: replay_alloc.py --pair: the other PyTorch process ended before its turn was done")
    with pytest.raises(SystemExit, match="must start together"):
        monkeypatch.delenv("STREAMALLOC_GPU_TURN")
        rep.Turns("torch", 3)


# -- your trace: timed through the library that recorded it -------------------------------------------------------
@pytest.mark.parametrize("library, timed", [("torch", {"torch", "torch-async"}), ("cupy", {"cupy"}), ("rmm", {"rmm"}),
                                            ("", set()), ("jax", set())])
def test_your_trace_is_timed_through_the_library_that_recorded_it(library, timed, tmp_path):
    """A PyTorch snapshot through native, expandable_segments (the torch process) and cudaMallocAsync, paired; a CuPy
    log through CuPy's pools; an RMM log through RMM's; every other library for the footprint only; a trace that names
    no library (or one the course does not know) for the footprint only, everywhere. A library whose modules are
    missing is left out."""
    file = tmp_path / "mine.trace"
    runs = W.your_runs(file, library, available=lambda mods: True)
    assert set(runs) == set(W.REQUIRES)
    for lib, (program, args, requires) in runs.items():
        assert program == "replay_alloc.py" and args[0] == lib and args[-1] == str(file) and requires == W.REQUIRES[lib]
        assert ("--footprint" not in args) == (lib in timed), (lib, args)
        assert ("--pair" in args) == (lib in W.PAIRED), "PyTorch's two processes take turns, timed or not"
    assert set(W.your_runs(file, library, available=lambda mods: mods != ("torch",))) == {"cupy", "rmm"}


def test_an_a_a_check_that_names_a_winner_fails_the_cell(tmp_path):
    """cudaMallocAsync against itself (the A/A twin) must come out a tie: a twin far from its setting is a false winner,
    which the cell refuses; the same figures pass (test_the_cells_run_on_canned_output_and_conclude_from_it)."""
    with pytest.raises(AssertionError, match="the A/A check named a winner"):
        run_cells(NAME, lesson_08(tmp_path, canned(again_us=300.0)))


def test_your_trace_live_replays_a_snapshot_through_pytorch_s_three_allocators_and_says_so(tmp_path, monkeypatch):
    """Live, a PyTorch snapshot is converted (it names PyTorch), replayed by replay_trace.cu in W.ROUNDS rounds and by
    every library's replay_alloc.py, PyTorch's two processes timed and paired, the rest for the footprint; the text says
    which. On a stand-in lesson whose programs print canned records."""
    import pickle
    from test_traces import snapshot
    monkeypatch.setattr(sa.lesson, "missing_modules", lambda mods: [])  # every library installed
    path = tmp_path / "model.pickle"
    path.write_bytes(pickle.dumps(snapshot()))
    lesson = StandIn(tmp_path, canned(), live=True, name=NAME)
    shown = W.your_trace(lesson, path)
    asked = {args[0]: args for file, args, _ in lesson.asked if file == "replay_alloc.py"}
    assert [a for f, a, _ in lesson.asked if f == "replay_trace.cu"][0][1:] == ["all", "0", str(W.ROUNDS)]
    assert "--footprint" not in asked["torch"] + asked["torch-async"] and "--pair" in asked["torch-async"]
    assert "--footprint" in asked["cupy"]
    assert "recorded by PyTorch" in shown[0].data and "PyTorch's allocators timed" in shown[0].data


FAKE_TORCH = '''"""A stand-in for torch, enough for replay_alloc.py to run without a GPU: each array it makes is noted in the file
$FAKE_TORCH_LOG with the process's backend, so that a test sees which process ran when."""
import os
import types

__version__ = "0.0+fake"
_backend = "cudaMallocAsync" if "cudaMallocAsync" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "") else "native"
uint8 = "uint8"


class _Array:
    def __init__(self, n, base=None):
        self.n, self.base = n, base

    def __getitem__(self, cut):
        return _Array(min(self.n, cut.stop or self.n), self.base or self)

    def fill_(self, value):
        return self

    def data_ptr(self):
        return id(self)


def empty(n, dtype=None, device=None):
    with open(os.environ["FAKE_TORCH_LOG"], "a") as log:
        log.write(_backend + "\\n")
    return _Array(n)


def _nothing(*args, **kwargs):
    return None


cuda = types.SimpleNamespace(
    is_available=lambda: True, mem_get_info=lambda: (1 << 30, 2 << 30), empty_cache=_nothing,
    reset_peak_memory_stats=_nothing, synchronize=_nothing, memory_stats_as_nested_dict=dict, memory_stats=dict,
    Stream=object, set_stream=_nothing, default_stream=_nothing,
    memory=types.SimpleNamespace(get_allocator_backend=lambda: _backend, _snapshot=lambda: {"segments": []}))
_C = types.SimpleNamespace(_accelerator_setAllocatorSettings=_nothing)
'''


def test_pytorch_s_two_processes_pair_their_rounds_as_programs(tmp_path):
    """replay_alloc.py torch --pair and torch-async --pair, started together as sa.together.run starts them (the turn
    file named, each saying when its imports are done): both replay every unit, native's process takes the GPU's turn
    and cudaMallocAsync's never runs outside it, their parts alternating; each record says whom it took turns with.
    On a stand-in of torch that notes which process made each array."""
    import subprocess
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text(FAKE_TORCH)
    (tmp_path / "replay_alloc.py").write_text(programs()["replay_alloc.py"])
    trace = built_to_fragment(steps=3).write(tmp_path)
    log, turn = tmp_path / "made.log", tmp_path / ".gpu_turn"
    turn.write_bytes(b"")
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "FAKE_TORCH_LOG": str(log), "STREAMALLOC_GPU_TURN": str(turn)}
    procs = {lib: subprocess.Popen([sys.executable, str(tmp_path / "replay_alloc.py"), lib, "--pair", str(trace)],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for lib in ("torch-async", "torch")}
    out = {lib: p.communicate(timeout=120) for lib, p in procs.items()}
    assert all(p.returncode == 0 for p in procs.values()), out
    assert turn.read_bytes() == b"..", "both said their imports were done"
    for lib, (stdout, _) in out.items():
        records = [json.loads(line) for line in stdout.splitlines() if '"allocator"' in line]
        assert len(records) == 3 and all(r["rounds"] == W.ROUNDS and r["turns_with"] != lib for r in records), records
    runs = [key for key, _ in itertools.groupby(log.read_text().split())]  # whose parts, in the order they ran
    units = 1 + 1 + W.ROUNDS  # the warm-up, the sampled passes, the rounds
    expected = [who for k in range(units) for who in (("native", "cudaMallocAsync") if k % 2 == 0 else
                                                       ("cudaMallocAsync", "native"))]
    assert runs == [key for key, _ in itertools.groupby(expected)], runs
