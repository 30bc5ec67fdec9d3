"""Recordings: a replay returns what was recorded, and refuses a recording of other code or arguments."""
import json

import pytest

from streamalloc import replay
from streamalloc.errors import BrokenRecording, MissingRecording, StaleRecording
from streamalloc.gpu import Machine

M = Machine(gpu="NVIDIA Test GPU", compute_capability="9.0", pools_supported=True, date="2026-01-01")


def test_save_then_load(recordings):
    replay.save(M, "00_setup", "prog", "source A", ["1"], {"stdout": "out A"})
    assert replay.available() == ["nvidia-test-gpu"] and replay.reference() == "nvidia-test-gpu"
    assert replay.load("nvidia-test-gpu", "00_setup", "prog", "source A", [1])["stdout"] == "out A"
    assert replay.machine("nvidia-test-gpu", "00_setup").gpu == "NVIDIA Test GPU"


def test_changed_code_is_stale(recordings):
    replay.save(M, "00_setup", "prog", "source A", ["1"], {"stdout": "out A"})
    with pytest.raises(StaleRecording, match="code changed.*make record"):
        replay.load("nvidia-test-gpu", "00_setup", "prog", "source B", ["1"])


def test_other_arguments_are_stale(recordings):
    replay.save(M, "00_setup", "prog", "source A", ["1"], {"stdout": "out A"})
    with pytest.raises(StaleRecording, match="other arguments"):
        replay.load("nvidia-test-gpu", "00_setup", "prog", "source A", ["2"])


def test_missing_recording(recordings):
    with pytest.raises(MissingRecording, match="make record"):
        replay.load("nvidia-test-gpu", "00_setup", "nothing", "source", [])


def test_a_new_recording_session_replaces_old_runs(recordings, monkeypatch):
    replay.save(M, "00_setup", "prog", "old source", ["1"], {"stdout": "old"})
    monkeypatch.setattr(replay, "_started", set())  # as in a new recorder process
    replay.save(M, "00_setup", "prog", "new source", ["1"], {"stdout": "new"})
    replay.save(M, "00_setup", "prog", "new source", ["2"], {"stdout": "new 2"})
    runs = json.loads((recordings / "nvidia-test-gpu" / "00_setup" / "prog.json").read_text())["runs"]
    assert sorted(r["stdout"] for r in runs.values()) == ["new", "new 2"]


def test_notebooks_of_one_recording_session_keep_each_others_runs(recordings, monkeypatch):
    """A solution and its unsolved lab run the same lesson's programs in two kernels of one `make record`: both
    stay; the next session starts anew."""
    monkeypatch.setenv("STREAMALLOC_RECORD_SESSION", "one")
    replay.save(M, "lab3", "race", "solution", ["1"], {"stdout": "solved"})
    monkeypatch.setattr(replay, "_started", set())  # the unsolved lab's kernel
    replay.save(M, "lab3", "race", "stubs", ["1"], {"stdout": "stubs"})
    path = recordings / "nvidia-test-gpu" / "lab3" / "race.json"
    assert sorted(r["stdout"] for r in json.loads(path.read_text())["runs"].values()) == ["solved", "stubs"]
    monkeypatch.setenv("STREAMALLOC_RECORD_SESSION", "two")
    monkeypatch.setattr(replay, "_started", set())
    replay.save(M, "lab3", "race", "solution", ["1"], {"stdout": "solved again"})
    assert [r["stdout"] for r in json.loads(path.read_text())["runs"].values()] == ["solved again"]


# -- keys: what a program means, not how it is written --------------------------------------------------
PROGRAM = """#include "course.cuh"
// Allocate on the stream, free on the stream.
int main() {
    float *p;  // the buffer
    CHECK(cudaMallocAsync(&p, 1 << 20, 0));
    CHECK(cudaFreeAsync(p, 0));
    std::printf("// not a comment: %d\\n", 1);
    return 0;
}
"""


def _program(tmp_path, text, name="prog.cu"):
    (tmp_path / name).write_text(text)
    return tmp_path / name


def _include(tmp_path, headers: dict):
    inc = tmp_path / "include"
    inc.mkdir(exist_ok=True)
    for name, text in headers.items():
        (inc / name).write_text(text)
    return (inc,)


