"""What the tests share about lessons and notebooks: one stand-in lesson, one in-process cell runner, and the
notebooks' cells and programs (read through streamalloc/course.py, as the lesson and the checks read them).

    lesson = StandIn(tmp_path, outputs)                  # lesson.run(file, args) prints outputs(file, args)
    lesson = StandIn(tmp_path, outputs, live=True, files={"race.cu": text}, calls=record)   # a lab's check
    ns = run_cells("08_real_workloads", lesson)           # the code cells but the set-up and the %%writefile ones
    code_cells("08_real_workloads"); programs("08_real_workloads")   # the cells' text; {file: text} written

`outputs(file, args)` gives the records (dicts) a GPU's run would print, or a whole Result; `calls(args)` gives the
record of the CUDA calls a traced run makes (streamalloc.calls: the recorder's lines, as dicts or text), None for a
lesson whose traced runs are not recorded (as in replay of code nobody recorded). The numbers are made up for the
tests, never recorded: they exercise the cells' and the checks' tables, words and assertions.
"""
from __future__ import annotations

import json
from pathlib import Path

import streamalloc as sa
from streamalloc import course
from streamalloc.errors import MissingRecording
from streamalloc.lesson import Result

LABEL = "TEST GPU, replayed from a recording of today (canned output for a unit test)"
CLEAN = "========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n"  # what compute-sanitizer says of a clean run


# -- the notebooks -------------------------------------------------------------------------------------------------
def notebook(name: str) -> Path:
    """The saved notebook `name` ("08_real_workloads", "lab1_stream_ordered": the solution's) of the course."""
    for folder in ("notebooks", "solutions", "labs"):
        path = course.REPO / folder / f"{name}.ipynb"
        if path.is_file():
            return path
    raise LookupError(f"the course has no notebook {name}")


def code_cells(name: str) -> list[str]:
    """The text of each code cell of the notebook, in order."""
    cells = json.loads(notebook(name).read_text())["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]


def code_cell(name: str, marker: str) -> str:
    """The text of the notebook's first code cell that contains `marker` (a test runs that one cell on its own)."""
    return next(src for src in code_cells(name) if marker in src)


def programs(name: str) -> dict[str, str]:
    """{file: text} of what the notebook's %%writefile cells write, as IPython writes it."""
    return {file: text for _, file, text in course.written_files(notebook(name))}


def run_cells(name: str, lesson, cells=None) -> dict:
    """Run code cells of the notebook in this process, on `lesson` (the name `lesson`, and `sa`), in one namespace,
    as a kernel would; the namespace. `cells`: the cells' texts to run, in order; by default every code cell but the
    set-up (`sa.start(`, which `lesson` stands for) and the %%writefile ones (the stand-in runs nothing they write).
    A cell's failure raises here, named by the notebook and the cell."""
    import matplotlib
    matplotlib.use("Agg")
    if cells is None:
        cells = [src for src in code_cells(name) if not src.startswith("%%writefile") and "sa.start(" not in src]
    ns = {"sa": sa, "lesson": lesson}
    for i, src in enumerate(cells):
        exec(compile(src, f"{name}: cell {i} run by the tests", "exec"), ns)
    return ns


def replayed(name: str, tmp_path: Path, monkeypatch, runs, machine=None, gpus: int = 1) -> tuple[str, int]:
    """The whole notebook `name` run in a Jupyter kernel, in replay, on lines this test typed: `runs` is
    [(program, args, stdout)] for its %%writefile programs, saved as recordings of `machine` (an H100 by default) made
    on `gpus` GPUs, in the folder the `recordings` fixture made; its key figures go under tmp_path. What `executed`
    gives (its text and how many images); a failing cell raises nbclient's CellExecutionError. The lines are no
    recording and no figure: they exercise the notebook's own code."""
    from streamalloc import replay

    monkeypatch.setenv("STREAMALLOC_MODE", "replay")
    monkeypatch.setenv("STREAMALLOC_KEY_FIGURES", str(tmp_path / "key_figures"))
    monkeypatch.setattr(replay, "_started", set())
    machine = machine or sa.gpu.Machine(gpu="NVIDIA H100 80GB HBM3", compute_capability="9.0", pools_supported=True,
                                        date="2026-01-01", driver="580.1", driver_cuda="13.0", nvcc="13.0",
                                        memory_free=80 << 30)
    written = {}
    for _, file, text in course.written_files(notebook(name)):
        written[Path(file).stem] = tmp_path / file
        written[Path(file).stem].write_text(text)
    # the key a Lesson's run gives (Lesson.key_source), made without a Lesson: one made here, in a process where
    # ipykernel is loaded, would build the notebook's programs ahead, before any recording says which GPU to build for
    for program, args, stdout in runs:
        replay.save(machine, name, program, replay.program_key(written[program]), args,
                    {"stdout": stdout, **({"gpus": gpus} if gpus > 1 else {})})
    return executed(name, monkeypatch)


def executed(name: str, monkeypatch, env: dict | None = None, timeout: float = 600,
             then: str | None = None) -> tuple[str, int]:
    """The whole notebook `name` run in a Jupyter kernel, with `env` set first and the inline backend (a shown figure
    is an output): what its cells printed, as one text, and how many images they showed. `then`: a cell of the
    test's own, run after the notebook's in the same kernel (to print what the notebook computed)."""
    import nbclient
    import nbformat

    for k, v in (env or {}).items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("MPLBACKEND", raising=False)
    nb = nbformat.read(str(notebook(name)), as_version=4)
    if then:
        nb.cells.append(nbformat.v4.new_code_cell(then))
    nbclient.NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(notebook(name).parent)}}).execute()
    outputs = [out for cell in nb.cells for out in cell.get("outputs", [])]
    return ("\n".join(out.get("text", "") + out.get("data", {}).get("text/plain", "") for out in outputs),
            sum("image/png" in out.get("data", {}) for out in outputs))


