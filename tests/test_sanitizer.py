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


# What a program prints to pass for a clean report: the sanitizer's own lines, forged on its stdout.
FORGED = '{"mode":"racy","ok":true}\n========= ERROR SUMMARY: 0 errors\n'


@pytest.fixture
def fake_sanitizer(tmp_path, monkeypatch):
    """A compute-sanitizer on the PATH that writes REPORT to the file --log-file names and exits 86, as
    --error-exitcode makes it; the program under it prints FORGED on stdout and a line on stderr."""
    exe = tmp_path / "compute-sanitizer"
    exe.write_text("#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'Version 0.0 (stand-in)'; exit 0; fi\n"
                   "[ \"$1\" = --log-file ] || { echo 'no --log-file' >&2; exit 3; }\n"
                   f"cat > \"$2\" <<'EOF'\n{REPORT}EOF\nprintf '%s' '{FORGED}'\necho 'the program failed' >&2\nexit 86\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    return exe


def test_a_nonzero_exit_is_an_answer_and_the_report_is_kept(fake_sanitizer):
    assert sanitizer.find() == str(fake_sanitizer)
    done = sanitizer.run("/build/race-0123456789abcdef", ["before-alloc", 7], ["--tool", "memcheck"], timeout=30)
    assert done["returncode"] == 86 and done["version"] == "Version 0.0 (stand-in)"
    assert done["command"] == "compute-sanitizer --tool memcheck race before-alloc 7"  # the log file is ours alone
    assert done["report"] == REPORT and done["output"].rstrip().endswith("the program failed")
    assert sanitizer.parse(done).errors == 2


def test_the_report_comes_from_the_sanitizers_file_never_from_what_the_program_printed(fake_sanitizer):
    """The program prints "ERROR SUMMARY: 0 errors" on its stdout; the report in the file counts 2: 2 it is."""
    done = sanitizer.run("/build/race-0123456789abcdef", [], ["--tool", "memcheck"], timeout=30)
    assert "ERROR SUMMARY: 0 errors" in done["output"]
    r = sanitizer.parse(done)
    assert (r.errors, r.summary, len(r.blocks)) == (2, "========= ERROR SUMMARY: 2 errors", 2)
    assert r.records == [{"mode": "racy", "ok": True}]  # the program's own lines come from its output
    assert r.found_errors(99) is True


def test_a_forged_summary_is_ignored_in_canned_data_and_a_recording_without_a_report_is_read_as_before():
    forged = {"output": "========= COMPUTE-SANITIZER\n" + FORGED, "report": REPORT, "returncode": 99}
    assert sanitizer.parse(forged).errors == 2 and sanitizer.parse(forged).found_errors(99)
    # a clean report with a forged error in the output is clean: the output is not the report either way
    clean = {"output": REPORT, "report": "========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n",
             "returncode": 0}
    assert sanitizer.parse(clean).errors == 0 and sanitizer.parse(clean).found_errors(99) is False
    # a recording made before --log-file: its output holds the report, and its summary decides
    assert sanitizer.parse({"output": REPORT, "returncode": 99}).errors == 2
    old_clean = sanitizer.parse({"output": "========= ERROR SUMMARY: 0 errors\n", "returncode": 99})
    assert old_clean.errors == 0 and old_clean.found_errors(99) is False and not old_clean.from_file


def test_the_exit_status_counts_where_the_report_does_not():
    """A report that counts 0 (or none at all) but the sanitizer's --error-exitcode: an error. The last summary
    counts (a line the program wrote into the file while it ran comes before the sanitizer's own)."""
    zero = "========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n"
    assert sanitizer.parse({"output": "", "report": zero, "returncode": 99}).found_errors(99) is True
    assert sanitizer.parse({"output": "", "report": zero, "returncode": 1}).found_errors(99) is False
    assert sanitizer.parse({"output": "", "report": "", "returncode": 99}).found_errors(99) is True
    assert sanitizer.parse({"output": "", "report": "", "returncode": 1}).found_errors(99) is None
    late = sanitizer.parse({"output": "", "report": zero + "========= ERROR SUMMARY: 3 errors\n", "returncode": 99})
    assert late.errors == 3
    assert sanitizer.error_exitcode(["--tool", "memcheck", "--error-exitcode", 99]) == 99
    assert sanitizer.error_exitcode(["--error-exitcode=7"]) == 7 and sanitizer.error_exitcode(["--tool", "x"]) is None


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


def sanitized(monkeypatch, data):
    """The marks a lab check gives a run under the sanitizer with the labs' --error-exitcode 99, whose data is `data`."""
    from streamalloc import checks
    from streamalloc.lesson import Result

    monkeypatch.setattr(sanitizer, "measure", lambda *a, **k: Result("sanitizer", [], "", "", 0.1, False, "canned",
                                                                     {"command": "compute-sanitizer race", **data}))
    report = checks.Report("t")
    report.sanitize("race.cu", tool_args=[*sanitizer.STREAM_ORDER_RACES, "--error-exitcode", "99"],
                    clean="no stream-ordered race")
    return report.marks


def test_a_check_is_not_fooled_by_a_forged_summary_and_heeds_the_exit_status(monkeypatch):
    (mark, text), = sanitized(monkeypatch, {"output": FORGED, "report": REPORT, "returncode": 99})
    assert mark == "WRONG" and text.startswith("compute-sanitizer found 2 error(s)")
    zero = "========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n"
    (mark, text), = sanitized(monkeypatch, {"output": "", "report": zero, "returncode": 99})
    assert mark == "WRONG" and "exited with status 99" in text and "counts 0" in text
    (mark, text), = sanitized(monkeypatch, {"output": "", "report": "", "returncode": 99})
    assert mark == "WRONG" and "counts none" in text
    (mark, text), = sanitized(monkeypatch, {"output": "", "report": "", "returncode": 1})
    assert mark == "not verified" and "wrote no error summary" in text
    assert sanitized(monkeypatch, {"output": REPORT, "report": zero, "returncode": 0}) == [
        ("ok", "compute-sanitizer finds no stream-ordered race: 0 errors (compute-sanitizer race; canned)")]
