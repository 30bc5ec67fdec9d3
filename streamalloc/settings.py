"""The course's settings: its STREAMALLOC_* environment variables, checked all at once (cli, lesson, runner).

    values = settings.check_settings()        # {name: value}, or BadSetting naming every bad one
    env = settings.absolute_folders(env)      # relative folders made absolute: the runner's kernels run elsewhere
"""
from __future__ import annotations

import os
from pathlib import Path

from .errors import BadSetting
from .gpu import ARCH
from .course import RECORDINGS, slug


FOLDERS = ("STREAMALLOC_BUILD", "STREAMALLOC_RECORDINGS", "STREAMALLOC_KEY_FIGURES")  # the settings that name a folder


def absolute_folders(env: dict, start: Path | None = None) -> dict:
    """env with the folder settings made absolute, a relative one against `start` (default: the directory the command
    was run from), which is what it means to the user who typed it: a notebook's kernel runs in the notebook's own
    folder, where the same relative path names another folder."""
    start = Path.cwd() if start is None else Path(start)
    return {**env, **{name: str(start / Path(str(env[name]).strip()).expanduser())
                      for name in FOLDERS if str(env.get(name, "")).strip()}}


def check_settings(env=None) -> dict:
    """The course's environment variables, checked all at once: {name: the value to use}, or BadSetting naming every
    variable whose value is wrong and what it may be."""
    env = os.environ if env is None else env
    get = lambda name: str(env.get(name, "")).strip()  # noqa: E731
    problems, values = [], {}
    mode = get("STREAMALLOC_MODE").lower()
    if mode not in ("", "live", "replay"):
        problems.append(f"STREAMALLOC_MODE={get('STREAMALLOC_MODE')!r} must be live or replay (or unset: decided here)")
    arch = get("STREAMALLOC_ARCH")
    if arch and not ARCH.match(arch):
        problems.append(f"STREAMALLOC_ARCH={arch!r} is not an nvcc architecture (for example sm_75, compute_75, native)")
    timeout = get("STREAMALLOC_CELL_TIMEOUT") or "900"
    values["STREAMALLOC_CELL_TIMEOUT"] = int(timeout) if timeout.isdigit() and int(timeout) > 0 else None
    if values["STREAMALLOC_CELL_TIMEOUT"] is None:
        problems.append(f"STREAMALLOC_CELL_TIMEOUT={timeout!r} must be a whole number of seconds above 0 (default 900)")
    if get("STREAMALLOC_RECORD") not in ("", "0", "1"):
        problems.append(f"STREAMALLOC_RECORD={get('STREAMALLOC_RECORD')!r} must be 1 (record) or 0")
    record_to = get("STREAMALLOC_RECORD_TO")
    if record_to and slug(record_to) != record_to:
        problems.append(f"STREAMALLOC_RECORD_TO={record_to!r} must be lower-case letters, digits and '-'")
    recordings = get("STREAMALLOC_RECORDINGS")
    if recordings and Path(recordings).exists() and not Path(recordings).is_dir():
        problems.append(f"STREAMALLOC_RECORDINGS={recordings!r} is a file, not a folder (it names where recordings are)")
    reference = get("STREAMALLOC_REFERENCE")
    if reference:
        root = Path(recordings) if recordings else RECORDINGS
        have = sorted(p.parent.name for p in root.glob("*/machine.json")) if root.is_dir() else []
        if reference not in have:
            problems.append(f"STREAMALLOC_REFERENCE={reference!r} is not a set of recordings in {root} (there are: "
                            f"{', '.join(have) or 'none'})")
    value = get("STREAMALLOC_KEY_FIGURES")
    if value and Path(value).exists() and not Path(value).is_dir():
        problems.append(f"STREAMALLOC_KEY_FIGURES={value!r} must name a folder")
    if problems:
        raise BadSetting("the course's environment variables hold values it cannot use: " + "; ".join(problems)
                         + ". Fix or unset them, then run again.")
    return values
