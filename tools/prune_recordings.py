"""Drop, from a set of recordings of another GPU model, every run of a program that has changed since it was
recorded: such a set (replay.another_model) keeps recordings of the programs as they are now and nothing else.

    python tools/prune_recordings.py SET [--check]

SET is a folder name under recordings/ (for example nvidia-h100-80gb-hbm3). A run is kept when its program_sha is
the meaning (replay.program_meaning) of a program that a notebook, solution or lab of that lesson writes now, or when
it names no program (a measurement made from Python, keyed by its source). A file left without runs is removed.
`--check` writes nothing and exits 1 when something would be dropped. Writes only under recordings/SET/.
"""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from streamalloc import replay  # noqa: E402
from streamalloc.course import FOLDERS, REPO, lesson_of, written_files, write_atomically  # noqa: E402


def current(where: Path) -> dict[str, set[str]]:
    """lesson -> the program_sha of every program its notebooks write now (headers beside them counted)."""
    shas: dict[str, set[str]] = {}
    for folder in FOLDERS:
        for nb in sorted((REPO / folder).glob("*.ipynb")):
            lesson = lesson_of(nb)
            if not lesson:
                continue
            out = where / folder / nb.stem
            out.mkdir(parents=True, exist_ok=True)
            files = {}
            for _, name, text in written_files(nb):
                (out / name).write_text(text)
                files[name] = out / name
            shas.setdefault(lesson, set()).update(
                replay.source_hash(replay.program_meaning(f)) for f in files.values())
    return shas


def stale_runs(set_dir: Path, shas: dict[str, set[str]]) -> dict[Path, list[str]]:
    """file -> the keys of its runs whose program changed since."""
    out = {}
    for f in sorted(set_dir.glob("*/*.json")):
        if f.name == "machine.json":
            continue
        now = shas.get(f.parent.name, set())
        old = [k for k, r in replay.read_runs(f).items() if r.get("program_sha") and r["program_sha"] not in now]
        if old:
            out[f] = old
    return out


def main(argv: list[str]) -> int:
    args = [a for a in argv if a != "--check"]
    unknown = [a for a in args if a.startswith("-")]
    if unknown or len(args) != 1:
        print(f"usage: python tools/prune_recordings.py SET [--check]{'  (unknown: ' + ' '.join(unknown) + ')' if unknown else ''}",
              file=sys.stderr)
        return 2
    set_dir = replay.root() / args[0]
    if not (set_dir / "machine.json").is_file():
        print(f"{set_dir}: not a set of recordings (no machine.json)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        found = stale_runs(set_dir, current(Path(tmp)))
    for f, keys in found.items():
        print(f"{f.relative_to(replay.root())}: {len(keys)} run(s) of a program changed since")
        if "--check" in argv:
            continue
        runs = {k: r for k, r in replay.read_runs(f).items() if k not in keys}
        if runs:
            write_atomically(f, json.dumps({"runs": runs}, indent=1, sort_keys=True) + "\n")
        else:
            f.unlink()
    return 1 if found and "--check" in argv else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
