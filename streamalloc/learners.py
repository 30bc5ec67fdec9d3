"""How many learners does this GPU hold? `python -m streamalloc preflight --learners 1,4,8`

A workshop puts several learners on one GPU. For each size K, one size after another, this makes K copies of the
course as a learner holds it, less what no run reads (streamalloc/, recordings/, notebooks/, solutions/ and labs/; no
build/, tests or tools), under build/preflight/learners/, starts `python -m streamalloc run` in every copy at once
(the labs' solutions and the unsolved labs, one notebook after another, as a learner runs them), times each copy,
and reads each copy's summary. Every verdict must hold as it does for one learner alone: each solution passes, each
unsolved lab's check raises LabIncomplete (with --notebooks, each lesson passes too). A solution whose check passed
everything but a timing that the noise could decide (its verdict "not verified: the speed", the noise of a shared
GPU) held, since that is the check's right word there; those are counted apart. One
learner alone runs first, as the baseline of the time per learner.

The copies are removed after each size; what was found goes to build/preflight/learners.json, which the preflight's
report shows (preflight.write_report). The largest K up to which every size held is the recommendation. It runs only
live: replayed times are this machine's CPU reading recordings, and say nothing about a GPU. STREAMALLOC_MODE=replay
runs it all the same (the tests do), and every line it writes says so.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

from . import cuda, gpu, runner, verdict
from .course import REPO, notebooks, write_atomically
from .errors import CourseError

MOST = 64  # learners at once: a room of thirty on one GPU is already far past what any GPU holds
COPIED = ("streamalloc", "recordings", "notebooks", "solutions", "labs")  # a learner's copy, less what no run reads
# the settings that would point every copy at one folder, or at the instructor's run: each copy is a learner's own
NOT_PASSED_ON = ("STREAMALLOC_BUILD", "STREAMALLOC_PROGRAMS", "STREAMALLOC_RECORDINGS", "STREAMALLOC_KEY_FIGURES",
                 "STREAMALLOC_GPU_TURN", "STREAMALLOC_RECORD", "STREAMALLOC_RECORD_TO",
                 "STREAMALLOC_RECORD_SESSION")
REPLAYED = ("Replayed: these times are this machine's CPU reading recordings, and say nothing about how many learners "
            "a GPU holds; run it live on the room's GPU")
HEAD = ["learners", "wall time", "a learner's time (median)", "× one alone", "verdicts held",
        "not verified (timing, shared GPU)"]


class BadLearners(CourseError):
    """--learners names no number of learners this can run."""


def sizes(text: str) -> list[int]:
    """'4' -> [4]; '1,4,8' -> [1, 4, 8] (sorted, each once); BadLearners for anything else."""
    parts = [p.strip() for p in str(text).split(",")]
    if not all(re.fullmatch(r"[0-9]+", p) and 1 <= int(p) <= MOST for p in parts):
        raise BadLearners(f"--learners {text}: give how many learners run at once, a whole number from 1 to {MOST} "
                          "(--learners 4), or several separated by commas (--learners 1,4,8)")
    return sorted({int(p) for p in parts})


def to_run(paths=(), with_notebooks: bool = False) -> list[str]:
    """The notebooks each learner runs, as paths in the course: those given (in the course), else every lab's solution
    and unsolved lab; with_notebooks, the lessons too."""
    if paths:
        found = notebooks(paths)
        outside = [str(nb) for nb in found if not nb.resolve().is_relative_to(REPO)]
        if outside:
            raise BadLearners(f"{', '.join(outside)}: a learner's copy holds only the course's own notebooks")
        rel = [nb.resolve().relative_to(REPO).as_posix() for nb in found]
    else:
        rel = [f"{folder}/{nb.name}" for folder in ("solutions", "labs")
               for nb in sorted((REPO / folder).glob("lab*.ipynb"))]
    if with_notebooks:
        rel += [f"notebooks/{nb.name}" for nb in sorted((REPO / "notebooks").glob("*.ipynb"))
                if f"notebooks/{nb.name}" not in rel]
    return rel


def copy_course(dest: Path, nbs: list[str]) -> None:
    """A learner's own copy of the course at dest, as much as a run of nbs reads (no build/, no caches)."""
    ignore = shutil.ignore_patterns("__pycache__", ".ipynb_checkpoints", "build")
    for top in dict.fromkeys([*COPIED, *(nb.split("/")[0] for nb in nbs)]):
        if (REPO / top).is_dir():
            shutil.copytree(REPO / top, dest / top, ignore=ignore)


