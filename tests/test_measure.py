import pytest

from streamalloc import measure


def test_parse_reads_json_lines_and_ignores_prose():
    recs = measure.parse('hello\n{"size": 1, "us": 2.5}\n  {"size": 2, "us": 3}\nbye\n')
    assert recs == [{"size": 1, "us": 2.5}, {"size": 2, "us": 3}]
    assert recs.one(size=2)["us"] == 3 and recs.values("size") == [1, 2]
    with pytest.raises(LookupError):
        recs.one(size=3)
    with pytest.raises(ValueError, match="not"):
        measure.parse('{"size": 1,}')


def test_summary_gives_median_and_spread():
    s = measure.summary([5, 1, 3, 2, 4])
    assert (s["median"], s["min"], s["max"], s["n"]) == (3, 1, 5, 5)
    assert s["p25"] == 2 and s["p75"] == 4
    assert measure.summary([7])["median"] == 7
    with pytest.raises(ValueError):
        measure.summary([])
