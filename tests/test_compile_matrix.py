"""tools/compile_matrix.py finds every .cu the course writes, knows which must fail and which are lab stubs,
and compiles with a cache; tools/hold_memory.py's plan leaves what was asked. The matrix itself runs in CI
(make compile-matrix)."""
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import compile_matrix  # noqa: E402
import hold_memory  # noqa: E402


def test_it_finds_every_writefile_cell():
    found = compile_matrix.sources()
    where = {(e["where"], e["name"]): e for e in found}
    assert ("notebooks/03_pools.ipynb", "pool_stats.cu") in where
    assert {e["where"].split("/")[0] for e in found} == {"notebooks", "solutions", "labs"}
    assert where[("notebooks/00_setup.ipynb", "broken.cu")]["expect"] == "fail"
    assert where[("notebooks/00_setup.ipynb", "first_pool.cu")]["expect"] == "compile"
    stubs = [e for e in found if e["expect"] == "stub"]
    assert stubs and all(e["where"].startswith("labs/") for e in stubs)
    assert all(e["expect"] == "compile" for e in found if e["where"].startswith("solutions/"))
    assert all("#include \"course.cuh\"" in e["text"] for e in found if e["expect"] == "compile")


def test_archs_are_a_t4_and_the_recorded_gpu():
    archs = compile_matrix.recorded_archs()
    assert "sm_75" in archs and "sm_90" in archs


@pytest.mark.skipif(shutil.which("nvcc") is None and not Path(sys.prefix, "bin", "nvcc").exists(), reason="no nvcc")
def test_compile_one_caches_by_content(tmp_path, monkeypatch):
    monkeypatch.setattr(compile_matrix, "BUILD", tmp_path)
    from streamalloc import gpu
    tk = {"name": "here", "nvcc": gpu.nvcc_path(), "version": gpu.nvcc_version() or "?", "flags": ["-c"]}
    good = '#include "course.cuh"\n__global__ void k(int *p) { *p = 1; }\nint main() { return 0; }\n'
    ok, log, cached = compile_one = compile_matrix.compile_one(tk, "sm_75", "good.cu", good)
    assert ok and not cached, log
    assert compile_matrix.compile_one(tk, "sm_75", "good.cu", good)[2], "the same content is not built twice"
    ok, log, _ = compile_matrix.compile_one(tk, "sm_75", "bad.cu", good.replace("*p = 1", "*p = undefined_name"))
    assert not ok and "undefined_name" in log


def test_hold_memory_leaves_what_was_asked():
    GiB = hold_memory.GiB
    sizes = hold_memory.plan(free=80 * GiB + 123, leave=15 * GiB)
    assert sum(sizes) == 65 * GiB + 123 and max(sizes) == GiB
    assert hold_memory.plan(free=10 * GiB, leave=15 * GiB) == []
