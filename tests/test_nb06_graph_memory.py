"""Notebook 06's cells that read highwater.cu, sharing.cu, remap.cu, upload.cu, access.cu and compare.cu, run on canned JSON lines shaped like the
programs' (the numbers are made up for the test, never recorded): a broken table, plot or check shows before a GPU
run, and a wrong result must fail its check. The programs themselves only run on a GPU."""
from pathlib import Path

import pytest

from notebook import StandIn, run_cells as run_notebook_cells, code_cells as notebook_cells

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "06_graph_memory_nodes.ipynb"

MiB = 1 << 20


def code_cells(notebook=NOTEBOOK):
    return notebook_cells(notebook.stem)


def cells_reading(program, notebook=NOTEBOOK):
    """The code cells after the %%writefile cell of `program`, up to the next %%writefile."""
    out, inside = [], False
    for src in code_cells(notebook):
        if src.startswith("%%writefile"):
            inside = src.partition("\n")[0].endswith("/" + program)
        elif inside:
            out.append(src)
    assert out, f"the notebook has no cells reading {program}"
    return out


def sharing(args, overlap_in_one_stream=False, shared=True):
    block, graphs, spin, rounds = (int(a) for a in args)
    lines, held = [], 0
    for phase in ("one stream", "a stream each", "one stream again"):
        each = phase == "a stream each"
        for r in range(rounds):
            together = each or overlap_in_one_stream
            start = [0.0 if together else g * spin * 1000.0 for g in range(graphs)]
            before = held
            held = max(held, (graphs if each or not shared else 1) * block)
            lines.append({"what": "round", "phase": phase, "round": r, "graphs": graphs, "bytes": block,
                          "spin_ms": float(spin), "stream": [g if each else 0 for g in range(graphs)],
                          "call_us": [3.0 + 400.0 * (each and r == 0 and g > 0) for g in range(graphs)],
                          "start_us": start, "stop_us": [s + spin * 1000.0 for s in start],
                          "ms": spin * (1 if together else graphs) + 0.5, "reserved_before": before,
                          "graph_reserved": held, "graph_used": held, "graph_reserved_high": held,
                          "graph_used_high": held})
    return lines


def upload(args, trim_keeps=0, flag_maps=True, idle=False, other_remaps=True):
    block, repeats, later, spin = (int(a) for a in args)
    timed = lambda first: {"call_us": [first] + [3.0] * later, "done_us": [first + 20] + [25.0] * later,  # noqa: E731
                           "gpu_us": [first / 2] + [15.0] * later}
    lines = [{"what": "new_graph", "bytes": block, "reserved_before_launch": 0, "reserved_after": block, **timed(900.0)}]
    for rep in range(repeats):
        for way in ("none", "upload", "other stream"):
            lines.append({"what": "after_trim", "way": way, "rep": rep, "bytes": block, "spin_us": float(spin),
                          "s_busy_at_launch": not idle, "reserved_after_trim": trim_keeps,
                          "reserved_before_launch": 0 if way == "none" else block, "reserved_after": block,
                          "upload_call_us": 0.0 if way == "none" else 300.0,
                          **timed({"none": 400.0, "upload": 5.0, "other stream": 350.0 if other_remaps else 6.0}[way])})
    for flag in ("none", "upload"):
        lines.append({"what": "instantiate", "flag": flag, "bytes": block, "instantiate_us": 50.0,
                      "reserved_after_instantiate": block if flag == "upload" and flag_maps else 0, **timed(200.0)})
    return lines


def remap(args, overwrites=False, later_mapped=False):
    """later_mapped: as on the H100, only round 0 remaps; the later rounds find both allocations mapped."""
    block, rounds = (int(a) for a in args)
    held = lambda r: 2 * block if later_mapped and r else block  # noqa: E731
    return [{"what": "round", "round": r, "bytes": block, "again_call_us": [3.0], "again_done_us": [30.0],
             "again_gpu_us": [25.0], "held_call_us": [150.0], "held_done_us": [200.0], "held_gpu_us": [120.0],
             "reserved_after_a": held(r), "reserved_after_b": held(r), "reserved_after_relaunch": 2 * block,
             "b_right": 0 if overwrites else block} for r in range(rounds)]


def access(args, free_first=False, unordered=False):
    block, spin = (int(a) for a in args)
    lines = [{"what": "forkjoin", "bytes": block, "alloc_nodes": 1, "free_nodes": 1, "kernel_nodes": 2,
              "free_after_both_counts": not free_first, "right_s1": block, "right_s2": block}]
    for how in ("events", "event nodes"):
        lines.append({"what": "outside", "how": how, "bytes": block, "spin_ms": float(spin),
                      "right_stream": 0 if unordered else block, "right_free_graph": block, "graph_used_after": 0})
    return lines


