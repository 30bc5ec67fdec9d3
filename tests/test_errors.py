"""What a learner sees when something fails: the course's errors show their message, not the helper package's
frames; the full traceback stays one call away (`%tb verbose`, or err.full_traceback())."""
import pytest
from IPython.core.interactiveshell import InteractiveShell

from streamalloc import checks
from streamalloc.errors import CompileError, CourseError, ProgramFailed, ProgramTimedOut


@pytest.fixture(scope="module")
def shell():
    sh = InteractiveShell.instance(colors="nocolor")
    yield sh
    InteractiveShell.clear_instance()


@pytest.mark.parametrize("raise_it, shown", [
    ("from streamalloc import cuda\n"
     "from pathlib import Path\n"
     "raise cuda.compile_error(Path('broken.cu'), 'broken.cu(6): error: identifier \"undefined_name\" is undefined')",
     "CompileError: broken.cu does not compile: broken.cu:6: identifier \"undefined_name\" is undefined"),
    ("from streamalloc.errors import ProgramFailed\nraise ProgramFailed('race exited with status 1.', 1, '', '')",
     "ProgramFailed: race exited with status 1."),
    ("from streamalloc.errors import ProgramTimedOut\nraise ProgramTimedOut('hang ran longer than its 2 s timeout', '', '')",
     "ProgramTimedOut: hang ran longer than its 2 s timeout"),
    ("from streamalloc import checks\nr = checks.Report('lab 1')\nraise checks.LabIncomplete('1 thing still wrong: x')",
     "LabIncomplete: 1 thing still wrong: x"),
])
def test_a_course_error_shows_its_message_without_package_frames(shell, capsys, raise_it, shown):
    shell.run_cell("import streamalloc.cuda as _c\ndef from_the_package():\n    exec(" + repr(raise_it) + ")\n")
    capsys.readouterr()
    shell.run_cell("from_the_package()")
    out = capsys.readouterr().out
    assert shown in out
    assert "streamalloc/" not in out and "Traceback" not in out and "exec(" not in out
    assert "%tb verbose" in out
    shell.run_cell("%tb verbose")
    full = capsys.readouterr().out
    assert "Traceback" in full and "from_the_package" in full and shown.split(":")[0] in full


def test_the_full_traceback_is_an_attribute_away():
    def inner():
        raise ProgramFailed("x exited with status 2.", 2, "", "")
    with pytest.raises(ProgramFailed) as e:
        inner()
    text = e.value.full_traceback()
    assert "Traceback (most recent call last)" in text and "in inner" in text and text.rstrip().endswith(
        "x exited with status 2.")


def test_every_learner_facing_error_is_a_course_error():
    for cls in (CompileError, ProgramFailed, ProgramTimedOut, checks.LabIncomplete):
        assert issubclass(cls, CourseError) and hasattr(cls, "_render_traceback_")


def test_other_errors_keep_their_traceback(shell, capsys):
    shell.run_cell("def f():\n    return 1 / 0\nf()")
    out = capsys.readouterr().out
    assert "Traceback" in out and "1 / 0" in out and "ZeroDivisionError" in out  # IPython's own rendering


def test_bad_settings_give_one_clear_message(tmp_path, monkeypatch, capsys):
    """Every bad STREAMALLOC_* value, named in one message: from the command line one line, no traceback."""
    from streamalloc import cli
    from streamalloc.errors import BadSetting
    from streamalloc.settings import check_settings

    bad = {"STREAMALLOC_MODE": "fast", "STREAMALLOC_CELL_TIMEOUT": "ten", "STREAMALLOC_ARCH": "sm90",
           "STREAMALLOC_RECORD": "yes", "STREAMALLOC_RECORD_TO": "My GPU", "STREAMALLOC_REFERENCE": "no-such-set",
           "STREAMALLOC_RECORDINGS": str(tmp_path / "a-file")}
    (tmp_path / "a-file").write_text("")
    with pytest.raises(BadSetting) as e:
        check_settings(bad)
    for name in bad:
        assert f"{name}=" in str(e.value), name
    assert check_settings({})["STREAMALLOC_CELL_TIMEOUT"] == 900
    for name, value in bad.items():
        monkeypatch.setenv(name, value)
        assert cli.main(["run", str(tmp_path)]) == 2
        err = capsys.readouterr().err
        assert f"{name}=" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
        monkeypatch.delenv(name)
