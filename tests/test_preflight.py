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
from streamalloc import course, preflight, runner, verdict

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
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=course.REPO)
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
                 "error": "", "note": verdict.REPLAYED_HERE + "needs 2 GPUs, this machine has 1"})
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
    preflight.run_pass("live", tmp_path, [course.REPO / "notebooks" / "00_setup.ipynb"])
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


# -- preflight --learners: how many learners this GPU holds --------------------------------------------------------
from streamalloc import cli, learners  # noqa: E402

LAB = ["solutions/lab2_tune_pool.ipynb", "labs/lab2_tune_pool.ipynb"]


def learner(rows=None, unverified=(), seconds=80.0, failed=(), missing=False):
    """What one copy left, as learners.run_size reads it: its summary's rows, its time, the unverified solutions."""
    if missing:
        return {"rows": None, "seconds": seconds, "status": 2, "log": "Traceback ...\nOSError: no space left on device",
                "unverified": []}
    rows = [{"notebook": nb, "mode": "live", "result": "failed" if nb in failed else "passed", "seconds": 10.0,
             "error": "cell 9 of 9 (# The check): the cell is tagged raises-exception but raised nothing"
             if nb in failed else "", "note": "", "shared_with": 3} for nb in LAB]
    return {"rows": rows, "seconds": seconds, "status": 1 if failed else 0, "log": "", "unverified": list(unverified)}


def canned_room():
    """One learner alone; four, one of whose solutions passed all but a timing (shared GPU); eight, one stub's check
    not raising."""
    return [learners.judge(1, [learner(seconds=86.0)], LAB, 86.0),
            learners.judge(4, [learner(seconds=120.0)] * 3 + [learner(unverified=[LAB[0]], seconds=129.0)], LAB, 129.0),
            learners.judge(8, [learner(seconds=170.0)] * 7 + [learner(failed=[LAB[1]], seconds=172.0)], LAB, 172.0)]


def test_learners_table_and_recommendation():
    found = canned_room()
    assert [(s["held"], s["all"], s["unverified"]) for s in found] == [(2, 2, 0), (8, 8, 1), (15, 16, 0)]
    best, line = learners.recommend(found)
    assert best == 4 and line.startswith("at most 4 learners on this GPU") and "with 8, 1 of 16 did not" in line
    assert learners.table_rows(found)[1] == ["4", "129 s", "120 s", "1.40", "8 / 8", "1"]
    assert "learner 8: labs/lab2_tune_pool.ipynb failed: cell 9 of 9" in found[2]["problems"][0]
    # a size whose solution failed is never recommended, even where a larger one held
    bad = learners.judge(2, [learner(failed=[LAB[0]])] * 2, LAB, 80.0)
    assert learners.recommend([found[0], bad, found[1]])[0] == 1
    assert learners.recommend([bad])[0] is None
    # everything held: the largest tried, and a word that more could be tried
    assert learners.recommend(found[:2]) == (4, "at most 4 learners on this GPU: every verdict held up to 4, the "
                                                "most tried (try more to find where it breaks)")


def test_a_learner_without_a_summary_holds_no_verdict():
    size = learners.judge(2, [learner(), learner(missing=True)], LAB, 90.0)
    assert (size["held"], size["all"]) == (2, 4)
    assert size["problems"] == ["learner 2: no summary (its run ended with status 2: OSError: no space left on device)"]


def test_a_solution_not_verified_for_its_timing_is_read_from_its_check(tmp_path):
    for name, said in (("shared", verdict.Verdict(verdict.UNVERIFIED, "not verified here: the speed.", "Partly.")),
                       ("alone", verdict.Verdict(verdict.SOLVED, "", "Yes."))):  # as the check shows it: data
        nb = nbformat.v4.new_notebook()
        cell = nbformat.v4.new_code_cell("check()", execution_count=1, metadata={"tags": ["check"]})
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="Lab 2\n  ok  results\n"),
                        nbformat.v4.new_output("display_data", data=said._repr_mimebundle_())]
        nb.cells.append(cell)
        nbformat.write(nb, str(tmp_path / f"{name}.ipynb"))
    assert learners.check_word(tmp_path / "shared.ipynb") == "not verified"
    assert learners.check_word(tmp_path / "alone.ipynb") == ""
    assert learners.check_word(tmp_path / "none.ipynb") == ""


def test_the_report_shows_the_learners_table(tmp_path):
    canned(tmp_path, figures_live=REF, figures_ref=REF)
    found = canned_room()
    (tmp_path / "learners.json").write_text(json.dumps({
        "date": "2026-11-28 09:00", "gpu": "NVIDIA H100 80GB HBM3", "mode": "live", "reason": "", "notebooks": LAB,
        "sizes": found, "recommended": 4, "recommendation": learners.recommend(found)[1]}))
    ready, _ = preflight.write_report(tmp_path)
    md = (tmp_path / "report.md").read_text()
    assert ready and "## Learners per GPU" in md and "| 8 | 172 s | 170 s | 1.98 | 15 / 16 | 0 |" in md
    assert "**Recommended: at most 4 learners on this GPU" in md and "Replayed" not in md
    html = (tmp_path / "report.html").read_text()
    assert "Learners per GPU" in html and "<td>15 / 16</td>" in html and "learner 8: labs/lab2_tune_pool" in html
    record = json.loads((tmp_path / "learners.json").read_text())
    (tmp_path / "learners.json").write_text(json.dumps({**record, "mode": "replay", "gpu": None}))
    preflight.write_report(tmp_path)
    assert learners.REPLAYED in (tmp_path / "report.md").read_text()
    assert "on this machine, in replay" in (tmp_path / "report.html").read_text()


