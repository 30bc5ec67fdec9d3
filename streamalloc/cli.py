"""The command line: `python -m streamalloc info | run | record | preflight | trace`."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from . import course, gpu, replay, runner, traces
from .errors import CourseError
from .settings import check_settings


def succeeded(rows) -> bool:
    """Every notebook passed, or was not measured here (it needs more GPUs): none failed."""
    return bool(rows) and all(r["result"] in ("passed", runner.NOT_MEASURED) for r in rows)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m streamalloc", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="show this machine and whether the course runs live or replays")
    r = sub.add_parser("run", help="run every notebook headless (papermill) and print a summary; the executed "
                                   "copies go under build/executed/")
    r.add_argument("paths", nargs="*", help="notebooks or folders (default: notebooks/, solutions/, labs/)")
    r.add_argument("--kernel", default="python3", help="the Jupyter kernel to run them in (default: python3)")
    r.add_argument("--no-progress", action="store_true", help="no per-cell progress bar (there is none anyway where "
                                                              "the output is not a terminal)")
    r.add_argument("--jobs", type=int, default=0, help="in replay, how many notebooks run at once (default 0: one "
                                                      "per core, at most 8); live, always one")
    rec = sub.add_parser("record", help="on a GPU: run notebooks, solutions and labs live and write recordings/<set>/ "
                                        "($STREAMALLOC_RECORD_TO, else the GPU's name)")
    rec.add_argument("paths", nargs="*", help="notebooks or folders (default: notebooks/, solutions/, labs/)")
    rec.add_argument("--kernel", default="python3", help="the Jupyter kernel to run them in (default: python3)")
    rec.add_argument("--no-progress", action="store_true", help="no per-cell progress bar")
    pre = sub.add_parser("preflight", help="an instructor's check: run the course live and in replay, compare its "
                         "key figures with the reference, write build/preflight/report.html and report.md")
    pre.add_argument("paths", nargs="*", help="notebooks or folders (default: notebooks/, solutions/, labs/)")
    pre.add_argument("--kernel", default="python3", help="the Jupyter kernel to run them in (default: python3)")
    pre.add_argument("--no-progress", action="store_true", help="no per-cell progress bar")
    pre.add_argument("--report-only", action="store_true", help="write the report again from the last run")
    pre.add_argument("--learners", metavar="K[,K...]", help="how many learners this GPU holds: K copies of the course "
                     "run the labs' solutions and unsolved labs at once (one learner alone first; 1,4,8: each size "
                     "in turn); the report shows the time per learner, whether every verdict held, and the largest "
                     "K that held")
    pre.add_argument("--notebooks", action="store_true", help="with --learners: each learner runs the lessons too")
    tr = sub.add_parser("trace", help="convert an allocation trace (a PyTorch memory snapshot, a CuPy hook log, an "
                        "RMM log CSV, or a course trace) into the course's format, check it and write it to OUT")
    tr.add_argument("input", metavar="IN", help="the file to convert (never overwritten)")
    tr.add_argument("-o", "--output", metavar="OUT", required=True, help="the course trace to write (its folder is made)")
    tr.add_argument("--format", choices=traces.FORMATS, help="the input's format (default: told from its content)")
    tr.add_argument("--device", type=int, metavar="N", help="a PyTorch snapshot's device (default: the one with the most events)")
    tr.add_argument("--most-events", type=int, metavar="N", help="keep whole steps up to N events (default: all)")
    a = p.parse_args(argv)
    try:
        check_settings()
        return _command(a)
    except (RuntimeError, CourseError) as e:  # STREAMALLOC_MODE=live without a usable GPU, a bad STREAMALLOC_*
        print(f"python -m streamalloc {a.command}: {e}", file=sys.stderr)  # value, no room to write: one line
        return 2
    except KeyboardInterrupt:  # Ctrl-C: its kernels are stopped (SIGTERM, SIGHUP end the process by their signal)
        print(f"python -m streamalloc {a.command}: stopped by an interrupt"
              + ("; build/summary.md is left as the run before wrote it" if a.command == "run" else ""),
              file=sys.stderr)
        return 130


def _progress(a) -> bool:
    """papermill's per-cell bar, where someone watches a terminal: in a log it is lines of carriage returns."""
    return not a.no_progress and sys.stderr.isatty()


