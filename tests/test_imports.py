"""Importing the package is cheap: `python -m streamalloc info` loads neither IPython nor matplotlib,
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


# -- the package's shape (AUTHORING.md): one home per concept, no import circle -----------------------------------
import ast  # noqa: E402

PACKAGE = ROOT / "streamalloc"
UNITS = {"KiB", "MiB", "GiB", "UINT64_MAX", "med", "mib", "nbytes"}  # measure.py's


def modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        yield ".".join(parts[:-1] if parts[-1] == "__init__" else parts), path


def test_units_and_summaries_are_defined_in_measure_only():
    """MiB, UINT64_MAX, med and the like have one home, streamalloc/measure.py; everyone else imports them."""
    found = []
    for name, path in modules():
        if name == "streamalloc.measure":
            continue
        for node in ast.parse(path.read_text()).body:
            targets = [t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)]
            defined = targets + ([node.name] if isinstance(node, (ast.FunctionDef, ast.ClassDef)) else [])
            found += [f"{name}: {d}" for d in defined if d in UNITS]
    assert found == [], found


def imports_of(name, path):
    """The package modules `name` imports anywhere in its file (function-level imports too)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package.split(".")
            base = base[:len(base) - node.level + 1]
            mod = ".".join(base + ([node.module] if node.module else []))
            out |= {f"{mod}.{a.name}" for a in node.names} | {mod}
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("streamalloc")}
    return out


def test_the_package_has_no_import_circle():
    graph = dict(modules())
    edges = {name: {m for m in imports_of(name, path) if m in graph and m != name} for name, path in graph.items()}
    for name in edges:  # a package's __init__ importing its own modules is how a package is made, not a circle
        if graph[name].name == "__init__.py":
            edges[name] = {m for m in edges[name] if not m.startswith(name + ".")}
    circles, state = [], {}

    def visit(n, stack):
        state[n] = "open"
        for m in sorted(edges[n]):
            if state.get(m) == "open":
                circles.append(stack[stack.index(m):] + [m])
            elif m not in state:
                visit(m, stack + [m])
        state[n] = "done"
    for n in sorted(edges):
        if n not in state:
            visit(n, [n])
    assert circles == [], circles


def test_no_module_of_the_package_forwards_another_s_names():
    """A name has one home: no module of streamalloc/ imports a name only to hand it on (`# noqa: F401`)."""
    package = Path(__file__).resolve().parent.parent / "streamalloc"
    forwarding = [f"{f.relative_to(package)}:{i}" for f in sorted(package.rglob("*.py"))
                  for i, line in enumerate(f.read_text().splitlines(), 1) if "noqa: F401" in line]
    assert forwarding == [], forwarding
