// f32_math.h: how the ops of ops.h and attention.h compute on bfloat16 tensors (mixed precision).
//
// Every op's math is written once, in float32. Handed bf16 tensors, it runs on float32 copies:
// each bf16 tensor the op touches is widened (exactly: device/bf16.h) before the math, and the
// copies of those it writes are rounded back to bf16 (to nearest, ties to even) after it. So an
// op computes in float32 and rounds each of its outputs once. That is the contract of cuBLAS's
// bf16 GEMMs with float32 accumulation (CUBLAS_COMPUTE_32F: C = round(alpha A B + beta C), the
// products summed in float32) and of PyTorch's bf16 elementwise and reduction kernels, which
// compute in opmath_t = float. An op that accumulates (+=) into a bf16 gradient thus adds in
// float32 and rounds the sum once per op, as a GEMM with beta = 1 does; the summation order
// inside an op is the only thing a GPU may do differently.
//
// Where every tensor is float32 (every chapter but 09's mixed precision) nothing is copied:
// f(t) is t's own memory. On CUDA the copies are device scratch buffers, widened and rounded by
// kernels on the op's stream (a correct path, not a fast one: see the chapter 09 README).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "device/device.h"

namespace shardlab::ops {

// SHARDLAB_ON_CUDA (cuda/kernels.h) for an op whose math goes through AsF32: the statements see
// `f` and `stream`.
#ifdef SHARDLAB_WITH_CUDA
#define SHARDLAB_ON_CUDA_F32(...) [=](const ::shardlab::ops::AsF32& f, void* stream) { __VA_ARGS__; }
#else
#define SHARDLAB_ON_CUDA_F32(...) nullptr
#endif

class AsF32 {
 public:
  // The tensors an op touches (its Kernel's accesses: the written ones are rounded back). A
  // tensor listed twice (read and written: accumulated into) gets one copy; two different bf16
  // tensors must not overlap, as no op's outputs do (they would race on a GPU too).
  // `cuda_stream` is null for the CPU's math, else the CUDA stream the op runs on.
  explicit AsF32(const std::vector<Access>& accesses, void* cuda_stream = nullptr);
  ~AsF32();
  AsF32(const AsF32&) = delete;
  AsF32& operator=(const AsF32&) = delete;

  // t's elements as float32: t's memory when it is f32, its widened copy when bf16, null when t
  // is undefined (a frozen parameter's gradient).
  float* operator()(const Tensor& t) const;

 private:
  struct Copy {
    Tensor of;     // the bf16 tensor
    float* f32;    // its float32 copy
    bool written;  // rounded back afterwards
  };
  std::vector<Copy> copies_;
  std::vector<std::vector<float>> host_;  // the copies' memory on the CPU
  void* cuda_stream_;
};

// Launches k with its math in float32 whatever its tensors' dtypes: host(f) on the CPU,
// cuda(f, stream) on CUDA (SHARDLAB_ON_CUDA_F32), f giving each tensor's float32 memory.
using F32Host = std::function<void(const AsF32&)>;
using F32Cuda = std::function<void(const AsF32&, void*)>;
void launch_f32(Device& dev, Stream& s, const Kernel& k, F32Host host, F32Cuda cuda);
// Its CPU half alone, for an op whose CUDA body takes bf16 tensors as they are (the matmuls:
// cuBLAS's bf16 GEMMs).
HostBody f32_host(const Kernel& k, F32Host host);

// The dtype an op's math runs at, for the cost model: bf16 (tensor cores) for a GEMM-shaped op
// whose operands are bf16, float32 for everything else, which computes in float32 whatever its
// tensors' dtype (PyTorch's opmath) and is bound by memory traffic anyway.
DType math_dtype(KernelClass cls, const std::vector<Access>& accesses);

}  // namespace shardlab::ops
