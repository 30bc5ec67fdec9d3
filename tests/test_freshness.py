"""Every reference set holds a recording of every program the lessons and solutions write, as the program is now.

Cheap: nothing is executed. For each `%%writefile {lesson.build}/X.cu` cell of notebooks/ and solutions/, the
program's meaning (replay.program_meaning: source without comments, with the course headers it includes) is
hashed, and some run recorded for that lesson in every set of recordings/ must carry that `program_sha`. A
program whose only use is a cell that expects a CompileError is not run, so it has no recording. A program run
with `gpus=N` (N > 1) is due only in sets recorded on a machine with at least N GPUs (runs record "gpus"), and
some set must hold it; a supplement (`replay.supplement`: `<gpu>-x<N>`, recorded by
`tools/record_reference.sh gpus2` for those programs alone) owes only the programs that need more than one GPU.
The labs' checks replay from the default reference alone, so only that set owes solutions/' programs; another set
of the same GPU model (the CUDA 12 stack's, which the preflight compares lessons with) owes the lectures of
notebooks/. A set of another GPU model (`replay.another_model`: the H100's, kept beside the H200 reference) owes
nothing, but holds no run of a program that has changed since (`tools/prune_recordings.py`).
"""
import json
import re
from pathlib import Path

import nbformat
import pytest

from streamalloc import replay
from streamalloc.course import lesson_of, written_files

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted(p for folder in ("notebooks", "solutions") for p in (ROOT / folder).glob("*.ipynb"))
PROGRAM = (".cu", ".cuh", ".h", ".py")  # what programs are made of; other files written are not programs
GPUS = re.compile(r"gpus\s*=\s*(?P<n>\d+)")


def programs(path: Path, where: Path) -> tuple[str | None, dict[str, Path], dict[str, int]]:
    """The lesson's name, each program its %%writefile cells write (written into `where`, headers too), and how
    many GPUs each needs (`lesson.run(..., gpus=N)`; 1 when not said)."""
    nb = nbformat.read(str(path), as_version=4)
    lesson = lesson_of(path)
    written, writing = {}, set()
    for i, name, text in written_files(path):
        writing.add(i)
        if name.endswith(PROGRAM):
            (where / name).write_text(text)
            written[name] = where / name
    run, gpus = {}, {}
    for name, file in written.items():
        users = [c for i, c in enumerate(nb.cells) if c.cell_type == "code" and name in c.source and i not in writing]
        on_purpose = users and all(c.metadata.get("expected_exception") == "CompileError" for c in users)
        runnable = name.endswith(".cu") or any(f'run("{name}"' in c.source or  # lesson.run, or sa.together.run's
                                               ("together.run(" in c.source and f'("{name}"' in c.source) for c in users)
        if runnable and not on_purpose:
            run[name] = file
            gpus[name] = max([int(m["n"]) for c in users for m in GPUS.finditer(c.source)] or [1])
    return lesson, run, gpus


def stale(path: Path, set_dir: Path, where: Path) -> list[str]:
    """What is not recorded in one set for one notebook, in words; [] when every program is."""
    lesson, run, gpus = programs(path, where)
    if not run:
        return []
    if lesson is None:
        return [f"{path.name} writes programs but never calls sa.start(...)"]
    recorded, set_gpus = set(), 1
    for file in sorted(set_dir.glob("*/*.json")):
        if file.name != "machine.json":
            runs = replay.read_runs(file).values()
            set_gpus = max([set_gpus] + [int(r.get("gpus", 1)) for r in runs])
            if file.parent.name == lesson:
                recorded |= {r.get("program_sha") for r in runs}
    out = []
    for name, file in run.items():
        if gpus[name] > set_gpus:  # this set was recorded on fewer GPUs than the program needs
            continue
        if gpus[name] == 1 and replay.supplement(set_dir.name):  # recorded for the multi-GPU programs alone
            continue
        if replay.source_hash(replay.program_meaning(file)) not in recorded:
            out.append(f"{set_dir.name}: no recording under {set_dir.name}/{lesson}/ ran {name} as "
                       f"{path.parent.name}/{path.name} writes it now: {replay.RERECORD}")
    return out


def test_the_default_reference_set_is_there():
    assert replay.DEFAULT_REFERENCE in replay.available()


OWED = [(path, s) for s in replay.available() or ["(none)"] for path in NOTEBOOKS
        if (path.parent.name != "solutions" or s == replay.DEFAULT_REFERENCE) and not replay.another_model(s)]


@pytest.mark.parametrize("path, set_name", OWED, ids=lambda x: f"{x.parent.name}/{x.name}" if isinstance(x, Path) else x)
def test_every_program_has_a_fresh_recording(path, set_name, tmp_path):
    assert set_name != "(none)", "recordings/ holds no reference set"
    assert stale(path, replay.root() / set_name, tmp_path) == []


