"""The first cell on a faked Colab (a google.colab module, a temporary folder as /content, the kernel's folder),
for every way the course can get there or fail to: an uploaded archive (renamed, newer than a copy, re-run,
without its top folder, with entries outside it), a broken one (empty, cut short, a web page, corrupt, not the
course, a newer broken one before an older good one), a copy without recordings, Drive, a clone, nothing.
Each failure must be one sentence, no traceback; nothing may be written outside the course's folder."""
import contextlib
import io
import json
import os
import re
import subprocess
import sys
import time
import warnings
import zipfile
from pathlib import Path

import pytest

import make_dist
import make_links
from streamalloc import colab

ROOT = Path(__file__).resolve().parent.parent


NAME = make_links.NAME


def notebook_setup(nb="notebooks/00_setup.ipynb") -> str:
    """The set-up lines as they stand in a notebook (what a learner runs), up to the helper package's import."""
    cell = next(c for c in json.loads((ROOT / nb).read_text())["cells"] if c["cell_type"] == "code")
    source = "".join(cell["source"])
    return source[:source.index(make_links.LIB)]


def run_cell(monkeypatch, colab_here=True, repo="unchanged"):
    """Run the first cell's set-up lines as a kernel would (in the current folder); return the folder it put on
    sys.path."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    if colab_here:
        monkeypatch.setitem(sys.modules, "google.colab", type(sys)("google.colab"))
    else:
        monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    setup = notebook_setup()
    if repo != "unchanged":
        setup = setup.replace('colab["find"](None)', f'colab["find"]({repo!r})')
    exec(setup, {})
    return Path(sys.path[0])


@pytest.fixture
def content(tmp_path, monkeypatch):
    """An empty /content, the kernel's folder, as on Colab; no environment variable of the course's set."""
    c = tmp_path / "content"
    c.mkdir()
    monkeypatch.chdir(c)
    monkeypatch.delenv("STREAMALLOC_BUILD", raising=False)
    return c


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    return make_dist.build(tmp_path_factory.mktemp("dist"), allow_edits=True)  # a lab solved here too, as before


def variant(archive: Path, to: Path, version="v2", prefix=f"{NAME}/", drop=(), extra=None, mtime=None, **mark) -> Path:
    """The archive rewritten: another version in its marker (and `mark`'s fields: built, content), another top
    folder, entries dropped or added."""
    with zipfile.ZipFile(archive) as src, zipfile.ZipFile(to, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            rel = info.filename[len(NAME) + 1:]
            if any(rel.startswith(d) for d in drop):
                continue
            data = src.read(info)
            if rel == colab.MARKER:
                data = json.dumps({"course": NAME, "version": version, **mark}).encode()
            dst.writestr(prefix + rel, data)
        for name, data in (extra or {}).items():
            dst.writestr(name, data)
    if mtime is not None:
        os.utime(to, (mtime, mtime))
    return to


@contextlib.contextmanager
def not_found():
    """The first cell's failure: CourseNotFound (the set-up lines' own class, or colab.py's as the cell ran it), which
    a notebook shows as its message alone: no "%tb" line, no "To exit: use 'exit'" warning, as a SystemExit had."""
    with pytest.raises(Exception) as e:
        yield e
    assert type(e.value).__name__ == "CourseNotFound" and not isinstance(e.value, SystemExit), repr(e.value)
    assert e.value._render_traceback_() == [f"CourseNotFound: {e.value}"]


def one_sentence(message: str, *needed: str):
    assert "\n" not in message and "Traceback" not in message, message
    for n in needed:
        assert n in message, f"{n!r} not in: {message}"


# -- the cell itself ----------------------------------------------------------------------------------------
def test_the_notebooks_carry_the_generated_lines_in_a_collapsed_cell():
    for nb in [*ROOT.glob("notebooks/*.ipynb"), *ROOT.glob("solutions/*.ipynb"), *ROOT.glob("labs/*.ipynb")]:
        rel = str(nb.relative_to(ROOT))
        assert notebook_setup(rel) == make_links.setup_lines(), rel
        cell = next(c for c in json.loads(nb.read_text())["cells"] if c["cell_type"] == "code")
        assert cell["metadata"].get("jupyter", {}).get("source_hidden") is True, rel  # JupyterLab
        assert cell["metadata"].get("cellView") == "form" and cell["source"][0].startswith("# @title"), rel  # Colab
    assert make_links.setup_lines().count("\n") <= 22, "the set-up cell keeps only what runs before the package"


def test_the_first_cells_title_says_what_it_does_and_names_no_tool():
    """Colab shows the collapsed cell by its @title line: a learner reads "Set-up: find the course", not the name of
    the script that wrote it nor its hash (they follow on the next line, for `make labs`)."""
    title, marker = make_links.setup_lines().splitlines()[:2]
    assert title == "# @title Set-up: find the course"
    assert not re.search(r"tools/|\.py|make_links|[0-9a-f]{12}", title), title
    assert marker.startswith("# written by tools/make_links.py (") and re.search(r"\([0-9a-f]{12}\)", marker)


def test_the_course_not_found_shows_as_one_line_in_a_notebook_without_ipythons_tb_noise(tmp_path, monkeypatch):
    """In IPython (as in a notebook), the set-up's failure is its message alone: a SystemExit came with "An exception
    has occurred, use %tb to see the full traceback" and "To exit: use 'exit', 'quit', or Ctrl-D"."""
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    created = not InteractiveShell.initialized()
    shell = InteractiveShell.instance()
    try:
        with capture_output() as shown, warnings.catch_warnings(record=True) as warned:
            warnings.simplefilter("always")
            result = shell.run_cell(notebook_setup())
    finally:
        if created:
            InteractiveShell.clear_instance()
    text = shown.stdout + shown.stderr + "".join(str(w.message) for w in warned)
    assert type(result.error_in_exec).__name__ == "CourseNotFound", text
    assert "The course is not here" in text and f"looked for it in {tmp_path}" in text, text
    assert "%tb" not in text and "To exit" not in text and "Traceback" not in text, text


def test_in_a_checkout_it_finds_the_course_above_the_notebook(monkeypatch):
    monkeypatch.chdir(ROOT / "labs")
    assert run_cell(monkeypatch, colab_here=False) == ROOT


def test_outside_a_copy_off_colab_it_says_where_it_looked(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with not_found() as e:
        run_cell(monkeypatch, colab_here=False)
    one_sentence(str(e.value), f"looked for it in {tmp_path} and above", "Upload", "make dist")


# -- archives ----------------------------------------------------------------------------------------------
def test_an_uploaded_archive_is_unpacked_checked_and_said(content, archive, monkeypatch, capsys):
    (content / f"{NAME} (1).zip").write_bytes(archive.read_bytes())  # a browser's renamed second download
    found = run_cell(monkeypatch)
    assert found == content / NAME and (found / "streamalloc/__init__.py").is_file()
    assert (found / "recordings").is_dir() and colab.version(found)
    assert sorted(p.name for p in content.iterdir()) == [NAME, f"{NAME} (1).zip"], "no temporary folder is left"
    out = capsys.readouterr().out
    assert f"Using the course in {found} (version {colab.version(found)}, just unpacked from {NAME} (1).zip)" in out
    assert "make record" not in out
    stamp = (found / "streamalloc/__init__.py").stat().st_mtime_ns
    assert run_cell(monkeypatch) == found, "run again: the same copy"
    assert "unpacked earlier" in capsys.readouterr().out
    assert (found / "streamalloc/__init__.py").stat().st_mtime_ns == stamp, "the same version is not unpacked again"


def test_a_newer_archive_wins_over_an_older_copy(content, archive, monkeypatch, capsys):
    variant(archive, content / f"{NAME}.zip", version="old", mtime=time.time() - 600)
    run_cell(monkeypatch)
    (content / NAME / "notebooks/mine.txt").write_text("an edit in the old copy")
    variant(archive, content / f"{NAME} (1).zip", version="fixed")  # the learner uploads a fixed archive
    assert run_cell(monkeypatch) == content / NAME
    assert colab.version(content / NAME) == "fixed" and "version fixed, just unpacked" in capsys.readouterr().out
    assert (content / f"{NAME}.old/notebooks/mine.txt").is_file(), "the replaced copy is kept beside it"


def test_an_archive_of_the_contents_without_its_top_folder(content, archive, monkeypatch):
    variant(archive, content / "course.zip", prefix="")
    assert run_cell(monkeypatch) == content / NAME
    assert sorted(p.name for p in content.iterdir()) == ["course.zip", NAME], "nothing lands in /content itself"


def test_nothing_is_written_outside_the_course_folder(content, archive, monkeypatch):
    (content / "00_setup.ipynb").write_text("the learner's notebook")
    variant(archive, content / f"{NAME}.zip", extra={"00_setup.ipynb": "from the archive", "stray/x.txt": "x"})
    assert run_cell(monkeypatch) == content / NAME
    assert (content / "00_setup.ipynb").read_text() == "the learner's notebook"
    assert not (content / "stray").exists()
    evil = variant(archive, content / f"{NAME} (2).zip", version="evil", extra={f"{NAME}/../escaped.txt": "x"})
    with pytest.raises(colab.NotTheCourse, match="outside its folder"):
        colab.unpack(evil, f"{NAME}/", content)
    assert not (content / "escaped.txt").exists() and colab.version(content / NAME) == "v2"
    assert not [p for p in content.iterdir() if p.name.startswith(".")], "no temporary folder is left"


BROKEN = {  # kind: (its bytes from the good archive's, what the cell says, what the set-up module says)
    "empty": (lambda a: b"", "empty", "is empty (0 bytes)"),
    "cut short": (lambda a: a.read_bytes()[: a.stat().st_size // 2], "not a whole zip", "is cut short"),
    "a web page": (lambda a: b"<!DOCTYPE html><html><body>Sign in</body></html>", "not a whole zip", "is a web page"),
    "not a zip": (lambda a: os.urandom(4096), "not a whole zip", "is not a zip archive"),
    "damaged": (lambda a: a.read_bytes()[:2000] + bytes(b ^ 0xFF for b in a.read_bytes()[2000:2100])
                + a.read_bytes()[2100:], "damaged", "damaged"),
}


@pytest.mark.parametrize("kind", list(BROKEN))
def test_a_broken_archive_is_one_sentence(content, archive, monkeypatch, capsys, kind):
    make, cell_says, module_says = BROKEN[kind]
    broken = content / f"{NAME}.zip"
    broken.write_bytes(make(archive))
    with pytest.raises(colab.NotTheCourse, match=re.escape(module_says)):
        colab.check_archive(broken)
    with not_found() as e:
        run_cell(monkeypatch)
    message = str(e.value) + capsys.readouterr().out
    assert "Traceback" not in message and cell_says in message, message
    assert not (content / NAME).exists() and not [p for p in content.iterdir() if p.name.startswith(".")]
    assert "\n" not in str(e.value)


def test_an_archive_that_is_not_the_course(content, monkeypatch):
    with zipfile.ZipFile(content / f"{NAME}.zip", "w") as z:
        z.writestr("something/else.txt", "x")
    with not_found() as e:
        run_cell(monkeypatch)
    one_sentence(str(e.value), f"{NAME}.zip, not the course")


def test_a_newer_broken_archive_then_an_older_good_one(content, archive, monkeypatch, capsys):
    variant(archive, content / f"{NAME}.zip", version="good", mtime=time.time() - 600)
    (content / f"{NAME} (1).zip").write_bytes(b"<html>not found</html>")
    assert run_cell(monkeypatch) == content / NAME and colab.version(content / NAME) == "good"
    out = capsys.readouterr().out
    assert f"Skipped {content / (NAME + ' (1).zip')}: it is a web page" in out and "just unpacked from" in out


def test_a_copy_without_recordings_is_not_used_silently(content, archive, monkeypatch, capsys):
    variant(archive, content / f"{NAME}.zip", drop=("recordings/",))
    assert run_cell(monkeypatch) == content / NAME
    out = capsys.readouterr().out
    assert "has no recordings" in out and "make record" not in out


# -- other copies, and none -----------------------------------------------------------------------------------
def test_the_course_in_drive_builds_on_local_disk(content, archive, monkeypatch, capsys):
    drive = content / "drive/MyDrive"
    drive.mkdir(parents=True)
    with zipfile.ZipFile(archive) as z:
        z.extractall(drive)
    monkeypatch.setenv("STREAMALLOC_BUILD", "")  # the cell sets it: monkeypatch removes it after this test
    monkeypatch.delenv("STREAMALLOC_BUILD")
    assert run_cell(monkeypatch) == drive / NAME
    assert "in Drive" in capsys.readouterr().out
    assert os.environ["STREAMALLOC_BUILD"] == str(content / colab.LOCAL_BUILD)
    from streamalloc import lesson
    build = lesson.build_root()
    assert build == content / colab.LOCAL_BUILD and drive not in build.parents


def test_an_archive_wins_over_drive_and_says_how_to_switch(content, archive, monkeypatch, capsys):
    drive = content / "drive/MyDrive"
    drive.mkdir(parents=True)
    with zipfile.ZipFile(archive) as z:
        z.extractall(drive)
    (content / f"{NAME}.zip").write_bytes(archive.read_bytes())
    assert run_cell(monkeypatch) == content / NAME
    out = capsys.readouterr().out
    assert f"Also here: {drive / NAME} (to use it, delete {NAME}.zip and {NAME} from {content})" in out


def test_nothing_found_says_where_it_looked_and_what_it_saw(content, monkeypatch):
    (content / "my-photos.zip").write_bytes(b"PK\x05\x06" + b"\0" * 18)  # an empty zip of another name
    with not_found() as e:
        run_cell(monkeypatch)
    one_sentence(str(e.value), f"looked for it in {content}", "my-photos.zip, not the course", f"Upload {NAME}.zip", "make dist",
                 "Google Drive", str(content / "drive/MyDrive"))


def test_a_cpu_runtime_is_pointed_to_change_runtime_type(content, archive, monkeypatch, capsys):
    (content / f"{NAME}.zip").write_bytes(archive.read_bytes())
    monkeypatch.setitem(sys.modules, "google.colab", type(sys)("google.colab"))
    monkeypatch.setattr(colab, "_has_gpu", lambda: False)
    colab.find(content=content)
    assert "Runtime -> Change runtime type" in capsys.readouterr().out
    monkeypatch.setattr(colab, "_has_gpu", lambda: True)
    colab.find(content=content)
    assert "Change runtime type" not in capsys.readouterr().out


def fake_git(tmp_path, monkeypatch, script):
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "git").write_text("#!/bin/sh\n" + script)
    (bin_dir / "git").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")


def test_a_failing_clone_says_gits_message_in_one_line(content, archive, tmp_path, monkeypatch):
    (content / "unrelated.zip").write_bytes(archive.read_bytes()[:100])  # the module comes from elsewhere here
    fake_git(tmp_path, monkeypatch, "echo \"fatal: repository 'https://github.com/$5/' not found\" >&2; exit 128\n")
    monkeypatch.setitem(sys.modules, "google.colab", type(sys)("google.colab"))
    with not_found() as e:
        colab.find("someone/unpublished", content=content)
    one_sentence(str(e.value), "git clone https://github.com/someone/unpublished` failed", "fatal: repository")


def test_a_working_clone(content, tmp_path, monkeypatch):
    fake_git(tmp_path, monkeypatch, 'for a; do last=$a; done; mkdir -p "$last/streamalloc" "$last/notebooks"; '
                                    'touch "$last/streamalloc/__init__.py" "$last/streamalloc/colab.py"\n')
    monkeypatch.setitem(sys.modules, "google.colab", type(sys)("google.colab"))
    assert colab.find("someone/published", content=content, say=lambda s: None) == content / NAME


# -- the generator and the archive ----------------------------------------------------------------------------
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
    assert "colab[\"find\"]('someone/published')" in make_links.setup_lines("someone/published")


def test_hand_edited_set_up_lines_are_kept_without_force():
    text = (ROOT / "notebooks/00_setup.ipynb").read_text()
    edited = text.replace('sys.path.insert(0, str(colab[\\"find\\"](None)))', "sys.path.insert(0, '/my/copy')")
    assert edited != text
    with pytest.raises(make_links.HandEdited, match="--force"):
        make_links.with_setup(edited, "00")
    assert 'colab[\\"find\\"](None)' in make_links.with_setup(edited, "00", force=True)
    readme = (ROOT / "README.md").read_text()
    with pytest.raises(make_links.HandEdited):
        make_links.with_map(readme.replace("| lecture |", "| lesson |", 1))
    assert make_links.with_map(readme) == readme


def test_make_dist_packs_what_git_tracks_without_the_reports_images(tmp_path):
    repo = tmp_path / "repo"
    for f in ("tracked.txt", "reports/r/report.md", "reports/r/figures/a.png", "untracked.txt"):
        (repo / f).parent.mkdir(parents=True, exist_ok=True)
        (repo / f).write_text(f)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], cwd=repo, check=True)
    subprocess.run([*git, "add", "tracked.txt", "reports"], cwd=repo, check=True)
    assert make_dist.course_files(repo) == ["reports/r/report.md", "tracked.txt"]


def test_make_dist_unpacks_and_runs_a_test(tmp_path, archive):
    # 2.0 MiB with 26 notebooks and five recording sets (the H200's two, the H100's three): a build folder or the
    # reports' images packed by mistake would be tens of MiB
    assert archive.stat().st_size < 3 * 2**20, f"the archive is {archive.stat().st_size / 2**20:.1f} MiB"
    with zipfile.ZipFile(archive) as z:
        names = z.namelist()
        mark = json.loads(z.read(f"{NAME}/{colab.MARKER}"))
        z.extractall(tmp_path)
    assert mark["course"] == NAME and mark["version"]
    assert all(n.startswith(f"{NAME}/") for n in names)
    for needed in ("Makefile", "requirements.txt", "README.md", "streamalloc/__init__.py", "streamalloc/colab.py",
                   "tools/make_links.py", "notebooks/00_setup.ipynb", "labs/lab1_stream_ordered.ipynb",
                   "solutions/lab1_stream_ordered.ipynb"):
        assert f"{NAME}/{needed}" in names, needed
    assert any(n.startswith(f"{NAME}/recordings/") and n.endswith(".json") for n in names)
    assert not any("/build/" in n or "__pycache__" in n or "/figures/" in n for n in names)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:nbval", "-o", "addopts=-p no:cacheprovider",
                           "tests/test_replay.py"], cwd=tmp_path / NAME, capture_output=True, text=True,
                          env={**os.environ, "STREAMALLOC_MODE": "replay"}, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert " passed" in done.stdout


