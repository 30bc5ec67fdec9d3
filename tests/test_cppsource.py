"""Reading a learner's C++/CUDA source (streamalloc.cppsource): calls, loops, the file's own helpers inlined,
names and values followed, and the stream order a reading can tell; where it cannot tell, it says so."""
import pytest

from streamalloc import cppsource

LOOP = """
void f(int n, cudaStream_t a, cudaStream_t b, cudaEvent_t e) {
    for (int i = 0; i < n; ++i) {
        int *p = nullptr;
        CHECK(cudaMallocAsync(&p, 4, a));  // allocated on a
        fill<<<1, 32, 0, a>>>(p);
        CHECK(cudaEventRecord(e, a));
        CHECK(cudaStreamWaitEvent(b, e, 0));
        read<<<1, 32, 0, b>>>(p);
        CHECK(cudaFreeAsync(p, a));       /* not ordered after read */
    }
}
"""


def test_source_reading():
    assert cppsource.function_text("int x; void f(int a) { if (a) { g(a, h(1, 2)); } } int y;", "f") == \
        "f(int a) { if (a) { g(a, h(1, 2)); } }"
    assert cppsource.function_text("void g() {}", "f") == ""
    code = cppsource.function_text(LOOP, "f")
    assert [cppsource.call_arguments(code, p) for p in cppsource.calls(code, "cudaMallocAsync")] == [["&p", "4", "a"]]
    assert [name for name, _ in cppsource.launches(LOOP)] == ["fill", "read"]


@pytest.mark.parametrize("loop", [
    "for (int i = 0; i < n; ++i) { CHECK(cudaFree(p)); }",
    "for (int i = 0; i < n; ++i) CHECK(cudaFree(p));",
    "for (int i = 0; i < n; ++i)\n    if (i) CHECK(cudaFree(p)); else k();",
    "int i = 0; do { CHECK(cudaFree(p)); } while (++i < n);",
    "int i = 0; do CHECK(cudaFree(p)); while (++i < n);",
    "while (n--) { { CHECK(cudaFree(p)); } }",
])
def test_a_call_in_a_loop_of_any_shape_is_in_the_loop(loop):
    code = f"void f(int n, void *p) {{ g(); {loop} h(); }}"
    assert cppsource.calls_in_loops(code, "cudaFree") == 1, cppsource.loop_bodies(code)
    assert cppsource.calls_in_loops(code, "g") == 0 and cppsource.calls_in_loops(code, "h") == 0


def test_a_loop_body_ends_where_its_statement_ends():
    code = "void f() { for (int i = 0; i < 3; ++i) a(i); b(); while (x) ; c(); }"
    assert cppsource.calls_in_loops(code, "a") == 1
    assert cppsource.calls_in_loops(code, "b") == 0 and cppsource.calls_in_loops(code, "c") == 0


HELPERS = """
static int *take(size_t bytes, cudaStream_t st) {
    int *p = nullptr;
    CHECK(cudaMallocAsync(&p, bytes, st));
    return p;
}
static void order(cudaEvent_t ev, cudaStream_t from, cudaStream_t to) {
    CHECK(cudaEventRecord(ev, from));
    CHECK(cudaStreamWaitEvent(to, ev, 0));
}
void f(int n, cudaStream_t a, cudaStream_t b, cudaEvent_t e1, cudaEvent_t e2) {
    for (int i = 0; i < n; ++i) {
        int *p = take(4, a);
        fill<<<1, 32, 0, a>>>(p);
        order(e1, a, b);
        read<<<1, 32, 0, b>>>(p);
        order(e2, b, a);
        CHECK(cudaFreeAsync(p, a));
    }
}
"""


def test_the_files_own_helpers_are_read_where_they_are_called():
    code = cppsource.inline(HELPERS, "f")
    assert cppsource.calls_in_loops(code, "cudaMallocAsync") == 1
    alloc = cppsource.calls(code, "cudaMallocAsync")[0]
    assert cppsource.call_arguments(code, alloc) == ["&p", "4", "a"]  # the helper's parameter is the caller's a
    assert cppsource.inline(HELPERS, "missing") == ""


