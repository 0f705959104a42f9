// The attention ops (attention.h) against a naive double-precision reference: forward, backward
// (central finite differences), the LSE merge that ring attention builds on, the layout ops and
// their adjoints, accumulation, -inf rows and --compute skip.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "model/attention.h"
#include "device/sim_device.h"

using namespace shardlab;
using ops::AttentionMask;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Fixture {
  SimDevice dev{load_profile("h100-8"), ComputeMode::real, 0, 1};
  std::mt19937 rng{1234};

  Stream& s() { return dev.compute_stream(); }
  Tensor zeros(Shape shape, const char* name = "t") {
    Tensor t = dev.empty(shape, DType::f32, s(), name);
    for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = 0;
    return t;
  }
  Tensor random(Shape shape, float amplitude = 1, const char* name = "t") {
    Tensor t = zeros(shape, name);
    std::uniform_real_distribution<float> u(-amplitude, amplitude);
    for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = u(rng);
    return t;
  }
  int64_t pick(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); }
};

std::vector<double> to_double(const Tensor& t) { return {t.f32(), t.f32() + t.numel()}; }

// Full score matrix, mask, softmax, all in double: out [B, NH, Tq, hs] and lse [B, NH, Tq].
struct Ref {
  std::vector<double> out, lse;
};
Ref reference(const std::vector<double>& q, const std::vector<double>& k, const std::vector<double>& v, int64_t B,
              int64_t NH, int64_t Tq, int64_t Tk, int64_t hs, AttentionMask mask) {
  Ref r{std::vector<double>(static_cast<size_t>(B * NH * Tq * hs), 0.0),
        std::vector<double>(static_cast<size_t>(B * NH * Tq), -kInf)};
  const double scale = 1 / std::sqrt(static_cast<double>(hs));
  for (int64_t bh = 0; bh < B * NH; ++bh)
    for (int64_t i = 0; i < Tq; ++i) {
      std::vector<double> sc(static_cast<size_t>(Tk), -kInf);
      double m = -kInf;
      for (int64_t j = 0; j < Tk; ++j) {
        if (mask == AttentionMask::causal && j > i) continue;
        double dot = 0;
        for (int64_t c = 0; c < hs; ++c) dot += q[(bh * Tq + i) * hs + c] * k[(bh * Tk + j) * hs + c];
        sc[j] = scale * dot;
        m = std::max(m, sc[j]);
      }
      if (m == -kInf) continue;
      double sum = 0;
      for (int64_t j = 0; j < Tk; ++j) sum += std::exp(sc[j] - m);
      r.lse[bh * Tq + i] = m + std::log(sum);
      for (int64_t j = 0; j < Tk; ++j)
        for (int64_t c = 0; c < hs; ++c)
          r.out[(bh * Tq + i) * hs + c] += std::exp(sc[j] - m) / sum * v[(bh * Tk + j) * hs + c];
    }
  return r;
}

void check_close(const Tensor& got, const std::vector<double>& want, double tol) {
  REQUIRE(static_cast<size_t>(got.numel()) == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("element " << i);
    CHECK(got.f32()[i] == Approx(want[i]).epsilon(tol).margin(tol));
  }
}

void check_equal(const Tensor& a, const Tensor& b, double tol) { check_close(a, to_double(b), tol); }

// Rows [t0, t1) of a [B, NH, T, hs] (or [B, NH, T]) tensor, as a tensor of its own.
Tensor rows(Fixture& f, const Tensor& t, int64_t t0, int64_t t1) {
  const Shape& sh = t.shape;
  const int64_t inner = sh.ndim == 4 ? sh[3] : 1;
  const Tensor r = f.zeros(sh.ndim == 4 ? Shape{sh[0], sh[1], t1 - t0, inner} : Shape{sh[0], sh[1], t1 - t0});
  for (int64_t bh = 0; bh < sh[0] * sh[1]; ++bh)
    for (int64_t i = t0; i < t1; ++i)
      for (int64_t c = 0; c < inner; ++c) r.f32()[(bh * (t1 - t0) + i - t0) * inner + c] = t.f32()[(bh * sh[2] + i) * inner + c];
  return r;
}

