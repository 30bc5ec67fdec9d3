"""The workshop's set-up (workshop/), without a hub, a GPU or a container runtime: the image installs what
requirements.txt lists, the hub's config loads and sets what it must, the room spreads learners over GPUs with a cap,
each learner gets their own copy once. `make hub-test` (tools/hub_test.py) runs a real hub with the same config."""
import asyncio
import importlib.util
import json
import os
import re
import shlex
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from packaging.requirements import Requirement

import spawn_hook
from spawn_hook import Room, RoomFull

ROOT = Path(__file__).resolve().parent.parent
WORKSHOP = ROOT / "workshop"
IMAGE_COURSE = "/opt/stream-ordered-allocator"  # where the Dockerfile unpacks the course



def requirements(path: Path) -> dict:
    return {Requirement(line).name.lower(): Requirement(line) for line in path.read_text().splitlines()
            if line.strip() and not line.startswith("#")}


def dockerfile_installs() -> tuple[list[Path], set]:
    """The requirement files and the packages named on the Dockerfile's `pip install` lines."""
    text = (WORKSHOP / "Dockerfile").read_text().replace("\\\n", " ")
    files, named = [], set()
    for line in text.splitlines():
        if not line.startswith("RUN "):
            continue
        for command in re.split(r"&&", line):
            words = shlex.split(command)
            if "pip" in words and "install" in words:
                args = iter(words[words.index("install") + 1:])
                for word in args:
                    if word == "-r":
                        files.append(ROOT / Path(next(args)).relative_to(IMAGE_COURSE))
                    elif not word.startswith("-"):
                        named.add(word.lower())
    return files, named


def test_the_image_installs_what_requirements_txt_lists():
    files, named = dockerfile_installs()
    assert ROOT / "requirements.txt" in files and WORKSHOP / "requirements-hub.txt" in files
    assert named <= {"pip"}, f"the Dockerfile names packages outside requirements.txt: {named - {'pip'}}"
    installed = {}
    for f in files:
        installed.update(requirements(f))
    course = requirements(ROOT / "requirements.txt")
    assert {k: str(v) for k, v in installed.items() if k in course} == {k: str(v) for k, v in course.items()}
    assert not set(requirements(WORKSHOP / "requirements-hub.txt")) & set(course), "a package pinned twice"
    assert {"jupyterlab", "cupy-cuda12x"} <= set(installed) and "jupyterhub" in installed


def test_the_image_is_cuda_12_devel_like_cupy_cuda12x_and_holds_the_archive():
    text = (WORKSHOP / "Dockerfile").read_text()
    base = re.search(r"^ARG CUDA_IMAGE=(\S+)", text, re.M).group(1)
    major = re.fullmatch(r"nvidia/cuda:(\d+)\.\d+\.\d+-devel-ubuntu\d+\.\d+", base).group(1)  # devel: nvcc too
    cupy = next(n for n in requirements(ROOT / "requirements.txt") if n.startswith("cupy-cuda"))
    assert cupy == f"cupy-cuda{major}x"
    spec = importlib.util.spec_from_file_location("make_dist", ROOT / "tools" / "make_dist.py")
    make_dist = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_dist)
    archive = "build/dist/stream-ordered-allocator.zip"
    assert f"COPY {archive} " in text and f"!{archive}" in (WORKSHOP / "Dockerfile.dockerignore").read_text()
    assert f"COURSE_SOURCE={IMAGE_COURSE}" in text and "jupyterhub-singleuser" in text
    assert make_dist.MARKER == "course-version.json"  # the archive names its version, and so the image's


