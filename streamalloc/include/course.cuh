// course.cuh: the helpers every program of the course shares, as cuda-samples shares helper_cuda.h.
// Nothing here allocates stream-ordered memory: the API a lesson teaches stays in the lesson's program.
//
//   CHECK(call), CHECK_LAUNCH()   stop the program with file, line and CUDA's error text on any error
//   course::reached(query)        cudaEventQuery/cudaStreamQuery: true when done, false while pending
//   course::Clock, us_since(t0), us_between(a, b)          host time of an API call, in microseconds
//   course::us_between(e0, e1)    GPU time between two events recorded on the stream doing the work
//   course::gpu_ns()              the GPU's global timer, in a kernel
//   course::spin<<<1,1,0,s>>>(ns) keeps stream s busy for ns nanoseconds, touching no memory
//   course::fill<<<grid(n),256,0,s>>>(p, n, v)   writes v to p[0..n)
//   course::grid(n)               blocks for a grid-stride kernel over n elements
//   course::pool_attr(pool, attr) one attribute of a memory pool (reserved, used, threshold, ...)
//   course::graph_attr(dev, attr) the same for the graph allocator (cudaDeviceGetGraphMemAttribute)
//   course::arg_size(argv[i]), arg_int(argv[i])  command-line numbers, with a clear error
//   course::Json().add("k", v).add("us", vector).print();  one JSON object per line, for Python
#pragma once
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>
#include <cuda_runtime.h>

