// cuda_timing.h: how the GPU benchmarks time work on the device.
#pragma once

#include <cuda_runtime.h>

#include <functional>

#include "cuda/check.h"

namespace shardlab {

// Milliseconds per call of `work` (which queues on `stream`): three warm-up calls (the first may
// create a cuBLAS handle or pick kernels), then the mean over `reps` calls between two events,
// on the GPU's own clock.
inline double device_ms_per_call(cudaStream_t stream, int reps, const std::function<void()>& work) {
  for (int i = 0; i < 3; ++i) work();
  cudaEvent_t start = nullptr, stop = nullptr;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  CUDA_CHECK(cudaEventRecord(start, stream));
  for (int i = 0; i < reps; ++i) work();
  CUDA_CHECK(cudaEventRecord(stop, stream));
  CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  return static_cast<double>(ms) / reps;
}

}  // namespace shardlab
