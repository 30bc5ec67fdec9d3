"""Building and running CUDA: nvcc with a content-keyed cache, programs in a subprocess with a timeout.

Arguments are always a list (never a shell string). Failures raise a CourseError whose message
names the problem: a compile error with nvcc's file:line, a crash with the program's stderr, a
hang killed at the timeout, no nvcc with how to get it, a driver older than the toolkit (or no GPU at all)
in words; an nvcc that crashes, a full disk or a build folder that cannot be written is a BuildFailed that says
so (not the program's fault). nvcc and the programs run in their own process group: a timeout or an interrupt
(SIGINT, and SIGTERM or SIGHUP during a build: `terminate_as_interrupt`) kills everything they started, and a
failed build leaves no file behind (nvcc's temporaries go to a folder of its own).
"""
from __future__ import annotations

import contextlib
import dataclasses
import errno
import functools
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from . import gpu
from .errors import BuildFailed, CompileError, CourseError, NvccNotFound, ProgramFailed, ProgramTimedOut

INCLUDE = Path(__file__).parent / "include"  # course.cuh: the CHECK macro every program uses
BASE_FLAGS = ["-O2", "-std=c++17", "-lineinfo"]


def nvcc_missing(driver_cuda: str | None = None) -> str:
    """No nvcc, in words: where it was looked for, and how to get one (for this driver's CUDA, when known)."""
    return ("nvcc, the CUDA compiler, was not found on the PATH, in $CUDA_HOME/bin or in /usr/local/cuda/bin. "
            + gpu.nvcc_help(driver_cuda))


NVCC_HELP = nvcc_missing()  # the general advice; a build that finds no nvcc names the driver's CUDA too


def headers_text() -> str:
    return "".join(p.read_text() for p in sorted(INCLUDE.glob("*.cuh")))


_EXEC = re.compile(r"""^\s*exec\s+(?:'((?:[^']|'\\'')+)'|"([^"]+)"|(\S+))\s+"\$@"\s*$""", re.M)


def real_nvcc(nvcc: str) -> str:
    """The nvcc program itself: links followed, and a wrapper script (`exec /path/to/nvcc "$@"`, as
    tools/ensure_nvcc.sh and some installs write) followed to what it runs."""
    path = os.path.realpath(nvcc)
    for _ in range(4):
        try:
            if os.path.getsize(path) > 4096:
                break
            m = _EXEC.search(Path(path).read_text())
        except (OSError, UnicodeDecodeError):
            break
        if not m:
            break
        path = os.path.realpath(m[1].replace("'\\''", "'") if m[1] else m[2] or m[3])
    return path


# beside the nvcc program, in its toolkit's tree: the runtime's headers and library a program is built with (the
# pip wheels install them apart from nvcc)
TOOLKIT_FILES = ("include/cuda_runtime_api.h", "lib64/libcudart_static.a", "lib/libcudart_static.a")


@functools.lru_cache(maxsize=None)
def _nvcc_identity(files: tuple) -> str:
    digest = hashlib.sha256()
    for path, _size, _mtime in files:
        try:
            digest.update(Path(path).read_bytes())
        except OSError:
            digest.update(path.encode())
    return digest.hexdigest()


def nvcc_identity(nvcc: str) -> str:
    """A hash of the nvcc program itself (after its wrappers) and of its toolkit's runtime headers and library: part of a
    program's cache key, so one build cache serves every nvcc: two virtual environments' copies of one toolkit share
    their programs, two toolkits never do. Nothing is run (an nvcc that hangs costs no time here)."""
    path = real_nvcc(nvcc)
    tree = os.path.dirname(os.path.dirname(path))
    files = []
    for f in (path, *(os.path.join(tree, t) for t in TOOLKIT_FILES)):
        try:
            st = os.stat(f)
        except OSError:
            continue
        files.append((os.path.realpath(f), st.st_size, st.st_mtime))
    return _nvcc_identity(tuple(files)) if files else path


def arch_flags(compute_capability: str | None, live: bool) -> list[str]:
    """Build for the GPU that is here (-arch=native); in replay, for the recorded GPU's architecture;
    $STREAMALLOC_ARCH (e.g. compute_75: PTX that a T4 could run) overrides both."""
    override = gpu.arch_override()
    if override:
        return [f"-arch={override}"]
    if live:
        return ["-arch=native"]
    if compute_capability:
        return [f"-arch=sm_{compute_capability.replace('.', '')}"]
    return []


