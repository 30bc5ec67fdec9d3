// calltrace.cpp: the record of what a program did with CUDA (the runtime and the driver API), for the labs' checks.
//
// Built as a shared library (streamalloc/calls.py builds it) and preloaded (LD_PRELOAD) into a lab's program,
// itself built against the shared CUDA runtime (nvcc -cudart shared). Each call below goes to CUDA unchanged; on its
// way back, one JSON object per line is appended to the record:
//   {"seq", "t" (CLOCK_MONOTONIC ns), "pid", "tid", "call", "ret" (the error code), ...the call's arguments, "tag"}
// with streams, events, pools, graphs and pointers as hex strings, sizes and attribute values as numbers.
// A kernel launch names its kernel and lists its 8-byte arguments ("args", hex: the pointers it was given).
// At instantiation a graph's nodes (kernels with their pointer arguments, memory allocations and frees) and
// edges are written out, so a check reads the graph's own dependencies.
//
// The driver API is recorded too, whichever way the program reaches it: libcuda's exported symbols (a program linked
// with -lcuda calls them; cuda.h's #defines name the versioned ones, cuMemAlloc_v2, cuStreamWaitEvent_ptsz, ...), and
// the pointers cuGetProcAddress, cudaGetDriverEntryPoint and cudaGetDriverEntryPointByVersion hand out (each lookup of
// a call wrapped here answers with its wrapper, which calls the pointer the lookup found). A driver call is written
// under its runtime twin's name with "api": "driver" and "as": the driver call (streamalloc/ordering.py lists them).
// The runtime's own use of the driver is not recorded: libcudart takes its driver functions from its own dlopen
// handle of libcuda (dlsym on that handle searches libcuda, not this preloaded library), so one event is one call
// the program made.
//
// The record's channel: the check creates the record's file in a private folder and names it, with a random key, in
// STREAMALLOC_CALLS and STREAMALLOC_CALLS_KEY. The constructor below keeps both, erases their values and removes
// them from the environment before the program's own code runs, so the program is never handed them; only an exec of
// this same program (lab 5's importer) gets them back in its environment. Every line ends with a tag, a SipHash-2-4
// of the line under the key: a line the program writes into the file has no valid tag, and the check then says the
// record is not verified. What a macro, a member function, a lambda or a helper calls reaches CUDA through these same
// symbols, so the record does not depend on how the program is written; nothing it prints becomes part of it.
#include <atomic>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <spawn.h>
#include <string>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <vector>
#include <cuda.h>
#include <cuda_runtime_api.h>

extern char **environ;

namespace {

// ---- the channel: the record's file, the key, and who may have them --------------------------------------------
int out_fd = -1;
uint64_t key0, key1;  // the SipHash key
std::atomic<unsigned long long> next_seq{0};  // per process: a forked child numbers its lines from 0 (atfork)
char channel_path[4200], channel_key[80];  // "STREAMALLOC_CALLS=...", "STREAMALLOC_CALLS_KEY=...": for an exec of self
char channel_seq[64];  // "STREAMALLOC_CALLS_SEQ=...": the exec goes on numbering this process's lines where it is
struct stat self_exe;  // this program's executable
bool channel_open = false;

typedef int (*Execve)(const char *, char *const[], char *const[]);
typedef int (*Execvp)(const char *, char *const[]);
typedef int (*Execvpe)(const char *, char *const[], char *const[]);
typedef int (*Spawn)(pid_t *, const char *, const posix_spawn_file_actions_t *, const posix_spawnattr_t *,
                     char *const[], char *const[]);
// found at load, not in a forked child (dlsym there could wait on a lock another thread held at the fork)
Execve real_execve;
Execvp real_execvp;
Execvpe real_execvpe;
Spawn real_spawn, real_spawnp;

bool parse_key(const char *hex) {
    unsigned char b[16];
    if (!hex || std::strlen(hex) != 32) return false;
    for (int i = 0; i < 16; ++i) {
        unsigned v;
        if (std::sscanf(hex + 2 * i, "%2x", &v) != 1) return false;
        b[i] = (unsigned char)v;
    }
    std::memcpy(&key0, b, 8);  // little-endian, as calls.py reads it
    std::memcpy(&key1, b + 8, 8);
    return true;
}

// Take a variable out of the program's reach: its value copied, its text erased where it lies (the memory
// /proc/self/environ shows), and the variable removed.
const char *take(const char *name, char *copy, size_t size) {
    char *v = std::getenv(name);
    if (!v) return nullptr;
    std::snprintf(copy, size, "%s=%s", name, v);
    std::memset(v, 0, std::strlen(v));
    unsetenv(name);
    return std::strchr(copy, '=') + 1;
}

__attribute__((constructor)) void open_record() {
    real_execve = (Execve)dlsym(RTLD_NEXT, "execve");
    real_execvp = (Execvp)dlsym(RTLD_NEXT, "execvp");
    real_execvpe = (Execvpe)dlsym(RTLD_NEXT, "execvpe");
    real_spawn = (Spawn)dlsym(RTLD_NEXT, "posix_spawn");
    real_spawnp = (Spawn)dlsym(RTLD_NEXT, "posix_spawnp");
    // Only a CUDA program (the shared runtime loaded beside it) takes the channel: a process that merely passes it on
    // (a launcher between the check and the program, a shell) leaves its environment as it is.
    if (!dlsym(RTLD_NEXT, "cudaRuntimeGetVersion")) return;
    const char *path = take("STREAMALLOC_CALLS", channel_path, sizeof channel_path);
    const char *key = take("STREAMALLOC_CALLS_KEY", channel_key, sizeof channel_key);
    const char *seq = take("STREAMALLOC_CALLS_SEQ", channel_seq, sizeof channel_seq);
    next_seq = seq ? std::strtoull(seq, nullptr, 10) : 0;
    if (path && *path && parse_key(key) && stat("/proc/self/exe", &self_exe) == 0) {
        out_fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);  // the check created it
        channel_open = out_fd >= 0;
    }
    pthread_atfork(nullptr, nullptr, [] { next_seq = 0; });
}

// The record's last line of a process that ended with exit(): after it, nothing is missing (calls.py checks that each
// process's lines are numbered 0, 1, ... up to this one). Run after the program's and the runtime's own finalizers.
__attribute__((destructor)) void close_record();

// The environment an exec of this same program gets: `env` with the channel put back (no allocation: after a fork).
template <class F> int with_channel(const char *path, char *const env[], F exec) {
    struct stat st;
    if (!channel_open || !path || stat(path, &st) != 0 || st.st_dev != self_exe.st_dev || st.st_ino != self_exe.st_ino)
        return exec(env);
    size_t n = 0;
    while (env && env[n]) ++n;
    char **out = (char **)alloca((n + 4) * sizeof(char *));
    size_t k = 0;
    for (size_t i = 0; i < n; ++i)
        if (std::strncmp(env[i], "STREAMALLOC_CALLS", 17) != 0) out[k++] = env[i];
    out[k++] = channel_path;
    out[k++] = channel_key;
    char digits[24], *d = digits + sizeof digits;  // next_seq as text, without snprintf (this may run after a fork)
    *--d = 0;
    unsigned long long v = next_seq;
    do *--d = char('0' + v % 10); while (v /= 10);
    std::memcpy(channel_seq, "STREAMALLOC_CALLS_SEQ=", 22);
    std::memcpy(channel_seq + 22, d, (size_t)(digits + sizeof digits - d));
    out[k++] = channel_seq;
    out[k] = nullptr;
    return exec(out);
}

