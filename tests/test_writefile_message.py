"""What a `%%writefile {lesson.build}/x.cu` cell shows: the file's name in lesson.build, not the build folder's whole
path (build/cuda/<lesson>-<key>/run-<pid>-<token>/x.cu); the file is written where it always was."""
import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from streamalloc import lesson as lesson_mod


@pytest.fixture
def shell():
    created = not InteractiveShell.initialized()
    yield InteractiveShell.instance()
    if created:
        InteractiveShell.clear_instance()


def cell(shell, source):
    with capture_output() as shown:
        result = shell.run_cell(source)
    return result, shown.stdout


def test_a_lessons_writefile_names_the_file_in_lesson_build(shell, tmp_path, monkeypatch):
    monkeypatch.setenv("STREAMALLOC_MODE", "replay")
    monkeypatch.setenv("STREAMALLOC_BUILD", str(tmp_path / "build"))
    monkeypatch.chdir(tmp_path)
    shell.user_ns["lesson"] = lesson = lesson_mod.start("00_setup", quiet=True)
    assert "run-" in str(lesson.build)
    result, said = cell(shell, "%%writefile {lesson.build}/prog.cu\nint main() { return 0; }\n")
    assert result.success and said == "Writing prog.cu (in lesson.build)\n", said
    assert (lesson.build / "prog.cu").read_text() == "int main() { return 0; }\n"
    result, said = cell(shell, "%%writefile -a {lesson.build}/prog.cu\n// more\n")
    assert said == "Appending to prog.cu (in lesson.build)\n" and "// more" in (lesson.build / "prog.cu").read_text()
    result, said = cell(shell, "%%writefile {lesson.build}/prog.cu\nint main() {}\n")
    assert said == "Overwriting prog.cu (in lesson.build)\n"
    assert str(tmp_path) not in said and "run-" not in said
    # a file elsewhere keeps IPython's own words and path; a second lesson does not wrap the magic twice
    result, said = cell(shell, f"%%writefile {tmp_path}/notes.txt\nx\n")
    assert said == f"Writing {tmp_path}/notes.txt\n" and (tmp_path / "notes.txt").read_text() == "x\n"
    lesson_mod.start("01_sync_vs_async", quiet=True)
    result, said = cell(shell, "%%writefile {lesson.build}/again.cu\nint x;\n")
    assert said == "Writing again.cu (in lesson.build)\n"


def test_a_writefile_that_fails_still_raises(shell, tmp_path):
    lesson_mod.short_writefile(tmp_path)
    result, said = cell(shell, f"%%writefile {tmp_path}/missing/folder/x.cu\nint x;\n")
    assert not result.success and isinstance(result.error_in_exec, OSError)
