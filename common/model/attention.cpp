#include "model/attention.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "cuda/kernels.h"
#include "model/f32_math.h"

namespace shardlab::ops {
namespace {

constexpr float kNegInf = -INFINITY;

[[noreturn]] void shape_error(const char* op, const std::string& what) {
  throw std::invalid_argument(std::string(op) + ": " + what);
}

// `ok` lists the dtypes allowed: f32 for the log-sum-exps, which stay float32 as
// FlashAttention's softmax_lse does; f32 or bf16 (mixed precision, f32_math.h) for the rest.
void require_dtype(const char* op, std::initializer_list<DType> ok, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    if (std::find(ok.begin(), ok.end(), t->dtype) == ok.end())
      shape_error(op, std::string(ok.size() == 1 ? "only f32" : "only f32 and bf16") + " tensors here, got " +
                          std::string(dtype_name(t->dtype)) + " " + t->shape.str());
}
void require_f32(const char* op, std::initializer_list<const Tensor*> ts) { require_dtype(op, {DType::f32}, ts); }
void require_float(const char* op, std::initializer_list<const Tensor*> ts) {
  require_dtype(op, {DType::f32, DType::bf16}, ts);
}

double bytes_of(std::initializer_list<const Tensor*> ts) {
  double n = 0;
  for (const Tensor* t : ts) n += static_cast<double>(t->bytes());
  return n;
}

// The sizes of one attention call, checked once for forward and backward alike: Tq rows of q
// from row q0 of the ldq each head holds, against Tk rows of k and v from row k0 of ldk.
struct AttnDims {
  int64_t B, NH, Tq, Tk, hs;
  bool causal;
  int64_t q0, ldq, k0, ldk;
  double elem;  // bytes of one element of q, k, v and out (4, or 2 in bf16)
  // Keys query row i sees: 0..i under the causal mask, all of them otherwise.
  int64_t visible(int64_t i) const { return causal ? i + 1 : Tk; }
  // Unmasked (query, key) pairs over all rows, batch rows and heads: what is really computed.
  double pairs() const {
    const double per_head = causal ? static_cast<double>(Tq) * static_cast<double>(Tq + 1) / 2
                                   : static_cast<double>(Tq) * static_cast<double>(Tk);
    return static_cast<double>(B * NH) * per_head;
  }
  // Row i of the query block of head bh, as an index into [B, NH, T] (times hs into [B, NH, T, hs]).
  int64_t q_row(int64_t bh, int64_t i) const { return bh * ldq + q0 + i; }
  int64_t k_row(int64_t bh, int64_t j) const { return bh * ldk + k0 + j; }
  // Bytes of one [.., hs] tensor on the query side and on the key side, over the blocks only.
  double q_bytes() const { return elem * static_cast<double>(B * NH * Tq * hs); }
  double k_bytes() const { return elem * static_cast<double>(B * NH * Tk * hs); }
  double lse_bytes() const { return 4.0 * static_cast<double>(B * NH * Tq); }
};

// A row block of T rows, checked: [begin, begin + count) must lie in [0, T).
std::pair<int64_t, int64_t> row_block(const char* op, const char* which, Rows r, int64_t T) {
  const int64_t count = r.count < 0 ? T - r.begin : r.count;
  if (r.begin < 0 || count < 0 || r.begin + count > T)
    shape_error(op, std::string(which) + " [" + std::to_string(r.begin) + ", " + std::to_string(r.begin + count) +
                        ") outside the " + std::to_string(T) + " rows");
  return {r.begin, count};
}

AttnDims attention_dims(const char* op, const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
                        const Tensor& v, AttentionMask mask, Rows q_rows, Rows kv_rows) {
  require_float(op, {&out, &q, &k, &v});
  require_f32(op, {&lse});
  const std::string shapes = "q " + q.shape.str() + ", k " + k.shape.str() + ", v " + v.shape.str() + ", out " +
                             out.shape.str() + ", lse " + lse.shape.str();
  if (q.shape.ndim != 4 || k.shape.ndim != 4) shape_error(op, shapes + ": q, k, v must be [B, NH, T, hs]");
  const auto [q0, Tq] = row_block(op, "query rows", q_rows, q.shape[2]);
  const auto [k0, Tk] = row_block(op, "key rows", kv_rows, k.shape[2]);
  const AttnDims d{q.shape[0], q.shape[1], Tq, Tk, q.shape[3], mask == AttentionMask::causal,
                   q0,         q.shape[2], k0, k.shape[2], static_cast<double>(dtype_size(q.dtype))};
  if (d.hs == 0) shape_error(op, shapes + ": head size 0");
  if (!(k.shape == Shape{d.B, d.NH, d.ldk, d.hs}) || !(v.shape == k.shape))
    shape_error(op, shapes + ": k and v must be [B, NH, Tk, hs] with q's B, NH and hs");
  if (!(out.shape == q.shape)) shape_error(op, shapes + ": out must have q's shape");
  if (!(lse.shape == Shape{d.B, d.NH, d.ldq})) shape_error(op, shapes + ": lse must be [B, NH, Tq]");
  if (d.causal && d.Tq != d.Tk)
    shape_error(op, shapes + ": the causal mask needs Tq == Tk (query rows " + std::to_string(d.Tq) + ", key rows " +
                        std::to_string(d.Tk) + ")");
  return d;
}

// One head's [T, hs] rows transposed to [hs, T], so that the scores below run over keys in the
// inner loop: contiguous, and each s_j its own accumulator (a dot product over hs would be a
// float reduction, which the compiler may not vectorize without -ffast-math).
void transpose_head(float* xt, const float* x, int64_t T, int64_t hs) {
  for (int64_t j = 0; j < T; ++j)
    for (int64_t c = 0; c < hs; ++c) xt[c * T + j] = x[j * hs + c];
}

// s_j = scale a . x_j for the first n rows x_j of a head given transposed (xt: [hs, T]).
// Forward: the scores q_i . k_j; backward also dP_ij = dout_i . v_j.
void row_dots(float* s, const float* a, const float* xt, int64_t T, int64_t n, int64_t hs, float scale) {
  for (int64_t j = 0; j < n; ++j) s[j] = 0;
  for (int64_t c = 0; c < hs; ++c) {
    const float* xc = xt + c * T;
    for (int64_t j = 0; j < n; ++j) s[j] += a[c] * xc[j];
  }
  for (int64_t j = 0; j < n; ++j) s[j] *= scale;
}

// log sum_j exp(s_j), stable: the max is taken out first so no exp overflows. -inf when n == 0.
float row_lse(const float* s, int64_t n) {
  if (n == 0) return kNegInf;
  float m = s[0];
  for (int64_t j = 1; j < n; ++j) m = std::max(m, s[j]);
  float sum = 0;
  for (int64_t j = 0; j < n; ++j) sum += std::exp(s[j] - m);
  return m + std::log(sum);
}

// Scores to probabilities in place, p_j = exp(s_j - lse). Forward passes this block's lse,
// backward the final (merged) one: the same P either way, recomputed rather than stored.
void row_probs(float* s, int64_t n, float lse) {
  for (int64_t j = 0; j < n; ++j) s[j] = std::exp(s[j] - lse);
}

// Visits every head row of a [B, T, stride] activation whose columns [h hs, (h + 1) hs) hold
// head h: f(seq, head) with seq the row's offset there and head its offset in [B, NH, T, hs].
template <class F>
void for_head_rows(int64_t B, int64_t T, int64_t NH, int64_t hs, int64_t stride, F f) {
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < NH; ++h) f((b * T + t) * stride + h * hs, ((b * NH + h) * T + t) * hs);
}

// [B, T, 3C] and three [B, NH, T, hs] with C = NH hs, checked; returns {B, T, C, hs}.
struct QkvDims {
  int64_t B, T, C, hs;
};
QkvDims qkv_dims(const char* op, const Tensor& qkv, const Tensor& q, const Tensor& k, const Tensor& v, int nh) {
  require_float(op, {&qkv, &q, &k, &v});
  const Shape& x = qkv.shape;
  const std::string shapes = "qkv " + x.str() + ", q " + q.shape.str() + ", k " + k.shape.str() + ", v " +
                             v.shape.str() + ", nh " + std::to_string(nh);
  if (x.ndim != 3 || x[2] % 3 != 0 || nh <= 0 || (x[2] / 3) % nh != 0)
    shape_error(op, shapes + ": qkv must be [B, T, 3C] with C divisible by nh");
  const QkvDims d{x[0], x[1], x[2] / 3, x[2] / 3 / nh};
  const Shape head{d.B, nh, d.T, d.hs};
  if (!(q.shape == head) || !(k.shape == head) || !(v.shape == head))
    shape_error(op, shapes + ": q, k, v must be " + head.str());
  return d;
}

// o [B, NH, T, hs] and out [B, T, NH hs], checked.
void heads_dims(const char* op, const Tensor& out, const Tensor& o) {
  require_float(op, {&out, &o});
  const Shape& h = o.shape;
  if (h.ndim != 4 || !(out.shape == Shape{h[0], h[2], h[1] * h[3]}))
    shape_error(op, "out " + out.shape.str() + ", o " + h.str() + ": o must be [B, NH, T, hs] and out [B, T, NH hs]");
}

}  // namespace

