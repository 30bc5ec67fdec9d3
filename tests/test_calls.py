"""streamalloc.calls: the happens-before order built from a record of CUDA calls, on records written by hand in the
recorder's format (include/calltrace.cpp). A GPU run of the recorder itself is in the labs' live tests."""
import json

import pytest

from labcheck import unverified
from streamalloc import calls

P, Q = "0x100", "0x200"  # two non-blocking streams
BUF = "0x7000"


def record(*steps, pid=1, tid=1, t0=0):
    """Calls from (call, fields) steps, with seq, time, pid and tid filled in; ret 0 unless given."""
    lines = []
    for i, (call, fields) in enumerate(steps):
        line = {"seq": i, "t": t0 + i, "pid": pid, "tid": tid, "call": call, "ret": 0}
        line.update(fields)
        lines.append(line)
    return lines


def run(*steps):
    return calls.Calls(calls.parse("\n".join(json.dumps(x) for x in record(*steps))))


def streams(*names):
    return [("cudaStreamCreate", {"stream": s, "flags": 1}) for s in names]


def kernel(name, stream, *ptrs):
    return ("cudaLaunchKernel", {"stream": stream, "kernel": name, "args": list(ptrs)})


def alloc(stream, ptr=BUF, size=64):
    return ("cudaMallocAsync", {"stream": stream, "ptr": ptr, "size": size})


def free(stream, ptr=BUF):
    return ("cudaFreeAsync", {"stream": stream, "ptr": ptr})


def rec_event(event, stream):
    return ("cudaEventRecord", {"event": event, "stream": stream})


def wait(stream, event):
    return ("cudaStreamWaitEvent", {"stream": stream, "event": event})


def test_one_stream_orders_its_own_work():
    r = run(*streams(P), alloc(P), kernel("use", P, BUF), free(P))
    assert r.problems() == []
    assert [b.size for b in r.buffers] == [64]


def test_a_use_on_another_stream_without_an_event_is_before_the_allocation_and_after_the_free():
    r = run(*streams(P, Q), alloc(P), kernel("use", Q, BUF), free(P))
    assert sorted(p.kind for p in r.problems()) == ["after its free", "before its allocation"]


def test_events_order_the_other_stream_both_ways():
    r = run(*streams(P, Q), alloc(P), rec_event("e1", P), wait(Q, "e1"), kernel("use", Q, BUF),
            rec_event("e2", Q), wait(P, "e2"), free(P))
    assert r.problems() == []


def test_a_wait_placed_before_the_record_waits_for_nothing():
    r = run(*streams(P, Q), alloc(P), wait(Q, "e1"), rec_event("e1", P), kernel("use", Q, BUF), free(Q))
    assert [p.kind for p in r.problems()] == ["before its allocation"]


def test_two_event_objects_are_two_events_whatever_the_variable_was_called():
    # the consumer waits on an event it recorded itself (another handle), not on the producer's
    r = run(*streams(P, Q), alloc(P), rec_event("0xe1", P), rec_event("0xe2", Q), wait(Q, "0xe2"),
            kernel("use", Q, BUF), free(Q))
    assert [p.kind for p in r.problems()] == ["before its allocation"]


def test_the_most_recent_record_before_the_wait_counts():
    # e recorded after the use on Q, waited for by P, re-recorded on Q later: the free waits for the first record
    r = run(*streams(P, Q), alloc(P), rec_event("e0", P), wait(Q, "e0"), kernel("use", Q, BUF), rec_event("e", Q),
            wait(P, "e"), free(P), kernel("later", Q), rec_event("e", Q))
    assert r.problems() == []


def test_a_host_wait_orders_what_the_thread_enqueues_next():
    r = run(*streams(P, Q), alloc(P), ("cudaStreamSynchronize", {"stream": P}), kernel("use", Q, BUF),
            ("cudaStreamSynchronize", {"stream": Q}), free(P))
    assert r.problems() == []


