"""make hub-test: a real JupyterHub on 127.0.0.1 with the workshop's own config (workshop/jupyterhub_config.py), three
learners, and nothing left running afterwards. Everything it writes goes under build/hub-test/.

1. The course of the day: what git tracks (and untracked files it does not ignore), copied to build/hub-test/course,
   which the config names as COURSE_SOURCE; a lab solved in place in this checkout (runner.edited_lab) is handed
   out as git has it, as a room gets it, and the run says so. The hub's state goes to build/hub-test/state.
2. The hub, with configurable-http-proxy (npm), on free ports: WORKSHOP_SPAWNER=simple (no system users), two
   stand-in GPUs with two learners each (WORKSHOP_GPUS=2: no GPU is needed), the test authenticator, and a service
   token that may create users and tokens, and nothing else.
3. Three learners, each with a token of their own (the REST API): each starts their server, which gets its own copy of
   the course and a GPU; in a kernel of that server (jupyter_server's REST API and its websocket), each runs
   `python -m streamalloc run notebooks/00_setup.ipynb labs/lab1_stream_ordered.ipynb` in replay, in their copy.
4. The instructor reads the three summaries at /services/summaries/; a learner's token is refused there. Two
   latecomers: the fourth seat is taken, the fifth learner is told the room is full, and gets the seat once the
   fourth leaves.
5. Everything stopped: no process of the run is left (each one carries a marker in its environment, which the test
   looks for in every process on the machine).

Exit status 0 when every check held, 1 with what failed, 2 when something it needs is missing (said in one line).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "build" / "hub-test"
LEARNERS = ["learner1", "learner2", "learner3"]
INSTRUCTOR = "instructor"
NOTEBOOKS = ["notebooks/00_setup.ipynb", "labs/lab1_stream_ordered.ipynb"]
MARK = "STREAMALLOC_HUB_TEST"  # the environment variable every process of the run carries


class Failed(Exception):
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def find_proxy() -> str | None:
    local = ROOT / "build" / "hub-tools" / "node_modules" / ".bin" / "configurable-http-proxy"
    return str(local) if local.exists() else shutil.which("configurable-http-proxy")


def course_files(root: Path) -> list[str]:
    """What an instructor would hand out: git's files (tracked, and untracked ones it does not ignore) that exist."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                            capture_output=True, text=True, check=True).stdout.split("\0")
    return [f for f in listed if f and (root / f).is_file()]


def copy_course(dest: Path) -> None:
    for f in course_files(ROOT):
        (dest / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / f, dest / f)
    labs_as_given(dest)


def labs_as_given(course: Path) -> list[str]:
    """The labs of this checkout solved (or begun) in place, put back in `course` as git has them, so that the room
    gets each lab unsolved, as `make dist` hands it out; said in a line, and returned."""
    sys.path.insert(0, str(ROOT / "tests"))
    from labcheck import unsolved  # the lab as git tracks it, where runner.edited_lab says it was edited

    given = []
    for lab in sorted((course / "labs").glob("*.ipynb")):
        text = unsolved(ROOT / "labs" / lab.name)
        if text is not None and text != lab.read_text():
            lab.write_text(text)
            given.append(f"labs/{lab.name}")
    if given:
        print(f"hub-test: {', '.join(given)} edited in place in this checkout: the room gets the lab as git has it")
    return given


def hub_config(ports: dict, token: str, proxy: str) -> str:
    """The test's config: the workshop's own, then only what a test needs (ports, the test authenticator, the token)."""
    return f"""\
import os
load_subconfig({str(ROOT / 'workshop' / 'jupyterhub_config.py')!r})
c.JupyterHub.authenticator_class = "dummy"
c.JupyterHub.bind_url = "http://127.0.0.1:{ports['public']}"
c.JupyterHub.hub_bind_url = "http://127.0.0.1:{ports['hub']}"
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{ports['proxy_api']}"
c.ConfigurableHTTPProxy.command = [{proxy!r}]
c.JupyterHub.services[0]["environment"]["{MARK}"] = {os.environ[MARK]!r}
c.JupyterHub.services.append({{"name": "hub-test", "api_token": {token!r}}})
c.JupyterHub.load_roles = [{{"name": "hub-test", "services": ["hub-test"],
                            "scopes": ["admin:users", "admin:servers", "tokens"]}}]
c.Spawner.env_keep.append("{MARK}")
if os.getuid() == 0:  # CI runs as root; jupyter_server refuses root without this
    c.Spawner.args = ["--allow-root"]
"""