def _left(copy: Path) -> tuple[list | None, str]:
    """A learner's summary rows (None where there is none, or it is not the runner's JSON) and the last lines of its
    log; a copy removed while it ran (by hand, or a cleaner) leaves no rows and a log that says so."""
    try:
        log = "\n".join((copy / "run.log").read_text(errors="replace").splitlines()[-5:])
    except OSError as e:
        return None, f"the copy's log cannot be read ({e.strerror or e}): was {copy} removed while it ran?"
    try:
        rows = json.loads((copy / "build" / "summary.json").read_text())
    except (OSError, ValueError):
        rows = None
    return (rows if isinstance(rows, list) else None), log


def check_word(executed: Path) -> str:
    """An executed solution's check, in a word: 'not verified' where it passed only what could be checked (a timing
    the noise could decide), else '' (the verdict its check cell showed as data: streamalloc.verdict)."""
    try:
        word, _ = verdict.of_lab(executed)
    except Exception:  # no copy: its row says why
        return ""
    return word if word == verdict.UNVERIFIED else ""


def judge(k: int, learners: list[dict], nbs: list[str], wall: float) -> dict:
    """One size's record from what each copy left: {"rows": its summary rows or None, "seconds", "status", "log": its
    last lines, "unverified": the solutions whose check said not verified}. Every notebook of every copy is one
    verdict; it held where the row passed (a solution passed, an unsolved lab's check raised as it must) or was not
    measured (it needs more GPUs: the same alone)."""
    held, problems, unverified, others = 0, [], 0, 0
    for i, one in enumerate(learners, 1):
        if one["rows"] is None:
            last = one["log"].strip().splitlines()[-1:] or ["no output"]
            problems.append(f"learner {i}: no summary (its run ended with status {one['status']}: {last[0][:200]})")
            continue
        rows = {r["notebook"]: r for r in one["rows"]}
        for nb in nbs:
            row = rows.get(nb)
            if row is None:
                problems.append(f"learner {i}: {nb} did not run")
            elif row["result"] in ("passed", runner.NOT_MEASURED):
                held += 1
                unverified += nb in one["unverified"]
            else:
                problems.append(f"learner {i}: {nb} {row['result']}: {row['error']}"[:400])
            others = max(others, (row or {}).get("shared_with") or 0)
    seconds = [one["seconds"] for one in learners]
    return {"learners": k, "wall_s": round(wall, 1), "learner_s": seconds,
            "median_s": round(statistics.median(seconds), 1), "held": held, "all": k * len(nbs),
            "unverified": unverified, "others": others, "problems": problems}


def _environment(mode) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in NOT_PASSED_ON}
    return {**env, "STREAMALLOC_MODE": mode.name}