def test_a_polled_event_query_counts_only_when_it_answered_success():
    not_ready = ("cudaEventQuery", {"event": "e", "ret": 600})
    r = run(*streams(P, Q), alloc(P), kernel("use", P, BUF), rec_event("e", P), not_ready, free(Q))
    assert [p.kind for p in r.problems()] == ["after its free"]
    r = run(*streams(P, Q), alloc(P), kernel("use", P, BUF), rec_event("e", P), not_ready,
            ("cudaEventQuery", {"event": "e"}), free(Q))
    assert r.problems() == []


def test_cudafree_of_stream_ordered_memory_does_not_wait():
    r = run(*streams(P), alloc(P), kernel("use", P, BUF), ("cudaFree", {"ptr": BUF}))
    assert [p.kind for p in r.problems()] == ["after its free"]
    r = run(*streams(P), alloc(P), kernel("use", P, BUF), ("cudaDeviceSynchronize", {}), ("cudaFree", {"ptr": BUF}))
    assert r.problems() == []


def test_cudafree_of_cudamalloc_memory_waits_for_the_device():
    r = run(*streams(P), ("cudaMalloc", {"ptr": BUF, "size": 64}), kernel("use", P, BUF), ("cudaFree", {"ptr": BUF}))
    assert r.problems() == []


def test_the_legacy_stream_and_blocking_streams_wait_for_each_other():
    blocking = ("cudaStreamCreate", {"stream": P, "flags": 0})
    r = run(blocking, alloc(P), kernel("use", "0x0", BUF), free(P))
    assert r.problems() == []
    r = run(*streams(P), alloc(P), kernel("use", "0x0", BUF), free(P))  # non-blocking: no implicit order
    assert sorted(p.kind for p in r.problems()) == ["after its free", "before its allocation"]


def test_a_use_enqueued_after_the_free_is_found():
    r = run(*streams(P), alloc(P), kernel("use", P, BUF), free(P), kernel("late", P, BUF))
    assert [(p.kind, p.use.what) for p in r.problems()] == [("enqueued after its free", "late")]


def test_a_pointer_inside_the_buffer_is_a_use_and_one_beside_it_is_not():
    r = run(*streams(P, Q), alloc(P, size=256), kernel("inside", Q, "0x7080"), kernel("beside", Q, "0x7100"),
            free(P))
    assert {p.use.what for p in r.problems()} == {"inside"}


def test_unfreed_and_sections():
    r = run(*streams(P), ("section", {"name": "yours"}), alloc(P), ("cudaDeviceSynchronize", {}),
            ("section", {"name": ""}), ("cudaDeviceSynchronize", {}))
    assert len(r.unfreed()) == 1
    assert len(r.named("cudaDeviceSynchronize", "yours")) == 1 and len(r.named("cudaDeviceSynchronize")) == 2


def test_ipc_events_and_pointers_link_two_processes():
    exporter = record(*streams(P), alloc(P), ("cudaMemPoolExportPointer", {"ptr": BUF, "key": 7}),
                      ("cudaEventCreate", {"event": "0xa"}), ("cudaIpcGetEventHandle", {"event": "0xa", "handle": 1}),
                      kernel("write", P, BUF), rec_event("0xa", P), pid=1, t0=0)
    importer = record(*streams(Q), ("cudaMemPoolImportPointer", {"ptr": "0x9000", "size": 64, "key": 7}),
                      ("cudaIpcOpenEventHandle", {"event": "0xb", "handle": 1}), wait(Q, "0xb"),
                      kernel("read", Q, "0x9000"), ("cudaFreeAsync", {"stream": Q, "ptr": "0x9000"}),
                      ("cudaEventCreate", {"event": "0xc"}), ("cudaIpcGetEventHandle", {"event": "0xc", "handle": 2}),
                      rec_event("0xc", Q), pid=2, t0=100)
    right = record(("cudaIpcOpenEventHandle", {"event": "0xd", "handle": 2}), wait(P, "0xd"), free(P), pid=1, t0=200)
    wrong = record(free(P), pid=1, t0=200)
    ok = calls.Calls(calls.parse("\n".join(map(json.dumps, exporter + importer + right))))
    assert ok.problems() == []
    read = ok.launches("read")[0]
    assert ok.before(ok.launches("write")[0], read)
    bad = calls.Calls(calls.parse("\n".join(map(json.dumps, exporter + importer + wrong))))
    assert [(p.kind, p.use.what) for p in bad.problems()] == [("after its free", "read")]


