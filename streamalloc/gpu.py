"""Finding the GPU: what machine this is, and whether the course runs live or replays.

Live needs a CUDA GPU whose driver supports memory pools (cudaDevAttrMemoryPoolsSupported).
Anything else replays recordings made on a real GPU. STREAMALLOC_MODE=replay forces replay
on a GPU machine; STREAMALLOC_MODE=live makes a missing GPU an error (LiveWithoutGPU) instead of a replay.

The toolkit must match the driver: the driver's CUDA version is read (CuPy, nvidia-smi, or libcuda itself)
before anything is built, and toolkit_problem() says when an nvcc builds programs this driver cannot run.
STREAMALLOC_ARCH (for example compute_75) overrides the architecture programs are built for.
other_compute_processes() says how many other processes compute on the same GPU (NVML, else nvidia-smi): a
lesson's banner and a lab's speed finding say when the GPU is shared.
"""
from __future__ import annotations

import dataclasses
import ctypes
import datetime
import importlib.metadata
import importlib.util
import os
import platform
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from . import stacks

CUDA_DEV_ATTR_MEMORY_POOLS_SUPPORTED = 115  # cudaDevAttrMemoryPoolsSupported


@dataclasses.dataclass
class Machine:
    """What the course knows about a machine; every field may be None where it is unknown."""

    gpu: str | None = None
    compute_capability: str | None = None  # "9.0"
    driver: str | None = None  # the kernel driver, "580.159.04"
    driver_cuda: str | None = None  # the newest CUDA the driver supports, "13.0"
    runtime: str | None = None  # the CUDA runtime CuPy uses, "12.8"
    cupy_package: str | None = None  # the distribution CuPy came from, "cupy-cuda12x"
    memory_total: int | None = None  # bytes
    memory_free: int | None = None  # bytes, when probed
    pools_supported: bool | None = None
    multiprocessors: int | None = None
    nvcc: str | None = None  # "13.0"
    cupy: str | None = None
    host: str | None = None
    date: str | None = None  # ISO date of the probe
    problem: str | None = None  # why no GPU was found, in words
    build_arch: str | None = None  # $STREAMALLOC_ARCH when set: programs were built for it (compute_75: PTX)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Machine":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    @property
    def sm(self) -> str | None:
        """The nvcc architecture name, "sm_90", or None."""
        return "sm_" + self.compute_capability.replace(".", "") if self.compute_capability else None

    def describe(self) -> str:
        if not self.gpu:
            return f"no GPU found ({self.problem})"
        gib = f", {self.memory_total / 2**30:.0f} GiB" if self.memory_total else ""
        return (f"{self.gpu} (compute capability {self.compute_capability}{gib}), driver {self.driver or '?'} "
                f"(CUDA {self.driver_cuda or '?'})")


class LiveWithoutGPU(RuntimeError):
    """STREAMALLOC_MODE=live on a machine where the course cannot run live: one line says why.

    conftest.py turns it into pytest.UsageError; in a notebook, IPython shows only the message."""

    def _render_traceback_(self):
        return [f"{type(self).__name__}: {self}"]


@dataclasses.dataclass
class Mode:
    live: bool
    reason: str

    @property
    def name(self) -> str:
        return "live" if self.live else "replay"

    def __str__(self) -> str:
        return f"{self.name}: {self.reason}"


def _cuda_version(v: int) -> str:
    return f"{v // 1000}.{v % 1000 // 10}"


def nvcc_path() -> str | None:
    """nvcc on the PATH, else where CUDA installs it, else the one tools/ensure_nvcc.sh put in this environment."""
    for candidate in (shutil.which("nvcc"), os.environ.get("CUDA_HOME") and os.path.join(os.environ["CUDA_HOME"], "bin", "nvcc"),
                      "/usr/local/cuda/bin/nvcc", os.path.join(sys.prefix, "bin", "nvcc")):
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def nvcc_version() -> str | None:
    path = nvcc_path()
    if not path:
        return None
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"release (\d+\.\d+)", out)
    return m.group(1) if m else None