double dot(const Tensor& a, const Tensor& b) {
  double sum = 0;
  for (int64_t i = 0; i < a.numel(); ++i) sum += static_cast<double>(a.f32()[i]) * b.f32()[i];
  return sum;
}

bool all_finite(const Tensor& t) {
  for (int64_t i = 0; i < t.numel(); ++i)
    if (std::isnan(t.f32()[i]) || t.f32()[i] == std::numeric_limits<float>::infinity()) return false;
  return true;
}

}  // namespace

TEST_CASE("attention: forward matches a double-precision reference on odd shapes", "[attention]") {
  Fixture f;
  for (int trial = 0; trial < 24; ++trial) {
    const int64_t B = f.pick(1, 2), NH = f.pick(1, 3), T = f.pick(1, 9), hs = f.pick(3, 8);
    const AttentionMask mask = trial % 2 ? AttentionMask::causal : AttentionMask::none;
    // Without the mask the key count may differ from the query count.
    const int64_t Tk = mask == AttentionMask::causal ? T : f.pick(1, 9);
    INFO("B " << B << " NH " << NH << " Tq " << T << " Tk " << Tk << " hs " << hs << " causal " << trial % 2);
    const Tensor q = f.random({B, NH, T, hs}), k = f.random({B, NH, Tk, hs}), v = f.random({B, NH, Tk, hs});
    const Tensor out = f.zeros({B, NH, T, hs}), lse = f.zeros({B, NH, T});
    ops::attention_forward(f.dev, f.s(), out, lse, q, k, v, mask);
    const Ref r = reference(to_double(q), to_double(k), to_double(v), B, NH, T, Tk, hs, mask);
    check_close(out, r.out, 1e-5);
    check_close(lse, r.lse, 1e-5);
  }
  CHECK(f.dev.race_reports().empty());
}

TEST_CASE("attention: backward matches central finite differences of sum(out * R)", "[attention]") {
  Fixture f;
  for (const AttentionMask mask : {AttentionMask::causal, AttentionMask::none}) {
    const int64_t B = 2, NH = 3, T = 5, Tk = mask == AttentionMask::causal ? T : 7, hs = 4;
    const Tensor q = f.random({B, NH, T, hs}), k = f.random({B, NH, Tk, hs}), v = f.random({B, NH, Tk, hs});
    const Tensor R = f.random({B, NH, T, hs});
    const Tensor out = f.zeros(q.shape), lse = f.zeros({B, NH, T});
    const Tensor dq = f.zeros(q.shape), dk = f.zeros(k.shape), dv = f.zeros(v.shape);
    ops::attention_forward(f.dev, f.s(), out, lse, q, k, v, mask);
    ops::attention_backward(f.dev, f.s(), dq, dk, dv, R, q, k, v, out, lse, mask);  // dL/dout = R

    std::vector<double> x[3] = {to_double(q), to_double(k), to_double(v)};
    const std::vector<double> rd = to_double(R);
    const auto loss = [&] {
      const Ref r = reference(x[0], x[1], x[2], B, NH, T, Tk, hs, mask);
      double L = 0;
      for (size_t i = 0; i < rd.size(); ++i) L += r.out[i] * rd[i];
      return L;
    };
    const Tensor grads[3] = {dq, dk, dv};
    for (int which = 0; which < 3; ++which) {
      std::vector<double> fd(x[which].size());
      for (size_t i = 0; i < fd.size(); ++i) {
        const double keep = x[which][i], h = 1e-4;
        x[which][i] = keep + h;
        const double up = loss();
        x[which][i] = keep - h;
        fd[i] = (up - loss()) / (2 * h);
        x[which][i] = keep;
      }
      INFO("gradient " << "qkv"[which] << ", causal " << (mask == AttentionMask::causal));
      check_close(grads[which], fd, 1e-3);
    }
  }
  CHECK(f.dev.race_reports().empty());
}