def test_a_new_copy_in_a_session_that_loaded_the_old_one_says_restart(content, archive, monkeypatch, capsys):
    (content / f"{NAME}.zip").write_bytes(archive.read_bytes())
    monkeypatch.setitem(sys.modules, "google.colab", type(sys)("google.colab"))
    colab.find(content=content)  # this test's process has the checkout's streamalloc loaded: another copy
    assert "Runtime -> Restart session" in capsys.readouterr().out


# -- the learner's copy on Colab, and faults around the unpacking ----------------------------------------------
def test_a_good_archive_gives_no_warning(content, archive, monkeypatch, capsys):
    (content / f"{NAME}.zip").write_bytes(archive.read_bytes())
    assert run_cell(monkeypatch) == content / NAME
    out = capsys.readouterr().out
    assert "Warning" not in out and "no recordings" not in out, out
    assert not colab.no_recordings(ROOT) and colab.no_recordings(content)


def test_the_archive_marks_its_content_and_when_it_was_built(tmp_path, archive):
    with zipfile.ZipFile(archive) as z:
        mark = json.loads(z.read(f"{NAME}/{colab.MARKER}"))
    assert re.fullmatch(r"[0-9a-f]{64}", mark["content"])
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", mark["built"])
    (tmp_path / "a").write_text("one")
    (tmp_path / "b").write_text("two")
    first = make_dist.content_hash(["a", "b"], tmp_path)
    assert make_dist.content_hash(["a", "b"], tmp_path) == first, "the same files, the same hash"
    (tmp_path / "b").write_text("twO")
    assert make_dist.content_hash(["a", "b"], tmp_path) != first