def _cupy_package(runtime: str | None = None) -> str | None:
    """Which distribution installed the cupy module that `import cupy` finds ("cupy-cuda12x"), or None. Two
    may be installed (cupy-cuda12x in one folder, cupy-cuda13x in another): the one whose files hold that
    module is the answer; where both were installed into one folder, the one for CuPy's CUDA `runtime` ("12.9").
    The usual names are asked first; only an unusual CuPy costs a scan of them all."""
    try:
        spec = importlib.util.find_spec("cupy")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    module = os.path.realpath(spec.origin)
    def holds_module(name: str) -> bool:
        return any(os.path.realpath(d.locate_file("cupy/__init__.py")) == module
                   for d in importlib.metadata.distributions(name=name))

    try:
        usual = stacks.cupy_packages()
        found = [name for name in usual if holds_module(name)]
        if not found:
            found = [name for name in sorted(importlib.metadata.packages_distributions().get("cupy", []))
                     if name not in usual and holds_module(name)]
    except Exception:
        return None
    # two installed into one folder both "hold" it: the one built for the runtime CuPy reports is the answer
    major = runtime.split(".")[0] if runtime else None
    return next((name for name in found if name == f"cupy-cuda{major}x"), found[0] if found else None)


def _cupy_advice(driver_cuda: str | None) -> str:
    """Which CuPy to install for this driver, or, where it is older than every stack the course runs on, to update it."""
    if stacks.runs(driver_cuda):
        return f"install the CuPy for your driver's CUDA major ({stacks.of_driver(driver_cuda).cupy}) or update the driver"
    return (f"this driver supports CUDA {driver_cuda}, older than every CUDA the course runs on "
            f"({' and '.join(str(c) for c in sorted(stacks.STACKS))}): update the driver, then install "
            f"{stacks.COLAB.cupy}")


def _smi_cuda_version() -> str | None:
    """The "CUDA Version: 12.8" that nvidia-smi prints in its header, or None."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    try:
        out = subprocess.run([smi], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"CUDA Version:\s*(\d+\.\d+)", out)
    return m.group(1) if m else None


def _libcuda_version() -> str | None:
    """cuDriverGetVersion from the driver library itself (no CuPy, no nvidia-smi needed), or None."""
    for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        version = ctypes.c_int(0)
        if lib.cuDriverGetVersion(ctypes.byref(version)) == 0 and version.value > 0:
            return _cuda_version(version.value)
    return None


def driver_cuda_version() -> str | None:
    """The newest CUDA version this machine's driver supports ("12.8"), or None without a driver.

    Asks CuPy (cudaDriverGetVersion), then nvidia-smi, then libcuda (cuDriverGetVersion) through ctypes."""
    try:
        import cupy

        v = cupy.cuda.runtime.driverGetVersion()
        if v > 0:
            return _cuda_version(v)
    except Exception:
        pass
    return _smi_cuda_version() or _libcuda_version()


def _major_minor(version: str | None) -> tuple[int, int] | None:
    m = re.match(r"(\d+)\.(\d+)", version or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def nvcc_help(driver_cuda: str | None = None) -> str:
    """How to get an nvcc that this driver can run the output of: the course's one piece of install advice."""
    v = _major_minor(driver_cuda)
    if v is None:
        where = "a CUDA toolkit (12.0 or newer)"
        conda = "`conda install -c conda-forge cuda-nvcc cuda-cudart-dev`"
    else:
        where = f"a CUDA {v[0]} toolkit no newer than {v[0]}.{v[1]} (this driver supports up to CUDA {driver_cuda})"
        conda = f"`conda install -c conda-forge cuda-nvcc cuda-cudart-dev \"cuda-version={v[0]}.{v[1]}\"`"
    pypi = [s.cuda for s in stacks.STACKS.values() if s.nvcc_from_pypi]
    none = [s.cuda for s in stacks.STACKS.values() if not s.nvcc_from_pypi]
    pip = (f"; for CUDA {min(pypi)} drivers, `bash tools/ensure_nvcc.sh VENV` installs NVIDIA's nvcc wheels (PyPI has no "
           + "; ".join(f"CUDA {n} nvcc: the nvidia-cuda-nvcc-cu{n} wheels hold no nvcc" for n in none) + ")"
           ) if v is None or stacks.of_driver(driver_cuda).nvcc_from_pypi else ""
    return (f"Get {where} with one of: {conda}; your distribution's CUDA packages (Debian: `apt install "
            "nvidia-cuda-toolkit` from non-free; Ubuntu/RHEL: NVIDIA's cuda-toolkit-<major>-<minor> packages, "
            f"https://developer.nvidia.com/cuda-downloads){pip}. On Colab, choose a GPU runtime: nvcc is in "
            "/usr/local/cuda/bin.")


