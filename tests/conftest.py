import pytest


@pytest.fixture
def recordings(tmp_path, monkeypatch):
    """An empty recordings folder for one test."""
    monkeypatch.setenv("STREAMALLOC_RECORDINGS", str(tmp_path / "recordings"))
    monkeypatch.delenv("STREAMALLOC_REFERENCE", raising=False)
    monkeypatch.delenv("STREAMALLOC_RECORD_TO", raising=False)
    return tmp_path / "recordings"


@pytest.fixture
def canned_sanitizer(monkeypatch):
    """compute-sanitizer, for a stand-in lesson (tests/notebook.StandIn), prints its `sanitizer_output` and exits
    with status 99 (tests/labcheck.canned_measure); any other lesson measures as usual."""
    from labcheck import canned_measure
    from streamalloc import sanitizer

    monkeypatch.setattr(sanitizer, "measure", canned_measure("compute-sanitizer --tool memcheck race 16384 3 300 30", 99))
