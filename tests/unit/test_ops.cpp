// The device ops (ops.h) against double-precision references: forwards directly, backwards
// against central finite differences of L = sum(out * R) for a fixed random R, on odd shapes.
// Also: gradients accumulate, kernels declare the right FLOPs and bytes, shape errors name the
// op, --compute skip runs every op, and no test sees a race.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numbers>
#include <random>
#include <vector>

#include "device/bf16.h"
#include "model/attention.h"
#include "model/f32_math.h"
#include "model/ops.h"
#include "device/sim_device.h"

using namespace shardlab;

namespace {

using Vec = std::vector<double>;

std::mt19937& rng() {
  static std::mt19937 r(1234);
  return r;
}

int64_t pick(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng()); }

Vec random_vec(int64_t n, double scale = 1.0) {
  std::uniform_real_distribution<double> u(-scale, scale);
  Vec v(static_cast<size_t>(n));
  for (double& x : v) x = static_cast<float>(u(rng()));  // representable in f32, so both sides see the same input
  return v;
}

Tensor f32_tensor(Device& dev, Shape shape, const char* name) {
  return dev.empty(shape, DType::f32, dev.compute_stream(), name);
}

void set(const Tensor& t, const Vec& v) {
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = static_cast<float>(v[static_cast<size_t>(i)]);
}

Tensor tensor_of(Device& dev, Shape shape, const Vec& v, const char* name) {
  Tensor t = f32_tensor(dev, shape, name);
  set(t, v);
  return t;
}

Tensor zeros(Device& dev, Shape shape, const char* name) {
  return tensor_of(dev, shape, Vec(static_cast<size_t>(shape.numel())), name);
}

Tensor i32_tensor(Device& dev, Shape shape, const std::vector<int32_t>& v, const char* name) {
  Tensor t = dev.empty(shape, DType::i32, dev.compute_stream(), name);
  std::copy(v.begin(), v.end(), t.i32());
  return t;
}

Vec values(const Tensor& t) { return Vec(t.f32(), t.f32() + t.numel()); }

Vec scaled(Vec v, double f) {
  for (double& x : v) x *= f;
  return v;
}

// Every element of got within rel of want, relative to the element or, for elements near zero,
// to a tenth of the largest one (cancellation leaves small results with absolute, not relative,
// f32 error).
void check_close(const Vec& got, const Vec& want, double rel, const char* what) {
  REQUIRE(got.size() == want.size());
  double scale = 0;
  for (double w : want) scale = std::max(scale, std::abs(w));
  size_t worst = 0;
  double worst_excess = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    const double excess = std::abs(got[i] - want[i]) / (rel * std::max(std::abs(want[i]), 0.1 * scale) + 1e-30);
    if (excess > worst_excess) worst_excess = excess, worst = i;
  }
  INFO(what << "[" << worst << "]: got " << got[worst] << ", want " << want[worst] << " (tolerance " << rel << ")");
  CHECK(worst_excess <= 1.0);
}

// d/dx of sum(f(x) * r) by central differences in double.
Vec numerical_grad(const std::function<Vec(const Vec&)>& f, Vec x, const Vec& r) {
  const double h = 1e-6;
  auto loss = [&](const Vec& at) {
    const Vec out = f(at);
    double l = 0;
    for (size_t i = 0; i < out.size(); ++i) l += out[i] * r[i];
    return l;
  };
  Vec g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + h;
    const double up = loss(x);
    x[i] = x0 - h;
    g[i] = (up - loss(x)) / (2 * h);
    x[i] = x0;
  }
  return g;
}

// ---- double-precision references

Vec layernorm_ref(const Vec& x, const Vec& w, const Vec& b, int64_t N, int64_t C) {
  Vec out(x.size());
  for (int64_t n = 0; n < N; ++n) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < C; ++i) mean += x[n * C + i] / static_cast<double>(C);
    for (int64_t i = 0; i < C; ++i) var += (x[n * C + i] - mean) * (x[n * C + i] - mean) / static_cast<double>(C);
    for (int64_t i = 0; i < C; ++i) out[n * C + i] = (x[n * C + i] - mean) / std::sqrt(var + 1e-5) * w[i] + b[i];
  }
  return out;
}

// out[N, OC] = x[N, C] @ w[OC, C]^T + b (b empty: no bias).
Vec matmul_ref(const Vec& x, const Vec& w, const Vec& b, int64_t N, int64_t C, int64_t OC) {
  Vec out(static_cast<size_t>(N * OC));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < OC; ++o) {
      double sum = b.empty() ? 0.0 : b[o];
      for (int64_t c = 0; c < C; ++c) sum += x[n * C + c] * w[o * C + c];
      out[n * OC + o] = sum;
    }
  return out;
}

Vec gelu_ref(const Vec& x) {
  Vec out(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    out[i] = 0.5 * x[i] * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (x[i] + 0.044715 * x[i] * x[i] * x[i])));
  return out;
}

Vec crossentropy_ref(const Vec& logits, const std::vector<int32_t>& targets, int64_t N, int64_t V) {
  Vec losses(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) {
    double sum = 0;
    for (int64_t i = 0; i < V; ++i) sum += std::exp(logits[n * V + i]);
    losses[n] = std::log(sum) - logits[n * V + targets[n]];
  }
  return losses;
}

Vec embedding_ref(const std::vector<int32_t>& tokens, const Vec& wte, const Vec& wpe, int64_t B, int64_t T,
                  int64_t C) {
  Vec out(static_cast<size_t>(B * T * C));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < C; ++i) out[(b * T + t) * C + i] = wte[tokens[b * T + t] * C + i] + wpe[t * C + i];
  return out;
}

std::vector<int32_t> random_ids(int64_t n, int64_t V) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int32_t& id : ids) id = static_cast<int32_t>(pick(0, V - 1));
  return ids;
}

SimDevice real_device() { return SimDevice(load_profile("h100-8"), ComputeMode::real, 0, 1); }

}  // namespace

TEST_CASE("ops: copy and residual_forward", "[ops]") {
  SimDevice dev = real_device();
  Stream& s = dev.compute_stream();
  const Vec a = random_vec(7), b = random_vec(7);
  Tensor ta = tensor_of(dev, {7}, a, "a"), tb = tensor_of(dev, {7}, b, "b"), out = zeros(dev, {7}, "out");
  ops::copy(dev, s, out, ta);
  CHECK(values(out) == a);
  ops::residual_forward(dev, s, out, ta, tb);
  Vec sum(7);
  for (size_t i = 0; i < 7; ++i) sum[i] = static_cast<float>(static_cast<float>(a[i]) + static_cast<float>(b[i]));
  CHECK(values(out) == sum);
  Tensor ids = i32_tensor(dev, {3}, {4, -1, 7}, "ids"), ids2 = i32_tensor(dev, {3}, {0, 0, 0}, "ids2");
  ops::copy(dev, s, ids2, ids);
  CHECK(std::vector<int32_t>(ids2.i32(), ids2.i32() + 3) == std::vector<int32_t>{4, -1, 7});
  CHECK(dev.race_reports().empty());
}