def toolkit_problem(nvcc: str | None, driver_cuda: str | None) -> str | None:
    """Why programs built by this nvcc cannot run on this driver, or None when they can (or there is no driver).

    A toolkit of a newer major version than the driver's builds programs that fail with
    cudaErrorInsufficientDriver. Within a major version, CUDA's minor version compatibility runs them
    (features that need a newer driver fail with cudaErrorCallRequiresNewerDriver; PTX from a newer
    toolkit cannot be compiled by an older driver, so STREAMALLOC_ARCH=compute_XX then needs nvcc <= driver)."""
    n, d = _major_minor(nvcc), _major_minor(driver_cuda)
    if n is None or d is None:
        return None
    if n[0] > d[0] or (n > d and arch_override() and arch_override().startswith("compute_")):
        return (f"nvcc {nvcc} builds programs this driver (CUDA {driver_cuda}) cannot run "
                f"(cudaErrorInsufficientDriver). {nvcc_help(driver_cuda)}")
    return None


def insufficient_driver_hint(nvcc: str | None, driver_cuda: str | None) -> str:
    """What to say when a program fails with cudaErrorInsufficientDriver."""
    return (f"The program was built with nvcc {nvcc or '?'}, and this GPU's driver supports CUDA "
            f"{driver_cuda or '? (no driver found)'}: a program needs a driver at least as new as the toolkit's "
            f"major version. Update the driver, or build with an older toolkit. {nvcc_help(driver_cuda)}")


ARCH = re.compile(r"^(?:(?:sm|compute)_\d+[af]?|native|all|all-major)$")


def arch_override() -> str | None:
    """STREAMALLOC_ARCH: the architecture to build for instead of this GPU's (compute_75: PTX a T4 could run)."""
    value = os.environ.get("STREAMALLOC_ARCH", "").strip()
    if not value:
        return None
    if not ARCH.match(value):
        raise ValueError(f"STREAMALLOC_ARCH={value!r} is not an nvcc architecture (for example sm_75, compute_75, native)")
    return value


def _driver_version() -> str | None:
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    try:
        out = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout.strip().splitlines()
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out[0].strip() if out else None


def probe(device: int = 0) -> Machine:
    """Look at this machine: the GPU through CuPy, nvcc on the PATH (nvcc and nvidia-smi are asked for their
    versions in threads, while CuPy starts)."""
    with ThreadPoolExecutor(2) as pool:
        nvcc, driver = pool.submit(nvcc_version), pool.submit(_driver_version)
        m = _probe(device, driver)
        m.nvcc = nvcc.result()
    return m