def test_a_comment_or_layout_edit_keeps_a_cuda_key_and_a_code_edit_changes_it(tmp_path):
    inc = _include(tmp_path, {"course.cuh": "#pragma once\n#define CHECK(x) x\n"})
    before = replay.program_key(_program(tmp_path, PROGRAM), ["-DX"], inc)
    commented = PROGRAM.replace("// the buffer", "// the buffer, 1 MiB").replace("/ free on", "/ then free on")
    commented = commented.replace("int main() {", "/* the whole\n   program */\n\nint   main()  {\n\n")
    assert replay.program_key(_program(tmp_path, commented), ["-DX"], inc) == before
    assert replay.program_key(_program(tmp_path, PROGRAM.replace("1 << 20", "1 << 21")), ["-DX"], inc) != before
    # text inside a string literal is output, not a comment
    assert replay.program_key(_program(tmp_path, PROGRAM.replace("// not a comment", "// not a remark")),
                              ["-DX"], inc) != before
    assert replay.program_key(_program(tmp_path, PROGRAM), ["-DY"], inc) != before  # flags count


def test_only_the_headers_a_program_includes_count(tmp_path):
    inc = _include(tmp_path, {"course.cuh": '#pragma once\n#include "timing.cuh"\n#define CHECK(x) x\n',
                              "timing.cuh": "inline int t() { return 1; }\n", "other.cuh": "int unused;\n"})
    prog = _program(tmp_path, PROGRAM)
    assert [h.name for h in replay.included_headers(prog, inc)] == ["course.cuh", "timing.cuh"]
    before = replay.program_key(prog, (), inc)
    (inc[0] / "other.cuh").write_text("int unused_and_changed;\n")  # not included: the key stays
    assert replay.program_key(prog, (), inc) == before
    (inc[0] / "timing.cuh").write_text("// a comment\ninline int t() { return 1; }\n")  # a comment: stays
    assert replay.program_key(prog, (), inc) == before
    (inc[0] / "timing.cuh").write_text("inline int t() { return 2; }\n")  # included, transitively: changes
    assert replay.program_key(prog, (), inc) != before


def test_the_course_header_edits_that_only_touch_comments_keep_every_recording():
    header = replay.INCLUDE / "course.cuh"
    text = header.read_text()
    assert replay.cpp_meaning(text) == replay.cpp_meaning("// a new first line\n" + text.replace("// ", "//  "))


def test_normalizing_twice_changes_nothing(tmp_path):
    key = replay.program_key(_program(tmp_path, PROGRAM), ["-O3"])
    assert replay.cpp_meaning(key) == key


def test_python_is_keyed_on_its_syntax_tree():
    code = 'def f(x):\n    """Measure x."""\n    return x + 1  # one more\n'
    same = 'def f(x):\n    """Measure x, twice as well."""\n    # a comment\n\n    return (x +\n            1)\n'
    assert replay.python_meaning(code) == replay.python_meaning(same)
    assert replay.python_meaning(code) != replay.python_meaning(code.replace("x + 1", "x + 2"))
    assert replay.python_meaning("    def g():\n        return 1\n") == replay.python_meaning("def g():\n    return 1\n")


# -- reference sets ------------------------------------------------------------------------------------
def test_the_recorder_writes_to_the_named_set_and_replay_reads_the_reference(recordings, monkeypatch):
    replay.save(M, "00_setup", "prog", "src", [], {"stdout": "by name"})
    monkeypatch.setenv("STREAMALLOC_RECORD_TO", "h100-cuda12")
    replay.save(M, "00_setup", "prog", "src", [], {"stdout": "cuda 12"})
    assert replay.available() == ["h100-cuda12", "nvidia-test-gpu"]
    assert replay.reference() is None  # two sets, neither the default: nothing is guessed
    monkeypatch.setenv("STREAMALLOC_REFERENCE", "h100-cuda12")
    assert replay.load(replay.reference(), "00_setup", "prog", "src", [])["stdout"] == "cuda 12"
    monkeypatch.setenv("STREAMALLOC_REFERENCE", "nothing-like-it")
    with pytest.raises(MissingRecording, match="h100-cuda12, nvidia-test-gpu"):
        replay.reference()
    monkeypatch.delenv("STREAMALLOC_REFERENCE")
    monkeypatch.setenv("STREAMALLOC_RECORD_TO", replay.DEFAULT_REFERENCE)
    replay.save(M, "00_setup", "prog", "src", [], {"stdout": "default"})
    assert replay.reference() == replay.DEFAULT_REFERENCE == "nvidia-h200"
    monkeypatch.setenv("STREAMALLOC_RECORD_TO", "Not A Slug")
    with pytest.raises(ValueError, match="not-a-slug"):
        replay.save(M, "00_setup", "prog", "src", [], {})


