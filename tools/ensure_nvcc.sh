#!/usr/bin/env bash
# Make sure nvcc is there: if none is on the PATH (or in $CUDA_HOME/bin, /usr/local/cuda/bin), install
# NVIDIA's CUDA 13 compiler, runtime headers and libraries from PyPI into the virtual environment given as
# $1 (they unpack into one CUDA tree, site-packages/nvidia/cu13), and put an nvcc that calls it into the venv's bin/,
# where the course looks. Programs built by it need a driver for CUDA 13 to run; without a GPU (replay)
# they only need to compile.
set -euo pipefail
venv=${1:?usage: ensure_nvcc.sh VENV}
for c in "$(command -v nvcc || true)" "${CUDA_HOME:-/nonexistent}/bin/nvcc" /usr/local/cuda/bin/nvcc; do
  if [ -n "$c" ] && [ -x "$c" ]; then echo "nvcc: $c"; exit 0; fi
done
echo "nvcc not found: installing it from PyPI into $venv"
"$venv/bin/python" -m pip install -q "nvidia-cuda-nvcc>=13,<14" "nvidia-cuda-runtime>=13,<14" "nvidia-cuda-cccl>=13,<14"
tree=$("$venv/bin/python" -c 'import nvidia, pathlib; print(pathlib.Path(list(nvidia.__path__)[0]) / "cu13")')
# a wrapper, not a link: nvcc finds its headers relative to where it really is
printf '#!/bin/sh\nexec "%s/bin/nvcc" "$@"\n' "$tree" > "$venv/bin/nvcc"
chmod +x "$venv/bin/nvcc"
"$venv/bin/nvcc" --version | tail -1