def _probe(device: int, driver) -> Machine:
    m = Machine(host=platform.node(), date=datetime.date.today().isoformat(), build_arch=arch_override())
    m.driver_cuda = driver_cuda_version()
    m.cupy_package = _cupy_package()
    try:
        import cupy
    except ImportError as e:
        m.problem = f"CuPy is not installed ({e.msg}); {_cupy_advice(m.driver_cuda)}"
        m.driver = driver.result() if m.driver_cuda else None
        return m
    except Exception as e:  # a broken CuPy install must not break the notebook
        m.problem = f"CuPy failed to import: {e}"
        return m
    m.cupy = cupy.__version__
    rt = cupy.cuda.runtime
    try:
        count = rt.getDeviceCount()
    except Exception as e:
        if m.driver_cuda is None:  # no driver at all: say so, not "driver version is insufficient"
            m.problem = "no NVIDIA driver is installed: neither nvidia-smi nor libcuda is here"
        elif "InsufficientDriver" in str(e):
            m.problem = (f"this driver supports CUDA {m.driver_cuda}, older than the CUDA runtime of "
                         f"{m.cupy_package or 'CuPy'} {m.cupy}: {_cupy_advice(m.driver_cuda)}")
        else:
            m.problem = f"CuPy found no usable CUDA driver or GPU ({str(e).strip() or type(e).__name__})"
        return m
    if count <= device:
        m.problem = "CUDA found no GPU" if count == 0 else f"there is no GPU {device} (only {count})"
        return m
    try:
        props = rt.getDeviceProperties(device)
        name = props["name"]
        m.gpu = name.decode() if isinstance(name, bytes) else str(name)
        m.compute_capability = f"{props['major']}.{props['minor']}"
        m.multiprocessors = int(props["multiProcessorCount"])
        m.memory_total = int(props["totalGlobalMem"])
        m.driver_cuda = _cuda_version(rt.driverGetVersion())
        m.runtime = _cuda_version(rt.runtimeGetVersion())
        m.cupy_package = _cupy_package(m.runtime)
        m.pools_supported = bool(rt.deviceGetAttribute(CUDA_DEV_ATTR_MEMORY_POOLS_SUPPORTED, device))
        with cupy.cuda.Device(device):
            m.memory_free = int(rt.memGetInfo()[0])
    except Exception as e:
        m.problem = f"the GPU could not be queried: {e}"
        m.gpu = None
        return m
    m.driver = driver.result()
    return m


HANDED_REASON = "STREAMALLOC_MODE_REASON"  # the runner's reason for the mode it hands its kernels (runner.run)


def decide(machine: Machine, forced: str | None = None) -> Mode:
    """Live or replay for this machine, with the reason in words."""
    handed = os.environ.get(HANDED_REASON, "").strip() if forced is None else ""  # the runner's, to its kernels
    forced = (forced if forced is not None else os.environ.get("STREAMALLOC_MODE", "")).strip().lower()
    if forced not in ("", "live", "replay"):
        raise ValueError(f"STREAMALLOC_MODE must be 'live' or 'replay', not {forced!r}")
    if forced == "replay":  # set by the user, or by the runner for its kernels, with the reason it decided for
        return Mode(False, handed or "STREAMALLOC_MODE=replay was set, so recordings are replayed even if a GPU is here")
    if not machine.gpu:
        mode = Mode(False, f"there is no usable GPU: {machine.problem}")
    elif not machine.pools_supported:
        mode = Mode(False, f"{machine.gpu} with driver {machine.driver or machine.driver_cuda} does not support "
                           "memory pools (cudaDevAttrMemoryPoolsSupported is 0; they need CUDA 11.2 or newer "
                           "and a GPU and OS that support them)")
    else:
        return Mode(True, f"{machine.gpu} supports memory pools, so every measurement runs on it")
    if forced == "live":
        raise LiveWithoutGPU(f"STREAMALLOC_MODE=live was set, but {mode.reason}; unset it to replay recordings")
    return mode


# -- sharing the GPU --------------------------------------------------------------------------------------------
SMI_TIMEOUT = 5  # seconds: nvidia-smi answers in well under one; a hung driver must not hang a lesson


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _bus(bus_id) -> str:
    """A PCI bus id in one spelling: CuPy's 0000:3B:00.0 and NVML's 00000000:3B:00.0 are both 0000:3b:00.0."""
    parts = _text(bus_id).strip().lower().split(":")
    return f"{int(parts[0] if len(parts) == 3 else '0', 16):04x}:{':'.join(parts[-2:])}"


