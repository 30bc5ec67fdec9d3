"""A real browser: JupyterLab in headless Chromium, driven by Playwright, in replay mode (no GPU needed).

    make browser        # STREAMALLOC_BROWSER=1 python -m pytest tests/browser

JupyterLab (from the course's environment) serves a copy of the course on 127.0.0.1, on a free port, with a
token. Notebook 03 runs top to bottom; its explorer's threshold and block-size sliders are moved, and the
plot must change and its title follow the sliders. Lab 1, unsolved, runs; its check's checklist must be
visible and short. The read-ahead copy (streamalloc.site) is built from a replay run and opened. No page may
show "Error displaying widget" or log a console error. Screenshots: build/browser/.

Needs Chromium (Debian's `chromium`; $CHROMIUM names another binary) and `pip install playwright`;
Playwright's own browser download is not used. .ci/run installs both.
"""
from __future__ import annotations

import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SHOTS = REPO / "build" / "browser"
LAB1 = "labs/lab1_stream_ordered.ipynb"
NB03 = "notebooks/03_pools.ipynb"
RUN_TIMEOUT_S = 420
CHECKLIST_MAX_LINES = 40


# -- the server and the browser -------------------------------------------------------------------------
@pytest.fixture(scope="session")
def course() -> Path:
    """A copy of the course for JupyterLab to serve: running a notebook there never rewrites the committed one."""
    where = SHOTS / "course"
    shutil.rmtree(where, ignore_errors=True)
    for name in ("streamalloc", "recordings", "notebooks", "labs", "solutions"):
        shutil.copytree(REPO / name, where / name, ignore=shutil.ignore_patterns("__pycache__", ".ipynb_checkpoints"))
    shutil.copy(REPO / "README.md", where / "README.md")
    return where


@pytest.fixture(scope="session")
def server(course):
    """JupyterLab on 127.0.0.1, a free port and a token; its settings, workspaces and runtime files kept apart."""
    home = SHOTS / "jupyter"
    shutil.rmtree(home, ignore_errors=True)
    settings = home / "settings"
    for plugin, text in (("@jupyterlab/notebook-extension/tracker", '{"windowingMode": "none"}'),
                         ("@jupyterlab/apputils-extension/notification", '{"fetchNews": "false", "checkForUpdates": false}')):
        (settings / plugin).parent.mkdir(parents=True, exist_ok=True)
        (settings / f"{plugin}.jupyterlab-settings").write_text(text)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token = secrets.token_hex(16)
    env = {**os.environ, "STREAMALLOC_MODE": "replay", "JUPYTER_CONFIG_DIR": str(home / "config"),
           "JUPYTERLAB_SETTINGS_DIR": str(settings), "JUPYTERLAB_WORKSPACES_DIR": str(home / "workspaces"),
           "JUPYTER_RUNTIME_DIR": str(home / "runtime")}
    env.pop("MPLBACKEND", None)  # the kernels draw with the inline backend, as for a learner
    log = open(SHOTS / "jupyterlab.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
         "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={course}",
         "--allow-root", "--KernelManager.transport=ipc", "--LabApp.expose_app_in_browser=True",
         "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"],
        env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 90
    while True:
        try:
            urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
            break
        except OSError:
            if proc.poll() is not None or time.time() > deadline:
                proc.kill()
                pytest.fail(f"JupyterLab did not start (see {SHOTS / 'jupyterlab.log'})")
            time.sleep(0.5)
    yield {"base": base, "token": token}
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


# -- JupyterLab ------------------------------------------------------------------------------------------
KERNEL_IDLE = """() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
  return !!k && k.status === 'idle'; }"""
# each code cell's prompt ("[3]:", "[*]:"); a collapsed cell (the set-up cell) shows none: its model's count then
PROMPTS = """() => window.jupyterapp.shell.currentWidget.content.widgets.filter(c => c.model.type === 'code').map(c => {
  const p = c.node.querySelector('.jp-InputPrompt'), t = p ? p.textContent.trim() : '';
  return t || (c.model.executionCount === null ? '' : `[${c.model.executionCount}]:`); })"""
EXECUTE = """async (code) => {
  const k = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
  const f = k.requestExecute({code: code, silent: false, store_history: false});
  let out = '';
  f.onIOPub = (msg) => {
    if (msg.header.msg_type === 'stream') out += msg.content.text;
    if (msg.header.msg_type === 'error') out += 'ERROR ' + msg.content.ename + ': ' + msg.content.evalue;
  };
  await f.done;
  return out; }"""


