"""The runner: runs notebooks headless and judges each, expected errors included; writes only under its output
folder; names cells as the source notebook numbers them; names a timeout; keeps its summary a valid table."""
import json

import nbformat
import pytest

from streamalloc import cli, runner


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
    assert runner.output_path(runner.REPO / "notebooks" / "00_setup.ipynb", out) == out / "notebooks" / "00_setup.ipynb"
    # a path that leaves the repository (../x) is outside: it goes under outside/, not into the repository
    outside = runner.REPO.parent / "x.ipynb"
    assert runner.output_path(runner.REPO / ".." / "x.ipynb", out) == runner.output_path(outside, out)
    assert runner.output_path(outside, out).is_relative_to(out / "outside")
    with pytest.raises(ValueError, match="overwrite"):
        runner.output_path(runner.REPO / "notebooks" / "00_setup.ipynb", runner.REPO)


def test_no_notebook_is_an_error(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes.txt").write_text("")
    for path, why in ((tmp_path / "empty", "no notebook"), (tmp_path / "missing.ipynb", "does not exist"),
                      (tmp_path / "notes.txt", "not a notebook")):
        with pytest.raises(runner.NoNotebooks, match=why):
            runner.notebooks([path])
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