def _stop(procs) -> None:
    """Each learner's run still going stops as on SIGTERM (its kernels interrupted and shut down); killed after a
    minute."""
    for p in procs:
        if p.poll() is None:
            with contextlib.suppress(OSError):
                p.send_signal(signal.SIGTERM)
    end = time.monotonic() + 60
    for p in procs:
        try:
            p.wait(timeout=max(0.1, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def run_size(k: int, nbs: list[str], mode, where: Path) -> dict:
    """K copies, every one's run started at once, waited for, judged; the copies removed, whatever happens."""
    shutil.rmtree(where, ignore_errors=True)
    copies = [where / f"learner-{i}" for i in range(1, k + 1)]
    procs, logs = [], []
    try:
        for copy in copies:
            copy_course(copy, nbs)
        env = _environment(mode)
        started = time.perf_counter()
        ended: dict[int, float] = {}
        for copy in copies:
            logs.append(open(copy / "run.log", "wb"))
            procs.append(subprocess.Popen([sys.executable, "-m", "streamalloc", "run", "--no-progress", "--jobs", "1",
                                           *nbs], cwd=copy, env=env, stdout=logs[-1], stderr=subprocess.STDOUT))
        while len(ended) < k:
            for i, p in enumerate(procs):
                if i not in ended and p.poll() is not None:
                    ended[i] = time.perf_counter()
            time.sleep(0.2)
        wall = max(ended.values()) - started
        learners = []
        for i, copy in enumerate(copies):
            rows, log = _left(copy)
            learners.append({"rows": rows, "seconds": round(ended[i] - started, 1), "status": procs[i].returncode,
                             "log": log,
                             "unverified": [nb for nb in nbs if nb.startswith("solutions/") and
                                            check_word(copy / "build" / "executed" / nb) == verdict.UNVERIFIED]})
        return judge(k, learners, nbs, wall)
    finally:
        _stop(procs)
        for log in logs:
            log.close()
        shutil.rmtree(where, ignore_errors=True)


def recommend(found: list[dict]) -> tuple[int | None, str]:
    """(the largest K up to which every size's verdicts held, or None; the sentence that says so)."""
    best, broke = None, None
    for size in sorted(found, key=lambda s: s["learners"]):
        if size["held"] != size["all"]:
            broke = size
            break
        best = size["learners"]
    if best is None:
        return None, (f"no size held: with {broke['learners']} learner(s), {broke['all'] - broke['held']} of "
                      f"{broke['all']} verdicts did not hold")
    said = f"at most {best} learner{'s' if best != 1 else ''} on this GPU: every verdict held up to {best}"
    if broke:
        return best, f"{said}; with {broke['learners']}, {broke['all'] - broke['held']} of {broke['all']} did not"
    return best, f"{said}, the most tried (try more to find where it breaks)"


def table_rows(found: list[dict]) -> list[list[str]]:
    alone = next((s["median_s"] for s in found if s["learners"] == 1), None)
    return [[str(s["learners"]), f"{s['wall_s']:.0f} s", f"{s['median_s']:.0f} s",
             f"{s['median_s'] / alone:.2f}" if alone else "–", f"{s['held']} / {s['all']}", str(s["unverified"])]
            for s in found]


def markdown(record: dict) -> str:
    """The section the preflight's report shows, and the console prints."""
    where = f"on {record['gpu']}, live" if record["mode"] == "live" else "on this machine, in replay"
    md = [f"Measured {record['date']} {where}: each learner ran "
          f"{len(record['notebooks'])} notebooks ({', '.join(record['notebooks'])}), one after another, in a copy of "
          "its own; every size's learners at once.", ""]
    if record["mode"] != "live":
        md += [f"**{REPLAYED}.**", ""]
    md += ["| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD)]
    md += ["| " + " | ".join(r) + " |" for r in table_rows(record["sizes"])]
    md += ["", f"**Recommended: {record['recommendation']}.**"]
    for s in record["sizes"]:
        if s["learners"] == 1 and s["others"]:
            md.append(f"\nOne learner alone was not alone: {s['others']} other process(es) computed on this GPU then, "
                      "so the baseline is slow.")
        if s["problems"]:
            md += ["", f"With {s['learners']}, what did not hold:", *(f"- {runner.md_cell(p)}" for p in s["problems"])]
    md += ["", "A solution whose check passed all but a timing that the noise of a shared GPU could decide says "
           "\"not verified\": that is its right word there, so it counts as held, and is counted apart."]
    return "\n".join(md) + "\n"


def room(wanted: list[int], nbs: list[str], out: Path) -> int:
    """Run every size, one after another (one learner alone first), write out/learners.json; 0 when the recommendation
    is at least the largest size asked for, 1 when a size did not hold."""
    here = gpu.probe()
    mode = gpu.decide(here)
    if not mode.live and not os.environ.get("STREAMALLOC_MODE", "").strip().lower() == "replay":
        raise BadLearners(f"--learners measures how many learners this GPU holds, and {mode.reason}. Run it on one of "
                          "the room's GPU machines")
    edited = [nb for nb in nbs if nb.startswith("labs/") and runner.edited_lab(REPO / nb)]
    if edited:
        print(f"Note: {', '.join(edited)} differ from the labs as the course made them (edited in place): the copies "
              "run them as they are.", flush=True)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    where = out / "learners"
    found = []
    if not mode.live:
        print(f"{REPLAYED}.", flush=True)
    with cuda.terminate_as_interrupt():  # SIGTERM, SIGHUP: every learner's run stopped, the copies removed
        try:  # inside: the signal ends this process on its way out
            for k in sorted({1, *wanted}):
                print(f"{k} learner{'s' if k != 1 else ''} at once, {mode.name}: {len(nbs)} notebooks each", flush=True)
                found.append(run_size(k, nbs, mode, where / f"{k}"))
                s = found[-1]
                print(f"    {s['wall_s']:.0f} s; verdicts held: {s['held']} of {s['all']}"
                      + (f" ({s['unverified']} not verified: a timing, on a shared GPU)" if s["unverified"] else "")
                      + "".join(f"\n    {p}" for p in s["problems"][:5]), flush=True)
        finally:
            shutil.rmtree(where, ignore_errors=True)
    best, line = recommend(found)
    record = {"date": time.strftime("%Y-%m-%d %H:%M"), "gpu": here.gpu, "mode": mode.name, "reason": mode.reason,
              "notebooks": nbs, "sizes": found, "recommended": best,
              "recommendation": line if mode.live else f"{line}; in replay, which says nothing about a GPU"}
    write_atomically(out / "learners.json", json.dumps(record, indent=1) + "\n")
    print("\n" + markdown(record), flush=True)
    return 0 if best is not None and best >= max(wanted) else 1


def read(out: Path) -> dict | None:
    """What the last `preflight --learners` found here, or None."""
    path = Path(out) / "learners.json"
    return json.loads(path.read_text()) if path.is_file() else None
