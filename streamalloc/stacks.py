"""The CUDA software stacks the course runs on: one row a CUDA major version, with the packages built for it, where
its nvcc comes from, and how a recording set of it is named. Every place that names a version-specific package reads
it here (install advice, the CuPy a machine has, the sanitizer's wheel, the recording sets' stacks); the tests hold
requirements.txt, requirements-frameworks.txt, environment.yml and constraints/colab.txt to it.

Adding a stack (CUDA 14): a row here, its pins in those files where the course installs it, and its recordings
(tools/record_reference.sh).
"""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Stack:
    cuda: int  # the CUDA major version
    cupy: str  # CuPy's wheel built for it
    rmm: str  # RAPIDS Memory Manager's wheel
    cuda_core: str  # NVIDIA's cuda-core, with the extra that brings this major's bindings
    jax: str  # JAX with this major's CUDA plugin
    sanitizer: str  # compute-sanitizer's wheel
    nvcc_from_pypi: bool  # NVIDIA's nvidia-cuda-nvcc wheel of this major holds an nvcc (tools/ensure_nvcc.sh)
    recordings: str  # what a recording set of this stack adds to the GPU's name ("" for the reference stack)


STACKS = {
    12: Stack(12, "cupy-cuda12x", "rmm-cu12", "cuda-core[cu12]", "jax[cuda12]", "nvidia-cuda-sanitizer-api-cu12",
              nvcc_from_pypi=False, recordings="-cuda12"),
    13: Stack(13, "cupy-cuda13x", "rmm-cu13", "cuda-core[cu13]", "jax[cuda13]", "nvidia-cuda-sanitizer-api",
              nvcc_from_pypi=True, recordings=""),
}
COLAB = STACKS[12]  # Colab's GPU runtime (and requirements.txt, environment.yml): where nothing else says
REFERENCE = STACKS[13]  # the reference recordings' stack (recordings/<gpu>)
OLDEST, NEWEST = min(STACKS), max(STACKS)


def _major(version: str | None) -> int | None:
    try:
        return int(str(version).split(".")[0])
    except ValueError:
        return None


def of_driver(driver_cuda: str | None) -> Stack:
    """The newest stack a driver that supports CUDA `driver_cuda` ("13.0") runs; Colab's where it is not known (or
    older than every stack: the learner is told to update it elsewhere)."""
    major = _major(driver_cuda)
    fits = [s for s in STACKS.values() if major is not None and s.cuda <= major]
    return max(fits, key=lambda s: s.cuda) if fits else COLAB


def runs(driver_cuda: str | None) -> bool:
    """Whether a driver that supports CUDA `driver_cuda` runs some stack of the course (unknown: assumed so)."""
    major = _major(driver_cuda)
    return major is None or major >= OLDEST


def of_cupy(package: str | None) -> Stack | None:
    """The stack a CuPy distribution ("cupy-cuda12x") is built for, or None (a source build, an older one)."""
    return next((s for s in STACKS.values() if s.cupy == package), None)


def of_machine(machine) -> Stack:
    """A machine's stack (streamalloc.gpu.Machine, or a recording's machine.json read into one): its CuPy's, else
    the newest its driver runs."""
    return of_cupy(getattr(machine, "cupy_package", None)) or of_driver(getattr(machine, "driver_cuda", None))


def cupy_packages() -> tuple[str, ...]:
    """CuPy's usual distribution names, the supported stacks' first (newest first), then older and source builds."""
    return (*(STACKS[m].cupy for m in sorted(STACKS, reverse=True)), "cupy-cuda11x", "cupy")


def pip_names(stack: Stack) -> dict[str, str]:
    """The pip package that provides each module the course's programs import, for `stack`."""
    return {"cupy": stack.cupy, "rmm": stack.rmm, "cuda.core": stack.cuda_core, "jax": stack.jax, "torch": "torch",
            "cuda.bindings": "cuda-bindings", "cuda": "cuda-python", "numba": "numba"}
