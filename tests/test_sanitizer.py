"""Finding compute-sanitizer, running it, and reading its report, with a stand-in sanitizer (no GPU needed)."""
import os
import signal
import sys
from pathlib import Path

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
    assert mark == "not verified" and "report has no summary line" in text
    (mark, text), = sanitized(monkeypatch, {"output": "", "report": "", "returncode": 1})
    assert mark == "not verified" and "report has no summary line" in text
    assert sanitized(monkeypatch, {"output": REPORT, "report": zero, "returncode": 0}) == [
        ("ok", "compute-sanitizer finds no stream-ordered race: 0 errors (compute-sanitizer race; canned)")]


# -- a sanitizer that did not end by itself, or whose report is not its own, is "not verified" ---------------------
def test_a_report_is_its_own_only_from_a_sanitizer_that_ended_by_itself_with_its_summary():
    zero = "========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n"
    own = {"output": "", "report": zero, "returncode": 0}
    assert sanitizer.parse(own).not_its_own(99) == ""
    assert "killed by signal SIGKILL" in sanitizer.parse({**own, "returncode": -9}).not_its_own(99)
    assert "killed by signal SIGTERM" in sanitizer.parse({**own, "returncode": -15}).not_its_own(99)
    left = sanitizer.parse({**own, "killed": ["pid 7: ./race"]}).not_its_own(99)
    assert "ended while the program under it still ran (pid 7: ./race)" in left
    assert "no summary line" in sanitizer.parse({**own, "report": "========= COMPUTE-SANITIZER\n"}).not_its_own(99)
    assert "status 3, which is not one of its own" in sanitizer.parse({**own, "returncode": 3}).not_its_own(99)
    passed_on = zero.replace("========= ERROR", f"========= {sanitizer.TARGET_FAILED}\n========= ERROR")
    assert sanitizer.parse({**own, "report": passed_on, "returncode": 3}).not_its_own(99) == ""  # the program's status
    assert sanitizer.parse({**own, "returncode": 99}).not_its_own(99) == ""  # its --error-exitcode (judged WRONG)
    assert sanitizer.parse({"output": zero, "returncode": -9}).not_its_own(99) == ""  # an old recording: as it was


@pytest.mark.parametrize("data, words", [
    ({"report": FORGED, "returncode": -9}, "killed by signal SIGKILL"),
    ({"report": FORGED, "returncode": 0, "killed": ["pid 9: race"]}, "ended while the program under it still ran"),
    ({"report": '{"ok": true}\n', "returncode": 0}, "no summary line"),
    ({"report": FORGED, "returncode": 4}, "status 4, which is not one of its own"),
])
def test_a_check_says_not_verified_for_a_report_that_is_not_the_sanitizers_own(monkeypatch, data, words):
    (mark, text), = sanitized(monkeypatch, {"output": "", **data})
    assert mark == "not verified" and words in text, text


# A compute-sanitizer on the PATH that runs the program under it, then writes its report (with its summary) to the
# file --log-file names and exits with the program's status, as the real one does; the programs below attack it.
STAND_IN = f"""#!{sys.executable}
import subprocess, sys
if sys.argv[1] == "--version":
    print("Version 0.0 (stand-in)")
    sys.exit(0)
log, program = sys.argv[2], next(a for a in sys.argv[3:] if a.startswith("/"))
open(log, "w").write("========= COMPUTE-SANITIZER\\n")
status = subprocess.call([program])
with open(log, "a") as f:
    f.write("========= Invalid __global__ read of size 4 bytes\\n========= ERROR SUMMARY: 1 error\\n")
sys.exit(99)
"""
# the program: finds the report's path in its parent's command line, kills its parent, writes a clean report there
KILLS_ITS_SANITIZER = f"""#!{sys.executable}
import os, signal, time
argv = open(f"/proc/{{os.getppid()}}/cmdline", "rb").read().split(b"\\0")
log = argv[argv.index(b"--log-file") + 1].decode()
open(log, "w").write("========= COMPUTE-SANITIZER\\n========= ERROR SUMMARY: 0 errors\\n")
os.kill(os.getppid(), signal.{{how}})
time.sleep(0.2)
"""


def stand_in(tmp_path, monkeypatch, program: str):
    """The stand-in compute-sanitizer on the PATH, and the program `program` built (an executable script)."""
    exe = tmp_path / "compute-sanitizer"
    exe.write_text(STAND_IN)
    exe.chmod(0o755)
    race = tmp_path / "race-0123456789abcdef"
    race.write_text(program)
    race.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    return race