// ---- SipHash-2-4 (Aumasson and Bernstein): the tag of each line ---------------------------------------------------
uint64_t rotl(uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }
uint64_t siphash(const unsigned char *m, size_t n) {
    uint64_t v0 = 0x736f6d6570736575ULL ^ key0, v1 = 0x646f72616e646f6dULL ^ key1;
    uint64_t v2 = 0x6c7967656e657261ULL ^ key0, v3 = 0x7465646279746573ULL ^ key1;
    auto round = [&] {
        v0 += v1; v1 = rotl(v1, 13); v1 ^= v0; v0 = rotl(v0, 32);
        v2 += v3; v3 = rotl(v3, 16); v3 ^= v2;
        v0 += v3; v3 = rotl(v3, 21); v3 ^= v0;
        v2 += v1; v1 = rotl(v1, 17); v1 ^= v2; v2 = rotl(v2, 32);
    };
    const size_t whole = n - n % 8;
    for (size_t i = 0; i < whole; i += 8) {
        uint64_t w;
        std::memcpy(&w, m + i, 8);
        v3 ^= w; round(); round(); v0 ^= w;
    }
    uint64_t last = (uint64_t)n << 56;
    for (size_t i = 0; i < n % 8; ++i) last |= (uint64_t)m[whole + i] << (8 * i);
    v3 ^= last; round(); round(); v0 ^= last;
    v2 ^= 0xff; round(); round(); round(); round();
    return v0 ^ v1 ^ v2 ^ v3;
}

// One driver entry point: its real function is an exported symbol of libcuda (found by name, after this library), or
// the pointer a lookup (cuGetProcAddress, cudaGetDriverEntryPoint) gave the program for it.
void *driver(const char *name);
struct Site {
    const char *as;  // the driver call as a program names it ("cuMemAlloc"): the record's "as"
    const char *symbol;  // the exported symbol ("cuMemAlloc_v2", "cuStreamWaitEvent_ptsz"); null: a lookup's pointer
    bool per_thread;  // the per-thread default stream's flavour: there a null stream is cudaStreamPerThread
    std::atomic<void *> fn{nullptr};
    template <class F> F get() {
        static_assert(sizeof(F) == sizeof(void *), "a function pointer");
        void *p = fn.load();
        if (!p) {
            p = dlsym(RTLD_NEXT, symbol);
            if (!p) p = driver(symbol);
            if (!p) {
                std::fprintf(stderr, "calltrace: the CUDA driver has no %s\n", symbol);
                std::abort();
            }
            fn.store(p);
        }
        F f;
        std::memcpy(&f, &p, sizeof f);
        return f;
    }
    const void *stream(CUstream s) const { return !s && per_thread ? (const void *)cudaStreamPerThread : (const void *)s; }
};

