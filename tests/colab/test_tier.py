"""The Colab tier (`make colab-test`): every notebook, solution and lab, run as Colab runs them.

For each: a fresh folder stands for /content (under $COLAB_TIER_ROOT, a temporary folder by default, so a test
machine need not own /content), holding only the archive that `make dist` built; a kernel of Colab's package set
(build/venv-colab, constraints/colab.txt) starts there with a bare environment (no STREAMALLOC_MODE, no MPLBACKEND,
nothing from the Makefile, no programs built before: each builds its own in that folder), Colab's IPython
configuration (tests/colab/standin/ipython_config.py, in the kernel's profile) and the google.colab stand-in
(tests/colab/standin/google/colab) on its path; the notebook's cells run in order, and a cell may raise only where
it is tagged raises-exception (runner.cell_problem). Its first cell must unpack the archive and say so and nothing
else alarming (no warning, nothing on stderr: a false warning on every good archive got through once), and nothing
may be written outside that folder. Some also run by the Drive route: the course in a mounted Drive, its programs
built on the local disk. The tier's Python is Colab's 3.12 (tests/colab/colab_python.sh; a test says so when not).

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

import make_dist
from streamalloc import runner

ROOT = Path(__file__).resolve().parents[2]


NAME = make_dist.NAME
STANDIN = Path(__file__).resolve().parent / "standin"  # holds google/colab: on the kernels' path only
NOTEBOOKS = sorted(ROOT.glob("notebooks/*.ipynb")) + sorted(ROOT.glob("solutions/*.ipynb")) + \
    sorted(ROOT.glob("labs/*.ipynb"))
DRIVE_ROUTE = [ROOT / "notebooks/00_setup.ipynb", ROOT / "notebooks/02_api_fundamentals.ipynb",
               ROOT / "notebooks/03_pools.ipynb", ROOT / "labs/lab1_stream_ordered.ipynb"]
ALARMING = ("warning", "error", "traceback", "no recordings", "cannot", "failed")
CELL_TIMEOUT = 600

@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    return make_dist.build(tmp_path_factory.mktemp("dist"), allow_edits=True)  # a lab solved here too, as before


@pytest.fixture
def root():
    """A fresh folder for one notebook's /content (and its kernel's home), removed afterwards."""
    base = os.environ.get("COLAB_TIER_ROOT")
    if base:
        Path(base).mkdir(parents=True, exist_ok=True)
    where = Path(tempfile.mkdtemp(prefix="colab-", dir=base or None))
    (where / "content").mkdir()
    profile = where / "home" / ".ipython" / "profile_default"
    profile.mkdir(parents=True)
    shutil.copy(STANDIN / "ipython_config.py", profile / "ipython_config.py")  # Colab's IPython configuration
    yield where
    shutil.rmtree(where, ignore_errors=True)


def kernel_env(root: Path, drive: Path | None = None) -> dict:
    """What a Colab kernel's environment has that matters here, and nothing of the Makefile's or CI's: every program
    is built in the fresh folder, as on a new Colab runtime."""
    path = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"  # nvcc, as Colab's PATH has it
    env = {"PATH": path, "HOME": str(root / "home"), "LANG": "C.UTF-8",
           "PYTHONPATH": str(STANDIN), "COLAB_STANDIN_CONTENT": str(root / "content"),
           "PYDEVD_DISABLE_FILE_VALIDATION": "1"}
    if os.environ.get("JUPYTER_PATH"):
        env["JUPYTER_PATH"] = os.environ["JUPYTER_PATH"]
    if drive is not None:
        env["COLAB_STANDIN_DRIVE"] = str(drive)
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


def alarms(cell) -> list[str]:
    """What in a first cell's output would alarm a learner on a good archive: anything on stderr, and any line that
    warns or reports a failure (the set-up's own lines say where the course is and how to get a GPU)."""
    found = [f"stderr: {o.get('text', '')}" for o in cell.get("outputs", [])
             if o.get("output_type") == "stream" and o.get("name") == "stderr"]
    found += [f"error output: {o.get('ename')}" for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    found += [line for line in printed(cell).splitlines() if any(w in line.lower() for w in ALARMING)]
    return found


def test_the_tier_runs_colabs_python():
    """Colab runs Python 3.12; the tier says plainly when it runs on another version (tests/colab/colab_python.sh)."""
    import platform
    if sys.version_info[:2] != (3, 12):
        pytest.skip(f"the Colab tier runs on Python {platform.python_version()}, not on Colab's 3.12: no 3.12 could be "
                    "found or installed here (see tests/colab/colab_python.sh)")


def test_the_kernel_has_colabs_configuration(root):
    """The tier's kernel starts as Colab's does: its kernel class, google.colab loaded as an extension before the
    first cell, history in memory, matplotlib inline, output of file descriptors not captured."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import sys, google.colab as gc, matplotlib\n"
        "ip = get_ipython()\n"
        "print(type(ip.kernel).__module__ + '.' + type(ip.kernel).__name__)\n"
        "print(gc.loaded_as_extension, ip.history_manager.hist_file, ip.kernel.shell is ip)\n"
        "print(matplotlib.get_backend(), '%d.%d' % sys.version_info[:2])")])
    from nbclient import NotebookClient
    NotebookClient(nb, kernel_name="python3", timeout=120,
                   resources={"metadata": {"path": str(root / "content")}}).execute(env=kernel_env(root))
    kernel, state, backend = printed(nb.cells[0]).splitlines()
    assert kernel == "google.colab._kernel.Kernel"
    assert state == "True :memory: True"
    assert backend.split()[0] == "module://matplotlib_inline.backend_inline"
    assert backend.split()[1] == "%d.%d" % sys.version_info[:2], "the kernel runs the tier's Python"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_runs_like_colab_from_the_archive(path, archive, root):
    content = root / "content"
    shutil.copy(archive, content / f"{NAME}.zip")
    nb = run_like_colab(path, content, kernel_env(root))
    said = printed(first_code(nb))
    assert f"Using the course in {content / NAME} (version " in said and f"just unpacked from {NAME}.zip" in said, said
    assert "Runtime -> Change runtime type" in said, "this machine has no GPU: the set-up must say how to get one"
    assert alarms(first_code(nb)) == [], "the first cell alarms a learner on a good archive"
    assert problems(nb) == []
    assert list(content.glob("**/*.cu")), "no program was built in the fresh folder"
    assert sorted(p.name for p in content.iterdir()) == [NAME, f"{NAME}.zip"], "written outside the course's folder"
    assert sorted(p.name for p in root.iterdir()) == ["content", "home"]


@pytest.mark.parametrize("path", DRIVE_ROUTE, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_runs_like_colab_from_drive_and_builds_on_local_disk(path, archive, root):
    content, drive = root / "content", root / "drive"
    (drive / "MyDrive").mkdir(parents=True)
    with zipfile.ZipFile(archive) as z:
        z.extractall(drive / "MyDrive")
    mount = "from google.colab import drive\ndrive.mount('/content/drive')"
    nb = run_like_colab(path, content, kernel_env(root, drive), first_cells=[mount])
    assert "Mounted at /content/drive" in printed(nb.cells[0])
    said = printed(first_code(nb, skip=1))
    assert f"Using the course in {content / 'drive/MyDrive' / NAME} (in Drive" in said, said
    assert alarms(first_code(nb, skip=1)) == [], "the first cell alarms a learner on a good Drive copy"
    assert problems(nb, skip=1) == []
    assert not (drive / "MyDrive" / NAME / "build").exists(), "programs were built in Drive"
    assert (content / "streamalloc-build").is_dir(), "programs are built on the runtime's disk"
