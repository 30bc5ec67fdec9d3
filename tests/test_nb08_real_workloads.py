"""Notebook 08's Python side, without a GPU: its programs (the Python replayer's reading, loop and settings on
stand-ins, the C++ replayer built), and the notebook's cells run end to end on canned output. The trace model is
tests/test_traces.py's; an input file's part in a recording's key, tests/test_replay.py's.

The canned output comes from a toy model of the replayers written here (a pool that keeps its peak, one that gives
everything back at a synchronization): its numbers are made up for the test, never recorded, and only exercise the
cells' tables, conclusions, timeline explorer and assertions, which must fail on a wrong result.
"""
import inspect
import json
import sys
from pathlib import Path

import pytest
from notebook import StandIn, code_cells, run_cells
from notebook import programs as written

import streamalloc as sa
from streamalloc.course import REPO
from streamalloc.lessons import real_workloads as W

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
    t = W.built_to_fragment()
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
def toy(trace: W.Trace, name: str, kind: str, keep: bool, us: float, spread: float = 0.0, work_us: float = 0,
        process: str | None = None, rounds: int = W.ROUNDS) -> dict:
    """A made-up replay record in the replayers' format: a pool that keeps its peak (keep) or gives back all that is
    unused at each step; its rounds' medians (W.ROUNDS of them, or none: its footprint only) spread evenly over
    `spread` µs around `us`."""
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
    round_us = [us + spread * (k / max(rounds - 1, 1) - 0.5) for k in range(rounds)]
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
    A/A twin's rounds lie from its setting's (0: the same figures)."""
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
            t = W.Trace.parse(Path(args[0]).read_text())
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
                              rounds=n),
                    toy(t, "one buffer (no allocator)", "one-buffer", True, 50.0 + work, 0.0, work, rounds=n)]
        assert file == "replay_alloc.py", file
        lib, paths = args[0], [a for a in args[1:] if a not in ("--footprint", "--pair")]
        footprint = args[args.index("--footprint") + 1:] if "--footprint" in args else []
        pair = {"turns_with": {"torch": "torch-async", "torch-async": "torch"}[lib]} if "--pair" in args else {}
        out = [{"library": lib, "torch": "0.0+cu130", "backend": "cudaMallocAsync" if lib == "torch-async" else "native"}] \
            if lib.startswith("torch") else []
        for p in paths:
            t = W.Trace.parse(Path(p).read_text())
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
    lesson = lesson_08(tmp_path)
    ns = run_cells(NAME, lesson)
    printed = capsys.readouterr().out
    assert "No RMM trace" in printed and "RMM is not installed" in printed
    assert set(ns["traces"]) == {"PyTorch training step", "CuPy filter pipeline", "built to fragment",
                                 "built to fragment, one stream"}
    assert len(lesson.figures) == 2 and all(v > 0 for v, _, _ in lesson.figures.values())
    t = ns["traces"]["built to fragment"]
    text = W.conclusion(ns["results"], t, "Test GPU")
    assert ("CUDA (C++): the cheapest of its settings is explicit pool, peak reserved up front, 40.0 µs (middle rounds 40.0–40.0), "
            "ahead of default pool, threshold UINT64_MAX, 50.0 µs") in text, text
    assert text.count("Test GPU") == 1 and "threshold 0 (" in text  # it gave memory back once warm
    assert (tmp_path / "cupy_hook_log.jsonl").read_text().count("\n") == 4  # the hook log, as a learner's file


def test_a_winner_within_the_noise_is_a_tie(tmp_path):
    """The explicit pool (90 µs) and the pool at UINT64_MAX (100 µs), each spread over 30 µs across rounds: a tie,
    named as one, and no time becomes a key figure unless it clears the noise."""
    ns = run_cells(NAME, lesson_08(tmp_path, canned(spread=30.0)))
    text = W.conclusion(ns["results"], ns["traces"]["built to fragment"], "Test GPU")
    assert "CUDA (C++): a tie for the cheapest of its settings: explicit pool, peak reserved up front 40.0 µs" in text
    assert "default pool, threshold UINT64_MAX 50.0 µs" in text and "within the noise of one another" in text
    assert [f.name for f in W.verdicts(ns["results"], ns["traces"]["built to fragment"])["CUDA (C++)"]] == [
        "explicit pool, peak reserved up front", "default pool, threshold UINT64_MAX"]


def test_figures_and_verdicts():
    """A figure's spread is the range of its middle rounds (one slow round is left out); a winner is ahead of the
    next by more than both spreads, else it is a tie."""
    a = W.Figure("a", [10, 11, 12, 13, 90])  # one slow round
    assert a.median == 12 and a.middle == [11, 12, 13] and a.spread == 2
    assert W.ahead(a, W.Figure("c", [15, 15, 15, 15, 15])) and not W.ahead(a, W.Figure("d", [12, 13, 14, 15, 16]))
    assert [f.name for f in W.leaders([W.Figure("d", [12, 13, 14, 15, 16]), a])] == ["a", "d"]
    assert "the cheapest x is a" in W.verdict([a, W.Figure("c", [15] * 5)], "x")
    assert "a tie for the cheapest x: a" in W.verdict([a, W.Figure("d", [12, 13, 14, 15, 16])], "x")
    assert W.verdict([a], "x").startswith("only a was measured")


def test_a_pool_at_uint64_max_that_keeps_nothing_fails_the_cells(tmp_path):
    with pytest.raises(AssertionError, match="keeps its peak across syncs"):
        run_cells(NAME, lesson_08(tmp_path, canned(break_keep=True)))


def test_the_table_marks_a_skipped_allocator():
    t = W.built_to_fragment()
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
    args = [str(W.built_to_fragment().write(tmp_path)) if a == "TRACE" else a for a in args]
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
    t = W.built_to_fragment()
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
    t = W.built_to_fragment()
    recs = [{**toy(t, name, "python", True, us, process=p), "trace": t.name} for name, us, p in
            (("one buffer (PyTorch loop)", 500.0, "torch"), ("PyTorch native", 600.0, "torch"),
             ("PyTorch cudaMallocAsync", 400.0, "torch-async"),
             ("one buffer (PyTorch loop, cudaMallocAsync's process)", 500.0, "torch-async"),
             ("CuPy MemoryPool", 700.0, "cupy"), ("one buffer (CuPy loop)", 200.0, "cupy"))]
    recs[0]["round_us"] = [500.0, 520.0, 480.0, 510.0, 490.0]  # the floor drifts: each round is set against its own
    recs[1]["round_us"] = [600.0, 620.0, 580.0, 610.0, 590.0]
    assert W.own_rounds(recs[1], recs) == [100.0] * 5 and W.own_us(recs[4], recs) == 500 and W.own_us(recs[5], recs) == 0
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
            t = W.Trace.parse(Path(p).read_text())
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
