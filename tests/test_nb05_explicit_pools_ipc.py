"""Lesson 05's plumbing (streamalloc/lessons/explicit_pools_ipc.py), the sizes helper it shares
(sa.measure.free_memory, block_size), and the notebook's Python run end to end on CANNED output.

The canned output below is typed by hand in the shape the programs print; it lives only in a temporary recordings
folder for one test. It is never a recording and never a figure: the reference recordings come from a GPU.
"""
import json
from pathlib import Path

import pytest

from streamalloc import gpu, lesson, replay
from streamalloc.lessons import explicit_pools_ipc as X
from notebook import code_cell, programs, replayed
from streamalloc.measure import GiB, MiB, Records, block_size, free_memory

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "05_explicit_pools_ipc.ipynb"
NAME = "05_explicit_pools_ipc"
BLOCK = 64 * MiB


# -- the sizes helper ----------------------------------------------------------------------------------------
def test_block_size_is_64_mib_or_a_sixteenth_in_whole_pages():
    assert block_size(80 * GiB) == 64 * MiB
    assert block_size(GiB) == 64 * MiB
    assert block_size(500 * MiB) == 30 * MiB  # 31.25 MiB, down to whole 2 MiB pages
    assert block_size(16 * MiB) == 8 * MiB    # never under 8 MiB
    assert block_size(GiB, most=4 * MiB, least=2 * MiB) == 4 * MiB


def test_free_memory_of_the_machine_or_the_fallback():
    assert free_memory(gpu.Machine(gpu="G", memory_free=123 * MiB)) == 123 * MiB
    assert free_memory(gpu.Machine(gpu="G")) == 8 * GiB
    assert free_memory(None, otherwise=4 * GiB) == 4 * GiB


# -- the IPC limitations beside the guide ----------------------------------------------------------------
def imported(**change):
    """The importer's line, shaped as ipc_pool.cu prints it, with the answers of a driver that refuses."""
    r = dict(process="importer", step="imported", bytes=BLOCK, checked=BLOCK // 4, mismatches=0, first_bad=-1,
             read_start_ns=1_000_300_000, freed_ns=1_050_000_000, access_before="read-write", set_access="not needed",
             access_after="read-write", attribute_query_imported="cudaErrorInvalidValue", used_while_imported=-1,
             reserved_while_imported=-1, malloc_from_imported="cudaErrorInvalidValue",
             set_current_imported="cudaErrorInvalidValue", threshold_on_imported="cudaErrorInvalidValue",
             reserved_after_free=-1, trim_imported="cudaErrorInvalidValue", reserved_after_trim=-1)
    return {**r, **change}


def exported(**change):
    r = dict(process="exporter", step="shared", bytes=BLOCK, spin_ms=150, written_ns=1_000_000_000,
             free_start_ns=1_050_200_000, importer_status=0, reserved_allocated=BLOCK, reserved_after_sync=0,
             reserved_after_trim=0, plain_reserved_after_sync=0)
    return {**r, **change}


def test_every_disagreement_with_the_guide_is_named():
    rows = X.guide_rows(imported(), exported())
    differ = [r for r in rows if r["agrees"] is False]
    assert [r["section"] for r in differ] == ["§15.11.4", "§15.11.5", "§15.11.5"]
    text = X.disagreements_text(rows)
    assert "3 of the 5 points tested" in text
    assert "0 MiB after its buffer was freed" in text  # the exported pool gave its memory back
    assert "setting the threshold answered cudaErrorInvalidValue, the trim cudaErrorInvalidValue" in text
    assert "the queries answered cudaErrorInvalidValue" in text
    # nothing was left to trim, so the trim's no-op could not be seen
    assert [r["agrees"] for r in rows if "cudaMemPoolTrimTo is a no-op on an IPC pool" in r["the guide says"]] == [None]


def test_a_driver_that_does_what_the_guide_says_differs_nowhere():
    imp = imported(attribute_query_imported="cudaSuccess", used_while_imported=BLOCK, reserved_while_imported=BLOCK,
                   threshold_on_imported="cudaSuccess", trim_imported="cudaSuccess")
    exp = exported(reserved_after_sync=BLOCK, reserved_after_trim=BLOCK)
    rows = X.guide_rows(imp, exp)
    assert all(r["agrees"] is True for r in rows), rows
    assert X.disagreements_text(rows) == "This driver did what §15.11.4 and §15.11.5 say, on all 6 points tested."


