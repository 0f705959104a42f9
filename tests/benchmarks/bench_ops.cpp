// bench_ops: how fast are the CPU bodies of the matmul ops? Prints GFLOP/s of the blocked gemm
// behind matmul_forward and matmul_backward (its two products, dinp and dweight, together) next
// to a naive triple loop, at GPT-2-small shapes and odd ones. A benchmark, not a test; one thread.
//
//   cmake --build --preset default --target bench_ops && build/tests/bench_ops
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <random>

#include "model/ops.h"
#include "device/sim_device.h"

using namespace shardlab;

namespace {

// Seconds per call of fn: repeated until at least 0.3 s have passed (the first call warms up).
double seconds_per_call(const std::function<void()>& fn) {
  fn();
  int calls = 0;
  const auto t0 = std::chrono::steady_clock::now();
  double s = 0;
  do {
    fn();
    ++calls;
    s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  } while (s < 0.3);
  return s / calls;
}

// The textbook loops: one dot product per output element.
void naive_forward(float* out, const float* inp, const float* w, int64_t N, int64_t C, int64_t OC) {
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < OC; ++o) {
      float sum = 0.0f;
      for (int64_t c = 0; c < C; ++c) sum += inp[n * C + c] * w[o * C + c];
      out[n * OC + o] = sum;
    }
}

void naive_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w, int64_t N,
                    int64_t C, int64_t OC) {
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) {
      float sum = 0.0f;
      for (int64_t o = 0; o < OC; ++o) sum += dout[n * OC + o] * w[o * C + c];
      dinp[n * C + c] += sum;
    }
  for (int64_t o = 0; o < OC; ++o)
    for (int64_t c = 0; c < C; ++c) {
      float sum = 0.0f;
      for (int64_t n = 0; n < N; ++n) sum += dout[n * OC + o] * inp[n * C + c];
      dw[o * C + c] += sum;
    }
}

float max_abs_diff(const Tensor& a, const Tensor& b) {
  float d = 0.0f;
  for (int64_t i = 0; i < a.numel(); ++i) d = std::max(d, std::abs(a.f32()[i] - b.f32()[i]));
  return d;
}

}  // namespace

int main() {
  SimDevice dev(load_profile("h100-8"), ComputeMode::real, 0, 1);
  Stream& s = dev.compute_stream();
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  struct MatmulShape {
    int64_t N, C, OC;
    const char* what;
  };
  const MatmulShape shapes[] = {{512, 768, 3072, "GPT-2 small MLP up"},
                                {512, 3072, 768, "GPT-2 small MLP down"},
                                {512, 768, 768, "GPT-2 small attention out"},
                                {257, 129, 1001, "odd"},
                                {256, 64, 65, "tiny GPT lm head"}};
  std::printf("%-28s %18s %16s %16s %8s %16s %16s %8s\n", "shape", "N x C x OC", "fwd naive GF/s", "fwd ours GF/s",
              "speedup", "bwd naive GF/s", "bwd ours GF/s", "speedup");
  for (const MatmulShape& m : shapes) {
    auto make = [&](Shape shape, const char* name) {
      Tensor t = dev.empty(shape, DType::f32, s, name);
      for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = u(rng);
      return t;
    };
    Tensor inp = make({m.N, m.C}, "inp"), w = make({m.OC, m.C}, "weight"), dout = make({m.N, m.OC}, "dout");
    Tensor out = make({m.N, m.OC}, "out"), ref = make({m.N, m.OC}, "ref");
    Tensor dinp = make({m.N, m.C}, "dinp"), dw = make({m.OC, m.C}, "dweight");
    Tensor dinp_ref = make({m.N, m.C}, "dinp_ref"), dw_ref = make({m.OC, m.C}, "dweight_ref");
    const double flops = 2.0 * static_cast<double>(m.N * m.C * m.OC);
    const double fwd_naive = seconds_per_call([&] { naive_forward(ref.f32(), inp.f32(), w.f32(), m.N, m.C, m.OC); });
    const double fwd_ours = seconds_per_call([&] { ops::matmul_forward(dev, s, out, inp, w, Tensor{}); });
    // Both sides accumulate; compare after one call each from zero.
    const double bwd_naive = seconds_per_call(
        [&] { naive_backward(dinp_ref.f32(), dw_ref.f32(), dout.f32(), inp.f32(), w.f32(), m.N, m.C, m.OC); });
    const double bwd_ours = seconds_per_call([&] { ops::matmul_backward(dev, s, dinp, dw, Tensor{}, dout, inp, w); });
    std::fill_n(dinp.f32(), dinp.numel(), 0.0f);
    std::fill_n(dw.f32(), dw.numel(), 0.0f);
    std::fill_n(dinp_ref.f32(), dinp_ref.numel(), 0.0f);
    std::fill_n(dw_ref.f32(), dw_ref.numel(), 0.0f);
    naive_backward(dinp_ref.f32(), dw_ref.f32(), dout.f32(), inp.f32(), w.f32(), m.N, m.C, m.OC);
    ops::matmul_backward(dev, s, dinp, dw, Tensor{}, dout, inp, w);
    char dims[64];
    std::snprintf(dims, sizeof dims, "%lld x %lld x %lld", static_cast<long long>(m.N), static_cast<long long>(m.C),
                  static_cast<long long>(m.OC));
    std::printf("%-28s %18s %16.2f %16.2f %7.1fx %16.2f %16.2f %7.1fx   (max diff vs naive: %.1e %.1e %.1e)\n",
                m.what, dims, flops / fwd_naive * 1e-9, flops / fwd_ours * 1e-9, fwd_naive / fwd_ours,
                2 * flops / bwd_naive * 1e-9, 2 * flops / bwd_ours * 1e-9, bwd_naive / bwd_ours,
                static_cast<double>(max_abs_diff(out, ref)), static_cast<double>(max_abs_diff(dinp, dinp_ref)),
                static_cast<double>(max_abs_diff(dw, dw_ref)));
  }
  return 0;
}
