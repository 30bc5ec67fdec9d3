"""Notebook 06b's cells, run on canned JSON lines shaped like its programs' (the numbers are made up for the test, never
recorded): a broken table or check shows before a GPU run, and a wrong result must fail its check. The programs
themselves only run on a GPU."""
from pathlib import Path

import pytest
from test_nb06_graph_memory import code_cells
from test_nb06_graph_memory import run_cells as run_06_cells

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "06b_graph_memory_details.ipynb"

MiB = 1 << 20


def graph_free(args, trim_takes_live=False):
    block = int(args[0])
    lines = []
    for way in ("cudaFree", "cudaFreeAsync"):
        for step, used, reserved in (("start", 0, 0), ("launched", block, block),
                                     ("trim while live", block, 0 if trim_takes_live else block), ("freed", block, block),
                                     ("relaunched", block, block), ("trimmed after the free", 0, 0)):
            lines.append({"what": "step", "way": way, "step": step, "error": "cudaSuccess", "bytes": block,
                          "address": "0x7f0000000000", "graph_used": used, "graph_reserved": reserved})
    return lines


def oob_free(args, event_ignored=False):
    block = int(args[0])
    out = []
    for way in ("handshake", "event"):
        after = way == "event" and not event_ignored
        out.append({"what": "way", "way": way, "bytes": block, "reader_right": block // 4096, "reader_read": block // 4096,
                    "reader_timed_out": False, "b_done_while_reader_ran": not after, "reader_running_at_look": True,
                    "reader_start_ns": 1000, "reader_stop_ns": 201000, "b_fill_start_ns": 202000 if after else 5000,
                    "b_fill_stop_ns": 210000 if after else 9000, "reserved_after_a": block, "reserved_after_b": block,
                    "a_address": "0x7f0000000000", "b_address": "0x7f0004000000"})
    return out


def upload_undo(args, trim_keeps=False):
    block, repeats, churn = (int(a) for a in args)
    gpu = {"no upload": 300.0, "upload": 30.0, "upload, then churn": 31.0, "upload, then graph": 290.0,
           "upload, then trim": 310.0}
    return [{"what": "trial", "way": w, "rep": r, "bytes": block, "churn": churn,
             "reserved_after_upload": 0 if w == "no upload" else block,
             "reserved_before_launch": block if w in ("upload", "upload, then churn") or (trim_keeps and w.endswith("trim")) else 0,
             "reserved_after_launch": block, "call_us": 5.0 + r, "gpu_us": gpu[w] + r}
            for r in range(repeats) for w in gpu]


