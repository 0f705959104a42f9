// cuda_probe.h: is there a GPU? Answered by the CUDA runtime when the build has CUDA, else 0.
#pragma once

#include <cstdio>
#include <string>

namespace shardlab {

#ifdef SHARDLAB_WITH_CUDA
// Number of CUDA devices visible to this process; 0 without a driver or a GPU.
int cuda_device_count();
// Why there are none (the runtime's error string, ...); empty when there are some.
std::string cuda_unavailable_reason();
#else
inline int cuda_device_count() { return 0; }
inline std::string cuda_unavailable_reason() {
  return "this build has no CUDA: nvcc was not found or SHARDLAB_CUDA=OFF";
}
#endif

// Exit code of a program that needs a GPU and found none; ctest counts it as skipped.
constexpr int kSkippedExitCode = 77;

// For the programs that need a GPU (the kernel tests, the GPU benchmarks): with none visible,
// prints "skipped: no CUDA device visible (why)" and returns true; the program then returns
// kSkippedExitCode.
inline bool skipped_without_gpu() {
  if (cuda_device_count() > 0) return false;
  std::printf("skipped: no CUDA device visible (%s)\n", cuda_unavailable_reason().c_str());
  return true;
}

}  // namespace shardlab