def test_an_imported_pool_that_allocates_is_a_difference():
    rows = X.guide_rows(imported(malloc_from_imported="cudaSuccess"), exported())
    assert any(r["agrees"] is False and "cannot allocate" in r["the guide says"] for r in rows)


def test_max_size_text_says_the_error_is_the_drivers_and_reads_the_attribute_where_there_is_one():
    cap = dict(step="max_size", supported=True, max_size=160 * MiB, bytes=BLOCK, reserved=128 * MiB,
               results=["cudaSuccess", "cudaSuccess", "cudaErrorMemoryAllocation"],
               max_pool_size_query="not available in this runtime")
    text = X.max_size_text(cap, BLOCK)
    assert "this driver's answers" in text and "cudaMemPoolAttrMaxPoolSize: not available in this runtime" in text
    text = X.max_size_text({**cap, "max_pool_size_query": "cudaSuccess", "max_pool_size_attr": 160 * MiB}, BLOCK)
    assert "cudaMemPoolAttrMaxPoolSize read back 160 MiB" in text


def test_host_pools_not_in_this_runtime_are_reported_not_run():
    recs = Records([dict(kind="versions", runtime=12040, driver=13000),
                    dict(kind="device", bytes=BLOCK, supported=True, access_before="read-write", set_access="not needed",
                         access_after="read-write", ran=True, first_alloc_us=300.0, alloc_us=[2.0, 3.0],
                         kernel_ms=[0.05, 0.05], wrong=0, memory_type="device"),
                    dict(kind="host", supported=False, error="not available in this runtime"),
                    dict(kind="host_numa", bytes=BLOCK, supported=True, access_before="none", set_access="cudaSuccess",
                         access_after="read-write", ran=True, first_alloc_us=9000.0, alloc_us=[2.0, 4.0],
                         kernel_ms=[1.0, 1.0], wrong=0, memory_type="host")])
    pools = X.host_pools(recs)
    rows = X.host_rows(pools)
    assert [r["pool"] for r in rows] == ["device", "host", "host_numa"]
    assert rows[1]["created"] == "no: not available in this runtime"
    assert rows[2]["device 0's access"] == "none → read-write"
    text = X.host_text(pools)
    assert "host_numa pool's memory 20.0x slower" in text and "not available here: host (not available" in text


# -- the notebook on canned output ---------------------------------------------------------------------------
def lines(*records):
    return "".join(json.dumps(r) + "\n" for r in records)