_building: set = set()  # the nvcc processes running now (build_all stops them on an interrupt)


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where the program is, as SIGINT raises KeyboardInterrupt."""

    def __init__(self, signum: int):
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum


@contextlib.contextmanager
def terminate_as_interrupt():
    """Inside: SIGTERM and SIGHUP (a closed terminal) do what SIGINT does, raise where the program is (Terminated, a
    KeyboardInterrupt), so that every cleanup runs (nvcc's process group killed, its temporary folder removed, a
    runner's kernels stopped); on the way out the signal then does what it did before (by default: ends the
    process). Only the main thread receives signals: elsewhere, and where a signal was ignored, nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def raise_it(signum, frame):
        raise Terminated(signum)

    before = {}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        old = signal.getsignal(sig)
        if old not in (signal.SIG_IGN, None):
            before[sig] = signal.signal(sig, raise_it)
    try:
        yield
    except Terminated as e:
        for sig, old in before.items():
            signal.signal(sig, old)
        before = {}
        if e.signum in (signal.SIGTERM, signal.SIGHUP):
            old = signal.getsignal(e.signum)
            if old == signal.SIG_DFL:
                os.kill(os.getpid(), e.signum)  # cleaned up: now end as the signal ends a process
                time.sleep(1)
        raise
    finally:
        for sig, old in before.items():
            signal.signal(sig, old)


def _cannot_write(folder: Path, e: OSError, source: Path) -> BuildFailed:
    """A build folder that cannot be written (read-only, full, not ours), in words."""
    why = ("the disk is full" if e.errno == errno.ENOSPC else "it is read-only" if e.errno == errno.EROFS
           else "permission denied" if e.errno in (errno.EACCES, errno.EPERM) else e.strerror or str(e))
    return BuildFailed(f"{source.name} could not be built: nvcc's output cannot be written to {folder} ({why}). "
                       "This is not an error in the program: free some disk space, or make the folder writable.")


_CRASH = re.compile(r"died due to signal|Segmentation fault|core dumped|[Ii]nternal compiler error|Aborted")


def _object_flags(nvcc_flags: list) -> list:
    """What compiling a program's object takes: every flag but the runtime's kind (-cudart shared, for the recorder,
    or -cudart=static). A program built with the recorder's -cudart shared and the same program built static share one
    compiled object (nvcc's device and host compilation, seconds) and differ only in a link (a tenth of a second)."""
    out, skip = [], False
    for f in nvcc_flags:
        if skip or f.startswith("-cudart="):
            skip = False
        elif f == "-cudart":
            skip = True
        else:
            out.append(f)
    return out


def build(source: str | os.PathLike, flags: list[str] | tuple = (), arch: list[str] | tuple = (),
          out_dir: str | os.PathLike | None = None, timeout: float = 300) -> Path:
    """Compile one .cu file to an executable; a second call with the same content, flags and nvcc reuses it (from any
    folder that wrote it, in any process: out_dir is a cache keyed by all three). nvcc compiles an object, keyed by
    all but the link-only flags, then links it: the same program with other link flags reuses the object."""
    nvcc = gpu.nvcc_path()
    if nvcc is None:
        raise NvccNotFound(nvcc_missing(gpu.driver_cuda_version()))
    source = Path(source)
    if not source.is_file():
        raise FileNotFoundError(f"{source} does not exist: run the %%writefile cell that writes it first")
    nvcc_flags = cmd_flags(flags, arch)
    text, beside = _texts(source)  # read once: the object and the program are keyed by the text nvcc compiles
    exe = _program(source, nvcc, nvcc_flags, out_dir, text, beside)
    out_dir = exe.parent
    if exe.is_file():
        return exe
    compile_flags = _object_flags(nvcc_flags)
    obj = _program(source, nvcc, compile_flags, out_dir, text, beside).with_suffix(".o")
    deadline = time.monotonic() + timeout
    # nvcc writes its intermediate files to TMPDIR: give it a folder of its own, removed whatever happens
    with terminate_as_interrupt(), _build_folder(out_dir, source) as work:
        if not obj.is_file():
            # nvcc compiles the very text that was hashed (a copy: the source may be rewritten meanwhile), on its bare
            # name, so __FILE__, nvcc's messages and the line information say "x.cu": the program is the same
            # wherever its source was written (see build_all); headers beside the source are still found (-I)
            try:
                (work / source.name).write_text(text)
            except OSError as e:
                raise _cannot_write(out_dir, e, source) from None
            _nvcc([nvcc, *compile_flags, f"-I{source.parent.resolve()}", "-c", "-o", obj.name, source.name], work,
                  source, out_dir, timeout)
            os.replace(work / obj.name, obj)
        # the link takes every flag (nvcc leaves the compiling ones unused): -cudart, -lcuda, -L, -Xlinker
        _nvcc([nvcc, *nvcc_flags, "-o", exe.name, str(obj)], work, source, out_dir, timeout,
              left=max(1.0, deadline - time.monotonic()))
        os.replace(work / exe.name, exe)
    return exe


