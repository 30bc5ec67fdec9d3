"""make hub-users-test: the README's hub for a room of system users ("A hub on one GPU server"), set up step by step
as README.md says, as root, then attacked as a hostile learner would. Root only (CI is root): it creates system users.

1. The archive (`make dist`'s build; a lab solved in place in this checkout is handed out as git has it), unpacked
   into a fresh folder that every user can read (room_folder: /dev/shm where it has room, else /srv): COURSE_SOURCE.
2. The course's environment there, as the README says: `make setup`, from a python3 every learner can run (the one
   on PATH, else Debian's /usr/bin/python3: said aloud), then `pip install -r workshop/requirements-hub.txt`;
   configurable-http-proxy with `npm install --global` (its prefix in that folder, so nothing stays behind).
3. The group `workshop` (made, unless it exists) and three system users made here, each with a password: two
   learners and the instructor (WORKSHOP_INSTRUCTOR). Users of those names already there: it refuses to run.
4. The hub, started with the README's command, from the course folder, as root: WORKSHOP_SPAWNER=local where systemd
   is not running (as here), the hub's state in a folder of its own (WORKSHOP_STATE), free ports on 127.0.0.1.
5. Each user logs in with their password through the hub's login form (a wrong password is refused), starts their
   server, and each learner runs notebook 00 and lab 1 in replay in a kernel of their own server.
6. The attacks, each made to happen and each refused:
   - a planted link: at the second learner's first login the copy pauses (workshop/spawn_hook.py's pause point,
     WORKSHOP_TEST_PAUSE) between being made and being moved into place; the learner swaps it for a link to the first
     learner's copy; the hub refuses it, and not one of the first learner's files changes owner or content;
   - reading the other's copy, and the hub's cookie secret and database, from the learner's own kernel: refused;
   - linked summaries for the instructor's page (to /etc/shadow, to the other's summary, build/ itself a link), a
     FIFO, a 1.5 GB sparse summary, a summary with a script: never followed, never hung, cut, shown as text.
   The instructor's page counts the two learners, not the instructor; a learner's token is refused there.
7. The hub stopped; no process of the run or of its users is left; the users, their homes, the group (if made here)
   and the folder removed. Logs and the instructor's pages are kept in build/hub-users-test/.

Exit status 0 when every check held, 1 with what failed, 2 when it cannot run here (said in one line).
"""
from __future__ import annotations

import grp
import hashlib
import os
import pwd
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(1, str(ROOT / "workshop"))
import hub_test as ht  # noqa: E402  the hub's REST API, a learner's kernel, what a learner's run must show
import make_dist  # noqa: E402
from spawn_hook import COURSE_DIR, PAUSE, count_gpus  # noqa: E402

OUT = ROOT / "build" / "hub-users-test"
LEARNERS = ["sa-learner1", "sa-learner2"]
INSTRUCTOR = "sa-instructor"
GROUP = "workshop"
VICTIM, ATTACKER = LEARNERS
LAB = "labs/lab1_stream_ordered.ipynb"


def say(line: str) -> None:
    print(f"hub-users-test: {line}", flush=True)


def sh(*command: str, **kw) -> subprocess.CompletedProcess:
    try:
        done = subprocess.run(command, capture_output=True, text=True, **kw)
    except OSError as e:
        raise ht.Failed(f"`{' '.join(command)}` cannot be run: {e}") from None
    if done.returncode != 0:
        raise ht.Failed(f"`{' '.join(command)}` failed: {(done.stderr or done.stdout).strip()[-300:]}")
    return done


def as_user(name: str, script: str) -> subprocess.CompletedProcess:
    """A shell command run by `name` (their uid, gid and groups), in their home: what a learner can do."""
    user = pwd.getpwnam(name)
    return subprocess.run(["/bin/sh", "-c", script], user=user.pw_uid, group=user.pw_gid,
                          extra_groups=[g.gr_gid for g in grp.getgrall() if name in g.gr_mem], cwd=user.pw_dir,
                          env={"PATH": "/usr/bin:/bin", "HOME": user.pw_dir}, capture_output=True, text=True)


# --- 1-3: the README's set-up ---------------------------------------------------------------------------------------

def unpack_course(srv: Path) -> Path:
    archive = make_dist.build(srv / "dist", allow_edits=True)  # a lab solved here is put back just below
    with zipfile.ZipFile(archive) as z:
        z.extractall(srv)
    shutil.rmtree(srv / "dist")
    course = srv / make_dist.NAME
    ht.labs_as_given(course)
    return course


