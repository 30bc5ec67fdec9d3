"""Finding the course from a notebook's first cell, and on Colab getting it there (README.md, "Opening it").

The first code cell of every notebook (written by tools/make_links.py) reads this file, from a copy of the
course above the notebook or straight out of an uploaded archive, runs it, and puts `find()`'s folder on
sys.path. So this module uses the standard library only and imports nothing of the package: when it runs, the
package may still be inside an archive.

Off Colab, the course is the folder above the notebook that holds streamalloc/. On Colab (google.colab is
importable), in `content` (the kernel's folder, /content):

1. every uploaded archive (*.zip), newest first, is checked: a whole zip, holding the course's marker file
   (MARKER, written by tools/make_dist.py) with its version, in a top folder or at its top. The first good one
   is unpacked into a temporary folder inside content, checked again there, and only then moved into place as
   content/NAME (a copy it replaces is kept as NAME.old). Nothing is written outside that temporary folder.
   An archive whose version the copy in place already has is not unpacked again.
2. without a good archive: the copy in content/NAME, then the folder NAME at the top of a mounted Google Drive
   (its programs are built on the local disk, not in Drive: $STREAMALLOC_BUILD), then a clone of `repo`.

It prints one line saying which copy is used (and how to use another one); every problem is one sentence.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

NAME = "stream-ordered-allocator"  # the course's folder, in the archive, on Colab and in Drive
MARKER = "course-version.json"  # {"course": NAME, "version": ...}: written into the archive by tools/make_dist.py
DRIVE = Path("drive/MyDrive")
LOCAL_BUILD = "streamalloc-build"  # content/LOCAL_BUILD: where a Drive copy's programs are built


class NotTheCourse(Exception):
    """An archive or folder that cannot be used; the message is one sentence saying why."""


def on_colab() -> bool:
    return "google.colab" in sys.modules or _importable("google.colab")


def _importable(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


def version(folder: Path) -> str | None:
    """The version in a copy's marker file, or None if it has none (a git checkout, or not the course)."""
    try:
        mark = json.loads((folder / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return mark.get("version") if isinstance(mark, dict) and mark.get("course") == NAME else None


# -- archives ---------------------------------------------------------------------------------------------
def _prefix(names: list[str]) -> str:
    """The folder inside the archive that holds the course ('NAME/', another top folder, or '' for none)."""
    marks = [n[:-len(MARKER)] for n in names if n.endswith(MARKER) and n[:-len(MARKER)].count("/") <= 1
             and n[:-len(MARKER)] in ("", n[:-len(MARKER)].split("/")[0] + "/")]
    if not marks:
        has_package = any(n.endswith("streamalloc/__init__.py") for n in names)
        raise NotTheCourse("holds no " + MARKER + (" (it has the helper package, but was not built by `make dist`)"
                                                   if has_package else ": it is not the course's archive"))
    return min(marks, key=len)


def check_archive(path: Path) -> tuple[str, str]:
    """(the course's folder inside it, its version) for a usable archive; NotTheCourse says why not."""
    size = path.stat().st_size
    if size == 0:
        raise NotTheCourse("is empty (0 bytes): its upload did not finish")
    if not zipfile.is_zipfile(path):
        with open(path, "rb") as f:
            head = f.read(512).lstrip().lower()
        if head.startswith((b"<!doctype html", b"<html", b"<")):
            raise NotTheCourse("is a web page saved under a .zip name, not the archive (download the file itself)")
        if head.startswith(b"pk"):
            raise NotTheCourse(f"is cut short ({size / 2**20:.1f} MiB): its upload did not finish (wait for the "
                               "Files panel's progress circle to close)")
        raise NotTheCourse("is not a zip archive")
    try:
        with zipfile.ZipFile(path) as z:
            prefix = _prefix(z.namelist())
            bad = z.testzip()
            if bad:
                raise NotTheCourse(f"is damaged ({bad} fails its checksum)")
            mark = json.loads(z.read(prefix + MARKER))
    except NotTheCourse:
        raise
    except Exception as e:  # BadZipFile, a truncated member, a marker that is not JSON
        raise NotTheCourse(f"is damaged and cannot be read ({type(e).__name__}: {e})") from None
    if not isinstance(mark, dict) or mark.get("course") != NAME or not mark.get("version"):
        raise NotTheCourse(f"has a {MARKER} that is not the course's")
    return prefix, str(mark["version"])


def unpack(path: Path, prefix: str, content: Path) -> Path:
    """Unpack the course's folder from the archive into a temporary folder in content, check it, move it to
    content/NAME (keeping a copy it replaces as NAME.old). Only the temporary folder is written to until the move."""
    work = Path(tempfile.mkdtemp(prefix=f".{NAME}-unpacking-", dir=content))
    try:
        top = work / NAME
        with zipfile.ZipFile(path) as z:
            for info in z.infolist():
                if not info.filename.startswith(prefix) or info.filename == prefix:
                    continue  # anything beside the course's folder stays in the archive
                rel = Path(info.filename[len(prefix):])
                if rel.is_absolute() or ".." in rel.parts:
                    raise NotTheCourse(f"has an entry that points outside its folder ({info.filename})")
                target = top / rel
                if info.is_dir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                with z.open(info) as src, open(target, "wb") as dst:
                    shutil.copyfileobj(src, dst)
        problem = incomplete(top)
        if problem:
            raise NotTheCourse(problem)
        final, old = content / NAME, content / f"{NAME}.old"
        if final.exists():
            shutil.rmtree(old, ignore_errors=True)
            final.rename(old)
        top.rename(final)
        return final
    except OSError as e:
        raise NotTheCourse(f"could not be unpacked ({e.strerror or e})") from None
    finally:
        shutil.rmtree(work, ignore_errors=True)


def incomplete(folder: Path) -> str:
    """Why a folder is not a whole copy of the course, or ''."""
    missing = [p for p in ("streamalloc/__init__.py", "streamalloc/colab.py", "notebooks") if not (folder / p).exists()]
    if missing:
        return f"lacks {', '.join(missing)}"
    return ""


def no_recordings(folder: Path) -> bool:
    rec = folder / "recordings"
    return not rec.is_dir() or not any(rec.glob("*.json"))


# -- finding the course -----------------------------------------------------------------------------------
def find(repo: str | None = None, content: Path | None = None, say=print) -> Path:
    """The course's folder; on Colab, unpacked or found as the module's docstring says. SystemExit with one
    sentence when there is none."""
    here = Path.cwd()
    if not on_colab():
        for p in (here, *here.parents):
            if (p / "streamalloc").is_dir():
                return p
        sys.exit(f"The course's helper package is not in {here} or above it: open this notebook from a copy of "
                 "the course (README.md, \"Opening it\").")
    content = Path(content) if content is not None else here
    folder, how, others = _colab_copy(repo, content, say)
    if no_recordings(folder):
        say(f"Warning: {folder} has no recordings (its recordings/ folder is missing or empty), so without a GPU "
            "no lesson has measurements to show: get a complete copy of the course (README.md, \"Opening it\").")
    say(f"Using the course in {folder} ({how})." + (f" Also here: {others}." if others else ""))
    loaded = getattr(sys.modules.get("streamalloc"), "__file__", None)
    if loaded and ("just unpacked" in how or Path(loaded).resolve().parent.parent != folder.resolve()):
        say("This session still has the helper package of the copy it used before: choose Runtime -> Restart "
            "session, then run this cell again.")
    if DRIVE.as_posix() in folder.as_posix():  # programs are built on the runtime's disk, not in Drive
        os.environ.setdefault("STREAMALLOC_BUILD", str(content / LOCAL_BUILD))
    if not _has_gpu():
        say("This runtime has no GPU, so measurements are replayed from recordings. To run them live, choose "
            "Runtime -> Change runtime type -> a GPU (T4), then run this cell again.")
    return folder


def _has_gpu() -> bool:
    return Path("/dev/nvidia0").exists() or shutil.which("nvidia-smi") is not None


def _colab_copy(repo, content: Path, say) -> tuple[Path, str, str]:
    """(folder, how it got there, what else is here and how to use it instead)."""
    placed, drive = content / NAME, content / DRIVE / NAME
    copies = [p for p in (placed, drive) if (p / "streamalloc").is_dir() and not incomplete(p)]
    archives = sorted((p for p in content.glob("*.zip") if p.is_file()), key=lambda p: p.stat().st_mtime, reverse=True)
    archives += sorted((p for p in (content / DRIVE).glob(f"{NAME}*.zip") if p.is_file()),
                       key=lambda p: p.stat().st_mtime, reverse=True)
    rejected = []
    for archive in archives:
        try:
            prefix, v = check_archive(archive)
        except NotTheCourse as e:
            rejected.append(f"{archive.name} {e}")
            if NAME in archive.name:
                say(f"Skipped {archive}: it {e}.")
            continue
        rest = ", ".join(str(p) for p in copies if p != placed)
        switch = f"{rest} (to use it, delete {archive.name} and {NAME} from {content})" if rest else ""
        if placed in copies and version(placed) == v:
            return placed, f"version {v}, unpacked earlier from {archive.name}", switch
        try:
            folder = unpack(archive, prefix, content)
        except NotTheCourse as e:
            rejected.append(f"{archive.name} {e}")
            say(f"Skipped {archive}: it {e}.")
            continue
        return folder, f"version {v}, just unpacked from {archive.name}", switch
    if copies:
        folder = copies[0]
        rest = ", ".join(str(p) for p in copies[1:])
        where = "in Drive" if folder == drive else "already here"
        return folder, f"{where}, version {version(folder) or 'unknown'}", (
            f"{rest} (to use it, delete {folder})" if rest else "")
    if repo:
        url = f"https://github.com/{repo}"
        done = subprocess.run(["git", "clone", "-q", "--depth=1", url, str(placed)], capture_output=True, text=True)
        if done.returncode == 0:
            return placed, f"cloned from {url}", ""
        sys.exit(f"`git clone {url}` failed: {' '.join(done.stderr.split())}")
    seen = f" Seen, not usable: {'; '.join(rejected)}." if rejected else ""
    sys.exit(f"The course is not here: looked in {content} for an archive (*.zip) and the folder {NAME}, and in "
             f"{content / DRIVE} for the folder {NAME}.{seen} Upload {NAME}.zip (`make dist` builds it) with the "
             "Files panel, or mount Google Drive holding the folder, then run this cell again.")
