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