def learners_python(someone: str) -> str:
    """python3 for the course's environment: one every learner can run (a learner's server and kernels run it)."""
    on_path = shutil.which("python3")
    for candidate in [on_path, "/usr/bin/python3"]:
        if candidate and as_user(someone, f"{os.path.realpath(candidate)} -c 'import venv'").returncode == 0:
            if candidate != on_path:
                say(f"python3 on PATH ({on_path} -> {os.path.realpath(on_path or '')}) cannot be run by a learner, "
                    f"so the course's environment is built from {candidate}, as the README asks")
            return os.path.realpath(candidate)
    raise ht.Failed("no python3 that every learner can run (the course's environment must be built from one)")


def set_up(course: Path, python: str, npm_prefix: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}  # a fresh make,
    env["PATH"] = f"{Path(python).parent}{os.pathsep}{os.environ['PATH']}"  # not the settings of the one running us
    t0 = time.monotonic()
    sh("make", "-C", str(course), "setup", env=env)
    sh(str(course / ".venv" / "bin" / "pip"), "install", "-q", "-r", str(course / "workshop" / "requirements-hub.txt"))
    sh("npm", "install", "--silent", "--no-audit", "--no-fund", "--global", "--prefix", str(npm_prefix),
       "configurable-http-proxy@4")
    say(f"the course's environment and configurable-http-proxy set up ({time.monotonic() - t0:.0f} s)")


def make_users(made: list[str]) -> dict[str, str]:
    """The group and the users, each with a password; `made` collects what is to be removed afterwards."""
    for name in LEARNERS + [INSTRUCTOR]:
        try:
            pwd.getpwnam(name)
            raise ht.Failed(f"a user {name} exists already: this test makes and removes its own users and touches "
                            "no one else's; remove that user, or run it on another machine")
        except KeyError:
            pass
    try:
        grp.getgrnam(GROUP)
    except KeyError:
        sh("groupadd", GROUP)
        made.append(f"group:{GROUP}")
    passwords = {}
    for name in LEARNERS + [INSTRUCTOR]:
        sh("useradd", "--create-home", "--shell", "/bin/bash", "--groups", GROUP, name)
        made.append(name)
        passwords[name] = secrets.token_urlsafe(12)
        sh("chpasswd", input=f"{name}:{passwords[name]}\n")
    return passwords


def remove_users(made: list[str]) -> list[str]:
    problems = []
    for what in reversed(made):
        kind, _, name = what.rpartition(":")
        done = subprocess.run(["groupdel", name] if kind == "group" else ["userdel", "--remove", name],
                              capture_output=True, text=True)
        if done.returncode not in (0, 12):  # 12: userdel removed the user but found no mail spool
            problems.append(f"could not remove {what}: {done.stderr.strip()}")
    return problems


# --- 5: logging in ----------------------------------------------------------------------------------------------------

def log_in(hub: ht.Hub, name: str, password: str) -> str | None:
    """Log in through the hub's form, as a browser does; a token of the user's, made with that login, or None when
    the hub refused the login."""
    import requests

    def xsrf() -> str:  # the hub's anti-forgery cookie, as a page of the hub last set it
        return [c.value for c in browser.cookies if c.name == "_xsrf"][-1]

    browser = requests.Session()
    browser.get(hub.url + "/hub/login", timeout=30)
    browser.post(hub.url + "/hub/login", data={"username": name, "password": password, "_xsrf": xsrf()},
                 allow_redirects=False, timeout=60)
    browser.get(hub.url + "/hub/token", timeout=30)  # a page of the logged-in session, which sets its own cookie
    r = browser.post(hub.url + f"/hub/api/users/{name}/tokens", json={"note": "hub-users-test"},
                     headers={"X-XSRFToken": xsrf()}, timeout=30)
    return r.json()["token"] if r.status_code in (200, 201) else None


def server_state(hub: ht.Hub, name: str, token: str) -> dict:
    return hub.api("GET", f"/hub/api/users/{name}", token=token).json()["servers"].get("", {})


# --- 6: the attacks ---------------------------------------------------------------------------------------------------