// One line of the record: {"seq", "t", "pid", "tid", "call", "ret", then what add() appends, then "tag"}.
struct Line {
    std::string s;
    Line(const char *call, int ret, const Site *driver_call = nullptr) {
        timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        char head[256];
        std::snprintf(head, sizeof head, "{\"seq\":%llu,\"t\":%lld,\"pid\":%d,\"tid\":%ld,\"call\":\"%s\",\"ret\":%d",
                      next_seq++, (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec, (int)getpid(),
                      (long)syscall(SYS_gettid), call, ret);
        s = head;
        if (driver_call) str("api", "driver").str("as", driver_call->as);
    }
    Line &num(const char *k, unsigned long long v) {
        char b[96];
        std::snprintf(b, sizeof b, ",\"%s\":%llu", k, v);
        s += b;
        return *this;
    }
    Line &hex(const char *k, const void *p) {
        char b[96];
        std::snprintf(b, sizeof b, ",\"%s\":\"0x%llx\"", k, (unsigned long long)(uintptr_t)p);
        s += b;
        return *this;
    }
    Line &hex(const char *k, unsigned long long p) { return hex(k, (const void *)(uintptr_t)p); }
    Line &str(const char *k, const char *v) {
        s += ",\"";
        s += k;
        s += "\":\"";
        for (const char *c = v ? v : ""; *c; ++c)  // printable ASCII only: the tag is computed on these very bytes
            s += (*c == '"' || *c == '\\' || (unsigned char)*c < 32 || (unsigned char)*c > 126) ? ' ' : *c;
        s += '"';
        return *this;
    }
    Line &raw(const char *k, const std::string &json) {
        s += ",\"";
        s += k;
        s += "\":";
        s += json;
        return *this;
    }
    ~Line() {
        if (out_fd < 0) return;
        char tag[40];
        std::snprintf(tag, sizeof tag, ",\"tag\":\"%016llx\"}\n",
                      (unsigned long long)siphash((const unsigned char *)s.data(), s.size()));
        s += tag;
        ssize_t left = (ssize_t)s.size();
        const char *p = s.data();
        while (left > 0) {
            ssize_t n = write(out_fd, p, (size_t)left);
            if (n <= 0) break;
            p += n;
            left -= n;
        }
    }
};

void close_record() { Line("end", 0); }

template <class F>
F real(const char *name) {
    static_assert(sizeof(F) == sizeof(void *), "a function pointer");
    void *p = dlsym(RTLD_NEXT, name);
    if (!p) {
        std::fprintf(stderr, "calltrace: the CUDA runtime has no %s (is the program built with -cudart shared?)\n", name);
        std::abort();
    }
    F f;
    std::memcpy(&f, &p, sizeof f);
    return f;
}
#define REAL(name, ...) static auto fn = real<cudaError_t (*)(__VA_ARGS__)>(#name)

// ---- kernels: their names and the 8-byte values of their arguments ---------------------------------------------
// Through the driver (looked up at run time, so that this builds against any CUDA 12 or 13 header): a kernel's name
// and parameter sizes (cuFuncGetParamInfo and cuKernelGetParamInfo need a CUDA 12.4 driver or newer).
typedef int (*GetName)(const char **, void *);
typedef int (*ParamInfo)(void *, size_t, size_t *, size_t *);
void *driver(const char *name) {
    static void *lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (!lib) lib = dlopen("libcuda.so.1", RTLD_LAZY);
    return lib ? dlsym(lib, name) : nullptr;
}

// `kernel` is a CUfunction (kernel_handle false) or a CUkernel (true; a CUfunction whose name the driver does not
// know is tried as a CUkernel, which cuLaunchKernel also takes). The arguments come as an array of pointers (`args`),
// or packed in one buffer (`extra`: CU_LAUNCH_PARAM_BUFFER_POINTER, which cuLaunchKernel also takes).
std::string kernel_json(void *kernel, bool kernel_handle, void **args, const char **name_out, void **extra = nullptr) {
    auto get_name = (GetName)driver(kernel_handle ? "cuKernelGetName" : "cuFuncGetName");
    auto info = (ParamInfo)driver(kernel_handle ? "cuKernelGetParamInfo" : "cuFuncGetParamInfo");
    const char *name = nullptr;
    if (get_name && get_name(&name, kernel) != 0) {
        if (!kernel_handle) return kernel_json(kernel, true, args, name_out, extra);
        name = nullptr;
    }
    *name_out = name;
    const unsigned char *buffer = nullptr;
    for (void **e = extra; e && *e != CU_LAUNCH_PARAM_END; e += 2)
        if (*e == CU_LAUNCH_PARAM_BUFFER_POINTER) buffer = (const unsigned char *)e[1];
    if (!info || (!args && !buffer)) return "null";
    std::string out = "[";
    for (size_t i = 0; i < 64; ++i) {
        size_t offset = 0, size = 0;
        if (info(kernel, i, &offset, &size) != 0) break;
        const void *value = args ? args[i] : buffer + offset;
        char b[48];
        if (size == 8 && value) {
            unsigned long long v;
            std::memcpy(&v, value, 8);
            std::snprintf(b, sizeof b, "%s\"0x%llx\"", i ? "," : "", v);
        } else {
            std::snprintf(b, sizeof b, "%snull", i ? "," : "");
        }
        out += b;
    }
    return out + "]";
}

void *function_of(const void *host_fn) {  // the CUfunction of a kernel's host stub, or null
    cudaFunction_t f = nullptr;
    static auto get = real<cudaError_t (*)(cudaFunction_t *, const void *)>("cudaGetFuncBySymbol");
    return get(&f, host_fn) == cudaSuccess ? (void *)f : nullptr;
}

void launch(Line &line, void *kernel, bool kernel_handle, void **args, const void *stream, void **extra = nullptr) {
    const char *name = nullptr;
    std::string a = kernel ? kernel_json(kernel, kernel_handle, args, &name, extra) : "null";
    line.hex("stream", stream).str("kernel", name ? name : "?").raw("args", a);
}

// A kernel node's kernel and arguments: through the runtime (a kernel the runtime launched or added), else through
// the driver's own parameters (a node cuLaunchKernel made in a capture, or cuGraphAddKernelNode).
std::string kernel_node_json(cudaGraphNode_t node, const char **name) {
    cudaKernelNodeParams p{};
    if (cudaGraphKernelNodeGetParams(node, &p) == cudaSuccess)
        if (void *f = function_of(p.func)) return kernel_json(f, false, p.kernelParams, name);
    cudaGetLastError();
    typedef CUresult (*Get)(CUgraphNode, CUDA_KERNEL_NODE_PARAMS_v2 *);
    auto get = (Get)driver("cuGraphKernelNodeGetParams_v2");
    CUDA_KERNEL_NODE_PARAMS_v2 d{};
    if (!get || get((CUgraphNode)node, &d) != CUDA_SUCCESS) return "null";
    if (d.func) return kernel_json((void *)d.func, false, d.kernelParams, name, d.extra);
    return d.kern ? kernel_json((void *)d.kern, true, d.kernelParams, name, d.extra) : "null";
}

// ---- a graph's nodes and edges, written at instantiation ---------------------------------------------------------
std::string graph_json(cudaGraph_t g) {
    size_t n = 0;
    if (cudaGraphGetNodes(g, nullptr, &n) != cudaSuccess) return "null";
    std::vector<cudaGraphNode_t> nodes(n);
    if (n && cudaGraphGetNodes(g, nodes.data(), &n) != cudaSuccess) return "null";
    std::string out = "{\"nodes\":[";
    for (size_t i = 0; i < n; ++i) {
        cudaGraphNodeType type;
        cudaGraphNodeGetType(nodes[i], &type);
        char b[160];
        std::snprintf(b, sizeof b, "%s{\"id\":\"0x%llx\",\"type\":%d", i ? "," : "",
                      (unsigned long long)(uintptr_t)nodes[i], (int)type);
        out += b;
        if (type == cudaGraphNodeTypeKernel) {
            const char *name = nullptr;
            std::string a = kernel_node_json(nodes[i], &name);
            out += ",\"kernel\":\"" + std::string(name ? name : "?") + "\",\"args\":" + a;
        } else if (type == cudaGraphNodeTypeMemAlloc) {
            cudaMemAllocNodeParams p{};
            if (cudaGraphMemAllocNodeGetParams(nodes[i], &p) == cudaSuccess) {
                std::snprintf(b, sizeof b, ",\"ptr\":\"0x%llx\",\"size\":%llu", (unsigned long long)(uintptr_t)p.dptr,
                              (unsigned long long)p.bytesize);
                out += b;
            }
        } else if (type == cudaGraphNodeTypeMemFree) {
            void *p = nullptr;
            if (cudaGraphMemFreeNodeGetParams(nodes[i], &p) == cudaSuccess) {
                std::snprintf(b, sizeof b, ",\"ptr\":\"0x%llx\"", (unsigned long long)(uintptr_t)p);
                out += b;
            }
        }
        out += "}";
    }
    out += "],\"edges\":[";
    size_t m = 0;
#if CUDART_VERSION >= 13000
    cudaGraphGetEdges(g, nullptr, nullptr, nullptr, &m);
    std::vector<cudaGraphNode_t> from(m), to(m);
    if (m) cudaGraphGetEdges(g, from.data(), to.data(), nullptr, &m);
#else
    cudaGraphGetEdges(g, nullptr, nullptr, &m);
    std::vector<cudaGraphNode_t> from(m), to(m);
    if (m) cudaGraphGetEdges(g, from.data(), to.data(), &m);
#endif
    for (size_t i = 0; i < m; ++i) {
        char b[96];
        std::snprintf(b, sizeof b, "%s[\"0x%llx\",\"0x%llx\"]", i ? "," : "", (unsigned long long)(uintptr_t)from[i],
                      (unsigned long long)(uintptr_t)to[i]);
        out += b;
    }
    return out + "]}";
}

// An attribute's value: 64 bits for the sizes (streamalloc/ordering.py, POOL_ATTRS_64, lists the same ones: a test
// holds them together), int for the reuse policies. The driver's CUmemPool_attribute has the same values.
unsigned long long attr_value(int attr, const void *v) {
    if (!v) return 0;
    switch (attr) {
    case cudaMemPoolAttrReleaseThreshold: case cudaMemPoolAttrReservedMemCurrent: case cudaMemPoolAttrReservedMemHigh:
    case cudaMemPoolAttrUsedMemCurrent: case cudaMemPoolAttrUsedMemHigh:
#if CUDART_VERSION >= 13030
    case cudaMemPoolAttrMaxPoolSize:
#endif
        return *(const unsigned long long *)v;
    default:
        return (unsigned long long)(unsigned)*(const int *)v;
    }
}
// A pool's maximum size (cudaMemPoolProps::maxSize, CUmemPoolProps::maxSize) where the headers have it (CUDA 12.2+)
template <class P> auto max_size(const P *p, int) -> decltype((unsigned long long)p->maxSize) { return p->maxSize; }
template <class P> unsigned long long max_size(const P *, long) { return 0; }

unsigned long long key_of(const void *bytes, size_t n) {  // FNV-1a: the same handle in both processes
    unsigned long long key = 1469598103934665603ull;
    for (size_t i = 0; i < n; ++i) key = (key ^ ((const unsigned char *)bytes)[i]) * 1099511628211ull;
    return key >> 12;  // fits a JSON number exactly (53 bits)
}

}  // namespace

