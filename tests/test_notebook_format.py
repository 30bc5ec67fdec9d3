"""House rules for committed notebooks: canonical JSON as nbformat writes it, one kernelspec
(python3), no outputs; labs say they are generated from solutions/; every raises-exception cell names its error.

What is checked is what git tracks (the staged text, `git show :path`), not the working copy: a learner who runs
and saves a notebook keeps a working copy with outputs, which is theirs, and `make test` stays green. Outside a git
checkout (the archive from `make dist`) there is nothing committed to check, and these tests say so (skipped)."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent


def tracked(folders=("notebooks", "solutions", "labs")) -> list[Path] | None:
    """The notebooks git tracks in these folders, or None outside a git checkout."""
    done = subprocess.run(["git", "ls-files", "-z", "--", *(f"{f}/*.ipynb" for f in folders)], cwd=ROOT,
                          capture_output=True, text=True)
    if done.returncode != 0 or not (ROOT / ".git").exists():
        return None
    return sorted(ROOT / p for p in done.stdout.split("\0") if p)


def committed_text(path: Path) -> str:
    """The notebook's text as git tracks it (staged, else committed); the working copy if git does not track it."""
    rel = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else None
    if rel:
        done = subprocess.run(["git", "show", f":{rel}"], cwd=ROOT, capture_output=True, text=True)
        if done.returncode == 0:
            return done.stdout
    return path.read_text()


NOTEBOOKS = tracked() or []
needs_git = pytest.mark.skipif(tracked() is None, reason="not a git checkout: the committed notebooks' format is "
                                                          "checked where git tracks them")


def format_problems(path: Path) -> list[str]:
    text = committed_text(path)
    try:
        nb = nbformat.reads(text, as_version=4)
    except Exception as e:  # not a notebook at all
        return [f"not a notebook: {e}"]
    problems = []
    if text != nbformat.writes(nb) + "\n":
        problems.append("not canonical JSON (write it with nbformat: indent 1, sorted keys, one final newline)")
    spec = nb.metadata.get("kernelspec", {})
    if spec.get("name") != "python3":
        problems.append(f"kernelspec is {spec.get('name')!r}, not 'python3'")
    for i, cell in enumerate(nb.cells, 1):
        if cell.cell_type == "code" and (cell.get("outputs") or cell.get("execution_count") is not None):
            problems.append(f"cell {i} holds outputs or an execution count")
    return problems


def lab_marker_problems(path: Path) -> list[str]:
    mark = json.loads(committed_text(path)).get("metadata", {}).get("streamalloc", {})
    origin = f"solutions/{path.name}"
    if mark.get("generated_from") != origin or "edit that instead" not in mark.get("note", ""):
        return [f"metadata.streamalloc does not say 'generated from {origin} ..., edit that instead' "
                "(run `make labs`)"]
    return []


def unnamed_expected_errors(path: Path) -> list[str]:
    nb = nbformat.reads(committed_text(path), as_version=4)
    return [f"cell {i} is tagged raises-exception but its metadata names no expected_exception"
            for i, cell in enumerate(nb.cells, 1)
            if "raises-exception" in cell.metadata.get("tags", []) and not cell.metadata.get("expected_exception")]


@needs_git
def test_the_course_has_notebooks_to_check():
    assert {p.parent.name for p in NOTEBOOKS} == {"notebooks", "solutions", "labs"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_notebook_format(path):
    assert format_problems(path) == []


@pytest.mark.parametrize("path", [p for p in NOTEBOOKS if p.parent.name == "labs"], ids=lambda p: p.name)
def test_labs_say_they_are_generated(path):
    assert lab_marker_problems(path) == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_raises_exception_cell_names_its_error(path):
    assert unnamed_expected_errors(path) == []


def test_the_checks_find_what_they_look_for(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell("1 / 0", metadata={"tags": ["raises-exception"]})]
    good = tmp_path / "lab.ipynb"
    good.write_text(nbformat.writes(nb) + "\n")
    assert format_problems(good) == []
    assert unnamed_expected_errors(good) == ["cell 1 is tagged raises-exception but its metadata names no "
                                             "expected_exception"]
    assert lab_marker_problems(good) and "generated from solutions/lab.ipynb" in lab_marker_problems(good)[0]
    good.write_text(json.dumps(json.loads(good.read_text()), indent=2))
    assert "not canonical" in format_problems(good)[0]
    nb.metadata["kernelspec"]["name"] = "conda-env-x"
    nb.cells[0].outputs = [nbformat.v4.new_output("stream", text="x")]
    nb.cells[0].execution_count = 1
    good.write_text(nbformat.writes(nb) + "\n")
    assert format_problems(good) == ["kernelspec is 'conda-env-x', not 'python3'",
                                     "cell 1 holds outputs or an execution count"]


def test_a_notebook_saved_with_outputs_is_the_learners(tmp_path, monkeypatch):
    """A learner ran and saved a notebook (outputs, another indent): what git tracks is checked, and still passes;
    the same text staged for a commit fails."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell("1 + 1")]
    path = tmp_path / "notebooks" / "x.ipynb"
    path.parent.mkdir()
    path.write_text(nbformat.writes(nb) + "\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run([*git, "add", "notebooks"], cwd=tmp_path, check=True)
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    nb.cells[0].outputs, nb.cells[0].execution_count = [nbformat.v4.new_output("execute_result", {"text/plain": "2"})], 1
    path.write_text(json.dumps(nb, indent=2))
    assert tracked() == [path] and format_problems(path) == []
    subprocess.run([*git, "add", "notebooks"], cwd=tmp_path, check=True)
    assert "cell 1 holds outputs or an execution count" in format_problems(path)


def test_jupyterlab_checkpoints_are_not_collected(tmp_path):
    """JupyterLab saves a copy of every opened notebook in .ipynb_checkpoints/: pytest.ini must not collect it."""
    shutil.copy(ROOT / "pytest.ini", tmp_path)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1")])
    for path in (tmp_path / "notebooks/x.ipynb", tmp_path / "notebooks/.ipynb_checkpoints/x-checkpoint.ipynb"):
        path.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, str(path))
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:xdist", "notebooks"],
                          cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0 and "notebooks/x.ipynb" in done.stdout, done.stdout + done.stderr
    assert "checkpoint" not in done.stdout, done.stdout