def open_notebook(page, server, rel):
    page.goto(f"{server['base']}/lab/tree/{rel}?token={server['token']}&reset")
    page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=60_000)
    page.wait_for_function(KERNEL_IDLE, timeout=90_000)


def run_all(page, name):
    """Run all cells (JupyterLab's own command, as the Run menu does) and wait until every code cell has run."""
    page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
    deadline = time.time() + RUN_TIMEOUT_S
    time.sleep(2)  # run-all marks every cell queued ([*]) at once; a cell that raises un-queues the rest
    while True:
        prompts = page.evaluate(PROMPTS)
        if prompts and not any("*" in p for p in prompts) and page.evaluate(KERNEL_IDLE):
            break
        if time.time() > deadline:
            break
        time.sleep(1)
    if not all(re.fullmatch(r"\[\d+\]:?", p) for p in prompts):
        page.screenshot(path=str(SHOTS / f"{name}-stopped.png"))
        pytest.fail(f"{name}: not every cell ran (prompts {prompts}); see {SHOTS / (name + '-stopped.png')}")


def no_widget_errors(page, name):
    assert page.get_by_text("Error displaying widget").count() == 0, f"{name}: a widget failed to display"


def slider(page, description):
    """The ipywidgets slider whose description is `description` (ipywidgets 7 or 8)."""
    label = page.locator(".widget-label", has_text=re.compile(rf"^\s*{re.escape(description)}\s*$"))
    found = page.locator(".widget-slider", has=label)
    assert found.count() == 1, f"expected one slider described {description!r}, found {found.count()}"
    return found.first


PLOT = ".jp-RenderedImage img"  # the explorer's plot: an ordinary image output of its cell, above the controls


def explorer_image(page):
    img = page.locator(".jp-Cell", has=page.locator(".widget-slider")).locator(PLOT).first
    img.wait_for(timeout=30_000)
    return img.get_attribute("src")


def move(page, description):
    """Move a slider one step (right, or left at its end) with the keyboard; return (old, new) readouts."""
    s = slider(page, description)
    readout = s.locator(".widget-readout")
    before = readout.inner_text().strip()
    handle = s.locator(".noUi-handle, .ui-slider-handle").first
    for key in ("ArrowRight", "ArrowLeft"):
        handle.focus()
        handle.press(key)
        try:
            page.wait_for_function("([el, old]) => el.textContent.trim() !== old", arg=[readout.element_handle(), before],
                                   timeout=3_000)
            break
        except Exception:
            continue
    after = readout.inner_text().strip()
    assert after != before, f"the {description!r} slider did not move from {before!r}"
    return before, after


SHOWN = """
import json as _json
import matplotlib.pyplot as _plt
from matplotlib.figure import Figure as _Figure
import streamalloc as _sa
_e = [v for v in list(globals().values()) if isinstance(v, _sa.widgets.Explorer)][-1]
_d, _l = _e.data(_e.setting)
_f = _e.plot(*_e.setting, data=_d, label=_l)
_f = _f if isinstance(_f, _Figure) else _plt.gcf()
_t = " ".join(t for t in [_f._suptitle.get_text() if _f._suptitle else ""] + [a.get_title() for a in _f.axes] if t)
_plt.close(_f)
print(_json.dumps({"title": _t, "png": _e.shown["data"]["image/png"].strip(), "setting": repr(_e.setting)}))
"""


def shown(page):
    """What the kernel's explorer shows now: the title of the plot of its setting, and the PNG it displayed."""
    import json

    out = page.evaluate(EXECUTE, SHOWN)
    assert not out.startswith("ERROR"), out
    return json.loads(out.strip().splitlines()[-1])


def wait_image_change(page, old_src):
    page.wait_for_function(
        """(old) => { const c = [...document.querySelectorAll('.jp-Cell')].find(e => e.querySelector('.widget-slider'));
                      const i = c && c.querySelector('.jp-RenderedImage img');
                      return i && i.getAttribute('src') !== old; }""", arg=old_src, timeout=30_000)
    return explorer_image(page)