// out_i = sum_j P_ij v_j with P_i = softmax(scale q_i k^T) over the visible keys, and
// lse_i = log sum_j exp(scale q_i . k_j). One row of scores at a time: the T x T matrix never
// exists. Work: per unmasked pair, 2 hs FLOPs for q . k and 2 hs for p v.
void attention_forward(Device& dev, Stream& s, const Tensor& out, const Tensor& lse, const Tensor& q,
                       const Tensor& k, const Tensor& v, AttentionMask mask, Rows q_rows, Rows kv_rows) {
  const AttnDims d = attention_dims("attention_forward", out, lse, q, k, v, mask, q_rows, kv_rows);
  const double flops = 4.0 * static_cast<double>(d.hs) * d.pairs();
  const double bytes = 2 * d.q_bytes() + 2 * d.k_bytes() + d.lse_bytes();  // q, out; k, v; lse
  launch_f32(dev, s,
             {"attention_forward", flops, bytes, math_dtype(KernelClass::attention, {reads(q)}), KernelClass::attention,
              {reads(q), reads(k), reads(v), writes(out), writes(lse)}},
             [=](const AsF32& f) {
               const float scale = 1.0f / std::sqrt(static_cast<float>(d.hs));
               std::vector<float> p(static_cast<size_t>(d.Tk)), kt(static_cast<size_t>(d.Tk * d.hs));
               for (int64_t bh = 0; bh < d.B * d.NH; ++bh) {
                 transpose_head(kt.data(), f(k) + d.k_row(bh, 0) * d.hs, d.Tk, d.hs);
                 const float* vh = f(v) + d.k_row(bh, 0) * d.hs;
                 for (int64_t i = 0; i < d.Tq; ++i) {
                   const int64_t row = d.q_row(bh, i);
                   const int64_t n = d.visible(i);
                   row_dots(p.data(), f(q) + row * d.hs, kt.data(), d.Tk, n, d.hs, scale);
                   const float l = row_lse(p.data(), n);
                   row_probs(p.data(), n, l);
                   f(lse)[row] = l;
                   float* o = f(out) + row * d.hs;
                   for (int64_t c = 0; c < d.hs; ++c) o[c] = 0;
                   for (int64_t j = 0; j < n; ++j) {
                     const float* vj = vh + j * d.hs;
                     const float pj = p[j];
                     for (int64_t c = 0; c < d.hs; ++c) o[c] += pj * vj[c];
                   }
                 }
               }
             },
             SHARDLAB_ON_CUDA_F32(cuda::attention_forward(f(out), f(lse), f(q), f(k), f(v), d.B, d.NH,
                                                      {d.q0, d.Tq, d.ldq}, {d.k0, d.Tk, d.ldk}, d.hs, d.causal,
                                                      stream)));
}

