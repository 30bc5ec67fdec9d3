"""Deciding live or replay, with the reason in words."""
import pytest

from streamalloc.gpu import Machine, decide

H100 = Machine(gpu="NVIDIA H100 80GB HBM3", compute_capability="9.0", pools_supported=True, driver="580.1")


def test_a_gpu_with_pools_runs_live():
    mode = decide(H100, forced="")
    assert mode.live and "supports memory pools" in mode.reason


def test_no_gpu_replays_and_says_why():
    mode = decide(Machine(problem="CuPy is not installed"), forced="")
    assert not mode.live and "CuPy is not installed" in mode.reason


def test_a_gpu_without_pools_replays():
    mode = decide(Machine(gpu="Old GPU", compute_capability="6.0", pools_supported=False), forced="")
    assert not mode.live and "does not support memory pools" in mode.reason


def test_replay_can_be_forced_on_a_gpu_machine():
    mode = decide(H100, forced="replay")
    assert not mode.live and "STREAMALLOC_MODE=replay" in mode.reason


def test_forcing_live_without_a_gpu_is_an_error():
    with pytest.raises(RuntimeError, match="STREAMALLOC_MODE=live"):  # LiveWithoutGPU is a RuntimeError
        decide(Machine(problem="no GPU"), forced="live")
    with pytest.raises(ValueError):
        decide(H100, forced="sometimes")


# -- the driver and the toolkit ---------------------------------------------------------------------------------
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

from streamalloc import gpu  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SMI = "#!/bin/sh\necho '| NVIDIA-SMI 570.1   Driver Version: 570.1   CUDA Version: {v}     |'\n"


def fake_bin(tmp_path, **scripts):
    d = tmp_path / "bin"
    d.mkdir(exist_ok=True)
    for name, text in scripts.items():
        (d / name).write_text(text)
        (d / name).chmod(0o755)
    return d


def test_driver_cuda_version_from_nvidia_smi_without_cupy(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy fails
    monkeypatch.setattr(gpu, "_libcuda_version", lambda: None)
    monkeypatch.setenv("PATH", str(fake_bin(tmp_path, **{"nvidia-smi": SMI.format(v="12.8")})))
    assert gpu.driver_cuda_version() == "12.8"
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert gpu.driver_cuda_version() is None


def test_toolkit_must_not_be_newer_than_the_driver(monkeypatch):
    monkeypatch.delenv("STREAMALLOC_ARCH", raising=False)
    assert "cudaErrorInsufficientDriver" in gpu.toolkit_problem("13.0", "12.8")
    assert "cuda-version=12.8" in gpu.toolkit_problem("13.0", "12.8")
    assert gpu.toolkit_problem("12.8", "12.4") is None, "minor version compatibility runs 12.8's SASS on a 12.4 driver"
    assert gpu.toolkit_problem("12.4", "13.0") is None and gpu.toolkit_problem("13.0", None) is None
    monkeypatch.setenv("STREAMALLOC_ARCH", "compute_75")  # PTX: an older driver cannot JIT a newer toolkit's PTX
    assert gpu.toolkit_problem("12.8", "12.4") is not None and gpu.toolkit_problem("12.4", "12.8") is None


def test_install_advice_is_advice_that_works():
    for driver in (None, "12.4", "13.0"):
        text = gpu.nvcc_help(driver)
        assert "pip install nvidia-cuda-nvcc-cu12" not in text and "sanitizer-api" not in text
    assert "cuda-version=12.4" in gpu.nvcc_help("12.4") and "PyPI" not in gpu.nvcc_help("12.4")
    assert "13.0" in gpu.insufficient_driver_hint("13.0", "12.4") and "12.4" in gpu.insufficient_driver_hint("13.0", "12.4")


def test_live_without_a_gpu_is_one_line(monkeypatch):
    with pytest.raises(gpu.LiveWithoutGPU) as e:
        decide(Machine(problem="no NVIDIA driver is installed"), forced="live")
    assert e.value._render_traceback_() == [f"LiveWithoutGPU: {e.value}"] and "\n" not in str(e.value)


def test_no_driver_says_no_gpu_found(monkeypatch):
    monkeypatch.setattr(gpu, "driver_cuda_version", lambda: None)
    m = gpu.probe()
    if m.gpu:
        pytest.skip("a GPU is here")
    assert m.describe().startswith("no GPU found") and "insufficient" not in m.describe()


def test_arch_override(monkeypatch):
    monkeypatch.delenv("STREAMALLOC_ARCH", raising=False)
    assert gpu.arch_override() is None
    monkeypatch.setenv("STREAMALLOC_ARCH", "compute_75")
    assert gpu.arch_override() == "compute_75"
    monkeypatch.setenv("STREAMALLOC_ARCH", "turing; rm -rf")
    with pytest.raises(ValueError, match="not an nvcc architecture"):
        gpu.arch_override()


def test_machine_names_the_cupy_package():
    m = Machine.from_dict({**H100.to_dict(), "cupy_package": "cupy-cuda12x"})
    assert m.cupy_package == "cupy-cuda12x"
    try:
        import cupy  # noqa: F401
    except ImportError:
        return
    assert gpu._cupy_package().startswith("cupy")


# -- tools/ensure_nvcc.sh ---------------------------------------------------------------------------------------
def ensure_nvcc(tmp_path, driver, nvcc_release=None):
    """Run ensure_nvcc.sh with a faked driver (nvidia-smi), nvcc and venv (whose pip only logs)."""
    scripts = {"nvidia-smi": SMI.format(v=driver)} if driver else {}
    if nvcc_release:
        scripts["nvcc"] = f"#!/bin/sh\necho 'Cuda compilation tools, release {nvcc_release}, V{nvcc_release}.1'\n"
    bin_dir = fake_bin(tmp_path, **scripts)
    venv = tmp_path / "v e'n$v"  # a venv path that needs quoting
    (venv / "bin").mkdir(parents=True)
    tree = tmp_path / "site it's" / "cu13"
    (tree / "bin").mkdir(parents=True)
    (tree / "bin/nvcc").write_text("#!/bin/sh\necho 'Cuda compilation tools, release 13.0, V13.0.1'\n")
    (tree / "bin/nvcc").chmod(0o755)
    (venv / "bin/python").write_text(
        f'#!/bin/sh\nif [ "$1 $2" = "-m pip" ]; then echo "pip $*" >> "{tmp_path}/pip.log"; exit 0; fi\n'
        f'case "$2" in *"import nvidia"*) echo "{tree}"; exit 0;; esac\nexec "{sys.executable}" "$@"\n')
    (venv / "bin/python").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin", "ENSURE_NVCC_CUDA": str(tmp_path / "none"),
           "PYTHONPATH": ""}
    env.pop("CUDA_HOME", None)
    env["PYTHONNOUSERSITE"] = "1"
    # CuPy is hidden from the venv's python so that the faked nvidia-smi is what reports the driver
    env["PYTHONPATH"] = str(fake_bin(tmp_path, **{"cupy.py": "raise ImportError('hidden')\n"}))
    done = subprocess.run(["bash", str(ROOT / "tools/ensure_nvcc.sh"), str(venv)], capture_output=True, text=True,
                          env=env, timeout=120)
    pip = (tmp_path / "pip.log").read_text() if (tmp_path / "pip.log").exists() else ""
    return done, pip, venv


