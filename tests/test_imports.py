"""Importing the package is cheap: `python -m streamalloc info` loads neither IPython nor matplotlib (issue 11 §4),
and the modules that need them still load on first use."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("IPython", "matplotlib", "ipywidgets")


def imported_by(*argv):
    done = subprocess.run([sys.executable, "-X", "importtime", *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={"PATH": "/usr/bin:/bin", "STREAMALLOC_MODE": "replay"})
    names = {line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    return done, names


def test_info_imports_neither_ipython_nor_matplotlib():
    done, names = imported_by("-m", "streamalloc", "info")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "streamalloc.gpu" in names  # the import log is read right
    assert not {n for n in names if n.split(".")[0] in HEAVY}, sorted(n for n in names if n.split(".")[0] in HEAVY)


def test_the_plotting_modules_load_on_first_use():
    done = subprocess.run([sys.executable, "-c", "import sys, streamalloc as sa; a = 'matplotlib' in sys.modules; "
                           "sa.plots.figure; sa.widgets.Explorer; sa.labchecks; sa.checks.Report; "
                           "print(a, 'matplotlib' in sys.modules)"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={"PATH": "/usr/bin:/bin", "MPLBACKEND": "Agg"})
    assert done.stdout.split() == ["False", "True"], done.stderr[-2000:]