def compare(args, restored=True, graph_faster=False):
    iterations, k, repeats, *sizes = (int(a) for a in args)
    lines = []
    for n in sizes:
        for way, host, gpu in (("stream", 4.0, 9.0), ("graph 1", 2.5, 8.0), ("graph K", 0.6, 5.0 if graph_faster else 7.0),
                               ("prealloc", 2.0, 6.0)):
            lines.append({"what": "compare", "way": way, "bytes": n, "iterations": iterations,
                          "per_graph": k if way == "graph K" else 1 if way == "graph 1" else 0,
                          "host_us": [host + i * 0.1 for i in range(repeats)], "gpu_us": [gpu] * repeats,
                          "reserved_peak": max(n, 2 * MiB) * (k if way == "graph K" else 1)})
    lines.append({"what": "threshold", "before": 0, "during": 2**64 - 1, "after": 0 if restored else 2**64 - 1})
    return lines


def highwater(args, reset_refused=False):
    block = int(args[0])
    lines = []
    for who in ("graph", "pool"):
        for step in ("live", "reset to 0, live", "set to BYTES"):
            err = "cudaErrorInvalidValue" if step == "set to BYTES" or (reset_refused and step != "live") else "cudaSuccess"
            lines.append({"what": "mark", "allocator": who, "step": step, "error_used_high": err, "error_reserved_high": err,
                          "live": block, "used": block, "used_high": block, "reserved": block, "reserved_high": block})
    return lines


CANNED = {"highwater": highwater, "sharing": sharing, "remap": remap, "upload": upload, "access": access, "compare": compare}


def run_cells(program, notebook=NOTEBOOK, canned=None, shared=None, **bad):
    """The sizes cell and the cells reading `program`, on a stand-in whose runs print `canned`'s lines (CANNED's by
    default; `bad`: a program's wrong results, by its name; `shared`: other processes computing on its GPU). 06b's
    tests run its notebook through this too."""
    canned = CANNED if canned is None else canned
    lesson = StandIn(ROOT / "build", lambda file, args: canned[Path(file).stem](args, **bad.get(Path(file).stem, {})),
                     shared=shared)
    sizes = next(src for src in code_cells(notebook) if "BLOCK =" in src and not src.startswith("%%writefile"))
    return run_notebook_cells(notebook.stem, lesson, [sizes, *cells_reading(program + ".cu", notebook)])


# What each program's cells must say on the canned output (BLOCK is 64 MiB on the canned 80 GiB GPU).
SAYS = {
    "sharing": ["on this driver: 2 graphs in one stream held 1 BLOCKs at the peak: they shared physical memory",
                "first round with a stream each: 2 spin(s) at once; cudaGraphLaunch took 3, 403 µs (in one stream: 3, 3 µs)",
                "So: they had shared memory and ran at once: the driver remapped (§16.5)."],
    "remap": ["checked: in all 3 rounds, B's 64 MiB held 0xB0 after A was relaunched",
              "B's launch took pages A had mapped in 3 of 3 rounds", "grew the graph allocator's memory in 3",
              "round 0, the remap: cudaGraphLaunch of A took 150 µs with B's allocation live against 3 µs"],
    "highwater": ["graph: checked: 0 accepted. On this driver, 64 MiB was answered cudaErrorInvalidValue (used high)",
                  "the reset to 0 with 64 MiB live left the marks reading 64 MiB (used) and 64 MiB (reserved)"],
    "upload": ["checked: cudaGraphUpload mapped the memory before the launch, into either stream, as §16.5.1 says, "
               "and so did cudaGraphInstantiateFlagUpload",
               "the launch after a trim spent 400 µs in cudaGraphLaunch and 200 µs on the GPU with nothing before it; "
               "5 and 2 µs after an upload into s; 350 and 175 µs after an upload into s2",
               "switching streams between upload and launch cost it again"],
    "access": ["checked: the captured fork and join put the free after both counts",
               "ordered by events and by event nodes, read every byte after A's 20 ms spin and fill"],
    "compare": ["at 4 MiB on this GPU: the preallocated buffer (no allocation, stream launches) costs 6.0 µs of GPU time",
                "the graph 8.0 (1 per launch) and 7.0 (8 per launch)",
                "the preallocated loop is no lower bound: a graph's GPU time per iteration was below it at no size"],
}


@pytest.mark.parametrize("program", sorted(CANNED))
def test_the_cells_read_canned_output(program, capsys):
    ns = run_cells(program)
    out = capsys.readouterr().out
    for words in SAYS[program]:
        assert words in out, f"{program}: the cells should say {words!r}; they said:\n{out}"
    if program in ("upload", "compare"):  # the preflight's key figures, with their bands
        assert ns["lesson"].figures and all(0 < b[0] <= b[1] for _, _, b in ns["lesson"].figures.values())


