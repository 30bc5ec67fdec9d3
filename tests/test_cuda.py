"""Building and running programs, and every way that can go wrong, with host-only programs nvcc builds here."""
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from streamalloc import cuda, gpu, launcher
from streamalloc.errors import BuildFailed, CompileError, NvccNotFound, ProgramFailed, ProgramTimedOut

needs_nvcc = pytest.mark.skipif(gpu.nvcc_path() is None, reason="nvcc is not installed")


def program(tmp_path, name, body):
    src = tmp_path / f"{name}.cu"
    src.write_text('#include "course.cuh"\n#include <cstdio>\n#include <cstdlib>\n#include <unistd.h>\n' + body)
    return src


# one host program for the tests of running one: what it does is its first argument (one nvcc build, not five)
BEHAVIOURS = r"""#include <cstring>
int main(int c, char **v) {
    const char *how = c > 1 ? v[1] : "";
    if (!std::strcmp(how, "echo")) {
        for (int i = 2; i < c; ++i) std::printf("{\"arg\":\"%s\"}\n", v[i]);
        return 0;
    }
    if (!std::strcmp(how, "crash")) { std::fprintf(stderr, "about to fail\n"); abort(); }
    if (!std::strcmp(how, "fails")) { std::fprintf(stderr, "x.cu:3: cudaMalloc failed\n"); return 3; }
    if (!std::strcmp(how, "oom")) {
        std::fprintf(stderr, "oom.cu:4: cudaMallocAsync(&p, n, s) failed: out of memory (cudaErrorMemoryAllocation)\n");
        return 1;
    }
    if (!std::strcmp(how, "hang")) { std::printf("started\n"); std::fflush(stdout); for (;;) sleep(1); }
    std::fprintf(stderr, "no such behaviour: %s\n", how);
    return 2;
}
"""


@pytest.fixture(scope="module")
def behaves(tmp_path_factory):
    """The program, built by nvcc here, once for this file's tests."""
    return cuda.build(program(tmp_path_factory.mktemp("behaves"), "behaves", BEHAVIOURS))


@needs_nvcc
def test_a_good_program_runs_and_its_arguments_arrive_as_a_list(behaves):
    done = cuda.run(behaves, ["echo", "a b", "$HOME", ";ls"])
    assert done.stdout.splitlines() == ['{"arg":"a b"}', '{"arg":"$HOME"}', '{"arg":";ls"}']
    with pytest.raises(TypeError, match="list"):
        cuda.run(behaves, "echo a b")


@needs_nvcc
def test_builds_are_cached_by_content_and_flags(tmp_path):
    src = program(tmp_path, "cached", "int main() { return 0; }")
    first = cuda.build(src)
    mtime = first.stat().st_mtime_ns
    assert cuda.build(src) == first and first.stat().st_mtime_ns == mtime
    assert cuda.build(src, flags=["-DX=1"]) != first
    src.write_text(src.read_text() + "\n// changed\n")
    assert cuda.build(src) != first


@needs_nvcc
def test_a_compile_error_names_file_and_line(tmp_path):
    src = program(tmp_path, "broken", "int main() {\n  int x = undefined_name;\n  return x;\n}\n")
    with pytest.raises(CompileError) as e:
        cuda.build(src)
    assert e.value.location == "broken.cu:6"
    assert "broken.cu:6" in str(e.value) and "undefined_name" in str(e.value)


@needs_nvcc
def test_a_crash_raises_with_the_signal_and_stderr(behaves):
    with pytest.raises(ProgramFailed) as e:
        cuda.run(behaves, ["crash"])
    assert "SIGABRT" in str(e.value) and "about to fail" in str(e.value)


@needs_nvcc
def test_a_non_zero_exit_raises_with_stderr(behaves):
    with pytest.raises(ProgramFailed) as e:
        cuda.run(behaves, ["fails"])
    assert e.value.returncode == 3 and "status 3" in str(e.value) and "cudaMalloc failed" in str(e.value)