TEST_CASE("attention: backward accumulates, twice doubles", "[attention]") {
  Fixture f;
  const Tensor q = f.random({2, 2, 6, 5}), k = f.random({2, 2, 6, 5}), v = f.random({2, 2, 6, 5});
  const Tensor dout = f.random(q.shape), out = f.zeros(q.shape), lse = f.zeros({2, 2, 6});
  ops::attention_forward(f.dev, f.s(), out, lse, q, k, v, AttentionMask::causal);
  const Tensor once[3] = {f.zeros(q.shape), f.zeros(q.shape), f.zeros(q.shape)};
  const Tensor twice[3] = {f.zeros(q.shape), f.zeros(q.shape), f.zeros(q.shape)};
  ops::attention_backward(f.dev, f.s(), once[0], once[1], once[2], dout, q, k, v, out, lse, AttentionMask::causal);
  for (int rep = 0; rep < 2; ++rep)
    ops::attention_backward(f.dev, f.s(), twice[0], twice[1], twice[2], dout, q, k, v, out, lse,
                            AttentionMask::causal);
  for (int g = 0; g < 3; ++g) {
    std::vector<double> doubled = to_double(once[g]);
    for (double& x : doubled) x *= 2;
    check_close(twice[g], doubled, 1e-6);
  }
  CHECK(f.dev.race_reports().empty());
}

TEST_CASE("attention: merging key blocks without a mask gives full attention, forward and backward",
          "[attention]") {
  Fixture f;
  const int64_t B = 2, NH = 2, Tq = 5, Tk = 7, split = 3, hs = 6;
  const Tensor q = f.random({B, NH, Tq, hs}), k = f.random({B, NH, Tk, hs}), v = f.random({B, NH, Tk, hs});
  const Tensor out = f.zeros(q.shape), lse = f.zeros({B, NH, Tq});
  ops::attention_forward(f.dev, f.s(), out, lse, q, k, v, AttentionMask::none);

  const Tensor k1 = rows(f, k, 0, split), v1 = rows(f, v, 0, split), k2 = rows(f, k, split, Tk),
               v2 = rows(f, v, split, Tk);
  const Tensor m_out = f.zeros(q.shape), m_lse = f.zeros({B, NH, Tq});
  const Tensor b_out = f.zeros(q.shape), b_lse = f.zeros({B, NH, Tq});
  ops::attention_forward(f.dev, f.s(), m_out, m_lse, q, k1, v1, AttentionMask::none);
  ops::attention_forward(f.dev, f.s(), b_out, b_lse, q, k2, v2, AttentionMask::none);
  ops::attention_merge(f.dev, f.s(), m_out, m_lse, b_out, b_lse);
  check_equal(m_out, out, 1e-5);
  check_equal(m_lse, lse, 1e-5);

  // Backward per block from the merged out and lse: the pieces add up to the full gradient.
  const Tensor dout = f.random(q.shape);
  const Tensor dq = f.zeros(q.shape), dk = f.zeros(k.shape), dv = f.zeros(v.shape);
  ops::attention_backward(f.dev, f.s(), dq, dk, dv, dout, q, k, v, out, lse, AttentionMask::none);
  const Tensor bq = f.zeros(q.shape), bk1 = f.zeros(k1.shape), bv1 = f.zeros(v1.shape), bk2 = f.zeros(k2.shape),
               bv2 = f.zeros(v2.shape);
  ops::attention_backward(f.dev, f.s(), bq, bk1, bv1, dout, q, k1, v1, m_out, m_lse, AttentionMask::none);
  ops::attention_backward(f.dev, f.s(), bq, bk2, bv2, dout, q, k2, v2, m_out, m_lse, AttentionMask::none);
  check_equal(bq, dq, 1e-5);
  check_equal(bk1, rows(f, dk, 0, split), 1e-5);
  check_equal(bv1, rows(f, dv, 0, split), 1e-5);
  check_equal(bk2, rows(f, dk, split, Tk), 1e-5);
  check_equal(bv2, rows(f, dv, split, Tk), 1e-5);
  CHECK(f.dev.race_reports().empty());
}

