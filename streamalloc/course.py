"""The course as files: its folders and notebooks, what a notebook's `%%writefile {lesson.build}/X` cells write, the
build folders, and writing a file whole or not at all.

    course.written_files(course.REPO / "notebooks" / "02_api_fundamentals.ipynb")  # [(cell, "x.cu", text), ...]
    course.build_folder("lab1_stream_ordered")  # where that notebook's %%writefile cells write, in this process

One reader of the %%writefile cells serves the lesson (it builds ahead what they write), the lab checks (the
solution's CUDA), the tools and the tests, so that all of them see the text IPython writes. It imports only errors.py
of the package: every other module may import it.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
import tempfile
from pathlib import Path

from .errors import CourseError

REPO = Path(__file__).resolve().parent.parent
RECORDINGS = REPO / "recordings"  # the reference sets (replay.py reads and writes them)


def slug(gpu_name: str) -> str:
    """A GPU's name as a folder name: "NVIDIA H100 80GB HBM3" -> "nvidia-h100-80gb-hbm3"."""
    return re.sub(r"[^a-z0-9]+", "-", gpu_name.lower()).strip("-")


# -- the notebooks -------------------------------------------------------------------------------------------------
FOLDERS = ("notebooks", "solutions", "labs")  # the lessons, the labs solved, the labs as the learner gets them


class NoNotebooks(CourseError):
    """The paths given to the runner name no notebook."""


def own_notebooks(repo: Path = REPO) -> list[Path]:
    """The course's notebooks: those in its three folders (not below them), folder by folder."""
    return [nb for folder in FOLDERS for nb in sorted((repo / folder).glob("*.ipynb"))]


def notebooks(paths=()) -> list[Path]:
    """The notebooks under paths (files, or every .ipynb in a folder and below it), else the course's own."""
    if not paths:
        return own_notebooks()
    found = []
    for p in map(Path, paths):
        if p.is_dir():
            found += _in_folder(p)
        elif p.is_file() and p.suffix == ".ipynb":
            found.append(p)
        elif p.exists():
            raise NoNotebooks(f"{p} is not a notebook (.ipynb) or a folder of notebooks")
        else:
            raise NoNotebooks(f"{p} does not exist")
    if not found:
        raise NoNotebooks(f"no notebook (.ipynb) in {', '.join(map(str, paths))}")
    return found


def _in_folder(folder: Path) -> list[Path]:
    """Every notebook in a folder and the folders below it, except hidden ones (.ipynb_checkpoints) and the
    course's build/ (executed copies)."""
    found = []
    for nb in sorted(folder.rglob("*.ipynb")):
        parts = nb.relative_to(folder).parts[:-1]
        if any(p.startswith(".") for p in parts) or nb.resolve().is_relative_to(REPO / "build"):
            continue
        found.append(nb)
    return found


def notebook_file(name: str) -> Path | None:
    """The saved notebook of a lesson: beside the kernel (Jupyter starts it in the notebook's folder), else
    the course's own copy (on Colab the open notebook is not a file here); None where that is not one file
    (a lab and its solution share a name: which of them is open cannot be told)."""
    if (Path.cwd() / f"{name}.ipynb").is_file():
        return Path.cwd() / f"{name}.ipynb"
    found = [p for p in (REPO / folder / f"{name}.ipynb" for folder in ("notebooks", "labs", "solutions")) if p.is_file()]
    return found[0] if len(found) == 1 else None


# -- what the %%writefile cells write ------------------------------------------------------------------------------
WRITEFILE = re.compile(r"%%writefile\s+\{lesson\.build\}/(?P<file>[\w.-]+)\s*")


def writefile_cells(cells) -> list[tuple[int, str, str]]:
    """(cell index, file, text) of each `%%writefile {lesson.build}/file` cell among `cells` (a notebook's JSON
    cells, or nbformat's), the text as %%writefile writes it (a cell's text ends with a newline)."""
    found = []
    for i, cell in enumerate(cells):
        text = "".join(cell.get("source", [])) if cell.get("cell_type") == "code" else ""
        first, _, body = text.partition("\n")
        m = WRITEFILE.fullmatch(first)
        if m:
            found.append((i, m["file"], body if body.endswith("\n") else body + "\n"))
    return found


def written_files(notebook: Path) -> list[tuple[int, str, str]]:
    """(cell index, file, text) of each `%%writefile {lesson.build}/file` cell of a saved notebook, the text as
    %%writefile writes it; [] where the notebook cannot be read."""
    try:
        cells = json.loads(Path(notebook).read_text()).get("cells", [])
    except (OSError, ValueError):
        return []
    return writefile_cells(cells)


START = re.compile(r"""\.start\(\s*["'](?P<lesson>[^"']+)["']""")  # sa.start("name")


def lesson_of(notebook: Path) -> str | None:
    """The lesson a saved notebook starts (its first `sa.start("...")` in a code cell), or None."""
    try:
        cells = json.loads(Path(notebook).read_text()).get("cells", [])
    except (OSError, ValueError):
        return None
    return next((m["lesson"] for c in cells if c.get("cell_type") == "code"
                 for m in [START.search("".join(c.get("source", [])))] if m), None)


def written_programs(notebook: Path) -> list[tuple[str, str]]:
    """(file, text) of each distinct CUDA program a notebook writes, in order."""
    return list(dict.fromkeys((f, text) for _, f, text in written_files(notebook) if f.endswith(".cu")))


# -- the build folders ---------------------------------------------------------------------------------------------
def build_root() -> Path:
    """Where programs are built: $STREAMALLOC_BUILD (on Colab, the runtime's disk when the course is in Drive:
    streamalloc/colab.py sets it), else the course's build/."""
    return Path(os.environ.get("STREAMALLOC_BUILD") or REPO / "build")


_RUN = f"run-{os.getpid()}-{secrets.token_hex(3)}"  # this process: its own sources, never another run's


def build_folder(name: str) -> Path:
    """Where a lesson's %%writefile cells write: build/cuda/<name>-<key>/run-<pid>-<token>/. The key is a short hash
    of the open notebook's path (Jupyter's JPY_SESSION_NAME, else the notebook of that name in the kernel's
    folder, else the folder and the name), so a lab and its solution, or two copies of a lab, never share a folder;
    the run folder is this process's, so two runs at once never read each other's sources. Their built programs go
    to programs_folder(), named by a hash of their content. Run folders of processes that have ended are removed."""
    here = Path.cwd().resolve()
    session = os.environ.get("JPY_SESSION_NAME", "")
    notebook = here / session if session.endswith(".ipynb") else here / f"{name}.ipynb"
    key = hashlib.sha256(f"{notebook}\0{name}".encode()).hexdigest()[:10]
    folder = build_root() / "cuda" / f"{name}-{key}"
    for old in folder.glob("run-*"):
        pid = old.name.split("-")[1]
        if old.name != _RUN and pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(old, ignore_errors=True)
    return folder / _RUN


def programs_folder() -> Path:
    """Where built programs go: $STREAMALLOC_PROGRAMS, else build/cuda/bin. One folder for every notebook, lab and
    run, because a program's file name holds the hash of its text, headers, flags and nvcc (cuda.build): the same
    program is compiled once, whichever notebook (a lab and its solution, the tests, the Colab tier) builds it."""
    return Path(os.environ.get("STREAMALLOC_PROGRAMS") or build_root() / "cuda" / "bin")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: it is there
        return True
    return True


# -- writing -------------------------------------------------------------------------------------------------------
def write_atomically(path: Path, text: str) -> None:
    """Write a file whole or not at all: a temporary file beside it, then os.replace."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
