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

    python tools/make_labs.py           write labs/
    python tools/make_labs.py --check   exit 1 if labs/ is not what this script writes
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
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


def make_lab(solution: Path):
    nb = nbformat.read(str(solution), as_version=4)
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
    return nb


def expected() -> dict[Path, str]:
    return {ROOT / "labs" / s.name: nbformat.writes(make_lab(s)) + "\n"
            for s in sorted((ROOT / "solutions").glob("*.ipynb"))}


def main(argv) -> int:
    want = expected()
    have = {p: p.read_text() for p in (ROOT / "labs").glob("*.ipynb")}
    if "--check" in argv:
        stale = sorted({p.name for p in want if have.get(p) != want[p]} | {p.name for p in have if p not in want})
        if stale:
            print("labs/ is not generated from solutions/ (run `make labs`): " + ", ".join(stale))
            return 1
        print(f"labs/ matches solutions/ ({len(want)} labs)")
        return 0
    (ROOT / "labs").mkdir(exist_ok=True)
    for p in have:
        if p not in want:
            p.unlink()
    for p, text in want.items():
        p.write_text(text)
    print(f"wrote {len(want)} labs")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
