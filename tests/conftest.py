import pytest


@pytest.fixture
def recordings(tmp_path, monkeypatch):
    """An empty recordings folder for one test."""
    monkeypatch.setenv("STREAMALLOC_RECORDINGS", str(tmp_path / "recordings"))
    monkeypatch.delenv("STREAMALLOC_REFERENCE", raising=False)
    monkeypatch.delenv("STREAMALLOC_RECORD_TO", raising=False)
    return tmp_path / "recordings"