#define CHECK(call)                                                                    \
    do {                                                                               \
        cudaError_t err_ = (call);                                                     \
        if (err_ != cudaSuccess) {                                                     \
            std::fprintf(stderr, "%s:%d: %s failed: %s (%s)\n", __FILE__, __LINE__,   \
                         #call, cudaGetErrorString(err_), cudaGetErrorName(err_));     \
            std::exit(1);                                                              \
        }                                                                              \
    } while (0)

#define CHECK_LAUNCH() CHECK(cudaGetLastError())

namespace course {

// ---- asking whether work is done ---------------------------------------------------------------
// cudaEventQuery and cudaStreamQuery answer cudaErrorNotReady while work is pending: an answer, not
// an error. Any other error stops the program.
inline bool reached(cudaError_t query) {
    if (query == cudaErrorNotReady) {
        cudaError_t last = cudaGetLastError();  // clear it, in case the runtime recorded it
        if (last != cudaSuccess && last != cudaErrorNotReady) CHECK(last);
        return false;
    }
    CHECK(query);
    return true;
}

// ---- host time: what an API call costs the calling thread ------------------------------------------
using Clock = std::chrono::steady_clock;
inline double us_between(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::micro>(b - a).count();
}
inline double us_since(Clock::time_point t0) { return us_between(t0, Clock::now()); }

// ---- GPU time: events recorded on the stream that does the work -----------------------------------
inline double us_between(cudaEvent_t start, cudaEvent_t stop) {
    float ms = 0.0f;
    CHECK(cudaEventElapsedTime(&ms, start, stop));
    return 1000.0 * ms;
}

// The GPU's global timer in nanoseconds (the same clock on every SM).
__device__ __forceinline__ unsigned long long gpu_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// Keeps its stream busy for `ns` nanoseconds and touches no memory; launch it <<<1, 1, 0, stream>>>.
// If `stamps` is given, it writes when it started and when it stopped (gpu_ns) to stamps[0..1].
__global__ void spin(unsigned long long ns, unsigned long long* stamps = nullptr) {
    const unsigned long long t0 = gpu_ns();
    unsigned long long t = t0;
    while (t - t0 < ns) t = gpu_ns();
    if (stamps) {
        stamps[0] = t0;
        stamps[1] = t;
    }
}

// Writes v to p[0..n), grid-stride: launch it <<<course::grid(n), 256, 0, stream>>>.
template <typename T>
__global__ void fill(T* p, size_t n, T v) {
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<size_t>(gridDim.x) * blockDim.x)
        p[i] = v;
}

// Blocks for a grid-stride kernel of 256 threads over n elements: enough to fill the current GPU.
inline unsigned grid(size_t n, unsigned threads = 256) {
    int dev = 0, sms = 0;
    CHECK(cudaGetDevice(&dev));
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    const size_t want = (n + threads - 1) / threads, most = 16 * static_cast<size_t>(sms);
    return static_cast<unsigned>(want < 1 ? 1 : (want < most ? want : most));
}

// ---- memory pools -----------------------------------------------------------------------------
// One attribute of a pool: cudaMemPoolAttrReservedMemCurrent, ...UsedMemCurrent, ...ReleaseThreshold, ...
inline uint64_t pool_attr(cudaMemPool_t pool, cudaMemPoolAttr attr) {
    uint64_t v = 0;
    CHECK(cudaMemPoolGetAttribute(pool, attr, &v));
    return v;
}

// The graph allocator's counterpart: cudaGraphMemAttrUsedMemCurrent, ...ReservedMemCurrent, ...High.
inline uint64_t graph_attr(int device, cudaGraphMemAttributeType attr) {
    uint64_t v = 0;
    CHECK(cudaDeviceGetGraphMemAttribute(device, attr, &v));
    return v;
}

// ---- command-line numbers ---------------------------------------------------------------------
inline unsigned long long arg_size(const char* text) {
    char* end = nullptr;
    const unsigned long long v = std::strtoull(text, &end, 0);
    if (!end || *end || end == text) {
        std::fprintf(stderr, "not a number: '%s'\n", text);
        std::exit(2);
    }
    return v;
}
inline int arg_int(const char* text) { return static_cast<int>(arg_size(text)); }

// ---- output: one JSON object per line, which Python reads (lesson.run(...).records) ---------------
//   course::Json().add("size", bytes).add("call", "cudaMallocAsync").add("us", times).print();
class Json {
  public:
    Json& add(const char* key, const char* v) { return raw(key, quote(v)); }
    Json& add(const char* key, const std::string& v) { return raw(key, quote(v.c_str())); }
    Json& add(const char* key, bool v) { return raw(key, v ? "true" : "false"); }
    Json& add(const char* key, int v) { return raw(key, std::to_string(v)); }
    Json& add(const char* key, long v) { return raw(key, std::to_string(v)); }
    Json& add(const char* key, long long v) { return raw(key, std::to_string(v)); }
    Json& add(const char* key, unsigned v) { return raw(key, std::to_string(v)); }
    Json& add(const char* key, unsigned long v) { return raw(key, std::to_string(v)); }
    Json& add(const char* key, unsigned long long v) { return raw(key, std::to_string(v)); }
    Json& add(const char* key, double v) { return raw(key, number(v)); }
    Json& add(const char* key, const void* p) {  // a pointer, as a hexadecimal string
        char buf[32];
        std::snprintf(buf, sizeof buf, "\"0x%" PRIxPTR "\"", reinterpret_cast<uintptr_t>(p));
        return raw(key, buf);
    }
    template <typename T>
    Json& add(const char* key, const std::vector<T>& values) {
        std::string s = "[";
        for (size_t i = 0; i < values.size(); ++i) s += (i ? "," : "") + Json().add("v", values[i]).value_;
        return raw(key, s + "]");
    }
    void print() const {
        std::printf("{%s}\n", body_.c_str());
        std::fflush(stdout);
    }

  private:
    std::string body_, value_;
    Json& raw(const char* key, const std::string& v) {
        body_ += (body_.empty() ? "" : ",") + quote(key) + ":" + v;
        value_ = v;
        return *this;
    }
    static std::string number(double v) {
        if (v != v || v - v != 0) return "null";  // NaN and infinity are not JSON
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.9g", v);
        return buf;
    }
    static std::string quote(const char* s) {
        std::string q = "\"";
        for (; *s; ++s) {
            if (*s == '"' || *s == '\\') q += '\\';
            if (static_cast<unsigned char>(*s) < 0x20) {
                char buf[8];
                std::snprintf(buf, sizeof buf, "\\u%04x", *s);
                q += buf;
            } else {
                q += *s;
            }
        }
        return q + "\"";
    }
};

}  // namespace course
