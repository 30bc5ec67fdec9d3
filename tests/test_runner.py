"""The runner: runs notebooks headless and judges each, expected errors included; writes only under its output
folder; names cells as the source notebook numbers them; names a timeout; keeps its summary a valid table."""
import contextlib
import json
from pathlib import Path

import nbformat
import pytest

from streamalloc import cli, course, runner, verdict


def notebook(path, cells):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    for source, tags in cells:
        cell = nbformat.v4.new_markdown_cell(source[3:]) if source.startswith("md:") else nbformat.v4.new_code_cell(source)
        if tags:
            cell.metadata["tags"] = tags
        nb.cells.append(cell)
    nbformat.write(nb, str(path))
    return path


def test_runner_passes_expected_errors_and_fails_the_rest(tmp_path):
    good = notebook(tmp_path / "good.ipynb", [("x = 1", []), ("raise ValueError('on purpose')", ["raises-exception"]),
                                              ("assert x == 1", [])])
    bad = notebook(tmp_path / "bad.ipynb", [("md:# A title", []), ("x = 1", []), ("1 / 0", []), ("md:after", [])])
    quiet = notebook(tmp_path / "quiet.ipynb", [("x = 1", ["raises-exception"])])
    hangs = notebook(tmp_path / "hangs.ipynb", [("md:# Hangs", []), ("import time\ntime.sleep(120)", []), ("y = 2", [])])
    inputs = {p: p.read_text() for p in (good, bad, quiet, hangs)}
    out_dir = tmp_path / "out" / "executed"
    rows = runner.run([good, bad, quiet, hangs], out_dir=out_dir, progress=False, cell_timeout=4)
    result = {r["notebook"].split("/")[-1]: r for r in rows}
    assert result["good.ipynb"]["result"] == "passed"
    assert result["bad.ipynb"]["result"] == "failed" and "ZeroDivisionError" in result["bad.ipynb"]["error"]
    # papermill adds cells to its copy; the error names the cell as the source notebook numbers it
    assert result["bad.ipynb"]["error"].startswith("cell 3 of 4 (1 / 0)")
    assert "raised nothing" in result["quiet.ipynb"]["error"]
    assert result["hangs.ipynb"]["error"].startswith("timed out: cell 2 of 3 (import time) ran longer than the 4 s")
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert [r["result"] for r in summary] == ["passed", "failed", "failed", "failed"]
    # the inputs are untouched; the copies are under out_dir/outside/, since tmp_path is outside the repository
    assert {p: p.read_text() for p in inputs} == inputs
    for p in inputs:
        assert runner.output_path(p, out_dir).is_file()
        assert runner.output_path(p, out_dir).is_relative_to(out_dir / "outside")


def test_executed_copies_mirror_the_repository_and_never_replace_the_input(tmp_path):
    out = tmp_path / "build" / "executed"
    assert runner.output_path(course.REPO / "notebooks" / "00_setup.ipynb", out) == out / "notebooks" / "00_setup.ipynb"
    # a path that leaves the repository (../x) is outside: it goes under outside/, not into the repository
    outside = course.REPO.parent / "x.ipynb"
    assert runner.output_path(course.REPO / ".." / "x.ipynb", out) == runner.output_path(outside, out)
    assert runner.output_path(outside, out).is_relative_to(out / "outside")
    with pytest.raises(ValueError, match="overwrite"):
        runner.output_path(course.REPO / "notebooks" / "00_setup.ipynb", course.REPO)


