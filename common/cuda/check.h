// check.h: every CUDA runtime, cuBLAS and NCCL call goes through one of these checks, so a
// failure stops the rank with the call, the place and the library's own words (and the job
// harness then brings the whole job down) instead of surfacing later as wrong numbers.
#pragma once

#include <stdexcept>
#include <string>

#include <cuda_runtime.h>

namespace shardlab::cuda {

[[noreturn]] inline void fail(const char* call, const char* file, int line, const std::string& why) {
  throw std::runtime_error(std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " + why);
}

}  // namespace shardlab::cuda

#define CUDA_CHECK(call)                                                                    \
  do {                                                                                      \
    const cudaError_t err_ = (call);                                                        \
    if (err_ != cudaSuccess) shardlab::cuda::fail(#call, __FILE__, __LINE__, cudaGetErrorString(err_)); \
  } while (0)
