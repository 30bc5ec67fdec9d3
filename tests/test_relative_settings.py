"""Relative STREAMALLOC_BUILD / STREAMALLOC_RECORDINGS / STREAMALLOC_KEY_FIGURES name folders in the directory the
command was run from, not in each notebook's folder, where the runner starts the notebook's kernel."""
import os
from pathlib import Path

import nbformat

from streamalloc import runner, settings

FOLDERS = {"STREAMALLOC_BUILD": "build2", "STREAMALLOC_RECORDINGS": "recs", "STREAMALLOC_KEY_FIGURES": "kf"}


def test_the_runners_kernels_get_them_resolved_against_where_the_command_ran(tmp_path, monkeypatch):
    start, folder = tmp_path / "start", tmp_path / "start" / "notebooks"
    folder.mkdir(parents=True)
    (start / "recs").mkdir()
    monkeypatch.chdir(start)
    for name, value in FOLDERS.items():
        monkeypatch.setenv(name, value)
    checks = "\n".join(f"assert os.environ[{n!r}] == {str(start / v)!r}, os.environ[{n!r}]" for n, v in FOLDERS.items())
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    here = f"import os, pathlib\nassert pathlib.Path.cwd() == pathlib.Path({str(folder)!r})\n"  # the kernel's folder
    nb.cells.append(nbformat.v4.new_code_cell(here + checks))
    nbformat.write(nb, str(folder / "env.ipynb"))
    before = dict(os.environ)
    rows = runner.run([folder / "env.ipynb"], out_dir=tmp_path / "out" / "executed", progress=False,
                      extra_env={"STREAMALLOC_MODE": "replay"})
    assert rows[0]["result"] == "passed", rows[0]
    assert dict(os.environ) == before  # the caller's own environment is left as it was
    assert not (folder / "build2").exists() and not (folder / "kf").exists()


def test_absolute_and_unset_folders_are_kept(tmp_path):
    env = {"STREAMALLOC_BUILD": str(tmp_path / "b"), "STREAMALLOC_KEY_FIGURES": " ", "OTHER": "x",
           "STREAMALLOC_RECORDINGS": "~/recs"}
    got = settings.absolute_folders(env, start=tmp_path / "elsewhere")
    assert got["STREAMALLOC_BUILD"] == str(tmp_path / "b") and got["STREAMALLOC_KEY_FIGURES"] == " "
    assert got["STREAMALLOC_RECORDINGS"] == str(Path.home() / "recs") and got["OTHER"] == "x"