@needs_nvcc
def test_running_out_of_gpu_memory_says_so_in_words(behaves):
    with pytest.raises(ProgramFailed) as e:
        cuda.run(behaves, ["oom"])
    assert "ran out of memory" in str(e.value) and "smaller sizes" in str(e.value)
    assert "cudaErrorMemoryAllocation" in str(e.value)


@needs_nvcc
def test_a_hang_is_killed_at_the_timeout(behaves):
    t0 = time.perf_counter()
    with pytest.raises(ProgramTimedOut) as e:
        cuda.run(behaves, ["hang"], timeout=1.5)
    assert time.perf_counter() - t0 < 10
    assert "1.5 s timeout" in str(e.value) and "started" in str(e.value)


def test_no_nvcc_says_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu, "nvcc_path", lambda: None)
    with pytest.raises(NvccNotFound, match="nvcc, the CUDA compiler, was not found.*cuda-nvcc"):
        cuda.build(program(tmp_path, "any", "int main() { return 0; }"))


def test_arch_flags():
    assert cuda.arch_flags("9.0", live=True) == ["-arch=native"]
    assert cuda.arch_flags("7.5", live=False) == ["-arch=sm_75"]
    assert cuda.arch_flags(None, live=False) == []


def fake_nvcc(tmp_path, monkeypatch, body):
    """A stand-in for nvcc (a shell script) so that its failures can be made on purpose."""
    nvcc = tmp_path / "fake-nvcc"
    nvcc.write_text("#!/bin/sh\n" + body)
    nvcc.chmod(0o755)
    monkeypatch.setattr(gpu, "nvcc_path", lambda: str(nvcc))
    return nvcc


def test_a_hung_nvcc_is_killed_with_everything_it_started_and_leaves_no_file(tmp_path, monkeypatch):
    # like nvcc, it starts a child (cicc, ptxas) and writes temporaries to $TMPDIR and to the -o file
    fake_nvcc(tmp_path, monkeypatch, f'touch "$TMPDIR/cicc.tmp"\nfor a; do out=$last; last=$a; done\n'
                                     f'touch "$out"\nsleep 600 &\necho $! > {tmp_path}/child.pid\nwait\n')
    src = program(tmp_path, "slow", "int main() { return 0; }")
    t0 = time.perf_counter()
    with pytest.raises(CompileError, match="longer than 1 s.*stopped"):
        cuda.build(src, timeout=1)
    assert time.perf_counter() - t0 < 30
    child = int((tmp_path / "child.pid").read_text())
    time.sleep(0.2)
    state = Path(f"/proc/{child}/stat")
    assert not state.exists() or state.read_text().split()[2] == "Z", "nvcc's child is still running"
    assert list((tmp_path / "bin").iterdir()) == []  # no temporary, no half-written program


def test_a_failed_compile_leaves_no_file(tmp_path, monkeypatch):
    fake_nvcc(tmp_path, monkeypatch, 'touch "$TMPDIR/cicc.tmp"\nfor a; do out=$last; last=$a; done\ntouch "$out"\n'
                                     'echo "x.cu(3): error: identifier \\"y\\" is undefined" >&2\nexit 1\n')
    with pytest.raises(CompileError, match="x.cu:3"):
        cuda.build(program(tmp_path, "x", "int main() { return y; }"))
    assert list((tmp_path / "bin").iterdir()) == []


