"""tools/make_labs.py: refuses unknown flags, marks each lab as generated, and never overwrites a lab edited by hand
without --force (an author's flag: what a learner reads never advises it)."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

import make_labs

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def course(tmp_path, monkeypatch):
    """A copy of solutions/ in a scratch course, and make_labs pointed at it."""
    shutil.copytree(ROOT / "solutions", tmp_path / "solutions")
    monkeypatch.setattr(make_labs, "ROOT", tmp_path)
    return tmp_path


def test_unknown_flags_are_refused():
    for tool in ("make_labs.py",):
        done = subprocess.run([sys.executable, f"tools/{tool}", "--chek"], cwd=ROOT, capture_output=True, text=True)
        assert done.returncode == 2 and "unrecognized arguments: --chek" in done.stderr, (tool, done.stderr)


def test_labs_are_marked_and_written_only_when_they_change(course, capsys):
    assert make_labs.main([]) == 0
    labs = sorted((course / "labs").glob("*.ipynb"))
    assert [p.name for p in labs] == sorted(p.name for p in (course / "solutions").glob("*.ipynb"))
    for lab in labs:
        mark = json.loads(lab.read_text())["metadata"]["streamalloc"]
        assert mark["generated_from"] == f"solutions/{lab.name}"
        assert mark["note"] == f"generated from solutions/{lab.name} by tools/make_labs.py: edit that instead"
        nb = nbformat.read(str(lab), as_version=4)
        assert not make_labs.hand_edited(lab, nbformat.writes(nb) + "\n")
    assert make_labs.main(["--check"]) == 0
    capsys.readouterr()
    assert make_labs.main([]) == 0 and "wrote 0 of" in capsys.readouterr().out


def test_a_lab_edited_by_hand_is_not_overwritten_without_force(course, capsys):
    make_labs.main([])
    lab = course / "labs" / "lab1_stream_ordered.ipynb"
    nb = nbformat.read(str(lab), as_version=4)
    nb.cells[0].source += "\n\nMy notes."  # a learner's (or an author's) edit
    nbformat.write(nb, str(lab))
    edited = lab.read_text()
    sol = course / "solutions" / "lab1_stream_ordered.ipynb"
    snb = nbformat.read(str(sol), as_version=4)
    snb.cells[0].source += "\n\nA new sentence in the solution."
    nbformat.write(snb, str(sol))
    assert make_labs.main([]) == 1
    said = capsys.readouterr().err
    assert "lab1_stream_ordered.ipynb" in said and lab.read_text() == edited
    assert "your own edits, which are kept" in said and "--force" not in said, "never advise erasing a learner's work"
    assert make_labs.main(["--check"]) == 1
    assert make_labs.main(["--force"]) == 0
    assert "A new sentence" in lab.read_text() and "My notes" not in lab.read_text()
    assert make_labs.main(["--check"]) == 0


def test_a_lab_from_before_the_marker_is_replaced_when_only_the_marker_differs(course):
    make_labs.main([])
    lab = course / "labs" / "lab2_tune_pool.ipynb"
    nb = nbformat.read(str(lab), as_version=4)
    del nb.metadata["streamalloc"]
    nbformat.write(nb, str(lab))
    assert make_labs.main([]) == 0 and "streamalloc" in json.loads(lab.read_text())["metadata"]
    nb.cells[1].source += "\n# mine"  # an edit, in a lab without the marker
    nbformat.write(nb, str(lab))
    assert make_labs.main([]) == 1 and "# mine" in lab.read_text()
