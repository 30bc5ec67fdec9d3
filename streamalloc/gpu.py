"""Finding the GPU: what machine this is, and whether the course runs live or replays.

Live needs a CUDA GPU whose driver supports memory pools (cudaDevAttrMemoryPoolsSupported).
Anything else replays recordings made on a real GPU. STREAMALLOC_MODE=replay forces replay
on a GPU machine; STREAMALLOC_MODE=live makes a missing GPU an error instead of a replay.
"""
from __future__ import annotations

import dataclasses
import datetime
import os
import platform
import re
import shutil
import subprocess
import sys

CUDA_DEV_ATTR_MEMORY_POOLS_SUPPORTED = 115  # cudaDevAttrMemoryPoolsSupported


@dataclasses.dataclass
class Machine:
    """What the course knows about a machine; every field may be None where it is unknown."""

    gpu: str | None = None
    compute_capability: str | None = None  # "9.0"
    driver: str | None = None  # the kernel driver, "580.159.04"
    driver_cuda: str | None = None  # the newest CUDA the driver supports, "13.0"
    runtime: str | None = None  # the CUDA runtime CuPy uses, "12.8"
    memory_total: int | None = None  # bytes
    memory_free: int | None = None  # bytes, when probed
    pools_supported: bool | None = None
    multiprocessors: int | None = None
    nvcc: str | None = None  # "13.0"
    cupy: str | None = None
    host: str | None = None
    date: str | None = None  # ISO date of the probe
    problem: str | None = None  # why no GPU was found, in words

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
            return f"no CUDA GPU ({self.problem})"
        gib = f", {self.memory_total / 2**30:.0f} GiB" if self.memory_total else ""
        return (f"{self.gpu} (compute capability {self.compute_capability}{gib}), driver {self.driver or '?'} "
                f"(CUDA {self.driver_cuda or '?'})")


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
    """Look at this machine: the GPU through CuPy, nvcc on the PATH."""
    m = Machine(nvcc=nvcc_version(), host=platform.node(), date=datetime.date.today().isoformat())
    try:
        import cupy
    except ImportError as e:
        m.problem = f"CuPy is not installed ({e.msg}); install cupy-cuda12x"
        return m
    except Exception as e:  # a broken CuPy install must not break the notebook
        m.problem = f"CuPy failed to import: {e}"
        return m
    m.cupy = cupy.__version__
    rt = cupy.cuda.runtime
    try:
        count = rt.getDeviceCount()
    except Exception as e:
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
        m.pools_supported = bool(rt.deviceGetAttribute(CUDA_DEV_ATTR_MEMORY_POOLS_SUPPORTED, device))
        with cupy.cuda.Device(device):
            m.memory_free = int(rt.memGetInfo()[0])
    except Exception as e:
        m.problem = f"the GPU could not be queried: {e}"
        m.gpu = None
        return m
    m.driver = _driver_version()
    return m


def decide(machine: Machine, forced: str | None = None) -> Mode:
    """Live or replay for this machine, with the reason in words."""
    forced = (forced if forced is not None else os.environ.get("STREAMALLOC_MODE", "")).strip().lower()
    if forced not in ("", "live", "replay"):
        raise ValueError(f"STREAMALLOC_MODE must be 'live' or 'replay', not {forced!r}")
    if forced == "replay":
        return Mode(False, "STREAMALLOC_MODE=replay was set, so recordings are replayed even if a GPU is here")
    if not machine.gpu:
        mode = Mode(False, f"there is no usable GPU: {machine.problem}")
    elif not machine.pools_supported:
        mode = Mode(False, f"{machine.gpu} with driver {machine.driver or machine.driver_cuda} does not support "
                           "memory pools (cudaDevAttrMemoryPoolsSupported is 0; they need CUDA 11.2 or newer "
                           "and a GPU and OS that support them)")
    else:
        return Mode(True, f"{machine.gpu} supports memory pools, so every measurement runs on it")
    if forced == "live":
        raise RuntimeError(f"STREAMALLOC_MODE=live was set, but {mode.reason}")
    return mode
