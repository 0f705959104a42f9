// The CUDA attention kernels (common/cuda/attention_kernels.cuh) run on the CPU under the
// emulator (cuda_emulator.h) against the CPU ops of attention.h, at the awkward shapes the GPU
// test uses: tiles and blocks that end mid-way, one row, no keys, head sizes from 1 to 128 on
// both sides of the kernels' two channel counts, and chapter 08's row blocks. This checks the
// kernels' logic on every machine; tests/gpu/cuda_test_ops.cpp checks the same kernels on a GPU.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "device/sim_device.h"
#include "model/attention.h"

// Last: the emulator defines CUDA's keywords as macros.
#include "cuda_emulator.h"
inline float* dynamic_shared_floats() { return emulated_shared(); }
#include "cuda/attention_kernels.cuh"

using namespace shardlab;
using ops::AttentionMask;

namespace {

struct Fixture {
  SimDevice dev{load_profile("h100-8"), ComputeMode::real, 0, 1};
  std::mt19937 rng{1234};

  Stream& s() { return dev.compute_stream(); }
  Tensor random(Shape shape, float amplitude = 1) {
    Tensor t = dev.empty(shape, DType::f32, s(), "t");
    std::uniform_real_distribution<float> u(-amplitude, amplitude);
    for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = u(rng);
    return t;
  }
};

std::vector<float> values(const Tensor& t) { return {t.f32(), t.f32() + t.numel()}; }

// max |got - want| / max |want|, infinities equal only to themselves.
double relative_error(const std::vector<float>& got, const Tensor& want) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = want.f32()[i];
    if (std::isfinite(w)) scale = std::max(scale, std::abs(w));
    if (g == w) continue;
    diff = std::max(diff, std::isfinite(g) && std::isfinite(w) ? std::abs(g - w) : INFINITY);
  }
  return scale > 0 ? diff / scale : diff;
}

void expect_close(const std::string& what, const std::vector<float>& got, const Tensor& want, double tolerance) {
  const double rel = relative_error(got, want);
  INFO(what << ": relative error " << rel << " (tolerance " << tolerance << ")");
  CHECK(rel <= tolerance);
}

// Rows of one call, as kernels.h's AttnRows: the block's first row, its rows, the head's rows.
struct Block {
  int first, count, ld;
};

// The launches of kernels.cu, on the emulator.
void forward(std::vector<float>& out, std::vector<float>& lse, const std::vector<float>& q, const std::vector<float>& k,
             const std::vector<float>& v, int heads, Block qr, Block kr, int hs, bool causal) {
  const size_t bytes = sizeof(float) * static_cast<size_t>(flash::forward_shared_floats(hs));
  const auto kernel = flash::channels_per_thread(hs) == 4 ? flash::flash_forward_kernel<4> : flash::flash_forward_kernel<8>;
  const size_t qf = static_cast<size_t>(qr.first * hs), kf = static_cast<size_t>(kr.first * hs);
  cuda_emulator::launch(static_cast<unsigned>(heads * flash::blocks_of(qr.count)), flash::kThreads, bytes, kernel, out.data() + qf,
                        lse.data() + qr.first, q.data() + qf, k.data() + kf, v.data() + kf, qr.count, kr.count,
                        static_cast<long long>(qr.ld), static_cast<long long>(kr.ld), hs, causal,
                        1.0f / std::sqrt(static_cast<float>(hs)), heads);
}

void backward(std::vector<float>& dq, std::vector<float>& dk, std::vector<float>& dv, const std::vector<float>& dout,
              const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
              const std::vector<float>& out, const std::vector<float>& lse, int heads, Block qr, Block kr, int hs,
              bool causal) {
  const size_t bytes = sizeof(float) * static_cast<size_t>(flash::backward_shared_floats(hs));
  const auto kernel =
      flash::channels_per_thread(hs) == 4 ? flash::flash_backward_kernel<4> : flash::flash_backward_kernel<8>;
  const size_t qf = static_cast<size_t>(qr.first * hs), kf = static_cast<size_t>(kr.first * hs);
  cuda_emulator::launch(static_cast<unsigned>(heads * flash::blocks_of(kr.count)), flash::kThreads, bytes, kernel, dq.data() + qf,
                        dk.data() + kf, dv.data() + kf, dout.data() + qf, q.data() + qf, k.data() + kf, v.data() + kf,
                        out.data() + qf, lse.data() + qr.first, qr.count, kr.count, static_cast<long long>(qr.ld),
                        static_cast<long long>(kr.ld), hs, causal, 1.0f / std::sqrt(static_cast<float>(hs)), heads);
}

struct Case {
  int B, NH, Tq, Tk, hs;
  AttentionMask mask;
  ops::Rows q_rows{}, kv_rows{};
};