def test_a_good_compile_keeps_only_the_program_and_its_object(tmp_path, monkeypatch):
    fake_nvcc(tmp_path, monkeypatch, 'touch "$TMPDIR/cicc.tmp"\nfor a; do out=$last; last=$a; done\n'
                                     'printf "#!/bin/sh\\necho ok\\n" > "$out"; chmod +x "$out"\n'
                                     'echo "$@" >> "$NVCC_LOG"\n')
    monkeypatch.setenv("NVCC_LOG", str(tmp_path / "nvcc.log"))
    exe = cuda.build(program(tmp_path, "good", "int main() { return 0; }"))
    objects = list((tmp_path / "bin").glob("good-*.o"))
    assert sorted((tmp_path / "bin").iterdir()) == sorted([exe, *objects]) and len(objects) == 1
    assert cuda.run(exe).stdout == "ok\n"
    obj = objects[0]
    # the same program for the call recorder (-cudart shared): linked from the same object, not compiled again
    shared = cuda.build(tmp_path / "good.cu", flags=["-cudart", "shared"])
    steps = (tmp_path / "nvcc.log").read_text().splitlines()
    assert shared != exe and len(steps) == 3 and sum(" -c " in f" {s} " for s in steps) == 1, steps
    assert "-cudart shared" in steps[2] and steps[2].endswith(obj.name)
    # a link-only flag reaches the link (it was dropped at first: -lcuda programs failed "to compile")
    cuda.build(tmp_path / "good.cu", flags=["-lcuda"])
    cuda.build(tmp_path / "good.cu", flags=["-cudart=shared"])
    steps = (tmp_path / "nvcc.log").read_text().splitlines()
    assert " -c " in f" {steps[3]} " and "-lcuda" in steps[4].split() and steps[5].endswith(obj.name)
    assert "-cudart=shared" in steps[5].split() and len(steps) == 6  # the -cudart=shared build reused the object


INSUFFICIENT = ("first_pool.cu:12: cudaMallocAsync(&p, n, s) failed: CUDA driver version is insufficient for CUDA "
                "runtime version (cudaErrorInsufficientDriver)\n")


def test_a_toolkit_newer_than_the_driver_names_both_and_what_to_do(monkeypatch):
    monkeypatch.setattr(cuda, "driver_present", lambda: True)
    monkeypatch.setattr(gpu, "nvcc_version", lambda: "13.0")
    monkeypatch.setattr(gpu, "driver_cuda_version", lambda: "12.8")  # CuPy, nvidia-smi or libcuda says
    hint = cuda._hint(INSUFFICIENT)
    assert "nvcc 13.0" in hint and "supports CUDA 12.8" in hint
    assert "cuda-nvcc" in hint and "cuda-version=12.8" in hint and "no newer than" in hint


def test_no_driver_at_all_says_no_gpu_found(monkeypatch):
    monkeypatch.setattr(cuda, "driver_present", lambda: False)
    hint = cuda._hint(INSUFFICIENT)
    assert hint.strip().startswith("No GPU found") and "toolkit" not in hint


def test_nvidia_smi_header_gives_the_drivers_cuda(tmp_path, monkeypatch):
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho '| NVIDIA-SMI 550.54.15   Driver Version: 550.54.15   CUDA Version: 12.4     |'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    assert gpu._smi_cuda_version() == "12.4" and cuda.driver_present()


def test_streamalloc_arch_overrides_the_architecture(monkeypatch):
    monkeypatch.setenv("STREAMALLOC_ARCH", "compute_75")
    assert cuda.arch_flags("9.0", live=True) == ["-arch=compute_75"]
    assert cuda.arch_flags("9.0", live=False) == ["-arch=compute_75"]
    monkeypatch.setenv("STREAMALLOC_ARCH", "sm_75; rm -rf /")
    with pytest.raises(ValueError, match="not an nvcc architecture"):
        cuda.arch_flags("9.0", live=True)


def test_an_nvcc_that_crashes_is_named_as_such_not_as_a_compile_error(tmp_path, monkeypatch):
    fake_nvcc(tmp_path, monkeypatch, 'echo "Segmentation fault (core dumped)" >&2\nkill -SEGV $$\n')
    with pytest.raises(BuildFailed, match="nvcc was killed by signal SIGSEGV while compiling x.cu") as e:
        cuda.build(program(tmp_path, "x", "int main() { return 0; }"))
    assert "does not compile" not in str(e.value) and not isinstance(e.value, CompileError)
    fake_nvcc(tmp_path, monkeypatch, "echo \"nvcc error   : 'cicc' died due to signal 11 (Invalid memory reference)\" >&2\n"
                                     "exit 11\n")
    with pytest.raises(BuildFailed, match="nvcc crashed while compiling y.cu"):
        cuda.build(program(tmp_path, "y", "int main() { return 0; }"))