def tree(top: Path) -> dict[str, tuple[int, str]]:
    """{path: (owner, a hash of its bytes)} for everything under `top`, links not followed."""
    found = {}
    for folder, dirs, files in os.walk(top):
        for name in [folder, *(os.path.join(folder, f) for f in dirs + files)]:
            info = os.lstat(name)
            data = Path(name).read_bytes() if os.path.isfile(name) and not os.path.islink(name) else b""
            found[name] = (info.st_uid, hashlib.sha256(data).hexdigest())
    return found


def planted_link(hub: ht.Hub, tokens: dict, pause: Path, log_path: Path) -> list[str]:
    """The attacker's first login, paused between the copy and its move into place; the copy is swapped for a link
    to the victim's. Refused: no file of the victim's changes, the attacker gets no copy; their next login works."""
    problems, victim_copy = [], Path(pwd.getpwnam(VICTIM).pw_dir) / COURSE_DIR
    before = tree(victim_copy)
    (pause / f"{ATTACKER}.hold").touch()
    start = threading.Thread(target=lambda: hub.api("POST", f"/hub/api/users/{ATTACKER}/server",
                                                    token=tokens[ATTACKER], ok=(201, 202, 500)))
    start.start()
    ht.wait_for(f"{ATTACKER}'s copy to reach the pause point", (pause / f"{ATTACKER}.copied").exists, timeout=120)
    swap = as_user(ATTACKER, f"cd .{COURSE_DIR}.partial && mv {COURSE_DIR} moved && ln -s {victim_copy} {COURSE_DIR}")
    if swap.returncode != 0:
        problems.append(f"the attacker could not plant the link: {swap.stderr.strip()}")
    (pause / f"{ATTACKER}.hold").unlink()
    start.join()
    ht.wait_for(f"{ATTACKER}'s start to end", lambda: not server_state(hub, ATTACKER, tokens[ATTACKER]), timeout=60)
    if "replaced while the copy was made" not in log_path.read_text():
        problems.append("the hub did not refuse the copy replaced by a link (its log does not say so)")
    after = tree(victim_copy)
    changed = [p for p in before if after.get(p) != before[p]]
    if changed or len(after) != len(before):
        problems.append(f"the planted link changed {len(changed)} of the victim's {len(before)} files "
                        f"(owner or content), e.g. {changed[:3]}")
    if os.path.lexists(Path(pwd.getpwnam(ATTACKER).pw_dir) / COURSE_DIR):
        problems.append("the attacker got a copy (or the link) in place although it was replaced")
    ht.start_server(hub, ATTACKER, tokens[ATTACKER])  # the next login: a clean copy
    return problems


def peeking(course: Path, state: Path) -> str:
    """Code for the attacker's kernel: read the victim's copy and the hub's state; what each attempt met."""
    victim_copy = Path(pwd.getpwnam(VICTIM).pw_dir) / COURSE_DIR
    targets = {"the victim's copy": str(victim_copy), "the victim's lab": str(victim_copy / LAB),
               "the victim's summary": str(victim_copy / "build" / "summary.md"),
               "the hub's cookie secret": str(state / "jupyterhub_cookie_secret"),
               "the hub's database": str(state / "jupyterhub.sqlite")}
    return f"""\
import json, os
met = {{}}
for what, path in {targets!r}.items():
    try:
        os.listdir(path) if os.path.isdir(path) else open(path, "rb").read(16)
        met[what] = "read"
    except OSError as e:
        met[what] = type(e).__name__
met["cookie secret in the course"] = os.path.exists({str(course / "jupyterhub_cookie_secret")!r})
met["cookie secret in my copy"] = os.path.exists("jupyterhub_cookie_secret")
print(json.dumps(met))
"""


