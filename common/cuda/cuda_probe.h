// cuda_probe.h: is there a GPU? Answered by the CUDA runtime when the build has CUDA, else 0.
#pragma once

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

}  // namespace shardlab