@pytest.mark.parametrize("path", [p for p in NOTEBOOKS if "gpus=" in p.read_text()], ids=lambda p: p.name)
def test_every_program_that_needs_more_gpus_is_recorded_on_that_many(path, tmp_path):
    """A program run with gpus=N must be fresh in some set recorded on N GPUs or more, not only skipped by every
    set recorded on one."""
    lesson, run, gpus = programs(path, tmp_path)
    many = {name for name in run if gpus[name] > 1}
    assert many, f"{path.name} mentions gpus= but runs no program with gpus=N > 1"
    holders = []
    for set_name in replay.available():
        runs = [r for f in (replay.root() / set_name / lesson).glob("*.json") if f.name != "machine.json"
                for r in replay.read_runs(f).values()]
        shas = {r.get("program_sha") for r in runs}
        if all(replay.source_hash(replay.program_meaning(run[n])) in shas and
               any(r.get("gpus", 1) >= gpus[n] for r in runs) for n in many):
            holders.append(set_name)
    assert holders, (f"no set of recordings holds {', '.join(sorted(many))} of {path.name} as written now, recorded on "
                     f"enough GPUs: run `tools/record_reference.sh gpus2` on a machine with two GPUs")


@pytest.mark.parametrize("set_name", [s for s in replay.available() if replay.another_model(s)])
def test_a_set_of_another_model_holds_only_programs_as_they_are_now(set_name):
    import subprocess
    import sys
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "prune_recordings.py"), set_name, "--check"],
                         capture_output=True, text=True)
    assert out.returncode == 0, f"run tools/prune_recordings.py {set_name}:\n{out.stdout}{out.stderr}"


def test_another_model_is_told_apart_by_its_gpu(tmp_path, monkeypatch):
    for name, gpu in (("nvidia-h200", "NVIDIA H200"), ("nvidia-h200-cuda12", "NVIDIA H200"),
                      ("nvidia-h100-80gb-hbm3", "NVIDIA H100 80GB HBM3"), ("nvidia-h100-80gb-hbm3-x2", "NVIDIA H100")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "machine.json").write_text(json.dumps({"gpu": gpu}))
    monkeypatch.setenv("STREAMALLOC_RECORDINGS", str(tmp_path))
    monkeypatch.setattr(replay, "DEFAULT_REFERENCE", "nvidia-h200")
    assert [s for s in replay.available() if replay.another_model(s)] == ["nvidia-h100-80gb-hbm3"]


def test_a_supplement_is_never_the_reference(tmp_path, monkeypatch):
    for name in ("nvidia-h100-80gb-hbm3", "nvidia-h200-x2"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "machine.json").write_text("{}")
    monkeypatch.setenv("STREAMALLOC_RECORDINGS", str(tmp_path))
    monkeypatch.setattr(replay, "DEFAULT_REFERENCE", "no-such-set")
    assert replay.supplement("nvidia-h200-x2") and not replay.supplement("nvidia-h100-80gb-hbm3-cuda12")
    assert replay.reference() == "nvidia-h100-80gb-hbm3"


def test_the_freshness_check_follows_meaning(tmp_path, recordings):
    nb = nbformat.v4.new_notebook()
    program = '#include "course.cuh"\n// a comment\nint main() { CHECK(cudaSetDevice(0)); return 0; }\n'
    nb.cells = [nbformat.v4.new_code_cell('import streamalloc as sa\nlesson = sa.start("99_test")'),
                nbformat.v4.new_code_cell("%%writefile {lesson.build}/prog.cu\n" + program),
                nbformat.v4.new_code_cell('lesson.run("prog.cu", [1])'),
                nbformat.v4.new_code_cell("%%writefile {lesson.build}/broken.cu\nint main() { oops }\n"),
                nbformat.v4.new_code_cell('lesson.run("broken.cu")', metadata={
                    "tags": ["raises-exception"], "expected_exception": "CompileError"})]
    path = tmp_path / "99_test.ipynb"
    nbformat.write(nb, str(path))
    src = tmp_path / "prog.cu"
    src.write_text(program)
    m = replay.Machine(gpu="NVIDIA Test GPU")
    set_dir = recordings / "nvidia-test-gpu"
    (tmp_path / "w").mkdir()

    assert "prog.cu" in stale(path, set_dir, tmp_path / "w")[0]  # nothing recorded for the lesson at all
    replay.save(m, "99_test", "other", "x", [], {"stdout": ""}, program_sha="unrelated")
    assert "prog.cu" in stale(path, set_dir, tmp_path / "w")[0] and len(stale(path, set_dir, tmp_path / "w")) == 1
    replay.save(m, "99_test", "prog", replay.program_key(src, []), ["1"], {"stdout": ""},
                program_sha=replay.source_hash(replay.program_meaning(src)))
    assert stale(path, set_dir, tmp_path / "w") == []
    nb.cells[1].source = nb.cells[1].source.replace("// a comment", "// a better comment")
    nbformat.write(nb, str(path))
    assert stale(path, set_dir, tmp_path / "w") == []  # a comment edit keeps it fresh
    nb.cells[1].source = nb.cells[1].source.replace("cudaSetDevice(0)", "cudaSetDevice(1)")
    nbformat.write(nb, str(path))
    assert "prog.cu" in stale(path, set_dir, tmp_path / "w")[0]  # a code edit makes it stale