// The softmax backward through P = exp(scale q k^T - lse), from the final out and lse, so that
// the pieces of a merged (ring) attention each give their exact additive share:
//   dP_ij = dout_i . v_j, D_i = dout_i . out_i (= sum_j P_ij dP_ij), dS_ij = P_ij (dP_ij - D_i),
//   dv_j += P_ij dout_i, dq_i += scale dS_ij k_j, dk_j += scale dS_ij q_i.
// Per unmasked pair: q . k, dout . v and three hs-long updates, about twice the forward. A row
// that saw no key (lse -inf) has no visible key here either, and gets nothing.
void attention_backward(Device& dev, Stream& s, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                        const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& lse, AttentionMask mask, Rows q_rows, Rows kv_rows) {
  const char* op = "attention_backward";
  const AttnDims d = attention_dims(op, out, lse, q, k, v, mask, q_rows, kv_rows);
  require_float(op, {&dq, &dk, &dv, &dout});
  if (!(dq.shape == q.shape) || !(dout.shape == q.shape) || !(dk.shape == k.shape) || !(dv.shape == v.shape))
    shape_error(op, "dq " + dq.shape.str() + ", dout " + dout.shape.str() + " must be q's " + q.shape.str() +
                        "; dk " + dk.shape.str() + ", dv " + dv.shape.str() + " must be k's " + k.shape.str());
  const double flops = 8.0 * static_cast<double>(d.hs) * d.pairs();
  // Reads dout, q, out, lse and k, v; reads and writes dq and dk, dv: over the blocks only.
  const double bytes = 5 * d.q_bytes() + d.lse_bytes() + 6 * d.k_bytes();
  launch_f32(dev, s,
             {op, flops, bytes, math_dtype(KernelClass::attention, {reads(q)}), KernelClass::attention,
              {reads(dout), reads(q), reads(k), reads(v), reads(out), reads(lse), reads(dq), reads(dk), reads(dv),
               writes(dq), writes(dk), writes(dv)}},
             [=](const AsF32& f) {
               const float scale = 1.0f / std::sqrt(static_cast<float>(d.hs));
               std::vector<float> p(static_cast<size_t>(d.Tk)), ds(p.size());
               std::vector<float> kt(static_cast<size_t>(d.Tk * d.hs)), vt(kt.size());
               for (int64_t bh = 0; bh < d.B * d.NH; ++bh) {
                 const int64_t kv0 = d.k_row(bh, 0) * d.hs;
                 transpose_head(kt.data(), f(k) + kv0, d.Tk, d.hs);
                 transpose_head(vt.data(), f(v) + kv0, d.Tk, d.hs);
                 for (int64_t i = 0; i < d.Tq; ++i) {
                   const int64_t row = d.q_row(bh, i);
                   const int64_t n = d.visible(i);
                   const float* qi = f(q) + row * d.hs;
                   const float* doi = f(dout) + row * d.hs;
                   const float* oi = f(out) + row * d.hs;
                   float* dqi = f(dq) + row * d.hs;
                   row_dots(p.data(), qi, kt.data(), d.Tk, n, d.hs, scale);
                   row_probs(p.data(), n, f(lse)[row]);
                   row_dots(ds.data(), doi, vt.data(), d.Tk, n, d.hs, 1.0f);  // dP_i
                   float D = 0;
                   for (int64_t c = 0; c < d.hs; ++c) D += doi[c] * oi[c];
                   for (int64_t j = 0; j < n; ++j) ds[j] = scale * p[j] * (ds[j] - D);  // scale dS_i
                   for (int64_t j = 0; j < n; ++j) {
                     const float* kj = f(k) + kv0 + j * d.hs;
                     float* dkj = f(dk) + kv0 + j * d.hs;
                     float* dvj = f(dv) + kv0 + j * d.hs;
                     const float pj = p[j], dsj = ds[j];
                     // Three separate axpys: each vectorizes on its own.
                     for (int64_t c = 0; c < d.hs; ++c) dvj[c] += pj * doi[c];
                     for (int64_t c = 0; c < d.hs; ++c) dkj[c] += dsj * qi[c];
                     for (int64_t c = 0; c < d.hs; ++c) dqi[c] += dsj * kj[c];
                   }
                 }
               }
             },
             SHARDLAB_ON_CUDA_F32(cuda::attention_backward(f(dq), f(dk), f(dv), f(dout), f(q), f(k),
                                                       f(v), f(out), f(lse), d.B, d.NH, {d.q0, d.Tq, d.ldq},
                                                       {d.k0, d.Tk, d.ldk}, d.hs, d.causal, stream)));
}

