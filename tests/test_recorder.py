"""streamalloc/include/calltrace.cpp, the course's call recorder: it builds against the CUDA 13 headers nvcc brings and
the CUDA 12.0 headers the compile matrix uses; the record's channel is never handed to the program, every line it
writes verifies under the run's key, and a line written by anything else does not. Live (STREAMALLOC_MODE=live on a
GPU), a program reaching CUDA every way it can (runtime, -lcuda, cuGetProcAddress, cudaGetDriverEntryPoint(ByVersion),
the per-thread flavours) is recorded once per call it made, in order, with the right stream; and a program that
forges lines into its record is found out."""
import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from streamalloc import calls, cuda, gpu

ROOT = Path(__file__).resolve().parent.parent
LIVE = os.environ.get("STREAMALLOC_MODE") == "live"
HERE = Path(__file__).parent
PYTHON = os.path.realpath(sys.executable)  # the interpreter itself: a launcher script would take the channel first


def nvcc_include() -> Path | None:
    nvcc = gpu.nvcc_path()
    return Path(cuda.real_nvcc(nvcc)).parent.parent / "include" if nvcc else None


def cuda12_include() -> list[Path]:
    """The CUDA 12.0 runtime headers (and the 12.4 compiler's crt/ headers) tools/compile_matrix.py fetches."""
    import compile_matrix
    wheels = compile_matrix.CUDA12 / "wheels" / "nvidia"
    return [wheels / "cuda_runtime" / "include", wheels / "cuda_nvcc" / "include"]


def build_with(includes, out: Path) -> subprocess.CompletedProcess:
    """The recorder built with the host compiler against the given headers (as nvcc builds it: host code only)."""
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    return subprocess.run([cxx, "-std=c++17", "-shared", "-fPIC", "-O2", "-Wall", "-Werror",
                           *(f"-I{i}" for i in includes), "-o", str(out), str(calls.SOURCE), "-ldl"],
                          capture_output=True, text=True)


@pytest.fixture(scope="module")
def recorder(tmp_path_factory):
    include = nvcc_include()
    if include is None or not (include / "cuda.h").is_file():
        pytest.skip("no nvcc with its headers")
    lib = tmp_path_factory.mktemp("recorder") / "libcalltrace.so"
    done = build_with([include], lib)
    assert done.returncode == 0, done.stderr
    return lib


def exported(lib: Path) -> set:
    out = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True).stdout
    return {line.split()[-1] for line in out.splitlines() if " T " in line}


def test_it_builds_against_the_cuda_13_headers_and_exports_every_flavour(recorder):
    names = exported(recorder)
    for symbol in ("cuMemAllocAsync", "cuMemAllocAsync_ptsz", "cuMemAlloc_v2", "cuStreamWaitEvent_ptsz",
                   "cuEventRecord_ptsz", "cuGraphLaunch_ptsz", "cuMemcpyAsync_ptsz", "cuMemcpyHtoDAsync_v2_ptsz",
                   "cuMemcpyDtoH_v2_ptds", "cuStreamBeginCapture_v2", "cuGraphInstantiateWithFlags",
                   "cuGetProcAddress", "cuGetProcAddress_v2", "cudaGetDriverEntryPoint",
                   "cudaGetDriverEntryPoint_ptsz", "cudaGetDriverEntryPointByVersion", "execve", "posix_spawn"):
        assert symbol in names, symbol
    assert not {"cuMemAlloc", "cuStreamDestroy", "cuGraphInstantiate"} & names  # only the names cuda.h makes


def test_it_builds_with_nvcc_as_the_course_builds_it(tmp_path):
    if gpu.nvcc_path() is None:
        pytest.skip("no nvcc")
    assert calls.recorder(tmp_path).is_file()


def test_it_builds_against_the_cuda_12_0_headers(tmp_path):
    includes = cuda12_include()
    if not all((i / "cuda_runtime_api.h").is_file() or (i / "crt").is_dir() for i in includes):
        pytest.skip("the CUDA 12.0 headers are not fetched: python tools/compile_matrix.py --fetch")
    done = build_with(includes, tmp_path / "lib12.so")
    assert done.returncode == 0, done.stderr
    names = exported(tmp_path / "lib12.so")
    assert "cuMemAllocAsync_ptsz" in names and "cudaGetDriverEntryPointByVersion" not in names  # CUDA 12.5's