def test_a_full_disk_is_named_as_such(tmp_path, monkeypatch):
    fake_nvcc(tmp_path, monkeypatch, 'echo "x.cu: fatal error: error writing to /tmp/x.s: No space left on device" >&2\n'
                                     "exit 1\n")
    with pytest.raises(BuildFailed, match=r"cannot be written to .*\(the disk is full\)") as e:
        cuda.build(program(tmp_path, "x", "int main() { return 0; }"))
    assert "does not compile" not in str(e.value)


def test_a_read_only_build_folder_is_named_as_such(tmp_path, monkeypatch):
    import errno
    import tempfile
    fake_nvcc(tmp_path, monkeypatch, "exit 0\n")

    def read_only(*a, **kw):
        raise OSError(errno.EROFS, "Read-only file system")
    monkeypatch.setattr(tempfile, "TemporaryDirectory", read_only)
    with pytest.raises(BuildFailed, match=r"x.cu could not be built: .*cannot be written to .*bin \(it is read-only\)"):
        cuda.build(program(tmp_path, "x", "int main() { return 0; }"))


def test_sigterm_during_a_build_stops_nvcc_and_removes_its_folder(tmp_path):
    """SIGTERM (as SIGHUP, a closed terminal) to a process that is building does what SIGINT does: nvcc's process
    group is killed and its temporary folder removed; then the process ends as SIGTERM ends it."""
    import os
    import signal
    import subprocess
    import sys
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir()
    (bin_dir / "nvcc").write_text(f'#!/bin/sh\ntouch "$TMPDIR/cicc.tmp"\nsleep 600 &\necho $! > {tmp_path}/child.pid\n'
                                  'wait\n')
    (bin_dir / "nvcc").chmod(0o755)
    src = program(tmp_path, "slow", "int main() { return 0; }")
    script = (f"import sys\nsys.path.insert(0, {str(Path(cuda.__file__).parent.parent)!r})\nfrom streamalloc import cuda\n"
              f"cuda.build_all([{str(src)!r}, {str(src)!r}], out_dir={str(tmp_path / 'bin')!r})\n")
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        (tmp_path / "child.pid").unlink(missing_ok=True)
        proc = subprocess.Popen([sys.executable, "-c", script], env=env)
        for _ in range(300):
            if (tmp_path / "child.pid").is_file() and (tmp_path / "child.pid").read_text().strip():
                break
            time.sleep(0.1)
        time.sleep(0.2)
        proc.send_signal(sig)
        assert proc.wait(timeout=30) == -sig
        child = int((tmp_path / "child.pid").read_text())
        time.sleep(0.2)
        state = Path(f"/proc/{child}/stat")
        assert not state.exists() or state.read_text().split()[2] == "Z", "nvcc's child is still running"
        assert list((tmp_path / "bin").iterdir()) == [], "nvcc's temporary folder is left"


def test_a_copy_of_the_course_elsewhere_builds_the_same_program_but_not_from_another_header(tmp_path, monkeypatch):
    """The key holds the course header's text, not its folder: the Colab tier's unpacked copy finds make test's
    programs (build/cuda/bin); a changed header is another program."""
    import shutil
    src = program(tmp_path, "p", "int main() { return 0; }")
    key = lambda: cuda._program(src, "nvcc", [*cuda.BASE_FLAGS, f"-I{cuda.INCLUDE}"], tmp_path / "bin",  # noqa: E731
                                *cuda._texts(src))
    here = key()
    copy = tmp_path / "elsewhere" / "include"
    shutil.copytree(cuda.INCLUDE, copy)
    monkeypatch.setattr(cuda, "INCLUDE", copy)
    assert key() == here
    (copy / "course.cuh").write_text((copy / "course.cuh").read_text() + "// changed\n")
    assert key() != here


