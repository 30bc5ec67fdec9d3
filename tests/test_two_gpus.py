"""Programs that need two GPUs: `lesson.run(..., gpus=2)` runs them live on a machine with two, and everywhere
else replays a recording made on one, or says plainly that the lesson has not yet run on two GPUs."""
import pytest

from streamalloc import cuda, gpu, lesson, replay, verdict
from streamalloc.errors import MissingRecording, NotYetRecorded, StaleRecording
from labcheck import SHOWN
from notebook import code_cell, executed, programs, replayed

REF = gpu.Machine(gpu="NVIDIA H200", compute_capability="9.0", pools_supported=True, date="2026-01-01",
                   driver="580.1", driver_cuda="13.0", nvcc="13.0")
PAIR = gpu.Machine(gpu="NVIDIA H100 80GB HBM3", compute_capability="9.0", pools_supported=True, date="2026-02-02",
                   driver="580.2", driver_cuda="13.0", nvcc="13.0")
NAME = "05b_two_gpus"


@pytest.fixture
def setup(recordings, tmp_path, monkeypatch):
    """A replaying lesson (no nvcc, so nothing compiles), a program in tmp_path, a one-GPU reference set."""
    monkeypatch.setenv("STREAMALLOC_MODE", "replay")
    monkeypatch.delenv("STREAMALLOC_RECORD", raising=False)
    monkeypatch.setattr(gpu, "nvcc_path", lambda: None)
    monkeypatch.setattr(replay, "_started", set())
    prog = tmp_path / "peer.cu"
    prog.write_text('#include "course.cuh"\nint main() { return 0; }\n')
    ref = lesson.Lesson(NAME, quiet=True)
    replay.save(REF, NAME, "peer", ref.key_source(prog), ["1"], {"stdout": '{"gpus": 1}\n', "gpus": 1})
    return prog


def start():
    return lesson.Lesson(NAME, quiet=True)


def record_on_two(prog, args=("1",), stdout='{"gpus": 2}\n'):
    replay.save(PAIR, NAME, "peer", start().key_source(prog), list(args), {"stdout": stdout, "gpus": 2})


def test_not_yet_recorded_says_so(setup):
    les = start()
    assert les.reference_gpu == replay.DEFAULT_REFERENCE
    assert les.machine_with(2) is None
    with pytest.raises(NotYetRecorded, match="has not yet run on 2 GPUs") as e:
        les.run(setup, [1], gpus=2)
    assert isinstance(e.value, MissingRecording)  # what the course's replay handling already knows
    assert "peer needs 2 GPUs" in str(e.value) and "replays" in str(e.value)


def test_one_gpu_programs_are_unchanged(setup):
    record_on_two(setup)
    res = start().run(setup, [1])
    assert res.stdout == '{"gpus": 1}\n' and res.label.startswith("NVIDIA H200, replayed from")


def test_replays_the_set_recorded_on_two_gpus(setup):
    record_on_two(setup)
    les = start()
    assert les.machine_with(2).gpu == "NVIDIA H100 80GB HBM3" and les.machine_with(3) is None
    res = les.run(setup, [1], gpus=2)
    assert res.replayed and res.records == [{"gpus": 2}]
    assert res.label == ("2x NVIDIA H100 80GB HBM3, needs 2 GPUs; replayed from a recording of 2026-02-02 "
                         "(driver 580.2, CUDA 13.0, nvcc 13.0)")
    with pytest.raises(NotYetRecorded, match="has not yet run on 3 GPUs"):
        les.run(setup, [1], gpus=3)


def test_changed_code_is_stale_not_missing(setup):
    record_on_two(setup)
    setup.write_text(setup.read_text() + "int unused = 1;\n")
    with pytest.raises(StaleRecording, match="code changed"):
        start().run(setup, [1], gpus=2)


def test_a_run_on_fewer_gpus_does_not_count(setup):
    replay.save(PAIR, NAME, "peer", start().key_source(setup), ["1"], {"stdout": "", "gpus": 1})
    with pytest.raises(NotYetRecorded):
        start().run(setup, [1], gpus=2)


