"""Compile every .cu the course writes, for sm_75 (a T4) and the recorded GPU's architecture, with each toolkit.

The sources are the `%%writefile {lesson.build}/X.cu` cells of notebooks/, solutions/ and labs/ (each program
#includes the shared header, streamalloc/include/course.cuh). A lab's file that differs from its solution's
is a stub the learner completes: it is not compiled (labs/ is checked as generated from solutions/ by
tests/test_generated.py), and the table says so. A file whose run cell is tagged raises-exception with
expected_exception CompileError (or none named) must fail to compile with nvcc's error, and does.

Toolkits (--toolkit, repeatable; default both):
  cuda13      the nvcc the course finds (gpu.nvcc_path()), with its own headers: must be CUDA 13.
  cuda12.0h   Debian's CUDA 12.4 nvcc (nvidia-cuda-toolkit, trixie non-free, from the Debian archive this machine's
              apt already uses, with the non-free component added: `debian_source`; unpacked with dpkg-deb -x,
              nothing installed) with the CUDA 12.0 runtime headers first on the include path and linked against the
              CUDA 12.0 libcudart (nvidia-cuda-runtime-cu12==12.0.* wheel), the 12.4 compiler's own crt/ headers
              after them (nvidia-cuda-nvcc-cu12==12.4.131 wheel): an API newer than CUDA 12.0 fails here.
              Fetched once into build/toolchains/ (--fetch does only that).

Builds run two at a time; a result is cached by content (source, header, toolkit, flags) in build/compile-matrix/.
A source's architectures build in one nvcc call (each one's device code, the host code once; on a failure, each
alone, to say which); with cuda13, a program the course's own build already made for an architecture (make test and
make colab-test build every program for the recorded GPU into build/cuda/bin) is that build, not built again.

    python tools/compile_matrix.py [--toolkit cuda13] [--toolkit cuda12.0h] [--jobs 2] [--fetch]
"""
from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from streamalloc import cuda, gpu, replay  # noqa: E402
from streamalloc.errors import BuildFailed, CompileError  # noqa: E402
from streamalloc.course import programs_folder, written_files  # noqa: E402

BUILD = ROOT / "build" / "compile-matrix"
TOOLCHAINS = ROOT / "build" / "toolchains"
CUDA12 = TOOLCHAINS / "cuda-12.4-headers-12.0"
APT = Path("/etc/apt")
DEBIAN_SUITE = "trixie"  # the release whose non-free component holds DEBIAN_PACKAGE
DEBIAN_PACKAGE = "nvidia-cuda-toolkit=12.4.131~12.4.1-2"
WHEELS = ["nvidia-cuda-runtime-cu12==12.0.146", "nvidia-cuda-nvcc-cu12==12.4.131"]


# -- the sources ---------------------------------------------------------------------------------------------
def sources(root: Path = ROOT) -> list[dict]:
    """Every .cu cell: {where, name, text, expect ('compile' | 'fail' | 'stub'), why}."""
    found, solutions = [], {}
    for folder in ("notebooks", "solutions", "labs"):
        for nb in sorted((root / folder).glob("*.ipynb")):
            cells = json.loads(nb.read_text())["cells"]
            for i, name, text in written_files(nb):
                if not name.endswith(".cu"):
                    continue
                entry = {"where": f"{folder}/{nb.name}", "name": name, "text": text, "expect": "compile", "why": ""}
                if _expects_compile_error(cells[i + 1:], name):
                    entry.update(expect="fail", why="its run cell expects a CompileError")
                if folder == "solutions":
                    solutions[(nb.name, name)] = entry["text"]
                if folder == "labs" and solutions.get((nb.name, name)) != entry["text"]:
                    entry.update(expect="stub", why="a lab stub the learner completes (labs/ is checked as "
                                                    "generated from solutions/, whose file compiles)")
                found.append(entry)
    return found


def _expects_compile_error(later_cells, name: str) -> bool:
    for cell in later_cells:
        src = "".join(cell["source"])
        if cell["cell_type"] == "code" and name in src and not src.startswith("%%writefile"):
            meta = cell.get("metadata", {})
            return ("raises-exception" in meta.get("tags", [])
                    and meta.get("expected_exception", "CompileError") == "CompileError")
    return False