# -- every process a program starts ends with it (streamalloc/launcher.py): Python programs, no GPU or nvcc needed ---
DAEMON = """\
import os, sys, time
child = os.fork()
if child == 0:  # a daemon: its own session, out of the program's process group, holding the program's stdout
    os.setsid()
    if os.fork() == 0:
        time.sleep(600)
    os._exit(0)
if sys.argv[1] != "race":  # as a daemon is made: the program waits for the middle process, which has left the daemon
    os.waitpid(child, 0)
print('{"started": true}', flush=True)
if sys.argv[1] == "hang":
    time.sleep(600)
"""


@pytest.fixture
def daemon(tmp_path):
    path = tmp_path / "daemon.py"
    path.write_text(DAEMON)
    return path


def alive(pid: int) -> bool:
    """A process that exists and is not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def left_pid(text: str) -> int:
    """The pid of the first process a message or a Completed names ("pid N: its command")."""
    return int(text.split("pid ", 1)[1].split(":", 1)[0])


def test_a_setsid_child_holding_stdout_is_killed_and_named_when_the_program_ends(daemon):
    t0 = time.perf_counter()
    done = cuda.run(sys.executable, [daemon, "exit"], timeout=20, name="daemon.py")
    assert time.perf_counter() - t0 < 5  # it returned when the program ended, not when the daemon would have
    assert done.stdout == '{"started": true}\n' and len(done.killed) == 1 and "daemon.py exit" in done.killed[0]
    assert not alive(left_pid(done.killed[0]))


def test_a_process_left_running_is_named_by_its_program_and_arguments_however_deep_its_folder(tmp_path):
    """CI's checkout and pytest's folders made the command line longer than the cut, which then fell inside the
    arguments ("daemon.py exi"): a long path is named by its file, so the program and its arguments stay whole."""
    deep = tmp_path.joinpath(*["a-folder-with-a-long-name"] * 8)
    deep.mkdir(parents=True)
    script = deep / "daemon.py"
    script.write_text("import time; time.sleep(30)")
    proc = subprocess.Popen([sys.executable, str(script), "exit", "--flag"])
    try:
        for _ in range(100):  # until the child has exec'd (its command line is the script's)
            if b"daemon.py" in cmdline(str(proc.pid)):
                break
            time.sleep(0.02)
        name = launcher.command(proc.pid)
    finally:
        proc.kill()
        proc.wait()
    assert name.startswith(f"pid {proc.pid}: ") and name.endswith(" daemon.py exit --flag"), name
    assert launcher.command(proc.pid) == ""  # an ended process is not named


def test_a_daemon_still_being_made_when_the_program_ends_is_killed_too(daemon):
    """The program ends while its child may still be forking the daemon and exiting: the launcher looks again after
    each death it sees (a child made after it listed /proc would be missed), so that no run leaves the daemon holding
    the output. Under load this raced: 2 of 60 runs waited for their timeout (one of them for ever) before the fix."""
    for _ in range(20):
        t0 = time.perf_counter()
        done = cuda.run(sys.executable, [daemon, "race"], timeout=20, name="daemon.py")
        assert time.perf_counter() - t0 < 5 and done.stdout == '{"started": true}\n'
        assert 1 <= len(done.killed) <= 2 and all("daemon.py race" in k for k in done.killed)
        assert not any(alive(left_pid(k)) for k in done.killed)
    assert not [pid for pid in filter(str.isdigit, os.listdir("/proc")) if str(daemon).encode() in cmdline(pid)]


THREADED = """\
import ctypes, os, sys, threading, time
if os.fork() == 0:  # a daemon whose main thread ends while another of its threads runs on, holding stdout
    os.setsid()
    threading.Thread(target=time.sleep, args=(600,)).start()
    ctypes.CDLL(None).pthread_exit(None)