def test_no_notebook_is_an_error(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes.txt").write_text("")
    for path, why in ((tmp_path / "empty", "no notebook"), (tmp_path / "missing.ipynb", "does not exist"),
                      (tmp_path / "notes.txt", "not a notebook")):
        with pytest.raises(course.NoNotebooks, match=why):
            course.notebooks([path])
        assert cli.main(["run", str(path)]) == 2
        assert why in capsys.readouterr().err


def test_the_summary_stays_a_table_whatever_the_error_holds(tmp_path):
    rows = [{"notebook": "a|b.ipynb", "mode": "replay", "result": "failed", "seconds": 1.0,
             "error": "cell 3: ValueError: x | y\nsecond line\r\nthird \\| line"},
            {"notebook": "ok.ipynb", "mode": "replay", "result": "passed", "seconds": 2.0, "error": ""}]
    md = runner.write_summary(rows, tmp_path)
    lines = md.splitlines()
    table = lines[:4]
    assert lines[4] == "" and lines[5] == "1 passed, 1 failed"
    for line in table:  # each row has exactly the five columns: six unescaped pipes
        unescaped = line.replace("\\\\", "").replace("\\|", "")
        assert unescaped.count("|") == 6, line
    assert "x \\| y<br>second line<br>third \\\\\\| line" in table[2]


def test_the_summary_says_when_the_gpu_was_shared(tmp_path):
    row = {"notebook": "solutions/lab1.ipynb", "mode": "live", "result": "passed", "seconds": 9.0, "error": ""}
    assert "This GPU was shared" not in runner.write_summary([dict(row, shared_with=0)], tmp_path)
    md = runner.write_summary([dict(row, shared_with=7), dict(row, shared_with=None)], tmp_path)
    assert "up to 7 other processes computed on it" in md and "'not verified'" in md


def test_cells_papermill_adds_are_not_counted(tmp_path):
    """papermill's copy may start with an injected parameters cell and error banners; the number is the source's."""
    nb = nbformat.v4.new_notebook()
    injected = nbformat.v4.new_code_cell("x = 2", metadata={"tags": ["injected-parameters"]})
    banner = nbformat.v4.new_markdown_cell("An Exception was encountered", metadata={"tags": ["papermill-error-cell-tag"]})
    failing = nbformat.v4.new_code_cell("lesson.run('broken.cu')", execution_count=3)
    failing.outputs = [nbformat.v4.new_output("error", ename="CompileError", evalue="broken.cu does not compile",
                                              traceback=[])]
    nb.cells = [banner, nbformat.v4.new_markdown_cell("# Title"), injected, nbformat.v4.new_code_cell("y = 1", execution_count=1),
                banner, failing]
    path = tmp_path / "executed.ipynb"
    nbformat.write(nb, str(path))
    assert runner.notebook_problem(path) == ("cell 3 of 3 (lesson.run('broken.cu')): CompileError: broken.cu does not "
                                             "compile")


def test_each_notebook_gets_a_fresh_kernel_in_its_folder_and_none_is_left(tmp_path, monkeypatch):
    """The next kernel starts ahead, yet each notebook has its own, started in the notebook's folder, with the
    environment the runner set; after the run no kernel is left and no socket file is in a notebook's folder."""
    import os
    monkeypatch.setenv("MPLBACKEND", "Agg")  # a headless shell's setting must not reach the kernels
    probe = ("import os, json, matplotlib\nprint(json.dumps({'pid': os.getpid(), 'cwd': os.getcwd(), "
             "'mode': os.environ.get('STREAMALLOC_MODE'), 'backend': matplotlib.get_backend()}))")
    folders = [tmp_path / "a", tmp_path / "b", tmp_path / "a"]
    nbs = []
    for i, folder in enumerate(folders):
        folder.mkdir(exist_ok=True)
        nbs.append(notebook(folder / f"n{i}.ipynb", [(probe, [])]))
    out_dir = tmp_path / "out" / "executed"
    waited, after_cell = [], runner.Kernels.after_cell

    async def spy(self, **kw):  # the first cell of each notebook but the last waits for the next kernel
        waited.append(self.following is not None)
        await after_cell(self, **kw)
        assert self.following is None
    monkeypatch.setattr(runner.Kernels, "after_cell", spy)
    rows = runner.run(nbs, out_dir=out_dir, progress=False)
    assert [r["result"] for r in rows] == ["passed"] * 3
    assert waited == [True, True, False]
    seen = [json.loads(nbformat.read(str(runner.output_path(nb, out_dir)), 4).cells[0].outputs[0]["text"]) for nb in nbs]
    assert [s["cwd"] for s in seen] == [str(f) for f in folders]
    assert len({s["pid"] for s in seen}) == 3 and {s["mode"] for s in seen} == {"replay"}
    assert all("inline" in s["backend"] for s in seen), seen
    for s in seen:
        with pytest.raises(ProcessLookupError):
            os.kill(s["pid"], 0)
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["n0.ipynb", "n2.ipynb"]


def test_two_outside_notebooks_whose_folders_differ_only_in_odd_characters_keep_their_own_copies(tmp_path):
    out = tmp_path / "out"
    spaced, underscored = tmp_path / "a b" / "n.ipynb", tmp_path / "a_b" / "n.ipynb"
    assert runner.output_path(spaced, out) != runner.output_path(underscored, out)
    assert runner.output_path(spaced, out) == runner.output_path(spaced, out)  # the same notebook, the same copy


def test_a_folder_is_searched_below_its_top_level(tmp_path):
    top = notebook(tmp_path / "top.ipynb", [("x = 1", [])])
    (tmp_path / "part1" / "deeper").mkdir(parents=True)
    (tmp_path / ".ipynb_checkpoints").mkdir()
    below = notebook(tmp_path / "part1" / "deeper" / "below.ipynb", [("x = 1", [])])
    notebook(tmp_path / ".ipynb_checkpoints" / "top-checkpoint.ipynb", [("x = 1", [])])
    assert course.notebooks([tmp_path]) == [below, top]


def test_a_kernel_that_dies_names_the_cell(tmp_path):
    nb = notebook(tmp_path / "dies.ipynb", [("md:# Dies", []), ("x = 1", []), ("import os\nos._exit(3)", []),
                                            ("y = 2", [])])
    rows = runner.run([nb], out_dir=tmp_path / "out" / "executed", progress=False)
    assert rows[0]["result"] == "failed"
    assert rows[0]["error"].startswith("the kernel died in cell 3 of 4 (import os)"), rows[0]["error"]


def test_run_leaves_its_callers_environment_as_it_was(tmp_path, monkeypatch):
    import os
    monkeypatch.delenv("STREAMALLOC_MODE", raising=False)
    monkeypatch.delenv("STREAMALLOC_KEY_FIGURES", raising=False)
    nb = notebook(tmp_path / "env.ipynb", [("import os\nassert os.environ['STREAMALLOC_MODE'] == 'replay'\n"
                                            "from pathlib import Path\n"
                                            "assert os.environ['STREAMALLOC_KEY_FIGURES'] == str(Path(%r) / 'kf')"
                                            % str(Path.cwd()), [])])
    before = dict(os.environ)
    rows = runner.run([nb], out_dir=tmp_path / "out" / "executed", progress=False,
                      extra_env={"STREAMALLOC_MODE": "replay", "STREAMALLOC_KEY_FIGURES": "kf"})
    assert rows[0]["result"] == "passed", rows[0]
    assert dict(os.environ) == before


def test_a_lesson_that_needs_two_gpus_is_not_measured_not_passed(tmp_path, monkeypatch, capsys):
    """05b in replay with no recording made on two GPUs: the runner, the summary and the exit status say
    'not measured: needs 2 GPUs', not 'passed'; a NotYetRecorded error says the same."""
    monkeypatch.setenv("STREAMALLOC_MODE", "replay")
    monkeypatch.setenv("PYTHONPATH", str(course.REPO))  # the kernels start beside the notebooks, outside the course
    one_gpu = tmp_path / "recordings" / "nvidia-test-gpu"  # a copy of the course whose recordings hold no 2-GPU run
    one_gpu.mkdir(parents=True)
    (one_gpu / "machine.json").write_text('{"gpu": "NVIDIA Test GPU"}')
    monkeypatch.setenv("STREAMALLOC_RECORDINGS", str(one_gpu.parent))
    unmeasured = notebook(tmp_path / "05b_two_gpus.ipynb", [
        ("import streamalloc as sa\nlesson = sa.start('05b_two_gpus', quiet=True)\n"
         "assert lesson.machine_with(gpus=2) is None", [])])
    raised = notebook(tmp_path / "raises.ipynb", [
        ("from streamalloc.errors import NotYetRecorded\nraise NotYetRecorded('x needs 2 GPUs')", [])])
    rows = runner.run([unmeasured, raised], out_dir=tmp_path / "out" / "executed", progress=False)
    assert [r["result"] for r in rows] == [runner.NOT_MEASURED] * 2, rows
    assert rows[0]["error"].startswith("needs 2 GPUs")
    md = (tmp_path / "out" / "summary.md").read_text()
    assert "0 passed, 0 failed, 2 not measured (" in md and "needs 2 GPUs" in md
    assert cli.succeeded(rows) and not cli.succeeded([*rows, {**rows[0], "result": "failed"}])


def test_a_lesson_shown_from_a_recording_on_a_live_machine_is_a_replay_row(tmp_path, monkeypatch):
    """Live on one GPU, 05b replays its two-GPU recording: its row says replay, and why, never live."""
    monkeypatch.setenv("STREAMALLOC_MODE", "replay")
    monkeypatch.setenv("PYTHONPATH", str(course.REPO))  # the kernels start beside the notebooks, outside the course
    said = "needs 2 GPUs, this machine has 1: the numbers are the recording's (NVIDIA H200)"
    nb = notebook(tmp_path / "05b_two_gpus.ipynb", [  # as lesson.machine_with says it: data, in the notebook's outputs
        (f"from streamalloc import verdict\nverdict.show(verdict.Verdict(verdict.REPLAYED, {said!r}, 'replayed'))", [])])
    rows = runner.run([nb], out_dir=tmp_path / "out" / "executed", progress=False)
    assert rows[0]["result"] == "passed" and rows[0]["mode"] == "replay", rows
    assert rows[0]["note"] == verdict.REPLAYED_HERE + said, rows
    assert "Not checked here" in (tmp_path / "out" / "summary.md").read_text()


def test_in_replay_several_notebooks_run_at_once_and_the_rows_keep_their_order(tmp_path, monkeypatch, capsys):
    """jobs=2 in replay: the same verdicts as one at a time (a failure stays a failure, named), the rows in the
    notebooks' order, each printed once; live it would run one at a time (jobs_for)."""
    monkeypatch.setenv("STREAMALLOC_MODE", "replay")
    nbs = [notebook(tmp_path / f"n{i}.ipynb", [(f"import time\ntime.sleep({0.6 if i == 0 else 0})\nx = {i}", []),
                                              ("1 / 0" if i == 2 else "assert x >= 0", [])]) for i in range(4)]
    rows = runner.run(nbs, out_dir=tmp_path / "out" / "executed", progress=False, jobs=2)
    assert [Path(r["notebook"]).name for r in rows] == [f"n{i}.ipynb" for i in range(4)]
    assert [r["result"] for r in rows] == ["passed", "passed", "failed", "passed"], rows
    assert "ZeroDivisionError" in rows[2]["error"] and all(r["mode"] == "replay" for r in rows)
    out = capsys.readouterr().out
    assert "4 notebooks, 2 at a time" in out and all(out.count(f"n{i}.ipynb\n") == 1 for i in range(4)), out
    assert all(any((tmp_path / "out" / "executed").rglob(f"n{i}.ipynb")) for i in range(4))
    assert runner.jobs_for(True) == 1 and 1 <= runner.jobs_for(False) <= 8


def test_a_compile_error_demo_without_nvcc_passes_and_says_once_what_it_could_not_compile(tmp_path):
    nb = nbformat.v4.new_notebook()
    demo = nbformat.v4.new_code_cell("lesson.run('broken.cu')", execution_count=2,
                                     metadata={"tags": ["raises-exception"], "expected_exception": "CompileError"})
    demo.outputs = [nbformat.v4.new_output("error", ename="NvccNotFound", evalue="broken.cu could not be compiled: "
                                           "nvcc, the CUDA compiler, was not found", traceback=[])]
    other = nbformat.v4.new_code_cell("1 / 0", execution_count=3, metadata={"tags": ["raises-exception"],
                                                                            "expected_exception": "CompileError"})
    other.outputs = [nbformat.v4.new_output("error", ename="ZeroDivisionError", evalue="division by zero", traceback=[])]
    nb.cells = [nbformat.v4.new_code_cell("x = 1", execution_count=1), demo]
    path = tmp_path / "executed.ipynb"
    nbformat.write(nb, str(path))
    problem, note = runner.notebook_findings(path)
    assert problem == "" and note == "cell 2 of 2 (lesson.run('broken.cu')): not compiled, no nvcc here (broken.cu " \
                                     "could not be compiled)"
    md = runner.write_summary([{"notebook": "notebooks/00_setup.ipynb", "mode": "replay", "result": "passed",
                                "seconds": 1.0, "error": "", "note": note}], tmp_path)
    assert md.count("broken.cu could not be compiled") == 1 and "Not checked here" in md
    nb.cells.append(other)  # another error where a compile error is expected still fails
    nbformat.write(nb, str(path))
    assert "should raise CompileError, but raised ZeroDivisionError" in runner.notebook_findings(path)[0]


def test_a_summary_is_written_whole_or_not_at_all(tmp_path):
    """A full disk while the summary is written (a file-size limit makes the write fail half-way): the last
    summary stays whole, and the runner says in words that it could not write it."""
    import subprocess
    import sys
    old = json.dumps([{"notebook": "old.ipynb", "result": "passed"}])
    (tmp_path / "summary.json").write_text(old)
    script = ("import resource, signal, sys\nfrom streamalloc import runner\n"
              "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
              "resource.setrlimit(resource.RLIMIT_FSIZE, (200, 200))\n"
              "rows = [{'notebook': f'n{i}.ipynb', 'mode': 'replay', 'result': 'passed', 'seconds': 1.0, 'error': ''}"
              " for i in range(20)]\n"
              f"runner.write_summary(rows, runner.Path({str(tmp_path)!r}))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=course.REPO)
    assert (tmp_path / "summary.json").read_text() == old
    assert "cannot write its summary" in done.stderr and "full disk" in done.stderr
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".summary")]  # no temporary left