def load_config(monkeypatch, tmp_path, **settings):
    """workshop/jupyterhub_config.py executed as JupyterHub does, with a stand-in config object."""
    from traitlets.config import Config

    for name in ("COURSE_SOURCE", "WORKSHOP_GPUS", "WORKSHOP_LEARNERS_PER_GPU", "WORKSHOP_SPAWNER", "WORKSHOP_HOMES",
                 "WORKSHOP_INSTRUCTOR", "WORKSHOP_MEM_LIMIT", "WORKSHOP_STATE", "WORKSHOP_SUMMARIES_PORT"):
        monkeypatch.delenv(name, raising=False)
    for name, value in {"COURSE_SOURCE": str(ROOT), "WORKSHOP_HOMES": str(tmp_path),
                        "WORKSHOP_STATE": str(tmp_path / "state"), **settings}.items():
        monkeypatch.setenv(name, value)
    c = Config()
    path = WORKSHOP / "jupyterhub_config.py"
    exec(compile(path.read_text(), str(path), "exec"), {"get_config": lambda: c, "__file__": str(path)})
    return c


def test_the_config_sets_what_a_room_needs(monkeypatch, tmp_path):
    c = load_config(monkeypatch, tmp_path, WORKSHOP_GPUS="2", WORKSHOP_LEARNERS_PER_GPU="3")
    assert c.JupyterHub.spawner_class == "systemdspawner.SystemdSpawner"  # the default: it enforces mem_limit
    assert c.Spawner.mem_limit == "16G" and callable(c.Spawner.pre_spawn_hook) and callable(c.Spawner.post_stop_hook)
    assert c.Spawner.cmd == [str(Path(sys.executable).parent / "jupyterhub-singleuser")]  # the course's environment
    assert c.Spawner.environment["PATH"].startswith(str(Path(sys.executable).parent))
    assert {"STREAMALLOC_MODE", "PATH"} <= set(c.Spawner.env_keep)
    assert c.Authenticator.admin_users == {"instructor"} and c.LocalAuthenticator.allowed_groups == {"workshop"}
    service = c.JupyterHub.services[0]
    assert service["name"] == "summaries" and Path(service["command"][1]).is_file()
    assert service["environment"]["WORKSHOP_HOMES"] == str(tmp_path)
    assert service["environment"]["WORKSHOP_INSTRUCTOR"] == "instructor"
    state = tmp_path / "state"  # the hub's secrets, private, apart from the course
    assert c.JupyterHub.cookie_secret_file == str(state / "jupyterhub_cookie_secret")
    assert c.JupyterHub.db_url == f"sqlite:///{state / 'jupyterhub.sqlite'}"
    assert c.ConfigurableHTTPProxy.pid_file == str(state / "jupyterhub-proxy.pid")
    assert state.stat().st_mode & 0o777 == 0o700
    simple = load_config(monkeypatch, tmp_path, WORKSHOP_SPAWNER="simple", WORKSHOP_MEM_LIMIT="8G")
    assert simple.JupyterHub.spawner_class.endswith("SimpleLocalProcessSpawner") and simple.Spawner.mem_limit == "8G"
    assert simple.SimpleLocalProcessSpawner.home_dir_template == str(tmp_path / "{username}")


def test_bad_settings_are_named_in_one_message(monkeypatch, tmp_path):
    with pytest.raises(SystemExit) as e:
        load_config(monkeypatch, tmp_path, COURSE_SOURCE=str(tmp_path), WORKSHOP_LEARNERS_PER_GPU="0",
                    WORKSHOP_GPUS="two", WORKSHOP_SPAWNER="docker")
    message = str(e.value)
    for name in ("COURSE_SOURCE", "WORKSHOP_LEARNERS_PER_GPU='0'", "WORKSHOP_GPUS='two'", "WORKSHOP_SPAWNER='docker'"):
        assert name in message
    with pytest.raises(SystemExit, match="WORKSHOP_STATE=.* is inside COURSE_SOURCE"):
        load_config(monkeypatch, tmp_path, WORKSHOP_STATE=str(ROOT / "build" / "hub-state"))
    assert message.count("\n") == 0


def test_the_room_spreads_learners_and_caps_each_gpu():
    room = Room(gpus=2, per_gpu=2)
    assert [room.take(n) for n in ("a", "b", "c", "d")] == ["0", "1", "0", "1"]
    assert room.take("a") == "0"  # a learner who has a seat keeps it
    with pytest.raises(RoomFull, match="The room is full: 2 GPUs with 2 learners each"):
        room.take("e")
    room.leave("b")
    assert room.take("e") == "1"  # the seat b left
    assert Room(gpus=0, per_gpu=1).take("x") == ""  # no GPU: nobody needs a seat, the course replays
    with pytest.raises(ValueError):
        Room(gpus=1, per_gpu=0)