// Two softmaxes over disjoint key sets combine by their log-sum-exps: with l = log(e^la + e^lb),
// out = out_a e^(la - l) + out_b e^(lb - l). l is formed as m + log1p(e^(n - m)) (m the larger,
// n the smaller) so nothing overflows however large the scores; a side with lse -inf saw no
// keys and contributes nothing: its out is never read (it may be uninitialized) and -inf - -inf
// never forms a NaN.
void attention_merge(Device& dev, Stream& s, const Tensor& out, const Tensor& lse, const Tensor& out_b,
                     const Tensor& lse_b, Rows rows) {
  const char* op = "attention_merge";
  require_float(op, {&out, &out_b});
  require_f32(op, {&lse, &lse_b});
  const Shape& o = out.shape;
  if (o.ndim != 4 || !(out_b.shape == o) || !(lse.shape == Shape{o[0], o[1], o[2]}) || !(lse_b.shape == lse.shape))
    shape_error(op, "out " + o.str() + ", lse " + lse.shape.str() + ", out_b " + out_b.shape.str() + ", lse_b " +
                        lse_b.shape.str() + ": outs must be [B, NH, T, hs] and lses [B, NH, T], pairwise equal");
  const auto [r0, T] = row_block(op, "rows", rows, o[2]);
  const int64_t heads = o[0] * o[1], ld = o[2], hs = o[3];
  const double elements = static_cast<double>(heads * T * hs), lses = static_cast<double>(heads * T);
  launch_f32(dev, s,
             {op, 3.0 * elements, static_cast<double>(dtype_size(out.dtype)) * 3 * elements + 4.0 * 3 * lses,
              DType::f32, KernelClass::elementwise,
              {reads(out), reads(lse), reads(out_b), reads(lse_b), writes(out), writes(lse)}},
             [=](const AsF32& f) {
               for (int64_t bh = 0; bh < heads; ++bh)
                 for (int64_t r = bh * ld + r0; r < bh * ld + r0 + T; ++r) {
                   const float la = f(lse)[r], lb = f(lse_b)[r];
                   if (lb == kNegInf) continue;
                   float* oa = f(out) + r * hs;
                   const float* ob = f(out_b) + r * hs;
                   if (la == kNegInf) {
                     for (int64_t c = 0; c < hs; ++c) oa[c] = ob[c];
                     f(lse)[r] = lb;
                     continue;
                   }
                   const float m = std::max(la, lb), n = std::min(la, lb);
                   const float l = m + std::log1p(std::exp(n - m));
                   const float wa = std::exp(la - l), wb = std::exp(lb - l);
                   for (int64_t c = 0; c < hs; ++c) oa[c] = wa * oa[c] + wb * ob[c];
                   f(lse)[r] = l;
                 }
             },
             SHARDLAB_ON_CUDA_F32(cuda::attention_merge(f(out), f(lse), f(out_b), f(lse_b), heads,
                                                    {r0, T, ld}, hs, stream)));
}

