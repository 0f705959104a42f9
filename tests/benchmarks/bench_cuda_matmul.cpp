// cuBLAS SGEMM throughput at gpt2-small's shapes, through the kernels the CUDA device runs
// (shardlab::cuda::matmul_*): forward and both backward products of every linear layer of a
// block and of the LM head, with N = B*T = 8*1024 rows. Each is timed with CUDA events over
// repeated runs after a warm-up, and printed as TFLOP/s and as a fraction of a measured peak:
// the best of a large square SGEMM, 8192^3 (true fp32, TF32 off, as the kernels run).
//
//   cmake --build --preset default --target bench_cuda_matmul && build/tests/bench_cuda_matmul
//
// Without a visible GPU it prints "skipped: no CUDA device visible (...)" and exits 77.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <functional>

#include "cuda/check.h"
#include "cuda/cuda_probe.h"
#include "cuda/kernels.h"
#include "../gpu/cuda_timing.h"

using namespace shardlab;

namespace {

// A cudaMalloc'd float buffer filled with small values (a GEMM's speed does not depend on them,
// but NaNs or denormals could).
class Buffer {
 public:
  explicit Buffer(int64_t n) {
    CUDA_CHECK(cudaMalloc(&p_, static_cast<size_t>(n) * sizeof(float)));
    cuda::fill(p_, n, 0.01f, nullptr);
  }
  ~Buffer() { cudaFree(p_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  float* get() const { return p_; }

 private:
  float* p_ = nullptr;
};

double tflops(double flops, double ms) { return flops / (ms * 1e-3) / 1e12; }

}  // namespace

int main() {
  if (skipped_without_gpu()) return kSkippedExitCode;
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreate(&stream));
  std::printf("device: %s\n", prop.name);

  // The peak: out[8192, 8192] = inp[8192, 8192] @ weight[8192, 8192]^T, one SGEMM (no bias).
  constexpr int64_t kSquare = 8192;
  double peak = 0;
  {
    Buffer a(kSquare * kSquare), b(kSquare * kSquare), c(kSquare * kSquare);
    const double ms = device_ms_per_call(stream, 10, [&] {
      cuda::matmul_forward(c.get(), a.get(), b.get(), nullptr, kSquare, kSquare, kSquare, stream);
    });
    peak = tflops(2.0 * kSquare * kSquare * kSquare, ms);
    std::printf("peak: SGEMM %lld^3  %.3f ms  %.1f TFLOP/s (fp32, TF32 off)\n\n", static_cast<long long>(kSquare), ms,
                peak);
  }

  // gpt2-small: B*T = 8 * 1024 rows, C = 768, padded vocabulary 50304.
  constexpr int64_t N = 8 * 1024, C = 768, V = 50304;
  struct Layer {
    const char* name;
    int64_t in, out;
  };
  const Layer layers[] = {
      {"attn qkv    C -> 3C", C, 3 * C}, {"attn proj   C -> C", C, C},       {"mlp fc      C -> 4C", C, 4 * C},
      {"mlp proj   4C -> C", 4 * C, C},  {"lm head     C -> V", C, V},
  };
  std::printf("%-20s %-16s %10s %10s %8s\n", "layer (N = 8192)", "product", "ms", "TFLOP/s", "of peak");
  for (const Layer& l : layers) {
    Buffer inp(N * l.in), weight(l.out * l.in), out(N * l.out), dinp(N * l.in), dweight(l.out * l.in);
    const double flops = 2.0 * static_cast<double>(N * l.in * l.out);
    const auto forward = [&](void* s) {
      cuda::matmul_forward(out.get(), inp.get(), weight.get(), nullptr, N, l.in, l.out, s);
    };
    const auto backward_input = [&](void* s) {
      cuda::matmul_backward_input(dinp.get(), out.get(), weight.get(), N, l.in, l.out, s);
    };
    const auto backward_weight = [&](void* s) {
      cuda::matmul_backward_weight(dweight.get(), nullptr, out.get(), inp.get(), N, l.in, l.out, s);
    };
    const struct {
      const char* product;
      std::function<void(void*)> fn;
    } runs[] = {{"forward", forward}, {"backward dinp", backward_input}, {"backward dweight", backward_weight}};
    for (const auto& r : runs) {
      const double ms = device_ms_per_call(stream, 20, [&] { r.fn(stream); });
      std::printf("%-20s %-16s %10.3f %10.1f %7.0f%%\n", l.name, r.product, ms, tflops(flops, ms),
                  100.0 * tflops(flops, ms) / peak);
    }
  }
  CUDA_CHECK(cudaStreamDestroy(stream));
  return 0;
}