def test_a_read_only_output_folder_is_named_before_anything_runs(tmp_path, monkeypatch, capsys):
    import errno
    import pathlib
    out_dir = tmp_path / "build" / "executed"
    real = pathlib.Path.mkdir

    def read_only(self, *a, **kw):
        if self.is_relative_to(tmp_path / "build"):
            raise OSError(errno.EROFS, "Read-only file system", str(self))
        return real(self, *a, **kw)
    monkeypatch.setattr(pathlib.Path, "mkdir", read_only)
    nb = notebook(tmp_path / "n.ipynb", [("x = 1", [])])
    with pytest.raises(runner.OutputNotWritable, match="cannot write to .*Read-only file system"):
        runner.run([nb], out_dir=out_dir, progress=False)


def test_sigterm_during_a_build_stops_nvcc_and_leaves_no_temporary_folder_or_socket(tmp_path):
    """A run whose notebook is building (a fake nvcc that starts a child and waits): SIGTERM to the runner does
    what SIGINT does. Afterwards no nvcc, no child of it, no kernel, no nvcc folder and no socket folder is left."""
    import os
    import signal
    import subprocess
    import sys
    import time
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvcc").write_text(f'#!/bin/sh\n[ "$1" = --version ] && echo "release 13.0, V13.0.88" && exit 0\n'
                                  f'echo $$ > {tmp_path}/nvcc.pid\ntouch "$TMPDIR/cicc.tmp"\n'
                                  f'sleep 600 &\necho $! > {tmp_path}/child.pid\nwait\n')
    (bin_dir / "nvcc").chmod(0o755)
    (tmp_path / "x.cu").write_text("int main() { return 0; }\n")
    nb = notebook(tmp_path / "builds.ipynb", [
        ("import os\nopen('kernel.pid', 'w').write(str(os.getpid()))\nfrom streamalloc import cuda\n"
         "cuda.build_all(['x.cu'], out_dir='built')", [])])
    import shutil
    import tempfile
    # the kernels' IPC sockets live in TMPDIR: a short one (a pytest-xdist worker's tmp_path is too long for a socket)
    tmp = Path(tempfile.mkdtemp(prefix="sa-"))
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "TMPDIR": str(tmp), "STREAMALLOC_MODE": "replay",
           "PYTHONPATH": str(course.REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "streamalloc", "run", "--no-progress", str(nb)], env=env,
                            cwd=course.REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for _ in range(600):
        if (tmp_path / "child.pid").is_file() and (tmp_path / "child.pid").read_text().strip():
            break
        time.sleep(0.1)
    else:
        proc.kill()
        pytest.fail("the build never started: " + proc.communicate()[0])
    time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)
    out = proc.communicate(timeout=60)[0]
    assert proc.returncode != 0, out
    time.sleep(0.5)
    for name in ("nvcc.pid", "child.pid", "kernel.pid"):
        pid = int((tmp_path / name).read_text())
        state = Path(f"/proc/{pid}/stat")
        assert not state.exists() or state.read_text().split()[2] == "Z", f"{name[:-4]} is still running\n{out}"
    assert not list((tmp_path / "built").glob(".nvcc-*")), "nvcc's temporary folder is left"
    left = list(tmp.glob("streamalloc-kernels-*"))
    shutil.rmtree(tmp, ignore_errors=True)
    assert not left, "the kernels' socket folder is left"