def test_ensure_nvcc_refuses_a_cuda13_nvcc_for_a_cuda12_driver(tmp_path):
    done, pip, _ = ensure_nvcc(tmp_path, "12.4", "13.0")
    assert done.returncode == 1 and "cannot run" in done.stderr and "cuda-version=12.4" in done.stderr and not pip


def test_ensure_nvcc_uses_a_cuda12_nvcc_for_a_cuda12_driver(tmp_path):
    done, pip, _ = ensure_nvcc(tmp_path, "12.8", "12.4")
    assert done.returncode == 0 and "CUDA 12.4" in done.stdout and not pip


def test_ensure_nvcc_never_installs_cuda13_for_a_cuda12_driver(tmp_path):
    done, pip, _ = ensure_nvcc(tmp_path, "12.4")
    assert done.returncode == 1 and not pip, done.stdout + done.stderr
    assert "PyPI has" in done.stderr and "CUDA 12 toolkit" in done.stderr


def test_ensure_nvcc_installs_cuda13_without_a_driver_and_quotes_the_wrapper(tmp_path):
    done, pip, venv = ensure_nvcc(tmp_path, None)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "nvidia-cuda-nvcc>=13,<14" in pip and "release 13.0" in done.stdout
    run = subprocess.run([str(venv / "bin/nvcc"), "--version"], capture_output=True, text=True)
    assert "release 13.0" in run.stdout, (venv / "bin/nvcc").read_text()


def test_the_cupy_package_is_the_one_that_holds_the_module_python_imports(tmp_path, monkeypatch):
    """cupy-cuda12x first on the path and cupy-cuda13x after it (as on a machine with both): the label names
    cupy-cuda12x, whose files `import cupy` reads; with the order swapped, cupy-cuda13x."""
    import importlib
    import sys

    def install(folder, dist):
        (folder / "cupy").mkdir(parents=True)
        (folder / "cupy" / "__init__.py").write_text("")
        info = folder / f"{dist.replace('-', '_')}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
        (info / "RECORD").write_text("cupy/__init__.py,,\n")
        return str(folder)

    twelve, thirteen = install(tmp_path / "a", "cupy-cuda12x"), install(tmp_path / "b", "cupy-cuda13x")
    monkeypatch.delitem(sys.modules, "cupy", raising=False)
    for order, expected in (([twelve, thirteen], "cupy-cuda12x"), ([thirteen, twelve], "cupy-cuda13x")):
        monkeypatch.setattr(sys, "path", [*order, *sys.path])
        importlib.invalidate_caches()
        assert gpu._cupy_package() == expected
    # both installed into one folder: each "holds" the module; the one for CuPy's runtime is named
    both = tmp_path / "c"
    install(both, "cupy-cuda12x")
    info = both / "cupy_cuda13x-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: cupy-cuda13x\nVersion: 1.0\n")
    (info / "RECORD").write_text("cupy/__init__.py,,\n")
    monkeypatch.setattr(sys, "path", [str(both), *sys.path])
    importlib.invalidate_caches()
    assert gpu._cupy_package("12.9") == "cupy-cuda12x" and gpu._cupy_package("13.2") == "cupy-cuda13x"