def test_machine_json_is_what_the_machine_says_and_extra_fields_are_kept(recordings, monkeypatch):
    m = Machine(gpu="NVIDIA Test GPU", compute_capability="7.5", pools_supported=True)
    monkeypatch.setattr(Machine, "to_dict", lambda self: {"gpu": self.gpu, "compute_capability": "7.5",
                                                          "cupy_package": "cupy-cuda12x"})
    replay.save(m, "00_setup", "prog", "src", [], {"stdout": ""})
    saved = json.loads((recordings / "nvidia-test-gpu" / "machine.json").read_text())
    assert saved == {"gpu": "NVIDIA Test GPU", "compute_capability": "7.5", "cupy_package": "cupy-cuda12x"}
    assert replay.machine("nvidia-test-gpu").compute_capability == "7.5"


# -- damaged recordings, atomic writes ------------------------------------------------------------------
@pytest.mark.parametrize("text, why", [('{"runs": {"abc": {"args": [], "sou', "not valid JSON.*line 1"),
                                       ("", "is empty"), ("[1, 2]", "JSON list"),
                                       ('{"version": 1}', 'no "runs"'), ('{"runs": {}}', "holds no runs"),
                                       ('{"runs": {"k": {"stdout": "x"}}}', 'lacks "args" or "source_sha"')])
def test_a_damaged_recording_names_the_file_and_what_is_wrong(recordings, text, why):
    path = recordings / "nvidia-test-gpu" / "00_setup" / "prog.json"
    path.parent.mkdir(parents=True)
    path.write_text(text)
    with pytest.raises(BrokenRecording, match=why) as e:
        replay.load("nvidia-test-gpu", "00_setup", "prog", "src", [])
    assert str(path) in str(e.value)


def test_a_damaged_machine_description_names_the_file(recordings):
    (recordings / "nvidia-test-gpu").mkdir(parents=True)
    (recordings / "nvidia-test-gpu" / "machine.json").write_text('{"gpu": "NVIDIA')
    with pytest.raises(BrokenRecording, match="machine description .*machine.json is not valid JSON"):
        replay.machine("nvidia-test-gpu")