// Chapter 08's causal ring: with the sequence in two chunks, the second chunk's queries see the
// first chunk's keys unmasked and their own causally; the first chunk's queries only their own.
TEST_CASE("attention: causal ring blocks merge to full causal attention, forward and backward", "[attention]") {
  Fixture f;
  const int64_t B = 1, NH = 3, c = 4, T = 2 * c, hs = 5;
  const Tensor q = f.random({B, NH, T, hs}), k = f.random({B, NH, T, hs}), v = f.random({B, NH, T, hs});
  const Tensor out = f.zeros(q.shape), lse = f.zeros({B, NH, T});
  ops::attention_forward(f.dev, f.s(), out, lse, q, k, v, AttentionMask::causal);

  const Tensor q1 = rows(f, q, 0, c), k1 = rows(f, k, 0, c), v1 = rows(f, v, 0, c);
  const Tensor q2 = rows(f, q, c, T), k2 = rows(f, k, c, T), v2 = rows(f, v, c, T);
  const Shape chunk = q1.shape, chunk_lse{B, NH, c};
  const Tensor o1 = f.zeros(chunk), l1 = f.zeros(chunk_lse);  // chunk 1: its diagonal block only
  const Tensor o2 = f.zeros(chunk), l2 = f.zeros(chunk_lse);  // chunk 2: diagonal, then merged
  const Tensor ob = f.zeros(chunk), lb = f.zeros(chunk_lse);  //          the earlier block
  ops::attention_forward(f.dev, f.s(), o1, l1, q1, k1, v1, AttentionMask::causal);
  ops::attention_forward(f.dev, f.s(), o2, l2, q2, k2, v2, AttentionMask::causal);
  ops::attention_forward(f.dev, f.s(), ob, lb, q2, k1, v1, AttentionMask::none);
  ops::attention_merge(f.dev, f.s(), o2, l2, ob, lb);
  check_equal(o1, rows(f, out, 0, c), 1e-5);
  check_equal(l1, rows(f, lse, 0, c), 1e-5);
  check_equal(o2, rows(f, out, c, T), 1e-5);
  check_equal(l2, rows(f, lse, c, T), 1e-5);

  const Tensor dout = f.random(q.shape);
  const Tensor dq = f.zeros(q.shape), dk = f.zeros(k.shape), dv = f.zeros(v.shape);
  ops::attention_backward(f.dev, f.s(), dq, dk, dv, dout, q, k, v, out, lse, AttentionMask::causal);
  const Tensor do1 = rows(f, dout, 0, c), do2 = rows(f, dout, c, T);
  const Tensor dq1 = f.zeros(chunk), dk1 = f.zeros(chunk), dv1 = f.zeros(chunk);
  const Tensor dq2 = f.zeros(chunk), dk2 = f.zeros(chunk), dv2 = f.zeros(chunk);
  ops::attention_backward(f.dev, f.s(), dq1, dk1, dv1, do1, q1, k1, v1, o1, l1, AttentionMask::causal);
  ops::attention_backward(f.dev, f.s(), dq2, dk2, dv2, do2, q2, k2, v2, o2, l2, AttentionMask::causal);
  ops::attention_backward(f.dev, f.s(), dq2, dk1, dv1, do2, q2, k1, v1, o2, l2, AttentionMask::none);
  check_equal(dq1, rows(f, dq, 0, c), 1e-5);
  check_equal(dq2, rows(f, dq, c, T), 1e-5);
  check_equal(dk1, rows(f, dk, 0, c), 1e-5);
  check_equal(dv1, rows(f, dv, 0, c), 1e-5);
  check_equal(dk2, rows(f, dk, c, T), 1e-5);
  check_equal(dv2, rows(f, dv, c, T), 1e-5);
  CHECK(f.dev.race_reports().empty());
}