time.sleep(0.5)  # the daemon's main thread has ended: /proc shows it as a zombie
print('{"started": true}', flush=True)
"""


def test_a_daemon_whose_main_thread_ended_is_killed_too(tmp_path):
    """/proc shows such a process as a zombie, but its other threads run and hold the output: the launcher kills it
    as it kills the living (before, it waited for a zombie nobody could reap, then returned with a raw TimeoutExpired
    after its caller's timeout, the daemon left running)."""
    path = tmp_path / "threaded.py"
    path.write_text(THREADED)
    t0 = time.perf_counter()
    done = cuda.run(sys.executable, [path], timeout=20, name="threaded.py")
    assert time.perf_counter() - t0 < 10 and done.stdout == '{"started": true}\n'
    time.sleep(0.5)
    assert not [pid for pid in filter(str.isdigit, os.listdir("/proc")) if str(path).encode() in cmdline(pid)]


def test_the_last_resort_kills_whatever_holds_the_output(daemon):
    """Where a process escaped the launcher and the process group (not seen since the fix above, kept as the caller's
    guarantee), the caller kills whoever holds the write end of its pipes instead of waiting for them for ever."""
    import subprocess
    proc = subprocess.Popen([sys.executable, daemon, "exit"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline() == b'{"started": true}\n' and proc.wait(timeout=20) == 0
    with pytest.raises(subprocess.TimeoutExpired):  # the daemon holds stdout open
        proc.communicate(timeout=0.5)
    cuda._kill_holders(proc)
    assert proc.communicate(timeout=5) == (b"", b"")
    assert not [pid for pid in filter(str.isdigit, os.listdir("/proc")) if str(daemon).encode() in cmdline(pid)]


def cmdline(pid: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def test_a_timeout_returns_in_time_raises_the_course_error_and_names_the_child_it_killed(daemon):
    t0 = time.perf_counter()
    with pytest.raises(ProgramTimedOut) as e:
        cuda.run(sys.executable, [daemon, "hang"], timeout=1.5, name="daemon.py")
    assert time.perf_counter() - t0 < 1.5 + 2
    assert "daemon.py ran longer than its 1.5 s timeout" in str(e.value) and '{"started": true}' in str(e.value)
    assert "1 process(es) it started still ran, and were killed: pid " in str(e.value)
    assert not alive(left_pid(str(e.value)))


def test_a_program_that_leaves_nothing_behind_runs_as_before(tmp_path):
    path = tmp_path / "plain.py"
    path.write_text("import sys\nprint(sys.argv[1:])\nsys.stderr.write('note\\n')\n")
    done = cuda.run(sys.executable, [path, "a b", "$HOME"], timeout=20)
    assert (done.stdout, done.stderr, done.returncode, done.killed) == ("['a b', '$HOME']\n", "note\n", 0, [])
    path.write_text("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n")
    with pytest.raises(ProgramFailed, match="killed by signal SIGSEGV"):
        cuda.run(sys.executable, [path], timeout=20)
    path.write_text("raise SystemExit(3)\n")
    with pytest.raises(ProgramFailed, match="exited with status 3"):
        cuda.run(sys.executable, [path], timeout=20)
    with pytest.raises(FileNotFoundError):
        cuda.run(tmp_path / "no-such-program", timeout=20)


def test_the_programs_environment_reaches_it_and_not_the_launcher(tmp_path):
    """The program's environment (the call record's key, the recorder's LD_PRELOAD) is the program's alone: the
    launcher above it, whose /proc/<pid>/environ the program could read, runs with an empty one; stdin is /dev/null."""
    path = tmp_path / "env.py"
    path.write_text("import os, sys\nlauncher = open(f'/proc/{os.getppid()}/environ', 'rb').read()\n"
                    "print(os.environ.get('SECRET'), os.environ.get('LD_PRELOAD'), b'SECRET' in launcher, "
                    "b'LD_PRELOAD' in launcher, repr(sys.stdin.read()))\n")
    done = cuda.run(sys.executable, [path], timeout=20,
                    env={**os.environ, "SECRET": "k3y", "LD_PRELOAD": "libnothing-here.so"})
    assert done.stdout.split() == ["k3y", "libnothing-here.so", "False", "False", "''"], done
