"""Recording and replaying: measurements made on a real GPU, stored so that a machine without one
shows the same figures, marked as replayed.

Layout: recordings/<set>/machine.json (the machine and the date, gpu.Machine.to_dict()) and
recordings/<set>/<lesson>/<name>.json, whose "runs" map a key to the run's raw output. A set is one
reference machine: the recorder writes to $STREAMALLOC_RECORD_TO, else to the slug of the GPU's name;
replay reads $STREAMALLOC_REFERENCE, else DEFAULT_REFERENCE.

The key is a hash of what a program means and its arguments, so that fixing a comment does not ask for a
new recording but changing the code does:
- a CUDA program: its source with comments and blank lines removed and whitespace collapsed
  (`cpp_meaning`), then each header it #includes (quoted: beside it or in streamalloc/include; angle
  brackets: streamalloc/include), transitively, normalized the same way, then the build flags
  (`program_key`);
- Python (a `.py` program, or a function given to `lesson.measure`): the dump of its syntax tree without
  docstrings (`python_meaning`); comments are not in the tree. A program's key also holds each module beside
  it that it imports, transitively (`imported_modules`), as a CUDA program's holds its headers.
Each run stores `source_sha` (the hash of that key source) and, for programs, `program_sha` (the hash of
the program and its headers without flags), which the freshness test compares with the notebooks.
An argument that names an input file stands in the key for the file's content (`input_args`).
When the meaning changes, replay says to re-record, never falls back.
"""
from __future__ import annotations

import ast
import errno
import hashlib
import html
import json
import os
import re
import textwrap
import threading
from pathlib import Path

from .course import RECORDINGS, slug, write_atomically
from .errors import BrokenRecording, MissingRecording, StaleRecording
from .gpu import Machine

INCLUDE = Path(__file__).resolve().parent / "include"
DEFAULT_REFERENCE = "nvidia-h200"  # the H200, CUDA 13: what replay shows unless told otherwise
RERECORD = "re-record it on a GPU with `make record` (see README.md)"


def root() -> Path:
    return Path(os.environ.get("STREAMALLOC_RECORDINGS", RECORDINGS))


# -- what a program means -------------------------------------------------------------------------------
_CPP_TOKENS = re.compile(r"""
      (?P<raw>R"(?P<delim>[^()\\\s]{0,16})\((?s:.*?)\)(?P=delim)")    # raw string literal
    | (?P<str>"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*')                 # string or character literal
    | (?P<line>//(?:\\\n|[^\n])*)                                        # // comment (with continuations)
    | (?P<block>/\*(?s:.*?)\*/)                                          # /* comment */
    | (?P<ws>[ \t\f\v\r]+)
    """, re.X)


def cpp_meaning(source: str) -> str:
    """C/C++/CUDA source without comments and blank lines, with runs of whitespace collapsed to one space.

    String and character literals are kept as written. Applying it twice gives the same text.
    """
    def repl(m: re.Match) -> str:
        if m["raw"] or m["str"]:
            return m[0]
        if m["block"]:
            return " " if "\n" not in m[0] else "\n"
        return "" if m["line"] else " "

    text = _CPP_TOKENS.sub(repl, source)
    return "\n".join(line.strip() for line in text.split("\n") if line.strip())


def _strip_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return tree


def python_meaning(source: str) -> str:
    """Python source as the dump of its syntax tree, docstrings dropped: comments and layout do not count.

    Text that does not parse on its own (a lambda cut out of a longer line) falls back to the text with
    whitespace collapsed.
    """
    text = textwrap.dedent(source)
    try:
        tree = ast.parse(text)
    except SyntaxError:
        try:
            tree = ast.parse("(\n" + text.strip().rstrip(",") + "\n)")
        except SyntaxError:
            return " ".join(text.split())
    return _dump(_strip_docstrings(tree))


def _dump(node) -> str:
    """ast.dump, but the same on every Python the course meets (3.10 to 3.13): empty and None fields, which
    newer versions add (type_params) or stop printing, are left out, and so are expression contexts."""
    if isinstance(node, ast.AST):
        fields = [f"{name}={_dump(value)}" for name, value in ast.iter_fields(node)
                  if value not in (None, []) and name not in ("ctx", "kind", "type_comment")]
        return f"{type(node).__name__}({', '.join(fields)})"
    if isinstance(node, list):
        return "[" + ", ".join(_dump(v) for v in node) + "]"
    return repr(node)


_INCLUDE = re.compile(r'^#\s*include\s*(?:"(?P<quoted>[^"]+)"|<(?P<angle>[^>]+)>)', re.M)