def _command(a) -> int:

    if a.command == "info":
        m = gpu.probe()
        print(json.dumps(m.to_dict(), indent=1))
        print(gpu.decide(m))
        print("recordings:", ", ".join(replay.available()) or "none", "| replay shows:", replay.reference() or "nothing")
        return 0
    if a.command == "run":
        try:
            rows = runner.run(a.paths, kernel=a.kernel, progress=_progress(a), jobs=a.jobs)
        except course.NoNotebooks as e:
            print(f"python -m streamalloc run: {e}", file=sys.stderr)
            return 2
        return 0 if succeeded(rows) else 1
    if a.command == "record":
        mode_machine = gpu.probe()
        mode = gpu.decide(mode_machine)
        if not mode.live:
            print(f"The recorder needs a GPU with memory pools, and {mode.reason}.", file=sys.stderr)
            return 2
        # labs/ too: the unsolved labs' runs, so that in replay their checks say what is still wrong from what the
        # stubs did, as the solutions' say what is right
        paths = a.paths or [str(course.REPO / "notebooks"), str(course.REPO / "solutions"), str(course.REPO / "labs")]
        try:
            rows = runner.run(paths, out_dir=course.REPO / "build" / "recorded", kernel=a.kernel,
                              progress=_progress(a),
                              extra_env={"STREAMALLOC_RECORD": "1", "STREAMALLOC_RECORD_SESSION": time.strftime(
                                  "%Y-%m-%dT%H:%M:%S") + f"-{os.getpid()}"})
        except course.NoNotebooks as e:
            print(f"python -m streamalloc record: {e}", file=sys.stderr)
            return 2
        print(f"recordings written under {replay.root() / replay.record_to(mode_machine)}")
        return 0 if succeeded(rows) else 1
    if a.command == "preflight":
        from . import preflight

        if a.learners is not None or a.notebooks:
            return preflight.learners_per_gpu(a.learners, a.paths, a.notebooks, a.report_only)
        if a.report_only:
            try:
                ready, line = preflight.write_report()
            except FileNotFoundError as e:
                print(e, file=sys.stderr)
                return 2
            print(line)
            return 0 if ready else 1
        return preflight.preflight(a.paths, kernel=a.kernel, progress=_progress(a))
    if a.command == "trace":
        return _trace(a)
    return 2


def _trace(a) -> int:
    """Convert, check, write; one line about the trace, or one message naming what is wrong (status 2)."""
    src, out = Path(a.input), Path(a.output)
    try:
        if out.resolve() == src.resolve() or (out.exists() and src.exists() and out.samefile(src)):
            raise traces.TraceError(f"{out} is the input: the command never overwrites it; name another OUT")
        if a.most_events is not None and a.most_events < 1:
            raise traces.TraceError(f"--most-events {a.most_events}: keep at least one event")
        trace = traces.convert(src, a.format, a.device, a.most_events)
        _write(out, trace.text())
    except traces.TraceError as e:
        print(f"python -m streamalloc trace: {e}", file=sys.stderr)
        return 2
    print(f"{out}: {traces.summary(trace)}")
    return 0


def _write(out: Path, text: str):
    """Write OUT (its folder made); what stops it is a TraceError naming OUT. An OUT that is there and is no regular
    file (a folder; a pipe, which would wait for a reader) is refused before anything is written."""
    if out.exists() and not out.is_file():
        raise traces.TraceError(f"cannot write OUT {out}: it is {'a folder' if out.is_dir() else 'not a regular file'}")
    above = next((p for p in out.parents if p.exists()), None)
    if above is not None and not above.is_dir():
        raise traces.TraceError(f"cannot write OUT {out}: {above} is not a folder")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
    except OSError as e:
        at = f" ({e.filename})" if e.filename and str(e.filename) != str(out) else ""
        raise traces.TraceError(f"cannot write OUT {out}: {e.strerror or e}{at}") from None


if __name__ == "__main__":
    sys.exit(main())