void check(const Case& c) {
  Fixture f;
  const bool causal = c.mask == AttentionMask::causal;
  const Block qr{static_cast<int>(c.q_rows.begin), static_cast<int>(c.q_rows.count < 0 ? c.Tq : c.q_rows.count), c.Tq};
  const Block kr{static_cast<int>(c.kv_rows.begin), static_cast<int>(c.kv_rows.count < 0 ? c.Tk : c.kv_rows.count),
                 c.Tk};
  const Shape qs{c.B, c.NH, c.Tq, c.hs}, ks{c.B, c.NH, c.Tk, c.hs};
  Tensor q = f.random(qs, 2.0f), k = f.random(ks, 2.0f), v = f.random(ks), out = f.random(qs);
  Tensor lse = f.random({c.B, c.NH, c.Tq});
  Tensor dout = f.random(qs), dq = f.random(qs), dk = f.random(ks), dv = f.random(ks);
  // The emulated kernels work on copies; rows outside the blocks must come out as they went in.
  std::vector<float> eout = values(out), e_lse = values(lse), edq = values(dq), edk = values(dk), edv = values(dv);
  const int heads = c.B * c.NH;

  ops::attention_forward(f.dev, f.s(), out, lse, q, k, v, c.mask, c.q_rows, c.kv_rows);
  forward(eout, e_lse, values(q), values(k), values(v), heads, qr, kr, c.hs, causal);
  expect_close("forward out", eout, out, 1e-5);
  expect_close("forward lse", e_lse, lse, 1e-5);

  // Backward from the CPU's out and lse on both sides, so only the backward is compared.
  if (qr.count == 0 || kr.count == 0) return;
  ops::attention_backward(f.dev, f.s(), dq, dk, dv, dout, q, k, v, out, lse, c.mask, c.q_rows, c.kv_rows);
  backward(edq, edk, edv, values(dout), values(q), values(k), values(v), values(out), values(lse), heads, qr, kr, c.hs,
           causal);
  expect_close("backward dq", edq, dq, 2e-5);
  expect_close("backward dk", edk, dk, 2e-5);
  expect_close("backward dv", edv, dv, 2e-5);
}

}  // namespace

TEST_CASE("attention kernels (emulated): whole sequences", "[attention][cuda-emulated]") {
  // Tiles of 64 that end mid-way (77, 45, 70, 130: three tiles), one row, head sizes 1, 7 (odd),
  // 16, 64 (4 channels a thread) and 65, 100, 128 (8), both masks.
  const Case cases[] = {
      {1, 2, 77, 77, 16, AttentionMask::causal}, {1, 1, 45, 70, 16, AttentionMask::none},
      {1, 1, 33, 33, 100, AttentionMask::causal}, {1, 1, 40, 9, 128, AttentionMask::none},
      {1, 1, 130, 130, 64, AttentionMask::causal}, {2, 1, 1, 1, 8, AttentionMask::causal},
      {1, 1, 20, 20, 7, AttentionMask::causal},   {1, 1, 9, 5, 1, AttentionMask::none},
      {1, 1, 66, 66, 65, AttentionMask::causal},
  };
  for (const Case& c : cases) {
    INFO("B " << c.B << " NH " << c.NH << " Tq " << c.Tq << " Tk " << c.Tk << " hs " << c.hs << " "
              << (c.mask == AttentionMask::causal ? "causal" : "none"));
    check(c);
  }
}

TEST_CASE("attention kernels (emulated): row blocks of chapter 08's ring steps", "[attention][cuda-emulated]") {
  const Case cases[] = {
      {2, 1, 40, 40, 24, AttentionMask::none, {0, 40}, {0, 20}},    // every query, the first half of the keys
      {1, 2, 40, 40, 24, AttentionMask::none, {20, 20}, {0, 40}},   // the second half of the queries
      {1, 2, 33, 21, 24, AttentionMask::causal, {5, 7}, {11, 7}},   // a causal block inside both
      {1, 1, 16, 16, 24, AttentionMask::none, {3, 1}, {9, 1}},      // one row each
      {1, 1, 140, 140, 32, AttentionMask::causal, {70, 70}, {0, 70}},  // a causal diagonal block past a tile
      {1, 1, 12, 12, 8, AttentionMask::none, {0, 12}, {4, 0}},      // no keys: lse -inf, output 0
  };
  for (const Case& c : cases) {
    INFO("Tq " << c.Tq << " rows [" << c.q_rows.begin << ", +" << c.q_rows.count << ") against Tk " << c.Tk << " rows ["
               << c.kv_rows.begin << ", +" << c.kv_rows.count << ") "
               << (c.mask == AttentionMask::causal ? "causal" : "none"));
    check(c);
  }
}