extern "C" {

// course::section (include/course_section.cuh): where the harness hands over to the learner's code, and back
void streamalloc_section(const char *name) { Line("section", 0).str("name", name); }

// ---- streams and events -------------------------------------------------------------------------------------------
cudaError_t cudaStreamCreate(cudaStream_t *s) {
    REAL(cudaStreamCreate, cudaStream_t *);
    cudaError_t r = fn(s);
    Line("cudaStreamCreate", r).hex("stream", r ? nullptr : *s).num("flags", 0);
    return r;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags) {
    REAL(cudaStreamCreateWithFlags, cudaStream_t *, unsigned int);
    cudaError_t r = fn(s, flags);
    Line("cudaStreamCreate", r).hex("stream", r ? nullptr : *s).num("flags", flags);
    return r;
}
cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned int flags, int priority) {
    REAL(cudaStreamCreateWithPriority, cudaStream_t *, unsigned int, int);
    cudaError_t r = fn(s, flags, priority);
    Line("cudaStreamCreate", r).hex("stream", r ? nullptr : *s).num("flags", flags);
    return r;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
    REAL(cudaStreamDestroy, cudaStream_t);
    cudaError_t r = fn(s);
    Line("cudaStreamDestroy", r).hex("stream", s);
    return r;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    REAL(cudaStreamSynchronize, cudaStream_t);
    cudaError_t r = fn(s);
    Line("cudaStreamSynchronize", r).hex("stream", s);
    return r;
}
cudaError_t cudaStreamQuery(cudaStream_t s) {
    REAL(cudaStreamQuery, cudaStream_t);
    cudaError_t r = fn(s);
    Line("cudaStreamQuery", r).hex("stream", s);
    return r;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags) {
    REAL(cudaStreamWaitEvent, cudaStream_t, cudaEvent_t, unsigned int);
    cudaError_t r = fn(s, e, flags);
    Line("cudaStreamWaitEvent", r).hex("stream", s).hex("event", e);
    return r;
}
cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode) {
    REAL(cudaStreamBeginCapture, cudaStream_t, cudaStreamCaptureMode);
    cudaError_t r = fn(s, mode);
    Line("cudaStreamBeginCapture", r).hex("stream", s).num("mode", mode);
    return r;
}
#if CUDART_VERSION >= 12030
cudaError_t cudaStreamBeginCaptureToGraph(cudaStream_t s, cudaGraph_t g, const cudaGraphNode_t *deps,
                                          const cudaGraphEdgeData *edges, size_t n, cudaStreamCaptureMode mode) {
    REAL(cudaStreamBeginCaptureToGraph, cudaStream_t, cudaGraph_t, const cudaGraphNode_t *, const cudaGraphEdgeData *,
         size_t, cudaStreamCaptureMode);
    cudaError_t r = fn(s, g, deps, edges, n, mode);
    Line("cudaStreamBeginCapture", r).hex("stream", s).num("mode", mode).hex("graph", g);
    return r;
}
#endif
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g) {
    REAL(cudaStreamEndCapture, cudaStream_t, cudaGraph_t *);
    cudaError_t r = fn(s, g);
    Line("cudaStreamEndCapture", r).hex("stream", s).hex("graph", r ? nullptr : *g);
    return r;
}
cudaError_t cudaEventCreate(cudaEvent_t *e) {
    REAL(cudaEventCreate, cudaEvent_t *);
    cudaError_t r = fn(e);
    Line("cudaEventCreate", r).hex("event", r ? nullptr : *e).num("flags", 0);
    return r;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags) {
    REAL(cudaEventCreateWithFlags, cudaEvent_t *, unsigned int);
    cudaError_t r = fn(e, flags);
    Line("cudaEventCreate", r).hex("event", r ? nullptr : *e).num("flags", flags);
    return r;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
    REAL(cudaEventDestroy, cudaEvent_t);
    cudaError_t r = fn(e);
    Line("cudaEventDestroy", r).hex("event", e);
    return r;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    REAL(cudaEventRecord, cudaEvent_t, cudaStream_t);
    cudaError_t r = fn(e, s);
    Line("cudaEventRecord", r).hex("event", e).hex("stream", s);
    return r;
}
cudaError_t cudaEventRecordWithFlags(cudaEvent_t e, cudaStream_t s, unsigned int flags) {
    REAL(cudaEventRecordWithFlags, cudaEvent_t, cudaStream_t, unsigned int);
    cudaError_t r = fn(e, s, flags);
    Line("cudaEventRecord", r).hex("event", e).hex("stream", s).num("flags", flags);
    return r;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    REAL(cudaEventSynchronize, cudaEvent_t);
    cudaError_t r = fn(e);
    Line("cudaEventSynchronize", r).hex("event", e);
    return r;
}
cudaError_t cudaEventQuery(cudaEvent_t e) {
    REAL(cudaEventQuery, cudaEvent_t);
    cudaError_t r = fn(e);
    Line("cudaEventQuery", r).hex("event", e);
    return r;
}
cudaError_t cudaIpcGetEventHandle(cudaIpcEventHandle_t *h, cudaEvent_t e) {
    REAL(cudaIpcGetEventHandle, cudaIpcEventHandle_t *, cudaEvent_t);
    cudaError_t r = fn(h, e);
    Line("cudaIpcGetEventHandle", r).hex("event", e).num("handle", r ? 0 : key_of(h->reserved, sizeof h->reserved));
    return r;
}
cudaError_t cudaIpcOpenEventHandle(cudaEvent_t *e, cudaIpcEventHandle_t h) {
    REAL(cudaIpcOpenEventHandle, cudaEvent_t *, cudaIpcEventHandle_t);
    cudaError_t r = fn(e, h);
    Line("cudaIpcOpenEventHandle", r).hex("event", r ? nullptr : *e).num("handle", key_of(h.reserved, sizeof h.reserved));
    return r;
}
cudaError_t cudaDeviceSynchronize(void) {
    REAL(cudaDeviceSynchronize, void);
    cudaError_t r = fn();
    Line("cudaDeviceSynchronize", r);
    return r;
}
cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t f, void *data) {
    REAL(cudaLaunchHostFunc, cudaStream_t, cudaHostFn_t, void *);
    cudaError_t r = fn(s, f, data);
    Line("cudaLaunchHostFunc", r).hex("stream", s);
    return r;
}

// ---- memory -------------------------------------------------------------------------------------------------------
cudaError_t cudaMalloc(void **p, size_t size) {
    REAL(cudaMalloc, void **, size_t);
    cudaError_t r = fn(p, size);
    Line("cudaMalloc", r).hex("ptr", r ? nullptr : *p).num("size", size);
    return r;
}
cudaError_t cudaFree(void *p) {
    REAL(cudaFree, void *);
    cudaError_t r = fn(p);
    Line("cudaFree", r).hex("ptr", p);
    return r;
}
cudaError_t cudaMallocAsync(void **p, size_t size, cudaStream_t s) {
    REAL(cudaMallocAsync, void **, size_t, cudaStream_t);
    cudaError_t r = fn(p, size, s);
    Line("cudaMallocAsync", r).hex("ptr", r ? nullptr : *p).num("size", size).hex("stream", s);
    return r;
}
cudaError_t cudaMallocFromPoolAsync(void **p, size_t size, cudaMemPool_t pool, cudaStream_t s) {
    REAL(cudaMallocFromPoolAsync, void **, size_t, cudaMemPool_t, cudaStream_t);
    cudaError_t r = fn(p, size, pool, s);
    Line("cudaMallocAsync", r).hex("ptr", r ? nullptr : *p).num("size", size).hex("stream", s).hex("pool", pool);
    return r;
}
cudaError_t cudaFreeAsync(void *p, cudaStream_t s) {
    REAL(cudaFreeAsync, void *, cudaStream_t);
    cudaError_t r = fn(p, s);
    Line("cudaFreeAsync", r).hex("ptr", p).hex("stream", s);
    return r;
}
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind kind) {
    REAL(cudaMemcpy, void *, const void *, size_t, cudaMemcpyKind);
    cudaError_t r = fn(dst, src, n, kind);
    Line("cudaMemcpy", r).hex("dst", dst).hex("src", src).num("size", n).num("kind", kind);
    return r;
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind kind, cudaStream_t s) {
    REAL(cudaMemcpyAsync, void *, const void *, size_t, cudaMemcpyKind, cudaStream_t);
    cudaError_t r = fn(dst, src, n, kind, s);
    Line("cudaMemcpyAsync", r).hex("dst", dst).hex("src", src).num("size", n).num("kind", kind).hex("stream", s);
    return r;
}
cudaError_t cudaMemset(void *p, int v, size_t n) {
    REAL(cudaMemset, void *, int, size_t);
    cudaError_t r = fn(p, v, n);
    Line("cudaMemset", r).hex("dst", p).num("size", n);
    return r;
}
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s) {
    REAL(cudaMemsetAsync, void *, int, size_t, cudaStream_t);
    cudaError_t r = fn(p, v, n, s);
    Line("cudaMemsetAsync", r).hex("dst", p).num("size", n).hex("stream", s);
    return r;
}