def test_an_older_archive_uploaded_later_does_not_replace_a_newer_copy(content, archive, monkeypatch, capsys):
    variant(archive, content / f"{NAME}.zip", version="new", built="2026-11-27T10:00:00Z", content="b" * 64,
            mtime=time.time() - 600)
    run_cell(monkeypatch)
    (content / NAME / "notebooks/mine.txt").write_text("an edit")
    variant(archive, content / f"{NAME} (1).zip", version="old", built="2026-11-20T10:00:00Z", content="a" * 64)
    assert run_cell(monkeypatch) == content / NAME
    out = capsys.readouterr().out
    assert colab.version(content / NAME) == "new" and (content / NAME / "notebooks/mine.txt").is_file()
    assert f"{NAME} (1).zip, the archive uploaded last, holds an older version of the course (old) than the one " \
           "used (new)" in out and f"rename the folder {content / NAME}" in out, out
    assert not (content / f"{NAME}.old").exists()


def test_the_newest_build_wins_whatever_the_upload_order(content, archive, monkeypatch, capsys):
    variant(archive, content / f"{NAME}.zip", version="new", built="2026-11-27T10:00:00Z", content="b" * 64,
            mtime=time.time() - 600)
    variant(archive, content / f"{NAME} (1).zip", version="old", built="2026-11-20T10:00:00Z", content="a" * 64)
    assert run_cell(monkeypatch) == content / NAME and colab.version(content / NAME) == "new"
    assert "holds an older version of the course (old)" in capsys.readouterr().out