def live(les, gpus_here, machine, monkeypatch, stdout=""):
    """Make a replaying lesson behave as live on a machine with `gpus_here` GPUs; cuda.run returns stdout."""
    les.mode = gpu.Mode(True, "a test says so")
    les.machine = les.here = machine
    les.__dict__["gpus_here"] = gpus_here
    monkeypatch.setattr(les, "compile", lambda path, flags=(): None)
    calls = []

    def fake_run(exe, args, timeout, name=None, env=None):
        calls.append(args)
        return cuda.Completed(list(args), stdout, "", 0, 0.5)

    monkeypatch.setattr(cuda, "run", fake_run)
    return calls


def test_live_with_one_gpu_replays_and_never_runs(setup, monkeypatch):
    les = start()
    calls = live(les, 1, REF, monkeypatch)
    with pytest.raises(NotYetRecorded, match="this machine has 1"):
        les.run(setup, [1], gpus=2)
    record_on_two(setup)
    res = les.run(setup, [1], gpus=2)
    assert calls == [] and res.replayed and "needs 2 GPUs; replayed from" in res.label


def test_live_with_one_gpu_the_runner_is_told_it_replayed(setup, monkeypatch, tmp_path):
    """Live on one GPU, 05b shows the two-GPU recording: the runner's row must say replayed, not live (and a
    copy with no such recording says not measured)."""
    les = start()
    live(les, 1, REF, monkeypatch)
    assert les.machine_with(2) is None
    said = SHOWN[-1]  # the note, shown as data (streamalloc.verdict) in the cell's outputs, where the runner reads it
    assert said.word == verdict.NOT_MEASURED and said.finding.startswith("needs 2 GPUs: this lesson has not yet run")
    record_on_two(setup)
    assert les.machine_with(2).gpu == "NVIDIA H100 80GB HBM3"
    said = SHOWN[-1]
    assert said.word == verdict.REPLAYED and "needs 2 GPUs, this machine has 1" in said.finding, said
    assert "NVIDIA H100 80GB HBM3, replayed from a recording of 2026-02-02" in said.finding


def test_live_with_two_gpus_runs_and_the_recorder_notes_the_count(setup, monkeypatch):
    monkeypatch.setenv("STREAMALLOC_RECORD", "1")
    les = start()
    calls = live(les, 2, PAIR, monkeypatch, stdout='{"measured": 7}\n')
    assert les.machine_with(2) is PAIR
    res = les.run(setup, [1], gpus=2)
    assert calls == [["1"]] and not res.replayed and res.label == "NVIDIA H100 80GB HBM3, live"
    monkeypatch.delenv("STREAMALLOC_RECORD")
    again = start().run(setup, [1], gpus=2)  # replay finds what the recorder wrote
    assert again.records == [{"measured": 7}] and again.label.startswith("2x NVIDIA H100 80GB HBM3, needs 2 GPUs; replayed")


# -- the notebook, on canned two-GPU output ------------------------------------------------------------------
# What follows checks the notebook's Python (tables, figure, assertions, summary) before any machine with two
# GPUs has run it: the programs' output is CANNED here, typed by hand in the shape the programs print, and it
# lives only in a temporary recordings folder for this test. It is never a recording and never a figure.
import json  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "05b_two_gpus.ipynb"
MiB, GiB = 2**20, 2**30
BYTES, MAX_BYTES, REPS, SPIN_MS = 64 * MiB, 8 * GiB, 7, 20  # what the notebook asks for on a 140 GB GPU
N = BYTES // 4
PAIR_FREE = 140 * 10**9


def lines(*records):
    return "".join(json.dumps(r) + "\n" for r in records)


