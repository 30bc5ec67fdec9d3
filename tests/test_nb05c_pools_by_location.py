"""05c (pools by location): its module's sentences, and its notebook run end to end on hand-typed lines.

Those lines (shaped like pools_by_location.cu's and numa_ipc_pool.cu's output) stay in a temporary recordings folder
for one test: not a recording, not a figure. Reference recordings are made on a GPU by the recorder.
"""
import json
from pathlib import Path

import pytest

from streamalloc.lessons import pools_by_location as L
from notebook import replayed
from streamalloc.measure import MiB, Records

NAME = "05c_pools_by_location"
NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / f"{NAME}.ipynb"
BLOCK = 64 * MiB


def lines(*records):
    return "".join(json.dumps(r) + "\n" for r in records)


def where_lines(cuda13=True, other="cudaErrorInvalidValue"):
    if not cuda13:
        return lines(dict(step="versions", runtime=12080, driver=13000, managed_memory=1, concurrent_managed_access=1,
                          needs="CUDA 13", why="cudaMemGetDefaultMemPool ... are not in this runtime"))
    look = lambda place, ok="cudaSuccess", **kw: dict(step="lookup", place=place, default=ok, current=ok,  # noqa: E731
                                                      current_is_default=ok == "cudaSuccess", **kw)
    return lines(
        dict(step="versions", runtime=13000, driver=13000, managed_memory=1, concurrent_managed_access=1,
             host_numa_id=0, host_memory_pools=1, host_numa_memory_pools=1),
        look("device 0, pinned", same_as_device_default=True, same_as_device_current=True), look("host, pinned"),
        look("host NUMA node, pinned"), look("device 0, managed", "cudaErrorNotSupported"),
        look("no location, managed", "cudaErrorNotSupported"),
        dict(step="set_current", place="device 0", create="cudaSuccess", set="cudaSuccess", current_is_new_pool=True,
             device_current_is_new_pool=True, set_other_location=other, still_new_pool=True),
        dict(step="set_current", place="host", create="cudaSuccess", set="cudaSuccess", current_is_new_pool=True,
             set_other_location=other, still_new_pool=True),
        dict(step="allocate", pool="host default", how="cudaMemGetDefaultMemPool(host, pinned)", get_access="cudaSuccess",
             set_access="cudaSuccess", device_access=True, malloc="cudaSuccess", ran=True, wrong=0, memory_type="host",
             used=BLOCK),
        dict(step="allocate", pool="managed", how="cudaErrorNotSupported"),
        dict(step="query", pool="device 0 default", location_type_query="not built: not in this CUDA's headers (CUDART_VERSION < 13020)"))


def numa_lines(ipc=True, mismatches=0):
    if not ipc:
        return lines(dict(process="exporter", step="platform", host_numa_id=-1, numa_node=0, ipc=False,
                          failed_at="cudaMemPoolCreate", error="cudaErrorNotSupported"))
    return lines(dict(process="exporter", step="platform", host_numa_id=0, numa_node=0, ipc=True),
                 dict(process="importer", gpu_access_before="none", gpu_access_after="read-write", memory_type="host",
                      checked=BLOCK // 4, mismatches=mismatches),
                 dict(process="exporter", step="shared", bytes=BLOCK, gpu_access_before="none",
                      gpu_access_after="read-write", memory_type="host", reserved=BLOCK, importer_status=0))


def test_sentences():
    recs = Records([json.loads(x) for x in where_lines().splitlines()])
    assert "a pool of another location answered cudaErrorInvalidValue" in L.set_current_text(recs.where(step="set_current")[0])
    assert "device 0 default: not built: not in this CUDA's headers" in L.query_text(recs)
    assert L.needs(json.loads(where_lines(False))) .startswith("needs CUDA 13")
    assert "failed" not in L.numa_text(*[json.loads(x) for x in numa_lines().splitlines()][::1][:1],
                                       *[json.loads(x) for x in numa_lines().splitlines()][1:])


def run_notebook(tmp_path, monkeypatch, where, numa):
    runs = [("pools_by_location", [BLOCK], where), ("numa_ipc_pool", [BLOCK], numa)]
    return replayed(NAME, tmp_path, monkeypatch, runs)[0]


def test_the_notebook_on_canned_output(recordings, tmp_path, monkeypatch):
    text = run_notebook(tmp_path, monkeypatch, where_lines(), numa_lines())
    assert "device 0: cudaMemSetMemPool with a pool of that location answered cudaSuccess" in text
    assert "the importer's kernel found 0 wrong" in text


def test_the_notebook_on_a_cuda12_build(recordings, tmp_path, monkeypatch):
    text = run_notebook(tmp_path, monkeypatch, where_lines(cuda13=False), numa_lines(ipc=False))
    assert "needs CUDA 13" in text and "cudaMemPoolCreate answered cudaErrorNotSupported" in text


def test_a_wrong_pool_accepted_for_another_location_fails(recordings, tmp_path, monkeypatch):
    import nbclient

    with pytest.raises(nbclient.exceptions.CellExecutionError, match="set_other_location"):
        run_notebook(tmp_path, monkeypatch, where_lines(other="cudaSuccess"), numa_lines())