def test_a_rebuild_of_the_same_files_is_not_unpacked_again(content, archive, monkeypatch, capsys):
    variant(archive, content / f"{NAME}.zip", version="monday", built="2026-11-23T10:00:00Z", content="c" * 64,
            mtime=time.time() - 600)
    found = run_cell(monkeypatch)
    (found / "notebooks/mine.txt").write_text("an edit")
    variant(archive, content / f"{NAME} (1).zip", version="tuesday", built="2026-11-24T10:00:00Z", content="c" * 64)
    assert run_cell(monkeypatch) == found and (found / "notebooks/mine.txt").is_file()
    assert "unpacked earlier" in capsys.readouterr().out and not (content / f"{NAME}.old").exists()


def test_every_replaced_copy_is_kept_and_said(content, archive, monkeypatch, capsys):
    for i, v in enumerate(("one", "two", "three")):
        variant(archive, content / f"{NAME} ({i}).zip", version=v, mtime=time.time() - 600 + i)
        run_cell(monkeypatch)
        (content / NAME / "notebooks/mine.txt").write_text(f"an edit in {v}")
    out = capsys.readouterr().out
    assert colab.version(content / NAME) == "three"
    assert (content / f"{NAME}.old/notebooks/mine.txt").read_text() == "an edit in one"
    assert (content / f"{NAME}.old-2/notebooks/mine.txt").read_text() == "an edit in two"
    assert f"is kept in {content / (NAME + '.old')}" in out and f"is kept in {content / (NAME + '.old-2')}" in out


