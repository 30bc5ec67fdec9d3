"""Finding the course from a notebook's first cell, and on Colab getting it there (README.md, "Opening it").

The first code cell of every notebook (written by tools/make_links.py) reads this file, from a copy of the
course above the notebook or straight out of an uploaded archive, runs it, and puts `find()`'s folder on
sys.path. So this module uses the standard library only and imports nothing of the package: when it runs, the
package may still be inside an archive.

Off Colab, the course is the folder above the notebook that holds streamalloc/. On Colab (google.colab is
importable), in `content` (the kernel's folder, /content):

1. every uploaded archive (*.zip) is checked: a whole zip of a sane size, holding the course's marker file
   (MARKER, written by tools/make_dist.py) with its version, in a top folder or at its top. The good one built
   last (the last uploaded, where the markers do not say when they were built) is unpacked into a temporary
   folder inside content, checked again there, and only then moved into place as content/NAME; a copy it
   replaces, with the learner's edits, is kept as NAME.old (then NAME.old-2, ...: none is ever deleted).
   Nothing is written outside that temporary folder. An archive of the files the copy in place came from (the
   markers' content hash) is not unpacked again, nor is one built before that copy.
2. without a good archive: the copy in content/NAME, then the folder NAME at the top of a mounted Google Drive
   (its programs are built on the local disk, not in Drive: $STREAMALLOC_BUILD), then a clone of `repo`.

It prints one line saying which copy is used (and how to use another one); every problem is one sentence.
"""
from __future__ import annotations

import fnmatch
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
MAX_BYTES = 256 * 2**20  # the course unpacks to about 5 MiB in 320 files: an archive far past these is not it
MAX_ENTRIES = 10_000


class NotTheCourse(Exception):
    """An archive or folder that cannot be used; the message is one sentence saying why."""


class CourseNotFound(Exception):
    """No copy of the course can be used here: the message (one sentence) says where it looked and what to do. A
    notebook shows the message alone: IPython asks an exception for `_render_traceback_` (a SystemExit would come
    with "An exception has occurred, use %tb to see the full traceback" and "To exit: use 'exit'")."""

    def _render_traceback_(self) -> list[str]:
        return [f"{type(self).__name__}: {self}"]


def on_colab() -> bool:
    return "google.colab" in sys.modules or _importable("google.colab")


