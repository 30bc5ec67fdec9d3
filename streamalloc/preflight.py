"""The instructor's preflight: does the course run on this machine, and what numbers will it show?

    make preflight        # = python -m streamalloc preflight

It runs every notebook, solution and lab live (with the runner, a progress bar per notebook), then the lessons
(notebooks/, the only ones with key figures and plots) in replay, where the same code gives the reference
recording's figures; without a GPU, everything in replay. Each lesson's key
figures (`lesson.key_figure(name, value, unit, band)`) are paired by name: live / reference should lie in
the figure's band. It writes build/preflight/report.html and report.md: the machine beside the reference,
each notebook's result and time, the key figures with their ratios, the lessons' plots (live beside the
reference), and a one-line verdict. It exits 1 when the course is not ready here; without a GPU it says so
and shows the reference only.

`python -m streamalloc preflight --report-only` writes the report again from what the last run left.
`python -m streamalloc preflight --learners 1,4,8` answers how many learners this GPU holds (streamalloc/learners.py);
the report shows its table.
"""
from __future__ import annotations

import base64
import contextlib
import html
import io
import json
import math
import shutil
import time
from pathlib import Path

from . import gpu, learners, replay, runner
from .course import REPO, notebooks, write_atomically

OUT = REPO / "build" / "preflight"
PASSES = ("live", "replay")
MACHINE_ROWS = [("GPU", "gpu"), ("compute capability", "compute_capability"), ("memory", "memory_total"),
                ("free memory when probed", "memory_free"), ("driver", "driver"),
                ("CUDA the driver supports", "driver_cuda"), ("CUDA runtime (CuPy's)", "runtime"),
                ("CuPy", "cupy"), ("nvcc", "nvcc"), ("compute-sanitizer", "sanitizer"), ("host", "host"),
                ("date", "date")]


# -- running ---------------------------------------------------------------------------------------
def sanitizer_version() -> str | None:
    from . import sanitizer

    path = sanitizer.find()
    return sanitizer.version(path) if path else None


def compared(nbs: list[Path]) -> list[Path]:
    """The notebooks whose reference the report shows: the lessons (notebooks/), the only ones with key figures and
    plots. The solutions and labs have neither: their replay is make test's (nbval), not the preflight's."""
    return [nb for nb in nbs if nb.resolve().parent.name == "notebooks"]


def run_pass(mode: str, out: Path, paths=(), kernel: str = "python3", progress: bool = True,
             env: dict | None = None, jobs: int = 1) -> list[dict]:
    """Run the notebooks in one mode; their key figures go to out/key_figures/<mode>/ (the labs' elsewhere:
    an unsolved lab shares its lesson name with its solution, and would overwrite the solution's figures).
    `paths` may be a list of notebooks; `env`, more of the kernels' environment."""
    nbs = paths if paths and all(Path(p).suffix == ".ipynb" for p in paths) else notebooks(paths)
    labs = [nb for nb in nbs if nb.resolve().parent.name == "labs"]
    groups = [([nb for nb in nbs if nb not in labs], out / "key_figures"), (labs, out / "lab_key_figures")]
    rows = []
    for group, figures in groups:
        if group:
            rows += runner.run(group, out_dir=out / mode / "executed", kernel=kernel, progress=progress,
                               extra_env={"STREAMALLOC_MODE": mode, "STREAMALLOC_KEY_FIGURES": str(figures),
                                          **(env or {})}, jobs=jobs)
    with contextlib.redirect_stdout(io.StringIO()):  # one summary of both groups, not printed a third time
        runner.write_summary(rows, out / mode)
    return rows


