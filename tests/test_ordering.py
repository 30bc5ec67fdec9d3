"""streamalloc/ordering.py, the one table of CUDA's ordering rules, held to the recorder's wrappers
(include/calltrace.cpp) and read the same way by the record's order (calls.py), the reading of the source
(labchecks/streams.py) and never_named (labchecks/common.py)."""
import re

import pytest

from streamalloc import calls, ordering
from streamalloc.labchecks import common, streams

SOURCE = calls.SOURCE.read_text()


def written_lines() -> set:
    """Every call name the recorder writes: Line("name", ...) and a driver call's DL("name")."""
    return set(re.findall(r'\b(?:Line(?:\s+\w+)?|DL|instantiated)\s*\(\s*"(\w+)"', SOURCE))


def driver_wrappers() -> set:
    """The driver calls the recorder wraps, as a program names them (each DRIVER's or DRIVER_PT's first argument)."""
    return set(re.findall(r'^DRIVER(?:_PT)?\("(\w+)"', SOURCE, re.M))


def test_every_call_the_recorder_writes_is_in_the_table_and_every_rule_is_written():
    names = written_lines() - {ordering.SECTION, ordering.END}
    assert names == set(ordering.RULE), (names ^ set(ordering.RULE))


def test_every_driver_call_wrapped_is_a_twin_in_the_table_and_every_twin_is_wrapped():
    twins = {d for r in ordering.RULES for ds in r.names.values() for d in ds}
    aliases = {"cuGraphInstantiate"}  # looked up by this name, wrapped as cuGraphInstantiateWithFlags
    assert driver_wrappers() | aliases == twins, driver_wrappers() ^ twins


@pytest.mark.parametrize("rule", ordering.RULES, ids=lambda r: r.call)
def test_each_driver_wrapper_writes_its_runtime_twins_name(rule):
    for runtime, twins in rule.names.items():
        for d in twins:
            if d == "cuGraphInstantiate":
                continue
            body = re.search(rf'^DRIVER(?:_PT)?\("{d}",(.*?)(?=^DRIVER|^#|^//|\Z)', SOURCE, re.M | re.S)
            assert body, d
            assert f'"{rule.call}"' in body[1], f"{d} is not written as {rule.call}"


def test_the_64_bit_pool_attributes_are_the_ones_the_recorder_reads_as_64_bits():
    switch = SOURCE[SOURCE.index("unsigned long long attr_value("):SOURCE.index("default:", SOURCE.index("attr_value("))]
    assert set(re.findall(r"case (cudaMemPoolAttr\w+):", switch)) == set(ordering.POOL_ATTRS_64)


def test_what_the_record_order_takes_from_the_table():
    assert calls.ENQUEUED == {"cudaMallocAsync", "cudaFreeAsync", "cudaLaunchKernel", "cudaMemcpyAsync",
                              "cudaMemsetAsync", "cudaEventRecord", "cudaGraphLaunch", "cudaGraphUpload",
                              "cudaLaunchHostFunc"}
    assert set(calls.SYNCS) == {"cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize"}
    assert set(calls.QUERIES) == {"cudaEventQuery", "cudaStreamQuery"}
    assert ordering.DRIVER["cuCtxSynchronize"] == "cudaDeviceSynchronize"
    assert ordering.DRIVER["cuMemAllocFromPoolAsync"] == "cudaMallocFromPoolAsync"
    assert ordering.driver_twins("cudaMallocAsync") == ("cuMemAllocAsync",) and ordering.driver_twins("cudaX") == ()


def test_the_reading_follows_a_driver_call_as_its_runtime_twin():
    code = """
        cuMemAllocAsync(&p, n, a);
        cuEventRecord(ready, a);
        cuStreamWaitEvent(b, ready, 0);
        use<<<1, 1, 0, b>>>(p);
        cuMemFreeAsync(p, b);
        cuStreamSynchronize(b);
    """
    order = streams.Order(code)
    assert [o.what for o in order.ops] == ["cudaMallocAsync", "cudaEventRecord", "cudaStreamWaitEvent", "use",
                                           "cudaFreeAsync", "cudaStreamSynchronize"]
    assert order.ordered_after("use", "cudaMallocAsync") is True
    assert order.ordered_after("cudaFreeAsync", "use") is True
    unordered = streams.Order(code.replace("cuStreamWaitEvent(b, ready, 0);", ""))
    assert unordered.ordered_after("use", "cudaMallocAsync") is False


class Said:
    def __init__(self):
        self.wrongs = []

    def wrong(self, text):
        self.wrongs.append(text)


@pytest.mark.parametrize("runtime, driver", [(n, d) for r in ordering.RULES for n, ds in r.names.items() for d in ds])
def test_never_named_takes_a_driver_twin_for_the_call(runtime, driver):
    said = Said()
    assert common.never_named(said, f"int main() {{ {driver}(x); }}", {runtime: "it is needed"}) is False
    assert common.never_named(said, "int main() { other(x); }", {runtime: "it is needed"}) is True
    assert said.wrongs and runtime in said.wrongs[0]