def canned_runs():
    """(program, args, stdout) of every run the notebook makes, as an H100 with a driver that refuses prints."""
    explicit = lines(
        dict(step="support", runtime=13000, driver=13000, pools_supported=1, handle_types=9, posix_fd=True),
        dict(step="current", how="cudaMallocFromPoolAsync(pool)", ptr="0x1", current_is_default=True,
             current_is_explicit=False, default_used=0, explicit_used=BLOCK),
        dict(step="current", how="cudaDeviceSetMemPool(pool), cudaMallocAsync", ptr="0x2", current_is_default=False,
             current_is_explicit=True, default_used=0, explicit_used=2 * BLOCK),
        dict(step="current", how="cudaDeviceSetMemPool(default), cudaMallocAsync", ptr="0x3", current_is_default=True,
             current_is_explicit=False, default_used=BLOCK, explicit_used=2 * BLOCK),
        dict(step="isolation", bytes=BLOCK, a_reserved_after_free=BLOCK, a_reserved=BLOCK, b_reserved=BLOCK,
             a_again_same_address=True, b_same_address=False),
        dict(step="max_size", supported=True, max_size=160 * MiB, bytes=BLOCK,
             results=["cudaSuccess", "cudaSuccess", "cudaErrorMemoryAllocation"], reserved=2 * BLOCK,
             max_pool_size_query="not available in this runtime"),
        dict(step="destroy", bytes=4 * BLOCK, free_before=80 * GiB, free_allocated=80 * GiB - 4 * BLOCK,
             free_destroyed=80 * GiB - 4 * BLOCK, free_freed=80 * GiB, destroy_us=1.0, used_after_destroy=True))
    pa = lambda what, pool, expected: dict(what=what, ptr="0x10", mempool_result=0, mempool=pool,  # noqa: E731
                                           expected_pool=expected, pool_matches=pool == expected, context_result=0,
                                           context="0x0", context_is_null=True, ordinal_result=0, device_ordinal=0)
    attrs = lines(pa("cudaMallocAsync (default pool)", "0xa", "0xa"), pa("cudaMallocFromPoolAsync (explicit pool)", "0xb", "0xb"),
                  pa("cudaMalloc", "0x0", "0x0"))
    ipc = lines(dict(process="exporter", step="platform", handle_types=9, posix_fd=True, ipc=True,
                     default_export="cudaErrorInvalidValue"),
                imported(), dict(process="importer", step="destroyed", destroy_imported="cudaSuccess"), exported())
    us = lambda first, rest: [first] + [rest + 0.1 * i for i in range(31)]  # noqa: E731
    cost = lines(dict(process="importer", count=32, bytes=2 * MiB, import_pool_us=130.0, import_pointer_us=us(100.0, 0.6),
                      free_imported_us=us(4.0, 0.8), open_handle_us=us(64.0, 41.0), close_handle_us=us(85.0, 30.0)),
                 dict(process="exporter", step="cost", count=32, bytes=2 * MiB, export_pointer_us=us(800.0, 20.0),
                      get_handle_us=us(250.0, 5.0), importer_status=0))
    pool = lambda kind, ms: dict(kind=kind, bytes=BLOCK, supported=True, get_access="cudaSuccess",  # noqa: E731
                                 access_before="read-write" if kind == "device" else "none",
                                 set_access="not needed" if kind == "device" else "cudaSuccess", set_access_us=5.0,
                                 access_after="read-write", ran=True, first_alloc_us=500.0, alloc_us=[2.0] * 10,
                                 kernel_ms=[ms] * 10, wrong=0, memory_type="device" if kind == "device" else "host",
                                 pointer_device=0, host_pointer=kind != "device", reserved=BLOCK)
    host = lines(dict(kind="versions", runtime=13000, driver=13000), pool("device", 0.03), pool("host", 1.2),
                 pool("host_numa", 1.3))
    vm = lines(dict(limit=0, vm_before_cuda=6 * MiB, vm_after_init=40 * GiB, vm_after_alloc=41 * GiB, failed_at="nothing",
                    error="cudaSuccess"),
               dict(limit=82 * GiB, vm_before_cuda=6 * MiB, vm_after_init=40 * GiB, vm_after_alloc=41 * GiB,
                    failed_at="nothing", error="cudaSuccess"),
               dict(limit=20 * GiB + GiB // 2, vm_before_cuda=6 * MiB, failed_at="cudaFree(0)",
                    error="cudaErrorMemoryAllocation"))
    over = lines(dict(bytes=BLOCK, explicit_used_before=0, explicit_used_after=BLOCK, default_used_before=0,
                      default_used_after=0, current_is_default=True, plain_default_used=BLOCK, plain_explicit_used=BLOCK))
    revoke = lines(*[dict(pool=p, access_before="read-write", set_prot_none="cudaErrorInvalidValue",
                          access_after="read-write", ran=True, wrong=0) for p in ("default", "explicit")])
    sync_free = lines(dict(process="exporter", step="platform", ipc=True, error="cudaSuccess"),
                      dict(process="importer", checked=BLOCK // 4, mismatches=0, read_start_ns=1_000_100_000,
                           cudaFree="cudaSuccess", freed_at_ns=5_000),
                      dict(process="exporter", step="freed", bytes=BLOCK, spin_ms=150, written_ns=1_000_000_000,
                           free_called_ns=5_100, cudaFree="cudaSuccess", used_after_free=0, importer_status=0))
    return [("pool_overload", [BLOCK], over), ("resident_access", [BLOCK], revoke),
            ("ipc_sync_free", [BLOCK, 150], sync_free),
            ("explicit_pool", [BLOCK], explicit), ("pointer_attrs", [BLOCK], attrs), ("ipc_pool", [BLOCK, 150, 50], ipc),
            ("ipc_cost", [32, 2 * MiB], cost), ("host_pool", [BLOCK, 10], host), ("vm_limit", [BLOCK], vm)]