# -- an edited lab's word: solved only where its check passed -----------------------------------------------------
CHECKLIST = "print('Lab 9: a test lab\\n  ok     it compiles\\n  WRONG  buf is never freed: free it after the loop')"


def edited_lab(path, check_source):
    """A lab as a learner leaves it: generated (a cells_sha256 in its metadata) and edited since (the hash differs),
    with a check cell that must raise LabIncomplete while unsolved."""
    notebook(path, [("x = 1", []), (check_source, ["check", "raises-exception"])])
    nb = nbformat.read(str(path), as_version=4)
    nb.metadata["streamalloc"] = {"cells_sha256": "not these cells"}
    nb.cells[-1].metadata["expected_exception"] = "LabIncomplete"
    nbformat.write(nb, str(path))
    return path


def shows(word: str, finding: str = "", prose: str = "") -> str:
    """A check cell's line that shows a verdict as Report.finish does (streamalloc.verdict)."""
    return f"\nfrom streamalloc import verdict\nverdict.show(verdict.Verdict({word!r}, {finding!r}, {prose!r}))"


def test_an_edited_lab_is_solved_only_where_its_check_passed(tmp_path, monkeypatch, capsys):
    """The console and summary.md use one word, the one the check showed as data: "in progress" with the first thing
    still wrong, "solved", "not verified" with what it could not check here; the rows still count as run as intended
    (the exit status does not change)."""
    monkeypatch.setenv("STREAMALLOC_MODE", "replay")
    monkeypatch.setenv("PYTHONPATH", str(course.REPO))  # the kernels start beside the notebooks, outside the course
    raising = edited_lab(tmp_path / "lab_a.ipynb", CHECKLIST + shows("in progress", "buf is never freed: free it after "
                         "the loop") + "\nclass LabIncomplete(Exception): pass\n"
                         "raise LabIncomplete('1 thing still wrong: buf is never freed: free it after the loop')")
    solved = edited_lab(tmp_path / "lab_b.ipynb", "print('Lab 9\\n  ok  it compiles')" + shows("solved", "", "Yes."))
    noted = edited_lab(tmp_path / "lab_c.ipynb", "print('Lab 9\\n  note  x')" + shows("solved", "x", "With a note."))
    partly = edited_lab(tmp_path / "lab_d.ipynb", "print('Lab 9')" + shows("not verified", "not verified without a "
                                                                            "GPU: the speed.", "Partly."))
    rows = runner.run([raising, solved, noted, partly], out_dir=tmp_path / "out" / "executed", progress=False, jobs=1)
    assert [(r["result"], r.get("lab")) for r in rows] == [("passed", "in progress"), ("passed", "solved"),
                                                           ("passed", "solved"), ("passed", "not verified")], rows
    assert rows[0]["finding"] == "buf is never freed: free it after the loop" and rows[1]["finding"] == ""
    assert rows[3]["finding"] == "not verified without a GPU: the speed."
    out = capsys.readouterr().out
    assert "    in progress in " in out and "s: buf is never freed: free it after the loop" in out
    assert out.count("    solved in ") == 2 and "    not verified in " in out
    md = (tmp_path / "out" / "summary.md").read_text()
    table = {line.split(" | ")[0].strip("| ").split("/")[-1]: line.split(" | ")[2] for line in md.splitlines()
             if line.startswith("| ") and ".ipynb" in line}
    assert table == {"lab_a.ipynb": "in progress", "lab_b.ipynb": "solved", "lab_c.ipynb": "solved",
                     "lab_d.ipynb": "not verified"}, md
    assert "0 passed, 2 solved, 1 in progress, 1 not verified, 0 failed" in md and " passed |" not in md
    assert cli.succeeded(rows)


