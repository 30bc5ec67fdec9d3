"""What a notebook calls: Python programs and Python measurements, live (on a stand-in for a GPU machine: the
probe is replaced, everything else is real, the program really runs here) and replayed, keyed on meaning."""
import importlib.util
import json
import sys

import pytest

from streamalloc import course as course_mod, cuda, gpu, lesson as lesson_mod, replay
from streamalloc.errors import CompileError, NoGPU, RecordingError, ProgramFailed, ProgramTimedOut, StaleRecording

GPU = gpu.Machine(gpu="NVIDIA Test GPU", compute_capability="9.0", pools_supported=True, driver="1.0",
                  driver_cuda="13.0", nvcc="13.0", date="2026-01-01", memory_free=1 << 30)

PROGRAM = '''"""A tiny measurement: prints one JSON line per argument."""
import json
import sys

for a in sys.argv[1:]:  # each argument is a size
    print(json.dumps({"size": int(a), "twice": 2 * int(a)}))
print("done (a line for humans)")
'''


@pytest.fixture
def course(tmp_path, monkeypatch, recordings):
    """A lesson folder under tmp_path; `course(live)` starts the lesson live (the probe says a GPU with pools is
    here) or in replay (the probe says there is none)."""
    monkeypatch.setattr(course_mod, "REPO", tmp_path)
    monkeypatch.delenv("STREAMALLOC_RECORD_TO", raising=False)

    def start(live: bool, record: bool = False):
        monkeypatch.setattr(gpu, "probe", lambda: GPU if live else gpu.Machine(problem="CUDA found no GPU"))
        monkeypatch.setenv("STREAMALLOC_MODE", "live" if live else "replay")
        monkeypatch.setenv("STREAMALLOC_RECORD", "1" if record else "0")
        return lesson_mod.start("test_lesson", quiet=True)
    return start


def test_a_python_program_runs_live_is_recorded_and_replays(course):
    live = course(live=True, record=True)
    assert live.live
    (live.build / "sizes.py").write_text(PROGRAM)
    res = live.run("sizes.py", [1, 2])
    assert res.records == [{"size": 1, "twice": 2}, {"size": 2, "twice": 4}]
    assert res.label == "NVIDIA Test GPU, live" and not res.replayed and not res.note
    saved = json.loads(replay.path_of("nvidia-test-gpu", "test_lesson", "sizes").read_text())["runs"]
    assert [r["args"] for r in saved.values()] == [["1", "2"]]
    assert next(iter(saved.values()))["program_sha"] == replay.source_hash(replay.python_meaning(PROGRAM))

    again = course(live=False)
    (again.build / "sizes.py").write_text(PROGRAM.replace("# each argument is a size", "# sizes, in bytes")
                                          .replace("A tiny measurement", "A small measurement"))
    res = again.run("sizes.py", [1, 2])  # a comment and a docstring changed: the recording still holds
    assert res.replayed and "replayed from a recording of 2026-01-01" in res.label
    assert res.records.values("twice") == [2, 4]
    with pytest.raises(StaleRecording, match="other arguments"):
        again.run("sizes.py", [3])
    (again.build / "sizes.py").write_text(PROGRAM.replace("2 * int(a)", "3 * int(a)"))
    with pytest.raises(StaleRecording, match="code changed"):
        again.run("sizes.py", [1, 2])


def test_a_python_program_fails_and_hangs_like_a_cuda_program(course):
    live = course(live=True)
    (live.build / "fails.py").write_text("import sys\nprint('about to fail', file=sys.stderr)\nsys.exit(3)\n")
    with pytest.raises(ProgramFailed, match="(?s)fails.py exited with status 3.*about to fail") as e:
        live.run("fails.py")
    assert e.value.returncode == 3
    (live.build / "hangs.py").write_text("import time\nprint('started', flush=True)\ntime.sleep(600)\n")
    with pytest.raises(ProgramTimedOut, match="(?s)hangs.py ran longer than its 1 s timeout.*started"):
        live.run("hangs.py", timeout=1)
    (live.build / "bad.py").write_text('print("{not json")\n')
    with pytest.raises(ValueError, match="looks like JSON"):
        live.run("bad.py")
    with pytest.raises(ValueError, match="no nvcc flags"):
        live.run("bad.py", flags=["-O3"])