TEST_CASE("ops: copy_blocks copies 2-D blocks in one kernel and pads past the source's end", "[ops]") {
  // FSDP2's copies for a group of two parameters over 2 ranks, A [3, 3] and B [2, 2], each cut
  // on dim 0 as torch.chunk cuts it: A's chunks are 2 rows and 1 row (padded to 2), B's 1 and 1.
  // A rank's slot holds [A chunk (6) | B chunk (2)]: 8 elements.
  SimDevice dev = real_device();
  Stream& s = dev.compute_stream();
  Vec a(9), b(4);
  for (size_t i = 0; i < 9; ++i) a[i] = static_cast<float>(10 + i);
  for (size_t i = 0; i < 4; ++i) b[i] = static_cast<float>(100 + i);
  Tensor ta = tensor_of(dev, {3, 3}, a, "A"), tb = tensor_of(dev, {2, 2}, b, "B");

  // The reduce-scatter's copy-in (chunk_cat): row r of the [2, 8] input is rank r's slot;
  // A's second chunk has one row and then zeros.
  Tensor cat = tensor_of(dev, {16}, Vec(16, -1.0f), "reduce_scatter_input");
  ops::copy_blocks(dev, s, "chunk_cat", 2, {{ta, cat.view(0, {16}), 6, 8, 6}, {tb, cat.view(6, {10}), 2, 8, 2}});
  CHECK(values(cat) == Vec{10, 11, 12, 13, 14, 15, 100, 101, 16, 17, 18, 0, 0, 0, 102, 103});

  // The all-gather's copy-out (split_with_sizes_copy): the gathered [2, 8] buffer split along
  // dim 1 into each parameter's padded unsharded [2, 6] and [2, 2]; A is their first 9.
  Tensor ua = tensor_of(dev, {12}, Vec(12, -1.0f), "A.unsharded"), ub = tensor_of(dev, {4}, Vec(4, -1.0f), "B.unsharded");
  ops::copy_blocks(dev, s, "split_with_sizes_copy", 2, {{cat.view(0, {16}), ua, 8, 6, 6}, {cat.view(6, {10}), ub, 8, 2, 2}});
  CHECK(values(ua) == Vec{10, 11, 12, 13, 14, 15, 16, 17, 18, 0, 0, 0});
  CHECK(values(ub) == b);

  // The all-gather's copy-in (one row): rank 1's shards into its slot.
  Tensor slot = tensor_of(dev, {8}, Vec(8, -1.0f), "slot");
  ops::copy_blocks(dev, s, "all_gather_copy_in", 1, {{ua.view(6, {6}), slot, 6, 8, 6}, {ub.view(2, {2}), slot.view(6, {2}), 2, 2, 2}});
  CHECK(values(slot) == Vec{16, 17, 18, 0, 0, 0, 102, 103});
  CHECK(dev.race_reports().empty());

  // A row that does not fit its destination is an error naming the op and the block.
  CHECK_THROWS_WITH(ops::copy_blocks(dev, s, "chunk_cat", 3, {{ta, cat, 6, 8, 6}}),
                    Catch::Contains("chunk_cat") && Catch::Contains("block 0") && Catch::Contains("do not fit"));
}

// bfloat16 as PyTorch rounds to it (c10::BFloat16's round_to_nearest_even), bit by bit.
TEST_CASE("ops: bf16 rounds to nearest even, keeps the float range, and widens exactly", "[ops]") {
  const auto bits = [](float x) { return to_bf16(x); };
  const auto from_bits = [](uint32_t u) {
    float x;
    std::memcpy(&x, &u, sizeof x);
    return x;
  };
  CHECK(bits(1.0f) == 0x3F80);
  CHECK(bits(-2.0f) == 0xC000);
  CHECK(bits(-0.0f) == 0x8000);
  CHECK(bits(3.14159265f) == 0x4049);                // 0x40490FDB: below half, down
  CHECK(bits(from_bits(0x3F808000)) == 0x3F80);      // exactly half, kept part even: stays
  CHECK(bits(from_bits(0x3F818000)) == 0x3F82);      // exactly half, kept part odd: up to even
  CHECK(bits(from_bits(0x3F808001)) == 0x3F81);      // above half: up
  CHECK(bits(from_bits(0x7F7FFFFF)) == 0x7F80);      // float's largest rounds to infinity
  CHECK(bits(std::numeric_limits<float>::infinity()) == 0x7F80);
  CHECK(bits(std::numeric_limits<float>::quiet_NaN()) == 0x7FC0);
  CHECK(bits(from_bits(0x00000001)) == 0x0000);      // the smallest subnormal rounds to zero
  CHECK(from_bf16(0x3F82) == 1.015625f);
  for (float x : {0.1f, 1e-20f, 3e30f, -7.25f}) {
    const float r = round_bf16(x);
    CHECK(to_bf16(r) == to_bf16(x));                 // rounding twice changes nothing
    CHECK(std::abs(r - x) <= std::abs(x) * 0x1p-8f);  // half a unit in the last of 8 bits
  }
}

// Mixed precision's copies: f32 shards cast into a bf16 all-gather buffer, bf16 gradients
// widened into an f32 reduce-scatter input, padding zero either way.
TEST_CASE("ops: copy_blocks converts between f32 and bf16, rounding to nearest even", "[ops]") {
  SimDevice dev = real_device();
  Stream& s = dev.compute_stream();
  const Vec a{1.0, 3.14159265, -0.1, 1.00390625, 1.01171875};
  Tensor ta = tensor_of(dev, {5}, a, "A");
  Tensor half = dev.empty({6}, DType::bf16, s, "bf16 slot");
  ops::copy_blocks(dev, s, "all_gather_copy_in", 1, {{ta, half, 5, 6, 6}});  // one row of 6: the last is padding
  const std::vector<uint16_t> want{0x3F80, 0x4049, 0xBDCD, 0x3F80, 0x3F82, 0x0000};
  CHECK(std::vector<uint16_t>(half.bf16(), half.bf16() + 6) == want);
  Tensor wide = tensor_of(dev, {8}, Vec(8, -1.0f), "f32 input");
  ops::copy_blocks(dev, s, "chunk_cat", 2, {{half.view(0, {5}), wide, 4, 4, 4}});  // 2 rows of 4 from 5: 3 pads
  CHECK(values(wide) == Vec{1.0, 3.140625, -0.10009765625, 1.0, 1.015625, 0, 0, 0});
  CHECK(dev.race_reports().empty());
  Tensor ids = dev.empty({2}, DType::i32, s, "ids");
  CHECK_THROWS_WITH(ops::copy_blocks(dev, s, "chunk_cat", 1, {{ids, wide, 2, 2, 2}}),
                    Catch::Contains("chunk_cat") && Catch::Contains("only f32 and bf16"));
}