def trim_give(args, stays_taken=False, driver_releases=False, trim_keeps=False):
    block, count = (int(a) for a in args)
    held, total = count * block, 80 << 30
    rows = [("start", "cudaSuccess", 0, 70 << 30, 0), ("graph launched and destroyed", "cudaSuccess", 0, (70 << 30) - held, held),
            ("cudaMalloc of all but HELD / 2", "cudaSuccess", (70 << 30) - held - held // 2, held // 2, held),
            ("cudaMalloc(HELD) before the trim", "cudaSuccess", held, held // 2, 0) if driver_releases else
            ("cudaMalloc(HELD) before the trim", "cudaErrorMemoryAllocation", held, held // 2, held),
            ("cudaDeviceGraphMemTrim", "cudaSuccess", 0, held // 2 + held, held if trim_keeps else 0),
            ("cudaMalloc(HELD) after the trim", "cudaErrorMemoryAllocation" if stays_taken else "cudaSuccess", held,
             held // 2 + held, 0), ("end", "cudaSuccess", 0, 70 << 30, 0)]
    return [{"what": "step", "step": s, "error": e, "asked": a, "free": f, "total": total, "graph_reserved": g}
            for s, e, a, f, g in rows]


def va_share(args, one_address=False):
    block, graphs = (int(a) for a in args)
    addresses = ["0x7f0000000000"] * graphs if one_address else [f"0x7f00{g:02d}000000" for g in range(graphs)]
    return [{"what": "graphs", "graphs": graphs, "bytes": block, "addresses": addresses, "graph_reserved": block,
             "graph_used": block, "graph_reserved_high": block, "graph_used_high": block},
            {"what": "chain", "bytes": block, "first": "0x7f1000000000", "second": "0x7f1000000000",
             "descriptor_error": "cudaSuccess", "graph_reserved": block, "graph_used": block}]


def child_move(args, allows_memory_nodes=False):
    block = int(args[0])
    ok, bad = "cudaSuccess", "cudaErrorInvalidValue"
    rows = [("cudaGraphAddChildGraphNode (clone)", bad, 0, 0), ("cudaGraphAddNode (move)", ok, 0, 0),
            ("launch the parent", ok, block, block), ("launch the parent again", ok, block, block),
            ("1. instantiate the moved child", bad, 0, 0),
            ("2. add the moved child to another parent (move)", bad, 0, 0),
            ("4. add an allocation node to the moved child", ok if allows_memory_nodes else bad, 0, 0),
            ("1. destroy the moved child", bad, 0, 0)]
    out = [{"what": "child", "attempt": a, "error": e, "right": r, "bytes": b} for a, e, r, b in rows]
    out.insert(6, {"what": "child", "attempt": "3. cudaGraphExecUpdate(exec, moved child)", "error": bad, "update_result": 1})
    return out + [{"what": "owned", "same_graph": True}]


def exec_update(args, wrong_bytes=False):
    block = int(args[0])
    fail = ("cudaErrorGraphExecUpdateFailure", "cudaGraphExecUpdateErrorNotSupported")
    rows = [("same graph", ("cudaSuccess", "cudaGraphExecUpdateSuccess"), 0x11, block),
            ("same shape", fail, 0x11, block), ("other size", fail, 0x11, block),
            ("control: no memory nodes, other value", ("cudaSuccess", "cudaGraphExecUpdateSuccess"), 0x55, block)]
    return [{"what": "update", "attempt": a, "error": e, "result": r, "error_node": e != "cudaSuccess",
             "offered_address": "0x2", "original_address": "0x1", "launch": "cudaSuccess", "address_seen": "0x1",
             "value_seen": v, "bytes_seen": n, "right": n - (1 if wrong_bytes else 0), "bytes": block}
            for a, (e, r), v, n in rows]


CANNED = {"graph_free": graph_free, "oob_free": oob_free, "upload_undo": upload_undo, "trim_give": trim_give,
          "va_share": va_share, "child_move": child_move, "exec_update": exec_update}


def run_cells(program, shared=None, **bad):
    return run_06_cells(program, NOTEBOOK, CANNED, shared, **bad)


SAYS = {
    "graph_free": ["cudaFree: checked: the live allocation kept 64 MiB through a trim", "cudaFreeAsync: checked"],
    "oob_free": ["checked: with the event between the streams, the free and B came after the whole reader kernel",
                 "B finished while the reader was still running", "B added no memory"],
    "upload_undo": ["checked: every upload mapped the graph's memory", "upload, then churn: as cheap",
                    "upload, then graph: costlier", "upload, then trim: costlier"],
    "trim_give": ["checked: after cudaDeviceGraphMemTrim, cudaMalloc had the 256 MiB",
                  "the same cudaMalloc returned cudaErrorMemoryAllocation before the trim", "the trim raised"],
    "va_share": ["checked: 3 graphs, 3 distinct addresses", "backed by 64 MiB reserved (shared physical memory",
                 "the chain's allocations got one address"],
    "child_move": ["checked: the clone was refused (cudaErrorInvalidValue)",
                   "adding memory nodes to it was refused (cudaErrorInvalidValue)", "no error promised; this driver answered",
                   "3. cudaGraphExecUpdate(exec, moved child): cudaErrorInvalidValue"],
    "exec_update": ["checked: every answer was a documented one",
                    "same shape: cudaErrorGraphExecUpdateFailure (cudaGraphExecUpdateErrorNotSupported)"],
}


@pytest.mark.parametrize("program", sorted(CANNED))
def test_the_cells_read_canned_output(program, capsys):
    run_cells(program)
    out = capsys.readouterr().out
    for words in SAYS[program]:
        assert words in out, f"{program}: the cells should say {words!r}; they said:\n{out}"


@pytest.mark.parametrize("program, bad, message", [
    ("graph_free", {"trim_takes_live": True}, "a trim took a live allocation's memory"),
    ("oob_free", {"event_ignored": True}, "with the event, B ran before the reader ended"),
    ("upload_undo", {"trim_keeps": True}, "the trim after the upload kept an idle graph's memory"),
    ("trim_give", {"stays_taken": True}, "after the trim, cudaMalloc could not have the memory"),
    ("va_share", {"one_address": True}, "different graphs got one virtual address"),
    ("child_move", {"allows_memory_nodes": True}, "memory nodes were added to a moved child"),
    ("exec_update", {"wrong_bytes": True}, "the launch after it read wrong bytes"),
])
def test_a_wrong_result_fails_its_check(program, bad, message):
    with pytest.raises(AssertionError, match=message):
        run_cells(program, **{program: bad})


def test_on_a_shared_gpu_memory_another_process_took_is_not_verified_not_failed(capsys):
    """§16.6 hands trimmed memory to "other applications or processes" too: on a GPU others compute on, a cudaMalloc
    that could not have it is "not verified", never a failed lesson; alone on the GPU it fails (above)."""
    run_cells("trim_give", shared=3, trim_give={"stays_taken": True})
    out = capsys.readouterr().out
    assert "not verified: this GPU is shared with 3 other process(es)" in out and "checked:" not in out, out
    with pytest.raises(AssertionError, match="the trim kept memory of a destroyed graph"):  # what no neighbour explains
        run_cells("trim_give", shared=3, trim_give={"stays_taken": True, "trim_keeps": True})


def test_a_driver_that_gives_idle_graph_memory_to_cudamalloc_itself_is_reported_so(capsys):
    """The H100's driver 580: cudaMalloc got the destroyed graph's memory before any trim, and the graph allocator's
    reserve fell to 0: the sentence says the driver released it, not that the trim raised the free memory."""
    run_cells("trim_give", trim_give={"driver_releases": True})
    out = capsys.readouterr().out
    assert "the driver released the idle graph memory itself" in out and "from 256 to 0 MiB" in out, out
    assert "the trim raised" not in out, out


def test_every_program_of_the_notebook_has_canned_output():
    written = {src.partition("\n")[0].rpartition("/")[2][:-3] for src in code_cells(NOTEBOOK) if src.startswith("%%writefile")}
    assert written == set(CANNED)