def test_a_program_printing_a_verdict_does_not_make_a_lab_solved(tmp_path, monkeypatch):
    """A program's lines reach the check cell as stream output: "All checks passed." printed there (by the program, or
    anything else) is prose, not the verdict. A check that showed "not verified" stays so; one that showed none is
    "not verified" too, never solved."""
    monkeypatch.setenv("STREAMALLOC_MODE", "replay")
    monkeypatch.setenv("PYTHONPATH", str(course.REPO))
    forged = "print('\\nAll checks passed.')\n"  # as a program's line reaches the cell: stream output
    unverified = edited_lab(tmp_path / "lab_a.ipynb", forged + shows("not verified", "the results: no GPU here"))
    silent = edited_lab(tmp_path / "lab_b.ipynb", forged)
    rows = runner.run([unverified, silent], out_dir=tmp_path / "out" / "executed", progress=False, jobs=1)
    executed = nbformat.read(str(runner.output_path(silent, tmp_path / "out" / "executed")), as_version=4)
    printed = [c.outputs for c in executed.cells if c.cell_type == "code"][-1]
    assert any("All checks passed." in o.get("text", "") for o in printed)  # the line is there, as stream output
    assert [(r.get("lab"), r.get("finding")) for r in rows] == [
        ("not verified", "the results: no GPU here"), ("not verified", "the check gave no verdict")], rows


