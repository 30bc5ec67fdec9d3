"""The set-up lines on a faked Colab (a google.colab module, a temporary /content), for every way the course
can get there: already there, an uploaded archive, a Drive folder, a clone (failing and working), nothing."""
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import make_dist  # noqa: E402
import make_links  # noqa: E402

NAME = make_links.NAME


def notebook_setup() -> str:
    """The set-up lines as they stand in notebook 00 (what a learner runs), up to the helper package's import."""
    cell = next(c for c in json.loads((ROOT / "notebooks/00_setup.ipynb").read_text())["cells"] if c["cell_type"] == "code")
    source = "".join(cell["source"])
    return source[:source.index(make_links.LIB)]


def finder(colab: bool, monkeypatch, repo="unchanged"):
    """The notebook's course_folder function, on (a faked) Colab or not."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    if colab:
        monkeypatch.setitem(sys.modules, "google.colab", type(sys)("google.colab"))
    else:
        monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    setup = notebook_setup()
    namespace = {}
    exec(setup[:setup.rindex("sys.path.insert")], namespace)  # everything but the call
    f = namespace["course_folder"]
    if repo != "unchanged":
        f.__defaults__ = (repo, *f.__defaults__[1:])
    return f


@pytest.fixture
def content(tmp_path, monkeypatch):
    """An empty /content, and a working directory there, as on Colab."""
    c = tmp_path / "content"
    c.mkdir()
    monkeypatch.chdir(c)
    return c


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    return make_dist.build(tmp_path_factory.mktemp("dist"))


def fake_git(tmp_path, monkeypatch, script):
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "git").write_text("#!/bin/sh\n" + script)
    (bin_dir / "git").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")


def test_the_notebooks_carry_the_generated_lines():
    assert notebook_setup() == make_links.setup_lines()
    assert make_links.setup_lines().count("\n") <= 25, "the set-up cell stays short"


def test_in_a_checkout_it_finds_the_course_above_the_notebook(monkeypatch):
    monkeypatch.chdir(ROOT / "notebooks")
    assert finder(False, monkeypatch)() == ROOT


def test_the_whole_cell_puts_the_course_on_sys_path(monkeypatch):
    monkeypatch.chdir(ROOT / "labs")
    monkeypatch.setattr(sys, "path", list(sys.path))
    exec(notebook_setup(), {})
    assert sys.path[0] == str(ROOT)


def test_outside_a_copy_off_colab_it_says_so(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit, match="open this notebook from a copy of the course"):
        finder(False, monkeypatch)(content=tmp_path / "content")


def test_colab_with_an_uploaded_archive(content, archive, monkeypatch):
    (content / f"{NAME} (1).zip").write_bytes(archive.read_bytes())  # a browser's renamed second download
    found = finder(True, monkeypatch, repo=None)(content=content)
    assert found == content / NAME and (found / "streamalloc/__init__.py").is_file()
    assert (found / "recordings").is_dir() and (found / "notebooks/00_setup.ipynb").is_file()
    assert finder(True, monkeypatch, repo=None)(content=content) == content / NAME, "run again: already there"


def test_colab_with_an_archive_that_is_not_the_course(content, monkeypatch):
    with zipfile.ZipFile(content / f"{NAME}.zip", "w") as z:
        z.writestr("something/else.txt", "x")
    with pytest.raises(SystemExit, match="does not hold the course's folder"):
        finder(True, monkeypatch, repo=None)(content=content)


def test_colab_with_the_course_in_drive(content, monkeypatch):
    (content / "drive/MyDrive" / NAME / "streamalloc").mkdir(parents=True)
    assert finder(True, monkeypatch, repo=None)(content=content) == content / "drive/MyDrive" / NAME


def test_colab_clone_failing_shows_gits_message(content, tmp_path, monkeypatch):
    fake_git(tmp_path, monkeypatch, "echo \"fatal: repository 'https://github.com/$5/' not found\" >&2; exit 128\n")
    with pytest.raises(SystemExit) as e:
        finder(True, monkeypatch, repo="someone/unpublished")(content=content)
    assert "git clone https://github.com/someone/unpublished` failed" in str(e.value)
    assert "fatal: repository" in str(e.value) and "not found" in str(e.value)


def test_colab_clone_working(content, tmp_path, monkeypatch):
    fake_git(tmp_path, monkeypatch, 'for a; do last=$a; done; mkdir -p "$last/streamalloc"\n')
    assert finder(True, monkeypatch, repo="someone/published")(content=content) == content / NAME


def test_colab_with_nothing_says_exactly_what_to_do(content, monkeypatch):
    with pytest.raises(SystemExit) as e:
        finder(True, monkeypatch, repo=None)(content=content)
    message = str(e.value)
    assert f"Upload {NAME}.zip" in message and "make dist" in message and "Google Drive" in message
    assert "\n" not in message, "one short message"


def test_no_link_names_a_repository_the_configuration_does_not():
    urls = []
    for f in [ROOT / "README.md", *ROOT.glob("notebooks/*.ipynb"), *ROOT.glob("solutions/*.ipynb"), *ROOT.glob("labs/*.ipynb")]:
        urls += re.findall(r"(?:colab\.research\.google\.com/github/|github\.com/)[\w.{}-]+/[\w.{}-]+", f.read_text())
    if make_links.COURSE_REPO is None:
        assert urls == [], "no repository is configured, so nothing may link to one"
    else:
        assert all(make_links.COURSE_REPO in u for u in urls), urls


def test_a_configured_repository_gives_badges_and_a_clone():
    assert "colab-badge.svg" not in make_links.course_map(None)
    published = make_links.course_map("someone/published")
    assert published.count("colab.research.google.com/github/someone/published/blob/main/") == \
        len(list(ROOT.glob("notebooks/*.ipynb"))) + len(list(ROOT.glob("labs/*.ipynb")))
    assert "repo='someone/published'" in make_links.setup_lines("someone/published")


def test_hand_edited_set_up_lines_are_kept_without_force():
    text = (ROOT / "notebooks/00_setup.ipynb").read_text()
    edited = text.replace("sys.path.insert(0, str(course_folder()))", "sys.path.insert(0, '/my/copy')")
    assert edited != text
    with pytest.raises(make_links.HandEdited, match="--force"):
        make_links.with_setup(edited, "00")
    assert "course_folder()" in make_links.with_setup(edited, "00", force=True)
    readme = (ROOT / "README.md").read_text()
    with pytest.raises(make_links.HandEdited):
        make_links.with_map(readme.replace("| lecture |", "| lesson |", 1))
    assert make_links.with_map(readme) == readme


def test_make_dist_unpacks_and_runs_a_test(tmp_path, archive):
    with zipfile.ZipFile(archive) as z:
        names = z.namelist()
        z.extractall(tmp_path)
    assert all(n.startswith(f"{NAME}/") for n in names)
    for needed in ("Makefile", "requirements.txt", "README.md", "streamalloc/__init__.py", "tools/make_links.py",
                   "notebooks/00_setup.ipynb", "labs/lab1_stream_ordered.ipynb", "solutions/lab1_stream_ordered.ipynb"):
        assert f"{NAME}/{needed}" in names, needed
    assert any(n.startswith(f"{NAME}/recordings/") and n.endswith(".json") for n in names)
    assert not any("/build/" in n or "__pycache__" in n for n in names)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:nbval", "-o", "addopts=-p no:cacheprovider",
                           "tests/test_replay.py"], cwd=tmp_path / NAME, capture_output=True, text=True,
                          env={**os.environ, "STREAMALLOC_MODE": "replay"}, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert " passed" in done.stdout