def canned_runs():
    """(program, args, stdout) of every run the notebook makes, as a machine with two peer-capable GPUs prints."""
    pl = dict(program="peer_link")
    link = lines(*[r for d, p in ((0, 1), (1, 0)) for r in (
        dict(pl, part="link", device=d, peer=p, can_access_peer=1, performance_rank=0, access_supported=1,
             native_atomic_supported=1, cuda_array_access_supported=1),
        *(dict(pl, part="set_access", device=d, peer=p, pool=pool, can_access_peer=1, set_access="cudaSuccess",
               next_allocation="cudaSuccess", access_after="read-write") for pool in ("empty", "holding")))])
    ii = dict(program="invisible_import")
    invisible = lines(
        dict(ii, process="exporter", step="platform", uuid0="GPU-00000000-0000-0000-0000-000000000000",
             uuid1="GPU-11111111-1111-1111-1111-111111111111", can_access_peer_0_1=1, ipc=True),
        dict(ii, process="importer", step="imported", visible_gpus=1, uuid0="GPU-00000000-0000-0000-0000-000000000000",
             cudart_version=13000, import_pool="cudaSuccess", get_access_before="cudaSuccess", access_before="none",
             location_type_query="not built: (CUDART_VERSION < 13020)", import_pointer="cudaSuccess",
             pointer_attributes="cudaSuccess", ptr_device=-2, ptr_is_device_memory=True, set_access="cudaSuccess",
             get_access_after="cudaSuccess", access_after="read-write", read="cudaSuccess", elements=N, wrong=0,
             destroy_pool="cudaSuccess"),
        dict(ii, process="exporter", step="exported", device=1, bytes=BYTES, importer_freed=True, importer_status=0))
    cd = dict(program="current_device")
    pools = lambda u0, r0, u1, r1: dict(used0=u0, reserved0=r0, used1=u1, reserved1=r1)  # noqa: E731
    current = lines(
        dict(cd, step="start", current_device=0, **pools(0, 0, 0, 0)),
        dict(cd, step="cudaMallocAsync on device 1's stream", current_device=0, **pools(0, 0, BYTES, BYTES),
             ptr="0x7f1200000000", ptr_device=1, ptr_is_device_memory=True),
        dict(cd, step="cudaMallocAsync on device 0's stream", current_device=0, **pools(BYTES, BYTES, BYTES, BYTES),
             ptr="0x7f0200000000", ptr_device=0, ptr_is_device_memory=True),
        dict(cd, step="both freed, both streams synchronized", current_device=0, **pools(0, 0, 0, 0)),
        dict(cd, step="check", elements=N, wrong=0, free_with_device0_current="cudaSuccess"))
    pa = dict(program="pool_access")
    peer = lines(
        dict(pa, mode="peer", access="after cudaDeviceEnablePeerAccess", device0="read-write", device1="none"),
        dict(pa, mode="peer", read="cudaMalloc buffer", error="cudaSuccess", elements=N, wrong=0),
        dict(pa, mode="peer", read="pool buffer", error="cudaErrorIllegalAddress", elements=N),
        dict(pa, mode="peer", after_the_fault=True, device1_synchronize="cudaErrorIllegalAddress",
             device1_cudaMalloc="cudaErrorIllegalAddress", device0_synchronize="cudaSuccess"))
    pool = lines(
        dict(pa, mode="pool", access="before cudaMemPoolSetAccess", device0="read-write", device1="none"),
        dict(pa, mode="pool", access="after cudaMemPoolSetAccess", device0="read-write", device1="read-write"),
        dict(pa, mode="pool", read="pool buffer allocated before cudaMemPoolSetAccess", error="cudaSuccess",
             elements=N, wrong=0),
        dict(pa, mode="pool", read="pool buffer allocated after cudaMemPoolSetAccess", error="cudaSuccess",
             elements=N, wrong=0))
    ac = dict(program="access_cost")
    sizes = [0] + [2 * MiB * 4**k for k in range(8) if 2 * MiB * 4**k <= MAX_BYTES]
    grants = [dict(ac, part="set_access", size=s, reserved=s, grant_us=[10.0 + s / MiB + i for i in range(REPS)],
                   revoke_us=[8.0 + s / MiB + i for i in range(REPS)], revoke_error="cudaSuccess") for s in sizes]
    misses = [dict(ac, part="miss", size=s, peer_mapped=m, us=[(2.0 if m else 1.0) * (50 + s / MiB) + i for i in range(REPS)],
                   reserved_before_max=0)
              for s in [2 * MiB * 8**k for k in range(6) if 2 * MiB * 8**k <= MAX_BYTES] for m in (False, True)]
    pf = dict(program="peer_free", elements=N)
    free = lines(dict(pf, scenario="event", same_block=True, wrong=0),
                 dict(pf, scenario="no_event", same_block=True, wrong=N),
                 dict(pf, scenario="peer_stream", wrong=0, free_error="cudaSuccess", used_before_free=BYTES,
                      used_after_sync=0))
    md = dict(program="memcpy_device", elements=N)
    copies = lines(dict(md, pointer="p0", stream_device=0, ptr_device=0, ptr_is_device_memory=True),
                   dict(md, pointer="p1", stream_device=1, ptr_device=1, ptr_is_device_memory=True),
                   dict(md, copy="stream_device_current", current_device=1, error="cudaSuccess", wrong=0),
                   dict(md, copy="peer_copy", current_device=1, error="cudaSuccess", wrong=0),
                   dict(md, copy="other_device_current", current_device=0, error="cudaErrorInvalidResourceHandle"),
                   dict(md, after="other_device_current", device0_synchronize="cudaSuccess",
                        device1_synchronize="cudaSuccess"))
    gp = dict(program="graph_peer", peer_capable=True, elements=N)
    graph = {"node": lines(dict(gp, mode="node", error="cudaSuccess", wrong=0)),
             "before": lines(dict(gp, mode="before", error="cudaSuccess", wrong=0)),
             "after": lines(dict(gp, mode="after", error="cudaErrorIllegalAddress", device0_synchronize="cudaSuccess"))}
    return [("peer_link", [2 * MiB], link), ("current_device", [BYTES], current), ("pool_access", ["peer", BYTES], peer),
            ("pool_access", ["pool", BYTES], pool), ("access_cost", [MAX_BYTES, REPS], lines(*grants, *misses)),
            ("peer_free", [BYTES, SPIN_MS], free), ("memcpy_device", [BYTES], copies),
            *(("graph_peer", [mode, BYTES], out) for mode, out in graph.items()), ("invisible_import", [BYTES], invisible)]