def test_capture_goes_into_the_graph_not_the_stream():
    dump = {"nodes": [{"id": "a", "type": 10, "ptr": BUF, "size": 64}, {"id": "k", "type": 0, "kernel": "_Z3usePf",
                                                                        "args": [BUF]},
                      {"id": "f", "type": 11, "ptr": BUF}], "edges": [["a", "k"], ["k", "f"]]}
    r = run(*streams(P), ("cudaStreamBeginCapture", {"stream": P}), alloc(P), kernel("use", P, BUF), free(P),
            ("cudaStreamEndCapture", {"stream": P, "graph": "g"}), ("cudaGraphInstantiate", {"exec": "x", "nodes": dump}),
            ("cudaGraphLaunch", {"exec": "x", "stream": P}))
    assert r.all_buffers == [] and r.problems() == []
    g = calls.Graph(r.graphs["x"])
    assert g.problems() == [] and [n["id"] for n in g.kernels("use")] == ["k"]
    dump["edges"] = [["a", "k"], ["a", "f"]]  # the free does not wait for the kernel
    assert [p[0] for p in calls.Graph(dump).problems()] == ["after its free"]


@pytest.mark.parametrize("symbol, name", [("_Z7consumePKiPiijP6Stamps", "consume"),
                                          ("_ZN6course4spinEyPy", "course::spin"), ("plain", "plain")])
def test_kernel_names(symbol, name):
    assert calls.kernel_name(symbol) == name


def test_a_record_cut_short_is_read_up_to_the_cut():
    text = json.dumps(record(alloc(P))[0]) + "\n{\"seq\": 1, \"t\""
    assert [c["call"] for c in calls.parse(text)] == ["cudaMallocAsync"]


# -- driver calls: recorded under their runtime twin's name, they make the same order ------------------------------
AS_DRIVER = {"cudaMallocAsync": "cuMemAllocAsync", "cudaFreeAsync": "cuMemFreeAsync", "cudaLaunchKernel": "cuLaunchKernel",
             "cudaEventRecord": "cuEventRecord", "cudaStreamWaitEvent": "cuStreamWaitEvent",
             "cudaStreamSynchronize": "cuStreamSynchronize", "cudaStreamCreate": "cuStreamCreate",
             "cudaDeviceSynchronize": "cuCtxSynchronize", "cudaEventQuery": "cuEventQuery"}
SCENARIOS = {  # name: (steps, the problems the runtime's record of them has)
    "one stream": ((*streams(P), alloc(P), kernel("use", P, BUF), free(P)), []),
    "another stream, no event": ((*streams(P, Q), alloc(P), kernel("use", Q, BUF), free(P)),
                                 ["after its free", "before its allocation"]),
    "events both ways": ((*streams(P, Q), alloc(P), rec_event("e1", P), wait(Q, "e1"), kernel("use", Q, BUF),
                          rec_event("e2", Q), wait(P, "e2"), free(P)), []),
    "a host wait": ((*streams(P, Q), alloc(P), ("cudaStreamSynchronize", {"stream": P}), kernel("use", Q, BUF),
                     ("cudaDeviceSynchronize", {}), free(P)), []),
    "a query that answered": ((*streams(P, Q), alloc(P), kernel("use", P, BUF), rec_event("e", P),
                               ("cudaEventQuery", {"event": "e"}), free(Q)), []),
}


def as_driver(steps):
    """The same calls made through the driver API, as the recorder writes them."""
    return [(call, {**fields, "api": "driver", "as": AS_DRIVER[call]}) for call, fields in steps]


@pytest.mark.parametrize("name", SCENARIOS)
def test_a_driver_call_is_one_kind_of_event_with_its_runtime_twin(name):
    steps, kinds = SCENARIOS[name]
    assert sorted(p.kind for p in run(*steps).problems()) == kinds
    assert sorted(p.kind for p in run(*as_driver(steps)).problems()) == kinds
    mixed = [s if i % 2 else as_driver([s])[0] for i, s in enumerate(steps)]  # half runtime, half driver
    assert sorted(p.kind for p in run(*mixed).problems()) == kinds


