"""Finding compute-sanitizer, running it, and reading its report, with a stand-in sanitizer (no GPU needed)."""
import pytest

from streamalloc import sanitizer
from streamalloc.errors import SanitizerNotFound

# The shape of a memcheck report with stream-ordered race tracking: a lifetime error with no location,
# then an access with one, then the summary. The program's own JSON line is mixed in.
REPORT = """\
========= COMPUTE-SANITIZER
========= Use-before-alloc on allocation of size 4,096 bytes at 0x7f0000000000
=========     Address 0x7f0000000000 is potentially accessed before it is allocated
=========
========= Invalid __global__ read of size 4 bytes
=========     at add(int *, const int *, unsigned long, int)+0x180 in race.cu:31
=========     by thread (64,0,0) in block (7,0,0)
=========
{"mode":"racy","ok":false}
========= ERROR SUMMARY: 2 errors
"""


def test_a_report_is_read():
    r = sanitizer.parse({"output": REPORT, "returncode": 86, "command": "compute-sanitizer race"})
    assert (r.errors, r.summary, r.returncode) == (2, "========= ERROR SUMMARY: 2 errors", 86)
    assert len(r.blocks) == 2 and r.kind.startswith("Use-before-alloc") and r.address.startswith("Address 0x7f")
    assert r.shortened(1).splitlines() == [r.blocks[0][0], "========= ...", r.summary]
    assert r.records == [{"mode": "racy", "ok": False}]


def test_the_kind_comes_from_the_first_error_and_the_place_from_the_first_that_names_one():
    """The lifetime error names only the allocation; the kernel and the line come from the access after it."""
    r = sanitizer.parse(REPORT)
    assert r.kind == "Use-before-alloc on allocation of size 4,096 bytes at 0x7f0000000000"
    assert (r.location, r.function) == ("race.cu:31", "add(int *, const int *, unsigned long, int)")
    assert r.located == "Invalid __global__ read of size 4 bytes" and r.located_error() == "\n".join(r.blocks[1])
    assert r.headline() == (f"{r.kind}; then Invalid __global__ read of size 4 bytes at race.cu:31 "
                            "in add(int *, const int *, unsigned long, int)")


def test_the_first_error_names_where_it_happened_when_the_report_does():
    r = sanitizer.parse(REPORT.split("=========\n", 1)[1])
    assert r.kind == r.located == "Invalid __global__ read of size 4 bytes" and r.address is None
    assert r.headline() == ("Invalid __global__ read of size 4 bytes at race.cu:31 "
                            "in add(int *, const int *, unsigned long, int)")


def test_a_lifetime_error_alone_names_no_place():
    """As use-after-free was reported on the H100: one error, no kernel access after it."""
    r = sanitizer.parse("========= COMPUTE-SANITIZER\n"
                        "========= Use-after-free on allocation of size 4,096 bytes at 0x7f0000400000\n"
                        "=========     Address 0x7f0000400000 is potentially accessed after it is free'd\n"
                        "=========\n"
                        '{"mode":"racy","ok":false}\n'
                        "========= ERROR SUMMARY: 1 error\n")
    assert r.errors == 1 and len(r.blocks) == 1 and r.kind.startswith("Use-after-free")
    assert r.location is None and r.function is None and r.located is None and r.located_error() == ""
    assert r.headline() == r.kind and r.where() == ""  # nothing about where: nothing said ("at None" never)


def test_no_summary_is_no_count():
    r = sanitizer.parse("========= COMPUTE-SANITIZER\nSegmentation fault\n")
    assert r.errors is None and r.blocks == [] and r.shortened() == "" and r.tail(1) == "Segmentation fault"


@pytest.fixture
def fake_sanitizer(tmp_path, monkeypatch):
    """A compute-sanitizer on the PATH that prints REPORT and exits 86, as --error-exitcode makes it."""
    exe = tmp_path / "compute-sanitizer"
    exe.write_text("#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'Version 0.0 (stand-in)'; exit 0; fi\n"
                   f"cat <<'EOF'\n{REPORT}EOF\necho 'the program failed' >&2\nexit 86\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    return exe


def test_a_nonzero_exit_is_an_answer_and_the_report_is_kept(fake_sanitizer):
    assert sanitizer.find() == str(fake_sanitizer)
    done = sanitizer.run("/build/race-0123456789abcdef", ["before-alloc", 7], ["--tool", "memcheck"], timeout=30)
    assert done["returncode"] == 86 and done["version"] == "Version 0.0 (stand-in)"
    assert done["command"] == "compute-sanitizer --tool memcheck race before-alloc 7"
    assert sanitizer.parse(done).errors == 2 and done["output"].rstrip().endswith("the program failed")


def test_no_sanitizer_says_what_to_install(monkeypatch):
    monkeypatch.setattr(sanitizer, "_candidates", lambda: iter([None, "/nonexistent/compute-sanitizer"]))
    assert sanitizer.find() is None
    with pytest.raises(SanitizerNotFound, match="pip install nvidia-cuda-sanitizer-api"):
        sanitizer.run("race", [])


def test_calls_that_fail_on_purpose_are_told_apart_from_memory_errors():
    from streamalloc import sanitizer
    block = ("========= Program hit cudaErrorInvalidValue (error 1) due to \"invalid argument\" on CUDA API call to "
             "{call}.\n=========     Saved host backtrace up to driver entry point at error\n"
             "=========         Host Frame: importer(int) [0xa98b] in importer\n========= \n")
    text = ("========= COMPUTE-SANITIZER\n" + block.format(call="cudaMemPoolGetAttribute")
            + block.format(call="cudaGetLastError") + "========= ERROR SUMMARY: 2 errors\n")
    report = sanitizer.parse(text)
    expected = {"cudaMemPoolGetAttribute": "cudaErrorInvalidValue", "cudaGetLastError": "cudaErrorInvalidValue"}
    assert report.errors == 2
    assert report.expected_api_errors(expected) == ["cudaMemPoolGetAttribute -> cudaErrorInvalidValue",
                                                    "cudaGetLastError -> cudaErrorInvalidValue"]
    assert report.expected_api_errors({"cudaMemPoolGetAttribute": "cudaErrorInvalidValue"}) == [
        "cudaMemPoolGetAttribute -> cudaErrorInvalidValue"]  # the other one still counts as an error
    assert report.expected_api_errors({"cudaMemPoolGetAttribute": "cudaErrorNotSupported"}) == []
