"""tools/compile_matrix.py finds every .cu the course writes, knows which must fail and which are lab stubs,
and compiles with a cache; tools/hold_memory.py's plan leaves what was asked. The matrix itself runs in CI
(make compile-matrix)."""
import shutil
import sys
from pathlib import Path

import pytest

import compile_matrix
import hold_memory

ROOT = Path(__file__).resolve().parent.parent


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
    ok, log, cached = compile_matrix.compile_one(tk, "sm_75", "good.cu", good)
    assert ok and not cached, log
    assert compile_matrix.compile_one(tk, "sm_75", "good.cu", good)[2], "the same content is not built twice"
    ok, log, _ = compile_matrix.compile_one(tk, "sm_75", "bad.cu", good.replace("*p = 1", "*p = undefined_name"))
    assert not ok and "undefined_name" in log


@pytest.mark.skipif(shutil.which("nvcc") is None and not Path(sys.prefix, "bin", "nvcc").exists(), reason="no nvcc")
def test_a_row_reuses_the_courses_build_and_builds_the_other_archs_in_one_call_or_each_to_say_which_fails(
        tmp_path, monkeypatch):
    from streamalloc import cuda, gpu
    if not (gpu.nvcc_version() or "").startswith("13."):
        pytest.skip("cuda13 needs a CUDA 13 nvcc")
    monkeypatch.setattr(compile_matrix, "BUILD", tmp_path / "matrix")
    monkeypatch.setenv("STREAMALLOC_PROGRAMS", str(tmp_path / "programs"))
    (tmp_path / "matrix").mkdir()
    tk = compile_matrix.toolkit("cuda13")
    good = "__global__ void k(int *p) { *p = 1; }\nint main() { return 0; }\n"
    (tmp_path / "good.cu").write_text(good)
    cuda.build(tmp_path / "good.cu", arch=["-arch=sm_90"], out_dir=tmp_path / "programs")  # as make test builds it
    calls = []
    real_run = compile_matrix.subprocess.run
    monkeypatch.setattr(compile_matrix.subprocess, "run", lambda cmd, **k: calls.append(cmd) or real_run(cmd, **k))
    row = compile_matrix.compile_row(tk, ["sm_75", "sm_90"], "good.cu", good)
    assert row["sm_90"] == (True, "", True) and row["sm_75"][0] and not row["sm_75"][2], row
    assert len(calls) == 0, "sm_75 alone is the course's build too (build/cuda/bin)"
    sm80 = "__global__ void k() {\n#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800\n#error needs sm_80\n#endif\n}\n" \
           "int main() { return 0; }\n"
    row = compile_matrix.compile_row(tk, ["sm_75", "sm_90"], "sm80.cu", sm80)
    assert not row["sm_75"][0] and "needs sm_80" in row["sm_75"][1] and row["sm_90"][0], row
    assert any("-gencode=arch=compute_75,code=[sm_75,compute_75]" in c for c in calls), "not tried in one call first"


def test_hold_memory_leaves_what_was_asked():
    GiB = hold_memory.GiB
    sizes = hold_memory.plan(free=80 * GiB + 123, leave=15 * GiB)
    assert sum(sizes) == 65 * GiB + 123 and max(sizes) == GiB
    assert hold_memory.plan(free=10 * GiB, leave=15 * GiB) == []


def test_the_cuda12_nvcc_comes_from_the_machines_own_debian_entry_with_non_free_added(tmp_path):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\n# a comment\nURIs: http://apt.example.invalid/debian\nSuites: bookworm bookworm-updates\n"
        "Components: main contrib\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
        "Types: deb\nURIs: http://apt.example.invalid/debian-security\nSuites: bookworm-security\nComponents: main\n")
    assert compile_matrix.debian_source(tmp_path) == (
        "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://apt.example.invalid/debian "
        f"{compile_matrix.DEBIAN_SUITE} main contrib non-free")
    (tmp_path / "sources.list.d" / "debian.sources").unlink()
    (tmp_path / "sources.list").write_text("deb http://other.example.invalid/debian trixie main\n")
    assert compile_matrix.debian_source(tmp_path) == "deb http://other.example.invalid/debian trixie main non-free"
    (tmp_path / "sources.list").write_text("")
    with pytest.raises(SystemExit, match="no Debian archive entry"):
        compile_matrix.debian_source(tmp_path)


def test_no_package_index_or_mirror_address_in_the_projects_files():
    import re
    import subprocess
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    address = re.compile(r"https?://[^\s\"')]*(deb\.debian\.org|debian\.org/debian|download\.pytorch\.org|"
                         r"pypi\.org/simple|pypi\.nvidia\.com|/simple/?[\s\"']|archive\.ubuntu\.com|mirror)", re.I)
    found = [f"{f}: {m[0]}" for f in files if not f.startswith("recordings/") and (ROOT / f).is_file()
             for m in address.finditer((ROOT / f).read_text(errors="replace"))]
    assert not found, found