// ---- pools --------------------------------------------------------------------------------------------------------
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void *v) {
    REAL(cudaMemPoolSetAttribute, cudaMemPool_t, cudaMemPoolAttr, void *);
    unsigned long long value = attr_value(attr, v);
    cudaError_t r = fn(pool, attr, v);
    Line("cudaMemPoolSetAttribute", r).hex("pool", pool).num("attr", attr).num("value", value);
    return r;
}
cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void *v) {
    REAL(cudaMemPoolGetAttribute, cudaMemPool_t, cudaMemPoolAttr, void *);
    cudaError_t r = fn(pool, attr, v);
    Line("cudaMemPoolGetAttribute", r).hex("pool", pool).num("attr", attr).num("value", r ? 0 : attr_value(attr, v));
    return r;
}
cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t keep) {
    REAL(cudaMemPoolTrimTo, cudaMemPool_t, size_t);
    cudaError_t r = fn(pool, keep);
    Line("cudaMemPoolTrimTo", r).hex("pool", pool).num("size", keep);
    return r;
}
cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *pool, int dev) {
    REAL(cudaDeviceGetDefaultMemPool, cudaMemPool_t *, int);
    cudaError_t r = fn(pool, dev);
    Line("cudaDeviceGetDefaultMemPool", r).hex("pool", r ? nullptr : *pool).num("dev", dev);
    return r;
}
cudaError_t cudaDeviceGetMemPool(cudaMemPool_t *pool, int dev) {
    REAL(cudaDeviceGetMemPool, cudaMemPool_t *, int);
    cudaError_t r = fn(pool, dev);
    Line("cudaDeviceGetMemPool", r).hex("pool", r ? nullptr : *pool).num("dev", dev);
    return r;
}
cudaError_t cudaDeviceSetMemPool(int dev, cudaMemPool_t pool) {
    REAL(cudaDeviceSetMemPool, int, cudaMemPool_t);
    cudaError_t r = fn(dev, pool);
    Line("cudaDeviceSetMemPool", r).hex("pool", pool).num("dev", dev);
    return r;
}
cudaError_t cudaMemPoolCreate(cudaMemPool_t *pool, const cudaMemPoolProps *props) {
    REAL(cudaMemPoolCreate, cudaMemPool_t *, const cudaMemPoolProps *);
    cudaError_t r = fn(pool, props);
    Line("cudaMemPoolCreate", r).hex("pool", r ? nullptr : *pool).num("max_size", props ? max_size(props, 0) : 0);
    return r;
}
cudaError_t cudaMemPoolDestroy(cudaMemPool_t pool) {
    REAL(cudaMemPoolDestroy, cudaMemPool_t);
    cudaError_t r = fn(pool);
    Line("cudaMemPoolDestroy", r).hex("pool", pool);
    return r;
}
cudaError_t cudaMemPoolImportPointer(void **p, cudaMemPool_t pool, cudaMemPoolPtrExportData *data) {
    REAL(cudaMemPoolImportPointer, void **, cudaMemPool_t, cudaMemPoolPtrExportData *);
    cudaError_t r = fn(p, pool, data);
    Line("cudaMemPoolImportPointer", r).hex("ptr", r ? nullptr : *p).hex("pool", pool)
        .num("key", data ? key_of(data->reserved, sizeof data->reserved) : 0);
    return r;
}
cudaError_t cudaMemPoolExportPointer(cudaMemPoolPtrExportData *data, void *p) {
    REAL(cudaMemPoolExportPointer, cudaMemPoolPtrExportData *, void *);
    cudaError_t r = fn(data, p);
    Line("cudaMemPoolExportPointer", r).hex("ptr", p).num("key", r || !data ? 0 : key_of(data->reserved, sizeof data->reserved));
    return r;
}

// ---- kernels ------------------------------------------------------------------------------------------------------
cudaError_t cudaLaunchKernel(const void *f, dim3 grid, dim3 block, void **args, size_t shmem, cudaStream_t s) {
    REAL(cudaLaunchKernel, const void *, dim3, dim3, void **, size_t, cudaStream_t);
    cudaError_t r = fn(f, grid, block, args, shmem, s);
    Line line("cudaLaunchKernel", r);
    launch(line, function_of(f), false, args, s);
    return r;
}
// CUDA 13's <<<...>>> goes through these (crt/device_functions.h), with the kernel as a cudaKernel_t (a CUkernel)
cudaError_t __cudaLaunchKernel(void *kernel, dim3 grid, dim3 block, void **args, size_t shmem, cudaStream_t s) {
    REAL(__cudaLaunchKernel, void *, dim3, dim3, void **, size_t, cudaStream_t);
    cudaError_t r = fn(kernel, grid, block, args, shmem, s);
    Line line("cudaLaunchKernel", r);
    launch(line, kernel, true, args, s);
    return r;
}
cudaError_t __cudaLaunchKernel_ptsz(void *kernel, dim3 grid, dim3 block, void **args, size_t shmem, cudaStream_t s) {
    REAL(__cudaLaunchKernel_ptsz, void *, dim3, dim3, void **, size_t, cudaStream_t);
    cudaError_t r = fn(kernel, grid, block, args, shmem, s);
    Line line("cudaLaunchKernel", r);
    launch(line, kernel, true, args, s ? s : cudaStreamPerThread);
    return r;
}
cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *f, void **args) {
    REAL(cudaLaunchKernelExC, const cudaLaunchConfig_t *, const void *, void **);
    cudaError_t r = fn(config, f, args);
    Line line("cudaLaunchKernel", r);
    launch(line, function_of(f), false, args, config ? config->stream : nullptr);
    return r;
}

// ---- graphs -------------------------------------------------------------------------------------------------------
static void instantiated(const char *call, cudaError_t r, cudaGraphExec_t *exec, cudaGraph_t g) {
    Line(call, r).hex("exec", r ? nullptr : *exec).hex("graph", g).raw("nodes", graph_json(g));
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t g, unsigned long long flags) {
    REAL(cudaGraphInstantiate, cudaGraphExec_t *, cudaGraph_t, unsigned long long);
    cudaError_t r = fn(exec, g, flags);
    instantiated("cudaGraphInstantiate", r, exec, g);
    return r;
}
cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *exec, cudaGraph_t g, unsigned long long flags) {
    REAL(cudaGraphInstantiateWithFlags, cudaGraphExec_t *, cudaGraph_t, unsigned long long);
    cudaError_t r = fn(exec, g, flags);
    instantiated("cudaGraphInstantiate", r, exec, g);
    return r;
}
cudaError_t cudaGraphInstantiateWithParams(cudaGraphExec_t *exec, cudaGraph_t g, cudaGraphInstantiateParams *p) {
    REAL(cudaGraphInstantiateWithParams, cudaGraphExec_t *, cudaGraph_t, cudaGraphInstantiateParams *);
    cudaError_t r = fn(exec, g, p);
    instantiated("cudaGraphInstantiate", r, exec, g);
    if (!r && p && p->uploadStream && (p->flags & cudaGraphInstantiateFlagUpload))
        Line("cudaGraphUpload", r).hex("exec", *exec).hex("stream", p->uploadStream);
    return r;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s) {
    REAL(cudaGraphLaunch, cudaGraphExec_t, cudaStream_t);
    cudaError_t r = fn(exec, s);
    Line("cudaGraphLaunch", r).hex("exec", exec).hex("stream", s);
    return r;
}
cudaError_t cudaGraphUpload(cudaGraphExec_t exec, cudaStream_t s) {
    REAL(cudaGraphUpload, cudaGraphExec_t, cudaStream_t);
    cudaError_t r = fn(exec, s);
    Line("cudaGraphUpload", r).hex("exec", exec).hex("stream", s);
    return r;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
    REAL(cudaGraphExecDestroy, cudaGraphExec_t);
    cudaError_t r = fn(exec);
    Line("cudaGraphExecDestroy", r).hex("exec", exec);
    return r;
}
cudaError_t cudaDeviceGraphMemTrim(int dev) {
    REAL(cudaDeviceGraphMemTrim, int);
    cudaError_t r = fn(dev);
    Line("cudaDeviceGraphMemTrim", r).num("dev", dev);
    return r;
}

}  // extern "C"

// ---- the driver API ---------------------------------------------------------------------------------------------------
// Each call below: its record (the body, after the real call; `r` is its result, `site` the entry point it came
// through), an exported symbol of that name and, for calls on a stream, the per-thread default stream's symbol
// (_ptsz, or _ptds for the blocking copies and sets), and a pair of lookup sites that cuGetProcAddress and
// cudaGetDriverEntryPoint fill with the pointer they found (a legacy and a per-thread one).
namespace {
struct Entry;
Entry *entries[80];
int n_entries = 0;
struct Entry {  // what a lookup of `as` is answered with
    const char *as;
    Site *site, *pt_site;
    void *wrapper, *pt_wrapper;
    Entry(const char *a, Site *s, void *w, Site *ps, void *pw) : as(a), site(s), pt_site(ps), wrapper(w), pt_wrapper(pw) {
        entries[n_entries++] = this;
    }
};
}  // namespace