def test_the_notebook_says_it_has_not_yet_run_and_shows_nothing_measured(recordings, monkeypatch):
    replay.save(REF, "00_setup", "x", "x", [], {"stdout": ""})  # the one-GPU reference set, nothing of 05b
    env = {"STREAMALLOC_MODE": "replay", "STREAMALLOC_RECORDINGS": str(recordings)}
    text, images = executed(NAME, monkeypatch, env)
    assert "THIS LESSON HAS NOT YET RUN ON TWO GPUs" in text and images == 0
    assert text.count("not run, because this lesson has not yet run on two GPUs") == 8
    assert "Nothing was measured" in text and "needs 2 GPUs; replayed" not in text


def test_the_notebook_on_canned_two_gpu_output(recordings, tmp_path, monkeypatch):
    replay.save(REF, "00_setup", "x", "x", [], {"stdout": ""})  # the one-GPU reference set, nothing of 05b
    assert sorted(Path(f).stem for f in programs(NAME)) == ["access_cost", "current_device", "graph_peer",
                                                             "invisible_import", "memcpy_device", "peer_free",
                                                             "peer_link", "pool_access"]
    pair = gpu.Machine(**{**PAIR.to_dict(), "memory_free": PAIR_FREE})
    text, images = replayed(NAME, tmp_path, monkeypatch, canned_runs(), machine=pair, gpus=2)
    assert "replayed from a recording made on two GPUs, NVIDIA H100 80GB HBM3" in text and "NOT YET RUN" not in text
    assert images == 1  # the access-cost figure
    assert "2x NVIDIA H100 80GB HBM3, needs 2 GPUs; replayed from a recording of 2026-02-02" in text
    assert "returned memory of device 1" in text and "ended in cudaErrorIllegalAddress" in text
    assert "2 of 2 ordered pairs are peer capable" in text and "which this machine does not have" in text
    assert "a pool miss mapped for device 1 took 2.00x the time of an unmapped one" in text
    assert "at 8 GiB, 2.00x (slower)" in text
    assert f"without the event {N} elements were overwritten" in text
    assert "with another device current: cudaErrorInvalidResourceHandle" in text
    assert "node API with device 1 in accessDescs: all" in text
    assert "access set after the capture: cudaErrorIllegalAddress" in text
    assert "with the access set after the capture: cudaErrorIllegalAddress" in text
    assert "both devices still synchronized without an error" in text
    assert "its one GPU is device 0 (the same UUID)" in text and "cudaMemPoolSetAccess for device 0 returned cudaSuccess" in text
    assert "the importer read the values (cudaSuccess, 0 wrong)" in text