def included_headers(path: Path, include_dirs=(INCLUDE,)) -> list[Path]:
    """The headers a program #includes from its own folder (quoted) or the course's include folder, transitively,
    in the order first met. System and CUDA headers are not the course's and do not count."""
    found: list[Path] = []

    def visit(file: Path):
        for m in _INCLUDE.finditer(cpp_meaning(file.read_text())):
            where = ([file.parent] if m["quoted"] else []) + [Path(d) for d in include_dirs]
            for d in where:
                h = (d / (m["quoted"] or m["angle"])).resolve()
                if h.is_file():
                    if h not in found:
                        found.append(h)
                        visit(h)
                    break

    visit(Path(path))
    return found


def imported_modules(path: Path) -> list[Path]:
    """The modules beside a Python program that it imports (`import m`, `from m import x`, `m.py` in its folder),
    transitively, in the order first met: what a CUDA program's course headers are to it. Other modules do not count."""
    found: list[Path] = []

    def visit(file: Path):
        try:
            tree = ast.parse(file.read_text())
        except SyntaxError:  # the run reports it; the key is then the text alone
            return
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else []
            for name in names:
                m = (file.parent / f"{name.split('.')[0]}.py").resolve()
                if m.is_file() and m != Path(path).resolve() and m not in found:
                    found.append(m)
                    visit(m)

    visit(Path(path))
    return found


def program_meaning(path: str | os.PathLike, include_dirs=(INCLUDE,)) -> str:
    """What a program means, without flags or arguments: its normalized source and its course headers (a Python
    program: its syntax tree and the modules beside it that it imports)."""
    path = Path(path)
    if path.suffix == ".py":
        return "\n".join([python_meaning(path.read_text())]
                         + [f"#module {m.name}\n{python_meaning(m.read_text())}" for m in imported_modules(path)])
    parts = [cpp_meaning(path.read_text())]
    parts += [f"#file {h.name}\n{cpp_meaning(h.read_text())}" for h in included_headers(path, include_dirs)]
    return "\n".join(parts)


def program_key(path: str | os.PathLike, flags=(), include_dirs=(INCLUDE,)) -> str:
    """The key source of a program built with these flags: program_meaning, then the flags."""
    return program_meaning(path, include_dirs) + "\n#flags " + " ".join(map(str, flags))


def input_args(args, folder: Path) -> list[str]:
    """The arguments as a recording keys and stores them: one that names an input file (it has a suffix, such as
    trace.txt, and is a file, as given or in `folder`) stands for that file's content, `name#sha256:<20 hex>`, so
    that the key follows what the program reads, not where it lies on this machine."""
    out = []
    for a in map(str, args):
        path = Path(a) if Path(a).is_absolute() else Path(folder) / a
        if Path(a).suffix and path.is_file():
            out.append(f"{path.name}#sha256:{hashlib.sha256(path.read_bytes()).hexdigest()[:20]}")
        else:
            out.append(a)
    return out


def key(source: str, args) -> str:
    return hashlib.sha256(json.dumps([source, [str(a) for a in args]]).encode()).hexdigest()[:20]


def source_hash(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:20]


# -- which set of recordings ------------------------------------------------------------------------------
def available() -> list[str]:
    """The sets in recordings/: folders that hold a machine.json (one that cannot be read, a link that leads back to
    itself, counts: reading it says what is wrong with it, rather than calling the set missing)."""
    r = root()
    try:
        return sorted(p.name for p in r.iterdir() if _there(p / "machine.json")) if r.is_dir() else []
    except OSError:
        return []


def _there(path: Path) -> bool:
    """Whether path names something, readable or not: a symbolic link that loops, or whose target is gone, is there
    (reading it says what is wrong), where Path.is_file() would call it missing."""
    return os.path.lexists(path)


def unreadable(path: Path) -> str:
    """Why path, or a folder above it inside recordings/, is there but cannot be used ('' where nothing is wrong,
    or where it is simply missing): a symbolic link that leads back to itself, or to nothing."""
    top = root()
    for p in [*reversed(Path(path).parents), Path(path)]:
        if not p.is_relative_to(top) or not os.path.islink(p):
            continue
        try:
            p.stat()
        except OSError as e:
            if e.errno == errno.ELOOP:
                return f"{p} is a symbolic link that leads back to itself ({os.readlink(p)})"
            if e.errno == errno.ENOENT:
                return f"{p} is a symbolic link to {os.readlink(p)}, which does not exist"
            return f"{p} cannot be read: {e.strerror or e}"
    return ""


def supplement(set_name: str) -> bool:
    """A set recorded only for the lessons whose programs need more GPUs than the reference machines have
    (`tools/record_reference.sh gpus2` names it `<gpu>-x<N>`): replay reads it for those programs alone, never as the
    reference."""
    return re.search(r"-x\d+$", set_name) is not None