def _nvcc(cmd: list, work: Path, source: Path, out_dir: Path, timeout: float, left: float | None = None) -> None:
    """Run one nvcc step in `work` (its TMPDIR too), in a process group of its own (cicc, ptxas, gcc die with it),
    for at most `left` seconds (default: the build's `timeout`, which the message names)."""
    env = {**os.environ, "TMPDIR": str(work)}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=work,
                            start_new_session=True)
    _building.add(proc)
    try:
        out, err = proc.communicate(timeout=timeout if left is None else left)
    except BaseException:  # the timeout, or an interrupt from the notebook
        _kill_group(proc)
        if isinstance(sys.exc_info()[1], subprocess.TimeoutExpired):
            raise CompileError(f"nvcc took longer than {timeout:g} s to compile {source.name} and was stopped "
                               "(with everything it started)", "", None) from None
        raise
    finally:
        _building.discard(proc)
    if proc.returncode != 0:
        raise build_error(source, (out + err).strip(), proc.returncode, out_dir)


def build_library(source: Path, out_dir) -> Path:
    """A host-only C++ file (calls.SOURCE, the call recorder) as a shared library, built once per content and nvcc."""
    nvcc = gpu.nvcc_path()
    if nvcc is None:
        raise NvccNotFound(nvcc_missing(gpu.driver_cuda_version()))
    flags = ["-shared", "-cudart", "none", "-Xcompiler", "-fPIC", "-O2", "-std=c++17"]
    digest = hashlib.sha256("\0".join([source.read_text(), *flags, nvcc_identity(nvcc)]).encode()).hexdigest()[:16]
    lib = Path(out_dir) / f"lib{source.stem}-{digest}.so"
    if lib.is_file():
        return lib
    lib.parent.mkdir(parents=True, exist_ok=True)
    tmp = lib.with_name(f"{lib.name}.{os.getpid()}.tmp")
    proc = subprocess.run([nvcc, *flags, "-o", str(tmp), str(source), "-ldl"], capture_output=True, text=True,
                          timeout=300)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise BuildFailed(f"the course's call recorder ({source.name}) could not be built with {nvcc}:\n"
                          + (proc.stdout + proc.stderr)[-2000:])
    os.replace(tmp, lib)
    return lib


def runtime_dir() -> str | None:
    """The folder of the shared CUDA runtime (libcudart.so) of the toolkit nvcc belongs to, or None."""
    nvcc = gpu.nvcc_path()
    if nvcc is None:
        return None
    tree = Path(real_nvcc(nvcc)).parent.parent
    for d in ("lib64", "lib", "targets/x86_64-linux/lib", "targets/sbsa-linux/lib"):
        if any((tree / d).glob("libcudart.so*")):
            return str(tree / d)
    return None


def cmd_flags(flags, arch) -> list[str]:
    """nvcc's flags for a program: the course's, the architecture, the course's headers, the lesson's own."""
    return [*BASE_FLAGS, *arch, f"-I{INCLUDE}", *flags]


def _texts(source: Path) -> tuple[str, list]:
    """The source's text and the headers written beside it that it includes (part of the program)."""
    text = source.read_text()
    return text, [(source.parent / h).read_text() for h in re.findall(r'^\s*#\s*include\s*"([^"]+)"', text, re.M)
                  if (source.parent / h).is_file()]


def _program(source: Path, nvcc: str, nvcc_flags: list, out_dir, text: str, beside: list) -> Path:
    """The executable build() makes of `text` (and the headers beside it): its name holds the hash of everything it
    is made of."""
    # the course's header folder by what it holds (headers_text), not by where this copy of the course is: a copy
    # unpacked elsewhere (the Colab tier's) builds the same program from the same text
    flags = ["-I<course include>" if f == f"-I{INCLUDE}" else f for f in nvcc_flags]
    digest = hashlib.sha256("\0".join([text, headers_text(), *beside, *flags, nvcc_identity(nvcc)]).encode()
                            ).hexdigest()[:16]
    return (Path(out_dir) if out_dir else source.parent / "bin") / f"{source.stem}-{digest}"


