"""Where two GPU models differ: every lesson's key figures replayed from two sets of recordings, side by side.

    python tools/compare_models.py [A B]      (default: the default reference and the other model's CUDA 13 set)

Each lesson of notebooks/ whose programs both sets recorded as they are now is run in replay from A, then from B
(streamalloc.preflight.run_pass: the figures the lessons report with lesson.key_figure), and
reports/models/<A>-vs-<B>.md gets one table: each figure, its value from each set, and B / A. A lesson that one set
cannot replay (a program changed since that set was recorded) is named, not compared. Writes only under build/ and
that one report. Nothing here is typed in: every value is what the lesson computed from the recording.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from streamalloc import preflight, replay, stacks  # noqa: E402
from streamalloc.course import REPO  # noqa: E402


def figures(set_name: str, out: Path) -> tuple[dict, list[str]]:
    """{lesson: {figure: (value, unit)}} replayed from one set, and the notebooks that failed there."""
    nbs = sorted((REPO / "notebooks").glob("*.ipynb"))
    rows = preflight.run_pass("replay", out, nbs, progress=False, env={"STREAMALLOC_REFERENCE": set_name},
                              jobs=min(4, os.cpu_count() or 1))
    failed = [Path(r["notebook"]).stem for r in rows if r.get("result") != "passed"]
    found = {}
    for f in sorted((out / "key_figures" / "replay").glob("*.json")):
        data = json.loads(f.read_text())
        found[data["lesson"]] = {k: (v["value"], v.get("unit", "")) for k, v in data["figures"].items()}
    return found, failed


def table(a: str, b: str, fa: dict, fb: dict, failed: dict) -> str:
    ma, mb = replay.machine(a), replay.machine(b)
    out = [f"# Two GPU models, one course: {ma.gpu} beside {mb.gpu}", "",
           f"Written by `tools/compare_models.py {a} {b}` on {time.strftime('%Y-%m-%d')}: every lesson replayed from "
           f"`recordings/{a}/` ({ma.gpu}, driver {ma.driver}, nvcc {ma.nvcc}, {ma.cupy_package} {ma.cupy}, recorded "
           f"{ma.date}) and from `recordings/{b}/` ({mb.gpu}, driver {mb.driver}, nvcc {mb.nvcc}, {mb.cupy_package} "
           f"{mb.cupy}, recorded {mb.date}); each value is the lesson's own key figure (`lesson.key_figure`), computed "
           "from that set's recording. A ratio far from 1 is where the models (or the day's machine) differ.", "",
           f"| lesson | figure | {a} | {b} | {b} / {a} |", "|---|---|---|---|---|"]
    for lesson in sorted(set(fa) & set(fb)):
        for name in sorted(set(fa[lesson]) & set(fb[lesson])):
            (va, unit), (vb, _) = fa[lesson][name], fb[lesson][name]
            ratio = f"{vb / va:.2f}" if va else "n/a"
            out.append(f"| {lesson} | {name} | {va:.4g} {unit} | {vb:.4g} {unit} | {ratio} |")
    for s, names in failed.items():
        if names:
            out += ["", f"Not compared, not replayable from `{s}` (a program changed since it was recorded there): "
                        + ", ".join(names) + "."]
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) not in (0, 2) or any(a.startswith("-") for a in argv):
        print("usage: python tools/compare_models.py [SET_A SET_B]", file=sys.stderr)
        return 2
    others = [s for s in replay.available()
              if replay.another_model(s) and stacks.of_machine(replay.machine(s)) == stacks.REFERENCE]
    a, b = argv or [replay.DEFAULT_REFERENCE, others[0] if others else ""]
    missing = [s for s in (a, b) if s not in replay.available()]
    if missing:
        print(f"no such set of recordings: {', '.join(m or '(no set of another model)' for m in missing)}", file=sys.stderr)
        return 2
    build = REPO / "build" / "compare-models"
    fa, failed_a = figures(a, build / a)
    fb, failed_b = figures(b, build / b)
    report = REPO / "reports" / "models" / f"{a}-vs-{b}.md"
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(table(a, b, fa, fb, {a: failed_a, b: failed_b}))
    print(f"wrote {report.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