# -- the stand-in lesson -------------------------------------------------------------------------------------------
class StandIn:
    """A lesson that runs nothing: its runs print what `outputs` gives, as a GPU's (live=True) or a replay's would.

    It keeps what the cells asked of it: `asked` [(file, args, requires)], `figures` {name: (value, unit, band)}.
    `files` {file: text} are written to its build folder, where `source(file)` finds them (a lab's CUDA, for its
    check's reading); `compile` builds nothing and gives `compiled` (None: replay without nvcc; an exception: raised).
    `name` is the lesson's name: a solution's name makes it the course's own code, "stand-in" a learner's. Its
    sanitizer runs print `sanitizer_output` (tests/labcheck.canned_measure; None: they measure as the lesson does).
    """

    def __init__(self, build, outputs=None, *, live: bool = False, name: str = "stand-in", label: str = LABEL,
                 files=None, calls=None, sanitizer_output: str | None = CLEAN, compiled=Path("canned"),
                 shared: int | None = None):
        self.build, self.outputs, self.live, self.name, self.label = Path(build), outputs, live, name, label
        self.shared = shared  # how many other processes compute on "its GPU" (Lesson.shared_with)
        self.calls, self.sanitizer_output, self.compiled = calls, sanitizer_output, compiled
        self.machine = sa.gpu.Machine(gpu="TEST GPU", memory_free=80 << 30, memory_total=80 << 30)
        self.asked, self.figures = [], {}
        for file, text in (files or {}).items():
            (self.build / file).write_text(text)

    def source(self, file) -> Path:
        return self.build / file

    def shared_with(self) -> int | None:
        return self.shared

    def compile(self, file, flags=()):
        if isinstance(self.compiled, Exception):
            raise self.compiled
        return self.compiled

    def result(self, file, args, records=(), **kw) -> Result:
        """A run of `file` that printed `records` (one JSON object a line)."""
        return Result(file, [str(a) for a in args], "".join(json.dumps(r) + "\n" for r in records), "", 0.1,
                      not self.live, self.label, **kw)

    def run(self, file, args=(), timeout=120, flags=(), trace=False, requires=()):
        args = list(args)  # as the cell gave them: `outputs` and `calls` read them so; the Result has them as text
        self.asked.append((file, [str(a) for a in args], tuple(requires)))
        if trace:
            if self.calls is None:
                raise MissingRecording("a stand-in lesson records no calls")
            lines = self.calls(args)
            record = lines if isinstance(lines, str) else "".join(json.dumps(x) + "\n" for x in lines)
            return self.result(file, args, call_record=record)
        out = self.outputs(file, args)
        return out if isinstance(out, Result) else self.result(file, args, out)

    def measure(self, name, fn, params=None, source=""):
        """A measurement from Python: its data is what `outputs(name, params)` gives."""
        return Result(name, [], "", "", 0.1, not self.live, self.label, self.outputs(name, params))

    def key_figure(self, name, value, unit="", band=(0.5, 2.0)):
        self.figures[name] = (value, unit, band)
