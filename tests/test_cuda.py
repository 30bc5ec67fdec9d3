"""Building and running programs, and every way that can go wrong, with host-only programs nvcc builds here."""
import time

import pytest

from streamalloc import cuda, gpu
from streamalloc.errors import CompileError, NvccNotFound, ProgramFailed, ProgramTimedOut

needs_nvcc = pytest.mark.skipif(gpu.nvcc_path() is None, reason="nvcc is not installed")


def program(tmp_path, name, body):
    src = tmp_path / f"{name}.cu"
    src.write_text('#include "course.cuh"\n#include <cstdio>\n#include <cstdlib>\n#include <unistd.h>\n' + body)
    return src


@needs_nvcc
def test_a_good_program_runs_and_its_arguments_arrive_as_a_list(tmp_path):
    exe = cuda.build(program(tmp_path, "echo", 'int main(int c, char **v) { for (int i = 1; i < c; ++i) '
                                                 'std::printf("{\\"arg\\":\\"%s\\"}\\n", v[i]); }'))
    done = cuda.run(exe, ["a b", "$HOME", ";ls"])
    assert done.stdout.splitlines() == ['{"arg":"a b"}', '{"arg":"$HOME"}', '{"arg":";ls"}']
    with pytest.raises(TypeError, match="list"):
        cuda.run(exe, "a b")


@needs_nvcc
def test_builds_are_cached_by_content_and_flags(tmp_path):
    src = program(tmp_path, "cached", "int main() { return 0; }")
    first = cuda.build(src)
    mtime = first.stat().st_mtime_ns
    assert cuda.build(src) == first and first.stat().st_mtime_ns == mtime
    assert cuda.build(src, flags=["-DX=1"]) != first
    src.write_text(src.read_text() + "\n// changed\n")
    assert cuda.build(src) != first


@needs_nvcc
def test_a_compile_error_names_file_and_line(tmp_path):
    src = program(tmp_path, "broken", "int main() {\n  int x = undefined_name;\n  return x;\n}\n")
    with pytest.raises(CompileError) as e:
        cuda.build(src)
    assert e.value.location == "broken.cu:6"
    assert "broken.cu:6" in str(e.value) and "undefined_name" in str(e.value)


@needs_nvcc
def test_a_crash_raises_with_the_signal_and_stderr(tmp_path):
    exe = cuda.build(program(tmp_path, "crash", 'int main() { std::fprintf(stderr, "about to fail\\n"); abort(); }'))
    with pytest.raises(ProgramFailed) as e:
        cuda.run(exe)
    assert "SIGABRT" in str(e.value) and "about to fail" in str(e.value)


@needs_nvcc
def test_a_non_zero_exit_raises_with_stderr(tmp_path):
    exe = cuda.build(program(tmp_path, "fails", 'int main() { std::fprintf(stderr, "x.cu:3: cudaMalloc failed\\n"); return 3; }'))
    with pytest.raises(ProgramFailed) as e:
        cuda.run(exe)
    assert e.value.returncode == 3 and "status 3" in str(e.value) and "cudaMalloc failed" in str(e.value)


@needs_nvcc
def test_running_out_of_gpu_memory_says_so_in_words(tmp_path):
    exe = cuda.build(program(tmp_path, "oom", 'int main() { std::fprintf(stderr, "oom.cu:4: cudaMallocAsync(&p, n, s) '
                                              'failed: out of memory (cudaErrorMemoryAllocation)\\n"); return 1; }'))
    with pytest.raises(ProgramFailed) as e:
        cuda.run(exe)
    assert "ran out of memory" in str(e.value) and "smaller sizes" in str(e.value)
    assert "cudaErrorMemoryAllocation" in str(e.value)


@needs_nvcc
def test_a_hang_is_killed_at_the_timeout(tmp_path):
    exe = cuda.build(program(tmp_path, "hang", 'int main() { std::printf("started\\n"); std::fflush(stdout); '
                                                 'for (;;) sleep(1); }'))
    t0 = time.perf_counter()
    with pytest.raises(ProgramTimedOut) as e:
        cuda.run(exe, timeout=1.5)
    assert time.perf_counter() - t0 < 10
    assert "1.5 s timeout" in str(e.value) and "started" in str(e.value)


def test_no_nvcc_says_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu, "nvcc_path", lambda: None)
    with pytest.raises(NvccNotFound, match="CUDA Toolkit"):
        cuda.build(program(tmp_path, "any", "int main() { return 0; }"))


def test_arch_flags():
    assert cuda.arch_flags("9.0", live=True) == ["-arch=native"]
    assert cuda.arch_flags("7.5", live=False) == ["-arch=sm_75"]
    assert cuda.arch_flags(None, live=False) == []
