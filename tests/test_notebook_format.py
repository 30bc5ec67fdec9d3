"""House rules for committed notebooks (issue 11 §5, issue 10): canonical JSON as nbformat writes it, one kernelspec
(python3), no outputs; labs say they are generated from solutions/; every raises-exception cell names its error."""
import json
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted(p for folder in ("notebooks", "solutions", "labs") for p in (ROOT / folder).glob("*.ipynb"))


def format_problems(path: Path) -> list[str]:
    text = path.read_text()
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
    mark = json.loads(path.read_text()).get("metadata", {}).get("streamalloc", {})
    origin = f"solutions/{path.name}"
    if mark.get("generated_from") != origin or "edit that instead" not in mark.get("note", ""):
        return [f"metadata.streamalloc does not say 'generated from {origin} ..., edit that instead' "
                "(run `make labs`)"]
    return []


def unnamed_expected_errors(path: Path) -> list[str]:
    nb = nbformat.read(str(path), as_version=4)
    return [f"cell {i} is tagged raises-exception but its metadata names no expected_exception"
            for i, cell in enumerate(nb.cells, 1)
            if "raises-exception" in cell.metadata.get("tags", []) and not cell.metadata.get("expected_exception")]


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