def _importable(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


def marker(folder: Path) -> dict:
    """A copy's marker file, or {} if it has none (a git checkout, or not the course)."""
    try:
        mark = json.loads((folder / MARKER).read_text())
    except (OSError, ValueError):
        return {}
    return mark if isinstance(mark, dict) and mark.get("course") == NAME else {}


def version(folder: Path) -> str | None:
    """The version in a copy's marker file, or None if it has none."""
    return marker(folder).get("version")


def same_course(a: dict, b: dict) -> bool:
    """Whether two markers are of the same files: by their content hash where both have one (a rebuild of the
    same files is the same course), else by the version."""
    if a.get("content") and b.get("content"):
        return a["content"] == b["content"]
    return a.get("version") == b.get("version")


def built_before(a: dict, b: dict) -> bool:
    """Whether a was built before b; False where either marker does not say when (archives of before 2026-11)."""
    return bool(a.get("built") and b.get("built")) and str(a["built"]) < str(b["built"])


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


def check_archive(path: Path) -> tuple[str, dict]:
    """(the course's folder inside it, its marker) for a usable archive; NotTheCourse says why not."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(512).lstrip().lower()
    except OSError as e:  # its permissions, or gone since the folder was listed
        raise NotTheCourse(f"cannot be read ({e.strerror or e})") from None
    if size == 0:
        raise NotTheCourse("is empty (0 bytes): its upload did not finish")
    if not zipfile.is_zipfile(path):
        if head.startswith((b"<!doctype html", b"<html", b"<")):
            raise NotTheCourse("is a web page saved under a .zip name, not the archive (download the file itself)")
        if head.startswith(b"pk"):
            raise NotTheCourse(f"is cut short ({size / 2**20:.1f} MiB): its upload did not finish (wait for the "
                               "Files panel's progress circle to close)")
        raise NotTheCourse("is not a zip archive")
    try:
        with zipfile.ZipFile(path) as z:
            prefix = _prefix(z.namelist())
            # reading never gives more than an entry's declared size, so these bound what unpack() writes
            entries = z.infolist()
            if len(entries) > MAX_ENTRIES:
                raise NotTheCourse(f"holds {len(entries)} files, more than the {MAX_ENTRIES} the course's archive "
                                   "may hold: it is not the course's archive")
            if sum(i.file_size for i in entries) > MAX_BYTES:
                raise NotTheCourse(f"unpacks to more than {MAX_BYTES // 2**20} MiB, far more than the course: it is "
                                   "not the course's archive")
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
    return prefix, {**mark, "version": str(mark["version"])}


def unpack(path: Path, prefix: str, content: Path) -> tuple[Path, Path | None]:
    """Unpack the course's folder from the archive into a temporary folder in content, check it, move it to
    content/NAME. Returns that and where a copy it replaces is kept (NAME.old, else NAME.old-2, ...: a learner's
    edits are never deleted), or None. Only the temporary folder is written to until the move."""
    try:
        work = Path(tempfile.mkdtemp(prefix=f".{NAME}-unpacking-", dir=content))
    except OSError as e:  # a read-only or full /content
        raise NotTheCourse(f"cannot be unpacked in {content} ({e.strerror or e})") from None
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
        final, old = content / NAME, None
        if final.exists():
            old, n = content / f"{NAME}.old", 1
            while os.path.lexists(old):
                n += 1
                old = content / f"{NAME}.old-{n}"
            final.rename(old)
        top.rename(final)
        return final, old
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
    """Whether a copy lacks every lesson's recording (recordings/<set>/<lesson>/<name>.json, streamalloc/replay.py)."""
    return not any(p.name != "machine.json" for p in (folder / "recordings").glob("*/*/*.json"))


# -- finding the course -----------------------------------------------------------------------------------
def find(repo: str | None = None, content: Path | None = None, say=print) -> Path:
    """The course's folder; on Colab, unpacked or found as the module's docstring says. CourseNotFound, one
    sentence, when there is none."""
    here = Path.cwd()
    if not on_colab():
        for p in (here, *here.parents):
            if (p / "streamalloc").is_dir():
                return p
        raise CourseNotFound(f"The course's helper package is not in {here} or above it: open this notebook from a "
                             "copy of the course (README.md, \"Opening it\").")
    content = Path(content) if content is not None else here
    try:
        folder, how, others = _colab_copy(repo, content, say)
    except OSError as e:  # a folder of the runtime's that cannot be read (its permissions), git not installed
        raise CourseNotFound(f"The course cannot be set up: {e.filename or content} cannot be used "
                             f"({e.strerror or e}).") from None
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


def _whole(folder: Path) -> bool:
    try:
        return (folder / "streamalloc").is_dir() and not incomplete(folder)
    except OSError:  # a folder that cannot be read is no copy to use
        return False


def _archives(folder: Path, pattern: str, unreadable: list[str]) -> list[Path]:
    """The files in folder matching pattern, the last uploaded first; a folder that cannot be listed is named in
    unreadable (a missing one is not: Drive is mounted by the learner, or not)."""
    try:
        with os.scandir(folder) as entries:
            found = [(e.stat().st_mtime, Path(e.path)) for e in entries
                     if fnmatch.fnmatchcase(e.name, pattern) and e.is_file()]
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as e:
        unreadable.append(f"{folder} cannot be listed ({e.strerror or e})")
        return []
    return [p for _, p in sorted(found, key=lambda t: t[0], reverse=True)]


def _colab_copy(repo, content: Path, say) -> tuple[Path, str, str]:
    """(folder, how it got there, what else is here and how to use it instead)."""
    placed, drive = content / NAME, content / DRIVE / NAME
    copies = [p for p in (placed, drive) if _whole(p)]
    unreadable: list[str] = []
    archives = _archives(content, "*.zip", unreadable) + _archives(content / DRIVE, f"{NAME}*.zip", unreadable)
    if copies:  # else the message that the course is not here says it
        for u in unreadable:
            say(f"Archives could not be looked for: {u}.")
    rejected, good = [], []
    for archive in archives:
        try:
            good.append((archive, *check_archive(archive)))
        except NotTheCourse as e:
            rejected.append(f"{archive.name} {e}")
            if NAME in archive.name:
                say(f"Skipped {archive}: it {e}.")
    last, latest = (good[0][0], good[0][2]) if good else (None, {})  # the archive uploaded last
    good.sort(key=lambda g: str(g[2].get("built") or ""), reverse=True)  # stable: else the last uploaded first
    here = marker(placed) if placed in copies else {}
    here_v = here.get("version") or "unknown"

    def went_back(used: dict):  # the last upload is not used because it is older: say so, not silently
        if latest and not same_course(latest, used) and built_before(latest, used):
            say(f"{last.name}, the archive uploaded last, holds an older version of the course ({latest['version']}) "
                f"than the one used ({used.get('version') or 'unknown'}): to use it instead, rename the folder "
                f"{placed} (your changes stay in it) and delete the newer archives, then run this cell again.")
    for archive, prefix, mark in good:
        v = mark["version"]
        rest = ", ".join(str(p) for p in copies if p != placed)
        switch = f"{rest} (to use it, delete {archive.name} and {NAME} from {content})" if rest else ""
        if here and same_course(here, mark):
            went_back(here)
            return placed, f"version {here_v}, unpacked earlier from {archive.name}", switch
        if here and built_before(mark, here):  # every archive here is older than the copy in place
            went_back(here)
            return placed, f"version {here_v}, unpacked earlier", switch
        try:
            folder, old = unpack(archive, prefix, content)
        except NotTheCourse as e:
            rejected.append(f"{archive.name} {e}")
            say(f"Skipped {archive}: it {e}.")
            continue
        went_back(mark)
        if old:
            say(f"The copy this replaces (version {here_v}), with any changes you made in it, is kept in {old}.")
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
        raise CourseNotFound(f"`git clone {url}` failed: {' '.join(done.stderr.split())}")
    seen = f" Seen, not usable: {'; '.join(rejected)}." if rejected else ""
    seen += "".join(f" Also, {u}." for u in unreadable)
    raise CourseNotFound(f"The course is not here: looked in {content} for an archive (*.zip) and the folder {NAME}, "
                         f"and in {content / DRIVE} for the folder {NAME}.{seen} Upload {NAME}.zip (`make dist` "
                         "builds it) with the Files panel, or mount Google Drive holding the folder, then run this "
                         "cell again.")
