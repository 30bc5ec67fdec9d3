"""`make dist` in a checkout whose files git will not list (a folder another user owns: "dubious ownership", common in
containers) refuses and says why: it never falls back to packing every file in the folder, a .env secret included."""
import os
import subprocess
from pathlib import Path

import pytest

import make_dist

ROOT = Path(__file__).resolve().parent.parent

DUBIOUS = ("fatal: detected dubious ownership in repository at '{repo}'\n"
           "To add an exception for this directory, call:\n\n\tgit config --global --add safe.directory {repo}\n")


@pytest.fixture
def refused(tmp_path, monkeypatch):
    """A checkout of the course's needed files and a .env secret, that git refuses to list: owned by another user
    where this test runs as root, else through a `git` that answers as git does."""
    repo = tmp_path / "repo"
    for f in [*make_dist.NEEDED, ".env"]:
        (repo / f).parent.mkdir(parents=True, exist_ok=True)
        (repo / f).write_text("SECRET=1\n" if f == ".env" else f)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], cwd=repo, check=True)
    subprocess.run([*git, "add", *make_dist.NEEDED], cwd=repo, check=True)
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "gitconfig"))  # no safe.directory from this machine
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    if os.geteuid() == 0:
        for dirpath, dirnames, filenames in os.walk(repo):
            for name in [dirpath, *(os.path.join(dirpath, n) for n in dirnames + filenames)]:
                os.lchown(name, 12345, 12345)
    else:
        fake = tmp_path / "bin" / "git"
        fake.parent.mkdir()
        fake.write_text(f"#!/bin/sh\nprintf '%s' \"{DUBIOUS.format(repo=repo)}\" >&2\nexit 128\n")
        fake.chmod(0o755)
        monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    return repo


def test_refuses_a_checkout_git_will_not_list_and_says_why(refused, tmp_path):
    out = tmp_path / "dist"
    with pytest.raises(SystemExit) as e:
        make_dist.build(out, root=refused)
    message = str(e.value)
    assert "dubious ownership" in message and "nothing was written" in message
    assert f"git config --global --add safe.directory {refused}" in message
    assert not out.exists() or not any(out.iterdir())  # no archive, whole or half


def test_refuses_when_git_cannot_be_run(tmp_path, monkeypatch):
    (tmp_path / ".git").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    with pytest.raises(SystemExit, match="git cannot be run"):
        make_dist.course_files(tmp_path)


def test_refuses_a_lab_edited_in_place_naming_it_unless_allowed(tmp_path, capsys):
    """A lab solved in place (its cells differ from the hash make_labs.py wrote) would hand its solution to the room."""
    import zipfile

    import nbformat

    repo = tmp_path / "repo"
    for f in make_dist.NEEDED:
        if f != "labs":
            (repo / f).parent.mkdir(parents=True, exist_ok=True)
            (repo / f).write_text(f)
    (repo / "labs").mkdir()
    lab = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("answer = 42  # the learner's")])
    lab.metadata["streamalloc"] = {"cells_sha256": "the cells make_labs.py wrote"}
    nbformat.write(lab, str(repo / "labs" / "lab9_x.ipynb"))
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(["git", "add", "."], cwd=repo, check=True)
    out = tmp_path / "dist"
    with pytest.raises(SystemExit) as e:
        make_dist.build(out, root=repo)
    assert "labs/lab9_x.ipynb is edited in place" in str(e.value) and "--allow-edits" in str(e.value)
    assert not out.exists() or not any(out.iterdir())
    archive = make_dist.build(out, root=repo, allow_edits=True)
    assert "WARNING: packing 1 lab edited in place" in capsys.readouterr().err
    assert f"{make_dist.NAME}/labs/lab9_x.ipynb" in zipfile.ZipFile(archive).namelist()


def test_outside_git_it_leaves_out_hidden_files_and_says_so_aloud(tmp_path, capsys):
    """A copy without .git (unpacked from an archive, say): nothing lists the course's files, so every file goes in;
    a .env secret, a .ssh folder or any hidden file does not, and the build says both."""
    import zipfile

    repo = tmp_path / "repo"
    folders = ("notebooks", "labs", "solutions", "recordings", "tests")
    for f in [*(n + "/x" if n in folders else n for n in make_dist.NEEDED), ".env", ".ssh/id_ed25519",
              "notebooks/.secret", "notes.txt"]:
        (repo / f).parent.mkdir(parents=True, exist_ok=True)
        (repo / f).write_text(f)
    archive = make_dist.build(tmp_path / "dist", root=repo)
    names = zipfile.ZipFile(archive).namelist()
    assert f"{make_dist.NAME}/notes.txt" in names and f"{make_dist.NAME}/notebooks/x" in names
    assert not any("/." in n for n in names), names
    err = capsys.readouterr().err
    assert "WARNING" in err and "is not a git checkout" in err and "left out: .env, .ssh, notebooks/.secret" in err, err