def test_an_archive_too_big_to_be_the_course(content, archive, monkeypatch):
    variant(archive, content / f"{NAME}.zip", extra={f"{NAME}/big.bin": b"\0" * (colab.MAX_BYTES + 1)})
    with pytest.raises(colab.NotTheCourse, match="unpacks to more than"):
        colab.check_archive(content / f"{NAME}.zip")
    with not_found() as e:
        run_cell(monkeypatch)
    one_sentence(str(e.value), "unpacks to more than")
    variant(archive, content / f"{NAME}.zip", extra={f"{NAME}/x/{i}": b"" for i in range(colab.MAX_ENTRIES)})
    with pytest.raises(colab.NotTheCourse, match=r"holds \d+ files, more than"):
        colab.check_archive(content / f"{NAME}.zip")
    assert not (content / NAME).exists()


def refuse(monkeypatch, module, name, when, err):
    """`module.name` raises `err` (errno, as the OS would) for the paths that `when` picks."""
    real = getattr(module, name)

    def refused(path, *a, **k):
        if when(Path(os.fsdecode(path)) if isinstance(path, (str, bytes, os.PathLike)) else None):
            raise OSError(err, os.strerror(err), str(path))
        return real(path, *a, **k)
    monkeypatch.setattr(module, name, refused)


