// course.cuh: the two helpers every program of the course uses, and nothing of the lesson itself.
//   CHECK(call)  stops the program with the file, line and CUDA's error text if a CUDA call fails.
//   CHECK_LAUNCH() checks the last kernel launch the same way.
// Programs print their measurements as one JSON object per line for Python to read.
#pragma once
#include <cstdio>
#include <cstdlib>
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
