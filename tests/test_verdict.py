"""The verdict as data (streamalloc.verdict): what a check shows, and what the runner and the tests read back."""
import contextlib
import io

import nbformat
import pytest

from streamalloc import verdict


def output(v: verdict.Verdict):
    """The display output a notebook stores for a shown verdict."""
    return nbformat.v4.new_output("display_data", data=v._repr_mimebundle_())


def test_a_verdict_is_one_of_the_words_and_shows_its_prose_beside_its_data():
    v = verdict.Verdict(verdict.SOLVED, "", "\nAll checks passed.")
    assert v._repr_mimebundle_() == {verdict.MIME: {"word": "solved", "finding": ""}, "text/plain": "\nAll checks passed."}
    with pytest.raises(ValueError, match="'passed' is not a verdict"):
        verdict.Verdict("passed")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):  # outside a notebook: the prose alone
        verdict.show(v)
    assert printed.getvalue() == "\nAll checks passed.\n"


def test_only_the_data_is_read_never_a_sentence():
    said = nbformat.v4.new_output("stream", name="stdout", text="All checks passed.\n")
    forged = nbformat.v4.new_output("display_data", data={"text/plain": "All checks passed.",
                                                           verdict.MIME: {"word": "all checks passed"}})
    assert verdict.read([said, forged]) is None
    shown = verdict.Verdict(verdict.UNVERIFIED, "not verified without a GPU: the speed.", "Passed what could ...")
    assert verdict.read([said, output(shown), said]) == shown
    later = verdict.Verdict(verdict.IN_PROGRESS, "x is not freed")
    assert verdict.read([output(shown), output(later)]).word == verdict.IN_PROGRESS  # the last one
    note = verdict.Verdict(verdict.NOT_MEASURED, "needs 2 GPUs")
    assert verdict.read([output(note)]) is None and verdict.read([output(note)], verdict.NOTE_WORDS) == note


def notebook(path, cells):
    nb = nbformat.v4.new_notebook()
    for n, (outputs, meta) in enumerate(cells, 1):
        cell = nbformat.v4.new_code_cell("x", execution_count=n, metadata=meta)
        cell.outputs = outputs
        nb.cells.append(cell)
    nbformat.write(nb, str(path))
    return path


def test_a_lab_and_a_lesson_are_read_from_their_outputs(tmp_path):
    check = {"tags": ["check"]}
    solved = verdict.Verdict(verdict.SOLVED, "", "Yes.")
    assert verdict.of_lab(notebook(tmp_path / "a.ipynb", [([], {}), ([output(solved)], check)])) == ("solved", "")
    assert verdict.of_lab(notebook(tmp_path / "b.ipynb", [([output(solved)], {})])) == ("", "")  # not the check's
    raised = nbformat.v4.new_output("error", ename="ZeroDivisionError", evalue="x", traceback=[])
    assert verdict.of_lab(notebook(tmp_path / "c.ipynb", [([raised], check)])) == (
        "not verified", "the check gave no verdict (it raised ZeroDivisionError)")
    replayed = verdict.Verdict(verdict.REPLAYED, "needs 2 GPUs, this machine has 1")
    nb = notebook(tmp_path / "d.ipynb", [([output(replayed)], {}), ([], {})])
    assert verdict.note(nb) == replayed and verdict.note(tmp_path / "a.ipynb") is None


def test_a_summarys_rows_by_word():
    rows = [{"notebook": "labs/a.ipynb", "lab": "solved"}, {"notebook": "labs/b.ipynb", "lab": "not verified"},
            {"notebook": "labs/c.ipynb", "lab": "solved"}, {"notebook": "n.ipynb"}, {"notebook": "x", "lab": "passed"},
            "not a row"]
    assert verdict.of_rows(rows) == {"solved": ["labs/a.ipynb", "labs/c.ipynb"], "not verified": ["labs/b.ipynb"]}


def test_a_long_finding_is_cut_after_a_whole_sentence_and_says_so():
    short = "order: every free after the last use."
    assert verdict.clip(short) == short
    long = "trim (record): the pool still reserved 4 MiB. " + "It kept what the loop had. " * 20
    cut = verdict.clip(long)
    assert len(cut) <= 302 and cut.endswith(". …") and cut[:-2] in long, cut
    words = "x" * 200 + " " + "y" * 200
    assert verdict.clip(words) == "x" * 200 + " …"
