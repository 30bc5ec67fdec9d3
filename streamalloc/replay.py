"""Recording and replaying: measurements made on a real GPU, stored so that a machine without one
shows the same figures, marked as replayed.

Layout: recordings/<gpu>/machine.json (the machine and the date) and
recordings/<gpu>/<lesson>/<name>.json, whose "runs" map a key to the run's raw output. The key is
a hash of the program's source (with the course header) and its arguments: when the lesson's code
changes, the old recording no longer matches and replay says to re-record, never falls back.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

from .errors import MissingRecording, StaleRecording
from .gpu import Machine

ROOT = Path(__file__).resolve().parent.parent / "recordings"
RERECORD = "re-record it on a GPU with `make record` (see README.md)"


def root() -> Path:
    return Path(os.environ.get("STREAMALLOC_RECORDINGS", ROOT))


def slug(gpu_name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", gpu_name.lower()).strip("-")


def key(source: str, args) -> str:
    return hashlib.sha256(json.dumps([source, [str(a) for a in args]]).encode()).hexdigest()[:20]


def source_hash(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:20]


def available() -> list[str]:
    r = root()
    return sorted(p.parent.name for p in r.glob("*/machine.json")) if r.is_dir() else []


def reference() -> str | None:
    """The recording to replay: $STREAMALLOC_REFERENCE, else the only one, else the H100's."""
    want = os.environ.get("STREAMALLOC_REFERENCE")
    have = available()
    if want:
        if want not in have:
            raise MissingRecording(f"STREAMALLOC_REFERENCE={want}, but recordings/ holds only {have or 'nothing'}")
        return want
    if len(have) > 1:
        h100 = [h for h in have if "h100" in h]
        return (h100 or have)[0]
    return have[0] if have else None


def machine(gpu_dir: str, lesson: str | None = None) -> Machine:
    """The recorded machine; a lesson's own copy holds the free memory its sweeps were sized from."""
    own = root() / gpu_dir / (lesson or "") / "machine.json"
    path = own if lesson and own.is_file() else root() / gpu_dir / "machine.json"
    return Machine.from_dict(json.loads(path.read_text()))


def _file(gpu_dir: str, lesson: str, name: str) -> Path:
    return root() / gpu_dir / lesson / f"{name}.json"


def load(gpu_dir: str, lesson: str, name: str, source: str, args) -> dict:
    """The recorded run of this source with these arguments, or an error that says what changed."""
    path = _file(gpu_dir, lesson, name)
    if not path.is_file():
        raise MissingRecording(f"no recording of {lesson}/{name} for {gpu_dir} ({path} is missing): {RERECORD}")
    runs = json.loads(path.read_text())["runs"]
    k = key(source, args)
    if k in runs:
        return runs[k]
    h = source_hash(source)
    if any(r["source_sha"] != h for r in runs.values()):
        why = "its code changed after it was recorded"
    else:
        recorded = sorted({" ".join(map(str, r["args"])) or "(none)" for r in runs.values()})
        why = f"it was recorded with other arguments ({', '.join(recorded[:6])}), not {' '.join(map(str, args)) or '(none)'}"
    raise StaleRecording(f"the recording of {lesson}/{name} on {gpu_dir} does not match: {why}; {RERECORD}")


_started: set[Path] = set()  # files this process has begun to write: the first save replaces an old file


def save(m: Machine, lesson: str, name: str, source: str, args, run: dict) -> Path:
    path = _file(slug(m.gpu), lesson, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    for where in (path.parent.parent, path.parent):  # the GPU's description, and the lesson's own
        (where / "machine.json").write_text(json.dumps(m.to_dict(), indent=1, sort_keys=True) + "\n")
    data = json.loads(path.read_text()) if path in _started and path.is_file() else {"runs": {}}
    _started.add(path)
    data["runs"][key(source, args)] = {"args": [str(a) for a in args], "source_sha": source_hash(source), **run}
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return path


def recording() -> bool:
    """True in the recorder (STREAMALLOC_RECORD=1): live runs are written to recordings/."""
    return os.environ.get("STREAMALLOC_RECORD", "") == "1"