def another_model(set_name: str) -> bool:
    """A full set recorded on another GPU model than the default reference's (the H100's, recorded before the
    reference moved to the H200): kept for comparison, read only when asked for ($STREAMALLOC_REFERENCE). It holds
    recordings of programs as they are now and nothing else (`tools/prune_recordings.py` drops a run whose program
    has changed since), so it owes no recording: a changed program is simply not recorded on that model."""
    if supplement(set_name) or set_name == DEFAULT_REFERENCE:
        return False
    try:
        return machine(set_name).gpu != machine(DEFAULT_REFERENCE).gpu
    except (BrokenRecording, OSError, TypeError, ValueError):
        return False


def reference() -> str | None:
    """The set to replay: $STREAMALLOC_REFERENCE, else DEFAULT_REFERENCE, else the only one there is."""
    want = os.environ.get("STREAMALLOC_REFERENCE")
    have = available()
    for name in (want or DEFAULT_REFERENCE,):  # there, but a link that loops or leads nowhere: say so, not "missing"
        if name not in have and (why := unreadable(root() / name / "machine.json")):
            raise BrokenRecording(f"the recordings of {name} cannot be read: {why}; {RERECORD}")
    if want:
        if want not in have:
            raise MissingRecording(f"STREAMALLOC_REFERENCE={want}, but recordings/ holds only "
                                   f"{', '.join(have) or 'nothing'}")
        return want
    if DEFAULT_REFERENCE in have:
        return DEFAULT_REFERENCE
    full = [s for s in have if not supplement(s)]
    return full[0] if len(full) == 1 else None


def record_to(m: Machine) -> str:
    """The set the recorder writes: $STREAMALLOC_RECORD_TO, else the GPU's name as a slug."""
    name = os.environ.get("STREAMALLOC_RECORD_TO") or slug(m.gpu or "unknown-gpu")
    if slug(name) != name:
        raise ValueError(f"STREAMALLOC_RECORD_TO={name!r}: use lower-case letters, digits and '-' ({slug(name)!r})")
    return name


# -- reading -----------------------------------------------------------------------------------------------
def _no_constant(name: str):
    """json's reader meets NaN, Infinity or -Infinity: no measurement is one, and JSON itself has none."""
    raise ValueError(f"it holds {name}, which is not a number a measurement can be (nor valid JSON)")


def read_json(path: Path, what: str = "recording") -> dict:
    """A recording's JSON, or BrokenRecording naming the file and what is wrong with it: unreadable (a symbolic link
    that leads back to itself, a folder, no permission), empty, not JSON, holding NaN or Infinity, not an object."""
    try:
        text = path.read_text()
    except OSError as e:
        why = unreadable(path) or e.strerror or str(e)
        raise BrokenRecording(f"the {what} {path} cannot be read: {why}; {RERECORD}") from None
    if not text.strip():
        raise BrokenRecording(f"the {what} {path} is empty (a recorder that stopped while writing?); {RERECORD}")
    try:
        data = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as e:
        raise BrokenRecording(f"the {what} {path} is not valid JSON (truncated or edited?): {e.msg} at line "
                              f"{e.lineno}, column {e.colno}; {RERECORD}") from None
    except ValueError as e:  # _no_constant
        raise BrokenRecording(f"the {what} {path} is damaged: {e}; {RERECORD}") from None
    if not isinstance(data, dict):
        raise BrokenRecording(f"the {what} {path} holds a JSON {type(data).__name__}, not an object; {RERECORD}")
    return data


def read_runs(path: Path) -> dict:
    """The runs of one recording file, checked: each run has its arguments and the hash of its source."""
    data = read_json(path)
    runs = data.get("runs")
    if not isinstance(runs, dict):
        raise BrokenRecording(f"the recording {path} has no \"runs\" object; {RERECORD}")
    if not runs:
        raise BrokenRecording(f"the recording {path} holds no runs: nothing was recorded; {RERECORD}")
    for k, r in runs.items():
        if not isinstance(r, dict) or "source_sha" not in r or "args" not in r:
            raise BrokenRecording(f"the recording {path}: run {k} lacks \"args\" or \"source_sha\"; {RERECORD}")
    return runs


def plain(value):
    """A value read from a recording, safe in HTML and Markdown: its text with <, > and & escaped (a GPU's,
    driver's or host's name has none of them; a crafted one shows as text, never as markup)."""
    if isinstance(value, str):
        return html.escape(value, quote=False)
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


