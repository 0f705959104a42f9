// polynomial.h: chapter 00's kernel, a stand-in for any compute-heavy op.
//
// It evaluates p(x) = sum_k x^k / (k + 1), k = 0..degree, at every element with Horner's rule:
// 2 x degree FLOPs per element, 8 bytes of memory traffic (read x, write y). With a high degree
// it is compute bound, like a matmul; with a low one, memory bound, like an activation.
#pragma once

#include <cstdint>
#include <vector>

#include "cuda/kernels.h"
#include "device/device.h"

namespace ch00 {

// The math itself, shared by the kernel's CPU body and the reference check. Elements are
// processed in blocks so the inner loop over elements vectorizes and stays in registers.
inline void polynomial_cpu(const float* x, float* y, int64_t n, int64_t degree) {
  constexpr int64_t kBlock = 256;
  std::vector<float> coef(static_cast<size_t>(degree + 1));
  for (int64_t k = 0; k <= degree; ++k) coef[static_cast<size_t>(k)] = 1.0f / static_cast<float>(k + 1);
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t m = n - b < kBlock ? n - b : kBlock;
    float acc[kBlock];
    for (int64_t j = 0; j < m; ++j) acc[j] = coef[static_cast<size_t>(degree)];
    for (int64_t k = degree - 1; k >= 0; --k) {
      const float c = coef[static_cast<size_t>(k)];
      for (int64_t j = 0; j < m; ++j) acc[j] = acc[j] * x[b + j] + c;
    }
    for (int64_t j = 0; j < m; ++j) y[b + j] = acc[j];
  }
}

// The same math as a CUDA kernel, one thread per element, launched on `stream` (a cudaStream_t).
// Defined in polynomial.cu, which the chapter compiles only when the build has CUDA.
void polynomial_cuda(const float* x, float* y, int64_t n, int64_t degree, void* stream);

// Launches the kernel on stream s: y = p(x). It reads x and writes y (the race check sees both).
inline void polynomial(shardlab::Device& dev, shardlab::Stream& s, const shardlab::Tensor& x,
                       const shardlab::Tensor& y, int64_t degree) {
  const int64_t n = x.numel();
  shardlab::Kernel k{"polynomial", 2.0 * static_cast<double>(degree * n), 8.0 * static_cast<double>(n),
                     shardlab::DType::f32, shardlab::KernelClass::elementwise,
                     {shardlab::reads(x), shardlab::writes(y)}};
  dev.launch(s, k, [=] { polynomial_cpu(x.f32(), y.f32(), n, degree); },
             SHARDLAB_ON_CUDA(polynomial_cuda(x.f32(), y.f32(), n, degree, stream)));
}

}  // namespace ch00
