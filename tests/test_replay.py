"""Recordings: a replay returns what was recorded, and refuses a recording of other code or arguments."""
import json

import pytest

from streamalloc import replay
from streamalloc.errors import MissingRecording, StaleRecording
from streamalloc.gpu import Machine

M = Machine(gpu="NVIDIA Test GPU", compute_capability="9.0", pools_supported=True, date="2026-01-01")


def test_save_then_load(recordings):
    replay.save(M, "00_setup", "prog", "source A", ["1"], {"stdout": "out A"})
    assert replay.available() == ["nvidia-test-gpu"] and replay.reference() == "nvidia-test-gpu"
    assert replay.load("nvidia-test-gpu", "00_setup", "prog", "source A", [1])["stdout"] == "out A"
    assert replay.machine("nvidia-test-gpu", "00_setup").gpu == "NVIDIA Test GPU"


def test_changed_code_is_stale(recordings):
    replay.save(M, "00_setup", "prog", "source A", ["1"], {"stdout": "out A"})
    with pytest.raises(StaleRecording, match="code changed.*make record"):
        replay.load("nvidia-test-gpu", "00_setup", "prog", "source B", ["1"])


def test_other_arguments_are_stale(recordings):
    replay.save(M, "00_setup", "prog", "source A", ["1"], {"stdout": "out A"})
    with pytest.raises(StaleRecording, match="other arguments"):
        replay.load("nvidia-test-gpu", "00_setup", "prog", "source A", ["2"])


def test_missing_recording(recordings):
    with pytest.raises(MissingRecording, match="make record"):
        replay.load("nvidia-test-gpu", "00_setup", "nothing", "source", [])


def test_a_new_recording_session_replaces_old_runs(recordings, monkeypatch):
    replay.save(M, "00_setup", "prog", "old source", ["1"], {"stdout": "old"})
    monkeypatch.setattr(replay, "_started", set())  # as in a new recorder process
    replay.save(M, "00_setup", "prog", "new source", ["1"], {"stdout": "new"})
    replay.save(M, "00_setup", "prog", "new source", ["2"], {"stdout": "new 2"})
    runs = json.loads((recordings / "nvidia-test-gpu" / "00_setup" / "prog.json").read_text())["runs"]
    assert sorted(r["stdout"] for r in runs.values()) == ["new", "new 2"]