def test_gpus_are_counted_from_the_setting_or_nvidia_smi(monkeypatch):
    assert spawn_hook.count_gpus("3") == 3
    with pytest.raises(ValueError, match="WORKSHOP_GPUS"):
        spawn_hook.count_gpus("all")
    monkeypatch.setenv("PATH", "/nonexistent")  # no nvidia-smi: no GPU
    assert spawn_hook.count_gpus("") == 0


def fake_course(where: Path) -> Path:
    (where / "streamalloc").mkdir(parents=True)
    (where / "streamalloc" / "__init__.py").write_text("")
    (where / "notebooks").mkdir()
    (where / "notebooks" / "00_setup.ipynb").write_text("{}")
    (where / "build" / "cuda").mkdir(parents=True)  # the instructor's builds: never copied
    (where / ".venv").mkdir()
    for state in ("jupyterhub_cookie_secret", "jupyterhub.sqlite", "jupyterhub-proxy.pid"):  # a hub started here
        (where / state).write_text("the hub's")
    return where


def spawner(name: str, home: Path):
    return SimpleNamespace(user=SimpleNamespace(name=name), home_dir=str(home), environment={}, notebook_dir="",
                           log=SimpleNamespace(info=lambda *a: None))


def test_each_learner_gets_a_gpu_and_their_own_copy_once(tmp_path):
    from tornado.web import HTTPError

    source = fake_course(tmp_path / "course")
    room = Room(gpus=1, per_gpu=1)
    hook, post = spawn_hook.hooks(room, source, system_users=False)
    pre = lambda s: asyncio.run(hook(s))  # noqa: E731 (the hub awaits it)
    alice = spawner("alice", tmp_path / "homes" / "alice")
    pre(alice)
    copy = tmp_path / "homes" / "alice" / "stream-ordered-allocator"
    assert alice.environment["CUDA_VISIBLE_DEVICES"] == "0" and alice.notebook_dir == str(copy)
    assert (copy / "notebooks" / "00_setup.ipynb").is_file()
    assert not (copy / "build").exists() and not (copy / ".venv").exists()
    assert not (copy / "jupyterhub_cookie_secret").exists() and not (copy / "jupyterhub.sqlite").exists()
    assert copy.stat().st_mode & 0o777 == 0o700  # hers alone
    assert os.listdir(copy.parent) == [copy.name]  # the folder it was made in is gone
    with pytest.raises(HTTPError) as full:  # the hub shows this message to the learner
        pre(spawner("bob", tmp_path / "homes" / "bob"))
    assert full.value.status_code == 503 and "The room is full" in full.value.log_message
    (copy / "notebooks" / "00_setup.ipynb").write_text("alice's edits")
    post(alice)
    pre(alice)  # her second login: her copy, as she left it
    assert (copy / "notebooks" / "00_setup.ipynb").read_text() == "alice's edits"
    assert (source / "notebooks" / "00_setup.ipynb").read_text() == "{}"


def test_a_failed_copy_keeps_no_seat(tmp_path):
    room = Room(gpus=1, per_gpu=1)
    pre, _ = spawn_hook.hooks(room, tmp_path / "no-course", system_users=False)
    with pytest.raises(FileNotFoundError, match="does not hold the course"):
        asyncio.run(pre(spawner("alice", tmp_path / "homes" / "alice")))
    assert room.seats == {} and not (tmp_path / "homes" / "alice" / "stream-ordered-allocator").exists()


