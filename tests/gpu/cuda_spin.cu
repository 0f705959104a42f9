// cuda_spin.cu: a kernel that keeps a stream busy for a stated wall time, for the CUDA device's
// tests that need another stream's work still running (cuda_test_ops.cpp).
//
// Build and run: part of shardlab_cuda_tests when the build has CUDA (tests/CMakeLists.txt);
//   cmake --build --preset default --target shardlab_cuda_tests && build/tests/shardlab_cuda_tests
//
// Why wall time and not a fixed amount of work: under compute-sanitizer every instrumented
// access costs thousands of times its normal price, so work sized to take milliseconds on the
// GPU took racecheck more than 240 s. One thread reading the GPU's global nanosecond timer
// touches no memory the tools instrument, and ends after the same time with or without them.
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/check.h"

namespace {

__device__ uint64_t global_timer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// One thread of one block: spins until `ns` nanoseconds have passed on the GPU's clock.
__global__ void spin_kernel(int64_t ns) {
  const uint64_t start = global_timer_ns();
  while (global_timer_ns() - start < static_cast<uint64_t>(ns)) __nanosleep(1000);
}

}  // namespace

void cuda_spin(int64_t ns, void* stream) {
  spin_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(ns);
  CUDA_CHECK(cudaGetLastError());
}
