// every_way.cu: one stream-ordered allocation and its free through each way a program reaches CUDA's driver API, and
// a kernel launched through it. Each way prints {"way", "size", "ptr", "stream"} (the stream the record must name:
// cudaStreamPerThread, 0x2, for the per-thread flavour given a null stream); tests/test_recorder.py runs it live with
// the recorder and finds each call in the record once, in this order. Built with -cudart shared and -lcuda.
#include <cuda.h>
#include "course.cuh"
#include "course_section.cuh"

#define CU(call)                                                                                                       \
    do {                                                                                                               \
        const CUresult r_ = (call);                                                                                    \
        if (r_ != CUDA_SUCCESS) {                                                                                      \
            std::fprintf(stderr, "%s failed: %d\n", #call, (int)r_);                                                  \
            std::exit(1);                                                                                              \
        }                                                                                                              \
    } while (0)

extern "C" CUresult cuMemAllocAsync_ptsz(CUdeviceptr *, size_t, CUstream);  // what cuda.h names under
extern "C" CUresult cuMemFreeAsync_ptsz(CUdeviceptr, CUstream);             // CUDA_API_PER_THREAD_DEFAULT_STREAM
typedef CUresult (*Alloc)(CUdeviceptr *, size_t, CUstream);
typedef CUresult (*Free)(CUdeviceptr, CUstream);
typedef CUresult (*Lookup)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

__global__ void touch(int *p) { p[threadIdx.x] += 1; }

static const void *per_thread = (const void *)CU_STREAM_PER_THREAD;

static void one(const char *way, void *alloc, void *free_fn, size_t size, CUstream s, const void *recorded) {
    CUdeviceptr p = 0;
    CU(((Alloc)alloc)(&p, size, s));
    CU(((Free)free_fn)(p, s));
    course::Json().add("way", way).add("size", size).add("ptr", (const void *)(uintptr_t)p).add("stream", recorded)
        .print();
}

int main() {
    CHECK(cudaSetDevice(0));
    CHECK(cudaFree(nullptr));  // the runtime's primary context, current on this thread for the driver's calls
    course::section("runtime");
    cudaStream_t rs;
    CHECK(cudaStreamCreateWithFlags(&rs, cudaStreamNonBlocking));
    void *rp = nullptr;
    CHECK(cudaMallocAsync(&rp, 999, rs));
    CHECK(cudaFreeAsync(rp, rs));
    CHECK(cudaStreamSynchronize(rs));

    course::section("driver");
    CUstream s;
    CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    one("direct", (void *)&cuMemAllocAsync, (void *)&cuMemFreeAsync, 1001, s, s);
    one("direct per-thread", (void *)&cuMemAllocAsync_ptsz, (void *)&cuMemFreeAsync_ptsz, 1002, nullptr, per_thread);

    void *a = nullptr, *f = nullptr;
    CUdriverProcAddressQueryResult found;
    CU(cuGetProcAddress("cuMemAllocAsync", &a, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &found));
    CU(cuGetProcAddress("cuMemFreeAsync", &f, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &found));
    one("cuGetProcAddress", a, f, 1003, s, s);
    CU(cuGetProcAddress("cuMemAllocAsync", &a, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &found));
    CU(cuGetProcAddress("cuMemFreeAsync", &f, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &found));
    one("cuGetProcAddress per-thread", a, f, 1004, nullptr, per_thread);
    void *lookup = nullptr;  // cuGetProcAddress found through itself
    CU(cuGetProcAddress("cuGetProcAddress", &lookup, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &found));
    CU(((Lookup)lookup)("cuMemAllocAsync", &a, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &found));
    CU(((Lookup)lookup)("cuMemFreeAsync", &f, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &found));
    one("cuGetProcAddress of cuGetProcAddress", a, f, 1005, s, s);

    cudaDriverEntryPointQueryResult status;
    CHECK(cudaGetDriverEntryPoint("cuMemAllocAsync", &a, cudaEnableDefault, &status));
    CHECK(cudaGetDriverEntryPoint("cuMemFreeAsync", &f, cudaEnableDefault, &status));
    one("cudaGetDriverEntryPoint", a, f, 1006, s, s);
    CHECK(cudaGetDriverEntryPoint("cuMemAllocAsync", &a, cudaEnablePerThreadDefaultStream, &status));
    CHECK(cudaGetDriverEntryPoint("cuMemFreeAsync", &f, cudaEnablePerThreadDefaultStream, &status));
    one("cudaGetDriverEntryPoint per-thread", a, f, 1007, nullptr, per_thread);
#if CUDART_VERSION >= 12050
    CHECK(cudaGetDriverEntryPointByVersion("cuMemAllocAsync", &a, 12000, cudaEnableDefault, &status));
    CHECK(cudaGetDriverEntryPointByVersion("cuMemFreeAsync", &f, 12000, cudaEnableDefault, &status));
    one("cudaGetDriverEntryPointByVersion", a, f, 1008, s, s);
#endif

    CUdeviceptr k = 0;  // a kernel launched through the driver, given a stream-ordered buffer
    CU(cuMemAllocAsync(&k, 32 * sizeof(int), s));
    cudaFunction_t fn;
    CHECK(cudaGetFuncBySymbol(&fn, (const void *)touch));
    void *args[] = {&k};
    CU(cuLaunchKernel((CUfunction)fn, 1, 1, 1, 32, 1, 1, 0, s, args, nullptr));
    CU(cuMemFreeAsync(k, s));
    course::Json().add("way", "kernel").add("ptr", (const void *)(uintptr_t)k).add("stream", (const void *)s).print();
    CU(cuCtxSynchronize());
    CU(cuStreamDestroy(s));
    course::section("");
    return 0;
}
