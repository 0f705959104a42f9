// polynomial.cu: chapter 00's kernel on a real GPU, y = p(x) with p(x) = sum_k x^k / (k + 1),
// k = 0..degree, by Horner's rule: the same math as polynomial_cpu in polynomial.h.
//
// Build and run: compiled into shardlab_ch00 when the build has CUDA (chapters/CMakeLists.txt);
//   cmake --preset default && cmake --build --preset default --target shardlab_ch00
//   mpirun -np 1 build/chapters/shardlab_ch00 --device cuda
//
// polynomial.h declares polynomial_cuda but is not included here: it brings in the whole
// runtime, and .cu files compile as C++17. A signature that drifted would fail to link.
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "cuda/check.h"

namespace ch00 {
namespace {

constexpr int kThreads = 256;

// One thread per element: thread i of the grid evaluates y[i] = p(x[i]) with x[i] in a register,
// so a high degree makes the kernel compute bound: one multiply and one add per coefficient.
// The chapter checks the GPU's results against the CPU's bit for bit, so every step rounds as
// the CPU's does: the coefficients 1 / (k + 1) are a correctly rounded float division, and
// acc * x + c is a rounded multiply, then a rounded add. Written plainly, nvcc would fuse the
// two into one FMA (rounded once), and the last bits would differ. __fmul_rn and __fadd_rn
// are never fused. The coefficients are formed 256 at a time: each thread of the block
// computes one into shared memory, then every thread runs its Horner steps over those 256.
// Threads past n help with the table but write nothing.
__global__ void polynomial_kernel(const float* x, float* y, int64_t n, int64_t degree) {
  __shared__ float coef[kThreads];
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const float xi = i < n ? x[i] : 0.0f;
  float acc = 1.0f / static_cast<float>(degree + 1);
  // Chunk: coefficients k = top, top - 1, ..., down to max(top - 255, 0), stored in that order.
  for (int64_t top = degree - 1; top >= 0; top -= kThreads) {
    const int64_t count = top + 1 < kThreads ? top + 1 : kThreads;
    __syncthreads();  // everyone is done with the previous chunk
    if (threadIdx.x < count) coef[threadIdx.x] = 1.0f / static_cast<float>(top - threadIdx.x + 1);
    __syncthreads();
    for (int64_t j = 0; j < count; ++j) acc = __fadd_rn(__fmul_rn(acc, xi), coef[j]);
  }
  if (i < n) y[i] = acc;
}

}  // namespace

void polynomial_cuda(const float* x, float* y, int64_t n, int64_t degree, void* stream) {
  if (n == 0) return;
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  if (blocks > INT32_MAX) throw std::invalid_argument("polynomial: " + std::to_string(n) + " elements are too many");
  polynomial_kernel<<<static_cast<unsigned int>(blocks), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(x, y, n,
                                                                                                          degree);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace ch00