def test_the_notebook_on_canned_output(recordings, tmp_path, monkeypatch):
    assert sorted(name for name, _, _ in canned_runs()) == sorted(Path(f).stem for f in programs(NAME))
    text, _ = replayed(NAME, tmp_path, monkeypatch, canned_runs())
    assert "BLOCK = 64 MiB" in text
    assert "This driver differs from the guide on 3 of the 5 points tested" in text
    assert "access read-write on import; cudaMemPoolSetAccess: not needed" in text
    assert "cudaMemPoolAttrMaxPoolSize: not available in this runtime" in text
    assert "a kernel wrote the host pool's memory 40.0x slower" in text
    assert "cudaFree(0): cudaErrorMemoryAllocation" in text
    assert "the named pool's UsedMemCurrent grew by 64 MiB, the default pool's by 0 MiB" in text
    assert "cudaMemPoolSetAccess(device 0, ProtNone) answered cudaErrorInvalidValue, device 0's access read-write" in text
    assert "not offered here: cudaMemHandleTypeWin32, cudaMemHandleTypeWin32Kmt" in text
    assert "its cudaFree answered cudaSuccess, the exporter's cudaSuccess, 0 µs later" in text
    figures = json.loads((tmp_path / "key_figures" / "replay" / f"{NAME}.json").read_text())["figures"]
    assert {"cudaMemPoolExportPointer host time, median", "cudaMemPoolImportPointer host time, median",
            "GPU write into a host pool ÷ into a device pool, time"} <= set(figures)


@pytest.mark.parametrize("change, message", [
    (dict(access_after="none"), "access"),            # §15.11.2: the importer had no access after its set-up
    (dict(mismatches=5), "values were wrong"),       # the importer read before the data was there
    (dict(malloc_from_imported="cudaSuccess"), "malloc_from_imported"),  # §15.11.5: an imported pool that allocates
])
def test_the_ipc_assertions_reject(change, message):
    """The notebook's IPC assertion cell, run on a wrong importer line, must fail."""
    import nbformat

    cell = next(c.source for c in nbformat.read(str(NOTEBOOK), as_version=4).cells
                if c.cell_type == "code" and "imp[\"access_after\"]" in c.source)
    names = dict(IPC=True, platform=dict(default_export="cudaErrorInvalidValue"), imp=imported(**change),
                 exp=exported(), X=X)
    with pytest.raises(AssertionError, match=message):
        exec(cell, names)


# -- item 7: the CUDA 12 set's label says it ran on the default set's GPU and driver --------------------------
def test_a_set_of_another_stack_on_the_same_gpu_and_driver_says_so(recordings, monkeypatch):
    monkeypatch.setenv("STREAMALLOC_RECORD_TO", replay.DEFAULT_REFERENCE)
    cuda13 = gpu.Machine(gpu="NVIDIA H100 80GB HBM3", compute_capability="9.0", pools_supported=True, date="2026-01-01",
                         driver="580.1", driver_cuda="13.0", nvcc="13.0", runtime="13.0")
    replay.save(cuda13, "00_setup", "x", "x", [], {"stdout": ""})
    t4_like = gpu.Machine(**{**cuda13.to_dict(), "nvcc": "12.4", "runtime": "12.9", "build_arch": "compute_75"})
    other_driver = gpu.Machine(**{**t4_like.to_dict(), "driver": "570.1"})
    note = f"same GPU and driver as {replay.DEFAULT_REFERENCE}: a check of the stack, not of another GPU or driver"
    assert lesson.label(t4_like, False).endswith(note)
    assert note not in lesson.label(cuda13, False)
    assert note not in lesson.label(other_driver, False)
    assert lesson.label(t4_like, True) == "NVIDIA H100 80GB HBM3, live"


# -- the new parts' assertions reject what the guide forbids ----------------------------------------------------
def _cell(marker):
    import nbformat

    return next(c.source for c in nbformat.read(str(NOTEBOOK), as_version=4).cells
                if c.cell_type == "code" and marker in c.source and not c.source.startswith("%%writefile"))


def test_a_revoked_resident_device_fails_the_assert(monkeypatch):
    class Res:
        records = [dict(pool="default", access_before="read-write", set_prot_none="cudaSuccess", access_after="none",
                        ran=False)]

    names = dict(lesson=type("L", (), {"run": staticmethod(lambda *a, **k: Res())})(), BLOCK=BLOCK, X=X)
    with pytest.raises(AssertionError):
        exec(_cell("resident_access.cu"), names)


