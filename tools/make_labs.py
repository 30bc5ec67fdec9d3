"""Generate labs/ from solutions/: each solution region becomes a TODO stub.

In solutions/*.ipynb, a region is marked in Python or CUDA by comment lines:

    # BEGIN SOLUTION (stub: threshold = None  # TODO: the release threshold, in bytes)
    threshold = 2**64 - 1
    # END SOLUTION

    // BEGIN SOLUTION (stub: // TODO: allocate buf on `stream` with cudaMallocAsync)
    CHECK(cudaMallocAsync(&buf, bytes, stream));
    // END SOLUTION

The lab gets the stub (or `TODO: write this part`), indented like the marker. Markdown between
<!-- BEGIN SOLUTION --> and <!-- END SOLUTION --> is dropped. The checking cell (tag `check`) gets the
tag `raises-exception` and `expected_exception: LabIncomplete`, so nbval runs the lab and expects the
check to say what is missing. Outputs are cleared.

Each lab carries the marker `metadata.streamalloc` (`generated_from`, a `note` that says to edit the
solution instead, and `cells_sha256`, the hash of the cells this script wrote). A lab whose cells no longer
match that hash was edited by hand (or run and saved): it is not overwritten or deleted without --force.

    python tools/make_labs.py           write labs/ (only files whose content changes)
    python tools/make_labs.py --check   exit 1 if labs/ is not what this script writes
    python tools/make_labs.py --force   write labs/ even over labs edited by hand
"""
from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from streamalloc.course import write_atomically  # noqa: E402  (a file is written whole or not at all)
BEGIN = re.compile(r"^(?P<indent>[ \t]*)(?P<mark>#|//) BEGIN SOLUTION(?: \(stub: (?P<stub>.*)\))?[ \t]*$")
END = re.compile(r"^[ \t]*(#|//) END SOLUTION[ \t]*$")
MD_REGION = re.compile(r"<!-- BEGIN SOLUTION -->.*?<!-- END SOLUTION -->\n?", re.S)


def strip_code(source: str, where: str) -> str:
    out, inside = [], None
    for n, line in enumerate(source.splitlines(), 1):
        m = BEGIN.match(line)
        if m:
            if inside:
                raise ValueError(f"{where}: line {n}: BEGIN SOLUTION inside another region")
            inside = m
            stub = m["stub"] or f"{m['mark']} TODO: write this part"
            out.append(m["indent"] + stub)
        elif END.match(line):
            if not inside:
                raise ValueError(f"{where}: line {n}: END SOLUTION without BEGIN")
            inside = None
        elif not inside:
            out.append(line)
    if inside:
        raise ValueError(f"{where}: a BEGIN SOLUTION region is never closed")
    return "\n".join(out)


MARKER = "streamalloc"  # the key of the lab's notebook metadata that says it is generated


def cells_hash(cells) -> str:
    return hashlib.sha256(json.dumps(cells, sort_keys=True).encode()).hexdigest()


def make_lab(solution: Path):
    nb = nbformat.read(str(solution), as_version=4)
    origin = solution.resolve().relative_to(ROOT).as_posix() if solution.resolve().is_relative_to(ROOT) else solution.name
    regions = 0
    for i, cell in enumerate(nb.cells):
        where = f"{solution.name} cell {i}"
        if cell.cell_type == "code":
            regions += len([ln for ln in cell.source.splitlines() if BEGIN.match(ln)])
            cell.source = strip_code(cell.source, where)
            cell.outputs, cell.execution_count = [], None
            tags = cell.metadata.get("tags", [])
            if "check" in tags:
                cell.metadata["tags"] = [*tags, "raises-exception"]
                cell.metadata["expected_exception"] = "LabIncomplete"
        else:
            cell.source = MD_REGION.sub("", cell.source)
    if not regions:
        raise ValueError(f"{solution.name} has no solution region")
    if not any("check" in c.metadata.get("tags", []) for c in nb.cells):
        raise ValueError(f"{solution.name} has no checking cell (a code cell tagged 'check')")
    nb.metadata[MARKER] = {"generated_from": origin, "generator": "tools/make_labs.py",
                           "note": f"generated from {origin} by tools/make_labs.py: edit that instead",
                           "cells_sha256": cells_hash(nb.cells)}
    return nb


def hand_edited(path: Path, expected_text: str) -> bool:
    """Whether a lab holds edits this script did not make: its cells differ from the hash it was written with
    (or, in a lab from before the marker, from what this script writes now)."""
    try:
        nb = nbformat.reads(path.read_text(), as_version=4)
    except Exception:  # not a notebook any more: certainly not what this script wrote
        return True
    mark = nb.metadata.get(MARKER)
    if isinstance(mark, dict) and "cells_sha256" in mark:
        return cells_hash(nb.cells) != mark["cells_sha256"]
    return nb.cells != nbformat.reads(expected_text, as_version=4).cells


def expected() -> dict[Path, str]:
    return {ROOT / "labs" / s.name: nbformat.writes(make_lab(s)) + "\n"
            for s in sorted((ROOT / "solutions").glob("*.ipynb"))}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="tools/make_labs.py", description="Generate labs/ from solutions/.")
    p.add_argument("--check", action="store_true", help="exit 1 if labs/ is not what this script writes; write nothing")
    p.add_argument("--force", action="store_true", help="overwrite (or delete) labs that were edited by hand")
    a = p.parse_args(argv)
    want = expected()
    have = {p: p.read_text() for p in (ROOT / "labs").glob("*.ipynb")}
    if a.check:
        stale = sorted({p.name for p in want if have.get(p) != want[p]} | {p.name for p in have if p not in want})
        if stale:
            print("These labs are not what tools/make_labs.py writes from solutions/: " + ", ".join(stale))
            return 1
        print(f"labs/ matches solutions/ ({len(want)} labs)")
        return 0
    changes = {p: text for p, text in want.items() if have.get(p) != text}
    removed = [p for p in have if p not in want]
    edited = sorted(p.name for p in [*changes, *removed] if p in have and hand_edited(p, want.get(p, have[p])))
    if edited and not a.force:
        print("Nothing written: these labs hold your own edits, which are kept: " + ", ".join(edited)
              + ". To start one of them again, delete it and run `make labs`.", file=sys.stderr)
        return 1
    (ROOT / "labs").mkdir(exist_ok=True)
    for p in removed:
        p.unlink()
    for p, text in changes.items():
        write_atomically(p, text)
    print(f"wrote {len(changes)} of {len(want)} labs" + (f", removed {len(removed)}" if removed else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
