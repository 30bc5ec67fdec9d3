"""Lab 6's check (upload ahead): graded on what first_launch.cu measured; its code is read only to explain, or,
where no run can be had (replay of code other than the recorded solution), to judge what reading can judge.

The fields it reads are the ones first_launch.cu's header comment declares: graph_mem (phase, reserved),
launches (graph, latency_us), result (graph, n, times, errors, first_bad, expected, got).
"""
from __future__ import annotations

from IPython.display import display

from . import checks, measure, plots

ELEMENTS, LAUNCHES = 1 << 24, 20  # 64 MiB of floats per allocation; timed launches of each graph
MiB = 1 << 20
# The first launch without upload must be slower than the later ones by at least this much for the timing to
# say anything: NOTICE_US, or NOTICE_OF_LATER of a later launch, whichever is larger.
NOTICE_US, NOTICE_OF_LATER = 30.0, 0.25
# Yours passes the timing if its first launch keeps at most this share of the reference's extra time.
KEEP_AT_MOST = 0.5
UPLOAD = ("cudaGraphUpload", "cudaGraphInstantiateWithParams")  # the second with cudaGraphInstantiateFlagUpload


def _read(report: checks.Report, src: str, verdicts: bool) -> None:
    """What the code says. With `verdicts` (no run to judge by) it can be wrong; otherwise it only explains."""
    say = report.wrong if verdicts else report.unchecked
    uploads = [p for name in UPLOAD for p in checks.calls(src, name)]
    main = checks.function_text(src, "main")
    launches_in_main = checks.calls(main, "cudaGraphLaunch")
    if not uploads:
        say("the graph is not uploaded: cudaGraphUpload(exec, s) is not called before the timed loop, so the first "
            "launch maps the graph's memory (Guide §16.5.1 First Launch / cudaGraphUpload)")
    else:
        report.ok("calls " + checks.english(sorted({n for n in UPLOAD if checks.calls(src, n)}), "and"))
        for p in checks.calls(src, "cudaGraphUpload"):
            stream = (checks.call_arguments(src, p) + ["", ""])[1].strip()
            if stream not in ("s", ""):
                report.unchecked(f"cudaGraphUpload uploads into `{stream}`, the loop launches into s: the guide says "
                                 "that uploading into one stream and launching into another behaves like switching "
                                 "streams, 'likely resulting in remap operations' (§16.5.1); the timing below decides")
    if launches_in_main:
        say("cudaGraphLaunch is called in main, outside the timed loop: a launch runs the graph's work, so out gets "
            "one launch more than the loop's; cudaGraphUpload maps the memory without running anything")


def _timing(report: checks.Report, res) -> None:
    recs = res.records
    lat = {g: recs.one(what="launches", graph=g)["latency_us"] for g in ("reference", "yours")}
    later = {g: measure.summary(v[1:])["median"] for g, v in lat.items()}
    first = {g: v[0] for g, v in lat.items()}
    display(plots.Table([{"graph": g, "first launch µs": first[g], "later launches µs (median)": later[g],
                          "first minus later µs": first[g] - later[g]} for g in lat], res.label,
                        title="From cudaGraphLaunch to the end of the wait, per launch"))
    extra_ref, extra = first["reference"] - later["reference"], first["yours"] - later["yours"]
    notice = max(NOTICE_US, NOTICE_OF_LATER * later["reference"])
    figures = (f"your first launch took {first['yours']:.0f} µs, your later ones {later['yours']:.0f} µs; without "
               f"upload the first took {first['reference']:.0f} µs, the later ones {later['reference']:.0f} µs")
    if extra_ref < notice:
        report.unchecked(f"the timing: on this GPU the first launch without upload was not measurably slower "
                         f"({figures}; at least {notice:.0f} µs more is needed to judge)")
    else:
        report.expect(extra <= KEEP_AT_MOST * extra_ref, f"the timing: {figures}",
                      f"the timing: the first launch is still slow: {figures}. Upload into the stream you launch "
                      "into: a graph uploaded into another stream is likely remapped when it is launched into s "
                      "(Guide §16.5.1)")


def lab6(lesson) -> None:
    """Builds first_launch.cu, runs it, and says what is right and what is still wrong."""
    report = checks.Report("Lab 6: upload ahead")
    src = report.source(lesson, "first_launch.cu")
    res = report.run(lesson, "first_launch.cu", [ELEMENTS, LAUNCHES], timeout=120,
                     what="the results, the graph memory and the timing") if report.build(lesson, "first_launch.cu") else None
    _read(report, src, verdicts=res is None)
    if res is not None:
        recs = res.records
        mem = {r["phase"]: r for r in recs.where(what="graph_mem")}
        for graph, who in (("yours", "your graph"), ("reference", "the reference (given)")):
            r = recs.one(what="result", graph=graph)
            one_more = r["times"] and abs(r["got"] - r["expected"] / r["times"] * (r["times"] + 1)) < 1e-3
            extra = (" (one launch too many: a launch outside the timed loop ran the graph's work; cudaGraphUpload "
                     "maps its memory without running it)" if graph == "yours" and one_more else "")
            report.expect(r["errors"] == 0, f"result of {who}: all {r['n']:,} elements right after {r['times']} launches",
                          f"result of {who}: element {r['first_bad']} is {r['got']:g}, expected {r['expected']:g} "
                          f"({r['errors']:,} of {r['n']:,} wrong){extra}")
        before = mem["yours before the first launch"]["reserved"]
        bytes_ = ELEMENTS * 4
        report.expect(before >= bytes_,
                      f"uploaded ahead: before the first timed launch the graph allocator already reserved "
                      f"{before / MiB:.1f} MiB for the graph's {bytes_ / MiB:.0f} MiB allocation",
                      f"nothing was mapped before the first timed launch (the graph allocator reserved "
                      f"{before / MiB:.1f} MiB for a {bytes_ / MiB:.0f} MiB allocation): call cudaGraphUpload(exec, s) "
                      "before the loop (Guide §16.5.1)")
        _timing(report, res)
    report.finish()
