"""03's and 08's explorers in Colab's widget front end: classic Notebook 6.5.7 with widgetsnbextension 3.6.10
(ipywidgets 7's front end), from Colab's package set (build/venv-colab, constraints/colab.txt), in headless Chromium.

    # make browser (it builds build/venv-colab first)

Each notebook runs top to bottom in the classic notebook. The explorer's plot must be visible as an ordinary image
output, its controls must be drawn on the first run (this front end cannot make an Output widget: none is used), and
moving the first control (a slider, or a dropdown over named choices) must redraw the plot in place. Screenshots: build/browser/classic-<notebook>-explorer*.png.
"""
from __future__ import annotations

import os
import re
import secrets
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from test_jupyterlab import NB03, REPO, RUN_TIMEOUT_S, SHOTS  # the fixtures browser and page: conftest.py

COLAB_VENV = Path(os.environ.get("COLAB_VENV") or REPO / "build" / "venv-colab")


@pytest.fixture(scope="module")
def classic():
    """Classic Notebook from Colab's package set on 127.0.0.1, serving its own copy of the course."""
    python = COLAB_VENV / "bin" / "python"
    if not python.exists():
        pytest.fail(f"Colab's package set is not installed in {COLAB_VENV}: run `make colab-test` (or `make browser`)")
    where = SHOTS / "classic-course"
    shutil.rmtree(where, ignore_errors=True)
    for name in ("streamalloc", "recordings", "notebooks"):
        shutil.copytree(REPO / name, where / name, ignore=shutil.ignore_patterns("__pycache__", ".ipynb_checkpoints"))
    home = SHOTS / "classic-jupyter"
    shutil.rmtree(home, ignore_errors=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token = secrets.token_hex(16)
    env = {**os.environ, "STREAMALLOC_MODE": "replay", "JUPYTER_CONFIG_DIR": str(home / "config"),
           "JUPYTER_RUNTIME_DIR": str(home / "runtime"), "JUPYTER_PATH": str(COLAB_VENV / "share" / "jupyter"),
           "PYDEVD_DISABLE_FILE_VALIDATION": "1"}
    env.pop("MPLBACKEND", None)
    log = open(SHOTS / "classic-notebook.log", "w")
    proc = subprocess.Popen([str(python), "-m", "notebook", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
                             "--port-retries=0", f"--NotebookApp.token={token}", f"--notebook-dir={where}",
                             "--allow-root"], env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 90
    while True:
        try:
            urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
            break
        except OSError:
            if proc.poll() is not None or time.time() > deadline:
                proc.kill()
                pytest.fail(f"classic Notebook did not start (see {SHOTS / 'classic-notebook.log'})")
            time.sleep(0.5)
    yield {"base": base, "token": token}
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


# The widget manager of widgetsnbextension 3.6 asks the kernel for its widgets (comm_info) when the kernel is ready,
# and once answered re-renders every cell that holds a widget view; that re-render hides the view for good (the view's
# 'remove' handler empties the stored output's model_id). A "Run all" sent before that question queues the cells
# ahead of it on the shell channel: the answer comes after the explorer's cell ran, and its controls vanish (CI: 2 of
# 5 runs, and here whenever the idle icon showed before kernel_ready). A learner's Run all comes after the
# page is ready; so does the test's: it waits until a comm_info of its own is answered, which the shell channel's order
# puts after the manager's.
WIDGETS_SYNCED = """() => new Promise(done => Jupyter.notebook.kernel.comm_info('jupyter.widget', () => done(true)))"""
KERNEL_IDLE = """() => !!(window.Jupyter && Jupyter.notebook && Jupyter.notebook.kernel
  && Jupyter.notebook.kernel.is_connected() && document.querySelector('#kernel_indicator_icon.kernel_idle_icon'))"""
PROMPTS = """() => Jupyter.notebook.get_cells().filter(c => c.cell_type === 'code')
  .map(c => c.element[0].querySelector('.input_prompt').textContent.trim())"""


EXPLORERS = [(NB03, "sa.widgets.Explorer("), ("notebooks/08_real_workloads.ipynb", "W.explorer(")]


@pytest.mark.parametrize("notebook, call", EXPLORERS, ids=["03", "08"])
def test_an_explorer_draws_its_controls_and_redraws_in_ipywidgets_7s_front_end(page, classic, notebook, call):  # noqa: F811
    SHOTS.mkdir(parents=True, exist_ok=True)
    name = Path(notebook).stem
    page.goto(f"{classic['base']}/notebooks/{notebook}?token={classic['token']}")
    page.wait_for_function(KERNEL_IDLE, timeout=90_000)
    page.wait_for_function("() => !!(Jupyter.notebook.kernel.widget_manager && Jupyter.notebook.kernel.info_reply"
                           " && Jupyter.notebook.kernel.info_reply.protocol_version)", timeout=90_000)
    page.evaluate(WIDGETS_SYNCED)
    page.evaluate("() => Jupyter.notebook.execute_all_cells()")
    deadline = time.time() + RUN_TIMEOUT_S
    time.sleep(2)
    while time.time() < deadline:
        prompts = page.evaluate(PROMPTS)
        if not any("*" in p for p in prompts) and page.evaluate(KERNEL_IDLE):
            break
        time.sleep(1)
    assert all(re.fullmatch(r"In\s*\[\d+\]:", p) for p in prompts), f"not every cell ran: {prompts}"

    cell = page.locator("div.code_cell", has=page.locator(".input_area", has_text=call))
    assert cell.count() == 1, f"{name}'s explorer cell was not found"
    cell.scroll_into_view_if_needed()
    plot = cell.locator(".output_area .output_png img").first
    plot.wait_for(timeout=30_000)
    assert plot.is_visible() and page.evaluate("(img) => img.naturalWidth > 0", plot.element_handle()), \
        f"{name}'s explorer plot is not visible in the classic notebook"
    assert cell.locator(".output_error").count() == 0, f"{name}'s explorer cell shows an error"
    controls = cell.locator(".widget-slider, .widget-dropdown")  # numbers: a slider; names: a dropdown
    try:
        controls.first.wait_for(timeout=45_000)  # drawn by the first run: no second chance
    except Exception:
        pass
    cell.screenshot(path=str(SHOTS / f"classic-{name}-explorer.png"))
    assert controls.count() > 0, "no controls drawn; the browser logged:\n" + "\n".join(page.errors)
    assert not [e for e in page.errors if "Could not create a model" in e], \
        "a widget model could not be created in this front end:\n" + "\n".join(page.errors)
    first = plot.get_attribute("src")
    first_control = controls.first
    if first_control.locator("select").count():  # a dropdown: choose its second entry, as a learner would
        select = first_control.locator("select").first
        select.select_option(index=1 if select.evaluate("(s) => s.selectedIndex") != 1 else 0)
    else:
        track = first_control.locator(".ui-slider, .noUi-target").first  # a click near the end moves the slider there
        box = track.bounding_box()
        page.mouse.click(box["x"] + box["width"] * 0.97, box["y"] + box["height"] / 2)
    # a redraw replaces the output's element (update_display_data): poll the cell's image, not the old element
    deadline = time.time() + 60
    while time.time() < deadline and cell.locator(".output_area .output_png img").first.get_attribute("src") == first:
        time.sleep(0.5)
    readouts = cell.locator(".widget-label, .widget-readout").all_inner_texts()
    assert cell.locator(".output_area .output_png img").first.get_attribute("src") != first, \
        f"moving {name}'s first control did not redraw the plot (the controls read {readouts}); the browser logged:\n" \
        + "\n".join(page.errors)
    cell.screenshot(path=str(SHOTS / f"classic-{name}-explorer-moved.png"))
    assert cell.locator(".output_area .output_png img").count() == 1, "a move added a plot instead of redrawing it"
