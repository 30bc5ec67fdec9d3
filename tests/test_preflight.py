"""The instructor's preflight report, on canned runs: ready; a figure out of band; a failed notebook; no GPU.
And lesson.key_figure, which writes what the preflight reads."""
import base64
import io
import json
import subprocess
import sys

import nbformat
import pytest

from streamalloc import lesson as lesson_mod
from streamalloc import preflight, replay, runner

LABEL = "NVIDIA H100 80GB HBM3, replayed from a recording of 2026-11-22"
NOTEBOOKS = ["notebooks/01_sync_vs_async.ipynb", "notebooks/03_pools.ipynb", "labs/lab1_stream_ordered.ipynb"]


def png(color) -> str:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(1, 1))
    fig.add_subplot().plot([0, 1], [0, 1], color=color)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return base64.b64encode(buf.getvalue()).decode()


def executed(path, color):
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("plot()", execution_count=1)
    cell.outputs = [nbformat.v4.new_output("display_data", data={"image/png": png(color), "text/plain": "<Figure>"})]
    nb.cells.append(cell)
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(path))


def canned(out, live=True, figures_live=None, figures_ref=None, failed=()):
    """A preflight folder as a run leaves it: machine.json, summaries, key figures, executed notebooks."""
    here = {"gpu": "Tesla T4", "compute_capability": "7.5", "memory_total": 15 * 2**30, "driver": "550.54",
            "driver_cuda": "12.4", "runtime": "12.8", "cupy": "14.0.0", "nvcc": "12.8", "sanitizer": "2025.1.0"}
    if not live:
        here = {"gpu": None, "problem": "CuPy found no usable CUDA driver or GPU", "nvcc": "13.0", "cupy": "14.2.0"}
    out.mkdir(parents=True, exist_ok=True)
    (out / "machine.json").write_text(json.dumps({
        "here": here, "live": live, "reason": "Tesla T4 supports memory pools" if live else "there is no usable GPU",
        "reference": "nvidia-h100-80gb-hbm3", "started": "2026-11-23 10:00"}))
    for mode, figs in (("live", figures_live), ("replay", figures_ref)):
        if mode == "live" and not live:
            continue
        rows = [{"notebook": nb, "mode": mode, "result": "failed" if (mode, nb) in failed else "passed",
                 "seconds": 12.5, "error": "cell 3: RuntimeError: boom" if (mode, nb) in failed else ""}
                for nb in NOTEBOOKS]
        (out / mode).mkdir(parents=True, exist_ok=True)
        (out / mode / "summary.json").write_text(json.dumps(rows))
        for lesson, values in (figs or {}).items():
            folder = out / "key_figures" / mode
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{lesson}.json").write_text(json.dumps({
                "lesson": lesson, "mode": mode, "label": LABEL if mode == "replay" else "Tesla T4, live",
                "figures": {name: {"value": v, "unit": "µs", "band": [0.5, 2.0]} for name, v in values.items()}}))
        for nb in ("01_sync_vs_async", "03_pools"):
            executed(out / mode / "executed" / "notebooks" / f"{nb}.ipynb", "red" if mode == "live" else "blue")


REF = {"01_sync_vs_async": {"pool hit at 4 MiB": 0.5, "speedup at 4 MiB": 20.0}, "03_pools": {"granule": 2.0}}


def test_ready(tmp_path):
    canned(tmp_path, figures_live={"01_sync_vs_async": {"pool hit at 4 MiB": 0.8, "speedup at 4 MiB": 12.0},
                                   "03_pools": {"granule": 2.0}}, figures_ref=REF)
    ready, line = preflight.write_report(tmp_path)
    assert ready and line.startswith("ready: all 3 notebooks ran live") and "3 key figures within" in line
    md = (tmp_path / "report.md").read_text()
    assert "| 01_sync_vs_async | pool hit at 4 MiB | µs | 0.8 | 0.5 | 1.6 | 0.5–2 | yes |" in md
    assert "Tesla T4" in md and "NVIDIA H100 80GB HBM3" in md and "2025.1.0" in md
    html = (tmp_path / "report.html").read_text()
    assert 'class="verdict ready"' in html and "figures/key_figures.png" in html
    # the lessons' plots: live beside the reference, each saved once
    assert (tmp_path / "figures" / "key_figures.png").is_file()
    assert (tmp_path / "figures" / "03_pools-cell0-output0-live.png").read_bytes() != \
        (tmp_path / "figures" / "03_pools-cell0-output0-reference.png").read_bytes()