def recorded_archs(root: Path = ROOT) -> list[str]:
    """sm_75 (a T4, Colab's usual GPU) and every recorded GPU's architecture."""
    archs = {"sm_75"}
    for machine in (root / "recordings").glob("*/machine.json"):
        cc = replay.read_json(machine, "machine description").get("compute_capability")
        if cc:
            archs.add("sm_" + cc.replace(".", ""))
    return sorted(archs)


# -- the toolkits --------------------------------------------------------------------------------------------
def _entries(apt: Path):
    """(types, URIs, suites, components, signed-by) of each source this machine's apt has: deb822 (*.sources) and
    one-line (sources.list, *.list) entries."""
    for f in sorted((apt / "sources.list.d").glob("*.sources")):
        for stanza in re.split(r"\n\s*\n", f.read_text()):
            fields = {}
            for line in stanza.splitlines():
                if line.strip() and not line.startswith(("#", " ", "\t")) and ":" in line:
                    k, _, v = line.partition(":")
                    fields[k.strip().lower()] = v.split()
            if fields.get("enabled", ["yes"])[0].lower() != "no":
                yield (fields.get("types", []), fields.get("uris", []), fields.get("suites", []),
                       fields.get("components", []), " ".join(fields.get("signed-by", [])))
    for f in [apt / "sources.list", *sorted((apt / "sources.list.d").glob("*.list"))]:
        for line in f.read_text().splitlines() if f.is_file() else []:
            m = re.match(r"^\s*(deb(?:-src)?)\s+(?:\[(?P<opts>[^]]*)\]\s+)?(\S+)\s+(\S+)\s*(.*)$", line)
            if m:
                signed = re.search(r"signed-by=(\S+)", m["opts"] or "")
                yield [m[1]], [m[3]], [m[4]], m[5].split(), signed[1] if signed else ""


def debian_source(apt: Path = APT) -> str:
    """The apt source line for DEBIAN_PACKAGE: this machine's own Debian archive entry (its address and key, as its
    apt has them: no address is written in the course), with the non-free component added, for DEBIAN_SUITE."""
    for types, uris, suites, components, signed in _entries(apt):
        release = [s for s in suites if not s.endswith(("-security", "-updates", "-backports"))]
        if "deb" in types and uris and release and "main" in components and not uris[0].rstrip("/").endswith("-security"):
            opts = f"[signed-by={signed}] " if signed else ""
            return f"deb {opts}{uris[0]} {DEBIAN_SUITE} {' '.join(dict.fromkeys([*components, 'non-free']))}"
    raise SystemExit(f"compile_matrix: this machine's apt ({apt}) has no Debian archive entry (a deb line or a "
                     "deb822 stanza with the main component) to add the non-free component to: the CUDA 12.4 nvcc "
                     "comes from Debian's non-free, so cuda12.0h needs a Debian machine")


def _run(cmd, **kw):
    done = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if done.returncode != 0:
        raise SystemExit(f"compile_matrix: `{' '.join(map(str, cmd))}` failed:\n{(done.stdout + done.stderr).strip()}")
    return done.stdout


def fetch_cuda12(dest: Path = CUDA12) -> Path:
    """Unpack Debian's CUDA 12.4 nvcc and the CUDA 12.0 runtime headers into dest, once (nothing is installed)."""
    source = debian_source()
    recipe = "\n".join([source, DEBIAN_PACKAGE, *WHEELS])
    stamp = dest / ".complete"
    if stamp.is_file() and stamp.read_text() == recipe:
        return dest
    shutil.rmtree(dest, ignore_errors=True)
    work = Path(tempfile.mkdtemp(prefix="cuda12-", dir=dest.parent if dest.parent.exists() else None))
    try:
        apt = work / "apt"
        for d in ("lists/partial", "cache/archives/partial"):
            (apt / d).mkdir(parents=True)
        (apt / "sources.list").write_text(source + "\n")
        opts = [f"-oDir::Etc::SourceList={apt}/sources.list", "-oDir::Etc::SourceParts=/dev/null",
                f"-oDir::State::Lists={apt}/lists", f"-oDir::Cache={apt}/cache", "-oDebug::NoLocking=1",
                "-oAPT::Sandbox::User=root", "-oAcquire::Languages=none"]
        _run(["apt-get", *opts, "update"])
        _run(["apt-get", *opts, "download", DEBIAN_PACKAGE], cwd=work)
        unpacked = work / "root"
        for deb in work.glob("*.deb"):
            _run(["dpkg-deb", "-x", str(deb), str(unpacked)])
        _run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(work / "wheels"), *WHEELS])
        for wheel in (work / "wheels").glob("*.whl"):
            zipfile.ZipFile(wheel).extractall(work / "wheels")
        bin_dir = unpacked / "usr/lib/nvidia-cuda-toolkit/bin"
        (bin_dir / "nvcc.profile").unlink()  # Debian's is a link to /etc/nvcc.profile, absolute paths
        (bin_dir / "nvcc.profile").write_text(
            "TOP = $(_HERE_)/..\nNVVMIR_LIBRARY_DIR = $(TOP)/libdevice\nPATH += $(_HERE_):$(TOP)/../../bin:\n")
        lib = work / "wheels/nvidia/cuda_runtime/lib"
        (lib / "libcudart.so").symlink_to("libcudart.so.12")
        for used in [apt, *work.glob("*.deb"), *(work / "wheels").glob("*.whl")]:  # keep only the unpacked trees
            shutil.rmtree(used) if used.is_dir() else used.unlink()
        dest.parent.mkdir(parents=True, exist_ok=True)
        work.rename(dest)
        work = None
        stamp.write_text(recipe)
        return dest
    finally:
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)


