import pytest


@pytest.fixture(autouse=True)
def shown_verdicts(monkeypatch):
    """Every verdict streamalloc.verdict.show shows in a test, kept in labcheck.SHOWN (read it with
    labcheck.last_word()), and shown as ever: the tests read a check's verdict as the runner does, as data."""
    import labcheck
    from streamalloc import verdict

    show = verdict.show
    labcheck.SHOWN.clear()
    monkeypatch.setattr(verdict, "show", lambda v: (labcheck.SHOWN.append(v), show(v))[1])
    return labcheck.SHOWN


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