def built(source: str | os.PathLike, flags=(), arch=(), out_dir=None) -> Path | None:
    """The executable build() would reuse for these arguments, where it is already built; else None."""
    nvcc = gpu.nvcc_path()
    if nvcc is None or not Path(source).is_file():
        return None
    exe = _program(Path(source), nvcc, cmd_flags(flags, arch), out_dir, *_texts(Path(source)))
    return exe if exe.is_file() else None


@contextlib.contextmanager
def _build_folder(out_dir: Path, source: Path):
    """nvcc's own temporary folder in out_dir (made if missing), removed whatever happens; BuildFailed where it
    cannot be made."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        work = tempfile.TemporaryDirectory(prefix=f".nvcc-{source.stem}-", dir=out_dir)
    except OSError as e:
        raise _cannot_write(out_dir, e, source) from None
    with work as path:
        yield Path(path).resolve()


def build_error(source: Path, log: str, returncode: int, out_dir: Path) -> CourseError:
    """Why nvcc failed: the disk, nvcc itself crashing, or (only then) the program, which does not compile."""
    if "No space left on device" in log or "Disk quota exceeded" in log:
        return _cannot_write(out_dir, OSError(errno.ENOSPC, "No space left on device"), source)
    if "Read-only file system" in log:
        return _cannot_write(out_dir, OSError(errno.EROFS, "Read-only file system"), source)
    if returncode < 0 or _CRASH.search(log):
        try:
            how = f"was killed by signal {signal.Signals(-returncode).name}" if returncode < 0 else "crashed"
        except ValueError:
            how = f"was killed by signal {-returncode}"
        return BuildFailed(f"nvcc {how} while compiling {source.name}: the compiler failed, not the program (nothing "
                           f"is known to be wrong with it). Run the cell again; if it crashes again, reinstall the CUDA "
                           f"toolkit.\n\nnvcc said:\n{_tail(log)}")
    return compile_error(source, log)


def build_all(sources, arch=(), out_dir=None, jobs: int | None = None, done=None) -> dict:
    """Build several programs at once, `jobs` at a time (default: one per CPU core); `done(n, of)` after each.
    Returns {source: executable, or the exception its build raised}: a failure here stops nothing else."""
    sources = list(sources)
    results: dict = {}

    def one(source):
        try:
            return build(source, arch=arch, out_dir=out_dir)
        except Exception as e:  # a compile error, no nvcc, ...: the caller decides what it means
            return e

    pool = ThreadPoolExecutor(max(1, min(jobs or os.cpu_count() or 1, len(sources) or 1)))
    with terminate_as_interrupt():  # SIGTERM, SIGHUP: as an interrupt
        try:
            futures = {pool.submit(one, source): source for source in sources}
            for future in as_completed(futures):
                results[futures[future]] = future.result()
                if done:
                    done(len(results), len(sources))
        except BaseException:  # an interrupt: builds not started are dropped, running ones stopped at once
            for proc in list(_building):
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
    return results


def _kill_group(proc: subprocess.Popen) -> None:
    """Kill a process started with start_new_session=True and everything it started, and reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.communicate()


_NVCC_ERROR = re.compile(r"^(?P<file>[^\s(][^(]*?)\((?P<line>\d+)\): (?:catastrophic )?error: (?P<msg>.*)$", re.M)
_GCC_ERROR = re.compile(r"^(?P<file>[^\s:][^:]*):(?P<line>\d+):(?:\d+:)? (?:fatal )?error: (?P<msg>.*)$", re.M)


def compile_error(source: Path, log: str) -> CompileError:
    m = _NVCC_ERROR.search(log) or _GCC_ERROR.search(log)
    if m:
        location = f"{Path(m['file']).name}:{m['line']}"
        message = f"{source.name} does not compile: {location}: {m['msg'].strip()}"
    else:
        location = None
        message = f"{source.name} does not compile"
    lines = log.splitlines()
    shown = "\n".join(lines[:30]) + ("\n..." if len(lines) > 30 else "")
    return CompileError(f"{message}\n\nnvcc said:\n{shown}", log, location)


@dataclasses.dataclass
class Completed:
    args: list[str]
    stdout: str
    stderr: str
    returncode: int
    seconds: float
    killed: list = dataclasses.field(default_factory=list)  # processes it left running, killed when it ended


