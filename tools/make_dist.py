"""Build the course as one self-contained archive, for Colab or any machine without git:
build/dist/stream-ordered-allocator.zip, holding the folder stream-ordered-allocator/ with the notebooks, labs,
solutions, the helper package, recordings, tests, tools, Makefile, requirements and README.

On Colab, upload it to /content (the Files panel) and run any notebook's first cell: it unpacks the archive
and finds the course there (README.md, "Opening it").

    python tools/make_dist.py                 write build/dist/stream-ordered-allocator.zip
    python tools/make_dist.py --out DIR       write DIR/stream-ordered-allocator.zip instead

The files are git's tracked files as they are in the working tree (or, outside a git checkout, every file but
build outputs). The archive is written to a temporary name and renamed, so a failed build leaves no half archive.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
from make_links import NAME  # noqa: E402  the folder name the notebooks' set-up lines look for

NEEDED = ["README.md", "Makefile", "requirements.txt", "environment.yml", "conftest.py", "pytest.ini",
          "streamalloc/__init__.py", "streamalloc/include/course.cuh", "notebooks", "labs", "solutions", "recordings",
          "tests", "tools/make_links.py"]
SKIP_DIRS = {".git", "build", ".venv", ".site", "__pycache__", ".ipynb_checkpoints", ".pytest_cache"}


def course_files(root: Path = ROOT) -> list[str]:
    """The files that make the course, relative to root, sorted."""
    if (root / ".git").exists():
        done = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root, capture_output=True, text=True)
        if done.returncode == 0:
            return sorted(p for p in done.stdout.split("\0") if p and (root / p).is_file())
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        files += [str((Path(dirpath) / f).relative_to(root)) for f in filenames if not f.endswith(".pyc")]
    return sorted(files)


def build(out_dir: Path, root: Path = ROOT) -> Path:
    files = course_files(root)
    missing = [n for n in NEEDED if n not in files and not any(f.startswith(n + "/") for f in files)]
    if missing:
        raise SystemExit(f"make_dist: the course is incomplete, missing: {', '.join(missing)}")
    out_dir.mkdir(parents=True, exist_ok=True)
    archive = out_dir / f"{NAME}.zip"
    tmp = archive.with_name(archive.name + f".tmp{os.getpid()}")
    try:
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
            for f in files:
                z.write(root / f, f"{NAME}/{f}")
        tmp.replace(archive)
    finally:
        tmp.unlink(missing_ok=True)
    return archive


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="tools/make_dist.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "dist", help="folder for the archive")
    args = parser.parse_args(argv)
    archive = build(args.out)
    with zipfile.ZipFile(archive) as z:
        n = len(z.namelist())
    print(f"wrote {archive} ({n} files, {archive.stat().st_size / 2**20:.1f} MiB): upload it to Colab's /content "
          "and run a notebook's first cell")
    return 0


if __name__ == "__main__":
    sys.exit(main())
