// cuda_probe.cu: the first CUDA code the build compiles, so a CUDA toolchain problem shows at
// once, even on a machine without a GPU.
//   nvcc is driven by CMake: cmake --preset default && cmake --build --preset default
#include "cuda_probe.h"

#include <cuda_runtime.h>

#include <filesystem>
#include <string>
#include <system_error>

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
  if (err != cudaSuccess) {
    // Without a driver the runtime says "CUDA driver version is insufficient", which reads
    // like an old driver; on a machine with no GPU at all say that first.
    const std::string runtime = std::string("CUDA runtime: ") + cudaGetErrorString(err);
    std::error_code ec;
    if (!std::filesystem::exists("/dev/nvidiactl", ec)) return "no NVIDIA GPU or driver found on this machine; " + runtime;
    return runtime;
  }
  if (n == 0) return "no CUDA device visible";
  return "";
}

}  // namespace shardlab
