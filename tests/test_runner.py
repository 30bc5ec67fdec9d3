"""The runner: runs notebooks headless and judges each, expected errors included."""
import json

import nbformat

from streamalloc import runner


def notebook(path, cells):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    for source, tags in cells:
        cell = nbformat.v4.new_code_cell(source)
        if tags:
            cell.metadata["tags"] = tags
        nb.cells.append(cell)
    nbformat.write(nb, str(path))
    return path


def test_runner_passes_expected_errors_and_fails_the_rest(tmp_path):
    good = notebook(tmp_path / "good.ipynb", [("x = 1", []), ("raise ValueError('on purpose')", ["raises-exception"]),
                                              ("assert x == 1", [])])
    bad = notebook(tmp_path / "bad.ipynb", [("1 / 0", [])])
    quiet = notebook(tmp_path / "quiet.ipynb", [("x = 1", ["raises-exception"])])
    rows = runner.run([good, bad, quiet], out_dir=tmp_path / "out" / "executed", progress=False)
    result = {r["notebook"].split("/")[-1]: r for r in rows}
    assert result["good.ipynb"]["result"] == "passed"
    assert result["bad.ipynb"]["result"] == "failed" and "ZeroDivisionError" in result["bad.ipynb"]["error"]
    assert "raised nothing" in result["quiet.ipynb"]["error"]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert [r["result"] for r in summary] == ["passed", "failed", "failed"]