def test_sync_free_text_and_an_early_exporter_free():
    imp = dict(checked=10, mismatches=0, read_start_ns=2_000_000, cudaFree="cudaSuccess", freed_at_ns=10_000)
    exp = dict(written_ns=1_000_000, free_called_ns=9_000, cudaFree="cudaSuccess", used_after_free=0)
    assert "began reading 1.000 ms after" in X.sync_free_text(imp, exp)
    assert exp["free_called_ns"] < imp["freed_at_ns"]  # the notebook's order assert would reject this run
    assert X.handle_types_text(9).startswith("this GPU and driver offer cudaMemHandleTypePosixFileDescriptor, "
                                             "cudaMemHandleTypeFabric")


def run_cap_cell(**cap):
    """The cell that checks the isolation and the capped pool, on canned lines (the cap's fields as given)."""
    import types

    cell = code_cell(NAME, 'cap = recs.one(step="max_size")')
    lines = [dict(step="isolation", bytes=BLOCK, a_reserved_after_free=BLOCK, a_reserved=BLOCK, b_reserved=BLOCK,
                  a_again_same_address=True, b_same_address=False),
             dict(dict(step="max_size", supported=True, max_size=160 * MiB, bytes=BLOCK, reserved=2 * BLOCK,
                       results=["cudaSuccess", "cudaSuccess", "cudaErrorMemoryAllocation"],
                       max_pool_size_query="not available in this runtime"), **cap)]
    exec(cell, {"recs": Records(lines), "pools": types.SimpleNamespace(label="canned"), "X": X, "BLOCK": BLOCK,
                "display": lambda *a: None})


def test_the_cap_is_held_to_its_aligned_maximum_not_to_the_size_asked_for():
    """cudaMemPoolAttrMaxPoolSize "may be higher than what was initially passed ... due to alignment requirements":
    a third block that fits under the maximum the pool reads back may succeed; one past it, or past maxSize with no
    read-back (the overshoot is half a block), must fail; the pool must stay under its maximum."""
    run_cap_cell()
    run_cap_cell(results=["cudaSuccess"] * 3, reserved=3 * BLOCK, max_pool_size_query="cudaSuccess",
                 max_pool_size_attr=3 * BLOCK)
    for wrong in (dict(results=["cudaSuccess"] * 3, reserved=3 * BLOCK),
                  dict(results=["cudaSuccess"] * 3, max_pool_size_query="cudaSuccess", max_pool_size_attr=160 * MiB),
                  dict(reserved=3 * BLOCK)):
        with pytest.raises(AssertionError):
            run_cap_cell(**wrong)


def run_destroy_cell(shared=None, **destroy):
    import types

    cell = code_cell(NAME, 'd = recs.one(step="destroy")')
    big = 4 * BLOCK
    line = dict(dict(step="destroy", bytes=big, free_before=80 * GiB, free_allocated=80 * GiB - big,
                     free_destroyed=80 * GiB - big, free_freed=80 * GiB, destroy_us=1.0, used_after_destroy=True),
                **destroy)
    printed = []
    X_ = types.SimpleNamespace(plot_destroy=lambda *a: None, destroy_text=X.destroy_text)
    exec(cell, {"recs": Records([line]), "pools": types.SimpleNamespace(label="canned"), "X": X_,
                "lesson": types.SimpleNamespace(shared_with=lambda: shared), "nbytes": lambda n: f"{n / MiB:g} MiB",
                "print": printed.append})
    return "\n".join(printed)


def test_a_pool_destroyed_with_an_allocation_outstanding_keeps_its_memory_until_the_free():
    """cudaMemPoolDestroy: released "once there are no more outstanding allocations". Memory that came back at the
    destroy fails (alone on the GPU; where others compute on it, not verified); memory that came back late, or not
    all of it, after the free is reported, not failed (no time is promised, and other processes count too)."""
    assert "rose by 256 MiB (100% of the pool's 256 MiB)." in run_destroy_cell()
    with pytest.raises(AssertionError, match="the memory went back at the destroy"):
        run_destroy_cell(free_destroyed=80 * GiB)
    assert "not verified: the GPU's free memory rose by 256 MiB" in run_destroy_cell(shared=2, free_destroyed=80 * GiB)
    said = run_destroy_cell(free_freed=80 * GiB - 4 * BLOCK + BLOCK)
    assert "less than the pool held" in said and "(not verified here)" in said
