#!/usr/bin/env bash
# Make sure there is an nvcc whose programs this machine's driver can run, for the virtual environment $1.
#
# 1. Read the driver's CUDA version (streamalloc.gpu: CuPy, nvidia-smi or libcuda; none: no driver, replay).
# 2. An installed nvcc (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin, the venv's bin/) is used only if the driver
#    can run what it builds (its CUDA major version is not newer than the driver's). Otherwise: say which
#    toolkit is needed and how to get it, and fail.
# 3. No nvcc: with a driver for CUDA 13 or newer, or no driver at all (replay only compiles), install NVIDIA's
#    CUDA 13 compiler, runtime headers and libraries from PyPI into the venv (they unpack into one CUDA tree,
#    site-packages/nvidia/cu13) and put an nvcc that calls it into the venv's bin/, where the course looks.
#    With a CUDA 12 driver, never: PyPI has no CUDA 12 nvcc (the nvidia-cuda-nvcc-cu12 wheels hold none), and a
#    CUDA 13 one builds programs that fail with cudaErrorInsufficientDriver. Say what to install, and fail.
set -euo pipefail
venv=${1:?usage: ensure_nvcc.sh VENV}
root=$(cd "$(dirname "$0")/.." && pwd)
py=$venv/bin/python
[ -x "$py" ] || py=python3
gpu() { PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" "$py" -c "import sys; from streamalloc import gpu; $1" "${@:2}"; }

driver=$(gpu 'print(gpu.driver_cuda_version() or "")')
echo "driver: ${driver:+supports CUDA $driver}${driver:-none found (replay: programs are only compiled)}"

version_of() { "$1" --version 2>/dev/null | sed -n 's/.*release \([0-9][0-9]*\.[0-9][0-9]*\).*/\1/p' | head -1; }

for c in "$(command -v nvcc || true)" "${CUDA_HOME:-/nonexistent}/bin/nvcc" "${ENSURE_NVCC_CUDA:-/usr/local/cuda}/bin/nvcc" "$venv/bin/nvcc"; do
  if [ -n "$c" ] && [ -x "$c" ]; then
    v=$(version_of "$c")
    problem=$(gpu 'print(gpu.toolkit_problem(sys.argv[1] or None, sys.argv[2] or None) or "")' "$v" "$driver")
    if [ -z "$problem" ]; then echo "nvcc: $c (CUDA ${v:-?})"; exit 0; fi
    echo "nvcc: $c is CUDA $v: $problem" >&2
    exit 1
  fi
done

major=${driver%%.*}
if [ -n "$driver" ] && [ "$major" -lt 13 ]; then
  echo "nvcc not found. This driver supports CUDA $driver, so the course needs a CUDA $major toolkit, and PyPI has" >&2
  echo "no CUDA $major nvcc to install here. $(gpu 'print(gpu.nvcc_help(sys.argv[1]))' "$driver")" >&2
  exit 1
fi
echo "nvcc not found: installing NVIDIA's CUDA 13 compiler from PyPI into $venv"
"$venv/bin/python" -m pip install -q "nvidia-cuda-nvcc>=13,<14" "nvidia-cuda-runtime>=13,<14" "nvidia-cuda-cccl>=13,<14"
tree=$("$venv/bin/python" -c 'import nvidia, pathlib; print(pathlib.Path(list(nvidia.__path__)[0]) / "cu13")')
# a wrapper, not a link: nvcc finds its headers relative to where it really is. The path is written in single
# quotes (a ' in it as '\''), so spaces, quotes, $ and backquotes in it stay literal.
quoted=$(printf '%s' "$tree/bin/nvcc" | sed "s/'/'\\\\''/g")
printf "#!/bin/sh\nexec '%s' \"\$@\"\n" "$quoted" > "$venv/bin/nvcc"
chmod +x "$venv/bin/nvcc"
"$venv/bin/nvcc" --version | tail -1
