"""tools/prune_recordings.py: a set of another GPU model keeps the runs of programs as they are now, and nothing else."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "tools" / "prune_recordings.py"


def run(*args, env=None):
    return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True, env=env)


def test_a_changed_program_s_runs_go_and_the_rest_stay(tmp_path, monkeypatch):
    import os

    from streamalloc import replay
    from streamalloc.course import RECORDINGS
    # one current run (03's pool_stats as committed in the default reference), one stale, one without a program
    ref = RECORDINGS / replay.DEFAULT_REFERENCE / "03_pools" / "pool_stats.json"
    current = next(iter(replay.read_runs(ref).items()))
    lesson = tmp_path / "old-gpu" / "03_pools"
    lesson.mkdir(parents=True)
    (tmp_path / "old-gpu" / "machine.json").write_text(json.dumps({"gpu": "Old GPU"}))
    runs = {current[0]: current[1], "stale": {**current[1], "program_sha": "0" * 20},
            "measured": {"args": [], "source_sha": "2" * 20, "stdout": ""}}
    (lesson / "pool_stats.json").write_text(json.dumps({"runs": runs}))
    (lesson / "gone.json").write_text(json.dumps({"runs": {"x": {"args": [], "source_sha": "3" * 20,
                                                                   "program_sha": "1" * 20}}}))
    env = {**os.environ, "STREAMALLOC_RECORDINGS": str(tmp_path)}
    check = run("old-gpu", "--check", env=env)
    assert check.returncode == 1 and "03_pools/pool_stats.json: 1 run(s)" in check.stdout, check.stdout
    assert json.loads((lesson / "pool_stats.json").read_text())["runs"].keys() == runs.keys()  # --check writes nothing
    assert run("old-gpu", env=env).returncode == 0
    assert set(json.loads((lesson / "pool_stats.json").read_text())["runs"]) == {current[0], "measured"}
    assert not (lesson / "gone.json").exists()
    assert run("old-gpu", "--check", env=env).returncode == 0


def test_bad_arguments_are_refused_with_the_usage():
    assert run().returncode == 2 and "usage" in run().stderr
    assert run("x", "--force").returncode == 2
    out = run("no-such-set")
    assert out.returncode == 2 and "not a set of recordings" in out.stderr