def test_a_driver_launch_on_the_per_thread_stream_is_that_threads_stream():
    r = run(alloc("0x2"), as_driver([kernel("use", "0x2", BUF)])[0], free("0x2"))
    assert r.problems() == [] and r.ops[1].stream == (1, "per-thread", 1)


# -- the record's channel: every line tagged under the run's key, numbered without a gap to its end ------------------
KEY = "000102030405060708090a0b0c0d0e0f"


def tagged(*steps, key=KEY, end=True, pid=1):
    """The recorder's text of these calls: each line tagged as calltrace.cpp tags it, and the process's "end"."""
    lines = record(*steps, *([("end", {})] if end else []), pid=pid)
    out = []
    for line in lines:
        body = json.dumps(line, separators=(",", ":"))[:-1]
        out.append(f'{body},"tag":"{calls.tag(key, body)}"}}\n')
    return out


def test_siphash_is_the_reference_one():  # the paper's test vectors (key 00..0f; messages 00.., 15 and 0 bytes)
    assert calls.siphash(bytes(range(16)), bytes(range(15))) == 0xa129ca6149be45e5
    assert calls.siphash(bytes(range(16)), b"") == 0x726fdb47dd0e0e31
    assert calls.siphash(bytes(range(16)), bytes(range(8))) == 0x93f5f5799a932462


def test_the_recorders_own_lines_verify():
    rec = calls.read("".join(tagged(*streams(P), alloc(P), free(P))), KEY)
    assert rec.forged == [] and len(rec.buffers) == 1


FORGERIES = {  # how a program could write into its record: what the reading of it says
    "an untagged line": lambda t: t[:-1] + ['{"seq":4,"t":9,"pid":1,"tid":1,"call":"cudaDeviceSynchronize","ret":0}\n']
    + t[-1:],
    "a line tagged under another key": lambda t: t[:2] + tagged(("cudaDeviceSynchronize", {}), key="f" * 32)[:1] + t[2:],
    "a changed argument": lambda t: [x.replace('"size":64', '"size":65') for x in t],
    "a line taken out": lambda t: t[:2] + t[3:],
    "a line written twice": lambda t: t[:3] + t[2:],
    "the end taken out": lambda t: t[:-1],
    "not JSON": lambda t: t[:1] + ["garbage\n"] + t[1:],
}


@pytest.mark.parametrize("how", FORGERIES)
def test_a_record_written_into_is_not_the_recorders(how):
    text = "".join(FORGERIES[how](tagged(*streams(P), alloc(P), kernel("use", P, BUF), free(P))))
    assert calls.read(text, KEY).forged, how
    assert calls.read(text, None).forged == []  # a recording's record (no key) is read as it is


def test_a_run_cut_short_may_end_without_its_end_line_and_with_its_last_line_cut():
    lines = tagged(*streams(P), alloc(P), end=False)
    assert calls.read("".join(lines) + '{"seq":2,"t"', KEY, cut_short=True).forged == []
    assert calls.read("".join(lines), KEY).forged  # a run that finished must reach its end


def test_an_untagged_recording_replays():  # records made before the tags, as committed recordings hold them
    text = "\n".join(json.dumps(x) for x in record(*streams(P), alloc(P), kernel("use", P, BUF), free(P)))
    rec = calls.read(text)
    assert rec.forged == [] and rec.problems() == [] and len(rec.lines) == 4


def test_the_check_says_a_forged_record_is_not_verified(tmp_path):
    from streamalloc import checks
    from streamalloc.lesson import Result

    text = "".join(FORGERIES["an untagged line"](tagged(*streams(P), alloc(P), kernel("use", P, BUF), free(P))))

    class Lesson:
        live, name, build = True, "stand-in", tmp_path

        def compile(self, file, flags=()):
            return tmp_path / "prog"

        def source(self, file):
            return tmp_path / file

        def run(self, file, args=(), timeout=120, flags=(), trace=False):
            return Result(file, list(args), "", "", 0.1, False, "TEST GPU, live", call_record=text, call_key=KEY)

    (tmp_path / "x.cu").write_text("int main() { return 0; }\n")
    report = checks.Report("lab", Lesson())
    assert report.trace("x.cu", [[1]]) is None
    assert [f.mark for f in report.items][-1] == checks.UNVERIFIED
    assert "not the recorder's alone" in report.items[-1].text and "without the run's tag" in report.items[-1].text
    report.finish()  # never "All checks passed"
    assert unverified("not verified here: the order of the GPU's work")