// q, k, v [b, h, t, :] = qkv[b, t, part C + h hs + :]: a pure permutation, no math.
void qkv_split(Device& dev, Stream& s, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& qkv, int nh) {
  const QkvDims d = qkv_dims("qkv_split", qkv, q, k, v, nh);
  launch_f32(dev, s,
             {"qkv_split", 0, 2 * bytes_of({&qkv}), DType::f32, KernelClass::elementwise,
              {reads(qkv), writes(q), writes(k), writes(v)}},
             [=](const AsF32& f) {
               const Tensor parts[3] = {q, k, v};
               for (int64_t part = 0; part < 3; ++part) {
                 const float* src = f(qkv) + part * d.C;
                 float* dst = f(parts[part]);
                 for_head_rows(d.B, d.T, nh, d.hs, 3 * d.C, [&](int64_t seq, int64_t head) {
                   for (int64_t c = 0; c < d.hs; ++c) dst[head + c] = src[seq + c];
                 });
               }
             },
             SHARDLAB_ON_CUDA_F32(cuda::qkv_split(f(q), f(k), f(v), f(qkv), d.B, d.T, nh, d.hs, stream)));
}

// The adjoint of qkv_split: each gradient element goes back to where its value came from.
void qkv_split_backward(Device& dev, Stream& s, const Tensor& dqkv, const Tensor& dq, const Tensor& dk,
                        const Tensor& dv, int nh) {
  const QkvDims d = qkv_dims("qkv_split_backward", dqkv, dq, dk, dv, nh);
  launch_f32(dev, s,
             {"qkv_split_backward", static_cast<double>(dqkv.numel()), 3 * bytes_of({&dqkv}), DType::f32,
              KernelClass::elementwise, {reads(dq), reads(dk), reads(dv), reads(dqkv), writes(dqkv)}},
             [=](const AsF32& f) {
               const Tensor parts[3] = {dq, dk, dv};
               for (int64_t part = 0; part < 3; ++part) {
                 float* dst = f(dqkv) + part * d.C;
                 const float* src = f(parts[part]);
                 for_head_rows(d.B, d.T, nh, d.hs, 3 * d.C, [&](int64_t seq, int64_t head) {
                   for (int64_t c = 0; c < d.hs; ++c) dst[seq + c] += src[head + c];
                 });
               }
             },
             SHARDLAB_ON_CUDA_F32(cuda::qkv_split_backward(f(dqkv), f(dq), f(dk), f(dv), d.B, d.T, nh, d.hs,
                                                       stream)));
}