def test_the_recorder_writes_whole_files_or_nothing(recordings, monkeypatch):
    path = replay.save(M, "00_setup", "prog", "src", ["1"], {"stdout": "first"})
    before = path.read_text()

    def crash(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(replay.os, "replace", crash)
    with pytest.raises(OSError, match="disk full"):
        replay.save(M, "00_setup", "prog", "src", ["2"], {"stdout": "second"})
    assert path.read_text() == before  # the old file is whole
    assert sorted(p.name for p in path.parent.iterdir()) == ["machine.json", "prog.json"]  # no temporary left


def test_a_python_program_is_keyed_on_the_modules_beside_it_that_it_imports(tmp_path):
    prog = tmp_path / "prog.py"
    prog.write_text("import json\nimport helper\nfrom other import g\nprint(helper.f(), g())\n")
    (tmp_path / "helper.py").write_text("from deeper import h\ndef f():\n    return h()\n")
    (tmp_path / "deeper.py").write_text("def h():\n    return 1\n")
    (tmp_path / "other.py").write_text("def g():\n    return 2\n")
    (tmp_path / "unused.py").write_text("x = 1\n")
    assert [m.name for m in replay.imported_modules(prog)] == ["helper.py", "deeper.py", "other.py"]
    before = replay.program_key(prog)
    (tmp_path / "unused.py").write_text("x = 2\n")  # not imported: the key stays
    (tmp_path / "helper.py").write_text('"""A docstring."""\nfrom deeper import h  # a comment\ndef f():\n    return h()\n')
    assert replay.program_key(prog) == before  # a docstring or a comment in a module: stays
    (tmp_path / "deeper.py").write_text("def h():\n    return 3\n")  # imported, transitively: changes
    assert replay.program_key(prog) != before
    alone = tmp_path / "alone.py"
    alone.write_text("import json\nprint(1)\n")  # imports nothing beside it: the key is the program's as before
    assert replay.program_meaning(alone) == replay.python_meaning(alone.read_text())


def test_a_truncated_recording_in_a_two_gpu_lesson_names_its_file(recordings):
    """05b looks through every set for a run made on two GPUs: a truncated file there is a BrokenRecording that
    names the file, not a raw JSONDecodeError."""
    import types

    from streamalloc import lesson as lesson_mod
    replay.save(M, "05b_two_gpus", "current_device", "source", ["1"], {"stdout": "", "gpus": 2})
    path = replay.path_of("nvidia-test-gpu", "05b_two_gpus", "current_device")
    path.write_text(path.read_text()[:40])
    fake = types.SimpleNamespace(name="05b_two_gpus", reference_gpu="nvidia-test-gpu", live=False)
    with pytest.raises(BrokenRecording, match=f"{path}.*not valid JSON"):
        lesson_mod.Lesson._sets_with(fake, 2)


def test_replay_without_nvcc_says_nvcc_is_missing_for_a_program_never_recorded(recordings, monkeypatch):
    """00's compile-error demo in replay on a machine without nvcc: not MissingRecording ('re-record it on a GPU'),
    but that nvcc is missing, so the program could not be compiled (a recorded program still replays)."""
    from streamalloc import gpu, lesson as lesson_mod
    from streamalloc.errors import NvccNotFound
    monkeypatch.setenv("STREAMALLOC_MODE", "replay")
    monkeypatch.setattr(gpu, "nvcc_path", lambda: None)
    monkeypatch.setattr(gpu, "probe", lambda device=0: Machine(problem="no GPU here"))
    lesson = lesson_mod.start("00_setup", quiet=True)
    (lesson.build / "broken.cu").write_text('#include "course.cuh"\nint main() { return undefined_name; }\n')
    with pytest.raises(NvccNotFound, match="broken.cu could not be compiled: nvcc, the CUDA compiler, was not found"):
        lesson.run("broken.cu")
    (lesson.build / "fine.cu").write_text('#include "course.cuh"\nint main() { return 0; }\n')
    replay.save(M, "00_setup", "fine", lesson.key_source(lesson.build / "fine.cu"), [], {"stdout": "{\"ok\": 1}\n"})
    lesson.reference_gpu = replay.reference()
    assert lesson.run("fine.cu").records.one()["ok"] == 1


def test_a_damaged_measurement_in_a_recording_names_its_file(recordings):
    replay.save(M, "03_pools", "grid", "source", ["1"], {"data": "{\"a\": [1, 2", "seconds": 1.0})
    run = replay.load("nvidia-test-gpu", "03_pools", "grid", "source", ["1"])
    path = replay.path_of("nvidia-test-gpu", "03_pools", "grid")
    with pytest.raises(BrokenRecording, match=f"{path}: a run's \"data\" is not valid JSON"):
        replay.run_data(run, path)


# -- an input file's argument in a recording's key ---------------------------------------------------------------------------------
def test_an_input_file_is_keyed_by_its_content_not_its_place(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    (a / "t.trace").write_text("a 0 8 0\nf 0\ns\n")
    (b / "t.trace").write_text("a 0 8 0\nf 0\ns\n")
    ka = replay.input_args([str(a / "t.trace"), "all", 3], a)
    kb = replay.input_args(["t.trace", "all", 3], b)  # relative to the lesson's build folder
    assert ka == kb and ka[0].startswith("t.trace#sha256:") and ka[1:] == ["all", "3"]
    (b / "t.trace").write_text("a 0 16 0\nf 0\ns\n")
    assert replay.input_args(["t.trace"], b) != ka[:1], "another content must give another key"
    assert replay.input_args(["missing.trace", "1.5", "64"], b) == ["missing.trace", "1.5", "64"]


def test_lesson_run_records_and_replays_under_the_content_key(tmp_path, monkeypatch):
    """A recording made with the input file in one folder replays with the same file in another (another machine)."""
    monkeypatch.setenv("STREAMALLOC_RECORDINGS", str(tmp_path / "rec"))
    m = Machine(gpu="Test GPU", date="2026-01-01")
    source = "int main() {}"
    (tmp_path / "x").mkdir()
    trace = tmp_path / "x" / "t.trace"
    trace.write_text("a 0 8 0\nf 0\ns\n")
    replay.save(m, "l", "p", source, replay.input_args([trace, "all"], tmp_path / "x"), {"stdout": "{\"ok\": 1}\n"})
    other = tmp_path / "y" / "t.trace"
    other.parent.mkdir()
    other.write_text(trace.read_text())
    run = replay.load("test-gpu", "l", "p", source, replay.input_args([other, "all"], other.parent))
    assert run["stdout"] == "{\"ok\": 1}\n"
    other.write_text("a 0 9 0\nf 0\ns\n")
    with pytest.raises(StaleRecording):
        replay.load("test-gpu", "l", "p", source, replay.input_args([other, "all"], other.parent))


# -- a recordings folder with a link that loops, or a value that is no number -------------------------------
def test_a_recording_that_is_a_symbolic_link_to_itself_is_named_as_such_not_as_missing(recordings):
    replay.save(M, "00_setup", "prog", "src", ["1"], {"stdout": "x"})
    path = recordings / "nvidia-test-gpu" / "00_setup" / "prog.json"
    path.unlink()
    path.symlink_to("prog.json")
    with pytest.raises(BrokenRecording, match="leads back to itself") as e:
        replay.load("nvidia-test-gpu", "00_setup", "prog", "src", ["1"])
    assert str(path) in str(e.value) and "missing" not in str(e.value)
    lesson = recordings / "nvidia-test-gpu" / "00_setup"
    for p in lesson.iterdir():
        p.unlink()
    lesson.rmdir()
    lesson.symlink_to("00_setup")  # the lesson's folder loops
    with pytest.raises(BrokenRecording, match=f"{lesson} is a symbolic link that leads back to itself"):
        replay.load("nvidia-test-gpu", "00_setup", "prog", "src", ["1"])


def test_a_set_or_machine_description_that_loops_is_named_not_called_missing(recordings, monkeypatch):
    replay.save(M, "00_setup", "prog", "src", ["1"], {"stdout": "x"})
    machine = recordings / "nvidia-test-gpu" / "machine.json"
    machine.unlink()
    machine.symlink_to("machine.json")
    assert replay.available() == ["nvidia-test-gpu"]
    with pytest.raises(BrokenRecording, match="machine description .* leads back to itself"):
        replay.machine("nvidia-test-gpu")
    monkeypatch.setenv("STREAMALLOC_REFERENCE", "loop")
    (recordings / "loop").symlink_to("loop")
    with pytest.raises(BrokenRecording, match="recordings of loop cannot be read: .*leads back to itself"):
        replay.reference()


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_a_recording_holding_nan_or_infinity_is_damaged_and_says_which(recordings, constant):
    replay.save(M, "00_setup", "prog", "src", ["1"], {"stdout": "x", "data": "[1.0]"})
    path = recordings / "nvidia-test-gpu" / "00_setup" / "prog.json"
    path.write_text(path.read_text().replace('"[1.0]"', constant))
    with pytest.raises(BrokenRecording, match=f"holds {constant}, which is not a number") as e:
        replay.load("nvidia-test-gpu", "00_setup", "prog", "src", ["1"])
    assert str(path) in str(e.value)
    path.write_text(path.read_text().replace(constant, f'"[{constant}]"'))  # inside a measurement's data
    run = replay.load("nvidia-test-gpu", "00_setup", "prog", "src", ["1"])
    with pytest.raises(BrokenRecording, match=f"holds {constant}"):
        replay.run_data(run, path)
    machine = recordings / "nvidia-test-gpu" / "machine.json"
    machine.write_text(machine.read_text().replace('"9.0"', constant))
    with pytest.raises(BrokenRecording, match=f"machine description .*holds {constant}"):
        replay.machine("nvidia-test-gpu")