#define DRIVER_BODY(SYMBOL, PARAMS, ARGS, ...)                                                                         \
    namespace {                                                                                                        \
    template <Site &site> CUresult wrap_##SYMBOL PARAMS {                                                              \
        CUresult r = site.template get<CUresult(*) PARAMS>() ARGS;                                                     \
        __VA_ARGS__;                                                                                                   \
        return r;                                                                                                      \
    }                                                                                                                  \
    }
// A driver call without a stream: one exported symbol.
#define DRIVER(AS, SYMBOL, PARAMS, ARGS, ...)                                                                          \
    DRIVER_BODY(SYMBOL, PARAMS, ARGS, __VA_ARGS__)                                                                     \
    namespace {                                                                                                        \
    Site site_##SYMBOL{AS, #SYMBOL, false}, lookup_##SYMBOL{AS, nullptr, false};                                       \
    Entry entry_##SYMBOL{AS, &lookup_##SYMBOL, (void *)&wrap_##SYMBOL<lookup_##SYMBOL>, nullptr, nullptr};             \
    }                                                                                                                  \
    extern "C" CUresult SYMBOL PARAMS { return wrap_##SYMBOL<site_##SYMBOL> ARGS; }
// A driver call on a stream: its symbol and the per-thread default stream's (SYMBOL##PT).
#define DRIVER_PT(AS, SYMBOL, PT, PARAMS, ARGS, ...)                                                                   \
    DRIVER_BODY(SYMBOL, PARAMS, ARGS, __VA_ARGS__)                                                                     \
    namespace {                                                                                                        \
    Site site_##SYMBOL{AS, #SYMBOL, false}, site_##SYMBOL##PT{AS, #SYMBOL #PT, true};                                  \
    Site lookup_##SYMBOL{AS, nullptr, false}, lookup_##SYMBOL##PT{AS, nullptr, true};                                  \
    Entry entry_##SYMBOL{AS, &lookup_##SYMBOL, (void *)&wrap_##SYMBOL<lookup_##SYMBOL>, &lookup_##SYMBOL##PT,          \
                         (void *)&wrap_##SYMBOL<lookup_##SYMBOL##PT>};                                                 \
    }                                                                                                                  \
    extern "C" CUresult SYMBOL PARAMS { return wrap_##SYMBOL<site_##SYMBOL> ARGS; }                                    \
    extern "C" CUresult SYMBOL##PT PARAMS { return wrap_##SYMBOL<site_##SYMBOL##PT> ARGS; }

#define DL(call) Line(call, r, &site)  // a driver call's line, under its runtime twin's name

// streams and events
DRIVER("cuStreamCreate", cuStreamCreate, (CUstream *s, unsigned flags), (s, flags),
       DL("cudaStreamCreate").hex("stream", r ? nullptr : *s).num("flags", flags))
DRIVER("cuStreamCreateWithPriority", cuStreamCreateWithPriority, (CUstream *s, unsigned flags, int priority),
       (s, flags, priority), DL("cudaStreamCreate").hex("stream", r ? nullptr : *s).num("flags", flags))
DRIVER("cuStreamDestroy", cuStreamDestroy_v2, (CUstream s), (s), DL("cudaStreamDestroy").hex("stream", s))
DRIVER_PT("cuStreamSynchronize", cuStreamSynchronize, _ptsz, (CUstream s), (s),
          DL("cudaStreamSynchronize").hex("stream", site.stream(s)))
DRIVER_PT("cuStreamQuery", cuStreamQuery, _ptsz, (CUstream s), (s), DL("cudaStreamQuery").hex("stream", site.stream(s)))
DRIVER_PT("cuStreamWaitEvent", cuStreamWaitEvent, _ptsz, (CUstream s, CUevent e, unsigned flags), (s, e, flags),
          DL("cudaStreamWaitEvent").hex("stream", site.stream(s)).hex("event", e))
DRIVER_PT("cuStreamBeginCapture", cuStreamBeginCapture_v2, _ptsz, (CUstream s, CUstreamCaptureMode mode), (s, mode),
          DL("cudaStreamBeginCapture").hex("stream", site.stream(s)).num("mode", mode))
#if CUDA_VERSION >= 12030
DRIVER_PT("cuStreamBeginCaptureToGraph", cuStreamBeginCaptureToGraph, _ptsz,
          (CUstream s, CUgraph g, const CUgraphNode *deps, const CUgraphEdgeData *edges, size_t n, CUstreamCaptureMode mode),
          (s, g, deps, edges, n, mode),
          DL("cudaStreamBeginCapture").hex("stream", site.stream(s)).num("mode", mode).hex("graph", g))
#endif
DRIVER_PT("cuStreamEndCapture", cuStreamEndCapture, _ptsz, (CUstream s, CUgraph *g), (s, g),
          DL("cudaStreamEndCapture").hex("stream", site.stream(s)).hex("graph", r ? nullptr : *g))
DRIVER("cuEventCreate", cuEventCreate, (CUevent *e, unsigned flags), (e, flags),
       DL("cudaEventCreate").hex("event", r ? nullptr : *e).num("flags", flags))
DRIVER("cuEventDestroy", cuEventDestroy_v2, (CUevent e), (e), DL("cudaEventDestroy").hex("event", e))
DRIVER_PT("cuEventRecord", cuEventRecord, _ptsz, (CUevent e, CUstream s), (e, s),
          DL("cudaEventRecord").hex("event", e).hex("stream", site.stream(s)))
DRIVER_PT("cuEventRecordWithFlags", cuEventRecordWithFlags, _ptsz, (CUevent e, CUstream s, unsigned flags),
          (e, s, flags), DL("cudaEventRecord").hex("event", e).hex("stream", site.stream(s)).num("flags", flags))
DRIVER("cuEventSynchronize", cuEventSynchronize, (CUevent e), (e), DL("cudaEventSynchronize").hex("event", e))
DRIVER("cuEventQuery", cuEventQuery, (CUevent e), (e), DL("cudaEventQuery").hex("event", e))
DRIVER("cuIpcGetEventHandle", cuIpcGetEventHandle, (CUipcEventHandle *h, CUevent e), (h, e),
       DL("cudaIpcGetEventHandle").hex("event", e).num("handle", r ? 0 : key_of(h->reserved, sizeof h->reserved)))
DRIVER("cuIpcOpenEventHandle", cuIpcOpenEventHandle, (CUevent *e, CUipcEventHandle h), (e, h),
       DL("cudaIpcOpenEventHandle").hex("event", r ? nullptr : *e).num("handle", key_of(h.reserved, sizeof h.reserved)))
DRIVER("cuCtxSynchronize", cuCtxSynchronize, (void), (), DL("cudaDeviceSynchronize"))  // a device-wide host wait
DRIVER_PT("cuLaunchHostFunc", cuLaunchHostFunc, _ptsz, (CUstream s, CUhostFn f, void *data), (s, f, data),
          DL("cudaLaunchHostFunc").hex("stream", site.stream(s)))

// memory
DRIVER("cuMemAlloc", cuMemAlloc_v2, (CUdeviceptr *p, size_t n), (p, n),
       DL("cudaMalloc").hex("ptr", r ? 0 : *p).num("size", n))
DRIVER("cuMemFree", cuMemFree_v2, (CUdeviceptr p), (p), DL("cudaFree").hex("ptr", p))
DRIVER_PT("cuMemAllocAsync", cuMemAllocAsync, _ptsz, (CUdeviceptr *p, size_t n, CUstream s), (p, n, s),
          DL("cudaMallocAsync").hex("ptr", r ? 0 : *p).num("size", n).hex("stream", site.stream(s)))
DRIVER_PT("cuMemAllocFromPoolAsync", cuMemAllocFromPoolAsync, _ptsz,
          (CUdeviceptr *p, size_t n, CUmemoryPool pool, CUstream s), (p, n, pool, s),
          DL("cudaMallocAsync").hex("ptr", r ? 0 : *p).num("size", n).hex("stream", site.stream(s)).hex("pool", pool))
DRIVER_PT("cuMemFreeAsync", cuMemFreeAsync, _ptsz, (CUdeviceptr p, CUstream s), (p, s),
          DL("cudaFreeAsync").hex("ptr", p).hex("stream", site.stream(s)))
// copies: "kind" as cudaMemcpyKind says it (cuMemcpy and cuMemcpyAsync take unified addresses: cudaMemcpyDefault)
DRIVER_PT("cuMemcpy", cuMemcpy, _ptds, (CUdeviceptr dst, CUdeviceptr src, size_t n), (dst, src, n),
          DL("cudaMemcpy").hex("dst", dst).hex("src", src).num("size", n).num("kind", cudaMemcpyDefault))
DRIVER_PT("cuMemcpyHtoD", cuMemcpyHtoD_v2, _ptds, (CUdeviceptr dst, const void *src, size_t n), (dst, src, n),
          DL("cudaMemcpy").hex("dst", dst).hex("src", src).num("size", n).num("kind", cudaMemcpyHostToDevice))
DRIVER_PT("cuMemcpyDtoH", cuMemcpyDtoH_v2, _ptds, (void *dst, CUdeviceptr src, size_t n), (dst, src, n),
          DL("cudaMemcpy").hex("dst", dst).hex("src", src).num("size", n).num("kind", cudaMemcpyDeviceToHost))
DRIVER_PT("cuMemcpyDtoD", cuMemcpyDtoD_v2, _ptds, (CUdeviceptr dst, CUdeviceptr src, size_t n), (dst, src, n),
          DL("cudaMemcpy").hex("dst", dst).hex("src", src).num("size", n).num("kind", cudaMemcpyDeviceToDevice))
DRIVER_PT("cuMemcpyAsync", cuMemcpyAsync, _ptsz, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s),
          (dst, src, n, s), DL("cudaMemcpyAsync").hex("dst", dst).hex("src", src).num("size", n)
          .num("kind", cudaMemcpyDefault).hex("stream", site.stream(s)))
DRIVER_PT("cuMemcpyHtoDAsync", cuMemcpyHtoDAsync_v2, _ptsz, (CUdeviceptr dst, const void *src, size_t n, CUstream s),
          (dst, src, n, s), DL("cudaMemcpyAsync").hex("dst", dst).hex("src", src).num("size", n)
          .num("kind", cudaMemcpyHostToDevice).hex("stream", site.stream(s)))
DRIVER_PT("cuMemcpyDtoHAsync", cuMemcpyDtoHAsync_v2, _ptsz, (void *dst, CUdeviceptr src, size_t n, CUstream s),
          (dst, src, n, s), DL("cudaMemcpyAsync").hex("dst", dst).hex("src", src).num("size", n)
          .num("kind", cudaMemcpyDeviceToHost).hex("stream", site.stream(s)))
DRIVER_PT("cuMemcpyDtoDAsync", cuMemcpyDtoDAsync_v2, _ptsz, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s),
          (dst, src, n, s), DL("cudaMemcpyAsync").hex("dst", dst).hex("src", src).num("size", n)
          .num("kind", cudaMemcpyDeviceToDevice).hex("stream", site.stream(s)))