def test_a_copy_replaced_while_it_was_made_is_refused(tmp_path, monkeypatch):
    """A learner's process swaps the copy being made for a link to another's copy, at the moment between making it
    and moving it into place (the hub test makes that moment happen for real, with system users)."""
    source, victim = fake_course(tmp_path / "course"), tmp_path / "bob" / "stream-ordered-allocator"
    (victim / "labs").mkdir(parents=True)
    (victim / "labs" / "lab1.ipynb").write_text("bob's work")

    def plant(name):
        made = tmp_path / name / ".stream-ordered-allocator.partial" / "stream-ordered-allocator"
        made.rename(made.with_name("moved"))
        made.symlink_to(victim)
    monkeypatch.setattr(spawn_hook, "pause_for_test", plant)
    with pytest.raises(spawn_hook.CopyRefused, match="replaced while the copy was made"):
        spawn_hook.make_copy(source, tmp_path / "alice")
    assert not os.path.lexists(tmp_path / "alice" / "stream-ordered-allocator")
    assert (victim / "labs" / "lab1.ipynb").read_text() == "bob's work"
    monkeypatch.setattr(spawn_hook, "pause_for_test", lambda name: None)
    copy = spawn_hook.make_copy(source, tmp_path / "alice")  # her next login: a clean copy
    assert copy.is_dir() and not copy.is_symlink() and (copy / "notebooks" / "00_setup.ipynb").is_file()


def test_the_copy_pauses_only_for_a_learner_the_test_holds(tmp_path, monkeypatch):
    monkeypatch.setenv(spawn_hook.PAUSE, str(tmp_path))
    spawn_hook.pause_for_test("alice")  # no alice.hold: no pause
    assert not (tmp_path / "alice.copied").exists()
    (tmp_path / "alice.hold").touch()
    import threading
    t = threading.Thread(target=spawn_hook.pause_for_test, args=("alice",))
    t.start()
    for _ in range(100):
        if (tmp_path / "alice.copied").exists():
            break
        t.join(0.05)
    assert (tmp_path / "alice.copied").exists() and t.is_alive()  # held
    (tmp_path / "alice.hold").unlink()
    t.join(5)
    assert not t.is_alive()


def learner_copy(homes: Path, name: str, summary: str | None = None) -> Path:
    build = homes / name / "stream-ordered-allocator" / "build"
    build.mkdir(parents=True)
    if summary is not None:
        (build / "summary.md").write_text(summary)
    return build


ROW = "| labs/lab1.ipynb | replay | solved | 3.1 | line one<br>line two |"
TABLE = "| notebook | mode | result | seconds | error, or the lab's first finding |\n|---|---|---|---|---|\n" + ROW


def test_the_instructor_page_reads_every_learner_but_the_instructor(tmp_path):
    summaries = pytest.importorskip("summaries", reason="make hub-test installs jupyterhub (requirements-hub.txt)")
    learner_copy(tmp_path, "alice", TABLE)
    learner_copy(tmp_path, "instructor", TABLE)
    (tmp_path / "bob" / "stream-ordered-allocator").mkdir(parents=True)
    (tmp_path / "carol").mkdir()  # no copy: not a learner of this course
    found = summaries.summaries(tmp_path, "instructor")
    assert found == {"alice": TABLE, "bob": ""}
    page = summaries.page(found)
    assert "The room: 2 learners" in page and "not a grade" in page
    assert "<td>solved</td>" in page and "line one<br>line two" in page  # a table, its line break kept


