// runtime_only.cu: a program that uses the runtime alone; its record must hold one line per call it made (the
// runtime's own use of the driver never appears). tests/test_recorder.py runs it live.
#include "course.cuh"

__global__ void touch(int *p) { p[threadIdx.x] += 1; }

int main() {
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    int *p = nullptr;
    CHECK(cudaMallocAsync(&p, 32 * sizeof(int), s));
    touch<<<1, 32, 0, s>>>(p);
    CHECK_LAUNCH();
    CHECK(cudaFreeAsync(p, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaStreamDestroy(s));
    return 0;
}