def preflight(paths=(), out: Path = OUT, kernel: str = "python3", progress: bool = True) -> int:
    """Run the course live and in replay, write the report; 0 when ready, 1 when not."""
    out = Path(out)
    here = gpu.probe()
    mode = gpu.decide(here)
    for sub in ("live", "replay", "key_figures", "lab_key_figures", "figures"):
        shutil.rmtree(out / sub, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    write_atomically(out / "machine.json", json.dumps(
        {"here": {**here.to_dict(), "sanitizer": sanitizer_version()}, "live": mode.live, "reason": mode.reason,
         "reference": replay.reference(), "started": time.strftime("%Y-%m-%d %H:%M")}, indent=1) + "\n")
    t0 = time.perf_counter()
    nbs = notebooks(paths)
    if mode.live:
        print(f"Preflight, pass 1 of 2: every notebook LIVE on {here.gpu}", flush=True)
        run_pass("live", out, nbs, kernel, progress)
        # the reference's figures and plots: only the lessons have any; their programs compile as the live pass
        # built them (-arch=native: the live pass's builds, found in build/cuda/bin, not built again), since a
        # replay's output comes from the recording whatever the architecture its program was compiled for
        print("Preflight, pass 2 of 2: the lessons (notebooks/) in REPLAY, for the reference's figures", flush=True)
        # after the live pass, so nothing it times shares the CPU; several notebooks at once (nothing is timed)
        run_pass("replay", out, compared(nbs), kernel, progress, env={"STREAMALLOC_ARCH": "native"},
                 jobs=0)
    else:
        print(f"Preflight: no live run, because {mode.reason}. Only the reference is shown.", flush=True)
        print("Preflight, pass 1 of 1: the same notebooks in REPLAY, for the reference's figures", flush=True)
        run_pass("replay", out, nbs, kernel, progress, jobs=0)
    ready, verdict = write_report(out)
    print(f"\nPreflight ({time.perf_counter() - t0:.0f} s): {verdict}\nreport: {out / 'report.html'} "
          f"(and report.md)", flush=True)
    return 0 if ready else 1


def learners_per_gpu(sizes: str | None, paths=(), with_notebooks: bool = False, report_only: bool = False) -> int:
    """`preflight --learners 1,4,8`: how many learners this GPU holds (learners.room); the report of the last preflight
    run, where there is one, is written again with its table. BadLearners for options that do not go together."""
    if sizes is None:
        raise learners.BadLearners("--notebooks goes with --learners K (each learner runs the lessons too)")
    if report_only:
        raise learners.BadLearners("--learners runs the learners; --report-only writes the report of the last run: "
                                   "give one of them")
    status = learners.room(learners.sizes(sizes), learners.to_run(paths, with_notebooks), OUT)
    if (OUT / "machine.json").is_file():
        write_report(OUT)
        print(f"report: {OUT / 'report.html'} (and report.md) shows this table beside the last preflight's results")
    else:
        print(f"written to {OUT / 'learners.json'}; `make preflight` writes the report, which shows it")
    return status


# -- reading what a run left --------------------------------------------------------------------------
def read_figures(folder: Path) -> dict[str, dict]:
    """{lesson: the record lesson.key_figure wrote} from one mode's folder."""
    found = {}
    for path in sorted(Path(folder).glob("*.json")):
        record = json.loads(path.read_text())
        found[record.get("lesson", path.stem)] = record
    return found


def read_rows(out: Path, mode: str) -> list[dict] | None:
    path = out / mode / "summary.json"
    return json.loads(path.read_text()) if path.is_file() else None


def compare(live: dict, ref: dict) -> list[dict]:
    """One row per key figure, live beside reference: ratio live / reference and whether it is in the band."""
    rows = []
    for lesson in sorted(set(live) | set(ref)):
        lf, rf = live.get(lesson, {}).get("figures", {}), ref.get(lesson, {}).get("figures", {})
        for name in list(dict.fromkeys([*rf, *lf])):
            a, b = lf.get(name), rf.get(name)
            spec = a or b
            row = {"lesson": lesson, "figure": name, "unit": spec.get("unit", ""), "band": spec["band"],
                   "live": a and a["value"], "reference": b and b["value"], "ratio": None, "in_band": None,
                   "note": ""}
            if a and b:
                if b["value"] == 0:
                    row["ratio"] = 1.0 if a["value"] == 0 else math.inf
                    row["note"] = "" if a["value"] == 0 else "the reference is 0"
                else:
                    row["ratio"] = a["value"] / b["value"]
                lo, hi = row["band"]
                row["in_band"] = lo <= row["ratio"] <= hi
            elif a:
                row["note"] = "no reference figure of this name (the replay did not record it)"
            elif live:
                row["note"] = "not recorded live (the notebook stopped before it, or failed)"
            rows.append(row)
    return rows


def images(notebook: Path) -> list[tuple[str, bytes]]:
    """The PNG figures of an executed notebook, each keyed by cell and output index."""
    import nbformat

    if not notebook.is_file():
        return []
    found = []
    for i, cell in enumerate(nbformat.read(str(notebook), as_version=4).cells):
        for j, o in enumerate(cell.get("outputs", []) if cell.cell_type == "code" else []):
            png = o.get("data", {}).get("image/png")
            if png:
                found.append((f"cell {i}, output {j}", base64.b64decode(png)))
    return found


# -- the report ---------------------------------------------------------------------------------------
def fmt(v) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        if math.isinf(v):
            return "∞"
        return f"{v:.4g}"
    return str(v)


def gib(v) -> str:
    return f"{v / 2**30:.1f} GiB" if isinstance(v, (int, float)) else fmt(v)


def verdict(live: bool, reason: str, live_rows, replay_rows, figures) -> tuple[bool, str]:
    """(ready, one line): 'ready: ...' or 'not ready: ...' with everything that is not."""
    problems = []
    if not live:
        problems.append(f"there was no live run here ({reason}); the report shows the reference only")
    failed = [r["notebook"] for r in live_rows or [] if r["result"] == "failed"]
    if live and live_rows is None:
        problems.append("the live run left no summary")
    if failed:
        problems.append(f"{len(failed)} of {len(live_rows)} notebooks failed live ({', '.join(failed)})")
    ref_failed = [r["notebook"] for r in replay_rows or [] if r["result"] == "failed"]
    if replay_rows is None:
        problems.append("the reference replay left no summary")
    if ref_failed:
        problems.append(f"the reference replay failed for {', '.join(ref_failed)}, so their figures cannot be "
                        "compared")
    if live:
        out = [f"{f['lesson']}/{f['figure']} ({fmt(f['ratio'])}x, band {f['band'][0]:g}–{f['band'][1]:g})"
               for f in figures if f["in_band"] is False]
        if out:
            problems.append(f"{len(out)} key figure(s) out of band: {'; '.join(out)}")
        unpaired = [f"{f['lesson']}/{f['figure']}" for f in figures if f["in_band"] is None]
        if unpaired:
            problems.append(f"{len(unpaired)} key figure(s) could not be compared: {', '.join(unpaired)}")
    if problems:
        return False, "not ready: " + "; ".join(problems) + "."
    passed = [r for r in live_rows if r["result"] == "passed" and r["mode"] == "live"]
    shown = [r for r in live_rows if r["result"] == "passed" and r["mode"] != "live"]  # too few GPUs here (05b)
    seconds = sum(r["seconds"] for r in live_rows)
    paired = sum(f["in_band"] is True for f in figures)
    figs = (f"all {paired} key figures within their bands of the reference" if paired
            else "no lesson records key figures, so no figure was compared with the reference")
    ran = (f"all {len(passed)} notebooks ran live and passed" if len(passed) == len(live_rows) else
           f"{len(passed)} of {len(live_rows)} notebooks ran live and passed")
    ran += "".join(f"; {r['notebook']} passed on a recording, not live ({r['note'] or 'it needs more GPUs'})"
                   for r in shown)
    unmeasured = "".join(f"; {runner.NOT_MEASURED}: {r['notebook']} ({r['error'] or 'needs more GPUs'})"
                         for r in live_rows if r["result"] == runner.NOT_MEASURED)
    return True, f"ready: {ran} ({seconds:.0f} s in all); {figs}{unmeasured}."


def ratio_plot(figures: list[dict], label: str) -> bytes | None:
    """Each key figure's ratio live / reference on a log axis, its band shaded: one PNG."""
    rows = [f for f in figures if f["ratio"] is not None and math.isfinite(f["ratio"]) and f["ratio"] > 0]
    if not rows:
        return None
    from matplotlib.figure import Figure  # no pyplot: nothing global changes in the caller

    fig = Figure(figsize=(8, 0.45 * len(rows) + 1.4), layout="constrained")
    ax = fig.add_subplot()
    for y, f in enumerate(rows):
        lo, hi = f["band"]
        ax.barh(y, hi - lo, left=lo, height=0.6, color="0.85")
        ax.plot(f["ratio"], y, "o", color="tab:green" if f["in_band"] else "tab:red")
    ax.axvline(1, color="0.4", linewidth=1, linestyle="--")
    ax.set_xscale("log")
    ax.set_yticks(range(len(rows)), [f"{f['lesson']}: {f['figure']}" for f in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("this machine ÷ reference (gray: the expected band)")
    ax.set_title("Key figures beside the reference", fontsize=10)
    fig.text(0.5, -0.01, f"reference: {label}", ha="center", va="top", fontsize=7, color="0.35")
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    return buf.getvalue()


def write_report(out: Path = OUT) -> tuple[bool, str]:
    """Write out/report.md and out/report.html from what a run left in out/; return (ready, verdict)."""
    out = Path(out)
    if not (out / "machine.json").is_file():
        raise FileNotFoundError(f"{out} holds no preflight run to report on: run `make preflight` first")
    info = json.loads((out / "machine.json").read_text())
    live = bool(info["live"])
    here = info["here"]
    ref_name = info.get("reference")
    ref = replay.machine(ref_name).to_dict() if ref_name and (replay.root() / ref_name).is_dir() else {}
    live_rows, replay_rows = read_rows(out, "live") if live else None, read_rows(out, "replay")
    live_figs = read_figures(out / "key_figures" / "live") if live else {}
    ref_figs = read_figures(out / "key_figures" / "replay")
    figures = compare(live_figs, ref_figs)
    ready, line = verdict(live, info.get("reason", ""), live_rows, replay_rows, figures)
    ref_label = next((r.get("label") for r in ref_figs.values() if r.get("label")), None) or (
        f"{ref.get('gpu')}, recorded {ref.get('date')}" if ref else "no reference recording")

    # the plots: each lesson's figures, live beside the reference (the lesson draws the reference into its own
    # live figures where it can), saved as files that both reports show
    fig_dir = out / "figures"
    shutil.rmtree(fig_dir, ignore_errors=True)
    fig_dir.mkdir(parents=True)
    plots = []  # (notebook, where, live file or None, reference file or None)
    ratio_png = ratio_plot(figures, ref_label) if live else None
    if ratio_png:
        (fig_dir / "key_figures.png").write_bytes(ratio_png)
    for nb in sorted((out / "replay" / "executed" / "notebooks").glob("*.ipynb")):
        ref_imgs = dict(images(nb))
        live_imgs = dict(images(out / "live" / "executed" / "notebooks" / nb.name)) if live else {}
        for where in dict.fromkeys([*live_imgs, *ref_imgs]):
            files = []
            for kind, imgs in (("live", live_imgs), ("reference", ref_imgs)):
                if where in imgs:
                    name = f"{nb.stem}-{where.replace(', ', '-').replace(' ', '')}-{kind}.png"
                    (fig_dir / name).write_bytes(imgs[where])
                    files.append(f"figures/{name}")
                else:
                    files.append(None)
            plots.append((nb.stem, where, *files))

    ctx = dict(line=line, ready=ready, live=live, here=here, ref=ref, ref_name=ref_name, ref_label=ref_label,
               live_rows=live_rows, replay_rows=replay_rows, figures=figures, plots=plots,
               ratio=bool(ratio_png), started=info.get("started", ""), reason=info.get("reason", ""),
               learners=learners.read(out))
    write_atomically(out / "report.md", markdown(ctx))  # whole or not at all, as the runner's summary
    write_atomically(out / "report.html", to_html(ctx))
    return ready, line


def _machine_rows(ctx) -> list[tuple[str, str, str]]:
    rows = []
    for title, key in MACHINE_ROWS:
        show = gib if key.startswith("memory") else fmt
        here = show(ctx["here"].get(key))
        if key == "gpu" and not ctx["here"].get("gpu"):
            here = f"no GPU: {ctx['here'].get('problem')}"
        ref = show(ctx["ref"].get(key)) if ctx["ref"] else "–"
        rows.append((title, here, "not recorded" if key == "sanitizer" and ctx["ref"] else ref))
    return rows


def _notebook_rows(ctx) -> list[list[str]]:
    live = {r["notebook"]: r for r in ctx["live_rows"] or []}
    ref = {r["notebook"]: r for r in ctx["replay_rows"] or []}
    rows = []
    for nb in dict.fromkeys([*live, *ref]):
        a, b = live.get(nb), ref.get(nb)
        rows.append([nb, a["result"] if a else "not run", fmt(a["seconds"]) if a else "–",
                     b["result"] if b else "not run" if nb.startswith("notebooks/") or not a else
                     "not replayed (nothing to compare)", fmt(b["seconds"]) if b else "–",
                     (a or {}).get("error") or (b or {}).get("error") or ""])
    return rows


def _figure_rows(ctx) -> list[list[str]]:
    rows = []
    for f in ctx["figures"]:
        ok = {True: "yes", False: "NO", None: "–"}[f["in_band"]]
        rows.append([f["lesson"], f["figure"], f["unit"], fmt(f["live"]) if ctx["live"] else "(no live run)",
                     fmt(f["reference"]), fmt(f["ratio"]), f"{f['band'][0]:g}–{f['band'][1]:g}", ok, f["note"]])
    return rows


LEARNERS_HEAD = "## Learners per GPU (preflight --learners)"
NB_HEAD = ["notebook", "live", "live s", "replay", "replay s", "error"]
FIG_HEAD = ["lesson", "key figure", "unit", "this machine", "reference", "ratio", "band", "in band", "note"]


def _md_table(head, rows) -> str:
    esc = lambda v: str(v).replace("|", "\\|").replace("\n", " ")  # noqa: E731
    return "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
                     + ["| " + " | ".join(esc(v) for v in r) + " |" for r in rows]) + "\n"


def markdown(ctx) -> str:
    md = [f"# Preflight of the course ({ctx['started']})", "", f"**{ctx['line']}**", ""]
    if not ctx["live"]:
        md += [f"No live run: {ctx['reason']}. Every figure below is the reference recording, replayed.", ""]
    md += ["## The machine", "", _md_table(["", "this machine", f"reference ({ctx['ref_name'] or 'none'})"],
                                            _machine_rows(ctx))]
    md += ["## The notebooks", "", "An unsolved lab passes when its check fails as expected (its check cell is "
           "tagged raises-exception).", "", _md_table(NB_HEAD, _notebook_rows(ctx))]
    md += ["## Key figures", "", f"Reference: {ctx['ref_label']}. Ratio = this machine ÷ reference.", ""]
    md += [_md_table(FIG_HEAD, _figure_rows(ctx)) if ctx["figures"] else "No lesson recorded key figures.\n"]
    if ctx["ratio"]:
        md += ["![key figures beside the reference](figures/key_figures.png)", ""]
    md += ["## The lessons' plots", "", "this machine (live; the lesson draws the reference into its figure where "
           "it can) | reference (replay)" if ctx["live"] else "reference (replay) only", ""]
    for nb, where, a, b in ctx["plots"]:
        pics = " ".join(f"![{nb} {where} {k}]({f})" for k, f in (("live", a), ("reference", b)) if f)
        md.append(f"**{nb}**, {where}: {pics}\n")
    if ctx["learners"]:
        md += [LEARNERS_HEAD, "", learners.markdown(ctx["learners"])]
    return "\n".join(md) + "\n"


def to_html(ctx) -> str:
    e = html.escape

    def table(head, rows):
        th = "".join(f"<th>{e(h)}</th>" for h in head)
        body = ""
        for r in rows:
            cls = ' class="bad"' if any(v in ("NO", "failed") for v in r) else ""
            body += f"<tr{cls}>" + "".join(f"<td>{e(str(v))}</td>" for v in r) + "</tr>"
        return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"

    def img(f, alt):
        return f'<img src="{e(f)}" alt="{e(alt)}">' if f else "<em>none</em>"

    plots = "".join(
        f"<tr><td>{e(nb)}<br><small>{e(where)}</small></td>"
        + (f"<td>{img(a, nb + ' live')}</td>" if ctx["live"] else "") + f"<td>{img(b, nb + ' reference')}</td></tr>"
        for nb, where, a, b in ctx["plots"])
    plot_head = "<th>lesson</th>" + ("<th>this machine (live)</th>" if ctx["live"] else "") + "<th>reference (replay)</th>"
    no_live = (f"<p>No live run: {e(ctx['reason'])}. Every figure below is the reference recording, replayed.</p>"
               if not ctx["live"] else "")
    figs = (table(FIG_HEAD, _figure_rows(ctx)) if ctx["figures"] else "<p>No lesson recorded key figures.</p>")
    ratio = '<p><img src="figures/key_figures.png" alt="key figures beside the reference"></p>' if ctx["ratio"] else ""
    room = ""
    if ctx["learners"]:  # preflight --learners: how many learners this GPU holds
        found = ctx["learners"]
        where = f"on {found['gpu']}, live" if found["mode"] == "live" else "on this machine, in replay"
        room = (f"<h2>{e(LEARNERS_HEAD[3:])}</h2>\n<p>Measured {e(found['date'])} {e(where)}: each learner ran "
                f"{len(found['notebooks'])} notebooks, one after another, in a copy of its own; every size's learners "
                "at once.</p>\n"
                + (f"<p><strong>{e(learners.REPLAYED)}.</strong></p>\n" if found["mode"] != "live" else "")
                + table(learners.HEAD, learners.table_rows(found["sizes"]))
                + f"<p><strong>Recommended: {e(found['recommendation'])}.</strong></p>\n"
                + "".join(f"<p>With {s['learners']}, what did not hold:</p><ul>"
                          + "".join(f"<li>{e(p)}</li>" for p in s["problems"]) + "</ul>"
                          for s in found["sizes"] if s["problems"]))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Preflight of the course</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; max-width: 1400px; }}