class Hub:
    def __init__(self, url: str, token: str | None = None):
        import requests
        self.url, self.http = url, requests.Session()
        if token:  # the test's own service token; without one, every call names a user's token
            self.http.headers["Authorization"] = f"token {token}"

    def api(self, method: str, path: str, token: str | None = None, ok=(200, 201, 202, 204), **kw):
        headers = {"Authorization": f"token {token}"} if token else {}
        r = self.http.request(method, self.url + path, headers=headers, timeout=60, **kw)
        if r.status_code not in ok:
            raise Failed(f"{method} {path}: {r.status_code} {r.text[:300]}")
        return r


def wait_for(what: str, test, timeout: float, every: float = 0.5):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = test()
        if value:
            return value
        time.sleep(every)
    raise Failed(f"{what}: not within {timeout:.0f} s")


def start_server(hub: Hub, name: str, token: str) -> None:
    """The learner starts their own server with their own token, and waits until it answers."""
    hub.api("POST", f"/hub/api/users/{name}/server", token=token)
    wait_for(f"{name}'s server", lambda: hub.api("GET", f"/hub/api/users/{name}", token=token).json()
             ["servers"].get("", {}).get("ready"), timeout=120)


RUN_CODE = f"""\
import json, os, subprocess, sys
print(json.dumps({{"cwd": os.getcwd(), "gpu": os.environ.get("CUDA_VISIBLE_DEVICES"),
                  "mode": os.environ.get("STREAMALLOC_MODE")}}))
done = subprocess.run([sys.executable, "-m", "streamalloc", "run", "--no-progress", *{NOTEBOOKS!r}])
print(json.dumps({{"rc": done.returncode}}))
"""


