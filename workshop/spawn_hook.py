"""What the hub does when a learner's server starts and stops (jupyterhub_config.py installs it):

    room = Room(gpus=2, per_gpu=4)           # the server's GPUs and how many learners each may take
    room.take("alice")                       # the GPU with the fewest learners: "0"; RoomFull when all are full
    room.leave("alice")                      # her server stopped: her seat is free again
    copy_course(source, home, owner)         # her own copy of the course, made once, at her first login, by a
                                             # process of hers (python spawn_hook.py SOURCE HOME)

Seats are kept in the hub's memory: JupyterHub stops every learner's server when it stops (cleanup_servers, its
default), so a restarted hub starts with an empty room.
"""
from __future__ import annotations

import asyncio
import os
import pwd
import shutil
import subprocess
import sys
import time
from pathlib import Path

COURSE_DIR = "stream-ordered-allocator"  # the copy's name in a learner's home (as in the archive `make dist` writes)
# the hub's state (jupyterhub_config.py keeps it in WORKSHOP_STATE, but a hub started in the course by hand would
# write it there): its cookie secret and database sign and hold every login, and are never copied to a learner
HUB_STATE = ("jupyterhub_cookie_secret", "jupyterhub.sqlite*", "jupyterhub-proxy.pid")
# what a copy leaves out: builds, environments and caches of the source are the instructor's, not the course
SKIP = shutil.ignore_patterns(".git", "build", ".venv", ".site", "__pycache__", ".ipynb_checkpoints", ".pytest_cache",
                              *HUB_STATE)
PAUSE = "WORKSHOP_TEST_PAUSE"  # pause_for_test's setting


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


class CopyRefused(Exception):
    """The learner's copy could not be made (said in one line, shown to the learner by the hub)."""


def copy_course(source: Path, home: Path, owner: str | None = None) -> Path:
    """The learner's copy, home/stream-ordered-allocator: made from `source` at the first login, never touched
    again (their edits are theirs). With system users (`owner`, the hub running as root) it is made by a process of
    the learner's own uid and groups, so that nothing root does follows a path in the learner's home: a link they
    plant there leads only where they could go themselves. `source` must be readable by every learner."""
    if owner is None:
        return make_copy(Path(source), Path(home))
    user = pwd.getpwnam(owner)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8"}
    if os.environ.get(PAUSE):
        env[PAUSE] = os.environ[PAUSE]
    try:
        done = subprocess.run([sys.executable, __file__, str(source), str(home)], user=user.pw_uid,
                              group=user.pw_gid, extra_groups=[], umask=0o077, cwd="/", env=env,
                              capture_output=True, text=True, timeout=900)
    except PermissionError:
        raise CopyRefused(f"{owner} cannot run the course's Python ({sys.executable}): every learner's server runs "
                          "with it, so build the course's environment from a Python every user may run (not one "
                          "under /root)") from None
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        raise CopyRefused(f"{owner}'s copy of the course was not made: {said}")
    return Path(done.stdout.strip())


def make_copy(source: Path, home: Path) -> Path:
    """The copy itself, made by the process that will own it (the learner's, with system users). It is made in a
    private folder beside it (0700) and moved into place whole and private, so nobody else ever sees it half made;
    a copy that is not a plain folder of ours when it is moved (replaced while it was made) is refused."""
    copy = home / COURSE_DIR
    if os.path.lexists(copy):
        return copy
    if not (source / "streamalloc").is_dir():
        raise FileNotFoundError(f"COURSE_SOURCE={source} does not hold the course (no streamalloc/ in it): unpack "
                                "the archive `make dist` writes there, or point it at a checkout")
    home.mkdir(parents=True, exist_ok=True)
    staging = home / f".{COURSE_DIR}.partial"  # a copy cut short is never taken for a whole one
    if staging.is_symlink() or staging.is_file():
        staging.unlink()
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(mode=0o700)
    made = staging / COURSE_DIR
    shutil.copytree(source, made, ignore=SKIP, symlinks=True)
    made.chmod(0o700)  # the learner's work is theirs alone
    pause_for_test(home.name)
    if made.is_symlink() or not made.is_dir() or made.stat().st_uid != os.getuid():
        raise CopyRefused(f"{made} was replaced while the copy was made; nothing was moved into place")
    made.rename(copy)
    staging.rmdir()
    return copy


def pause_for_test(name: str) -> None:
    """tools/hub_users_test.py's pause point, between making the copy and moving it into place, where a planted
    link would matter: with $WORKSHOP_TEST_PAUSE naming a folder that holds <name>.hold, say <name>.copied there
    and wait until the hold is gone (at most 2 minutes). Without the setting (as in any room) nothing happens."""
    folder = os.environ.get(PAUSE)
    if not folder or not os.path.exists(os.path.join(folder, f"{name}.hold")):
        return
    Path(folder, f"{name}.copied").touch()
    end = time.monotonic() + 120
    while os.path.exists(os.path.join(folder, f"{name}.hold")) and time.monotonic() < end:
        time.sleep(0.1)


def home_of(spawner) -> Path:
    """A learner's home: SimpleLocalProcessSpawner's home_dir (no system users), else the system user's home."""
    home = getattr(spawner, "home_dir", None)
    return Path(home) if home else Path(pwd.getpwnam(spawner.user.name).pw_dir)


def hooks(room: Room, source: Path, system_users: bool):
    """JupyterHub's pre_spawn_hook and post_stop_hook for this room."""

    async def pre_spawn_hook(spawner):
        from tornado.web import HTTPError  # the hub shows an HTTPError's message to the learner, as it is

        name = spawner.user.name
        try:
            gpu = room.take(name)
        except RoomFull as e:
            raise HTTPError(503, str(e)) from None
        try:  # in a thread: the hub keeps answering everyone else while a copy is made
            copy = await asyncio.to_thread(copy_course, source, home_of(spawner), name if system_users else None)
        except CopyRefused as e:
            room.leave(name)
            raise HTTPError(500, str(e)) from None
        except BaseException:
            room.leave(name)  # a failed start keeps no seat
            raise
        spawner.environment["CUDA_VISIBLE_DEVICES"] = gpu
        spawner.notebook_dir = str(copy)
        spawner.log.info("%s: GPU %s, course at %s", name, gpu or "none", copy)

    def post_stop_hook(spawner):
        room.leave(spawner.user.name)

    return pre_spawn_hook, post_stop_hook


def main(argv: list[str]) -> int:
    """python spawn_hook.py SOURCE HOME: make_copy, run as the learner by copy_course; prints the copy's path."""
    if len(argv) != 2:
        print("usage: python workshop/spawn_hook.py SOURCE HOME", file=sys.stderr)
        return 2
    try:
        print(make_copy(Path(argv[0]), Path(argv[1])))
    except (OSError, CopyRefused) as e:
        print(f"{type(e).__name__}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