def test_a_figure_out_of_band(tmp_path):
    canned(tmp_path, figures_live={"01_sync_vs_async": {"pool hit at 4 MiB": 0.5, "speedup at 4 MiB": 4.0},
                                   "03_pools": {"granule": 2.0}}, figures_ref=REF)
    ready, line = preflight.write_report(tmp_path)
    assert not ready
    assert "1 key figure(s) out of band: 01_sync_vs_async/speedup at 4 MiB (0.2x, band 0.5–2)" in line
    assert "| speedup at 4 MiB | µs | 4 | 20 | 0.2 | 0.5–2 | NO |" in (tmp_path / "report.md").read_text()
    assert '<tr class="bad">' in (tmp_path / "report.html").read_text()


def test_a_figure_without_its_reference_is_not_compared(tmp_path):
    canned(tmp_path, figures_live={**REF, "03_pools": {"granule": 2.0, "new figure": 1.0}}, figures_ref=REF)
    ready, line = preflight.write_report(tmp_path)
    assert not ready and "could not be compared: 03_pools/new figure" in line


def test_a_failed_notebook(tmp_path):
    canned(tmp_path, figures_live=REF, figures_ref=REF, failed={("live", "notebooks/03_pools.ipynb")})
    ready, line = preflight.write_report(tmp_path)
    assert not ready and "1 of 3 notebooks failed live (notebooks/03_pools.ipynb)" in line
    assert "cell 3: RuntimeError: boom" in (tmp_path / "report.md").read_text()


def test_a_failed_reference_replay(tmp_path):
    canned(tmp_path, figures_live=REF, figures_ref=REF, failed={("replay", "notebooks/01_sync_vs_async.ipynb")})
    ready, line = preflight.write_report(tmp_path)
    assert not ready and "the reference replay failed for notebooks/01_sync_vs_async.ipynb" in line


def test_no_gpu_shows_the_reference_only(tmp_path):
    canned(tmp_path, live=False, figures_ref=REF)
    ready, line = preflight.write_report(tmp_path)
    assert not ready and line.startswith("not ready: there was no live run here (there is no usable GPU)")
    md = (tmp_path / "report.md").read_text()
    assert "no GPU: CuPy found no usable CUDA driver or GPU" in md
    assert "| 01_sync_vs_async | speedup at 4 MiB | µs | (no live run) | 20 | – | 0.5–2 | – |" in md
    assert "reference (replay) only" in md and "-live.png" not in md
    assert not (tmp_path / "figures" / "key_figures.png").exists()
    assert (tmp_path / "figures" / "03_pools-cell0-output0-reference.png").is_file()


def test_no_lesson_records_figures(tmp_path):
    canned(tmp_path)
    ready, line = preflight.write_report(tmp_path)
    assert ready and "no lesson records key figures, so no figure was compared" in line


def test_a_zero_reference():
    rows = preflight.compare({"a": {"figures": {"x": {"value": 1.0, "band": [0.5, 2]}, "y": {"value": 0.0, "band": [0.5, 2]}}}},
                             {"a": {"figures": {"x": {"value": 0.0, "band": [0.5, 2]}, "y": {"value": 0.0, "band": [0.5, 2]}}}})
    assert [(r["figure"], r["in_band"]) for r in rows] == [("x", False), ("y", True)]


def test_report_only_without_a_run(tmp_path):
    with pytest.raises(FileNotFoundError, match="run `make preflight` first"):
        preflight.write_report(tmp_path / "nothing")


def test_key_figure_writes_what_the_preflight_reads(tmp_path, monkeypatch):
    monkeypatch.setenv("STREAMALLOC_KEY_FIGURES", str(tmp_path))
    monkeypatch.setenv("STREAMALLOC_MODE", "replay")
    monkeypatch.chdir(tmp_path)
    lesson = lesson_mod.start("03_pools", quiet=True)
    assert lesson.key_figure("granule", 2097152, "bytes", band=(0.5, 2)) is None  # a statement: shows nothing
    lesson.key_figure("cost", 1.5)
    record = preflight.read_figures(tmp_path / "replay")["03_pools"]
    assert record["mode"] == "replay" and "replayed" in record["label"]
    assert record["figures"]["granule"] == {"value": 2097152.0, "unit": "bytes", "band": [0.5, 2.0]}
    assert set(record["figures"]) == {"granule", "cost"}
    lesson_mod.start("03_pools", quiet=True).key_figure("cost", 2.0)  # a new start begins the file afresh
    assert set(preflight.read_figures(tmp_path / "replay")["03_pools"]["figures"]) == {"cost"}
    for bad, band in ((float("nan"), (0.5, 2)), ("3", (0.5, 2)), (True, (0.5, 2)), (1.0, (2, 1)), (1.0, (0, 2))):
        with pytest.raises(ValueError):
            lesson.key_figure("bad", bad, band=band)


