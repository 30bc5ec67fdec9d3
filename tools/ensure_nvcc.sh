#!/usr/bin/env bash
# Make sure nvcc is there: if none is on the PATH (or in $CUDA_HOME/bin, /usr/local/cuda/bin), install
# NVIDIA's nvcc and runtime headers from PyPI into the virtual environment given as $1, and link nvcc
# into its bin/ so that the course finds it on the PATH of that environment.
set -euo pipefail
venv=${1:?usage: ensure_nvcc.sh VENV}
for c in "$(command -v nvcc || true)" "${CUDA_HOME:-/nonexistent}/bin/nvcc" /usr/local/cuda/bin/nvcc; do
  if [ -n "$c" ] && [ -x "$c" ]; then echo "nvcc: $c"; exit 0; fi
done
echo "nvcc not found: installing it from PyPI into $venv"
"$venv/bin/python" -m pip install -q "nvidia-cuda-nvcc-cu12>=12.4,<13" "nvidia-cuda-runtime-cu12>=12.4,<13" \
  "nvidia-cuda-cccl-cu12>=12.4,<13"
"$venv/bin/python" - "$venv" <<'PY'
import os, pathlib, sys
import nvidia
venv = pathlib.Path(sys.argv[1]).resolve()
base = pathlib.Path(list(nvidia.__path__)[0])
nvcc_dir = base / "cuda_nvcc"
# one CUDA tree, as nvcc expects it: bin/ and nvvm/ from cuda_nvcc, headers and libraries of all parts
tree = venv / "cuda"
for sub in ("bin", "nvvm"):
    link = tree / sub
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.exists():
        link.symlink_to(nvcc_dir / sub)
for sub in ("include", "lib"):
    (tree / sub).mkdir(parents=True, exist_ok=True)
    for part in base.iterdir():
        for f in (part / sub).glob("*") if (part / sub).is_dir() else []:
            dst = tree / sub / f.name
            if not dst.exists():
                dst.symlink_to(f)
lib = tree / "lib"
for so in lib.glob("libcudart.so.*"):
    if not (lib / "libcudart.so").exists():
        (lib / "libcudart.so").symlink_to(so)
(tree / "lib64").exists() or (tree / "lib64").symlink_to(lib)
(venv / "bin" / "nvcc").exists() or (venv / "bin" / "nvcc").symlink_to(tree / "bin" / "nvcc")
print("nvcc:", venv / "bin" / "nvcc")
PY