def linked_summaries(hub: ht.Hub, tokens: dict) -> list[str]:
    """The attacker's summary made a link, a FIFO, a sparse giant, a script: the page follows, hangs on and runs
    none of them, and still shows the victim's summary."""
    problems = []
    victim_build = Path(pwd.getpwnam(VICTIM).pw_dir) / COURSE_DIR / "build"
    attacks = {
        "a link to /etc/shadow": ("ln -sf /etc/shadow summary.md", "Not shown", "root:"),
        "a link to the victim's summary": (f"ln -sf {victim_build}/summary.md summary.md", "Not shown", None),
        "build/ a link to the victim's": (f"cd .. && mv build build.mine && ln -s {victim_build} build",
                                          "Not shown", None),
        "a FIFO": ("rm -f summary.md && mkfifo summary.md", "not a regular file", None),
        "a 1.5 GB sparse file": ("echo '| a | b |' > summary.md && truncate -s 1500M summary.md", "(cut", None),
        "a script": ("echo '<script>alert(1)</script>' > summary.md", "&lt;script&gt;", "<script"),
    }
    build = Path(pwd.getpwnam(ATTACKER).pw_dir) / COURSE_DIR / "build"
    as_user(ATTACKER, f"cp {build}/summary.md summary.keep")
    for what, (script, shown, hidden) in attacks.items():
        done = as_user(ATTACKER, f"cd {build} && {script}")
        if done.returncode != 0:
            problems.append(f"could not plant {what}: {done.stderr.strip()}")
            continue
        t0 = time.monotonic()
        page = hub.api("GET", "/services/summaries/", token=tokens[INSTRUCTOR]).text
        took = time.monotonic() - t0
        (OUT / f"summaries-{re.sub(r'[^a-z0-9]+', '-', what.lower())}.html").write_text(page)
        mine = ht.section(page, ATTACKER)
        if shown not in mine or (hidden and hidden in page) or took > 10:
            problems.append(f"the instructor's page with {what} as the attacker's summary: expected {shown!r} in its "
                            f"section{f' and no {hidden!r} on the page' if hidden else ''}, within 10 s "
                            f"({took:.1f} s): {mine[:200]!r}")
        if not ht.row_shown(ht.section(page, VICTIM), LAB, "replay"):
            problems.append(f"the victim's summary is not shown beside {what}")
        as_user(ATTACKER, f"cd {build.parent} && if [ -L build ]; then rm build && mv build.mine build; fi && "
                          "rm -f build/summary.md && cp ~/summary.keep build/summary.md")
    return problems


def scenario(hub: ht.Hub, passwords: dict, course: Path, state: Path, pause: Path, log_path: Path) -> list[str]:
    problems = []
    if log_in(hub, VICTIM, passwords[VICTIM] + "x") is not None:
        problems.append("a wrong password logged in")
    tokens = {name: log_in(hub, name, passwords[name]) for name in LEARNERS + [INSTRUCTOR]}
    if not all(tokens.values()):
        raise ht.Failed(f"logging in with the right password failed for {[n for n, t in tokens.items() if not t]}")
    ht.start_server(hub, VICTIM, tokens[VICTIM])
    ht.start_server(hub, INSTRUCTOR, tokens[INSTRUCTOR])  # a copy of the instructor's own: not a learner's
    problems += planted_link(hub, tokens, pause, log_path)
    for name in LEARNERS:
        copy = Path(pwd.getpwnam(name).pw_dir) / COURSE_DIR
        info = os.lstat(copy)
        if info.st_uid != pwd.getpwnam(name).pw_uid or info.st_mode & 0o077:
            problems.append(f"{name}'s copy is not theirs alone: owner {info.st_uid}, mode {info.st_mode & 0o777:o}")
    gpus = tuple(str(g) for g in range(count_gpus())) or ("",)
    results = ht.run_everywhere(hub, tokens, LEARNERS, out=OUT)
    for name in LEARNERS:
        lines = results[name]
        problems += [lines] if isinstance(lines, str) else ht.check_learner(name, lines, Path("/home"), gpus)
    met = ht.run_in_kernel(hub, ATTACKER, tokens[ATTACKER], peeking(course, state), out=OUT)
    met = met[-1] if met else {}
    read = [what for what, result in met.items() if result not in ("PermissionError", False)]
    if not met or read:
        problems.append(f"from the attacker's kernel: {read or 'nothing'} not refused ({met})")
    page = hub.api("GET", "/services/summaries/", token=tokens[INSTRUCTOR]).text
    (OUT / "summaries.html").write_text(page)
    if "The room: 2 learners" not in page or f"<h2 id='{INSTRUCTOR}'>" in page:
        problems.append("the instructor's page does not count the two learners alone")
    if hub.api("GET", "/services/summaries/", token=tokens[VICTIM], ok=(200, 302, 403),
               allow_redirects=False).status_code == 200:
        problems.append("a learner's token opened the instructor's page")
    problems += linked_summaries(hub, tokens)
    return problems


# --- 4, 7: the hub, and what it leaves ----------------------------------------------------------------------------------

