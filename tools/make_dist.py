"""Build the course as one self-contained archive, for Colab or any machine without git:
build/dist/stream-ordered-allocator.zip, holding the folder stream-ordered-allocator/ with the notebooks, labs,
solutions, the helper package, recordings, tests, tools, Makefile, requirements and README.

On Colab, upload it to /content (the Files panel) and run any notebook's first cell: it unpacks the archive
and finds the course there (README.md, "Opening it").

    python tools/make_dist.py                 write build/dist/stream-ordered-allocator.zip
    python tools/make_dist.py --out DIR       write DIR/stream-ordered-allocator.zip instead
    python tools/make_dist.py --allow-edits   pack labs edited in place too (said aloud, naming them)

A lab edited in place (runner.edited_lab: its cells differ from those tools/make_labs.py wrote), most often one the
instructor solved, would hand its solution to every learner: the build refuses it, naming the labs, unless
--allow-edits says that is meant. It runs with the course's Python (`make dist` uses .venv), which reads notebooks.

The files are the ones git tracks (`git ls-files`), as they are in the working tree: nothing else lying in the
folder is shipped; outside a git checkout, every file but build outputs and hidden files (.env, .netrc, .ssh/: a
secret is most often one), which it names aloud, as it says that every other file goes in. The sample reports' images
(reports/*/figures/) stay out: they are most of the folder's size, and the report's text says what they showed.
Beside them it writes the marker file stream-ordered-allocator/course-version.json, {"course": ..., "version":
..., "built": ..., "content": ...}: the first cell checks an archive by it (streamalloc/colab.py), knows a rebuild
of the same files by "content" (a hash of the files) and an older archive by "built" (UTC, ISO 8601). The archive
is written to a temporary name and renamed, so a failed build leaves no half archive.
"""
from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(1, str(ROOT))
from make_links import NAME  # noqa: E402  the folder name the notebooks' set-up lines look for

MARKER = "course-version.json"  # streamalloc/colab.py's MARKER: the first cell checks an archive by it

NEEDED = ["README.md", "Makefile", "requirements.txt", "environment.yml", "conftest.py", "pytest.ini",
          "streamalloc/__init__.py", "streamalloc/include/course.cuh", "notebooks", "labs", "solutions", "recordings",
          "tests", "tools/make_links.py", "streamalloc/colab.py"]
LEFT_OUT = ("reports/*/figures/*",)  # the sample reports' images (3 of the 3.7 MiB); their text stays
SKIP_DIRS = {".git", "build", ".venv", ".site", "__pycache__", ".ipynb_checkpoints", ".pytest_cache"}


def course_files(root: Path = ROOT) -> list[str]:
    """The files that make the course, relative to root, sorted."""
    if (root / ".git").exists():
        # a checkout whose list git refuses is never packed whole: every file would include secrets and stray files
        try:
            done = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, text=True)
            why = (done.stderr.strip().splitlines() or [""])[0] if done.returncode else ""
        except OSError as e:
            done, why = None, f"git cannot be run: {e.strerror or e}"
        if done is None or done.returncode != 0:
            fix = (f"git refuses a folder that another user owns: run `git config --global --add safe.directory "
                   f"{root}` (or build as the folder's owner)" if "dubious ownership" in why else
                   "fix what git says")
            raise SystemExit(f"make_dist: git cannot list the course's files in {root} ({why or 'no reason given'}), "
                             "and without that list every file in the folder would be packed; nothing was written. "
                             f"{fix[0].upper() + fix[1:]}, then run it again.")
        return sorted(p for p in done.stdout.split("\0")
                      if p and (root / p).is_file() and not any(Path(p).match(g) for g in LEFT_OUT))
    files, hidden = [], []
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath).relative_to(root)
        hidden += [str(here / n) for n in sorted(dirnames + filenames) if n.startswith(".") and n not in SKIP_DIRS]
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
        files += [str(here / f) for f in filenames if not f.endswith(".pyc") and not f.startswith(".")]
    files = sorted(f for f in files if not any(Path(f).match(g) for g in LEFT_OUT))
    print(f"make_dist: WARNING: {root} is not a git checkout, so nothing says which files are the course's: packing "
          f"every file in it ({len(files)}) but build outputs and hidden files"
          + (f"; left out: {', '.join(hidden)}" if hidden else ""), file=sys.stderr)
    return files


def content_hash(files: list[str], root: Path = ROOT) -> str:
    """A hash of the files' names and bytes: a rebuild of the same files has the same one, so the first cell does
    not unpack it over a copy the learner may have edited."""
    h = hashlib.sha256()
    for f in files:
        data = (root / f).read_bytes()
        h.update(f"{f}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


def version(root: Path = ROOT, now: datetime.datetime | None = None) -> str:
    """When the archive was built, and from which commit ("2026-11-25 14:02 UTC, commit de16522")."""
    built = (now or datetime.datetime.now(datetime.timezone.utc)).strftime("%Y-%m-%d %H:%M:%S UTC")
    commit = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=root, capture_output=True, text=True)
    if commit.returncode != 0:
        return built
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root, capture_output=True,
                           text=True).stdout.strip()
    return f"{built}, commit {commit.stdout.strip()}" + (" with changes not committed" if dirty else "")


def build(out_dir: Path, root: Path = ROOT, allow_edits: bool = False) -> Path:
    files = course_files(root)
    missing = [n for n in NEEDED if n not in files and not any(f.startswith(n + "/") for f in files)]
    if missing:
        raise SystemExit(f"make_dist: the course is incomplete, missing: {', '.join(missing)}")
    from streamalloc.runner import edited_labs, edited_said

    edited = edited_labs(files, root)
    if edited and not allow_edits:
        raise SystemExit(f"make_dist: {edited_said(edited)}, or pass --allow-edits (make dist DIST_ARGS=--allow-edits) "
                         f"to pack {'it' if len(edited) == 1 else 'them'} as {'it is' if len(edited) == 1 else 'they are'}"
                         ": the archive would hand that to every learner; nothing was written.")
    if edited:
        print(f"make_dist: WARNING: packing {len(edited)} lab{'s' if len(edited) > 1 else ''} edited in place, as "
              f"--allow-edits asks: {', '.join(edited)}", file=sys.stderr)
    out_dir.mkdir(parents=True, exist_ok=True)
    archive = out_dir / f"{NAME}.zip"
    tmp = archive.with_name(archive.name + f".tmp{os.getpid()}")
    try:
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
            for f in files:
                z.write(root / f, f"{NAME}/{f}")
            now = datetime.datetime.now(datetime.timezone.utc)
            mark = {"course": NAME, "version": version(root, now), "built": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
                    "content": content_hash(files, root)}
            z.writestr(f"{NAME}/{MARKER}", json.dumps(mark, indent=1) + "\n")
        tmp.replace(archive)
    finally:
        tmp.unlink(missing_ok=True)
    return archive


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="tools/make_dist.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "dist", help="folder for the archive")
    parser.add_argument("--allow-edits", action="store_true",
                        help="pack labs edited in place (a solved lab hands its solution to every learner)")
    args = parser.parse_args(argv)
    archive = build(args.out, allow_edits=args.allow_edits)
    with zipfile.ZipFile(archive) as z:
        n = len(z.namelist())
    print(f"wrote {archive} ({n} files, {archive.stat().st_size / 2**20:.1f} MiB): upload it to Colab's /content "
          "and run a notebook's first cell")
    return 0


if __name__ == "__main__":
    sys.exit(main())