def test_an_unedited_lab_still_passes_when_its_check_raises(tmp_path):
    """The committed lab (no edit): its check raising LabIncomplete is what it must do, and the word is "passed"."""
    lab = edited_lab(tmp_path / "lab.ipynb", "class LabIncomplete(Exception): pass\nraise LabIncomplete('todo')")
    nb = nbformat.read(str(lab), as_version=4)
    del nb.metadata["streamalloc"]
    nbformat.write(nb, str(lab))
    rows = runner.run([lab], out_dir=tmp_path / "out" / "executed", progress=False,
                      extra_env={"STREAMALLOC_MODE": "replay"})
    assert rows[0]["result"] == "passed" and "lab" not in rows[0] and runner.shown(rows[0]) == "passed"


def test_a_check_that_raised_without_a_verdict_is_not_verified_and_one_with_it_reads_its_data(tmp_path):
    """The word comes from the check's data alone: an error with no verdict shown (the check stopped before its end)
    is "not verified", whatever the error says; with the verdict shown, its word and finding."""
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("sa.labchecks.lab1(lesson)", execution_count=2,
                                     metadata={"expected_exception": "LabIncomplete"})
    error = nbformat.v4.new_output("error", ename="LabIncomplete", evalue="1 thing still wrong: x\nmore", traceback=[])
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="  WRONG  x\n\nAll checks passed.\n"), error]
    nb.cells = [cell]
    nbformat.write(nb, str(tmp_path / "x.ipynb"))
    assert runner.lab_outcome(tmp_path / "x.ipynb") == ("not verified", "the check gave no verdict (it raised "
                                                                        "LabIncomplete)")
    shown = verdict.Verdict(verdict.IN_PROGRESS, "x", "\nNot solved yet: 1 thing still wrong.")
    cell.outputs = [nbformat.v4.new_output("display_data", data=shown._repr_mimebundle_()), error]
    nbformat.write(nb, str(tmp_path / "x.ipynb"))
    assert runner.lab_outcome(tmp_path / "x.ipynb") == ("in progress", "x")
    cell.execution_count, cell.outputs = None, []
    nbformat.write(nb, str(tmp_path / "x.ipynb"))
    assert runner.lab_outcome(tmp_path / "x.ipynb") == ("", "")  # no check ran: no word