def leftovers(srv: Path, uids: set[int]):
    """What of the run still runs: processes of its users, or started from its folder (the hub, the proxy, the
    summaries service, servers and kernels all run the course's environment or the proxy installed there)."""
    def left() -> list[tuple[int, str]]:
        found = []
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit() or int(proc.name) == os.getpid():
                continue
            try:
                cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
                if proc.stat().st_uid in uids or str(srv) in cmd:
                    found.append((int(proc.name), cmd))
            except OSError:
                continue
        return found
    return left


def room_folder() -> str:
    """Where the course is unpacked: memory (/dev/shm) where it has room for the course and its environment (1 GB
    of small files, which some disks take minutes to delete), else /srv as the README says, else /tmp."""
    shm = os.statvfs("/dev/shm") if os.path.isdir("/dev/shm") else None
    if shm and shm.f_bavail * shm.f_frsize > 3 * 2**30:
        return "/dev/shm"
    return "/srv" if os.path.isdir("/srv") else tempfile.gettempdir()


def main() -> int:
    if os.geteuid() != 0:
        say("refused: it must run as root (CI is root): it makes system users with passwords and a group, starts "
            "the hub as root as the README says, and acts as each learner; nothing was done")
        return 2
    missing = [tool for tool in ("useradd", "userdel", "groupadd", "chpasswd", "npm", "make") if not shutil.which(tool)]
    if missing:
        say(f"cannot run: {', '.join(missing)} missing (Debian: apt-get install passwd nodejs npm make)")
        return 2
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    srv = Path(tempfile.mkdtemp(prefix="hub-users-test-", dir=room_folder()))
    srv.chmod(0o755)
    made, problems, t0 = [], [], time.monotonic()
    try:
        passwords = make_users(made)
        course = unpack_course(srv)
        set_up(course, learners_python(LEARNERS[0]), srv / "npm")
        state, pause = srv / "state", srv / "pause"
        pause.mkdir(mode=0o1777)
        pause.chmod(0o1777)  # each learner's copy says it reached the pause point here
        ports = {k: ht.free_port() for k in ("public", "hub", "proxy_api", "summaries")}
        spawner = "systemd" if os.path.isdir("/run/systemd/system") else "local"
        env = {**os.environ, "PATH": f"{srv / 'npm' / 'bin'}{os.pathsep}{os.environ['PATH']}",
               "COURSE_SOURCE": str(course), "WORKSHOP_LEARNERS_PER_GPU": "4", "WORKSHOP_SPAWNER": spawner,
               "WORKSHOP_STATE": str(state), "WORKSHOP_INSTRUCTOR": INSTRUCTOR, "STREAMALLOC_MODE": "replay",
               "WORKSHOP_SUMMARIES_PORT": str(ports["summaries"]),
               PAUSE: str(pause), ht.MARK: uuid.uuid4().hex}
        command = [str(course / ".venv" / "bin" / "jupyterhub"), "-f", "workshop/jupyterhub_config.py",
                   f"--JupyterHub.bind_url=http://127.0.0.1:{ports['public']}",
                   f"--JupyterHub.hub_bind_url=http://127.0.0.1:{ports['hub']}",
                   f"--ConfigurableHTTPProxy.api_url=http://127.0.0.1:{ports['proxy_api']}"]
        hub, log_path = ht.Hub(f"http://127.0.0.1:{ports['public']}"), OUT / "hub.log"
        uids = {pwd.getpwnam(n).pw_uid for n in LEARNERS + [INSTRUCTOR]}
        problems += ht.with_hub(command, env, course, hub, log_path,
                                lambda: scenario(hub, passwords, course, state, pause, log_path),
                                left=leftovers(srv, uids))
        problems += ht.state_apart(course, state)
    except ht.Failed as e:
        problems.append(str(e))
    finally:
        problems += remove_users(made)
        shutil.rmtree(srv, ignore_errors=True)
    return ht.verdict("hub-users-test", time.monotonic() - t0, problems, OUT / "hub.log",
                      "the README's set-up; two learners and the instructor logged in with their passwords (a wrong one "
                      "refused), each learner ran notebook 00 and lab 1 in replay in their own private copy; a link "
                      "planted between the copy and its move, reading the other's copy and the hub's state, and "
                      "linked, FIFO, giant and scripted summaries were each refused; the page counted two learners; "
                      "nothing left running, the users removed")


if __name__ == "__main__":
    sys.exit(main())