def test_a_missing_package_replays_the_reference_and_says_what_to_install(course):
    recorder = course(live=True, record=True)
    (recorder.build / "needs.py").write_text(PROGRAM)
    recorder.run("needs.py", [5])
    assert importlib.util.find_spec("no_such_module_here") is None
    live = course(live=True)
    res = live.run("needs.py", [5], requires=("json", "no_such_module_here"))
    assert res.replayed and "replayed" in res.label and res.records.values("size") == [5]
    assert "no_such_module_here" in res.note and "pip install no_such_module_here" in res.note
    assert "json" not in res.note.split("needs")[1].split(",")[0]  # an importable module is not named missing
    assert lesson_mod.pip_name("cupy") == "cupy-cuda12x" and lesson_mod.pip_name("cuda.core") == "cuda-core[cu12]"
    with pytest.raises(RecordingError, match="needs no_such_module_here.*no recording of this run"):
        live.run("needs.py", [6], requires=("no_such_module_here",))
    # with the package there, it runs live
    assert not live.run("needs.py", [7], requires=("json",)).replayed


def _measurement_module(tmp_path, name, text):
    path = tmp_path / f"{name}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


MEASURE = '''def sweep(n):
    """Sizes, measured."""
    return [i * i for i in range(n)]  # squares
'''


def test_a_python_measurement_is_keyed_on_its_syntax_tree(course, tmp_path):
    live = course(live=True, record=True)
    fn = _measurement_module(tmp_path, "m1", MEASURE).sweep
    assert live.measure("sweep", fn, params={"n": 4}, source="// kernel\nint k;").data == [0, 1, 4, 9]
    again = course(live=False)
    edited = MEASURE.replace("Sizes, measured.", "Squares of the sizes.").replace("# squares", "# i squared")
    fn = _measurement_module(tmp_path, "m2", "# a new comment\n" + edited).sweep
    res = again.measure("sweep", fn, params={"n": 4}, source="int   k; // the kernel")
    assert res.replayed and res.data == [0, 1, 4, 9]
    fn = _measurement_module(tmp_path, "m3", MEASURE.replace("i * i", "i * i * i")).sweep
    with pytest.raises(StaleRecording, match="code changed"):
        again.measure("sweep", fn, params={"n": 4}, source="int k;")
    fn = _measurement_module(tmp_path, "m4", MEASURE).sweep
    with pytest.raises(StaleRecording, match="code changed"):
        again.measure("sweep", fn, params={"n": 4}, source="int k2;")


def test_a_program_run_under_measure_records_which_program_it_was(course):
    live = course(live=True, record=True)
    src = live.build / "prog.cu"
    src.write_text('#include "course.cuh"\nint main() { return 0; }\n')
    key = live.key_source(src, ["-G"])
    live.measure("under_tool", lambda args: {"ran": args}, params={"args": ["1"]}, source=key)
    runs = json.loads(replay.path_of("nvidia-test-gpu", "test_lesson", "under_tool").read_text())["runs"]
    assert next(iter(runs.values()))["program_sha"] == replay.source_hash(replay.program_meaning(src))


def test_no_gpu_at_all_says_no_gpu_found(course, monkeypatch, capsys):
    monkeypatch.setattr(gpu, "probe", lambda: gpu.Machine(
        problem="CuPy found no usable CUDA driver or GPU (cudaErrorInsufficientDriver: CUDA driver version is "
                "insufficient for CUDA runtime version)"))
    monkeypatch.setattr(cuda, "driver_present", lambda: False)
    monkeypatch.delenv("STREAMALLOC_MODE")
    lesson_mod.start("test_lesson")
    out = capsys.readouterr().out
    assert "no GPU found" in out and "insufficient" not in out


def test_a_python_program_that_does_not_parse_is_a_compile_error_in_both_modes(course):
    for live in (True, False):
        lesson = course(live=live)
        (lesson.build / "typo.py").write_text("import json\nprint(json.dumps({'a': 1})\n")
        with pytest.raises(CompileError, match="typo.py is not valid Python: typo.py:2") as e:
            lesson.run("typo.py")
        assert e.value.location == "typo.py:2"


def test_live_without_a_gpu_is_one_clear_error(course, monkeypatch):
    monkeypatch.setattr(gpu, "probe", lambda: gpu.Machine(problem="CUDA found no GPU"))
    monkeypatch.setenv("STREAMALLOC_MODE", "live")
    with pytest.raises(NoGPU, match="STREAMALLOC_MODE=live was set, but there is no usable GPU"):
        lesson_mod.start("test_lesson")


NOTEBOOK_CELLS = [
    "lesson = sa.start('test_lesson')",
    "%%writefile {lesson.build}/ahead.cu\n#include \"course.cuh\"\n#include <cstdio>\n\n"
    "int main() { std::printf(\"{\\\"ahead\\\":1}\\n\"); }",
    "%%writefile {lesson.build}/broken.cu\nint main() { return undefined_name; }\n",
    "%%writefile {lesson.build}/notes.txt\nnot a program",
]


