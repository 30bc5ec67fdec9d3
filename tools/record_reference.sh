#!/usr/bin/env bash
# Re-record the course's two reference sets on a GPU machine (AUTHORING.md, "Recording"). One command each:
#
#   tools/record_reference.sh cuda13
#       recordings/<gpu>/ (the default reference): every lesson and solution live, with this machine's CuPy
#       and nvcc as they are (the H200 reference: cupy-cuda13x, nvcc 13).
#
#   tools/record_reference.sh cuda12 CUDA12_HOME SITE12
#       recordings/<gpu>-cuda12/: the CUDA 12 stack a Colab learner has, on a T4-like budget. CuPy comes from
#       SITE12, a folder made with `pip install --target SITE12 cupy-cuda12x nvidia-cuda-nvrtc-cu12
#       nvidia-cuda-runtime-cu12 rmm-cu12`; nvcc from CUDA12_HOME/bin (a CUDA 12 toolkit). While it runs,
#       tools/hold_memory.py leaves 15 GiB free and every program is built as PTX for compute_75 (what a T4
#       runs), and the run is `make preflight`'s: the report in build/preflight/ compares it with the default
#       reference.
#
#   tools/record_reference.sh gpus2
#       recordings/<gpu>-x<N>/ (a supplement, replay.supplement): on a machine with N >= 2 GPUs, only the
#       notebooks whose programs need two (lesson.run(..., gpus=2): 05b). A one-GPU machine replays them from it.
#
# Commit what it writes under recordings/ (and, for cuda12, a copy of build/preflight/report.md).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
case "${1:-}" in
  cuda13)
    exec "$PY" -m streamalloc record --no-progress ;;
  cuda12)
    [ $# -eq 3 ] || { echo "usage: $0 cuda12 CUDA12_HOME SITE12" >&2; exit 2; }
    [ -x "$2/bin/nvcc" ] || { echo "$2/bin/nvcc: no nvcc there" >&2; exit 2; }
    export PATH="$2/bin:$PATH" CUDA_HOME="$2" PYTHONPATH="$3${PYTHONPATH:+:$PYTHONPATH}"
    gpu=$("$PY" -c 'from streamalloc import gpu, replay; print(replay.slug(gpu.probe().gpu or "no-gpu"))')
    "$PY" tools/hold_memory.py --leave 15 &
    hold=$!
    trap 'kill $hold 2>/dev/null; wait $hold 2>/dev/null || true' EXIT
    sleep 20  # hold_memory prints one line once it holds the memory
    STREAMALLOC_ARCH=compute_75 STREAMALLOC_RECORD=1 STREAMALLOC_RECORD_TO="$gpu-cuda12" \
      "$PY" -m streamalloc preflight notebooks solutions --no-progress ;;
  gpus2)
    gpu=$("$PY" -c 'from streamalloc import gpu, replay; print(replay.slug(gpu.probe().gpu or "no-gpu"))')
    n=$("$PY" -c 'import cupy; print(cupy.cuda.runtime.getDeviceCount())' 2>/dev/null || echo 0)
    [ "$n" -ge 2 ] || { echo "gpus2 needs a machine with two GPUs or more; this one has $n" >&2; exit 2; }
    mapfile -t notebooks < <(grep -l 'gpus=2' notebooks/*.ipynb)
    STREAMALLOC_RECORD_TO="$gpu-x$n" exec "$PY" -m streamalloc record --no-progress "${notebooks[@]}" ;;
  *)
    echo "usage: $0 cuda13 | $0 cuda12 CUDA12_HOME SITE12 | $0 gpus2" >&2; exit 2 ;;
esac