def _smi(smi: str, query: str) -> list[list[str]]:
    done = subprocess.run([smi, query, "--format=csv,noheader"], capture_output=True, text=True, timeout=SMI_TIMEOUT,
                          check=True)
    return [[f.strip() for f in line.split(",")] for line in done.stdout.splitlines() if line.strip()]


def _gpus_and_apps():
    """([(uuid, PCI bus id)] of the machine's GPUs, [(pid, uuid)] of the compute processes on them), from NVML (the
    pynvml module of nvidia-ml-py) where it imports, else from nvidia-smi; None where neither answers."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            gpus, apps = [], []
            for i in range(pynvml.nvmlDeviceGetCount()):
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
                uuid = _text(pynvml.nvmlDeviceGetUUID(h))
                gpus.append((uuid, _text(pynvml.nvmlDeviceGetPciInfo(h).busId)))
                apps += [(int(p.pid), uuid) for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)]
            return gpus, apps
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # not installed, no driver, an NVMLError: nvidia-smi may still answer
        pass
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    try:
        gpus = [(row[0], row[1]) for row in _smi(smi, "--query-gpu=uuid,pci.bus_id") if len(row) == 2]
        apps = [(int(row[0]), row[1]) for row in _smi(smi, "--query-compute-apps=pid,gpu_uuid")
                if len(row) == 2 and row[0].isdigit()]
    except (OSError, subprocess.SubprocessError):
        return None
    return (gpus, apps) if gpus else None


def _this_gpu(gpus) -> str | None:
    """Of the machine's GPUs [(uuid, PCI bus id)], the uuid of the one the course computes on (CUDA's device 0 as this
    process sees them), or None where that cannot be told: by its bus id where CuPy is already imported (a lesson's
    kernel, after the probe), else by CUDA_VISIBLE_DEVICES naming a GPU's uuid, else the machine's only GPU."""
    cupy = sys.modules.get("cupy")
    try:
        bus = _bus(cupy.cuda.runtime.deviceGetPCIBusId(0)) if cupy else None
    except Exception:
        bus = None
    if bus:
        return next((uuid for uuid, b in gpus if _bus(b) == bus), None)
    first = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    if first.startswith("GPU-"):
        return next((uuid for uuid, _ in gpus if uuid.startswith(first)), None)
    return gpus[0][0] if len(gpus) == 1 and not first.startswith("MIG-") else None


def _family(pid: int) -> set[int]:
    """pid, every process above it and every process below it, from /proc (just pid where there is no /proc). Above it
    are the tools that started this learner's work (a preflight, the course's runner, a Jupyter kernel's server), which
    may hold a CUDA context of their own (a GPU probe): they are this learner's, never another learner's."""
    children: dict[int, list[int]] = {}
    parent: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(stat.parent.name))
        parent[int(stat.parent.name)] = ppid
    found, todo = set(), [pid]
    while todo:
        p = todo.pop()
        if p not in found:
            found.add(p)
            todo += children.get(p, [])
    up = parent.get(pid)
    while up and up not in found:
        found.add(up)
        up = parent.get(up)
    return found


def other_compute_processes() -> int | None:
    """How many other processes compute on this process's GPU: NVML's (or nvidia-smi's) compute processes on it, less
    this process, those it started and those that started it. None where it cannot tell: no NVML and no nvidia-smi, an error, a GPU it cannot
    tell apart from the machine's others, or process ids from another namespace (in a container, NVML may name this
    very process by the host's id)."""
    found = _gpus_and_apps()
    ours = _this_gpu(found[0]) if found else None
    if ours is None:
        return None
    listed = {pid for pid, uuid in found[1] if uuid == ours}
    mine = _family(os.getpid())
    others = listed - mine
    if not listed & mine and any(not os.path.exists(f"/proc/{pid}") for pid in others):
        return None
    return len(others)