def test_a_read_only_content_is_one_sentence(content, archive, monkeypatch, capsys):
    import errno
    (content / f"{NAME}.zip").write_bytes(archive.read_bytes())
    refuse(monkeypatch, os, "mkdir", lambda p: p is not None and content in p.parents, errno.EROFS)
    with not_found() as e:
        run_cell(monkeypatch)
    one_sentence(str(e.value), "Read-only file system")
    assert "Traceback" not in capsys.readouterr().out


def test_an_unreadable_newer_upload_is_skipped(content, archive, monkeypatch, capsys):
    import builtins
    import errno
    variant(archive, content / f"{NAME}.zip", version="good", mtime=time.time() - 600)
    bad = variant(archive, content / f"{NAME} (1).zip", version="unreadable")
    for module in (builtins, io):
        refuse(monkeypatch, module, "open", lambda p: p == bad, errno.EACCES)
    assert run_cell(monkeypatch) == content / NAME and colab.version(content / NAME) == "good"
    assert f"Skipped {bad}: it cannot be read (Permission denied)" in capsys.readouterr().out


def test_a_content_that_cannot_be_listed_is_one_sentence(content, archive, monkeypatch, capsys):
    import errno
    (content / f"{NAME}.zip").write_bytes(archive.read_bytes())
    refuse(monkeypatch, os, "scandir", lambda p: p == content, errno.EACCES)
    refuse(monkeypatch, os, "listdir", lambda p: p == content, errno.EACCES)
    monkeypatch.setitem(sys.modules, "google.colab", type(sys)("google.colab"))
    with not_found() as e:
        colab.find(content=content)
    one_sentence(str(e.value), f"{content} cannot be listed (Permission denied)")
    refuse(monkeypatch, os, "stat", lambda p: p is not None and content in p.parents, errno.EACCES)
    with not_found() as e:
        colab.find(content=content)
    one_sentence(str(e.value), "Permission denied")