def test_the_grant_sentence_says_what_the_data_did():
    """Flat (as the H200 recording is: 11-18 ms from 2 MiB to 8 GiB) or growing: the sentence says which."""
    from streamalloc.lessons import two_gpus as T
    from streamalloc.measure import Records

    def grants(cost_of):
        return Records([{"part": "set_access", "size": s, "reserved": max(s, 32 * MiB), "grant_us": [cost_of(s)] * 3}
                        for s in [0] + [2 * MiB * 4**k for k in range(7)]])
    flat = T.grant_text(T.grant_findings(grants(lambda s: 900.0 if s == 0 else 15000.0)))
    assert "so here the grant does not grow with the pool, 17x or more what it costs on an empty pool" in flat
    assert "(32 MiB to 8 GiB reserved)" in flat and "256x range of reserves" in flat
    growing = T.grant_text(T.grant_findings(grants(lambda s: 10.0 + s / MiB)))
    # 2, 8 and 32 MiB share a 32 MiB reserve: their samples are pooled (median 18), then 128 MiB ... 8 GiB
    assert "it grew from 18 to 8202 µs" in growing and "does not grow" not in growing


def test_the_miss_table_calls_a_difference_only_beyond_the_quartiles():
    """access_cost.cu times each miss after an untimed miss of the same pool: one ratio per size, and 'slower' or
    'faster' only where the two pools' quartiles do not overlap and the medians are 5% apart."""
    from streamalloc.lessons import two_gpus as T
    from streamalloc.measure import Records

    def rows(plain, mapped):
        return T.miss_rows(Records([{"part": "miss", "size": 8 * GiB, "peer_mapped": m, "us": u}
                                    for m, u in ((False, plain), (True, mapped))]))
    slower = rows([100.0, 101.0, 99.0, 100.0, 102.0], [120.0, 121.0, 119.0, 122.0, 120.0])
    assert slower[0]["ratio"] == 120.0 / 100.0 and slower[0]["said"] == "slower"
    assert "at 8 GiB, 1.20x (slower)" in T.miss_text(slower)
    overlap = rows([100.0, 80.0, 100.0, 80.0, 100.0], [110.0, 95.0, 90.0, 105.0, 99.0])
    assert overlap[0]["said"] == "within the spread" and "(within the spread)" in T.miss_text(overlap)
    assert rows([100.0] * 3, [50.0] * 3)[0]["said"] == "faster"
    # quartiles apart but the medians within 5% (the H100 pair's 16 MiB: 81.4 against 82.4 µs): not a finding
    assert rows([82.4, 82.3, 82.5, 82.4, 82.4], [81.4, 81.3, 81.5, 81.4, 81.4])[0]["said"] == "within the spread"