def test_the_instructor_page_follows_no_link_and_reads_a_bounded_regular_file(tmp_path):
    summaries = pytest.importorskip("summaries", reason="make hub-test installs jupyterhub (requirements-hub.txt)")
    homes, elsewhere = tmp_path / "homes", tmp_path / "secret"
    elsewhere.mkdir()
    (elsewhere / "summary.md").write_text("ROOT ONLY")
    (elsewhere / "stream-ordered-allocator" / "build").mkdir(parents=True)
    (learner_copy(homes, "linked") / "summary.md").symlink_to(elsewhere / "summary.md")
    learner_copy(homes, "build_linked").rmdir()
    (homes / "build_linked" / "stream-ordered-allocator" / "build").symlink_to(elsewhere)
    (homes / "copy_linked").mkdir()
    (homes / "copy_linked" / "stream-ordered-allocator").symlink_to(elsewhere / "stream-ordered-allocator")
    os.mkfifo(learner_copy(homes, "fifo") / "summary.md")
    with open(learner_copy(homes, "sparse") / "summary.md", "wb") as f:
        f.write(b"| a | b |\n")
        f.truncate(1536 * 2**20)  # 1.5 GB, sparse: read at most LIMIT of it
    learner_copy(homes, "script", "<script>alert(1)</script><img src=x onerror=alert(2)> [x](javascript:alert(3))")
    found = summaries.summaries(homes)
    for name in ("linked", "build_linked", "copy_linked"):
        assert isinstance(found[name], summaries.Refused) and "link" in str(found[name]), name
    assert isinstance(found["fifo"], summaries.Refused) and "not a regular file" in str(found["fifo"])
    assert found["sparse"].endswith(summaries.CUT) and len(found["sparse"]) <= summaries.LIMIT + len(summaries.CUT)
    page = summaries.page(found)
    assert "ROOT ONLY" not in page and "Not shown: " in page
    assert "<script" not in page and "onerror" not in page and "href=\"javascript" not in page
    assert "&lt;script&gt;alert(1)" in page  # shown as text


@pytest.mark.skipif(os.geteuid() != 0, reason="making a file another user owns needs root")
def test_the_instructor_page_reads_only_the_learners_own_file(tmp_path):
    summaries = pytest.importorskip("summaries", reason="make hub-test installs jupyterhub (requirements-hub.txt)")
    build = learner_copy(tmp_path, "alice", "someone else's")
    for path in (tmp_path / "alice", tmp_path / "alice" / "stream-ordered-allocator", build):
        os.chown(path, 12345, 12345)  # alice's; the summary stays root's (a hard link to a file not hers)
    assert "does not belong to the learner" in str(summaries.summaries(tmp_path)["alice"])


def test_the_instructor_page_names_each_learners_labs_by_the_word_the_runner_read_as_data(tmp_path):
    """The words come from summary.json's rows (the runner's verdict, read as data), never from a sentence; a row whose
    word is not a verdict is left out."""
    pytest.importorskip("jupyterhub", reason="make hub-test installs it (workshop/requirements-hub.txt)")
    import summaries

    build = tmp_path / "alice" / "stream-ordered-allocator" / "build"
    build.mkdir(parents=True)
    rows = [{"notebook": "labs/lab1_stream_ordered.ipynb", "result": "passed", "lab": "solved"},
            {"notebook": "labs/lab3_fix_the_race.ipynb", "result": "passed", "lab": "in progress"},
            {"notebook": "labs/lab2_tune_pool.ipynb", "result": "passed", "lab": "All checks passed."},
            {"notebook": "notebooks/01_sync_vs_async.ipynb", "result": "passed"}]
    (build / "summary.json").write_text(json.dumps(rows))
    (tmp_path / "bob" / "stream-ordered-allocator").mkdir(parents=True)
    (tmp_path / "carol" / "stream-ordered-allocator" / "build").mkdir(parents=True)
    (tmp_path / "carol" / "stream-ordered-allocator" / "build" / "summary.json").symlink_to(build / "summary.json")
    words = {}
    summaries.summaries(tmp_path, None, words)
    assert words == {"alice": {"solved": ["labs/lab1_stream_ordered.ipynb"],
                               "in progress": ["labs/lab3_fix_the_race.ipynb"]}, "bob": {}, "carol": {}}  # a link: not read
    assert "Labs: solved: lab1_stream_ordered; in progress: lab3_fix_the_race" in summaries.page({"alice": ""}, words)


def test_the_cluster_values_give_a_gpu_the_course_and_culling():
    text = (WORKSHOP / "z2jh-values.yaml").read_text()
    values = yaml.safe_load(text)
    assert "NOT TRIED" in text and "Time-Slicing" in text and "MIG" in text
    gpu = [p for p in values["singleuser"]["profileList"]
           if p["kubespawner_override"].get("extra_resource_limits", {}).get("nvidia.com/gpu") == "1"]
    assert gpu and gpu[0].get("default")
    copy = " ".join(values["singleuser"]["lifecycleHooks"]["postStart"]["exec"]["command"])
    assert IMAGE_COURSE in copy and "test -e /home/jovyan/stream-ordered-allocator" in copy
    assert values["singleuser"]["image"]["name"] and values["singleuser"]["memory"]["limit"]
    assert values["cull"]["enabled"] is True and values["cull"]["timeout"] > 0
    assert values["hub"]["config"]["Authenticator"]["admin_users"] == ["instructor"]