// out[b, t, h hs + :] = o[b, h, t, :]: the heads side by side again, ready for the projection.
void heads_merge(Device& dev, Stream& s, const Tensor& out, const Tensor& o) {
  heads_dims("heads_merge", out, o);
  const Shape h = o.shape;
  launch_f32(dev, s,
             {"heads_merge", 0, 2 * bytes_of({&o}), DType::f32, KernelClass::elementwise, {reads(o), writes(out)}},
             [=](const AsF32& f) {
               const float* src = f(o);
               float* dst = f(out);
               for_head_rows(h[0], h[2], h[1], h[3], h[1] * h[3], [&](int64_t seq, int64_t head) {
                 for (int64_t c = 0; c < h[3]; ++c) dst[seq + c] = src[head + c];
               });
             },
             SHARDLAB_ON_CUDA_F32(cuda::heads_merge(f(out), f(o), h[0], h[1], h[2], h[3], stream)));
}

// The adjoint of heads_merge: d_o[b, h, t, :] += dout[b, t, h hs + :].
void heads_merge_backward(Device& dev, Stream& s, const Tensor& d_o, const Tensor& dout) {
  heads_dims("heads_merge_backward", dout, d_o);
  const Shape h = d_o.shape;
  launch_f32(dev, s,
             {"heads_merge_backward", static_cast<double>(d_o.numel()), 3 * bytes_of({&d_o}), DType::f32,
              KernelClass::elementwise, {reads(dout), reads(d_o), writes(d_o)}},
             [=](const AsF32& f) {
               const float* src = f(dout);
               float* dst = f(d_o);
               for_head_rows(h[0], h[2], h[1], h[3], h[1] * h[3], [&](int64_t seq, int64_t head) {
                 for (int64_t c = 0; c < h[3]; ++c) dst[head + c] += src[seq + c];
               });
             },
             SHARDLAB_ON_CUDA_F32(cuda::heads_merge_backward(f(d_o), f(dout), h[0], h[1], h[2], h[3], stream)));
}

}  // namespace shardlab::ops
