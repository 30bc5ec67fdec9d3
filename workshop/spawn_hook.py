"""What the hub does when a learner's server starts and stops (jupyterhub_config.py installs it):

    room = Room(gpus=2, per_gpu=4)           # the server's GPUs and how many learners each may take
    room.take("alice")                       # the GPU with the fewest learners: "0"; RoomFull when all are full
    room.leave("alice")                      # her server stopped: her seat is free again
    copy_course(source, home, owner)         # her own copy of the course, made once, at her first login

Seats are kept in the hub's memory: JupyterHub stops every learner's server when it stops (cleanup_servers, its
default), so a restarted hub starts with an empty room.
"""
from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from pathlib import Path

COURSE_DIR = "stream-ordered-allocator"  # the copy's name in a learner's home (as in the archive `make dist` writes)
# what a copy leaves out: builds, environments and caches of the source are the instructor's, not the course
SKIP = shutil.ignore_patterns(".git", "build", ".venv", ".site", "__pycache__", ".ipynb_checkpoints", ".pytest_cache")


class RoomFull(Exception):
    """Every GPU has its cap of learners."""


def count_gpus(setting: str | None = None) -> int:
    """How many GPUs the learners share: $WORKSHOP_GPUS (a stand-in count, for a test), else the lines of
    `nvidia-smi -L`, else 0 (no GPU: the course replays, and nobody needs a seat)."""
    setting = os.environ.get("WORKSHOP_GPUS", "") if setting is None else setting
    if setting.strip():
        if not setting.strip().isdigit():
            raise ValueError(f"WORKSHOP_GPUS={setting!r} must be a whole number of GPUs (0 for none)")
        return int(setting)
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(line.startswith("GPU ") for line in out.stdout.splitlines()) if out.returncode == 0 else 0


class Room:
    """Learners spread over the GPUs, at most `per_gpu` on each (the preflight's `--learners K` says how many hold)."""

    def __init__(self, gpus: int, per_gpu: int):
        if gpus < 0 or per_gpu < 1:
            raise ValueError(f"a room needs 0 GPUs or more and at least 1 learner a GPU (got {gpus} and {per_gpu})")
        self.gpus, self.per_gpu = gpus, per_gpu
        self.seats: dict[str, int] = {}  # learner -> GPU index

    def take(self, name: str) -> str:
        """The value of CUDA_VISIBLE_DEVICES for this learner: the GPU with the fewest learners (the lowest index of
        those), kept if the learner has one already; "" on a server without GPUs."""
        if self.gpus == 0:
            return ""
        if name not in self.seats:
            load = [list(self.seats.values()).count(g) for g in range(self.gpus)]
            least = min(range(self.gpus), key=lambda g: (load[g], g))
            if load[least] >= self.per_gpu:
                raise RoomFull(f"The room is full: {self.gpus} GPU{'s' if self.gpus > 1 else ''} with "
                               f"{self.per_gpu} learner{'s' if self.per_gpu > 1 else ''} each, all taken. Ask the "
                               "instructor to stop a server, or to raise WORKSHOP_LEARNERS_PER_GPU.")
            self.seats[name] = least
        return str(self.seats[name])

    def leave(self, name: str) -> None:
        self.seats.pop(name, None)


def copy_course(source: Path, home: Path, owner: str | None = None) -> Path:
    """The learner's copy, home/stream-ordered-allocator: made from `source` at the first login, never touched
    again (their edits are theirs). `owner` (a system user) is given the copy when the hub runs as root."""
    source, copy = Path(source), Path(home) / COURSE_DIR
    if copy.exists():
        return copy
    if not (source / "streamalloc").is_dir():
        raise FileNotFoundError(f"COURSE_SOURCE={source} does not hold the course (no streamalloc/ in it): unpack "
                                "the archive `make dist` writes there, or point it at a checkout")
    home.mkdir(parents=True, exist_ok=True)
    partial = copy.with_name(COURSE_DIR + ".partial")  # a copy cut short is never taken for a whole one
    shutil.rmtree(partial, ignore_errors=True)
    shutil.copytree(source, partial, ignore=SKIP, symlinks=True)
    if owner is not None:
        user = pwd.getpwnam(owner)
        for folder, dirs, files in os.walk(partial):
            for name in [folder, *(os.path.join(folder, f) for f in dirs + files)]:
                os.lchown(name, user.pw_uid, user.pw_gid)
    partial.rename(copy)
    return copy


def home_of(spawner) -> Path:
    """A learner's home: SimpleLocalProcessSpawner's home_dir (no system users), else the system user's home."""
    home = getattr(spawner, "home_dir", None)
    return Path(home) if home else Path(pwd.getpwnam(spawner.user.name).pw_dir)


def hooks(room: Room, source: Path, system_users: bool):
    """JupyterHub's pre_spawn_hook and post_stop_hook for this room."""

    def pre_spawn_hook(spawner):
        name = spawner.user.name
        try:
            gpu = room.take(name)
        except RoomFull as e:
            from tornado.web import HTTPError  # the hub shows an HTTPError's message to the learner, as it is
            raise HTTPError(503, str(e)) from None
        try:
            copy = copy_course(source, home_of(spawner), owner=name if system_users else None)
        except BaseException:
            room.leave(name)  # a failed start keeps no seat
            raise
        spawner.environment["CUDA_VISIBLE_DEVICES"] = gpu
        spawner.notebook_dir = str(copy)
        spawner.log.info("%s: GPU %s, course at %s", name, gpu or "none", copy)

    def post_stop_hook(spawner):
        room.leave(spawner.user.name)

    return pre_spawn_hook, post_stop_hook