def notebook(path, cells=NOTEBOOK_CELLS):
    path.write_text(json.dumps({"cells": [{"cell_type": "code", "source": c.splitlines(True), "metadata": {},
                                           "outputs": [], "execution_count": None} for c in cells],
                                "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    return path


def test_the_programs_found_ahead_are_what_writefile_writes(tmp_path):
    """The text built ahead is byte for byte what IPython's %%writefile writes when the cell runs."""
    shell = pytest.importorskip("IPython.testing.globalipapp").start_ipython()
    nb = notebook(tmp_path / "n.ipynb")
    found = lesson_mod.written_programs(nb)
    assert [f for f, _ in found] == ["ahead.cu", "broken.cu"]
    shell.user_ns["lesson"] = type("L", (), {"build": tmp_path})()
    for cell in NOTEBOOK_CELLS[1:3]:
        shell.run_cell(cell)
    for file, text in found:
        assert (tmp_path / file).read_text() == text


def test_every_course_notebooks_programs_are_found_ahead():
    """Every .cu a course notebook writes is found by the build-ahead (the notebooks' own cells)."""
    repo = course_mod.REPO
    for nb in [*repo.glob("notebooks/*.ipynb"), *repo.glob("solutions/*.ipynb")]:
        cells = json.loads(nb.read_text())["cells"]
        written = {"".join(c["source"]).split("\n", 1)[0].split("/")[-1] for c in cells
                   if "".join(c["source"]).startswith("%%writefile") and "".join(c["source"]).split("\n", 1)[0].endswith(".cu")}
        assert {f for f, _ in lesson_mod.written_programs(nb)} == written, nb.name


@pytest.mark.skipif(gpu.nvcc_path() is None, reason="nvcc is not installed")
def test_a_program_built_ahead_is_the_one_its_run_cell_uses(course, tmp_path, monkeypatch):
    """build_ahead builds the saved programs at once; the run cell then finds its program built (no nvcc), a
    program that does not build as saved is named and stops nothing, and an edited cell builds afresh."""
    monkeypatch.setenv("STREAMALLOC_ARCH", "sm_90")  # no GPU here: build for one
    lesson = course(True)
    results = lesson.build_ahead(notebook(tmp_path / "n.ipynb"))
    built = {p.name: r for p, r in results.items()}
    assert isinstance(built["broken.cu"], CompileError) and built["ahead.cu"].is_file()
    (lesson.build / "ahead.cu").write_text(lesson_mod.written_programs(tmp_path / "n.ipynb")[0][1])
    calls = []
    real_popen = cuda.subprocess.Popen
    monkeypatch.setattr(cuda.subprocess, "Popen", lambda *a, **k: calls.append(a) or real_popen(*a, **k))
    assert lesson.compile("ahead.cu") == built["ahead.cu"] and calls == []
    (lesson.build / "ahead.cu").write_text((lesson.build / "ahead.cu").read_text() + "// edited\n")
    assert lesson.compile("ahead.cu") != built["ahead.cu"] and len(calls) == 2  # nvcc compiles the object, then links
    assert "-c" in calls[0][0] and "-c" not in calls[1][0]


def test_the_notebook_built_ahead_is_the_open_one_or_none(tmp_path, monkeypatch):
    """Jupyter starts the kernel in the notebook's folder: that copy. Elsewhere (Colab's /content) the course's
    copy, unless a lab and its solution share the name: then which is open cannot be told, and none is built."""
    monkeypatch.setattr(course_mod, "REPO", tmp_path)
    for folder in ("notebooks/lesson", "labs/lab9", "solutions/lab9"):
        (tmp_path / folder).parent.mkdir(exist_ok=True)
        (tmp_path / f"{folder}.ipynb").write_text("{}")
    elsewhere = tmp_path / "content"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert lesson_mod.notebook_file("lesson") == tmp_path / "notebooks/lesson.ipynb"
    assert lesson_mod.notebook_file("lab9") is None and lesson_mod.notebook_file("nothing") is None
    monkeypatch.chdir(tmp_path / "solutions")
    assert lesson_mod.notebook_file("lab9") == tmp_path / "solutions/lab9.ipynb"


def test_a_notebooks_programs_are_its_own(tmp_path, monkeypatch):
    """A lab and its solution (same lesson name, other folders), or two copies of a lab in one folder
    (Jupyter names them in JPY_SESSION_NAME), never write into one build folder; two runs of one notebook at once
    (two processes) neither; a run folder of a process that has ended goes."""
    monkeypatch.setattr(course_mod, "REPO", tmp_path)
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    monkeypatch.delenv("STREAMALLOC_BUILD", raising=False)  # build_root(): the course's build/ here
    for folder in ("labs", "solutions"):
        (tmp_path / folder).mkdir()
    monkeypatch.chdir(tmp_path / "labs")
    lab = lesson_mod.build_folder("lab1")
    monkeypatch.setenv("JPY_SESSION_NAME", "lab1-Copy1.ipynb")
    copy = lesson_mod.build_folder("lab1")
    monkeypatch.chdir(tmp_path / "solutions")
    monkeypatch.delenv("JPY_SESSION_NAME")
    solution = lesson_mod.build_folder("lab1")
    assert len({lab.parent, copy.parent, solution.parent}) == 3
    assert all(p.parent.parent == tmp_path / "build" / "cuda" for p in (lab, copy, solution))
    assert lesson_mod.build_folder("lab1") == solution  # the same notebook in the same process: the same folder
    monkeypatch.setattr(course_mod, "_RUN", "run-999999999-abcdef")  # another process, at once
    other = lesson_mod.build_folder("lab1")
    assert other.parent == solution.parent and other != solution
    dead = solution.parent / "run-999999998-000000"  # a pid no process has
    dead.mkdir(parents=True)
    lesson_mod.build_folder("lab1")
    assert not dead.exists()


def test_a_lessons_programs_are_built_into_the_shared_programs_folder(course, tmp_path, monkeypatch):
    """What a run cell compiles goes to build/cuda/bin (keyed by content, flags and nvcc), shared by every notebook,
    not into the run's folder; $STREAMALLOC_PROGRAMS moves it (the Colab tier shares make test's)."""
    seen = {}
    monkeypatch.setattr(cuda, "build", lambda source, flags=(), arch=(), out_dir=None: seen.update(out=out_dir))
    monkeypatch.delenv("STREAMALLOC_PROGRAMS", raising=False)
    lesson = course(True)
    (lesson.build / "x.cu").write_text("int main() {}\n")
    lesson.compile("x.cu")
    assert seen["out"] == lesson.bin == tmp_path / "build" / "cuda" / "bin"
    monkeypatch.setenv("STREAMALLOC_PROGRAMS", str(tmp_path / "elsewhere"))
    assert course(True).bin == tmp_path / "elsewhere"


@pytest.mark.skipif(gpu.nvcc_path() is None, reason="nvcc is not installed")
def test_a_program_built_by_another_nvcc_is_another_program(tmp_path, monkeypatch):
    """One cache serves every nvcc: its `nvcc --version` is part of the key, so another toolkit's program (another
    virtual environment's nvcc, Colab's) is never taken for this one's; the same nvcc's is."""
    monkeypatch.setenv("STREAMALLOC_ARCH", "sm_90")
    src = tmp_path / "p.cu"
    src.write_text("int main() { return 0; }\n")
    first = cuda.build(src, out_dir=tmp_path / "bin")
    assert cuda.build(src, out_dir=tmp_path / "bin") == first and cuda.built(src, out_dir=tmp_path / "bin") == first
    monkeypatch.setattr(cuda, "nvcc_identity", lambda nvcc: "Cuda compilation tools, release 12.4, V12.4.131")
    # build() reuses only what built() finds (the same key): nothing, so it would build another program
    assert cuda.built(src, out_dir=tmp_path / "bin") is None


@pytest.mark.skipif(gpu.nvcc_path() is None, reason="nvcc is not installed")
def test_a_header_written_beside_a_program_is_part_of_its_build(tmp_path, monkeypatch):
    """Runs share a notebook's bin/ (keyed by content): a header the program includes from its own folder is part of
    that content, so another run's header can never give it another run's program."""
    monkeypatch.setenv("STREAMALLOC_ARCH", "sm_90")
    (tmp_path / "k.h").write_text("#define K 1\n")
    src = tmp_path / "p.cu"
    src.write_text('#include "k.h"\nint main() { return K - 1; }\n')
    first = cuda.build(src, out_dir=tmp_path / "bin")
    assert cuda.built(src, out_dir=tmp_path / "bin") == first
    (tmp_path / "k.h").write_text("#define K 2\n")
    assert cuda.built(src, out_dir=tmp_path / "bin") is None  # build() reuses only what built() finds: another program


def test_a_build_folder_that_cannot_be_made_is_named_in_one_message(tmp_path, monkeypatch):
    """A read-only build root (or a full disk): sa.start says which folder and why, not a raw OSError."""
    import os
    from streamalloc import lesson as lesson_mod
    from streamalloc.errors import BuildFailed
    root = tmp_path / "ro"
    root.mkdir()
    os.chmod(root, 0o500)
    monkeypatch.setenv("STREAMALLOC_BUILD", str(root))
    monkeypatch.setenv("STREAMALLOC_MODE", "replay")
    try:
        if os.access(root, os.W_OK):  # root ignores the mode bits: make the parent of the build folder a file instead
            os.chmod(root, 0o700)
            (root / "cuda").write_text("not a folder")
        with pytest.raises(BuildFailed, match="build folder .* cannot be made"):
            lesson_mod.start("00_setup", quiet=True)
    finally:
        os.chmod(root, 0o700)