def program_name(exe: str | os.PathLike) -> str:
    """A built program's name without the content hash that build() appends ("race-3f2a..." is "race")."""
    return re.sub(r"-[0-9a-f]{16}$", "", Path(exe).name)


def _tail(text: str, n: int = 20) -> str:
    lines = text.strip().splitlines()
    return "\n".join(lines[-n:]) if lines else "(nothing)"


_HINTS = {  # CUDA errors a learner meets by asking too much, and what to do about them
    "cudaErrorMemoryAllocation": "The GPU ran out of memory: the program asked for more than is free on this GPU "
                                 "(another process, or this notebook's own CuPy memory, may hold some). Ask for "
                                 "smaller sizes, or restart the kernel to give back what this notebook holds.",
    "cudaErrorNotSupported": "This GPU or driver does not support what the program asked for (memory pools need "
                             "CUDA 11.2 or newer and a GPU and OS that support them: notebook 00 says whether yours "
                             "does).",
}


def _hint(stderr: str) -> str:
    hints = "".join(f"\n{text}" for err, text in _HINTS.items() if err in stderr)
    if "cudaErrorInsufficientDriver" in stderr or "CUDA driver version is insufficient" in stderr:
        hints += "\n" + driver_hint()
    elif "cudaErrorNoDevice" in stderr or "no CUDA-capable device" in stderr:
        hints += "\nNo GPU found: the program needs a CUDA GPU, and CUDA sees none on this machine."
    return hints


def driver_present() -> bool:
    """Whether this machine has an NVIDIA driver at all (its device files, its /proc entry or nvidia-smi)."""
    return (os.path.exists("/dev/nvidiactl") or os.path.exists("/proc/driver/nvidia/version")
            or shutil.which("nvidia-smi") is not None)


def driver_hint(toolkit: str | None = None, driver_cuda: str | None = None) -> str:
    """What cudaErrorInsufficientDriver means here: no GPU at all, or a toolkit newer than the driver."""
    if not driver_present():
        return ("No GPU found: this machine has no NVIDIA driver, so no CUDA program can run here "
                "(CUDA reports that as 'CUDA driver version is insufficient'). Use a machine or a Colab runtime "
                "with a GPU; without one the course replays its recordings.")
    return gpu.insufficient_driver_hint(toolkit or gpu.nvcc_version(), driver_cuda or gpu.driver_cuda_version())


LAUNCHER = Path(__file__).parent / "launcher.py"
STOP_GRACE = 3.0  # s: how long the launcher has to end everything at a timeout before its whole group is killed


def left_running(killed: list) -> str:
    """The processes a program left running, in words ('' for none)."""
    return f"{len(killed)} process(es) it started still ran, and were killed: {'; '.join(killed)}" if killed else ""


def _launched(argv: list, cwd, env):
    """The program started under the course's launcher (launcher.py), in a process group of its own; the pipe on
    which the launcher reports (after the program: read it once stdout and stderr are closed), as a file; and what to
    write on the launcher's stdin: the program's environment. The launcher itself runs with an empty one, so that
    nothing of the program's (the call record's key: calls.Channel) shows in its /proc/<pid>/environ, which the
    program could read."""
    mine, theirs = os.pipe()
    try:
        proc = subprocess.Popen([sys.executable, "-I", "-S", str(LAUNCHER), str(theirs), *argv], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd, env={},
                                start_new_session=True, pass_fds=(theirs,))
    except BaseException:
        os.close(mine)
        raise
    finally:
        os.close(theirs)
    return proc, os.fdopen(mine, "rb"), json.dumps(dict(os.environ if env is None else env))


def _said(report) -> dict:
    """What the launcher reported ({} where it was killed before it could)."""
    try:
        return json.loads(report.read() or b"{}")
    except ValueError:
        return {}


def _stop(proc: subprocess.Popen) -> tuple[str, str]:
    """Stop a launched program: the launcher kills it and everything it started (its whole group is killed if the
    launcher has not ended in time). What the program printed."""
    try:
        proc.send_signal(signal.SIGTERM)
        return proc.communicate(timeout=STOP_GRACE)
    except subprocess.TimeoutExpired:
        pass
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    for last in (False, True):
        try:
            return proc.communicate(timeout=STOP_GRACE)
        except subprocess.TimeoutExpired:  # a process outside the group, unseen by the launcher, holds the output
            if last:  # nothing more can be done: what was read is lost with the pipes, closed so that none waits on them
                for f in (proc.stdout, proc.stderr):
                    if f is not None:
                        f.close()
                proc.wait()
                return "", ""
            _kill_holders(proc)