def test_the_runner_kernels_print_no_tcp_warning(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells.append(nbformat.v4.new_code_cell("x = 1"))
    nbformat.write(nb, str(tmp_path / "t.ipynb"))
    code = (f"from streamalloc import runner; rows = runner.run([{str(tmp_path / 't.ipynb')!r}], "
            f"out_dir={str(tmp_path / 'out' / 'executed')!r}, progress=False); assert rows[0]['result'] == 'passed'")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=runner.REPO)
    assert done.returncode == 0, done.stderr
    assert "without encryption" not in done.stdout + done.stderr


def test_a_lesson_that_needs_two_gpus_is_reported_not_measured_not_passed(tmp_path):
    canned(tmp_path, figures_live=REF, figures_ref=REF)
    for mode in ("live", "replay"):
        rows = json.loads((tmp_path / mode / "summary.json").read_text())
        rows.append({"notebook": "notebooks/05b_two_gpus.ipynb", "mode": mode, "result": runner.NOT_MEASURED,
                     "seconds": 3.0, "error": "needs 2 GPUs: this lesson has not yet run on 2 GPUs"})
        (tmp_path / mode / "summary.json").write_text(json.dumps(rows))
    ready, line = preflight.write_report(tmp_path)
    assert ready and "3 of 4 notebooks ran live and passed" in line, line
    assert "not measured: notebooks/05b_two_gpus.ipynb (needs 2 GPUs" in line and "all 4" not in line
    assert "| notebooks/05b_two_gpus.ipynb | not measured |" in (tmp_path / "report.md").read_text()


def test_a_lesson_shown_from_a_recording_is_not_counted_as_run_live(tmp_path):
    """05b on a one-GPU machine passes on its two-GPU recording: the verdict says so, never that it ran live."""
    canned(tmp_path, figures_live=REF, figures_ref=REF)
    rows = json.loads((tmp_path / "live" / "summary.json").read_text())
    rows.append({"notebook": "notebooks/05b_two_gpus.ipynb", "mode": "replay", "result": "passed", "seconds": 4.0,
                 "error": "", "note": replay.REPLAYED_HERE + "needs 2 GPUs, this machine has 1"})
    (tmp_path / "live" / "summary.json").write_text(json.dumps(rows))
    ready, line = preflight.write_report(tmp_path)
    assert ready and "3 of 4 notebooks ran live and passed" in line and "all 4" not in line, line
    assert "notebooks/05b_two_gpus.ipynb passed on a recording, not live (replayed, not run live: needs 2 GPUs" in line


def test_a_pass_leaves_the_callers_environment_as_it_was(tmp_path, monkeypatch):
    import os
    seen = []
    monkeypatch.setattr(runner, "run", lambda group, **kw: seen.append(kw["extra_env"]) or [])
    monkeypatch.setattr(runner, "write_summary", lambda rows, where: "")
    monkeypatch.delenv("STREAMALLOC_MODE", raising=False)
    before = dict(os.environ)
    preflight.run_pass("live", tmp_path, [runner.REPO / "notebooks" / "00_setup.ipynb"])
    assert dict(os.environ) == before and seen[0]["STREAMALLOC_MODE"] == "live"


def test_live_the_replay_pass_runs_only_the_lessons_it_compares_with_the_live_passs_builds(tmp_path, monkeypatch):
    """Only notebooks/ record key figures and plots: the replay pass runs those, not the solutions and labs (make test
    replays them), and builds for -arch=native as the live pass did, so it finds the live pass's programs built."""
    runs = []
    monkeypatch.setattr(preflight.gpu, "decide", lambda here: preflight.gpu.Mode(True, "a GPU with pools"))
    monkeypatch.setattr(preflight, "sanitizer_version", lambda: None)
    monkeypatch.setattr(runner, "run", lambda group, **kw: runs.append((kw["extra_env"], group)) or [])
    monkeypatch.setattr(runner, "write_summary", lambda rows, where: "")
    monkeypatch.setattr(preflight, "write_report", lambda out: (True, "ready"))
    assert preflight.preflight(out=tmp_path, progress=False) == 0
    live = [nb for env, group in runs if env["STREAMALLOC_MODE"] == "live" for nb in group]
    replayed = [(env, nb) for env, group in runs if env["STREAMALLOC_MODE"] == "replay" for nb in group]
    assert {nb.parent.name for nb in live} == {"notebooks", "solutions", "labs"}
    assert [nb for _, nb in replayed] == [nb for nb in live if nb.parent.name == "notebooks"]
    assert all(env["STREAMALLOC_ARCH"] == "native" for env, _ in replayed)
    ctx = {"live_rows": [{"notebook": "solutions/lab1.ipynb", "result": "passed", "seconds": 1.0, "error": ""}],
           "replay_rows": []}
    assert preflight._notebook_rows(ctx)[0][3] == "not replayed (nothing to compare)"
