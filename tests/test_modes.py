"""STREAMALLOC_MODE=live on a machine without a usable GPU: one line, not a traceback."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from streamalloc import gpu

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(gpu.probe().pools_supported, reason="this machine has a GPU with memory pools: live works")
@pytest.mark.parametrize("argv, code", [(["-m", "pytest", "tests/test_measure.py", "-q"], 4),
                                        (["-m", "streamalloc", "info"], 2)])
def test_live_without_a_gpu_says_so_in_one_line(argv, code):
    env = {**os.environ, "STREAMALLOC_MODE": "live"}
    done = subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)
    out = done.stdout + done.stderr
    assert done.returncode == code, out
    assert "STREAMALLOC_MODE=live was set, but there is no usable GPU" in out
    assert "Traceback" not in out and "ImportError" not in out