// Mixed precision (f32_math.h): handed bf16 tensors, an op computes what it computes on their
// float32 values and rounds each output once. Every op runs twice on the same values, on bf16
// tensors and on float32 ones: each bf16 output must be the float32 output rounded, bit for bit,
// and what stays float32 (layer norms' statistics, attention's lse, the losses) equal.
TEST_CASE("ops: on bf16 tensors every op computes in float32 and rounds each output once", "[ops][bf16]") {
  SimDevice dev = real_device();
  Stream& s = dev.compute_stream();
  struct Both {
    Tensor wide, half;  // the same values, as float32 and as bf16
  };
  auto both = [&](Shape shape, double scale = 1.0) {
    Vec v = random_vec(shape.numel(), scale);
    for (double& x : v) x = round_bf16(static_cast<float>(x));
    Both b{tensor_of(dev, shape, v, "f32"), dev.empty(shape, DType::bf16, s, "bf16")};
    for (int64_t i = 0; i < shape.numel(); ++i) b.half.bf16()[i] = to_bf16(b.wide.f32()[i]);
    return b;
  };
  // Checks an output, then gives its float32 twin the rounded values, so the next op that reads
  // it sees the same inputs on both sides.
  auto rounded = [](const Both& b, const char* what) {
    INFO(what);
    int64_t differ = 0;
    for (int64_t i = 0; i < b.wide.numel(); ++i) differ += b.half.bf16()[i] != to_bf16(b.wide.f32()[i]);
    CHECK(differ == 0);
    for (int64_t i = 0; i < b.wide.numel(); ++i) b.wide.f32()[i] = from_bf16(b.half.bf16()[i]);
  };
  auto stat = [&](Shape shape) { return zeros(dev, shape, "stat"); };
  const int64_t B = 2, T = 5, C = 12, N = B * T, OC = 7, V = 11, NH = 3, hs = C / NH;

  Both x = both({N, C}), w = both({OC, C}), bias = both({OC}), out = both({N, OC});
  ops::matmul_forward(dev, s, out.wide, x.wide, w.wide, bias.wide);
  ops::matmul_forward(dev, s, out.half, x.half, w.half, bias.half);
  rounded(out, "matmul_forward");
  Both dx = both({N, C}), dw = both({OC, C}), db = both({OC});  // accumulated into: nonzero to start
  ops::matmul_backward(dev, s, dx.wide, dw.wide, db.wide, out.wide, x.wide, w.wide);
  ops::matmul_backward(dev, s, dx.half, dw.half, db.half, out.half, x.half, w.half);
  for (auto [t, what] : {std::pair{&dx, "dinp"}, std::pair{&dw, "dweight"}, std::pair{&db, "dbias"}}) rounded(*t, what);

  Both ln = both({N, C}), cw = both({C}), cb = both({C});
  Tensor mean[2] = {stat({N}), stat({N})}, rstd[2] = {stat({N}), stat({N})};
  ops::layernorm_forward(dev, s, ln.wide, mean[0], rstd[0], x.wide, cw.wide, cb.wide);
  ops::layernorm_forward(dev, s, ln.half, mean[1], rstd[1], x.half, cw.half, cb.half);
  rounded(ln, "layernorm_forward");
  CHECK(values(mean[1]) == values(mean[0]));
  CHECK(values(rstd[1]) == values(rstd[0]));
  Both dcw = both({C}), dcb = both({C});
  ops::layernorm_backward(dev, s, dx.wide, dcw.wide, dcb.wide, ln.wide, x.wide, cw.wide, mean[0], rstd[0]);
  ops::layernorm_backward(dev, s, dx.half, dcw.half, dcb.half, ln.half, x.half, cw.half, mean[0], rstd[0]);
  for (auto [t, what] : {std::pair{&dx, "dinp"}, std::pair{&dcw, "dweight"}, std::pair{&dcb, "dbias"}}) rounded(*t, what);

  Both g = both({N, C});
  ops::gelu_forward(dev, s, g.wide, x.wide);
  ops::gelu_forward(dev, s, g.half, x.half);
  rounded(g, "gelu_forward");
  ops::gelu_backward(dev, s, dx.wide, x.wide, g.wide);
  ops::gelu_backward(dev, s, dx.half, x.half, g.half);
  rounded(dx, "gelu_backward");
  ops::residual_forward(dev, s, g.wide, x.wide, dx.wide);
  ops::residual_forward(dev, s, g.half, x.half, dx.half);
  rounded(g, "residual_forward");
  ops::add_(dev, s, g.wide, x.wide);
  ops::add_(dev, s, g.half, x.half);
  rounded(g, "add_");
  ops::scale_(dev, s, g.wide, 0.3f);
  ops::scale_(dev, s, g.half, 0.3f);
  rounded(g, "scale_");

  const std::vector<int32_t> ids = random_ids(N, V);
  Tensor tokens = i32_tensor(dev, {B, T}, ids, "tokens");
  Both wte = both({V, C}), wpe = both({T, C}), emb = both({B, T, C});
  ops::embedding_forward(dev, s, emb.wide, tokens, wte.wide, wpe.wide);
  ops::embedding_forward(dev, s, emb.half, tokens, wte.half, wpe.half);
  rounded(emb, "embedding_forward");
  ops::embedding_backward(dev, s, wte.wide, wpe.wide, emb.wide, tokens);
  ops::embedding_backward(dev, s, wte.half, wpe.half, emb.half, tokens);
  rounded(wte, "embedding_backward dwte");
  rounded(wpe, "embedding_backward dwpe");

  Both logits = both({B, T, V}, 4.0), dlogits = both({B, T, V});
  Tensor losses[2] = {stat({B, T}), stat({B, T})};
  ops::crossentropy_forward(dev, s, losses[0], logits.wide, tokens);
  ops::crossentropy_forward(dev, s, losses[1], logits.half, tokens);
  CHECK(values(losses[1]) == values(losses[0]));
  ops::crossentropy_backward(dev, s, dlogits.wide, logits.wide, tokens, 0.1f);
  ops::crossentropy_backward(dev, s, dlogits.half, logits.half, tokens, 0.1f);
  rounded(dlogits, "crossentropy_backward");

  using ops::AttentionMask;
  Both qkv = both({B, T, 3 * C}), q = both({B, NH, T, hs}), k = both({B, NH, T, hs}), v = both({B, NH, T, hs});
  ops::qkv_split(dev, s, q.wide, k.wide, v.wide, qkv.wide, static_cast<int>(NH));
  ops::qkv_split(dev, s, q.half, k.half, v.half, qkv.half, static_cast<int>(NH));
  for (auto [t, what] : {std::pair{&q, "q"}, std::pair{&k, "k"}, std::pair{&v, "v"}}) rounded(*t, what);
  Both o = both({B, NH, T, hs}), dq = both({B, NH, T, hs}), dk = both({B, NH, T, hs}), dv = both({B, NH, T, hs});
  Tensor lse[2] = {stat({B, NH, T}), stat({B, NH, T})};
  ops::attention_forward(dev, s, o.wide, lse[0], q.wide, k.wide, v.wide, AttentionMask::causal);
  ops::attention_forward(dev, s, o.half, lse[1], q.half, k.half, v.half, AttentionMask::causal);
  rounded(o, "attention_forward");
  CHECK(values(lse[1]) == values(lse[0]));
  ops::attention_backward(dev, s, dq.wide, dk.wide, dv.wide, o.wide, q.wide, k.wide, v.wide, o.wide, lse[0],
                          AttentionMask::causal);
  ops::attention_backward(dev, s, dq.half, dk.half, dv.half, o.half, q.half, k.half, v.half, o.half, lse[0],
                          AttentionMask::causal);
  for (auto [t, what] : {std::pair{&dq, "dq"}, std::pair{&dk, "dk"}, std::pair{&dv, "dv"}}) rounded(*t, what);
  Both merged = both({B, T, C});
  ops::heads_merge(dev, s, merged.wide, o.wide);
  ops::heads_merge(dev, s, merged.half, o.half);
  rounded(merged, "heads_merge");
  ops::heads_merge_backward(dev, s, dq.wide, merged.wide);
  ops::heads_merge_backward(dev, s, dq.half, merged.half);
  rounded(dq, "heads_merge_backward");
  ops::qkv_split_backward(dev, s, qkv.wide, dq.wide, dk.wide, dv.wide, static_cast<int>(NH));
  ops::qkv_split_backward(dev, s, qkv.half, dq.half, dk.half, dv.half, static_cast<int>(NH));
  rounded(qkv, "qkv_split_backward");
  ops::fill(dev, s, g.wide, 0.1f);
  ops::fill(dev, s, g.half, 0.1f);
  rounded(g, "fill");
  CHECK(dev.race_reports().empty());

  // What stays float32 refuses bf16, naming the op.
  using Catch::Contains;
  Tensor half_stat = dev.empty({N}, DType::bf16, s, "bf16 statistics");
  CHECK_THROWS_WITH(ops::layernorm_forward(dev, s, ln.half, half_stat, half_stat, x.half, cw.half, cb.half),
                    Contains("layernorm_forward") && Contains("f32"));
  CHECK_THROWS_WITH(ops::crossentropy_forward(dev, s, dlogits.half.view(0, {N}), logits.half, tokens),
                    Contains("crossentropy_forward") && Contains("f32"));
  CHECK_THROWS_WITH(ops::adamw(dev, s, w.half, w.half, w.half, w.half, 1, {}), Contains("adamw") && Contains("f32"));
}