CHART = WORKSHOP / "z2jh-chart-4.3.5"  # the chart's own defaults and values schema, vendored at that version


def helm_merge(base: dict, over: dict) -> dict:
    """Values as Helm merges them: maps key by key, anything else replaced, null removes the key."""
    merged = dict(base)
    for key, value in over.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = helm_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


@pytest.mark.parametrize("files", [["z2jh-values.yaml"], ["z2jh-values.yaml", "z2jh-oauth-github.yaml"]])
def test_the_cluster_values_pass_the_charts_schema_with_an_authenticator_chosen(files):
    import jsonschema

    texts = [(WORKSHOP / f).read_text() for f in files]
    assert f"--version {CHART.name.rsplit('-', 1)[1]} " in texts[0]  # installed at the version whose schema this is
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    assert defaults["hub"]["config"]["JupyterHub"]["authenticator_class"] == "dummy"  # what must be overridden
    values = defaults
    for text in texts:
        values = helm_merge(values, yaml.safe_load(text))
    jsonschema.Draft7Validator(json.loads((CHART / "values.schema.json").read_text())).validate(values)
    config = values["hub"]["config"]  # the schema leaves hub.config free: the authenticator is asserted here
    chosen = config["JupyterHub"]["authenticator_class"]
    assert chosen in ("shared-password", "github") and chosen == yaml.safe_load(texts[-1])["hub"]["config"][
        "JupyterHub"]["authenticator_class"]
    for secret in ("user_password", "admin_password", "client_secret", "password"):  # given at install, never here
        assert not any(secret in section for text in texts
                       for section in yaml.safe_load(text)["hub"]["config"].values()), secret
        assert all(f"{secret}=" not in t or f'{secret}="$' in t for t in texts), secret
    if chosen == "github":
        assert config["GitHubOAuthenticator"]["allowed_organizations"] and config["Authenticator"]["allow_all"] is False
    else:
        assert config["Authenticator"]["admin_users"] == ["instructor"]
        assert "SharedPasswordAuthenticator.admin_password" in texts[0]  # the admin's password, apart


def load_hub_test():
    spec = importlib.util.spec_from_file_location("hub_test", ROOT / "tools" / "hub_test.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_hub_test_rejects_a_learner_whose_lab_did_not_raise(tmp_path):
    hub_test = load_hub_test()
    assert hub_test.OUT == ROOT / "build" / "hub-test"
    copy = tmp_path / "alice" / "stream-ordered-allocator"
    (copy / "build" / "executed" / "labs").mkdir(parents=True)
    rows = [{"notebook": nb, "mode": "replay", "result": "passed"} for nb in hub_test.NOTEBOOKS]
    (copy / "build" / "summary.json").write_text(json.dumps(rows))
    lab = {"cells": [{"outputs": [{"output_type": "error", "ename": "LabIncomplete"}]}]}
    (copy / "build" / "executed" / hub_test.NOTEBOOKS[1]).write_text(json.dumps(lab))
    lines = [{"cwd": str(copy), "gpu": "1", "mode": "replay"}, {"rc": 0}]
    assert hub_test.check_learner("alice", lines, tmp_path) == []
    (copy / "build" / "executed" / hub_test.NOTEBOOKS[1]).write_text(json.dumps({"cells": [{"outputs": []}]}))
    assert [p for p in hub_test.check_learner("alice", lines, tmp_path) if "LabIncomplete" in p]
    assert [p for p in hub_test.check_learner("alice", [{"cwd": str(tmp_path), "gpu": "", "mode": None}, {"rc": 1}],
                                              tmp_path) if "not in their copy" in p]