@pytest.mark.parametrize("to", ["the runner", "its process group", "the runner, killed"])
def test_sigterm_during_parallel_builds_stops_every_nvcc_and_leaves_no_temporary_folder_or_socket(tmp_path, to):
    """As above, with two notebooks building at once in replay (--jobs 2, as make course and make site run them):
    SIGTERM to the runner alone, or to its whole process group (a closed terminal, a CI job cancelled), stops both
    builds as SIGINT does. Afterwards no nvcc, no child of it, no kernel, no nvcc folder and no socket folder is left,
    and no other notebook was started. The runner killed outright (SIGKILL: it can stop nothing) is the same: each
    worker is sent SIGTERM as its parent dies, stops its notebook and ends (before, both workers and a kernel were
    left waiting for ever)."""
    import os
    import shutil
    import signal
    import subprocess
    import sys
    import tempfile
    import time
    bin_dir, pids = tmp_path / "bin", tmp_path / "pids"
    bin_dir.mkdir()
    pids.mkdir()
    (bin_dir / "nvcc").write_text(f'#!/bin/sh\n[ "$1" = --version ] && echo "release 13.0, V13.0.88" && exit 0\n'
                                  f'echo $$ > {pids}/nvcc-$$\ntouch "$TMPDIR/cicc.tmp"\n'
                                  f'sleep 600 &\necho $! > {pids}/child-$$\nwait\n')
    (bin_dir / "nvcc").chmod(0o755)
    nbs = []
    for name in ("a", "b", "c"):  # two build at once; c waits its turn, and must never start
        (tmp_path / name).mkdir()
        (tmp_path / name / "x.cu").write_text("int main() { return 0; }\n")
        nbs.append(notebook(tmp_path / name / f"{name}.ipynb", [
            (f"import os\nopen('{pids}/kernel-' + str(os.getpid()), 'w').write(str(os.getpid()))\n"
             "from streamalloc import cuda\ncuda.build_all(['x.cu'], out_dir='built')", [])]))
    tmp = Path(tempfile.mkdtemp(prefix="sa-"))  # short: the kernels' IPC sockets live in TMPDIR
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "TMPDIR": str(tmp), "STREAMALLOC_MODE": "replay",
           "PYTHONPATH": str(course.REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "streamalloc", "run", "--no-progress", "--jobs", "2", *map(str, nbs)],
                            env=env, cwd=course.REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        for _ in range(600):
            if len([p for p in pids.glob("child-*") if p.read_text().strip()]) == 2:
                break
            time.sleep(0.1)
        else:
            pytest.fail("the builds never started")
        time.sleep(0.3)
        if to == "the runner":
            proc.send_signal(signal.SIGTERM)
        elif to == "the runner, killed":
            proc.send_signal(signal.SIGKILL)
        else:
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            out = proc.communicate(timeout=60)[0]
        except subprocess.TimeoutExpired:
            pytest.fail("the runner did not stop within 60 s of SIGTERM")
        assert proc.returncode != 0, out
        time.sleep(0.5)
        def running(pid_file):
            try:
                return Path(f"/proc/{pid_file.read_text().strip()}/stat").read_text().split()[2] != "Z"
            except OSError:
                return False
        for _ in range(100 if to == "the runner, killed" else 0):  # the workers stop on their own, after the runner
            if not any(map(running, pids.iterdir())):
                break
            time.sleep(0.2)
        left = [pid_file.name.split("-")[0] for pid_file in pids.iterdir() if running(pid_file)]
        assert not left, f"still running: {left}\n{out}"
        assert len(list(pids.glob("kernel-*"))) == 2, "a notebook was started after SIGTERM"
        assert not list(tmp_path.glob("*/built/.nvcc-*")), "nvcc's temporary folder is left"
        assert not list(tmp.glob("streamalloc-kernels-*")), "the kernels' socket folder is left"
    finally:  # whatever failed, nothing of this test is left running
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        for pid_file in pids.iterdir():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid_file.read_text().strip()), signal.SIGKILL)
        shutil.rmtree(tmp, ignore_errors=True)


def test_the_parallel_console_shows_every_line_of_a_multi_line_error(tmp_path, monkeypatch, capsys):
    """--jobs 2 printed only the last line of an error ("second: the fix"): every line, each under its notebook."""
    monkeypatch.setenv("STREAMALLOC_MODE", "replay")
    nbs = [notebook(tmp_path / "ok.ipynb", [("x = 1", [])]),
           notebook(tmp_path / "bad.ipynb", [("raise ValueError('first: what went wrong\\nsecond: the fix')", [])])]
    rows = runner.run(nbs, out_dir=tmp_path / "out" / "executed", progress=False, jobs=2)
    assert [r["result"] for r in rows] == ["passed", "failed"], rows
    out = capsys.readouterr().out.split("\n\n")[0]  # the console's lines, before the summary's table
    assert "bad.ipynb\n    failed in " in out and "ValueError: first: what went wrong\n    second: the fix" in out, out


def test_a_copy_papermill_could_not_write_whole_is_not_left_beside_its_failed_row(tmp_path, monkeypatch):
    """The disk fills up while papermill saves the executed copy: the row says failed and why, and no half-written
    copy (nor an older run's whole one) is left where the site and the learner read it."""
    import papermill

    nb = notebook(tmp_path / "n.ipynb", [("x = 1", [])])
    out_dir = tmp_path / "out" / "executed"
    runner.run([nb], out_dir=out_dir, progress=False)
    out = runner.output_path(nb, out_dir)
    assert out.is_file() and nbformat.read(str(out), as_version=4)  # an older run's whole copy

    def cut_short(input_path, output_path, **kw):
        Path(output_path).write_text(Path(input_path).read_text()[:40])  # papermill's save, cut off by a full disk
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(papermill, "execute_notebook", cut_short)
    row, = runner.run([nb], out_dir=out_dir, progress=False)
    assert row["result"] == "failed" and "No space left on device" in row["error"], row
    assert "could not be written whole" in row["error"] and "none is kept" in row["error"], row
    assert not out.exists() and list(out.parent.iterdir()) == [], "no copy, whole or half, is left beside the row"

    def whole(input_path, output_path, **kw):
        Path(output_path).write_text(Path(input_path).read_text())
    monkeypatch.setattr(papermill, "execute_notebook", whole)
    row, = runner.run([nb], out_dir=out_dir, progress=False)
    assert row["result"] == "passed" and out.is_file() and list(out.parent.iterdir()) == [out]