def test_a_synchronous_copy_waits_for_blocking_streams_only():
    """cudaMemcpy runs on the legacy default stream, which "synchronizes with all other streams ... except for
    non-blocking streams" (CUDA Driver API, Stream synchronization behavior): a kernel on a non-blocking stream is not
    before it, nor before what the host does after it; one on a blocking stream is."""
    blocking = ("cudaStreamCreate", {"stream": Q, "flags": 0})
    copy = ("cudaMemcpy", {"dst": "0x9", "src": BUF, "size": 64, "kind": 2})
    r = run(*streams(P), blocking, kernel("on_p", P, BUF), kernel("on_q", Q, BUF), copy)
    on_p, on_q, copied = r.ops
    assert not r.before(on_p, copied) and r.before(on_q, copied)
    later = run(*streams(P, Q), kernel("on_p", P, BUF), copy, kernel("on_q", Q, BUF))
    on_p, copied, on_q = later.ops
    assert not later.before(on_p, on_q), "the copy made the host wait for the legacy stream only"


def test_a_copy_between_device_pointers_or_one_that_failed_makes_the_host_wait_for_nothing():
    """CUDA Runtime API, API synchronization behavior: device to device "no host-side synchronization is performed";
    host to device: "a stream sync is performed before the copy is initiated"; device to host: it returns "only once
    the copy has completed". cudaMemcpyDefault (the driver's cuMemcpy) may be either, and a failed copy did nothing."""
    blocking = ("cudaStreamCreate", {"stream": Q, "flags": 0})

    def ordered(**copy):
        fields = {"dst": "0x9", "src": BUF, "size": 64, **copy}
        r = run(blocking, kernel("on_q", Q, BUF), ("cudaMemcpy", fields), *streams(P), kernel("after", P, BUF))
        return r.before(r.launches("on_q")[0], r.launches("after")[0])

    assert ordered(kind=2) and ordered(kind=1)
    assert not ordered(kind=3) and not ordered(kind=4) and not ordered(kind=2, ret=1)
    assert calls.host_waits([{"call": "cudaMemcpy", "ret": 0, "kind": 3}, {"call": "cudaMemcpy", "ret": 1, "kind": 2},
                             {"call": "cudaMemcpy", "ret": 0, "kind": 1}]) == ["cudaMemcpy"]


MALFORMED = {  # a line of JSON that the recorder did not write, as a program or a damaged file could leave it
    "no pid": '{"seq":9,"t":9,"tid":1,"call":"cudaDeviceSynchronize","ret":0}',
    "a time that is text": '{"seq":9,"t":"9","pid":1,"tid":1,"call":"cudaDeviceSynchronize","ret":0}',
    "no call": '{"seq":9,"t":9,"pid":1,"tid":1,"ret":0}',
    "a list": '[1, 2]',
    "an allocation without its pointer": '{"seq":9,"t":9,"pid":1,"tid":1,"call":"cudaMallocAsync","ret":0,"stream":"0x100","size":8}',
}


@pytest.mark.parametrize("how", MALFORMED)
def test_a_malformed_line_is_named_never_a_key_error(how):
    """A line without the recorder's fields (even one tagged under the run's key) leaves the record not verified, its
    reason named; parse leaves it out."""
    good = [json.dumps(x) for x in record(*streams(P), alloc(P), kernel("use", P, BUF), free(P))]
    text = "\n".join(good[:2] + [MALFORMED[how]] + good[2:]) + "\n"
    assert len(calls.parse(text)) == 4 + ("allocation" in how)
    assert any("is not the recorder's" in f for f in calls.read(text).forged), calls.read(text).forged
    body = MALFORMED[how][:-1]
    signed = tagged(*streams(P), alloc(P))[:1] + [f'{body},"tag":"{calls.tag(KEY, body)}"}}\n']
    assert calls.read("".join(signed), KEY, cut_short=True).forged  # tagged or not: never a KeyError