def test_pools_explorer_follows_its_sliders(page, server):
    SHOTS.mkdir(parents=True, exist_ok=True)
    open_notebook(page, server, NB03)
    run_all(page, "03_pools")
    cell = page.locator(".jp-Cell", has=page.locator(".widget-slider"))
    cell.scroll_into_view_if_needed()
    first = explorer_image(page)
    page.screenshot(path=str(SHOTS / "03_pools-explorer-default.png"))
    state = shown(page)
    assert first.split(",", 1)[1].strip() == state["png"], "the image shown is not the explorer's drawing"

    for description, shot in (("threshold", "threshold"), ("block size", "block-size")):
        old_title = state["title"]
        before, after = move(page, description)
        src = wait_image_change(page, first)
        state = shown(page)
        page.screenshot(path=str(SHOTS / f"03_pools-explorer-{shot}.png"))
        assert src != first, f"moving {description} from {before} to {after} did not change the plot"
        assert src.split(",", 1)[1].strip() == state["png"], (
            f"after moving {description}, the image shown is not the explorer's drawing of {state['setting']}")
        assert state["title"] != old_title, f"the title did not change when {description} moved: {old_title!r}"
        assert after in state["title"] and before not in state["title"].replace(after, ""), (
            f"{description} reads {after!r}, but the plot's title says {state['title']!r}")
        first = src
    no_widget_errors(page, "03")
    assert not page.errors, "03: the browser logged errors:\n" + "\n".join(page.errors)


def test_lab1_unsolved_shows_a_short_checklist(page, server):
    SHOTS.mkdir(parents=True, exist_ok=True)
    open_notebook(page, server, LAB1)
    run_all(page, "lab1")
    check = page.locator(".jp-CodeCell", has=page.locator(".jp-InputArea", has_text="labchecks.lab1"))
    assert check.count() == 1, "lab 1's check cell was not found"
    outputs = check.locator(".jp-OutputArea-output")
    assert outputs.count() >= 1, "lab 1's check printed nothing"
    checklist = outputs.filter(has_text="Lab 1: from synchronous").first  # after the tables the run shows
    checklist.scroll_into_view_if_needed()
    assert checklist.is_visible(), "lab 1's checklist is not visible"
    text = checklist.inner_text().strip()
    lines = text.splitlines()
    check.screenshot(path=str(SHOTS / "lab1-check.png"))
    assert 2 <= len(lines) < CHECKLIST_MAX_LINES, f"lab 1's checklist has {len(lines)} lines:\n{text}"
    assert re.search(r"wrong|not|missing|todo", text, re.I), f"the unsolved lab's checklist names nothing to do:\n{text}"
    no_widget_errors(page, "lab 1")
    assert not page.errors, "lab 1: the browser logged errors:\n" + "\n".join(page.errors)


# -- the read-ahead copy ---------------------------------------------------------------------------------
SITE_NOTEBOOKS = [NB03, LAB1, "solutions/lab1_stream_ordered.ipynb"]


@pytest.fixture(scope="session")
def site():
    """The read-ahead copy of three notebooks, built as `make site` builds the whole course."""
    from streamalloc import runner, site as site_mod

    out = SHOTS / "site-run" / "executed"
    os.environ["STREAMALLOC_MODE"] = "replay"
    os.environ.pop("MPLBACKEND", None)  # as `make site`: the kernels draw inline, so the pages hold every figure
    rows = runner.run([REPO / nb for nb in SITE_NOTEBOOKS], out_dir=out, progress=False)
    assert all(r["mode"] == "replay" for r in rows)
    return site_mod.build(out, SHOTS / "site", only=SITE_NOTEBOOKS)


def test_read_ahead_copy_renders(page, site):
    from streamalloc import replay

    gpu = replay.machine(replay.reference()).gpu
    page.goto(site.as_uri())
    banner = page.locator("#replay-banner")
    assert banner.is_visible() and gpu in banner.inner_text() and "replay" in banner.inner_text()
    page.screenshot(path=str(SHOTS / "site-index.png"), full_page=True)
    page.get_by_role("link", name=re.compile(r"^03 ")).click()
    page.wait_for_load_state()
    assert page.url.endswith("notebooks/03_pools.html")
    assert gpu in page.locator("#replay-banner").inner_text()
    images = page.locator(".jp-OutputArea-output img")
    assert images.count() > 1, "the lesson's page shows no figure besides the explorer's"
    assert page.evaluate("(img) => img.naturalWidth > 0", images.first.element_handle()), "its first figure is empty"
    page.screenshot(path=str(SHOTS / "site-03_pools.png"))
    page.goto((site.parent / "labs" / "lab1_stream_ordered.html").as_uri())
    page.locator("#solution-link").click()
    page.wait_for_load_state()
    assert page.url.endswith("solutions/lab1_stream_ordered.html")
    no_widget_errors(page, "the read-ahead copy")
    assert not page.errors, "the read-ahead copy: the browser logged errors:\n" + "\n".join(page.errors)