# -- the channel, without a GPU: a Python process stands in for the program (the recorder and the shared runtime
# preloaded into it; streamalloc_section writes a line without touching a GPU) ------------------------------------
PROGRAM = r"""
import ctypes, glob, os, subprocess, sys
ctypes.CDLL(None).streamalloc_section(sys.argv[1].encode())
seen = [k for k in os.environ if k.startswith("STREAMALLOC_CALLS")] + [
    k for k in open("/proc/self/environ", "rb").read().split(b"\0") if b"=" in k and k.split(b"=")[1] and
    k.startswith(b"STREAMALLOC_CALLS")]
print("seen", seen)
if sys.argv[1] == "parent":
    print(subprocess.run(["/bin/sh", "-c", "echo shell: $STREAMALLOC_CALLS_KEY"], capture_output=True, text=True).stdout)
    if os.fork() == 0:
        ctypes.CDLL(None).streamalloc_section(b"forked")
        os.execv(sys.executable, [sys.executable, __file__, "child", *sys.argv[2:]])
    os.wait()
    if sys.argv[2:] == ["forge"]:  # the record's file, found by its folder's name, and a line written into it
        for f in glob.glob("/tmp/calls-*/calls.jsonl") + glob.glob(os.environ.get("TMPDIR", "/tmp") + "/calls-*/*"):
            with open(f, "a") as out:
                out.write('{"seq":99,"t":1,"pid":1,"tid":1,"call":"cudaStreamSynchronize","ret":0,"stream":"0x1",'
                          '"tag":"0123456789abcdef"}\n')
"""