def toolkit(name: str) -> dict:
    """{name, nvcc, version, flags}: how to call it."""
    if name == "cuda13":
        nvcc = gpu.nvcc_path()
        if nvcc is None:
            raise SystemExit(f"compile_matrix: no nvcc for cuda13. {gpu.nvcc_help()}")
        version = gpu.nvcc_version()
        if not (version or "").startswith("13."):
            raise SystemExit(f"compile_matrix: cuda13 needs a CUDA 13 nvcc; {nvcc} is CUDA {version}")
        return {"name": name, "nvcc": nvcc, "version": version, "flags": [], "course": True}
    if name == "cuda12.0h":
        tree = fetch_cuda12()
        wheels = tree / "wheels/nvidia"
        return {"name": name, "nvcc": str(tree / "root/usr/lib/nvidia-cuda-toolkit/bin/nvcc"), "version": "12.4",
                "flags": [f"-I{wheels / 'cuda_runtime/include'}", f"-I{wheels / 'cuda_nvcc/include'}",
                          "-cudart", "shared", "-cudadevrt", "none", f"-L{wheels / 'cuda_runtime/lib'}"],
                "check": "#include <cuda_runtime.h>\nstatic_assert(CUDART_VERSION == 12000, \"not the 12.0 headers\");\n"}
    raise SystemExit(f"compile_matrix: unknown toolkit {name!r} (cuda13, cuda12.0h)")


# -- compiling ---------------------------------------------------------------------------------------------
def arch_flags(archs: list[str]) -> list[str]:
    """One architecture as the course builds it (-arch=sm_90: its machine code and PTX); several in one nvcc call, the
    same for each (-gencode ...,code=[sm_XX,compute_XX]): each architecture's device code compiled, the host code once."""
    if len(archs) == 1:
        return [f"-arch={archs[0]}"]
    return [f"-gencode=arch=compute_{a[3:]},code=[{a},compute_{a[3:]}]" for a in archs]


def compile_one(tk: dict, arch: str | list[str], name: str, text: str, timeout: float = 300) -> tuple[bool, str, bool]:
    """(compiled, nvcc's message, cached) for one source with one toolkit for one architecture, or for several at once.

    The course's own nvcc (cuda13) builds one architecture through the course's own build (cuda.build into
    build/cuda/bin, keyed by the text, header, flags and the nvcc program): a program make test or make colab-test
    already built for the recorded GPU is the same build, and is not built again."""
    archs = [arch] if isinstance(arch, str) else list(arch)
    flags = cuda.cmd_flags(tk["flags"], arch_flags(archs))
    key = hashlib.sha256("\0".join([text, cuda.headers_text(), tk["nvcc"], tk["version"], *flags]).encode()).hexdigest()[:20]
    cached = BUILD / "cache" / f"{key}.json"
    if cached.is_file():
        ok, log = json.loads(cached.read_text())
        return ok, log, True
    BUILD.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=BUILD) as tmp:
        src = Path(tmp) / name
        src.write_text(text)
        if tk.get("course") and len(archs) == 1 and not tk["flags"]:
            if cuda.built(src, arch=arch_flags(archs), out_dir=programs_folder()):
                return True, "", True
            try:
                cuda.build(src, arch=arch_flags(archs), out_dir=programs_folder(), timeout=timeout)
                return True, "", False  # the program is its own cache
            except CompileError as e:
                ok, log = False, e.log or str(e)
            except BuildFailed as e:
                ok, log = False, str(e)
        else:
            try:
                done = subprocess.run([tk["nvcc"], *flags, "-o", str(Path(tmp) / "a.out"), str(src)],
                                      capture_output=True, text=True, timeout=timeout)
                ok, log = done.returncode == 0, (done.stdout + done.stderr).strip()
            except subprocess.TimeoutExpired:
                ok, log = False, f"nvcc took longer than {timeout:.0f} s"
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_text(json.dumps([ok, log]))
    return ok, log, False