def run_data(run: dict, path: Path):
    """What a recorded Python measurement returned (its "data", JSON text), or BrokenRecording naming the file."""
    try:
        return json.loads(run["data"], parse_constant=_no_constant)
    except (TypeError, ValueError) as e:
        raise BrokenRecording(f"the recording {path}: a run's \"data\" is not valid JSON ({e}); {RERECORD}") from None


def machine(gpu_dir: str, lesson: str | None = None) -> Machine:
    """The recorded machine, its values escaped (`plain`); a lesson's own copy holds the free memory its sweeps
    were sized from."""
    own = root() / gpu_dir / (lesson or "") / "machine.json"
    path = own if lesson and _there(own) else root() / gpu_dir / "machine.json"
    return Machine.from_dict(plain(read_json(path, "machine description")))


def same_machine_note(m: Machine) -> str:
    """What a set recorded with another software stack on the default set's GPU and driver must say of itself: the
    CUDA 12 set (a T4's stack and memory, programs built for compute_75) ran on the same H100 and driver as the
    CUDA 13 set, so it confirms nothing about another GPU or driver. '' for any other machine."""
    try:
        ref = machine(DEFAULT_REFERENCE)
    except (BrokenRecording, OSError, TypeError):
        return ""
    stack = ("nvcc", "runtime", "build_arch")
    if (m.gpu, m.driver) != (ref.gpu, ref.driver) or all(getattr(m, k, None) == getattr(ref, k, None) for k in stack):
        return ""
    return f"; same GPU and driver as {DEFAULT_REFERENCE}: a check of the stack, not of another GPU or driver"


def path_of(gpu_dir: str, lesson: str, name: str) -> Path:
    return root() / gpu_dir / lesson / f"{name}.json"


def load(gpu_dir: str, lesson: str, name: str, source: str, args) -> dict:
    """The recorded run of this source with these arguments, or an error that says what changed."""
    path = path_of(gpu_dir, lesson, name)
    if not _there(path) and (why := unreadable(path)):
        raise BrokenRecording(f"the recording {path} cannot be read: {why}; {RERECORD}")
    if not _there(path):
        raise MissingRecording(f"no recording of {lesson}/{name} for {gpu_dir} ({path} is missing): {RERECORD}")
    runs = read_runs(path)
    k = key(source, args)
    if k in runs:
        return runs[k]
    h = source_hash(source)
    if any(r["source_sha"] != h for r in runs.values()):
        why = "its code changed after it was recorded"
    else:
        recorded = sorted({" ".join(map(str, r["args"])) or "(none)" for r in runs.values()})
        why = f"it was recorded with other arguments ({', '.join(recorded[:6])}), not {' '.join(map(str, args)) or '(none)'}"
    raise StaleRecording(f"the recording of {lesson}/{name} on {gpu_dir} does not match: {why}; {RERECORD}")


# -- writing -----------------------------------------------------------------------------------------------
_started: set[Path] = set()  # files this process has begun to write: the first save replaces an old file


def save(m: Machine, lesson: str, name: str, source: str, args, run: dict, program_sha: str | None = None) -> Path:
    """Store one live run under the recorder's set; `program_sha` names the program it ran, when it ran one."""
    with _saving:  # programs run together (streamalloc.together) finish in threads: one save at a time
        return _save(m, lesson, name, source, args, run, program_sha)


_saving = threading.Lock()


def _save(m: Machine, lesson: str, name: str, source: str, args, run: dict, program_sha: str | None) -> Path:
    path = path_of(record_to(m), lesson, name)
    text = json.dumps(m.to_dict(), indent=1, sort_keys=True) + "\n"
    for where in (path.parent.parent, path.parent):  # the GPU's description, and the lesson's own
        write_atomically(where / "machine.json", text)
    # a process's first save starts the file anew (runs of a program as it was before are dropped), except for the
    # runs another notebook saved in the same recording session ($STREAMALLOC_RECORD_SESSION, set by `record`): a
    # solution and its unsolved lab share a lesson, and both are recorded
    session = os.environ.get("STREAMALLOC_RECORD_SESSION", "")
    runs = read_runs(path) if path.is_file() else {}
    if path not in _started:
        runs = {k: r for k, r in runs.items() if session and r.get("session") == session}
    data = {"runs": runs}
    _started.add(path)
    entry = {"args": [str(a) for a in args], "source_sha": source_hash(source), **run}
    if session:
        entry["session"] = session
    if program_sha:
        entry["program_sha"] = program_sha
    data["runs"][key(source, args)] = entry
    write_atomically(path, json.dumps(data, indent=1, sort_keys=True) + "\n")
    return path


def recording() -> bool:
    """True in the recorder (STREAMALLOC_RECORD=1): live runs are written to recordings/."""
    return os.environ.get("STREAMALLOC_RECORD", "") == "1"