// The cost of an op in bf16: a GEMM-shaped one runs at the tensor cores' bf16 peak, everything
// else computes in float32 (its FLOPs at the f32 peak) and moves 2-byte elements.
TEST_CASE("ops: a bf16 matmul is charged the bf16 peak, every op its 2-byte traffic", "[ops][bf16]") {
  Profile p = load_profile("h100-8");
  p.kernel_overhead_us = 0;
  p.matmul_efficiency = p.attention_efficiency = p.elementwise_efficiency = 1;
  const int64_t N = 6, C = 5, OC = 7;
  auto last = [](SimDevice& dev) {
    const auto& slices = dev.trace().timeline().slices;
    return slices.back().end_us - slices.back().start_us;
  };
  for (const bool count_flops : {true, false}) {
    p.peak_tflops_f32 = count_flops ? 1e-6 : 1e9;  // 1 FLOP a us
    p.peak_tflops_bf16 = count_flops ? 4e-6 : 1e9;  // 4 FLOPs a us
    p.hbm_GBps = count_flops ? 1e12 : 1e-3;         // 1 byte a us
    SimDevice dev(p, ComputeMode::skip, 0, 1);
    Stream& s = dev.compute_stream();
    for (const DType t : {DType::f32, DType::bf16}) {
      auto make = [&](Shape shape) { return dev.empty(shape, t, s, "t"); };
      Tensor x = make({N, C}), w = make({OC, C}), out = make({N, OC}), y = make({N, C});
      const double f = static_cast<double>(dtype_size(t));
      ops::matmul_forward(dev, s, out, x, w, Tensor{});
      const double peak = t == DType::bf16 ? 4.0 : 1.0;
      CHECK(last(dev) == Approx(count_flops ? 2.0 * N * C * OC / peak : f * (N * C + OC * C + N * OC)));
      ops::gelu_forward(dev, s, y, x);
      CHECK(last(dev) == Approx(count_flops ? 10.0 * N * C : 2 * f * N * C));
    }
  }
  CHECK(ops::math_dtype(KernelClass::elementwise, {}) == DType::f32);
}

TEST_CASE("ops: embedding forward matches a double reference, backward matches finite differences", "[ops]") {
  SimDevice dev = real_device();
  Stream& s = dev.compute_stream();
  for (int trial = 0; trial < 3; ++trial) {
    const int64_t B = pick(1, 3), T = pick(3, 7), C = pick(5, 13), V = 11, maxT = T + 2;
    std::vector<int32_t> ids = random_ids(B * T, V);
    ids[1] = ids[0];  // a repeated token: its dwte row gets both positions' gradients
    const Vec wte = random_vec(V * C), wpe = random_vec(maxT * C), r = random_vec(B * T * C);
    Tensor tokens = i32_tensor(dev, {B, T}, ids, "tokens");
    Tensor twte = tensor_of(dev, {V, C}, wte, "wte"), twpe = tensor_of(dev, {maxT, C}, wpe, "wpe");
    Tensor out = zeros(dev, {B, T, C}, "out");
    ops::embedding_forward(dev, s, out, tokens, twte, twpe);
    check_close(values(out), embedding_ref(ids, wte, wpe, B, T, C), 1e-6, "embedding out");

    Tensor dout = tensor_of(dev, {B, T, C}, r, "dout");
    Tensor dwte = zeros(dev, {V, C}, "dwte"), dwpe = zeros(dev, {maxT, C}, "dwpe");
    ops::embedding_backward(dev, s, dwte, dwpe, dout, tokens);
    const Vec want_wte = numerical_grad([&](const Vec& x) { return embedding_ref(ids, x, wpe, B, T, C); }, wte, r);
    const Vec want_wpe = numerical_grad([&](const Vec& x) { return embedding_ref(ids, wte, x, B, T, C); }, wpe, r);
    check_close(values(dwte), want_wte, 1e-3, "dwte");
    check_close(values(dwpe), want_wpe, 1e-3, "dwpe");
    ops::embedding_backward(dev, s, dwte, dwpe, dout, tokens);
    check_close(values(dwte), scaled(want_wte, 2), 1e-3, "dwte after two calls");
    check_close(values(dwpe), scaled(want_wpe, 2), 1e-3, "dwpe after two calls");
  }
  CHECK(dev.race_reports().empty());
}

TEST_CASE("ops: layernorm forward matches a double reference, backward matches finite differences", "[ops]") {
  SimDevice dev = real_device();
  Stream& s = dev.compute_stream();
  for (int trial = 0; trial < 3; ++trial) {
    const int64_t N = pick(3, 7), C = pick(5, 13);
    const Vec x = random_vec(N * C, 2.0), w = random_vec(C), b = random_vec(C), r = random_vec(N * C);
    Tensor inp = tensor_of(dev, {N, C}, x, "inp"), tw = tensor_of(dev, {C}, w, "w"), tb = tensor_of(dev, {C}, b, "b");
    Tensor out = zeros(dev, {N, C}, "out"), mean = zeros(dev, {N}, "mean"), rstd = zeros(dev, {N}, "rstd");
    ops::layernorm_forward(dev, s, out, mean, rstd, inp, tw, tb);
    check_close(values(out), layernorm_ref(x, w, b, N, C), 1e-5, "layernorm out");

    Tensor dout = tensor_of(dev, {N, C}, r, "dout");
    Tensor dinp = zeros(dev, {N, C}, "dinp"), dw = zeros(dev, {C}, "dw"), db = zeros(dev, {C}, "db");
    ops::layernorm_backward(dev, s, dinp, dw, db, dout, inp, tw, mean, rstd);
    const Vec want_x = numerical_grad([&](const Vec& v) { return layernorm_ref(v, w, b, N, C); }, x, r);
    const Vec want_w = numerical_grad([&](const Vec& v) { return layernorm_ref(x, v, b, N, C); }, w, r);
    const Vec want_b = numerical_grad([&](const Vec& v) { return layernorm_ref(x, w, v, N, C); }, b, r);
    check_close(values(dinp), want_x, 1e-3, "layernorm dinp");
    check_close(values(dw), want_w, 1e-3, "layernorm dweight");
    check_close(values(db), want_b, 1e-3, "layernorm dbias");
    ops::layernorm_backward(dev, s, dinp, dw, db, dout, inp, tw, mean, rstd);
    check_close(values(dinp), scaled(want_x, 2), 1e-3, "layernorm dinp after two calls");
    check_close(values(dw), scaled(want_w, 2), 1e-3, "layernorm dweight after two calls");
    check_close(values(db), scaled(want_b, 2), 1e-3, "layernorm dbias after two calls");
  }
  CHECK(dev.race_reports().empty());
}