# -- other processes on this GPU ----------------------------------------------------------------------------------
import types  # noqa: E402

TWO_GPUS = "GPU-aaa, 00000000:3B:00.0\nGPU-bbb, 00000000:86:00.0"


@pytest.fixture
def smi_say(tmp_path, monkeypatch):
    """nvidia-smi answering the two queries with the given lines; no NVML, no CuPy (no bus id from CUDA)."""
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setitem(sys.modules, "cupy", None)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)

    def say(gpus, apps, status=0):
        (tmp_path / "gpus").write_text(gpus + "\n")
        (tmp_path / "apps").write_text(apps + "\n" if apps else "")
        monkeypatch.setenv("PATH", str(fake_bin(tmp_path, **{"nvidia-smi": (
            f"#!/bin/sh\ncase \"$1\" in\n--query-gpu=uuid,pci.bus_id) /bin/cat {tmp_path}/gpus ;;\n"
            f"--query-compute-apps=pid,gpu_uuid) /bin/cat {tmp_path}/apps ;;\n*) exit 9 ;;\nesac\nexit {status}\n")})))
    return say


@pytest.fixture
def stray():
    """A process neither above nor below this one (its shell has exited: it hangs under init): another learner's."""
    pid = int(subprocess.run(["sh", "-c", "sleep 30 >/dev/null 2>&1 & echo $!"], capture_output=True, text=True,
                             check=True).stdout)
    yield pid
    os.kill(pid, 9)


def test_other_compute_processes_leaves_out_this_process_its_children_and_its_ancestors(smi_say, stray):
    # the processes above this one (a preflight, the course's runner) probe the GPU and so hold a context: they are
    # this learner's tools, not another learner
    child = subprocess.Popen(["sleep", "30"])
    try:
        assert stray not in gpu._family(os.getpid()) and {os.getppid(), child.pid} <= gpu._family(os.getpid())
        smi_say("GPU-aaa, 00000000:3B:00.0", "\n".join(f"{p}, GPU-aaa" for p in (os.getpid(), child.pid, 1,
                                                                                    os.getppid(), stray)))
        assert gpu.other_compute_processes() == 1
        smi_say("GPU-aaa, 00000000:3B:00.0", f"{os.getpid()}, GPU-aaa\n{child.pid}, GPU-aaa\n{os.getppid()}, GPU-aaa")
        assert gpu.other_compute_processes() == 0
    finally:
        child.kill()
        child.wait()


def test_only_this_gpus_processes_count_and_an_unknown_gpu_is_none(smi_say, monkeypatch, stray):
    smi_say(TWO_GPUS, f"{stray}, GPU-bbb\n{stray}, GPU-aaa\n1, GPU-aaa")
    assert gpu.other_compute_processes() is None  # two GPUs, and nothing says which one is this process's
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-bbb")
    assert gpu.other_compute_processes() == 1
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=types.SimpleNamespace(
        deviceGetPCIBusId=lambda device: "0000:3B:00.0")))
    monkeypatch.setitem(sys.modules, "cupy", fake)  # CUDA's device 0 is the GPU at 3B:00.0: GPU-aaa
    assert gpu.other_compute_processes() == 1


def test_other_compute_processes_is_none_where_it_cannot_tell(smi_say, monkeypatch, tmp_path):
    smi_say("GPU-aaa, 00000000:3B:00.0", "1, GPU-aaa", status=6)  # nvidia-smi fails
    assert gpu.other_compute_processes() is None
    smi_say("GPU-aaa, 00000000:3B:00.0", "999999999, GPU-aaa")  # an id this namespace does not have (a container)
    assert gpu.other_compute_processes() is None
    smi_say("GPU-aaa, 00000000:3B:00.0", "")
    assert gpu.other_compute_processes() == 0
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))  # no nvidia-smi, no NVML
    assert gpu.other_compute_processes() is None


def test_nvml_is_asked_first(monkeypatch, stray):
    procs = [types.SimpleNamespace(pid=stray, usedGpuMemory=1), types.SimpleNamespace(pid=os.getpid(), usedGpuMemory=1)]
    nvml = types.SimpleNamespace(
        nvmlInit=lambda: None, nvmlShutdown=lambda: None, nvmlDeviceGetCount=lambda: 1,
        nvmlDeviceGetHandleByIndex=lambda i: i, nvmlDeviceGetUUID=lambda h: b"GPU-aaa",
        nvmlDeviceGetPciInfo=lambda h: types.SimpleNamespace(busId=b"00000000:3B:00.0"),
        nvmlDeviceGetComputeRunningProcesses=lambda h: procs)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setitem(sys.modules, "cupy", None)
    monkeypatch.setenv("PATH", "/nonexistent")
    assert gpu.other_compute_processes() == 1