TEST_CASE("attention: a block that sees no keys has lse -inf, output 0, and merges as nothing", "[attention]") {
  Fixture f;
  const int64_t B = 2, NH = 2, T = 3, hs = 4;
  const Tensor q = f.random({B, NH, T, hs}), k = f.random({B, NH, T, hs}), v = f.random({B, NH, T, hs});
  const Tensor k0 = f.zeros({B, NH, 0, hs}), v0 = f.zeros({B, NH, 0, hs});
  const Tensor e_out = f.random(q.shape), e_lse = f.random({B, NH, T});  // garbage, to be overwritten
  ops::attention_forward(f.dev, f.s(), e_out, e_lse, q, k0, v0, AttentionMask::none);
  for (int64_t i = 0; i < e_lse.numel(); ++i) CHECK(e_lse.f32()[i] == -std::numeric_limits<float>::infinity());
  for (int64_t i = 0; i < e_out.numel(); ++i) CHECK(e_out.f32()[i] == 0.0f);

  const Tensor out = f.zeros(q.shape), lse = f.zeros({B, NH, T});
  ops::attention_forward(f.dev, f.s(), out, lse, q, k, v, AttentionMask::causal);
  const std::vector<double> out0 = to_double(out), lse0 = to_double(lse);

  // A side with lse -inf is never read: garbage (NaN) in its out must not leak into the result.
  const auto poison = [](const Tensor& t) {
    for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = std::numeric_limits<float>::quiet_NaN();
  };
  SECTION("lse_b -inf leaves out and lse unchanged") {
    poison(e_out);
    ops::attention_merge(f.dev, f.s(), out, lse, e_out, e_lse);
    check_close(out, out0, 0);
    check_close(lse, lse0, 0);
  }
  SECTION("lse -inf takes the other side") {
    poison(e_out);
    ops::attention_merge(f.dev, f.s(), e_out, e_lse, out, lse);
    check_close(e_out, out0, 0);
    check_close(e_lse, lse0, 0);
  }
  SECTION("both -inf stay -inf with output 0") {
    const Tensor o2 = f.zeros(q.shape), l2 = f.zeros({B, NH, T});
    ops::attention_forward(f.dev, f.s(), o2, l2, q, k0, v0, AttentionMask::none);
    ops::attention_merge(f.dev, f.s(), e_out, e_lse, o2, l2);
    for (int64_t i = 0; i < e_lse.numel(); ++i) CHECK(e_lse.f32()[i] == -std::numeric_limits<float>::infinity());
    for (int64_t i = 0; i < e_out.numel(); ++i) CHECK(e_out.f32()[i] == 0.0f);
  }
  SECTION("backward through an empty block adds nothing") {
    const Tensor dq = f.random(q.shape), dout = f.random(q.shape);
    const std::vector<double> dq0 = to_double(dq);
    ops::attention_backward(f.dev, f.s(), dq, k0, v0, dout, q, k0, v0, e_out, e_lse, AttentionMask::none);
    check_close(dq, dq0, 0);
  }
  CHECK(f.dev.race_reports().empty());
}

TEST_CASE("attention: large scores (inputs x 50) neither overflow nor NaN in forward and merge", "[attention]") {
  Fixture f;
  const int64_t B = 1, NH = 2, Tq = 6, Tk = 8, split = 5, hs = 8;
  const Tensor q = f.random({B, NH, Tq, hs}, 50), k = f.random({B, NH, Tk, hs}, 50), v = f.random({B, NH, Tk, hs});
  const Tensor out = f.zeros(q.shape), lse = f.zeros({B, NH, Tq});
  ops::attention_forward(f.dev, f.s(), out, lse, q, k, v, AttentionMask::none);
  const Ref r = reference(to_double(q), to_double(k), to_double(v), B, NH, Tq, Tk, hs, AttentionMask::none);
  check_close(out, r.out, 1e-4);
  check_close(lse, r.lse, 1e-5);

  const Tensor a_out = f.zeros(q.shape), a_lse = f.zeros({B, NH, Tq});
  const Tensor b_out = f.zeros(q.shape), b_lse = f.zeros({B, NH, Tq});
  ops::attention_forward(f.dev, f.s(), a_out, a_lse, q, rows(f, k, 0, split), rows(f, v, 0, split),
                         AttentionMask::none);
  ops::attention_forward(f.dev, f.s(), b_out, b_lse, q, rows(f, k, split, Tk), rows(f, v, split, Tk),
                         AttentionMask::none);
  ops::attention_merge(f.dev, f.s(), a_out, a_lse, b_out, b_lse);
  CHECK(all_finite(a_out));
  CHECK(all_finite(a_lse));
  check_close(a_out, r.out, 1e-4);
  check_close(a_lse, r.lse, 1e-5);
  CHECK(f.dev.race_reports().empty());
}

