"""A lab as its learner leaves it: solved in place, the runner says "solved", not "failed ... raised nothing";
the unsolved lab as committed still fails if its check raises nothing; LabIncomplete's red line lists nothing twice."""
import json
import re
from pathlib import Path

from labcheck import unsolved
from streamalloc import checks, runner

ROOT = Path(__file__).resolve().parent.parent
LAB = ROOT / "labs/lab1_stream_ordered.ipynb"


def executed(path: Path, to: Path) -> Path:
    """An executed copy of the notebook in which every code cell ran and raised nothing."""
    nb = json.loads(path.read_text())
    for i, cell in enumerate(c for c in nb["cells"] if c["cell_type"] == "code"):
        cell["execution_count"] = i + 1
    to.write_text(json.dumps(nb))
    return to


def test_a_lab_solved_in_place_is_solved_and_the_committed_lab_still_must_fail(tmp_path):
    committed = tmp_path / "lab.ipynb"  # the lab as the course wrote it, even where its learner solved it in place
    committed.write_text(unsolved(LAB))
    assert not runner.edited_lab(Path(committed))
    out = executed(Path(committed), tmp_path / "out.ipynb")
    assert "raised nothing" in runner.notebook_problem(out, solved_ok=runner.edited_lab(Path(committed)))

    nb = json.loads(committed.read_text())
    code = next(c for c in nb["cells"] if c["cell_type"] == "code" and "TODO" in "".join(c["source"]))
    code["source"] = ["// the learner's answer\n"] + code["source"]
    solved = tmp_path / "solved.ipynb"
    solved.write_text(json.dumps(nb))
    assert runner.edited_lab(solved)
    assert runner.notebook_problem(executed(solved, tmp_path / "out2.ipynb"), solved_ok=True) == ""


def test_lab_incomplete_lists_its_items_once():
    e = checks.LabIncomplete("2 things still wrong: a is not called; b is too slow", ["a is not called", "b is too slow"])
    first = re.sub(r"\x1b\[[0-9;]*m", "", e._render_traceback_()[0])  # red, where IPython colours
    assert first == "LabIncomplete: 2 things still wrong, listed above; the first: a is not called"
    assert "b is too slow" not in first and "b is too slow" in str(e), "the message keeps them all for the tests"