@pytest.mark.parametrize("bad", ["0", "-1", "four", "", "1,,4", "2.5", str(learners.MOST + 1)])
def test_a_bad_number_of_learners_gets_one_message(bad, capsys):
    assert cli.main(["preflight", f"--learners={bad}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"python -m streamalloc preflight: --learners {bad}: give how many")


@pytest.mark.parametrize("args, said", [(["--notebooks"], "--notebooks goes with --learners K"),
                                        (["--learners", "2", "--report-only"], "give one of them"),
                                        (["--learners", "2", "OUTSIDE"], "a learner's copy holds only the course's")])
def test_learners_options_that_do_not_go_together(args, said, capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(preflight, "OUT", tmp_path)
    if "OUTSIDE" in args:
        nb = tmp_path / "mine.ipynb"
        nbformat.write(nbformat.v4.new_notebook(), str(nb))
        args = [str(nb) if a == "OUTSIDE" else a for a in args]
    assert cli.main(["preflight", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0]


def test_what_each_learner_runs():
    labs = learners.to_run()
    assert len(labs) == 14 and labs[0].startswith("solutions/lab1") and labs[-1].startswith("labs/lab7")
    assert learners.to_run(with_notebooks=True)[14:] == [f"notebooks/{nb.name}" for nb in
                                                        sorted((course.REPO / "notebooks").glob("*.ipynb"))]
    assert learners.to_run([str(course.REPO / "labs" / "lab2_tune_pool.ipynb")]) == ["labs/lab2_tune_pool.ipynb"]


def test_learners_refuses_without_a_gpu_in_live_mode(monkeypatch, capsys, tmp_path):
    monkeypatch.delenv("STREAMALLOC_MODE", raising=False)
    monkeypatch.setattr(learners.gpu, "decide", lambda here: learners.gpu.Mode(False, "there is no usable GPU: none"))
    monkeypatch.setattr(preflight, "OUT", tmp_path)
    assert cli.main(["preflight", "--learners", "4"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["python -m streamalloc preflight: --learners measures how many learners this GPU holds, and there "
                   "is no usable GPU: none. Run it on one of the room's GPU machines"]
    assert not list(tmp_path.iterdir())  # nothing copied, nothing written


def test_two_learners_really_run_at_once_in_copies_that_are_removed(tmp_path, monkeypatch, capsys):
    """Replay (the tests' mode): one lab's solution and its stub, in 1 then 2 copies of the course; every verdict holds,
    the times are said to be a replay's, and no copy is left."""
    monkeypatch.setenv("STREAMALLOC_MODE", "replay")
    assert learners.room([2], LAB, tmp_path) == 0
    record = learners.read(tmp_path)
    assert [(s["learners"], s["held"], s["all"], len(s["learner_s"])) for s in record["sizes"]] == [(1, 2, 2, 1),
                                                                                                   (2, 4, 4, 2)]
    assert record["recommended"] == 2 and "in replay, which says nothing about a GPU" in record["recommendation"]
    assert not (tmp_path / "learners").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["learners.json"]
    assert learners.REPLAYED in capsys.readouterr().out


def test_a_stopped_room_stops_every_learner_and_removes_the_copies(tmp_path, monkeypatch):
    """An interrupt while the learners start: the one already running is stopped, and no copy is left."""
    started, real = [], subprocess.Popen

    def popen(cmd, **kw):
        if started:
            raise KeyboardInterrupt
        started.append(real(["sleep", "60"], stdout=kw["stdout"]))
        return started[-1]

    monkeypatch.setattr(learners.subprocess, "Popen", popen)
    with pytest.raises(KeyboardInterrupt):
        learners.run_size(2, LAB, learners.gpu.Mode(False, "replay"), tmp_path / "learners" / "2")
    assert started[0].returncode is not None and not (tmp_path / "learners" / "2").exists()


def test_a_learner_s_copy_removed_while_it_ran_is_said_not_raised(tmp_path):
    from streamalloc import learners
    rows, log = learners._left(tmp_path / "gone")
    assert rows is None and "removed while it ran" in log
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "run.log").write_text("a\nb\n")
    (tmp_path / "half" / "build").mkdir()
    (tmp_path / "half" / "build" / "summary.json").write_text('[{"notebook": "x"')  # cut while written
    assert learners._left(tmp_path / "half") == (None, "a\nb")