TEST_CASE("attention: qkv_split and heads_merge round-trip exactly and their backwards are adjoints",
          "[attention]") {
  Fixture f;
  const int64_t B = 2, T = 5, NH = 3, hs = 4, C = NH * hs;
  const Shape heads{B, NH, T, hs};

  const Tensor qkv = f.random({B, T, 3 * C});
  const Tensor q = f.zeros(heads), k = f.zeros(heads), v = f.zeros(heads);
  ops::qkv_split(f.dev, f.s(), q, k, v, qkv, static_cast<int>(NH));
  // Spot-check the layout: q[b, h, t, d] = qkv[b, t, h hs + d], v from the third C columns.
  CHECK(q.f32()[((1 * NH + 2) * T + 3) * hs + 1] == qkv.f32()[(1 * T + 3) * 3 * C + 2 * hs + 1]);
  CHECK(v.f32()[((0 * NH + 1) * T + 4) * hs + 0] == qkv.f32()[(0 * T + 4) * 3 * C + 2 * C + 1 * hs]);
  // The backward of a permutation into zeros gives the input back, bit for bit.
  const Tensor back = f.zeros(qkv.shape);
  ops::qkv_split_backward(f.dev, f.s(), back, q, k, v, static_cast<int>(NH));
  check_equal(back, qkv, 0);
  // <y, split(x)> == <split_backward(y), x>
  const Tensor yq = f.random(heads), yk = f.random(heads), yv = f.random(heads), g = f.zeros(qkv.shape);
  ops::qkv_split_backward(f.dev, f.s(), g, yq, yk, yv, static_cast<int>(NH));
  CHECK(dot(yq, q) + dot(yk, k) + dot(yv, v) == Approx(dot(g, qkv)).epsilon(1e-12));

  const Tensor o = f.random(heads), merged = f.zeros({B, T, C});
  ops::heads_merge(f.dev, f.s(), merged, o);
  CHECK(merged.f32()[(1 * T + 2) * C + 2 * hs + 3] == o.f32()[((1 * NH + 2) * T + 2) * hs + 3]);
  const Tensor o_back = f.zeros(heads);
  ops::heads_merge_backward(f.dev, f.s(), o_back, merged);
  check_equal(o_back, o, 0);
  const Tensor y = f.random({B, T, C}), d_o = f.zeros(heads);
  ops::heads_merge_backward(f.dev, f.s(), d_o, y);
  CHECK(dot(y, merged) == Approx(dot(d_o, o)).epsilon(1e-12));

  // Both backwards accumulate.
  ops::qkv_split_backward(f.dev, f.s(), back, q, k, v, static_cast<int>(NH));
  ops::heads_merge_backward(f.dev, f.s(), o_back, merged);
  std::vector<double> x2 = to_double(qkv), o2 = to_double(o);
  for (double& x : x2) x *= 2;
  for (double& x : o2) x *= 2;
  check_close(back, x2, 0);
  check_close(o_back, o2, 0);
  CHECK(f.dev.race_reports().empty());
}

