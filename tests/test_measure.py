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


def test_the_notebooks_small_helpers_have_one_meaning():
    assert measure.med([5, 1, 3]) == 3.0 and measure.med(x for x in (1, 2)) == 1.5
    with pytest.raises(ValueError):
        measure.med([])
    assert measure.mib(3 * measure.MiB) == 3.0 and measure.mib(512 * measure.KiB) == 0.5
    assert [measure.nbytes(n) for n in (100, 1536, 4 << 20, 100 * measure.MiB, 3 * measure.GiB)] == \
        ["100 B", "1.5 KiB", "4 MiB", "100 MiB", "3 GiB"]


def test_dead_timing_helpers_are_gone():
    # the notebooks time in their CUDA programs: the package has no Python timing helpers to drift from them
    assert not hasattr(measure, "host_times") and not hasattr(measure, "event_times")
