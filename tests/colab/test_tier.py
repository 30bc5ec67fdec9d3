"""The Colab tier (`make colab-test`): every notebook and solution, and lab 1, run as Colab runs them.

For each: a fresh folder stands for /content (under $COLAB_TIER_ROOT, a temporary folder by default, so a test
machine need not own /content), holding only the archive that `make dist` built; a kernel of Colab's package set
(build/venv-colab, constraints/colab.txt) starts there with a bare environment (no STREAMALLOC_MODE, no MPLBACKEND,
nothing from the Makefile) and the google.colab stand-in (tests/colab/standin/google/colab) on its path; the notebook's
cells run in order, and a cell may raise only where it is tagged raises-exception (runner.cell_problem). Its
first cell must unpack the archive and say so, and nothing may be written outside that folder. One lesson also
runs by the Drive route: the course in a mounted Drive, its programs built on the local disk.

Labs: only lab 1 runs here. The other labs' code is their solution's, which runs here, less the parts a
learner writes; their checks' rejections are tested by make test (tests/test_lab*.py and nbval of labs/). Lab 1
keeps the unsolved path (a check that raises LabIncomplete) covered under Colab's IPython.

Run it through `make colab-test`, or: STREAMALLOC_COLAB_TIER=1 build/venv-colab/bin/python -m pytest tests/colab
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import make_dist  # noqa: E402

from streamalloc import runner  # noqa: E402

NAME = make_dist.NAME
STANDIN = Path(__file__).resolve().parent / "standin"  # holds google/colab: on the kernels' path only
NOTEBOOKS = sorted(ROOT.glob("notebooks/*.ipynb")) + sorted(ROOT.glob("solutions/*.ipynb")) + \
    [ROOT / "labs/lab1_stream_ordered.ipynb"]
DRIVE_ROUTE = ROOT / "notebooks/02_api_fundamentals.ipynb"
CELL_TIMEOUT = 600

@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    return make_dist.build(tmp_path_factory.mktemp("dist"))


@pytest.fixture
def root():
    """A fresh folder for one notebook's /content (and its kernel's home), removed afterwards."""
    base = os.environ.get("COLAB_TIER_ROOT")
    if base:
        Path(base).mkdir(parents=True, exist_ok=True)
    where = Path(tempfile.mkdtemp(prefix="colab-", dir=base or None))
    (where / "content").mkdir()
    (where / "home").mkdir()
    yield where
    shutil.rmtree(where, ignore_errors=True)


def kernel_env(root: Path, drive: Path | None = None) -> dict:
    """What a Colab kernel's environment has that matters here, and nothing of the Makefile's or CI's but one thing:
    on the archive route, the programs folder is this checkout's build/cuda/bin ($STREAMALLOC_PROGRAMS), where make
    test built the same programs. A program there is named by the hash of its text, header, flags and the nvcc
    program itself (cuda.build), so a program found there is the one this kernel's nvcc would build; another nvcc (a
    Colab package set with another toolkit) builds its own. The Drive route builds everything in its fresh folder."""
    path = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"  # nvcc, as Colab's PATH has it
    env = {"PATH": path, "HOME": str(root / "home"), "LANG": "C.UTF-8",
           "PYTHONPATH": str(STANDIN), "COLAB_STANDIN_CONTENT": str(root / "content"),
           "PYDEVD_DISABLE_FILE_VALIDATION": "1"}
    if os.environ.get("JUPYTER_PATH"):
        env["JUPYTER_PATH"] = os.environ["JUPYTER_PATH"]
    if drive is not None:
        env["COLAB_STANDIN_DRIVE"] = str(drive)
    else:
        env["STREAMALLOC_PROGRAMS"] = str(ROOT / "build" / "cuda" / "bin")
    return env


def run_like_colab(path: Path, content: Path, env: dict, first_cells=()) -> nbformat.NotebookNode:
    """Run the notebook's cells in a kernel started in `content`, as Colab does; return the executed notebook."""
    from nbclient import NotebookClient

    nb = nbformat.read(str(path), as_version=4)
    nb.cells[:0] = [nbformat.v4.new_code_cell(c) for c in first_cells]
    client = NotebookClient(nb, kernel_name="python3", timeout=CELL_TIMEOUT, allow_errors=True,
                            resources={"metadata": {"path": str(content)}})
    client.execute(env=env)
    return nb


def problems(nb, skip: int = 0) -> list[str]:
    found = []
    for i, cell in enumerate(nb.cells[skip:], 1):
        if cell.cell_type == "code":
            problem = runner.cell_problem(cell, cell.get("outputs", []))
            if problem:
                found.append(f"cell {i}: {problem}")
    return found


def printed(cell) -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")


def first_code(nb, skip=0):
    return next(c for c in nb.cells[skip:] if c.cell_type == "code")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_runs_like_colab_from_the_archive(path, archive, root):
    content = root / "content"
    shutil.copy(archive, content / f"{NAME}.zip")
    nb = run_like_colab(path, content, kernel_env(root))
    said = printed(first_code(nb))
    assert f"Using the course in {content / NAME} (version " in said and f"just unpacked from {NAME}.zip" in said, said
    assert "Runtime -> Change runtime type" in said, "this machine has no GPU: the set-up must say how to get one"
    assert problems(nb) == []
    assert sorted(p.name for p in content.iterdir()) == [NAME, f"{NAME}.zip"], "written outside the course's folder"
    assert sorted(p.name for p in root.iterdir()) == ["content", "home"]


def test_runs_like_colab_from_drive_and_builds_on_local_disk(archive, root):
    content, drive = root / "content", root / "drive"
    (drive / "MyDrive").mkdir(parents=True)
    with zipfile.ZipFile(archive) as z:
        z.extractall(drive / "MyDrive")
    mount = "from google.colab import drive\ndrive.mount('/content/drive')"
    nb = run_like_colab(DRIVE_ROUTE, content, kernel_env(root, drive), first_cells=[mount])
    assert "Mounted at /content/drive" in printed(nb.cells[0])
    said = printed(first_code(nb, skip=1))
    assert f"Using the course in {content / 'drive/MyDrive' / NAME} (in Drive" in said, said
    assert problems(nb, skip=1) == []
    assert not (drive / "MyDrive" / NAME / "build").exists(), "programs were built in Drive"
    assert (content / "streamalloc-build").is_dir(), "programs are built on the runtime's disk"