// sets: "size" in bytes (N elements of 1, 2 or 4)
DRIVER_PT("cuMemsetD8", cuMemsetD8_v2, _ptds, (CUdeviceptr p, unsigned char v, size_t n), (p, v, n),
          DL("cudaMemset").hex("dst", p).num("size", n))
DRIVER_PT("cuMemsetD16", cuMemsetD16_v2, _ptds, (CUdeviceptr p, unsigned short v, size_t n), (p, v, n),
          DL("cudaMemset").hex("dst", p).num("size", 2 * n))
DRIVER_PT("cuMemsetD32", cuMemsetD32_v2, _ptds, (CUdeviceptr p, unsigned int v, size_t n), (p, v, n),
          DL("cudaMemset").hex("dst", p).num("size", 4 * n))
DRIVER_PT("cuMemsetD8Async", cuMemsetD8Async, _ptsz, (CUdeviceptr p, unsigned char v, size_t n, CUstream s),
          (p, v, n, s), DL("cudaMemsetAsync").hex("dst", p).num("size", n).hex("stream", site.stream(s)))
DRIVER_PT("cuMemsetD16Async", cuMemsetD16Async, _ptsz, (CUdeviceptr p, unsigned short v, size_t n, CUstream s),
          (p, v, n, s), DL("cudaMemsetAsync").hex("dst", p).num("size", 2 * n).hex("stream", site.stream(s)))
DRIVER_PT("cuMemsetD32Async", cuMemsetD32Async, _ptsz, (CUdeviceptr p, unsigned int v, size_t n, CUstream s),
          (p, v, n, s), DL("cudaMemsetAsync").hex("dst", p).num("size", 4 * n).hex("stream", site.stream(s)))

// pools
DRIVER("cuMemPoolSetAttribute", cuMemPoolSetAttribute, (CUmemoryPool pool, CUmemPool_attribute attr, void *v),
       (pool, attr, v), DL("cudaMemPoolSetAttribute").hex("pool", pool).num("attr", attr).num("value", attr_value(attr, v)))
DRIVER("cuMemPoolGetAttribute", cuMemPoolGetAttribute, (CUmemoryPool pool, CUmemPool_attribute attr, void *v),
       (pool, attr, v),
       DL("cudaMemPoolGetAttribute").hex("pool", pool).num("attr", attr).num("value", r ? 0 : attr_value(attr, v)))
DRIVER("cuMemPoolTrimTo", cuMemPoolTrimTo, (CUmemoryPool pool, size_t keep), (pool, keep),
       DL("cudaMemPoolTrimTo").hex("pool", pool).num("size", keep))
DRIVER("cuDeviceGetDefaultMemPool", cuDeviceGetDefaultMemPool, (CUmemoryPool *pool, CUdevice dev), (pool, dev),
       DL("cudaDeviceGetDefaultMemPool").hex("pool", r ? nullptr : *pool).num("dev", dev))
DRIVER("cuDeviceGetMemPool", cuDeviceGetMemPool, (CUmemoryPool *pool, CUdevice dev), (pool, dev),
       DL("cudaDeviceGetMemPool").hex("pool", r ? nullptr : *pool).num("dev", dev))
DRIVER("cuDeviceSetMemPool", cuDeviceSetMemPool, (CUdevice dev, CUmemoryPool pool), (dev, pool),
       DL("cudaDeviceSetMemPool").hex("pool", pool).num("dev", dev))
DRIVER("cuMemPoolCreate", cuMemPoolCreate, (CUmemoryPool *pool, const CUmemPoolProps *props), (pool, props),
       DL("cudaMemPoolCreate").hex("pool", r ? nullptr : *pool).num("max_size", props ? max_size(props, 0) : 0))
DRIVER("cuMemPoolDestroy", cuMemPoolDestroy, (CUmemoryPool pool), (pool), DL("cudaMemPoolDestroy").hex("pool", pool))
DRIVER("cuMemPoolExportPointer", cuMemPoolExportPointer, (CUmemPoolPtrExportData *data, CUdeviceptr p), (data, p),
       DL("cudaMemPoolExportPointer").hex("ptr", p)
       .num("key", r || !data ? 0 : key_of(data->reserved, sizeof data->reserved)))
DRIVER("cuMemPoolImportPointer", cuMemPoolImportPointer, (CUdeviceptr *p, CUmemoryPool pool, CUmemPoolPtrExportData *data),
       (p, pool, data), DL("cudaMemPoolImportPointer").hex("ptr", r ? 0 : *p).hex("pool", pool)
       .num("key", data ? key_of(data->reserved, sizeof data->reserved) : 0))

// kernels
DRIVER_PT("cuLaunchKernel", cuLaunchKernel, _ptsz,
          (CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned shmem,
           CUstream s, void **args, void **extra),
          (f, gx, gy, gz, bx, by, bz, shmem, s, args, extra),
          Line line("cudaLaunchKernel", r, &site); launch(line, (void *)f, false, args, site.stream(s), extra))