def test_the_cells_say_where_a_graph_beat_the_preallocated_loop(capsys):
    run_cells("compare", compare={"graph_faster": True})
    out = capsys.readouterr().out
    assert "the preallocated loop is no lower bound: a graph's GPU time per iteration was below it at 64 KiB, 256 KiB" in out


def test_the_cells_name_what_the_driver_chose(capsys):
    run_cells("upload", upload={"other_remaps": False})
    assert "the upload into s2 saved it too: this driver did not remap on the switch" in capsys.readouterr().out


def test_the_remap_round_is_reported_apart_from_the_quiet_rounds(capsys, monkeypatch):
    def one_remap(args):
        rounds = remap(args)
        for r in rounds[1:]:
            r.update(reserved_after_relaunch=r["reserved_after_b"], held_call_us=[4.0], held_gpu_us=[26.0])
        return rounds
    monkeypatch.setitem(CANNED, "remap", one_remap)
    run_cells("remap")
    out = capsys.readouterr().out
    assert "round 0, the remap: cudaGraphLaunch of A took 150 µs" in out
    assert "the 2 round(s) that remapped nothing (rounds 1, 2): medians 4 µs in the call" in out


def test_later_rounds_that_found_both_mapped_are_not_said_to_take_as_pages(capsys):
    run_cells("remap", remap={"later_mapped": True})
    out = capsys.readouterr().out
    assert "took pages A had mapped in 1 of 3 rounds and found memory already mapped for both in 2" in out, out


def test_sharing_reports_a_remap_as_data(capsys):
    run_cells("sharing")
    out = capsys.readouterr().out
    assert "they shared physical memory" in out and "the driver remapped" in out


def test_sharing_without_sharing_needs_no_remap(capsys):
    run_cells("sharing", sharing={"shared": False})
    assert "they shared no memory" in capsys.readouterr().out


@pytest.mark.parametrize("program, bad, message", [
    ("sharing", {"overlap_in_one_stream": True}, "graphs launched into one stream ran at once"),
    ("upload", {"trim_keeps": 2 * MiB}, "the trim kept memory"),
    ("upload", {"flag_maps": False}, "cudaGraphInstantiateFlagUpload did not upload"),
    ("upload", {"idle": True}, "nothing overlapped"),
    ("remap", {"overwrites": True}, "relaunching A overwrote B's unfreed allocation"),
    ("access", {"free_first": True}, "the captured free must follow both streams' use"),
    ("access", {"unordered": True}, "a use ordered after the fill read wrong bytes"),
    ("compare", {"restored": False}, "threshold was not put back"),
    ("highwater", {"reset_refused": True}, "a reset to 0 failed"),
])
def test_a_wrong_result_fails_its_check(program, bad, message):
    with pytest.raises(AssertionError, match=message):
        run_cells(program, **{program: bad})


def restriction_cases(**answers):
    """restrictions.cu's cases as its lines give them, each refused as this driver refused it, but for `answers`."""
    errors = {"a second instantiation while the first exists": "cudaErrorInvalidValue",
              "instantiate again after destroying the first": "cudaSuccess", "clone the graph": "cudaErrorNotSupported",
              "use it as a child graph": "cudaErrorNotSupported",
              "free it in another graph, when its own graph frees it": "cudaErrorInvalidValue",
              "delete a node": "cudaErrorNotSupported", "free the allocation a second time in its graph":
              "cudaErrorInvalidValue", "a free node for memory from cudaMalloc": "cudaErrorInvalidValue",
              "a child graph moved into its parent": "cudaSuccess", **answers}
    return {c: {"case": c, "call": "", "error": e, "gpu_still_works": True} for c, e in errors.items()}


def run_restrictions(capsys, **answers):
    cell = next(src for src in code_cells() if src.startswith("# an error promised in so many words"))
    exec(cell, {"cases": restriction_cases(**answers), "sup": {"driver": 13000}})
    return capsys.readouterr().out


def test_a_restriction_with_no_error_promised_is_reported_whatever_the_driver_answers(capsys):
    """cudaGraphClone ("Cloning is not supported") and a free node in another graph ("cannot be freed outside the
    owning graph") promise no error: a driver that accepts the call is reported, not failed; the restrictions that
    promise an error ("will return an error") still fail when the call succeeds."""
    out = run_restrictions(capsys, **{"clone the graph": "cudaSuccess",
                                      "free it in another graph, when its own graph frees it": "cudaSuccess"})
    assert "with no error promised (this driver's answer, reported): clone the graph: cudaSuccess" in out, out
    with pytest.raises(AssertionError, match="use it as a child graph: the Runtime API says this is refused"):
        run_restrictions(capsys, **{"use it as a child graph": "cudaSuccess"})
