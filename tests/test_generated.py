"""Generated files are what their scripts write: labs/ from solutions/, README.md's course map."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_labs_are_generated_from_solutions():
    done = subprocess.run([sys.executable, "tools/make_labs.py", "--check"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_readme_course_map_is_generated():
    done = subprocess.run([sys.executable, "tools/make_links.py", "--check"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_lab_stubs_replace_solution_regions():
    sys.path.insert(0, str(ROOT / "tools"))
    import make_labs

    src = ("int a;\n    // BEGIN SOLUTION (stub: // TODO: allocate)\n    CHECK(cudaMallocAsync(&p, n, s));\n"
           "    // END SOLUTION\nx = 1\n# BEGIN SOLUTION\ny = 2\n# END SOLUTION\n")
    assert make_labs.strip_code(src, "t") == "int a;\n    // TODO: allocate\nx = 1\n# TODO: write this part"
    with pytest.raises(ValueError, match="never closed"):
        make_labs.strip_code("# BEGIN SOLUTION\nx = 1\n", "t")



def _make_links():
    sys.path.insert(0, str(ROOT / "tools"))
    import make_links
    return make_links


def _run_setup(cwd, monkeypatch, colab=False):
    """Run the set-up lines that open every notebook in `cwd`; return what they put first on sys.path."""
    monkeypatch.chdir(cwd)
    monkeypatch.setattr(sys, "path", list(sys.path))
    if colab:
        monkeypatch.setitem(sys.modules, "google.colab", object())
    exec(_make_links().SETUP, {})
    return sys.path[0]


def test_setup_lines_find_the_package_beside_the_notebook(monkeypatch):
    assert _run_setup(ROOT / "notebooks", monkeypatch) == str(ROOT)


def test_setup_lines_outside_the_course_say_what_to_do(tmp_path, monkeypatch):
    with pytest.raises(ModuleNotFoundError, match="open this notebook from a copy of the course"):
        _run_setup(tmp_path, monkeypatch)


def test_setup_lines_on_colab_clone_the_course(tmp_path, monkeypatch):
    links = _make_links()
    if Path(links.COLAB_DIR).exists():
        pytest.skip(f"{links.COLAB_DIR} exists here, so the set-up lines would not clone")
    calls = []
    monkeypatch.setattr(subprocess, "run", lambda args, **kw: calls.append(args))
    assert _run_setup(tmp_path, monkeypatch, colab=True) == links.COLAB_DIR
    assert len(calls) == 1 and calls[0][:2] == ["git", "clone"]
    assert calls[0][-2:] == [f"https://github.com/{links.COURSE_REPO}", links.COLAB_DIR]
