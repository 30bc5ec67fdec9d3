"""The one reading of stream order (streamalloc/labchecks/streams.py, Order): what a lab's code puts on which stream
and what waits for what, through events, host waits, names, lambdas and the file's own helpers; None where the
reading cannot tell. It explains a check's verdict; the record of the calls (tests/test_calls.py) decides it."""
from test_cppsource import HELPERS, LOOP

from streamalloc import cppsource
from streamalloc.labchecks.streams import DEFAULT, Order, written_stream


def loop_order(code: str) -> Order:
    """The order of the loop that frees, as labs 1 and 3 read it."""
    return Order(code, loop_with="cudaFreeAsync")


def test_the_stream_order_model():
    order = loop_order(LOOP)
    assert [op.what for op in order.ops] == ["cudaMallocAsync", "fill", "cudaEventRecord", "cudaStreamWaitEvent",
                                                "read", "cudaFreeAsync"]
    assert order.stream("read") == "b" and order.missing("fill", "write") == ["write"]
    assert order.ordered_after("read", "cudaMallocAsync", "fill")  # through the event
    assert not order.ordered_after("cudaFreeAsync", "read")  # a never waits for b
    assert not order.ordered_after("write", "fill")


def test_the_files_own_helpers_are_followed_in_the_stream_order():
    order = loop_order(cppsource.inline(HELPERS, "f"))
    assert order.ordered_after("read", "cudaMallocAsync", "fill") and order.ordered_after("cudaFreeAsync", "read")
    assert order.count("cudaEventRecord") == 2 and order.count("cudaStreamWaitEvent") == 2


LAMBDA_AND_ALIAS = """
void f(int n, cudaStream_t producer, cudaStream_t consumer, cudaEvent_t e1, cudaEvent_t e2) {
    cudaStream_t reader = consumer;
    auto after = [&](cudaStream_t later, cudaStream_t earlier, cudaEvent_t e) {
        CHECK(cudaEventRecord(e, earlier));
        CHECK(cudaStreamWaitEvent(later, e, 0));
    };
    for (int i = 0; i < n; ++i) {
        int *p = nullptr;
        CHECK(cudaMallocAsync(&p, 4, producer));
        fill<<<1, 32, 0, producer>>>(p);
        after(reader, producer, e1);
        read<<<1, 32, 0, consumer>>>(p);
        after(producer, reader, e2);
        CHECK(cudaFreeAsync(p, producer));
    }
}
"""


def test_lambdas_and_aliases_are_followed_in_the_stream_order():
    order = loop_order(cppsource.inline(LAMBDA_AND_ALIAS, "f"))
    assert order.ordered_after("read", "cudaMallocAsync", "fill") and order.ordered_after("cudaFreeAsync", "read")
    assert order.count("cudaEventRecord") == 2 and not order.unresolved
    swapped = LAMBDA_AND_ALIAS.replace("after(producer, reader, e2)", "after(reader, producer, e2)")
    assert loop_order(cppsource.inline(swapped, "f")).ordered_after("cudaFreeAsync", "read") is False
    unknown = LAMBDA_AND_ALIAS.replace("after(producer, reader, e2)", "after(producer, *which, e2)")
    order = loop_order(cppsource.inline(unknown, "f"))
    assert order.ordered_after("cudaFreeAsync", "read") is None and order.unresolved == ["`*which`"]
    assert order.ordered_after("fill", "cudaMallocAsync") is True  # one known stream, in program order


def test_a_stream_as_written_and_the_legacy_stream():
    assert written_stream("(cudaStream_t)(s)") == "s" and written_stream("((a))") == "a"
    assert {written_stream(x) for x in ("", "0", "NULL", "nullptr", "cudaStreamLegacy")} == {DEFAULT}
    assert written_stream("(a)(b)") == "(a)(b)"
    order = loop_order(LOOP.replace("read<<<1, 32, 0, b>>>", "read<<<1, 32>>>"))
    assert order.stream("read") == DEFAULT and order.stream("fill") == "a" and order.stream("write") is None
