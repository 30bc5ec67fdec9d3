# JupyterHub on one GPU server, for a workshop of the course (README.md, "Running a workshop"):
#
#   COURSE_SOURCE=/srv/course WORKSHOP_LEARNERS_PER_GPU=4 /srv/course/.venv/bin/jupyterhub -f workshop/jupyterhub_config.py
#
# Run it with the course's environment (its .venv, after `make setup` and `pip install -r workshop/requirements-hub.txt`):
# the learners' servers and kernels run with the same Python. Its settings are environment variables:
#   COURSE_SOURCE              the course at the version of the day (the archive `make dist` writes, unpacked); each
#                              learner gets their own copy of it at their first login, ~/stream-ordered-allocator
#                              (nbgitpuller is the alternative once the course is published: a link that pulls the
#                              repository into each home and merges the learner's edits on the next pull)
#   WORKSHOP_LEARNERS_PER_GPU  how many learners share a GPU (default 4: `python -m streamalloc preflight --learners K`
#                              finds the largest K that holds on your GPU); a learner past the last seat is told so
#   WORKSHOP_GPUS              how many GPUs to share (default: those nvidia-smi lists; 0: none, the course replays)
#   WORKSHOP_MEM_LIMIT         host memory for each learner (default 16G)
#   WORKSHOP_INSTRUCTOR        the instructor's account, an admin (default instructor): /services/summaries/ shows
#                              every learner's build/summary.md to them alone
#   WORKSHOP_SPAWNER           systemd (default: each learner a system user, in their own systemd unit, which enforces
#                              the memory limit; needs jupyterhub-systemdspawner), local (system users, no limit
#                              enforced), or simple (no system users: every server runs as the hub's user, homes
#                              under WORKSHOP_HOMES; for a test, or a room that trusts itself: any learner can read
#                              and change every other learner's work, and the hub's own files, its state included)
#   WORKSHOP_GROUP             the system group whose users may log in (default workshop; not with simple)
#   WORKSHOP_HOMES             where the learners' homes are (default /home)
#   WORKSHOP_SUMMARIES_PORT    the port of the instructor's page, a service on 127.0.0.1 (default 10101)
#   WORKSHOP_STATE             the hub's own state, private to it (default /srv/jupyterhub, made 0700): its cookie
#                              secret, its database and the proxy's pid file. Never inside COURSE_SOURCE: whoever
#                              reads the cookie secret can sign any login, the admin's too
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from spawn_hook import Room, count_gpus, hooks  # noqa: E402

c = get_config()  # noqa: F821 (JupyterHub's config loader defines it)

env = os.environ.get
source = Path(env("COURSE_SOURCE", "").strip() or "/nonexistent").expanduser()
per_gpu, gpus, spawner = env("WORKSHOP_LEARNERS_PER_GPU", "4").strip(), env("WORKSHOP_GPUS", ""), env("WORKSHOP_SPAWNER", "systemd")
homes = Path(env("WORKSHOP_HOMES", "/home"))
state = Path(env("WORKSHOP_STATE", "/srv/jupyterhub")).expanduser().absolute()
instructor = env("WORKSHOP_INSTRUCTOR", "instructor")

# every wrong setting named at once, in one message, before the hub starts anything
problems = []
if not (source / "streamalloc").is_dir():
    problems.append(f"COURSE_SOURCE={env('COURSE_SOURCE', '')!r} must name a folder holding the course (unpack the "
                    "archive `make dist` writes, build/dist/stream-ordered-allocator.zip, there)")
if not per_gpu.isdigit() or int(per_gpu) < 1:
    problems.append(f"WORKSHOP_LEARNERS_PER_GPU={per_gpu!r} must be a whole number, 1 or more")
if gpus.strip() and not gpus.strip().isdigit():
    problems.append(f"WORKSHOP_GPUS={gpus!r} must be a whole number of GPUs (0 for none), or unset (nvidia-smi counts them)")
if spawner not in ("systemd", "local", "simple"):
    problems.append(f"WORKSHOP_SPAWNER={spawner!r} must be systemd, local or simple")
if state == source.absolute() or source.absolute() in state.parents:
    problems.append(f"WORKSHOP_STATE={str(state)!r} is inside COURSE_SOURCE, which every learner reads: keep the hub's "
                    "state apart (the default, /srv/jupyterhub)")
if problems:
    raise SystemExit("workshop/jupyterhub_config.py: " + "; ".join(problems))

# the hub's state, apart from the course and from the folder the hub was started in
state.mkdir(mode=0o700, parents=True, exist_ok=True)
state.chmod(0o700)
c.JupyterHub.cookie_secret_file = str(state / "jupyterhub_cookie_secret")
c.JupyterHub.db_url = f"sqlite:///{state / 'jupyterhub.sqlite'}"
c.ConfigurableHTTPProxy.pid_file = str(state / "jupyterhub-proxy.pid")

room = Room(count_gpus(gpus), int(per_gpu))
c.Spawner.pre_spawn_hook, c.Spawner.post_stop_hook = hooks(room, source, system_users=spawner != "simple")

# the course's environment: the learner's server, kernels and nvcc come from the Python running the hub
course_bin = str(Path(sys.executable).parent)
c.Spawner.cmd = [os.path.join(course_bin, "jupyterhub-singleuser")]
c.Spawner.environment = {"PATH": os.pathsep.join([course_bin, env("PATH", "/usr/bin:/bin")])}
# JupyterHub's own list, and STREAMALLOC_MODE (replay: a room without GPUs, on purpose)
c.Spawner.env_keep = ["PATH", "PYTHONPATH", "CONDA_ROOT", "CONDA_DEFAULT_ENV", "VIRTUAL_ENV", "LANG", "LC_ALL",
                      "JUPYTERHUB_SINGLEUSER_APP", "STREAMALLOC_MODE"]
c.Spawner.default_url = "/lab/tree/notebooks/00_setup.ipynb"
c.Spawner.mem_limit = env("WORKSHOP_MEM_LIMIT", "16G")  # enforced by SystemdSpawner (and Kubernetes), not by local

if spawner == "systemd":
    c.JupyterHub.spawner_class = "systemdspawner.SystemdSpawner"
elif spawner == "local":
    c.JupyterHub.spawner_class = "jupyterhub.spawner.LocalProcessSpawner"
else:
    c.JupyterHub.spawner_class = "jupyterhub.spawner.SimpleLocalProcessSpawner"
    c.SimpleLocalProcessSpawner.home_dir_template = str(homes / "{username}")
if spawner != "simple":
    c.LocalAuthenticator.allowed_groups = {env("WORKSHOP_GROUP", "workshop")}

# the instructor: an admin (the hub's admin page, every server), and the one reader of the summaries
c.Authenticator.admin_users = {instructor}
c.JupyterHub.services = [{
    "name": "summaries",
    "url": f"http://127.0.0.1:{env('WORKSHOP_SUMMARIES_PORT', '10101')}",
    "command": [sys.executable, str(HERE / "summaries.py")],
    "environment": {"WORKSHOP_HOMES": str(homes), "WORKSHOP_INSTRUCTOR": instructor},
    "oauth_no_confirm": True,
}]