// Ring attention's steps (chapter 08) compute blocks of rows: a block must give exactly what the
// same rows give as tensors of their own, and leave every other row alone. A block of no keys
// is a row that sees nothing: lse -inf, output 0, and a merge that ignores it.
TEST_CASE("attention: row blocks equal the same rows as tensors of their own", "[attention]") {
  struct Case {
    int64_t Tq, Tk;
    ops::Rows q_rows, kv_rows;
    AttentionMask mask;
  };
  const Case cases[] = {
      {6, 6, {0, 6}, {0, 3}, AttentionMask::none},   {6, 6, {3, 3}, {0, 6}, AttentionMask::none},
      {9, 7, {2, 4}, {3, 4}, AttentionMask::causal}, {5, 5, {4, 1}, {2, 1}, AttentionMask::none},
      {4, 4, {1, 2}, {2, 0}, AttentionMask::none},
  };
  Fixture f;
  for (const Case& c : cases) {
    const int64_t B = 2, NH = 3, hs = 5, q0 = c.q_rows.begin, nq = c.q_rows.count, k0 = c.kv_rows.begin,
                  nk = c.kv_rows.count;
    INFO("query rows [" << q0 << ", +" << nq << ") of " << c.Tq << ", key rows [" << k0 << ", +" << nk << ") of " << c.Tk);
    const Tensor q = f.random({B, NH, c.Tq, hs}), k = f.random({B, NH, c.Tk, hs}), v = f.random({B, NH, c.Tk, hs});
    const Tensor out = f.random(q.shape), lse = f.random({B, NH, c.Tq}), dout = f.random(q.shape);
    const Tensor dq = f.zeros(q.shape), dk = f.zeros(k.shape), dv = f.zeros(k.shape);
    const std::vector<double> out_before = to_double(out), lse_before = to_double(lse);
    ops::attention_forward(f.dev, f.s(), out, lse, q, k, v, c.mask, c.q_rows, c.kv_rows);
    ops::attention_backward(f.dev, f.s(), dq, dk, dv, dout, q, k, v, out, lse, c.mask, c.q_rows, c.kv_rows);

    // The same computation on the rows copied out.
    const Tensor sq = rows(f, q, q0, q0 + nq), sk = rows(f, k, k0, k0 + nk), sv = rows(f, v, k0, k0 + nk);
    const Tensor sout = f.zeros(sq.shape), slse = f.zeros({B, NH, nq}), sdout = rows(f, dout, q0, q0 + nq);
    const Tensor sdq = f.zeros(sq.shape), sdk = f.zeros(sk.shape), sdv = f.zeros(sk.shape);
    ops::attention_forward(f.dev, f.s(), sout, slse, sq, sk, sv, c.mask);
    ops::attention_backward(f.dev, f.s(), sdq, sdk, sdv, sdout, sq, sk, sv, sout, slse, c.mask);
    check_equal(rows(f, out, q0, q0 + nq), sout, 0);
    check_equal(rows(f, lse, q0, q0 + nq), slse, 0);
    check_equal(rows(f, dq, q0, q0 + nq), sdq, 0);
    check_equal(rows(f, dk, k0, k0 + nk), sdk, 0);
    check_equal(rows(f, dv, k0, k0 + nk), sdv, 0);
    if (nk == 0)
      for (int64_t i = 0; i < slse.numel(); ++i) CHECK(slse.f32()[i] == -INFINITY);
    // Rows outside the blocks: untouched.
    const std::vector<double> out_after = to_double(out), lse_after = to_double(lse);
    for (int64_t bh = 0; bh < B * NH; ++bh)
      for (int64_t i = 0; i < c.Tq; ++i) {
        if (i >= q0 && i < q0 + nq) continue;
        CHECK(lse_after[static_cast<size_t>(bh * c.Tq + i)] == lse_before[static_cast<size_t>(bh * c.Tq + i)]);
        for (int64_t ch = 0; ch < hs; ++ch)
          CHECK(out_after[static_cast<size_t>((bh * c.Tq + i) * hs + ch)] ==
                out_before[static_cast<size_t>((bh * c.Tq + i) * hs + ch)]);
      }
    CHECK(dot(rows(f, dq, 0, q0), rows(f, dq, 0, q0)) == 0);
    CHECK(dot(rows(f, dk, k0 + nk, c.Tk), rows(f, dk, k0 + nk, c.Tk)) == 0);

    // A merge on the block leaves the other rows as they were; a partial that saw no key
    // changes nothing.
    const Tensor merged = f.random(q.shape), merged_lse = f.random({B, NH, c.Tq});
    const std::vector<double> before = to_double(merged);
    ops::attention_merge(f.dev, f.s(), merged, merged_lse, out, lse, c.q_rows);
    const std::vector<double> after = to_double(merged);
    for (int64_t bh = 0; bh < B * NH; ++bh)
      for (int64_t i = 0; i < c.Tq; ++i)
        if (i < q0 || i >= q0 + nq || nk == 0)
          for (int64_t ch = 0; ch < hs; ++ch)
            CHECK(after[static_cast<size_t>((bh * c.Tq + i) * hs + ch)] == before[static_cast<size_t>((bh * c.Tq + i) * hs + ch)]);
  }
  CHECK_THROWS_WITH(ops::attention_forward(f.dev, f.s(), f.zeros({1, 1, 4, 2}), f.zeros({1, 1, 4}), f.zeros({1, 1, 4, 2}),
                                           f.zeros({1, 1, 4, 2}), f.zeros({1, 1, 4, 2}), AttentionMask::none, {3, 2}),
                    Catch::Contains("query rows [3, 5) outside the 4 rows"));
  CHECK(f.dev.race_reports().empty());
}