def test_the_link_sentence_for_gpus_that_are_not_peer_capable():
    """§15.10's failures, as a machine whose GPUs cannot reach each other would print them (canned, typed here)."""
    from streamalloc.lessons import two_gpus as T

    links = [{"device": d, "peer": p, "can_access_peer": 0, "performance_rank": 0, "native_atomic_supported": 0}
             for d, p in ((0, 1), (1, 0))]
    tries = [{"device": 0, "peer": 1, "pool": "empty", "can_access_peer": 0, "set_access": "cudaSuccess",
              "next_allocation": "cudaErrorInvalidDevice"},
             {"device": 0, "peer": 1, "pool": "holding", "can_access_peer": 0, "set_access": "cudaErrorInvalidDevice",
              "next_allocation": "cudaSuccess"}]
    text = T.link_text(links, tries)
    assert text.startswith("0 of 2 ordered pairs are peer capable")
    assert "0 on 1's empty pool: set access cudaSuccess, next allocation cudaErrorInvalidDevice" in text
    assert "0 on 1's holding pool: set access cudaErrorInvalidDevice" in text


def test_the_pairs_that_are_not_peer_capable_are_held_only_to_what_15_10_says_will_happen(capsys):
    """§15.10: on an empty pool a set access that succeeds means the next allocation "will fail" (asserted); on a pool
    already holding memory the set access only "may fail" (reported, whatever it answered)."""
    from streamalloc.lessons import two_gpus as T

    cell = code_cell("05b_two_gpus", "len(tries) == 2 * len(links)")
    links = [{"device": d, "peer": p, "can_access_peer": 0, "performance_rank": 0, "native_atomic_supported": 0}
             for d, p in ((0, 1), (1, 0))]

    def run(empty_next, holding_set):
        tries = [dict(device=d, peer=p, can_access_peer=0, pool=pool, access_after="none",
                      set_access="cudaSuccess" if pool == "empty" else holding_set,
                      next_allocation=empty_next if pool == "empty" else "cudaSuccess")
                 for d, p in ((0, 1), (1, 0)) for pool in ("empty", "holding")]
        exec(cell, {"two": True, "links": links, "tries": tries, "link": None, "found": {}, "T": T})

    run("cudaErrorInvalidDevice", holding_set="cudaSuccess")  # the holding pool's "may": no failure
    assert "holding pool: set access cudaSuccess" in capsys.readouterr().out
    with pytest.raises(AssertionError):  # the empty pool's "will fail" did not
        run("cudaSuccess", holding_set="cudaErrorInvalidDevice")


def test_device_ones_reserve_across_device_zeros_synchronize_is_bounded_not_frozen():
    """§15.8: used and reserved are statistics of the pool that holds the allocation; device 0's work leaves device
    1's allocation (used) as it was, while its reserve, which a synchronization may trim above the threshold, is
    only held to used <= reserved."""
    from streamalloc.lessons import two_gpus as T
    from streamalloc.measure import Records

    cell = code_cell("05b_two_gpus", "start, on1, on0 = (cd.one(step=s) for s in T.STEPS)")
    mb = 1 << 20

    def run(on0_used1=64 * mb, on0_reserved1=80 * mb):
        lines = [dict(step=T.STEPS[0], used0=0, reserved0=0, used1=0, reserved1=0),
                 dict(step=T.STEPS[1], current_device=0, ptr_device=1, ptr_is_device_memory=True, used0=0,
                      reserved0=0, used1=64 * mb, reserved1=96 * mb),
                 dict(step=T.STEPS[2], ptr_device=0, used0=64 * mb, reserved0=64 * mb, used1=on0_used1,
                      reserved1=on0_reserved1),
                 dict(step="check", wrong=0, elements=1000, free_with_device0_current="cudaSuccess")]
        exec(cell, {"two": True, "cd": Records(lines), "T": T, "BYTES": 64 * mb, "found": {}, "print": lambda *a: None})

    run()  # device 1's pool trimmed from 96 to 80 MiB while device 0 synchronized: allowed
    for wrong in (dict(on0_used1=0), dict(on0_reserved1=32 * mb)):  # its allocation gone; reserve below its use
        with pytest.raises(AssertionError):
            run(**wrong)