def test_the_summary_keeps_the_whole_course_and_no_row_of_a_notebook_changed_since(tmp_path):
    """One notebook run again: the summary still holds the others' rows from the run before, except a notebook whose
    text changed since (or is gone), whose old row would describe another notebook."""
    same, changed, gone, now = (tmp_path / f"{n}.ipynb" for n in ("same", "changed", "gone", "now"))
    for nb in (same, changed, gone, now):
        nb.write_text(f'{{"cells": [], "name": "{nb.stem}"}}')
    earlier = [{"notebook": str(nb), "result": "passed", "sha": runner._text_sha(str(nb))} for nb in (same, changed, gone)]
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps(earlier))
    changed.write_text('{"cells": [], "edited": true}')
    gone.unlink()
    rows = [{"notebook": str(now), "result": "failed"}]
    got = runner.merged(rows, summary)
    assert [r["notebook"] for r in got] == [str(now), str(same)] or [r["notebook"] for r in got] == [str(same), str(now)]
    assert {r["notebook"]: r["result"] for r in got} == {str(now): "failed", str(same): "passed"}
    assert rows[0]["sha"] == runner._text_sha(str(now))  # this run's rows say what they ran
    assert [bool(r.get("earlier")) for r in got if r["notebook"] == str(same)] == [True] and "earlier" not in rows[0]
    for r in got:
        r.setdefault("mode", "replay"), r.setdefault("seconds", 1.0), r.setdefault("error", "")
    md = runner.write_summary(got, tmp_path)
    assert f"| {str(same)} | replay | passed | 1.0 (earlier run) |" in md and f"| {str(now)} | replay | failed | 1.0 |" \
        in md and "A row marked (earlier run) is kept from a run before this one" in md
    assert runner.merged(rows, tmp_path / "none.json") == rows  # no earlier summary: this run's rows alone
    summary.write_text("not json")
    assert runner.merged(rows, summary) == rows


def test_an_interrupted_run_says_so_in_one_line_and_exits_130(monkeypatch, capsys):
    def interrupted(*a, **kw):
        raise KeyboardInterrupt
    monkeypatch.setattr(runner, "run", interrupted)
    assert cli.main(["run", "notebooks/00_setup.ipynb"]) == 130
    err = capsys.readouterr().err
    assert err == "python -m streamalloc run: stopped by an interrupt; build/summary.md is left as the run before wrote it\n"


def test_a_stopped_worker_does_not_print_the_kernel_task_it_left(monkeypatch):
    """After a stop, asyncio's "Task exception was never retrieved" (the cell task of the kernel just stopped) is
    dropped in a worker; before a stop, and any other asyncio message, still shows."""
    import logging
    keep = runner._AfterTheStop()
    record = lambda msg: logging.LogRecord("asyncio", logging.ERROR, __file__, 1, msg, None, None)  # noqa: E731
    monkeypatch.setitem(runner._STOP, "stopped", False)
    assert keep.filter(record("Task exception was never retrieved"))
    monkeypatch.setitem(runner._STOP, "stopped", True)
    assert not keep.filter(record("Task exception was never retrieved"))
    assert keep.filter(record("Unclosed client session"))


def test_the_kernels_say_why_the_runner_chose_their_mode(tmp_path, monkeypatch):
    """The runner hands its kernels the mode it decided; their banner gives its reason ("there is no usable GPU: ..."),
    not "STREAMALLOC_MODE=replay was set", which a newcomer never set. Where the user set it, that is the reason."""
    from streamalloc import gpu
    out = tmp_path / "said.txt"
    nb = notebook(tmp_path / "why.ipynb", [(
        f"from streamalloc import gpu\nopen({str(out)!r}, 'w').write(gpu.decide(gpu.probe()).reason)", [])])
    monkeypatch.delenv("STREAMALLOC_MODE", raising=False)
    monkeypatch.delenv(gpu.HANDED_REASON, raising=False)
    monkeypatch.setenv("PYTHONPATH", str(course.REPO))  # the kernel runs in tmp_path
    runner.run([nb], out_dir=tmp_path / "out" / "executed", progress=False, jobs=1)
    decided = gpu.decide(gpu.probe(), forced="")
    assert out.read_text() == decided.reason and "was set" not in out.read_text()
    monkeypatch.setenv("STREAMALLOC_MODE", "replay")
    runner.run([nb], out_dir=tmp_path / "out" / "executed", progress=False, jobs=1)
    assert out.read_text() == "STREAMALLOC_MODE=replay was set, so recordings are replayed even if a GPU is here"
