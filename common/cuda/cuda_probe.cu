// cuda_probe.cu: the first CUDA code the build compiles, so a CUDA toolchain problem shows at
// once, even on a machine without a GPU.
//   nvcc is driven by CMake: cmake --preset default && cmake --build --preset default
#include "cuda_probe.h"

#include <cuda_runtime.h>

namespace shardlab {

int cuda_device_count() {
  int n = 0;
  // Without a driver or GPU this returns an error rather than crashing: that is our "no GPU".
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

std::string cuda_unavailable_reason() {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) return std::string("CUDA runtime: ") + cudaGetErrorString(err);
  if (n == 0) return "no CUDA device visible";
  return "";
}

}  // namespace shardlab