def _kill_holders(proc: subprocess.Popen) -> None:
    """Kill every other process that holds the write end of `proc`'s stdout or stderr pipe (found in /proc: the fds
    of each process, or of its threads where its main thread has ended): the last resort, where a process escaped
    both the launcher and the process group, so that the caller is never left waiting on output nobody will close."""
    pipes = {f"pipe:[{os.fstat(f.fileno()).st_ino}]" for f in (proc.stdout, proc.stderr) if f is not None and not f.closed}
    for pid in filter(str.isdigit, os.listdir("/proc") if os.path.isdir("/proc") else ()):
        if int(pid) != os.getpid() and pipes & _written_pipes(pid):
            with contextlib.suppress(OSError):
                os.kill(int(pid), signal.SIGKILL)


def _written_pipes(pid: str) -> set:
    """The pipes ("pipe:[inode]") a process holds open for writing (O_WRONLY or O_RDWR), read through its threads:
    /proc/<pid>/fd is empty where its main thread has ended and others run on."""
    found = set()
    with contextlib.suppress(OSError):
        for where in (f"/proc/{pid}/task/{t}" for t in os.listdir(f"/proc/{pid}/task")):
            with contextlib.suppress(OSError):
                for fd in os.listdir(f"{where}/fd"):
                    with contextlib.suppress(OSError, ValueError, IndexError):
                        link = os.readlink(f"{where}/fd/{fd}")
                        if link.startswith("pipe:"):
                            with open(f"{where}/fdinfo/{fd}") as info:
                                flags = info.read().split("flags:", 1)[1].split()[0]
                            if int(flags, 8) & 3:  # O_ACCMODE: 1 O_WRONLY, 2 O_RDWR
                                found.add(link)
            if found:
                break
    return found


def run(exe: str | os.PathLike, args: list | tuple = (), timeout: float = 120, cwd=None,
        name: str | None = None, env: dict | None = None) -> Completed:
    """Run a program with a list of arguments; raise if it crashes, exits non-zero or runs past the timeout.

    It runs under the course's launcher (launcher.py): when it ends, or at the timeout, every process it started is
    killed, its process group and any that left it (setsid) alike, so that the call returns within its timeout; the
    Completed's `killed` (or the error's message) names those it left running. `name` is what the messages call it
    (by default the built program's name, without its content hash).
    """
    if isinstance(args, (str, bytes)):
        raise TypeError("pass the program's arguments as a list, not as one string")
    argv = [str(exe), *map(str, args)]
    name = name or program_name(exe)
    start = time.perf_counter()
    proc, report, environment = _launched(argv, cwd, env)
    with report:
        try:
            stdout, stderr = proc.communicate(environment, timeout=timeout)
        except KeyboardInterrupt:  # the notebook was interrupted: the program goes too
            _stop(proc)
            raise
        except subprocess.TimeoutExpired:
            stdout, stderr = _stop(proc)
            left = left_running(_said(report).get("killed", []))
            raise ProgramTimedOut(
                f"{name} ran longer than its {timeout:g} s timeout and was killed; it may be hung "
                f"(waiting on a stream or event that never completes, or in an endless loop)."
                f"{' ' + left + '.' if left else ''}\nIts last output:\n{_tail(stdout + stderr)}", stdout, stderr
            ) from None
        said = _said(report)
    if "errno" in said:  # as subprocess says that a program cannot be started
        raise OSError(said["errno"], os.strerror(said["errno"]), argv[0])
    seconds = time.perf_counter() - start
    killed = said.get("killed", [])
    if proc.returncode != 0:
        if proc.returncode < 0:
            try:
                how = f"was killed by signal {signal.Signals(-proc.returncode).name}"
            except ValueError:
                how = f"was killed by signal {-proc.returncode}"
            how += " (it crashed)"
        else:
            how = f"exited with status {proc.returncode}"
        left = f" ({left_running(killed)})" if killed else ""
        raise ProgramFailed(f"{name} {how}{left}.{_hint(stderr)}\nIts stderr:\n{_tail(stderr)}", proc.returncode,
                            stdout, stderr, killed)
    return Completed(argv[1:], stdout, stderr, proc.returncode, seconds, killed)