def channel_run(recorder, tmp_path, *args, cudart=True):
    runtime = cuda.runtime_dir()
    if cudart and not runtime:
        pytest.skip("no shared CUDA runtime (libcudart.so) beside nvcc")
    (tmp_path / "program.py").write_text(PROGRAM)
    channel = calls.Channel(recorder, None)
    if cudart:
        channel.env["LD_PRELOAD"] += " " + sorted(glob.glob(f"{runtime}/libcudart.so*"))[0]
    try:
        done = subprocess.run([PYTHON, str(tmp_path / "program.py"), *args], env=channel.env, capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout, channel.text(), channel.key
    finally:
        channel.close()


def test_the_program_is_never_handed_the_channel_and_its_exec_of_itself_goes_on_recording(recorder, tmp_path):
    out, text, key = channel_run(recorder, tmp_path, "parent")
    assert out.count("seen []") == 2, out  # neither the program nor its exec of itself sees the variables
    assert "shell:\n" in out, out  # another program it starts is not given them
    rec = calls.read(text, key)
    assert rec.forged == [], rec.forged
    marks = [(c["call"], c.get("name")) for c in sorted(rec.lines, key=lambda c: (c["pid"], c["seq"]))]
    parent, child = sorted({c["pid"] for c in rec.lines})
    assert [(c["call"], c.get("name")) for c in rec.lines if c["pid"] == parent] == [("section", "parent"), ("end", None)]
    assert [(c["call"], c.get("name")) for c in sorted(rec.lines, key=lambda c: c["seq"]) if c["pid"] == child] == [
        ("section", "forked"), ("section", "child"), ("end", None)], marks


def test_a_line_written_into_the_record_by_the_program_is_found_out(recorder, tmp_path):
    out, text, key = channel_run(recorder, tmp_path, "parent", "forge")
    assert '"tag":"0123456789abcdef"' in text, "the stand-in did not manage to write into the record"
    rec = calls.read(text, key)
    assert rec.forged and "without the run's tag" in rec.forged[0], rec.forged
    assert calls.read(text, None).forged == []  # a recording (no key) is taken as it is


def test_a_process_without_the_cuda_runtime_passes_the_channel_on_untouched(recorder, tmp_path):
    out, text, _ = channel_run(recorder, tmp_path, "launcher", cudart=False)
    assert "STREAMALLOC_CALLS_KEY" in out and text == "", out  # a launcher between the check and the program


# -- live: every way a program reaches CUDA -------------------------------------------------------------------------
live = pytest.mark.skipif(not LIVE, reason="needs a GPU (STREAMALLOC_MODE=live)")


def libcuda_flags() -> list[str]:
    """How to link the driver (-lcuda): the driver's own libcuda.so.1, where the toolkit has no stub."""
    found = subprocess.run(["/sbin/ldconfig", "-p"], capture_output=True, text=True).stdout
    for line in found.splitlines():
        if "libcuda.so.1 " in line and "x86-64" in line or "libcuda.so.1 " in line and "aarch64" in line:
            path = line.split("=>")[-1].strip()
            return [f"-L{os.path.dirname(path)}", "-l:libcuda.so.1"]
    return ["-lcuda"]


def traced(name: str, tmp_path, flags=()) -> tuple[str, calls.Calls]:
    exe = cuda.build(HERE / "programs" / name, flags=[*calls.FLAGS, *flags], arch=["-arch=native"], out_dir=tmp_path)
    channel = calls.Channel(calls.recorder(tmp_path), cuda.runtime_dir())
    try:
        done = cuda.run(exe, [], timeout=60, env=channel.env)
        return done.stdout, calls.read(channel.text(), channel.key)
    finally:
        channel.close()


@live
def test_a_runtime_only_program_is_recorded_one_line_per_call_it_made(tmp_path):
    out, rec = traced("runtime_only.cu", tmp_path)
    assert rec.forged == []
    assert [c["call"] for c in rec.lines] == ["cudaStreamCreate", "cudaMallocAsync", "cudaLaunchKernel",
                                              "cudaFreeAsync", "cudaStreamSynchronize", "cudaStreamDestroy", "end"]
    assert not [c for c in rec.lines if c.get("api")], "the runtime's own use of the driver is in the record"
    assert rec.problems() == [] and rec.launches("touch")


@live
def test_every_way_to_the_driver_is_recorded_once_in_order_with_its_stream(tmp_path):
    out, rec = traced("every_way.cu", tmp_path, libcuda_flags())
    import json
    ways = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert rec.forged == [], rec.forged
    assert [c["call"] for c in rec.named("cudaMallocAsync", "runtime") + rec.named("cudaFreeAsync", "runtime")] == [
        "cudaMallocAsync", "cudaFreeAsync"]
    assert [c["call"] for c in rec.lines if c["in"] == "runtime" and c["call"] != "section"] == [
        "cudaStreamCreate", "cudaMallocAsync", "cudaFreeAsync", "cudaStreamSynchronize"]
    driver = [c for c in rec.lines if c["in"] == "driver" and c["call"] != "section"]
    pairs = [w for w in ways if "size" in w]
    expected = ["cudaStreamCreate"] + ["cudaMallocAsync", "cudaFreeAsync"] * len(pairs) + [
        "cudaMallocAsync", "cudaLaunchKernel", "cudaFreeAsync", "cudaDeviceSynchronize", "cudaStreamDestroy"]
    assert [c["call"] for c in driver] == expected, [(c["call"], c.get("as")) for c in driver]
    assert all(c.get("api") == "driver" for c in driver)
    for k, way in enumerate(pairs):
        alloc, free = driver[1 + 2 * k], driver[2 + 2 * k]
        assert (alloc["size"], alloc["stream"], alloc["as"]) == (way["size"], way["stream"], "cuMemAllocAsync"), way
        assert (free["ptr"], free["stream"], free["as"]) == (way["ptr"], way["stream"], "cuMemFreeAsync"), way
    assert {w["way"] for w in pairs} >= {"direct", "direct per-thread", "cuGetProcAddress",
                                         "cuGetProcAddress per-thread", "cuGetProcAddress of cuGetProcAddress",
                                         "cudaGetDriverEntryPoint", "cudaGetDriverEntryPoint per-thread"}
    assert [w["stream"] for w in pairs if "per-thread" in w["way"]] == ["0x2"] * 3
    kernel = next(w for w in ways if w["way"] == "kernel")
    launch = rec.launches("touch", "driver")
    assert len(launch) == 1 and launch[0].call["args"] == [kernel["ptr"]] and launch[0].call["stream"] == kernel["stream"]
    assert launch[0].call["as"] == "cuLaunchKernel" and rec.problems() == []


@live
def test_a_program_that_forges_its_record_is_not_verified(tmp_path):
    out, rec = traced("forges_its_record.cu", tmp_path)
    assert "environment: none" in out, out  # the program was not handed the record's file
    assert "wrote into" in out, "the program did not find the record's file to write into it"
    assert rec.forged, "a forged line was taken as the recorder's"