TEST_CASE("ops: matmul forward and backward, with and without bias, against finite differences", "[ops]") {
  SimDevice dev = real_device();
  Stream& s = dev.compute_stream();
  for (const bool with_bias : {true, false}) {
    for (int trial = 0; trial < 3; ++trial) {
      const int64_t B = pick(1, 2), T = pick(3, 7), N = B * T, C = pick(5, 13), OC = pick(5, 13);
      const Vec x = random_vec(N * C), w = random_vec(OC * C), r = random_vec(N * OC);
      const Vec b = with_bias ? random_vec(OC) : Vec{};
      INFO("N " << N << ", C " << C << ", OC " << OC << (with_bias ? ", bias" : ", no bias"));
      Tensor inp = tensor_of(dev, {B, T, C}, x, "inp"), tw = tensor_of(dev, {OC, C}, w, "w");
      Tensor tb = with_bias ? tensor_of(dev, {OC}, b, "b") : Tensor{};
      Tensor out = tensor_of(dev, {B, T, OC}, random_vec(N * OC), "out");  // overwritten, not accumulated
      ops::matmul_forward(dev, s, out, inp, tw, tb);
      check_close(values(out), matmul_ref(x, w, b, N, C, OC), 1e-5, "matmul out");

      Tensor dout = tensor_of(dev, {B, T, OC}, r, "dout");
      Tensor dinp = zeros(dev, {B, T, C}, "dinp"), dw = zeros(dev, {OC, C}, "dw");
      Tensor db = with_bias ? zeros(dev, {OC}, "db") : Tensor{};
      ops::matmul_backward(dev, s, dinp, dw, db, dout, inp, tw);
      const Vec want_x = numerical_grad([&](const Vec& v) { return matmul_ref(v, w, b, N, C, OC); }, x, r);
      const Vec want_w = numerical_grad([&](const Vec& v) { return matmul_ref(x, v, b, N, C, OC); }, w, r);
      check_close(values(dinp), want_x, 1e-3, "matmul dinp");
      check_close(values(dw), want_w, 1e-3, "matmul dweight");
      Vec want_b;
      if (with_bias) {
        want_b = numerical_grad([&](const Vec& v) { return matmul_ref(x, w, v, N, C, OC); }, b, r);
        check_close(values(db), want_b, 1e-3, "matmul dbias");
      }
      ops::matmul_backward(dev, s, dinp, dw, db, dout, inp, tw);
      check_close(values(dinp), scaled(want_x, 2), 1e-3, "matmul dinp after two calls");
      check_close(values(dw), scaled(want_w, 2), 1e-3, "matmul dweight after two calls");
      if (with_bias) check_close(values(db), scaled(want_b, 2), 1e-3, "matmul dbias after two calls");
    }
  }
  CHECK(dev.race_reports().empty());
}

// A frozen parameter (requires_grad=False) passes an undefined gradient: every other gradient
// must be bit for bit what it is when all are computed, and the frozen one's work is not
// launched (checked under --compute skip with 1 FLOP per us, as the next test does).
TEST_CASE("ops: backward with frozen parameters (undefined gradients) computes the others exactly and skips the rest", "[ops]") {
  SimDevice dev = real_device();
  Stream& s = dev.compute_stream();
  // V < T: a frozen wpe must not be checked against the other table's rows (tiny's 32 < 64).
  const int64_t B = 2, T = 5, N = B * T, C = 7, OC = 9, V = 4, maxT = 6;
  Tensor inp = tensor_of(dev, {B, T, C}, random_vec(N * C), "inp"), tw = tensor_of(dev, {OC, C}, random_vec(OC * C), "w");
  Tensor dout = tensor_of(dev, {B, T, OC}, random_vec(N * OC), "dout");
  Tensor all_dinp = zeros(dev, {B, T, C}, "dinp"), all_dw = zeros(dev, {OC, C}, "dw"), all_db = zeros(dev, {OC}, "db");
  ops::matmul_backward(dev, s, all_dinp, all_dw, all_db, dout, inp, tw);

  Tensor linp = tensor_of(dev, {N, C}, random_vec(N * C, 2.0), "inp"), lw = tensor_of(dev, {C}, random_vec(C), "w");
  Tensor lb = tensor_of(dev, {C}, random_vec(C), "b"), ldout = tensor_of(dev, {N, C}, random_vec(N * C), "dout");
  Tensor out = zeros(dev, {N, C}, "out"), mean = zeros(dev, {N}, "mean"), rstd = zeros(dev, {N}, "rstd");
  ops::layernorm_forward(dev, s, out, mean, rstd, linp, lw, lb);
  Tensor all_ldinp = zeros(dev, {N, C}, "dinp"), all_ldw = zeros(dev, {C}, "dw"), all_ldb = zeros(dev, {C}, "db");
  ops::layernorm_backward(dev, s, all_ldinp, all_ldw, all_ldb, ldout, linp, lw, mean, rstd);

  Tensor tokens = i32_tensor(dev, {B, T}, random_ids(N, V), "tokens"), edout = tensor_of(dev, {B, T, C}, random_vec(N * C), "dout");
  Tensor all_dwte = zeros(dev, {V, C}, "dwte"), all_dwpe = zeros(dev, {maxT, C}, "dwpe");
  ops::embedding_backward(dev, s, all_dwte, all_dwpe, edout, tokens);

  for (const bool first_frozen : {true, false})
    for (const bool second_frozen : {true, false}) {
      INFO((first_frozen ? "weight frozen" : "weight trains") << ", " << (second_frozen ? "bias frozen" : "bias trains"));
      const auto maybe = [&](bool frozen, Shape shape) { return frozen ? Tensor{} : zeros(dev, shape, "grad"); };
      Tensor dinp = zeros(dev, {B, T, C}, "dinp"), dw = maybe(first_frozen, {OC, C}), db = maybe(second_frozen, {OC});
      ops::matmul_backward(dev, s, dinp, dw, db, dout, inp, tw);
      CHECK(values(dinp) == values(all_dinp));
      if (dw.defined()) CHECK(values(dw) == values(all_dw));
      if (db.defined()) CHECK(values(db) == values(all_db));

      Tensor ldinp = zeros(dev, {N, C}, "dinp"), ldw = maybe(first_frozen, {C}), ldb = maybe(second_frozen, {C});
      ops::layernorm_backward(dev, s, ldinp, ldw, ldb, ldout, linp, lw, mean, rstd);
      CHECK(values(ldinp) == values(all_ldinp));
      if (ldw.defined()) CHECK(values(ldw) == values(all_ldw));
      if (ldb.defined()) CHECK(values(ldb) == values(all_ldb));

      Tensor dwte = maybe(first_frozen, {V, C}), dwpe = maybe(second_frozen, {maxT, C});  // wte and wpe
      ops::embedding_backward(dev, s, dwte, dwpe, edout, tokens);
      if (dwte.defined()) CHECK(values(dwte) == values(all_dwte));
      if (dwpe.defined()) CHECK(values(dwpe) == values(all_dwpe));
    }
  CHECK(dev.race_reports().empty());

  Profile p = load_profile("h100-8");
  p.kernel_overhead_us = 0;
  p.matmul_efficiency = p.attention_efficiency = p.elementwise_efficiency = 1;
  p.peak_tflops_f32 = 1e-6;  // 1 FLOP per us
  p.hbm_GBps = 1e12;
  SimDevice skip(p, ComputeMode::skip, 0, 1);
  Stream& k = skip.compute_stream();
  auto f32 = [&](Shape shape) { return skip.empty(shape, DType::f32, k, "t"); };
  const auto& slices = skip.trace().timeline().slices;
  const auto launched = [&](const std::function<void()>& op) {
    const size_t before = slices.size();
    op();
    std::vector<double> us;
    for (size_t i = before; i < slices.size(); ++i) us.push_back(slices[i].end_us - slices[i].start_us);
    return us;
  };
  Tensor x = f32({B, T, C}), w = f32({OC, C}), bias = f32({OC}), y = f32({B, T, OC});
  const double input = 2.0 * N * C * OC;
  CHECK(launched([&] { ops::matmul_backward(skip, k, x, Tensor{}, Tensor{}, y, x, w); }) == std::vector<double>{input});
  CHECK(launched([&] { ops::matmul_backward(skip, k, x, Tensor{}, bias, y, x, w); }) == std::vector<double>{input, 1.0 * N * OC});
  Tensor tok = skip.empty({B, T}, DType::i32, k, "ids"), wpe = f32({T, C});
  CHECK(launched([&] { ops::embedding_backward(skip, k, Tensor{}, Tensor{}, x, tok); }).empty());
  CHECK(launched([&] { ops::embedding_backward(skip, k, Tensor{}, wpe, x, tok); }).size() == 1);
}