def test_names_and_values_the_reading_can_tell():
    code = ("cudaMemPoolAttr attr = cudaMemPoolAttrReleaseThreshold; cudaStream_t st = s; auto t2 = (st);\n"
            "const uint64_t a = 1; uint64_t b = 64ull << 20; uint64_t c = UINT64_MAX; uint64_t d = ~0ull;"
            " size_t e = (size_t)-1; uint64_t f = a * 3; uint64_t g = x + 1;")
    assert cppsource.aliases(code, "cudaMemPoolAttrReleaseThreshold") == {"cudaMemPoolAttrReleaseThreshold", "attr"}
    assert cppsource.aliases(code, "s") == {"s", "st", "t2"}
    values = {v: cppsource.constant(code, f"(void *)&{v}") for v in "abcdefg"}
    assert values == {"a": 1, "b": 64 << 20, "c": 2**64 - 1, "d": 2**64 - 1, "e": 2**64 - 1, "f": 3, "g": None}
    assert cppsource.constant(code, "nope") is None and cppsource.constant(code, "&v[0]") is None


# -- names and owners: followed to what they are, or said to be unknown --------------------------------------
def test_names_are_followed_to_what_they_are():
    code = ("cudaStream_t a = producer; auto &b = a; cudaStream_t c(b); cudaStream_t t = nullptr;"
            " CHECK(cudaStreamCreate(&t)); cudaStream_t u = x; u = y; cudaStream_t w = pick(1);"
            " cudaEvent_t ev[2]; CHECK(cudaEventCreate(&ev[0])); cudaStream_t ss[2] = {s, t}; cudaStream_t p0 = 0;")
    got = {n: cppsource.resolve(code, n) for n in ("a", "b", "c", "t", "u", "w", "ev[0]", "ev[1]", "ss[1]", "*p", "p0",
                                                    "producer", "(a)")}
    assert got == {"a": "producer", "b": "producer", "c": "producer", "t": "t", "u": None, "w": None, "ev[0]": "ev[0]",
                   "ev[1]": None, "ss[1]": None, "*p": None, "p0": "0", "producer": "producer", "(a)": "producer"}


OWNERS = """
struct Release { cudaStream_t stream; void operator()(int *p) const { CHECK(cudaFreeAsync(p, stream)); } };
struct Scratch {
    int *p = nullptr;
    cudaStream_t st;
    Scratch(size_t bytes, cudaStream_t s) : st(s) { CHECK(cudaMallocAsync(&p, bytes, st)); }
    ~Scratch() { CHECK(cudaFreeAsync(p, st)); }
};
void f(int n, cudaStream_t s) {
    auto drop = [s](int *q) { CHECK(cudaFreeAsync(q, s)); };
    for (int i = 0; i < n; ++i) {
        std::unique_ptr<int, Release> a(take(4, s), Release{s});
        std::unique_ptr<int, decltype(drop)> b(take(4, s), drop);
        std::unique_ptr<int, Release> c(take(4, s));
        Scratch d(4, s);
        use<<<1, 1, 0, s>>>(a.get(), b.get(), c.get(), d.p);
    }
}
"""


def test_an_owners_deleter_frees_at_the_end_of_its_block():
    code = cppsource.inline(OWNERS, "f")
    frees = [cppsource.call_arguments(code, p) for p in cppsource.calls(code, "cudaFreeAsync")]
    assert sorted(frees) == [["a", "s"], ["b", "s"], ["c", "c.stream"], ["d.p", "s"]]  # c: its stream is not known
    use = code.index("use<<<")
    body = next((a, b) for a, b in cppsource.loop_bodies(code) if a <= use < b)
    assert all(body[0] <= p < body[1] and p > use for p in cppsource.calls(code, "cudaFreeAsync"))
    assert [cppsource.call_arguments(code, p) for p in cppsource.calls(code, "cudaMallocAsync")] == [["&d.p", "4", "s"]]
    assert cppsource.resolve(code, "c.stream") is None
