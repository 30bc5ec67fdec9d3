"""The launcher every program of the course runs under (streamalloc.cuda.run starts it):

    python -I -S launcher.py REPORT_FD PROGRAM [ARGS...]    (the program's environment, as JSON, on its stdin)

It makes itself a child subreaper (prctl PR_SET_CHILD_SUBREAPER, Linux 3.4+): a process the program starts that
outlives its parent, one that called setsid (a daemon, out of the program's process group) included, becomes the
launcher's child instead of init's. It starts the program and waits for it; when the program has ended, or on
SIGTERM (cuda.run's timeout, an interrupt), it kills every process left below it, so that none keeps the program's
stdout open (the caller would wait on it past any timeout) or runs on behind the cell. Then it writes, on REPORT_FD
(a pipe only the caller reads: the program does not inherit it), one JSON object: {"killed": ["pid N: command", ...]}
(or {"errno": n} where the program could not be started), and exits as the program did (its status, or its signal).

Run as a script with the standard library alone (no site, no course package), so that it starts in milliseconds.
It runs with an empty environment of its own and reads the program's from its stdin (the program gets /dev/null
there): nothing of the program's environment (the call record's key, the recorder's LD_PRELOAD) is in the
launcher's /proc/<pid>/environ or in the launcher's process itself.
"""
import ctypes
import json
import os
import signal
import sys
import time

PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>
SHOWN = 20  # processes named in the report at most
GRACE = 2.0  # s: how long killing the processes left may take before the launcher gives up on them


class Stop(Exception):
    """SIGTERM: the caller's timeout, or an interrupt."""


def _stop(signum, frame):
    raise Stop


def _stat(pid: int):
    """(parent pid, state letter) of a process, or None where it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[1]), fields[0].decode()


def descendants(root: int) -> tuple[list[int], list[int]]:
    """The processes below `root`: those alive, and those dead but not yet reaped (zombies).

    A zombie counts: a process that forked after /proc was listed and then died shows as a zombie, while the child it
    made (already handed to the subreaper, not yet in the listing) is missed; the caller reaps and looks again."""
    children = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _stat(int(name))
            if st:
                children.setdefault(st[0], []).append((int(name), st[1] == "Z"))
    alive, dead, todo = [], [], [root]
    while todo:
        for pid, zombie in children.get(todo.pop(), []):
            (dead if zombie else alive).append(pid)
            todo.append(pid)
    return alive, dead


def command(pid: int) -> str:
    """A process's command line, shortened, for the report; "" for one already exiting (its memory, and with it its
    command line, is gone before it becomes a zombie): it was not left running."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().decode(errors="replace").split("\0")
    except OSError:
        return ""
    # a long path is named by its file (the program and its arguments are what a reader recognizes; a deep folder
    # would push them past the cut), and the whole is cut at 160 characters
    text = " ".join(os.path.basename(arg) if "/" in arg and len(arg) > 40 else arg for arg in argv if arg)
    return f"pid {pid}: {text[:160]}" if text else ""


def _reap() -> None:
    """Collect every child that has ended (the program's orphans come here to end)."""
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                return
        except ChildProcessError:
            return


def end_all(spare: int = 0) -> list[str]:
    """Kill every process below this one, until none is left (or GRACE has passed); the commands of those killed,
    but `spare`'s (the program itself, killed at a timeout: the caller names it)."""
    killed, deadline = {}, time.monotonic() + GRACE
    while time.monotonic() < deadline:
        pids, dead = descendants(os.getpid())
        if not pids and not dead:  # nothing alive, and no death since the listing that could hide a new child
            break
        for pid in pids + dead:  # a "zombie" whose main thread ended may still run other threads: SIGKILL ends them
            if pid in pids and pid != spare and pid not in killed:
                killed[pid] = command(pid)  # read before the kill, while it still runs
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.005)
        _reap()
    _reap()
    return [text for text in killed.values() if text]


def main(argv: list[str]) -> None:
    fd, program = int(argv[1]), argv[2:]
    env = json.loads(sys.stdin.buffer.read() or b"{}")
    null = os.open(os.devnull, os.O_RDONLY)  # the program's stdin
    os.dup2(null, 0)
    os.close(null)
    os.environ["PATH"] = env.get("PATH", os.defpath)  # where posix_spawnp looks for a program named without a path
    os.set_inheritable(fd, False)
    signal.signal(signal.SIGTERM, _stop)
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the program's own descendants are still found while it runs
        pass
    report, pid, status = {}, 0, None
    try:
        try:
            # as subprocess starts a program: SIGPIPE and SIGXFSZ back to their defaults (Python ignores them)
            pid = os.posix_spawnp(program[0], program, env, setsigdef=(signal.SIGPIPE, signal.SIGXFSZ))
        except OSError as e:
            report["errno"] = e.errno
        else:
            status = os.waitpid(pid, 0)[1]
    except Stop:
        report["stopped"] = True
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second one changes nothing now
    killed = end_all(spare=pid if status is None else 0)
    report["killed"] = killed[:SHOWN] + ([f"and {len(killed) - SHOWN} more"] if len(killed) > SHOWN else [])
    os.write(fd, json.dumps(report).encode())  # well under a pipe's buffer: written whole, read once we exit
    os.close(fd)
    if status is None:
        sys.exit(127 if "errno" in report else 128 + signal.SIGTERM)
    if os.WIFSIGNALED(status):  # end as the program ended, so that the caller sees its signal
        if os.WTERMSIG(status) not in (signal.SIGKILL, signal.SIGSTOP):  # those two have no handler to reset
            signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
        os.kill(os.getpid(), os.WTERMSIG(status))
    sys.exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))


if __name__ == "__main__":
    main(sys.argv)