// Shapes that cross every cache block of the gemm (256 deep, 64 rows, 512 columns) and end in
// partial register blocks; the backward is checked against its closed form in double.
TEST_CASE("ops: matmul at shapes past the cache blocks matches the double closed form", "[ops]") {
  SimDevice dev = real_device();
  Stream& s = dev.compute_stream();
  struct Dims {
    int64_t N, C, OC;
  };
  for (const Dims d : {Dims{67, 261, 530}, Dims{130, 515, 9}, Dims{1, 1, 1}, Dims{5, 3, 1027}}) {
    const int64_t N = d.N, C = d.C, OC = d.OC;
    INFO("N " << N << ", C " << C << ", OC " << OC);
    const Vec x = random_vec(N * C), w = random_vec(OC * C), b = random_vec(OC), g = random_vec(N * OC);
    Tensor inp = tensor_of(dev, {N, C}, x, "inp"), tw = tensor_of(dev, {OC, C}, w, "w");
    Tensor tb = tensor_of(dev, {OC}, b, "b");
    Tensor out = zeros(dev, {N, OC}, "out");
    ops::matmul_forward(dev, s, out, inp, tw, tb);
    check_close(values(out), matmul_ref(x, w, b, N, C, OC), 1e-5, "matmul out");

    Tensor dout = tensor_of(dev, {N, OC}, g, "dout");
    Tensor dinp = zeros(dev, {N, C}, "dinp"), dw = zeros(dev, {OC, C}, "dw"), db = zeros(dev, {OC}, "db");
    ops::matmul_backward(dev, s, dinp, dw, db, dout, inp, tw);
    Vec want_x(static_cast<size_t>(N * C)), want_w(static_cast<size_t>(OC * C)), want_b(static_cast<size_t>(OC));
    for (int64_t n = 0; n < N; ++n)
      for (int64_t o = 0; o < OC; ++o) {
        want_b[o] += g[n * OC + o];
        for (int64_t c = 0; c < C; ++c) {
          want_x[n * C + c] += g[n * OC + o] * w[o * C + c];
          want_w[o * C + c] += g[n * OC + o] * x[n * C + c];
        }
      }
    check_close(values(dinp), want_x, 1e-5, "matmul dinp");
    check_close(values(dw), want_w, 1e-5, "matmul dweight");
    check_close(values(db), want_b, 1e-5, "matmul dbias");
  }
  CHECK(dev.race_reports().empty());
}

TEST_CASE("ops: gelu forward matches a double reference, backward matches finite differences", "[ops]") {
  SimDevice dev = real_device();
  Stream& s = dev.compute_stream();
  for (int trial = 0; trial < 3; ++trial) {
    const int64_t N = pick(3, 7), C = pick(5, 13);
    const Vec x = random_vec(N * C, 4.0), r = random_vec(N * C);
    Tensor inp = tensor_of(dev, {N, C}, x, "inp"), out = zeros(dev, {N, C}, "out");
    ops::gelu_forward(dev, s, out, inp);
    check_close(values(out), gelu_ref(x), 1e-5, "gelu out");

    Tensor dout = tensor_of(dev, {N, C}, r, "dout"), dinp = zeros(dev, {N, C}, "dinp");
    ops::gelu_backward(dev, s, dinp, inp, dout);
    const Vec want = numerical_grad(gelu_ref, x, r);
    check_close(values(dinp), want, 1e-3, "gelu dinp");
    ops::gelu_backward(dev, s, dinp, inp, dout);
    check_close(values(dinp), scaled(want, 2), 1e-3, "gelu dinp after two calls");
  }
  CHECK(dev.race_reports().empty());
}

TEST_CASE("ops: crossentropy forward matches a double reference, backward matches finite differences", "[ops]") {
  SimDevice dev = real_device();
  Stream& s = dev.compute_stream();
  for (int trial = 0; trial < 3; ++trial) {
    const int64_t B = pick(1, 3), T = pick(3, 7), N = B * T, V = 11;
    const float dloss = 1.0f / static_cast<float>(N);
    const Vec x = random_vec(N * V, 3.0);
    const std::vector<int32_t> ids = random_ids(N, V);
    Tensor logits = tensor_of(dev, {B, T, V}, x, "logits"), targets = i32_tensor(dev, {B, T}, ids, "targets");
    Tensor losses = zeros(dev, {B, T}, "losses");
    ops::crossentropy_forward(dev, s, losses, logits, targets);
    check_close(values(losses), crossentropy_ref(x, ids, N, V), 1e-5, "losses");

    // dloss is the same for every position, so L = dloss * sum(losses).
    Tensor dlogits = tensor_of(dev, {B, T, V}, random_vec(N * V), "dlogits");  // written, not accumulated
    ops::crossentropy_backward(dev, s, dlogits, logits, targets, dloss);
    const Vec want = numerical_grad([&](const Vec& v) { return crossentropy_ref(v, ids, N, V); }, x,
                                    Vec(static_cast<size_t>(N), static_cast<double>(dloss)));
    check_close(values(dlogits), want, 1e-3, "dlogits");
    ops::crossentropy_backward(dev, s, dlogits, logits, targets, dloss);
    check_close(values(dlogits), want, 1e-3, "dlogits after two calls");
  }
  CHECK(dev.race_reports().empty());
}

// Tensor parallelism's pieces (chapter 10), each against the whole op it stands for: the
// vocabulary cut as torch.chunk cuts it (13, 13, 11 of 37 rows), the ranks' partial results
// reduced here on the host as the collectives would (max, then sums).
TEST_CASE("ops: the vocabulary's slices give the whole embedding, loss and gradient", "[ops]") {
  SimDevice dev = real_device();
  Stream& s = dev.compute_stream();
  const int64_t B = 2, T = 5, N = B * T, C = 7, V = 37, chunk = 13;
  const float dloss = 1.0f / static_cast<float>(N);
  std::vector<int32_t> ids = random_ids(N, V);
  ids[0] = 0, ids[1] = 12, ids[2] = 13, ids[3] = 36;  // the slices' edges
  const Vec wte = random_vec(V * C), wpe = random_vec(T * C), x = random_vec(N * V, 3.0), dout = random_vec(N * C);
  Tensor tokens = i32_tensor(dev, {B, T}, ids, "tokens"), twpe = tensor_of(dev, {T, C}, wpe, "wpe");
  Tensor logits = tensor_of(dev, {B, T, V}, x, "logits");

  // The whole ops.
  Tensor twte = tensor_of(dev, {V, C}, wte, "wte"), emb = zeros(dev, {B, T, C}, "emb");
  ops::embedding_forward(dev, s, emb, tokens, twte, twpe);
  Tensor tdout = tensor_of(dev, {B, T, C}, dout, "dout"), dwte = zeros(dev, {V, C}, "dwte");
  ops::embedding_backward(dev, s, dwte, Tensor{}, tdout, tokens);
  Tensor losses = zeros(dev, {B, T}, "losses"), dlogits = zeros(dev, {B, T, V}, "dlogits");
  ops::crossentropy_forward(dev, s, losses, logits, tokens);
  ops::crossentropy_backward(dev, s, dlogits, logits, tokens, dloss);

  // The slices: embeddings summed over slices (the first adds the positions), row statistics.
  Vec emb_sum(static_cast<size_t>(N * C), 0.0), dwte_cat, max(static_cast<size_t>(N), -INFINITY);
  Vec sum_exp(static_cast<size_t>(N), 0.0), target(static_cast<size_t>(N), 0.0);
  std::vector<Tensor> slice_logits;
  for (int64_t begin = 0; begin < V; begin += chunk) {
    const int64_t rows = std::min(chunk, V - begin);
    Tensor part = tensor_of(dev, {rows, C}, Vec(wte.begin() + begin * C, wte.begin() + (begin + rows) * C), "wte slice");
    Tensor out = zeros(dev, {B, T, C}, "emb slice");
    ops::embedding_forward(dev, s, out, tokens, part, begin == 0 ? twpe : Tensor{}, Tensor{}, begin);
    for (int64_t i = 0; i < N * C; ++i) emb_sum[static_cast<size_t>(i)] += out.f32()[i];
    Tensor dpart = zeros(dev, {rows, C}, "dwte slice");
    ops::embedding_backward(dev, s, dpart, Tensor{}, tdout, tokens, Tensor{}, begin);
    for (double v : values(dpart)) dwte_cat.push_back(v);

    Vec cols;
    for (int64_t n = 0; n < N; ++n) cols.insert(cols.end(), x.begin() + n * V + begin, x.begin() + n * V + begin + rows);
    slice_logits.push_back(tensor_of(dev, {B, T, rows}, cols, "logits slice"));
    Tensor m = zeros(dev, {N}, "row max");
    ops::crossentropy_row_max(dev, s, m, slice_logits.back());
    for (int64_t n = 0; n < N; ++n) max[static_cast<size_t>(n)] = std::max(max[static_cast<size_t>(n)], values(m)[n]);
  }
  Tensor tmax = tensor_of(dev, {N}, max, "row max");
  for (int64_t begin = 0, k = 0; begin < V; begin += chunk, ++k) {
    Tensor se = zeros(dev, {N}, "sum exp"), tl = zeros(dev, {N}, "target logit");
    ops::crossentropy_row_sums(dev, s, se, tl, slice_logits[static_cast<size_t>(k)], tmax, tokens, begin);
    for (int64_t n = 0; n < N; ++n) sum_exp[static_cast<size_t>(n)] += values(se)[n], target[static_cast<size_t>(n)] += values(tl)[n];
  }
  // One slice holds each token's row and one adds its position: rounded once, the sum is the
  // whole op's, bit for bit (as an all-reduce in float32 gives it).
  for (double& v : emb_sum) v = static_cast<float>(v);
  CHECK(values(emb) == emb_sum);
  CHECK(values(dwte) == dwte_cat);
  Tensor tsum = tensor_of(dev, {N}, sum_exp, "sum exp"), ttarget = tensor_of(dev, {N}, target, "target logit");
  Tensor slice_losses = zeros(dev, {B, T}, "losses from slices");
  ops::crossentropy_losses(dev, s, slice_losses, tmax, tsum, ttarget);
  check_close(values(slice_losses), values(losses), 1e-6, "losses from slices");
  Vec dcat(static_cast<size_t>(N * V));
  for (int64_t begin = 0, k = 0; begin < V; begin += chunk, ++k) {
    const Tensor& part = slice_logits[static_cast<size_t>(k)];
    const int64_t rows = part.shape[2];
    Tensor d = zeros(dev, part.shape, "dlogits slice");
    ops::crossentropy_backward_slice(dev, s, d, part, tokens, dloss, tmax, tsum, begin);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t j = 0; j < rows; ++j) dcat[static_cast<size_t>(n * V + begin + j)] = d.f32()[n * rows + j];
  }
  check_close(dcat, values(dlogits), 1e-6, "dlogits from slices");
  CHECK(dev.race_reports().empty());
}

