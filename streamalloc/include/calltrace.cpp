// calltrace.cpp: the record of what a program did with the CUDA runtime, for the labs' checks.
//
// Built as a shared library (streamalloc/calls.py builds it) and preloaded (LD_PRELOAD) into a lab's program,
// itself built against the shared CUDA runtime (nvcc -cudart shared). Each call below goes to the runtime
// unchanged; on its way back, one JSON object per line is appended to the file $STREAMALLOC_CALLS names:
//   {"seq", "t" (CLOCK_MONOTONIC ns), "pid", "tid", "call", "ret" (the cudaError_t), ...the call's arguments}
// with streams, events, pools, graphs and pointers as hex strings, sizes and attribute values as numbers.
// A kernel launch names its kernel and lists its 8-byte arguments ("args", hex: the pointers it was given).
// At instantiation a graph's nodes (kernels with their pointer arguments, memory allocations and frees) and
// edges are written out, so a check reads the graph's own dependencies.
//
// What a macro, a member function, a lambda or a helper calls reaches the runtime through these same symbols,
// so the record does not depend on how the program is written. The record goes to a file the check opened,
// never to the program's stdout: nothing the program prints becomes part of it.
#include <atomic>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <dlfcn.h>
#include <fcntl.h>
#include <string>
#include <sys/syscall.h>
#include <unistd.h>
#include <vector>
#include <cuda_runtime_api.h>

namespace {

int out_fd = -1;
std::atomic<unsigned long long> next_seq{0};

__attribute__((constructor)) void open_record() {
    const char *path = std::getenv("STREAMALLOC_CALLS");
    if (path && *path) out_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
}

// One line of the record: {"seq", "t", "pid", "tid", "call", "ret", then what add() appends}.
struct Line {
    std::string s;
    Line(const char *call, int ret) {
        timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        char head[256];
        std::snprintf(head, sizeof head, "{\"seq\":%llu,\"t\":%lld,\"pid\":%d,\"tid\":%ld,\"call\":\"%s\",\"ret\":%d",
                      next_seq++, (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec, (int)getpid(),
                      (long)syscall(SYS_gettid), call, ret);
        s = head;
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
    Line &str(const char *k, const char *v) {
        s += ",\"";
        s += k;
        s += "\":\"";
        for (const char *c = v ? v : ""; *c; ++c)
            if (*c == '"' || *c == '\\') s += ' ';
            else if ((unsigned char)*c >= 32) s += *c;
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
        s += "}\n";
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

// `kernel` is a CUfunction (kernel_handle false) or a CUkernel (true).
std::string kernel_json(void *kernel, bool kernel_handle, void **args, const char **name_out) {
    auto get_name = (GetName)driver(kernel_handle ? "cuKernelGetName" : "cuFuncGetName");
    auto info = (ParamInfo)driver(kernel_handle ? "cuKernelGetParamInfo" : "cuFuncGetParamInfo");
    const char *name = nullptr;
    if (!get_name || get_name(&name, kernel) != 0) name = nullptr;
    *name_out = name;
    if (!info || !args) return "null";
    std::string out = "[";
    for (size_t i = 0; i < 64; ++i) {
        size_t offset = 0, size = 0;
        if (info(kernel, i, &offset, &size) != 0) break;
        char b[48];
        if (size == 8 && args[i]) {
            unsigned long long v;
            std::memcpy(&v, args[i], 8);
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

void launch(const char *call, int ret, void *kernel, bool kernel_handle, void **args, cudaStream_t s) {
    const char *name = nullptr;
    std::string a = kernel ? kernel_json(kernel, kernel_handle, args, &name) : "null";
    Line(call, ret).hex("stream", s).str("kernel", name ? name : "?").raw("args", a);
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
            cudaKernelNodeParams p{};
            if (cudaGraphKernelNodeGetParams(nodes[i], &p) == cudaSuccess) {
                const char *name = nullptr;
                void *f = function_of(p.func);
                std::string a = f ? kernel_json(f, false, p.kernelParams, &name) : "null";
                if (!f) cudaGetLastError();
                out += ",\"kernel\":\"" + std::string(name ? name : "?") + "\",\"args\":" + a;
            }
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
static unsigned long long key_of(const void *bytes, size_t n) {  // FNV-1a: the same handle in both processes
    unsigned long long key = 1469598103934665603ull;
    for (size_t i = 0; i < n; ++i) key = (key ^ ((const unsigned char *)bytes)[i]) * 1099511628211ull;
    return key >> 12;  // fits a JSON number exactly (53 bits)
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
static unsigned long long attr_value(cudaMemPoolAttr attr, const void *v) {
    if (!v) return 0;
    switch (attr) {  // the 64-bit attributes; the others (reuse policies) are int
    case cudaMemPoolAttrReleaseThreshold: case cudaMemPoolAttrReservedMemCurrent: case cudaMemPoolAttrReservedMemHigh:
    case cudaMemPoolAttrUsedMemCurrent: case cudaMemPoolAttrUsedMemHigh:
        return *(const unsigned long long *)v;
    default:
        return (unsigned long long)(unsigned)*(const int *)v;
    }
}
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
    Line("cudaMemPoolCreate", r).hex("pool", r ? nullptr : *pool).num("max_size", props ? props->maxSize : 0);
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
    launch("cudaLaunchKernel", r, function_of(f), false, args, s);
    return r;
}
// CUDA 13's <<<...>>> goes through these (crt/device_functions.h), with the kernel as a cudaKernel_t (a CUkernel)
cudaError_t __cudaLaunchKernel(void *kernel, dim3 grid, dim3 block, void **args, size_t shmem, cudaStream_t s) {
    REAL(__cudaLaunchKernel, void *, dim3, dim3, void **, size_t, cudaStream_t);
    cudaError_t r = fn(kernel, grid, block, args, shmem, s);
    launch("cudaLaunchKernel", r, kernel, true, args, s);
    return r;
}
cudaError_t __cudaLaunchKernel_ptsz(void *kernel, dim3 grid, dim3 block, void **args, size_t shmem, cudaStream_t s) {
    REAL(__cudaLaunchKernel_ptsz, void *, dim3, dim3, void **, size_t, cudaStream_t);
    cudaError_t r = fn(kernel, grid, block, args, shmem, s);
    launch("cudaLaunchKernel", r, kernel, true, args, s ? s : cudaStreamPerThread);
    return r;
}
cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *f, void **args) {
    REAL(cudaLaunchKernelExC, const cudaLaunchConfig_t *, const void *, void **);
    cudaError_t r = fn(config, f, args);
    launch("cudaLaunchKernel", r, function_of(f), false, args, config ? config->stream : nullptr);
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