def run_in_kernel(hub: Hub, name: str, token: str, code: str, timeout: float = 600, out: Path = OUT) -> list[dict]:
    """Start a kernel in the learner's server (in its root folder, as a notebook at the top would), execute `code` there, return the JSON lines it printed."""
    import websocket
    kernel = hub.api("POST", f"/user/{name}/api/kernels", token=token, json={"name": "python3", "path": ""}).json()["id"]
    ws = websocket.create_connection(f"{hub.url.replace('http', 'ws', 1)}/user/{name}/api/kernels/{kernel}/channels",
                                     header=[f"Authorization: token {token}"], timeout=timeout)
    msg_id = uuid.uuid4().hex
    ws.send(json.dumps({"header": {"msg_id": msg_id, "msg_type": "execute_request", "username": name,
                                   "session": uuid.uuid4().hex, "version": "5.3"},
                        "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
                        "content": {"code": code, "silent": False, "store_history": False,
                                    "user_expressions": {}, "allow_stdin": False, "stop_on_error": True}}))
    text, replied, idle, error = "", False, False, None
    end = time.monotonic() + timeout
    while not (replied and idle):
        if time.monotonic() > end:
            raise Failed(f"{name}'s kernel: no answer within {timeout:.0f} s")
        msg = json.loads(ws.recv())
        if msg.get("parent_header", {}).get("msg_id") != msg_id:
            continue
        kind = msg["msg_type"]
        if kind == "stream":
            text += msg["content"]["text"]
        elif kind == "error":
            error = f"{msg['content']['ename']}: {msg['content']['evalue']}"
        elif kind == "execute_reply":
            replied = True
        elif kind == "status" and msg["content"]["execution_state"] == "idle":
            idle = True
    ws.close()
    hub.api("DELETE", f"/user/{name}/api/kernels/{kernel}", token=token)
    if error:
        raise Failed(f"{name}'s kernel raised {error}")
    (out / f"{name}-kernel.log").write_text(text)
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def check_learner(name: str, lines: list[dict], homes: Path, gpus=("0", "1")) -> list[str]:
    """What must hold for one learner: their copy, a GPU of their own (one of `gpus`), replay, both notebooks
    right."""
    problems, copy = [], homes / name / "stream-ordered-allocator"
    where = lines[0] if lines else {}
    if where.get("cwd") != str(copy):
        problems.append(f"{name}'s kernel ran in {where.get('cwd')}, not in their copy {copy}")
    if where.get("gpu") not in gpus:
        problems.append(f"{name} got CUDA_VISIBLE_DEVICES={where.get('gpu')!r}, not one of {gpus}")
    if where.get("mode") != "replay":
        problems.append(f"{name}'s server did not keep STREAMALLOC_MODE=replay (got {where.get('mode')!r})")
    if not lines or lines[-1].get("rc") != 0:
        problems.append(f"{name}'s `python -m streamalloc run` did not succeed ({lines[-1:] or 'no output'})")
    summary = copy / "build" / "summary.json"
    rows = {r["notebook"]: r for r in json.loads(summary.read_text())} if summary.is_file() else {}
    for nb in NOTEBOOKS:
        row = rows.get(nb, {})
        if (row.get("result"), row.get("mode")) != ("passed", "replay"):
            problems.append(f"{name}'s summary: {nb} is {row.get('result')!r} in {row.get('mode')!r}, not passed in replay")
    executed = copy / "build" / "executed" / NOTEBOOKS[1]
    errors = [o.get("ename") for cell in (json.loads(executed.read_text())["cells"] if executed.is_file() else [])
              for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    if errors != ["LabIncomplete"]:
        problems.append(f"{name}'s lab 1 (unsolved) raised {errors}, not its check's LabIncomplete alone")
    return problems


def state_apart(course: Path, state: Path) -> list[str]:
    """The hub's state (WORKSHOP_STATE) in its own private folder, none of it in the course."""
    problems = []
    written = [f for f in ("jupyterhub_cookie_secret", "jupyterhub.sqlite", "jupyterhub-proxy.pid")
               if (course / f).exists()]
    if written:
        problems.append(f"the hub wrote its state into the course: {written}")
    mode = state.stat().st_mode & 0o777 if state.is_dir() else None
    if not (state / "jupyterhub_cookie_secret").is_file() or mode is None or mode & 0o077:
        problems.append(f"the hub's cookie secret is not in {state}, a folder private to the hub (mode "
                        f"{'none' if mode is None else oct(mode)})")
    return problems


def section(page: str, name: str) -> str:
    """A learner's part of the instructor's page."""
    return page.split(f"<h2 id='{name}'>", 1)[-1].split("<h2", 1)[0] if f"<h2 id='{name}'>" in page else ""


def row_shown(html: str, *cells: str) -> bool:
    """Whether a table row of the page starts with these cells (the summary's Markdown, rendered)."""
    return re.search(r"<tr>\s*" + r"\s*".join(f"<td>{re.escape(c)}</td>" for c in cells), html) is not None


def ours() -> list[tuple[int, str]]:
    """Every process on this machine that carries this run's marker: (pid, command line)."""
    found, marker = [], f"{MARK}={os.environ[MARK]}".encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if marker in (proc / "environ").read_bytes().split(b"\0"):
                found.append((int(proc.name), (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()))
        except OSError:
            continue  # gone, or not ours to read
    return found


def scenario(hub: Hub, homes: Path) -> list[str]:
    problems = []
    for name in LEARNERS + ["learner4", "learner5"]:
        hub.api("POST", f"/hub/api/users/{name}")
    tokens = {name: hub.api("POST", f"/hub/api/users/{name}/tokens", json={"note": "hub-test"}).json()["token"]
              for name in LEARNERS + ["learner4", "learner5", INSTRUCTOR]}
    for name in LEARNERS:
        start_server(hub, name, tokens[name])
    # a learner's token opens their own server, not another's
    if hub.api("GET", f"/user/{LEARNERS[1]}/api/status", token=tokens[LEARNERS[0]],
               ok=(200, 302, 403, 404), allow_redirects=False).status_code == 200:
        problems.append("learner1's token opened learner2's server")
    # the marker is seen on the run's processes while they run, or "nothing left" at the end would prove nothing
    running = [cmd for _, cmd in ours()]
    if sum("jupyterhub-singleuser" in cmd for cmd in running) != 3 or not any("configurable-http-proxy" in cmd
                                                                              for cmd in running):
        problems.append(f"the three servers and the proxy should carry the run's marker; found: {running}")
    results = run_everywhere(hub, tokens, LEARNERS)
    for name in LEARNERS:
        lines = results[name]
        problems += [lines] if isinstance(lines, str) else check_learner(name, lines, homes)
    gpus = [results[n][0].get("gpu") for n in LEARNERS if not isinstance(results[n], str) and results[n]]
    if sorted(gpus) != ["0", "0", "1"]:
        problems.append(f"three learners on two GPUs should be spread 0, 1, 0; they got {gpus}")
    # the instructor's view
    page = hub.api("GET", "/services/summaries/", token=tokens[INSTRUCTOR]).text
    (OUT / "summaries.html").write_text(page)
    for name in LEARNERS:
        if not all(row_shown(section(page, name), nb, "replay", "passed") for nb in NOTEBOOKS):
            problems.append(f"the instructor's page does not show {name}'s summary with both notebooks passed")
    refused = hub.api("GET", "/services/summaries/", token=tokens[LEARNERS[0]], ok=(200, 302, 403),
                      allow_redirects=False).status_code
    if refused == 200:
        problems.append("a learner's token opened the instructor's page")
    # the room: 2 stand-in GPUs x 2 learners; the fourth seat is the last
    start_server(hub, "learner4", tokens["learner4"])
    r = hub.api("POST", "/hub/api/users/learner5/server", token=tokens["learner5"], ok=(400, 500, 503))
    (OUT / "room-full.txt").write_text(r.text)
    if "The room is full" not in r.text:
        problems.append(f"the fifth learner was not told the room is full: {r.status_code} {r.text[:300]}")
    hub.api("DELETE", "/hub/api/users/learner4/server")
    wait_for("learner4's server to stop", lambda: not hub.api("GET", "/hub/api/users/learner4").json()["servers"],
             timeout=60)
    start_server(hub, "learner5", tokens["learner5"])  # the seat learner4 left
    for name in LEARNERS + ["learner5"]:
        hub.api("DELETE", f"/hub/api/users/{name}/server")
    return problems


def _run_safely(hub, name, token, out: Path = OUT):
    try:
        return run_in_kernel(hub, name, token, RUN_CODE, out=out)
    except Failed as e:
        return str(e)


def run_everywhere(hub: Hub, tokens: dict, names: list[str], out: Path = OUT) -> dict:
    """Each learner runs RUN_CODE in a kernel of their server, all at once: {name: its JSON lines, or what failed}."""
    results = {}
    threads = [threading.Thread(target=lambda n=n: results.__setitem__(n, _run_safely(hub, n, tokens[n], out)))
               for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def with_hub(command: list[str], env: dict, cwd: Path, hub: Hub, log_path: Path, scenario, left=None) -> list[str]:
    """Start the hub (`command`), wait until it answers, run `scenario()` (its problems), stop the hub, and check
    that nothing of the run is left: `left()` lists what still runs, (pid, command line), by default every process
    carrying the run's marker. What is left is named, and killed by its pid. Returns every problem."""
    left = left or ours
    problems = []
    with open(log_path, "w") as log:
        t0 = time.monotonic()
        hub_proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        try:
            def up():
                if hub_proc.poll() is not None:
                    raise Failed(f"the hub exited with status {hub_proc.returncode}: see {log_path}")
                try:
                    return hub.http.get(hub.url + "/hub/api/", timeout=5).status_code == 200
                except OSError:
                    return False
            wait_for("the hub", up, timeout=90)
            print(f"hub-test: the hub answers at {hub.url} ({time.monotonic() - t0:.0f} s)")
            problems = scenario()
        except Failed as e:
            problems.append(str(e))
        finally:
            hub_proc.send_signal(signal.SIGTERM)  # the hub stops its servers, its proxy and its services
            try:
                hub_proc.wait(60)
            except subprocess.TimeoutExpired:
                problems.append("the hub did not stop within 60 s of SIGTERM")
            try:
                wait_for("the run's processes to end", lambda: not left(), timeout=20)
            except Failed:
                still = left()
                problems.append("processes left behind: " + "; ".join(f"{pid} {cmd[:120]}" for pid, cmd in still))
                for pid, _ in still:  # the run's own: stopped, so that CI leaves nothing behind
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
    return problems


def main() -> int:
    proxy = find_proxy()
    try:
        import requests, websocket  # noqa: F401, E401
        import jupyterhub  # noqa: F401
    except ImportError as e:
        print(f"hub-test: {e.name} is not installed here: `make hub-test` installs workshop/requirements-hub.txt",
              file=sys.stderr)
        return 2
    if proxy is None:
        print("hub-test: configurable-http-proxy is missing: `make hub-test` installs it with npm "
              "(npm install --prefix build/hub-tools configurable-http-proxy)", file=sys.stderr)
        return 2
    shutil.rmtree(OUT, ignore_errors=True)
    homes, course = OUT / "homes", OUT / "course"
    homes.mkdir(parents=True)
    copy_course(course)
    os.environ[MARK] = uuid.uuid4().hex
    ports = {k: free_port() for k in ("public", "hub", "proxy_api", "summaries")}
    token = uuid.uuid4().hex
    (OUT / "hub_config.py").write_text(hub_config(ports, token, proxy))
    env = {**os.environ, "COURSE_SOURCE": str(course), "WORKSHOP_SPAWNER": "simple", "WORKSHOP_GPUS": "2",
           "WORKSHOP_LEARNERS_PER_GPU": "2", "WORKSHOP_HOMES": str(homes), "WORKSHOP_INSTRUCTOR": INSTRUCTOR,
           "WORKSHOP_STATE": str(OUT / "state"), "WORKSHOP_SUMMARIES_PORT": str(ports["summaries"]),
           "STREAMALLOC_MODE": "replay"}
    t0 = time.monotonic()
    hub = Hub(f"http://127.0.0.1:{ports['public']}", token)
    problems = with_hub([str(Path(sys.executable).parent / "jupyterhub"), "-f", str(OUT / "hub_config.py")],
                        env, OUT, hub, OUT / "hub.log", lambda: scenario(hub, homes))
    problems += state_apart(course, OUT / "state")
    return verdict("hub-test", time.monotonic() - t0, problems, OUT / "hub.log",
                   "three learners, each in their own copy on a stand-in GPU (0, 1, 0), ran notebook 00 and lab 1 in "
                   "replay in a kernel of their server (lab 1's check raised LabIncomplete, as an unsolved lab's must); "
                   "the instructor read the three summaries; the fifth learner was told the room is full and got the "
                   "seat the fourth left; nothing left running")


def verdict(test: str, took: float, problems: list[str], log: Path, passed: str) -> int:
    """The run's last words and exit status: every problem (1), or what held (0)."""
    if problems:
        print(f"{test} FAILED after {took:.0f} s (the hub's log: {log}):", file=sys.stderr)
        for p in problems:
            print("  -", p, file=sys.stderr)
        return 1
    print(f"{test} passed in {took:.0f} s: {passed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