def compile_row(tk: dict, archs: list[str], name: str, text: str) -> dict:
    """{arch: (compiled, message, cached)} for one source with one toolkit: what the course's build already holds,
    then the other architectures in one nvcc call; where that fails, each alone, so the table says which failed."""
    results = {}
    if tk.get("course"):
        for arch in archs:
            with tempfile.TemporaryDirectory(dir=BUILD) as tmp:
                (Path(tmp) / name).write_text(text)
                if cuda.built(Path(tmp) / name, arch=arch_flags([arch]), out_dir=programs_folder()):
                    results[arch] = (True, "", True)
    rest = [a for a in archs if a not in results]
    if len(rest) > 1:
        ok, log, was_cached = compile_one(tk, rest, name, text)
        if ok:
            return {**results, **{a: (True, log, was_cached) for a in rest}}
    return {**results, **{a: compile_one(tk, a, name, text) for a in rest}}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="tools/compile_matrix.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--toolkit", action="append", choices=["cuda13", "cuda12.0h"], help="default: both")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--fetch", action="store_true", help="only fetch the CUDA 12 toolchain")
    args = parser.parse_args(argv)
    BUILD.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    if args.fetch:
        print("CUDA 12.4 nvcc with CUDA 12.0 headers in", fetch_cuda12())
        return 0
    kits = [toolkit(n) for n in (args.toolkit or ["cuda13", "cuda12.0h"])]
    for tk in kits:  # the toolkit's headers are the ones it claims to use
        if "check" in tk:
            ok, log, _ = compile_one(tk, "sm_75", "headers.cu", tk["check"] + "int main() { return 0; }\n")
            if not ok:
                raise SystemExit(f"compile_matrix: {tk['name']} does not use the headers it names:\n{log}")
    archs = recorded_archs()
    entries = sources()
    unique = {}
    for e in entries:
        if e["expect"] != "stub":
            unique.setdefault((e["name"], e["text"]), e)
    row_jobs = [(tk, key) for key in unique for tk in kits]
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        row_results = list(pool.map(lambda j: compile_row(j[0], archs, j[1][0], j[1][1]), row_jobs))
    jobs = [(tk, arch, key) for key in unique for tk in kits for arch in archs]
    by_row = {(tk["name"], key): r for (tk, key), r in zip(row_jobs, row_results)}
    results = [by_row[(tk["name"], key)][arch] for tk, arch, key in jobs]
    failures, cached = [], 0
    rows = {}
    for (tk, arch, key), (ok, log, was_cached) in zip(jobs, results):
        cached += was_cached
        e = unique[key]
        good = ok if e["expect"] == "compile" else (not ok and "error" in log)
        rows.setdefault(key, []).append(f"{'ok' if good else 'FAIL'}")
        if not good:
            what = "does not compile" if e["expect"] == "compile" else "compiles, but must fail with a compile error"
            failures.append(f"{e['where']}: {e['name']} {what} with {tk['name']} (nvcc {tk['version']}) for {arch}:\n"
                            + "\n".join(log.splitlines()[:15]))
    header = [f"{tk['name']} {arch}" for tk in kits for arch in archs]
    print(f"| source | {' | '.join(header)} |\n|---|{'---|' * len(header)}")
    for e in entries:
        key = (e["name"], e["text"])
        if e["expect"] == "stub":
            cells = ["not compiled: " + e["why"]] + [""] * (len(header) - 1)
        else:
            cells = rows[key] if unique[key] is e else ["same as " + unique[key]["where"]] + [""] * (len(header) - 1)
        note = " (must fail)" if e["expect"] == "fail" else ""
        print(f"| {e['where']} {e['name']}{note} | {' | '.join(cells)} |")
    print(f"\n{len(jobs)} builds ({cached} cached) of {len(unique)} distinct sources in {time.monotonic() - t0:.0f} s")
    for f in failures:
        print("\n" + f, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
