"""streamalloc/course.py: the one reader of what a notebook's %%writefile cells write, and writing a file whole or
not at all. (Where a lesson's cells write and which notebook is open: tests/test_lesson.py.)"""
import json
import re
from pathlib import Path

import pytest

from streamalloc import course, replay

ROOT = Path(__file__).resolve().parent.parent
CELLS = [
    {"cell_type": "markdown", "source": "%%writefile {lesson.build}/not_code.cu\nint x;"},
    {"cell_type": "code", "source": ["%%writefile {lesson.build}/a.cu\n", "int main() {}"]},  # saved JSON: a list
    {"cell_type": "code", "source": "%%writefile {lesson.build}/b.py\nprint(1)\n"},  # ends with a newline already
    {"cell_type": "code", "source": "%%writefile /tmp/elsewhere.cu\nint y;"},  # not the lesson's build folder
    {"cell_type": "code", "source": "lesson.run('a.cu')"},
    {"cell_type": "code", "source": "%%writefile {lesson.build}/empty.cu"},
]


def test_the_writefile_cells_are_read_as_ipython_writes_them():
    assert course.writefile_cells(CELLS) == [(1, "a.cu", "int main() {}\n"), (2, "b.py", "print(1)\n"),
                                             (5, "empty.cu", "\n")]


def test_a_saved_notebook_reads_as_its_cells_and_nbformats_cells_read_the_same(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    saved = [{**c, "id": f"c{i}", "metadata": {}, **({"outputs": [], "execution_count": None}
                                                     if c["cell_type"] == "code" else {})} for i, c in enumerate(CELLS)]
    path = tmp_path / "n.ipynb"
    path.write_text(json.dumps({"cells": saved, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    assert course.written_files(path) == course.writefile_cells(CELLS)
    assert course.writefile_cells(nbformat.read(str(path), as_version=4).cells) == course.writefile_cells(CELLS)
    assert course.written_programs(path) == [("a.cu", "int main() {}\n"), ("empty.cu", "\n")]


def test_a_notebook_that_cannot_be_read_writes_nothing(tmp_path):
    (tmp_path / "broken.ipynb").write_text("{ not json")
    assert course.written_files(tmp_path / "broken.ipynb") == []
    assert course.written_files(tmp_path / "missing.ipynb") == []


def test_every_course_notebook_writes_its_programs_into_the_lessons_build_folder():
    """Each %%writefile cell of the course writes into {lesson.build}: none is missed by the one reader."""
    for folder in course.FOLDERS:
        for nb in sorted((ROOT / folder).glob("*.ipynb")):
            cells = json.loads(nb.read_text())["cells"]
            writing = [i for i, c in enumerate(cells) if c["cell_type"] == "code"
                       and "".join(c["source"]).startswith("%%writefile")]
            assert [i for i, _, _ in course.written_files(nb)] == writing, nb.name


def test_a_file_is_written_whole_or_not_at_all(tmp_path, monkeypatch):
    target = tmp_path / "new" / "summary.md"
    course.write_atomically(target, "first\n")  # its folder is made
    assert target.read_text() == "first\n"

    def interrupted(src, dst):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(course.os, "replace", interrupted)
    with pytest.raises(OSError, match="No space"):
        course.write_atomically(target, "second\n")
    assert target.read_text() == "first\n" and [p.name for p in target.parent.iterdir()] == ["summary.md"]


def test_the_recorder_writes_with_the_same_function():
    assert replay.write_atomically is course.write_atomically


# Only these may match %%writefile lines with a pattern of their own: what the cell writes is read in course.py alone.
OWN_PATTERN = {
    "streamalloc/course.py": "the reader",
    "streamalloc/site.py": "highlights a cell that writes C++ as CUDA, wherever it writes it (the page, not the file)",
}


def test_no_other_module_parses_writefile_cells():
    found = []
    for path in sorted([*(ROOT / "streamalloc").rglob("*.py"), *(ROOT / "tools").glob("*.py"),
                        *(ROOT / "tests").rglob("*.py")]):
        rel = str(path.relative_to(ROOT))
        if rel in OWN_PATTERN or rel == "tests/test_course.py":
            continue
        if re.search(r"""re\.\w+\(\s*r?["']\^?%%writefile""", path.read_text()):
            found.append(rel)
    assert found == [], f"these read %%writefile cells with a pattern of their own; use streamalloc.course: {found}"