TEST_CASE("attention: bad shapes are rejected with the op and the shapes in the message", "[attention]") {
  Fixture f;
  const Tensor q = f.zeros({1, 2, 4, 8}), k = f.zeros({1, 2, 5, 8}), lse = f.zeros({1, 2, 4});
  const Tensor out = f.zeros(q.shape);
  CHECK_THROWS_WITH(ops::attention_forward(f.dev, f.s(), out, lse, q, k, k, AttentionMask::causal),
                    Catch::Contains("attention_forward") && Catch::Contains("[1, 2, 5, 8]") &&
                        Catch::Contains("Tq == Tk"));
  CHECK_THROWS_WITH(ops::attention_forward(f.dev, f.s(), out, f.zeros({1, 2, 5}), q, k, k, AttentionMask::none),
                    Catch::Contains("lse"));
  CHECK_THROWS_WITH(ops::attention_backward(f.dev, f.s(), k, k, k, out, q, k, k, out, lse, AttentionMask::none),
                    Catch::Contains("attention_backward") && Catch::Contains("dq"));
  CHECK_THROWS_WITH(ops::attention_merge(f.dev, f.s(), out, lse, out, f.zeros({1, 2, 5})),
                    Catch::Contains("attention_merge") && Catch::Contains("[1, 2, 5]"));
  CHECK_THROWS_WITH(ops::qkv_split(f.dev, f.s(), q, q, q, f.zeros({1, 4, 48}), 3),
                    Catch::Contains("qkv_split") && Catch::Contains("[1, 4, 48]"));
  CHECK_THROWS_WITH(ops::heads_merge(f.dev, f.s(), f.zeros({1, 4, 15}), q), Catch::Contains("heads_merge"));
}

TEST_CASE("attention: under --compute skip every op runs without touching memory", "[attention]") {
  SimDevice dev(load_profile("h100-8"), ComputeMode::skip, 0, 1);
  Stream& s = dev.compute_stream();
  const auto t = [&](Shape sh) { return dev.empty(sh, DType::f32, s, "t"); };
  const int64_t B = 2, NH = 4, T = 64, hs = 16, C = NH * hs;
  const Shape heads{B, NH, T, hs};
  const Tensor qkv = t({B, T, 3 * C}), q = t(heads), k = t(heads), v = t(heads), out = t(heads), lse = t({B, NH, T});
  ops::qkv_split(dev, s, q, k, v, qkv, static_cast<int>(NH));
  ops::attention_forward(dev, s, out, lse, q, k, v, AttentionMask::causal);
  ops::attention_merge(dev, s, out, lse, t(heads), t({B, NH, T}));
  const Tensor y = t({B, T, C}), d_o = t(heads), dq = t(heads), dk = t(heads), dv = t(heads), dqkv = t(qkv.shape);
  ops::heads_merge(dev, s, y, out);
  ops::heads_merge_backward(dev, s, d_o, y);
  ops::attention_backward(dev, s, dq, dk, dv, d_o, q, k, v, out, lse, AttentionMask::causal);
  ops::qkv_split_backward(dev, s, dqkv, dq, dk, dv, static_cast<int>(NH));
  dev.synchronize();
  CHECK(dev.race_reports().empty());

  // The forward is charged for the unmasked pairs only: T (T + 1) / 2 per head, 4 hs FLOPs each,
  // at the profile's attention efficiency.
  std::vector<DeviceSlice> kernels;
  for (const auto& sl : dev.trace().timeline().slices)
    if (sl.stream == s.id()) kernels.push_back(sl);
  REQUIRE(kernels.size() == 7);
  const double flops = 4.0 * hs * static_cast<double>(B * NH * T * (T + 1) / 2);
  const double bytes = static_cast<double>(q.bytes() * 4 + lse.bytes());
  CHECK((kernels[1].end_us - kernels[1].start_us) * 1000 ==
        Approx(static_cast<double>(kernel_ns(dev.profile(), flops, bytes, DType::f32, KernelClass::attention))));
}