DRIVER_PT("cuLaunchKernelEx", cuLaunchKernelEx, _ptsz, (const CUlaunchConfig *config, CUfunction f, void **args,
          void **extra), (config, f, args, extra),
          Line line("cudaLaunchKernel", r, &site);
          launch(line, (void *)f, false, args, site.stream(config ? config->hStream : nullptr), extra))

// graphs
DRIVER("cuGraphInstantiateWithFlags", cuGraphInstantiateWithFlags, (CUgraphExec *exec, CUgraph g, unsigned long long flags),
       (exec, g, flags), DL("cudaGraphInstantiate").hex("exec", r ? nullptr : *exec).hex("graph", g)
       .raw("nodes", graph_json((cudaGraph_t)g)))
DRIVER_PT("cuGraphInstantiateWithParams", cuGraphInstantiateWithParams, _ptsz,
          (CUgraphExec *exec, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS *p), (exec, g, p),
          DL("cudaGraphInstantiate").hex("exec", r ? nullptr : *exec).hex("graph", g).raw("nodes", graph_json((cudaGraph_t)g));
          if (!r && p && p->hUploadStream && (p->flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD))
              DL("cudaGraphUpload").hex("exec", *exec).hex("stream", p->hUploadStream))
DRIVER_PT("cuGraphLaunch", cuGraphLaunch, _ptsz, (CUgraphExec exec, CUstream s), (exec, s),
          DL("cudaGraphLaunch").hex("exec", exec).hex("stream", site.stream(s)))
DRIVER_PT("cuGraphUpload", cuGraphUpload, _ptsz, (CUgraphExec exec, CUstream s), (exec, s),
          DL("cudaGraphUpload").hex("exec", exec).hex("stream", site.stream(s)))
DRIVER("cuGraphExecDestroy", cuGraphExecDestroy, (CUgraphExec exec), (exec), DL("cudaGraphExecDestroy").hex("exec", exec))
DRIVER("cuDeviceGraphMemTrim", cuDeviceGraphMemTrim, (CUdevice dev), (dev), DL("cudaDeviceGraphMemTrim").num("dev", dev))

// ---- the lookups: each answers with the wrapper of the call it found -------------------------------------------------
namespace {
typedef CUresult (*ProcAddress)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

// What the driver's own cuGetProcAddress gives for `symbol` at the version of the headers this was built with.
void *found(const char *symbol, cuuint64_t flags) {
    static auto lookup = (ProcAddress)driver("cuGetProcAddress_v2");
    void *p = nullptr;
    CUdriverProcAddressQueryResult status;
    return lookup && lookup(symbol, &p, CUDA_VERSION, flags, &status) == CUDA_SUCCESS ? p : nullptr;
}

// The pointer a lookup of `symbol` answers the program with: the wrapper that records it, calling `p`. `p` is known
// by comparing it with the legacy and the per-thread flavour the driver gives for these headers' version; any other
// (a version of the call older than these headers', with other arguments) is handed out unwrapped.
void *wrapped(const char *symbol, void *p) {
    if (!symbol || !p) return p;
    if (std::strcmp(symbol, "cuGetProcAddress") == 0)  // so that the lookups it makes are answered here too
        return p == found(symbol, CU_GET_PROC_ADDRESS_DEFAULT) ? (void *)&cuGetProcAddress_v2 : p;
    const char *as = std::strcmp(symbol, "cuGraphInstantiate") == 0 ? "cuGraphInstantiateWithFlags" : symbol;
    for (int i = 0; i < n_entries; ++i) {
        Entry *e = entries[i];
        if (std::strcmp(e->as, as) != 0) continue;
        void *legacy = found(symbol, CU_GET_PROC_ADDRESS_LEGACY_STREAM);
        void *pt = found(symbol, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
        if (e->pt_site && p == pt && pt != legacy) {
            e->pt_site->fn.store(p);
            return e->pt_wrapper;
        }
        if (p == legacy) {
            e->site->fn.store(p);
            return e->wrapper;
        }
        return p;
    }
    return p;
}
}  // namespace

extern "C" {

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *status) {
    static Site site{"cuGetProcAddress", "cuGetProcAddress_v2", false};
    CUresult r = site.get<ProcAddress>()(symbol, pfn, version, flags, status);
    if (r == CUDA_SUCCESS && pfn) *pfn = wrapped(symbol, *pfn);
    return r;
}
#undef cuGetProcAddress
CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags) {  // CUDA 11's
    static Site site{"cuGetProcAddress", "cuGetProcAddress", false};
    CUresult r = site.get<CUresult (*)(const char *, void **, int, cuuint64_t)>()(symbol, pfn, version, flags);
    if (r == CUDA_SUCCESS && pfn) *pfn = wrapped(symbol, *pfn);
    return r;
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#define ENTRY_POINT(NAME, PARAMS, ARGS)                                                                                \
    cudaError_t NAME PARAMS {                                                                                          \
        REAL(NAME, const char *, void **, ENTRY_POINT_TYPES);                                                          \
        cudaError_t r = fn ARGS;                                                                                       \
        if (r == cudaSuccess && fp) *fp = wrapped(symbol, *fp);                                                        \
        return r;                                                                                                      \
    }
#define ENTRY_POINT_TYPES unsigned long long, cudaDriverEntryPointQueryResult *
ENTRY_POINT(cudaGetDriverEntryPoint, (const char *symbol, void **fp, unsigned long long flags,
                                      cudaDriverEntryPointQueryResult *st), (symbol, fp, flags, st))
ENTRY_POINT(cudaGetDriverEntryPoint_ptsz, (const char *symbol, void **fp, unsigned long long flags,
                                           cudaDriverEntryPointQueryResult *st), (symbol, fp, flags, st))
#undef ENTRY_POINT_TYPES
#if CUDART_VERSION >= 12050
#define ENTRY_POINT_TYPES unsigned int, unsigned long long, cudaDriverEntryPointQueryResult *
ENTRY_POINT(cudaGetDriverEntryPointByVersion, (const char *symbol, void **fp, unsigned int version,
                                               unsigned long long flags, cudaDriverEntryPointQueryResult *st),
            (symbol, fp, version, flags, st))
ENTRY_POINT(cudaGetDriverEntryPointByVersion_ptsz, (const char *symbol, void **fp, unsigned int version,
                                                    unsigned long long flags, cudaDriverEntryPointQueryResult *st),
            (symbol, fp, version, flags, st))
#undef ENTRY_POINT_TYPES
#endif
#pragma GCC diagnostic pop

// ---- the processes the program starts: only an exec of this same program gets the record's channel back ------------
int execve(const char *path, char *const argv[], char *const envp[]) {
    return with_channel(path, envp, [&](char *const *env) { return real_execve(path, argv, env); });
}
int execv(const char *path, char *const argv[]) {
    return with_channel(path, environ, [&](char *const *env) { return real_execve(path, argv, env); });
}
int execvpe(const char *file, char *const argv[], char *const envp[]) {
    if (std::strchr(file, '/'))  // a path: the file itself (a bare name is searched on PATH, never this program)
        return with_channel(file, envp, [&](char *const *env) { return real_execve(file, argv, env); });
    return real_execvpe(file, argv, envp);
}
int execvp(const char *file, char *const argv[]) { return execvpe(file, argv, environ); }
int posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *actions, const posix_spawnattr_t *attr,
                char *const argv[], char *const envp[]) {
    return with_channel(path, envp, [&](char *const *env) { return real_spawn(pid, path, actions, attr, argv, env); });
}
int posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *actions,
                 const posix_spawnattr_t *attr, char *const argv[], char *const envp[]) {
    if (std::strchr(file, '/'))
        return with_channel(file, envp, [&](char *const *env) { return real_spawn(pid, file, actions, attr, argv, env); });
    return real_spawnp(pid, file, actions, attr, argv, envp);
}

}  // extern "C"