.verdict {{ padding: .8em 1em; border-radius: 6px; font-weight: bold; }}
.ready {{ background: #e3f6e3; border: 1px solid #4a4; }} .notready {{ background: #fbe4e4; border: 1px solid #c44; }}
table {{ border-collapse: collapse; margin: .5em 0 1.5em; }} td, th {{ border: 1px solid #ccc; padding: .25em .6em;
  text-align: left; vertical-align: top; }} tr.bad td {{ background: #fbe4e4; }}
img {{ max-width: 640px; }}
</style></head><body>
<h1>Preflight of the course <small>({e(ctx['started'])})</small></h1>
<p class="verdict {'ready' if ctx['ready'] else 'notready'}" id="verdict">{e(ctx['line'])}</p>
{no_live}
<h2>The machine</h2>
{table(["", "this machine", f"reference ({ctx['ref_name'] or 'none'})"], _machine_rows(ctx))}
<h2>The notebooks</h2>
<p>An unsolved lab passes when its check fails as expected (its check cell is tagged raises-exception).</p>
{table(NB_HEAD, _notebook_rows(ctx))}
<h2>Key figures</h2>
<p>Reference: {e(ctx['ref_label'])}. Ratio = this machine ÷ reference.</p>
{figs}
{ratio}
<h2>The lessons' plots</h2>
<table><thead><tr>{plot_head}</tr></thead><tbody>{plots}</tbody></table>
{room}
</body></html>
"""