TEST_CASE("ops: a bias on its own is matmul's bias, forward and backward", "[ops]") {
  SimDevice dev = real_device();
  Stream& s = dev.compute_stream();
  const int64_t N = 6, C = 5, OC = 7;
  const Vec x = random_vec(N * C), w = random_vec(OC * C), b = random_vec(OC), dy = random_vec(N * OC);
  Tensor tx = tensor_of(dev, {N, C}, x, "x"), tw = tensor_of(dev, {OC, C}, w, "w"), tb = tensor_of(dev, {OC}, b, "b");
  Tensor fused = zeros(dev, {N, OC}, "fused"), apart = zeros(dev, {N, OC}, "apart");
  ops::matmul_forward(dev, s, fused, tx, tw, tb);
  ops::matmul_forward(dev, s, apart, tx, tw, Tensor{});
  ops::bias_forward(dev, s, apart, tb);
  check_close(values(apart), values(fused), 1e-6, "bias added apart");
  Tensor tdy = tensor_of(dev, {N, OC}, dy, "dy"), db_fused = zeros(dev, {OC}, "db"), db_apart = zeros(dev, {OC}, "db");
  Tensor dx = zeros(dev, {N, C}, "dx");
  ops::matmul_backward(dev, s, dx, Tensor{}, db_fused, tdy, tx, tw);
  ops::bias_backward(dev, s, db_apart, tdy);
  CHECK(values(db_apart) == values(db_fused));
  CHECK(dev.race_reports().empty());
}

TEST_CASE("ops: crossentropy of uniform logits is log V, and huge logits stay finite", "[ops]") {
  SimDevice dev = real_device();
  Stream& s = dev.compute_stream();
  const int64_t V = 11;
  Tensor logits = tensor_of(dev, {2, V}, Vec(2 * V, 3.5), "logits"), targets = i32_tensor(dev, {2}, {0, 10}, "targets");
  Tensor losses = zeros(dev, {2}, "losses");
  ops::crossentropy_forward(dev, s, losses, logits, targets);
  CHECK(losses.f32()[0] == Approx(std::log(11.0)).epsilon(1e-6));
  CHECK(losses.f32()[1] == Approx(std::log(11.0)).epsilon(1e-6));

  Vec big(2 * V, 0.0);
  big[0] = 1000;   // row 0: its target holds all the mass, loss 0
  big[V + 3] = 1000;  // row 1: target 10 is 1000 below the max, loss 1000
  set(logits, big);
  ops::crossentropy_forward(dev, s, losses, logits, targets);
  CHECK(losses.f32()[0] == Approx(0.0).margin(1e-6));
  CHECK(losses.f32()[1] == Approx(1000.0).epsilon(1e-6));
  Tensor dlogits = zeros(dev, {2, V}, "dlogits");
  ops::crossentropy_backward(dev, s, dlogits, logits, targets, 1.0f);
  CHECK(std::all_of(dlogits.f32(), dlogits.f32() + 2 * V, [](float v) { return std::isfinite(v); }));
  CHECK(dlogits.f32()[V + 3] == Approx(1.0));
  CHECK(dlogits.f32()[V + 10] == Approx(-1.0));
  CHECK(dev.race_reports().empty());
}

// Two steps worked by hand with lr 0.1, betas (0.9, 0.95), weight decay 0.1 (eps negligible):
//   p = 1, g = 0.5 then -0.25:
//     step 1: m = 0.05, v = 0.0125, mhat = 0.05 / 0.1 = 0.5, vhat = 0.0125 / 0.05 = 0.25,
//             p = 1 * (1 - 0.01) - 0.1 * 0.5 / 0.5 = 0.89
//     step 2: m = 0.045 - 0.025 = 0.02, v = 0.011875 + 0.003125 = 0.015,
//             mhat = 0.02 / 0.19, vhat = 0.015 / 0.0975, mhat / sqrt(vhat) = 0.2683708...,
//             p = 0.89 * 0.99 - 0.02683708 = 0.85426292
//   p = -2, g = -0.5 then 0.25 (every moment negated): p = -1.98 + 0.1 = -1.88, then
//             p = -1.88 * 0.99 + 0.02683708 = -1.83436292
TEST_CASE("ops: adamw matches a hand-computed two-step example", "[ops]") {
  SimDevice dev = real_device();
  Stream& s = dev.compute_stream();
  Tensor p = tensor_of(dev, {2}, {1.0, -2.0}, "p"), g = tensor_of(dev, {2}, {0.5, -0.5}, "g");
  Tensor m = zeros(dev, {2}, "m"), v = zeros(dev, {2}, "v");
  const ops::AdamW hp{0.1f, 0.9f, 0.95f, 1e-8f, 0.1f};
  ops::adamw(dev, s, p, g, m, v, 1, hp);
  CHECK(p.f32()[0] == Approx(0.89).epsilon(1e-6));
  CHECK(p.f32()[1] == Approx(-1.88).epsilon(1e-6));
  CHECK(m.f32()[0] == Approx(0.05).epsilon(1e-6));
  CHECK(v.f32()[0] == Approx(0.0125).epsilon(1e-6));
  set(g, {-0.25, 0.25});
  ops::adamw(dev, s, p, g, m, v, 2, hp);
  CHECK(p.f32()[0] == Approx(0.85426292).epsilon(1e-6));
  CHECK(p.f32()[1] == Approx(-1.83436292).epsilon(1e-6));
  CHECK(dev.race_reports().empty());
}