@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM"])
def test_a_program_that_kills_its_sanitizer_and_forges_the_report_is_not_verified(tmp_path, monkeypatch, how):
    race = stand_in(tmp_path, monkeypatch, KILLS_ITS_SANITIZER.replace("{how}", how))
    done = sanitizer.run(race, [], ["--tool", "memcheck", "--error-exitcode", "99"], timeout=30)
    assert done["returncode"] == -getattr(signal, how)
    found = sanitizer.parse(done)
    assert found.errors == 0 and found.found_errors(99) is False  # the forged report alone would say "clean"
    assert f"killed by signal {how}" in found.not_its_own(99)
    (mark, text), = sanitized(monkeypatch, done)
    assert mark == "not verified" and f"killed by signal {how}" in text


def test_the_report_is_written_in_a_private_folder_the_program_is_not_told_of(tmp_path, monkeypatch):
    said = tmp_path / "said.txt"
    race = stand_in(tmp_path, monkeypatch, f"""#!{sys.executable}
import os, stat, sys
argv = open(f"/proc/{{os.getppid()}}/cmdline", "rb").read().split(b"\\0")
folder = os.path.dirname(argv[argv.index(b"--log-file") + 1].decode())
told = " ".join([*sys.argv, *os.environ.values()])
open({str(said)!r}, "w").write(f"{{oct(stat.S_IMODE(os.stat(folder).st_mode))}} {{folder in told}} {{folder}}")
""")
    done = sanitizer.run(race, ["x"], ["--tool", "memcheck", "--error-exitcode", "99"], timeout=30)
    mode, told, folder = said.read_text().split()
    assert (mode, told) == ("0o700", "False") and not Path(folder).exists()  # removed after the run
    assert sanitizer.parse(done).not_its_own(99) == "" and sanitizer.parse(done).errors == 1


# -- live: the real compute-sanitizer's own end, and a program that kills it (STREAMALLOC_MODE=live on a GPU) -------
LIVE_PROGRAM = r"""#include "course.cuh"
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <unistd.h>
__global__ void touch(int *p) { p[threadIdx.x] = 1; }
int main(int argc, char **argv) {
    int *p;
    CHECK(cudaMalloc(&p, 32 * sizeof(int)));
    touch<<<1, 32>>>(p);
    CHECK_LAUNCH();
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaFree(p));
    std::string how = argc > 1 ? argv[1] : "";
    if (how == "status") return 3;
    if (how == "kill") {  // forge a clean report where the sanitizer writes its own, then kill the sanitizer
        std::ifstream f("/proc/" + std::to_string(getppid()) + "/cmdline");
        std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>()), log, arg;
        for (size_t i = 0, j; i < all.size(); i = j + 1) {
            j = all.find('\0', i);
            if (j == std::string::npos) j = all.size();
            if (arg == "--log-file") log = all.substr(i, j - i);
            arg = all.substr(i, j - i);
        }
        std::ofstream(log) << "========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n";
        kill(getppid(), SIGKILL);
    }
    return 0;
}
"""
live = pytest.mark.skipif(os.environ.get("STREAMALLOC_MODE") != "live" or sanitizer.find() is None,
                          reason="needs a GPU (STREAMALLOC_MODE=live) and compute-sanitizer")


@live
@pytest.mark.parametrize("how, own", [("", True), ("status", True), ("kill", False)])
def test_live_the_sanitizers_own_end_and_a_program_that_kills_it(tmp_path, how, own):
    """On a GPU: a clean run ends with status 0 and its summary; a program's own status 3 is passed on and announced;
    a program that forges the report and kills its sanitizer is found out."""
    from streamalloc import cuda

    src = tmp_path / "own_end.cu"
    src.write_text(LIVE_PROGRAM)
    exe = cuda.build(src, arch=["-arch=native"])
    done = sanitizer.run(exe, [how] if how else [], [*sanitizer.STREAM_ORDER_RACES, "--error-exitcode", "99"],
                         timeout=120)
    found = sanitizer.parse(done)
    print(done["returncode"], done["report"][-500:])
    assert (found.not_its_own(99) == "") == own, found.not_its_own(99)
    if how == "status":
        assert done["returncode"] == 3 and sanitizer.TARGET_FAILED in done["report"] and found.errors == 0
    elif how == "":
        assert done["returncode"] == 0 and found.errors == 0
