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
    with pytest.raises(RuntimeError, match="STREAMALLOC_MODE=live"):
        decide(Machine(problem="no GPU"), forced="live")
    with pytest.raises(ValueError):
        decide(H100, forced="sometimes")