TEST_CASE("ops: shape and dtype errors throw naming the op and the shapes", "[ops]") {
  SimDevice dev = real_device();
  Stream& s = dev.compute_stream();
  Tensor a = f32_tensor(dev, {4, 8}, "a"), w = f32_tensor(dev, {6, 8}, "w"), wrong = f32_tensor(dev, {6, 7}, "wrong");
  Tensor out = f32_tensor(dev, {4, 6}, "out"), v = f32_tensor(dev, {8}, "v"), n = f32_tensor(dev, {4}, "n");
  Tensor ids = i32_tensor(dev, {4}, {0, 1, 2, 3}, "ids");
  using Catch::Contains;
  CHECK_THROWS_WITH(ops::matmul_forward(dev, s, out, a, wrong, Tensor{}),
                    Contains("matmul_forward") && Contains("[6, 7]"));
  CHECK_THROWS_WITH(ops::matmul_forward(dev, s, a, a, w, Tensor{}), Contains("matmul_forward") && Contains("[4, 6]"));
  CHECK_THROWS_WITH(ops::matmul_forward(dev, s, out, a, w, v), Contains("matmul_forward") && Contains("bias"));
  CHECK_THROWS_WITH(ops::matmul_backward(dev, s, a, wrong, Tensor{}, out, a, w), Contains("matmul_backward"));
  CHECK_THROWS_WITH(ops::layernorm_forward(dev, s, a, n, n, a, n, v), Contains("layernorm_forward"));
  CHECK_THROWS_WITH(ops::layernorm_backward(dev, s, out, v, v, a, a, v, n, n), Contains("layernorm_backward"));
  CHECK_THROWS_WITH(ops::gelu_forward(dev, s, out, a), Contains("gelu_forward") && Contains("[4, 8]"));
  CHECK_THROWS_WITH(ops::gelu_backward(dev, s, a, a, out), Contains("gelu_backward"));
  CHECK_THROWS_WITH(ops::crossentropy_forward(dev, s, n, a, n), Contains("crossentropy_forward") && Contains("i32"));
  CHECK_THROWS_WITH(ops::crossentropy_backward(dev, s, out, a, ids, 1.0f), Contains("crossentropy_backward"));
  CHECK_THROWS_WITH(ops::embedding_forward(dev, s, a, ids, w, w), Contains("embedding_forward"));
  CHECK_THROWS_WITH(ops::embedding_backward(dev, s, w, w, a, ids), Contains("embedding_backward"));
  CHECK_THROWS_WITH(ops::residual_forward(dev, s, out, a, a), Contains("residual_forward"));
  CHECK_THROWS_WITH(ops::copy(dev, s, out, a), Contains("copy"));
  CHECK_THROWS_WITH(ops::adamw(dev, s, a, out, a, a, 1, {}), Contains("adamw"));
  CHECK_THROWS_WITH(ops::adamw(dev, s, a, a, a, a, 0, {}), Contains("adamw"));
  // A target outside the vocabulary is found when the kernel runs.
  Tensor bad = i32_tensor(dev, {4}, {0, 1, 8, 3}, "bad");
  CHECK_THROWS_WITH(ops::crossentropy_forward(dev, s, n, a, bad), Contains("crossentropy_forward") && Contains("8"));
}

// With round numbers in the profile a kernel's duration is its FLOP count (1 FLOP per us) or its
// byte count (1 byte per us), so the trace shows what each op declares. Under --compute skip no
// tensor has memory, so this also checks that no op touches data outside its kernel body.
TEST_CASE("ops: under --compute skip every op runs and declares its FLOPs and bytes", "[ops]") {
  auto device = [](bool count_flops) {
    Profile p = load_profile("h100-8");
    p.kernel_overhead_us = 0;
    p.matmul_efficiency = p.attention_efficiency = p.elementwise_efficiency = 1;
    p.peak_tflops_f32 = count_flops ? 1e-6 : 1e9;
    p.hbm_GBps = count_flops ? 1e12 : 1e-3;
    return SimDevice(p, ComputeMode::skip, 0, 1);
  };
  const int64_t B = 2, T = 3, N = B * T, C = 5, OC = 7, V = 11;
  for (const bool count_flops : {true, false}) {
    SimDevice dev = device(count_flops);
    Stream& s = dev.compute_stream();
    auto f32 = [&](Shape shape) { return dev.empty(shape, DType::f32, s, "t"); };
    auto i32 = [&](Shape shape) { return dev.empty(shape, DType::i32, s, "ids"); };
    Tensor x = f32({B, T, C}), y = f32({B, T, C}), w = f32({OC, C}), bias = f32({OC}), out = f32({B, T, OC});
    Tensor cw = f32({C}), cb = f32({C}), stat = f32({B, T}), logits = f32({B, T, V}), tokens = i32({B, T});
    Tensor wte = f32({V, C}), wpe = f32({T, C});
    REQUIRE(x.data == nullptr);
    // The duration (us) of the last kernel on the compute stream.
    auto last = [&] {
      const auto& slices = dev.trace().timeline().slices;
      REQUIRE(!slices.empty());
      return slices.back().end_us - slices.back().start_us;
    };
    const double f = 4.0;  // bytes per element
    ops::copy(dev, s, y, x);
    if (!count_flops) CHECK(last() == Approx(2 * f * N * C));
    ops::residual_forward(dev, s, y, x, x);
    CHECK(last() == Approx(count_flops ? N * C : 3 * f * N * C));
    ops::embedding_forward(dev, s, x, tokens, wte, wpe);
    ops::embedding_backward(dev, s, wte, wpe, x, tokens);
    ops::layernorm_forward(dev, s, y, stat, stat, x, cw, cb);
    ops::layernorm_backward(dev, s, x, cw, cb, y, x, cw, stat, stat);
    ops::matmul_forward(dev, s, out, x, w, bias);
    CHECK(last() == Approx(count_flops ? 2.0 * N * C * OC : f * (N * C + OC * C + OC + N * OC)));
    ops::matmul_forward(dev, s, out, x, w, Tensor{});
    CHECK(last() == Approx(count_flops ? 2.0 * N * C * OC : f * (N * C + OC * C + N * OC)));
    const size_t before = dev.trace().timeline().slices.size();
    ops::matmul_backward(dev, s, x, w, bias, out, y, w);
    CHECK(dev.trace().timeline().slices.size() == before + 2);  // dinp and dweight, two kernels
    CHECK(last() == Approx(count_flops ? 2.0 * N * C * OC + N * OC : f * (N * OC + N * C + 2 * OC * C + 2 * OC)));
    ops::gelu_forward(dev, s, y, x);
    ops::gelu_backward(dev, s, x, y, y);
    ops::crossentropy_forward(dev, s, stat, logits, tokens);
    ops::crossentropy_backward(dev, s, logits, logits, tokens, 1.0f);
    Tensor row = f32({N});
    ops::crossentropy_row_max(dev, s, row, logits);
    ops::crossentropy_row_sums(dev, s, row, row, logits, row, tokens, 0);
    ops::crossentropy_losses(dev, s, stat, row, row, row);
    ops::crossentropy_backward_slice(dev, s, logits, logits, tokens, 1.0f, row, row, 0);
    ops::bias_forward(dev, s, out, bias);
    ops::bias_backward(dev, s, bias, out);
    ops::adamw(dev, s, w, w, w, w, 1, {});
    CHECK(last() == Approx(count_flops ? 15.0 * OC * C : 7 * f * OC * C));
    CHECK(dev.race_reports().empty());
  }
}
