#include "model/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "cuda/kernels.h"
#include "device/bf16.h"
#include "model/f32_math.h"

namespace shardlab::ops {
namespace {

[[noreturn]] void fail(const char* op, const std::string& why) {
  throw std::invalid_argument(std::string(op) + ": " + why);
}

void require_f32(const Tensor& t, const char* op) {
  if (t.dtype != DType::f32)
    throw std::invalid_argument(std::string(op) + ": only f32 tensors, got " + std::string(dtype_name(t.dtype)));
}

void require_f32(const char* op, std::initializer_list<Tensor> ts) {
  for (const Tensor& t : ts) require_f32(t, op);
}

// A tensor of floating-point values: f32, or bf16 under mixed precision (f32_math.h).
void require_float(const char* op, std::initializer_list<Tensor> ts) {
  for (const Tensor& t : ts)
    if (t.dtype != DType::f32 && t.dtype != DType::bf16)
      throw std::invalid_argument(std::string(op) + ": only f32 and bf16 tensors, got " +
                                  std::string(dtype_name(t.dtype)));
}

void require_i32(const Tensor& t, const char* op, const char* name) {
  if (t.dtype != DType::i32) fail(op, std::string(name) + " must be i32, got " + std::string(dtype_name(t.dtype)));
}

void require_shape(const Tensor& t, const Shape& want, const char* op, const char* name) {
  if (!(t.shape == want)) fail(op, std::string(name) + " is " + t.shape.str() + ", expected " + want.str());
}

void require_numel(const Tensor& t, int64_t n, const char* op, const char* name) {
  if (t.numel() != n)
    fail(op, std::string(name) + " is " + t.shape.str() + ", expected " + std::to_string(n) + " elements");
}

// The length of t's rows: its last dimension.
int64_t last_dim(const Tensor& t, const char* op, const char* name) {
  if (t.shape.ndim == 0) fail(op, std::string(name) + " has no dimensions");
  return t.shape[t.shape.ndim - 1];
}

// t's shape with the last dimension replaced by n ([.., C] -> [.., n]).
Shape with_last_dim(Shape shape, int64_t n) {
  shape.dims[shape.ndim - 1] = n;
  return shape;
}

// A kernel whose device traffic is every tensor it touches moved once: a gradient it
// accumulates into is both read and written, so it counts twice.
Kernel kernel(std::string_view name, double flops, KernelClass cls, std::vector<Access> accesses) {
  double bytes = 0;
  for (const Access& a : accesses) bytes += static_cast<double>(a.tensor.bytes());
  const DType dtype = math_dtype(cls, accesses);
  return {name, flops, bytes, dtype, cls, std::move(accesses)};
}

// ---- The matmul core: c[M, N] += a[M, K] @ b[K, N], c row-major with row stride ldc.
//
// a and b are strided views, so the three products of a linear layer need no transposed copies:
// out = inp @ weight^T reads weight [OC, C] as a [C, OC] matrix with strides (1, C).
// The loops follow BLIS/GotoBLAS: a kKC-deep slice of b, kNC columns wide, is packed into panels
// of kNR columns (k-major, so the kernel reads them contiguously; it stays in L2), a kMC-row block
// of a into panels of kMR rows (L2 too); the micro-kernel keeps a kMR x kNR block of c in registers
// (4 x 8 floats = 8 SSE registers) while it walks the shared k dimension, so each loaded value
// feeds several multiply-adds and the innermost j loop is a contiguous, vectorized axpy.
// Edges are zero-padded in the packed panels; a partial c block goes through a small tile.
struct Strided {
  const float* p;
  int64_t row_stride, col_stride;
  float at(int64_t r, int64_t c) const { return p[r * row_stride + c * col_stride]; }
};

constexpr int64_t kMR = 4, kNR = 8;                // register block of c
constexpr int64_t kKC = 256, kMC = 64, kNC = 512;  // cache blocks (k depth, rows of a, columns of b)

// dst[panel][k][x] = src(k0 + k, x0 + panel * width + x) for k < kc, x < xc, zero past xc.
void pack_panels(float* dst, Strided src, int64_t k0, int64_t kc, int64_t x0, int64_t xc, int64_t width) {
  for (int64_t xp = 0; xp < xc; xp += width, dst += kc * width)
    for (int64_t k = 0; k < kc; ++k)
      for (int64_t x = 0; x < width; ++x) dst[k * width + x] = xp + x < xc ? src.at(k0 + k, x0 + xp + x) : 0.0f;
}

// c[kMR, kNR] += ap[kc][kMR] (as columns of a) times bp[kc][kNR].
void micro_kernel(int64_t kc, const float* ap, const float* bp, float* c, int64_t ldc) {
  float acc[kMR][kNR] = {};
  for (int64_t k = 0; k < kc; ++k)
    for (int64_t i = 0; i < kMR; ++i)
      for (int64_t j = 0; j < kNR; ++j) acc[i][j] += ap[k * kMR + i] * bp[k * kNR + j];
  for (int64_t i = 0; i < kMR; ++i)
    for (int64_t j = 0; j < kNR; ++j) c[i * ldc + j] += acc[i][j];
}

void gemm(int64_t M, int64_t N, int64_t K, Strided a, Strided b, float* c, int64_t ldc) {
  const Strided a_t{a.p, a.col_stride, a.row_stride};  // a read as (k, i), the way pack_panels walks it
  std::vector<float> bp(static_cast<size_t>(std::min(K, kKC) * ((std::min(N, kNC) + kNR - 1) / kNR * kNR)));
  std::vector<float> ap(static_cast<size_t>(std::min(K, kKC) * ((std::min(M, kMC) + kMR - 1) / kMR * kMR)));
  for (int64_t j0 = 0; j0 < N; j0 += kNC) {
    const int64_t nc = std::min(kNC, N - j0);
    for (int64_t k0 = 0; k0 < K; k0 += kKC) {
      const int64_t kc = std::min(kKC, K - k0);
      pack_panels(bp.data(), b, k0, kc, j0, nc, kNR);
      for (int64_t i0 = 0; i0 < M; i0 += kMC) {
        const int64_t mc = std::min(kMC, M - i0);
        pack_panels(ap.data(), a_t, k0, kc, i0, mc, kMR);
        for (int64_t jp = 0; jp < nc; jp += kNR)
          for (int64_t ip = 0; ip < mc; ip += kMR) {
            const float* a_panel = &ap[static_cast<size_t>(ip * kc)];
            const float* b_panel = &bp[static_cast<size_t>(jp * kc)];
            float* cb = c + (i0 + ip) * ldc + j0 + jp;
            if (ip + kMR <= mc && jp + kNR <= nc) {
              micro_kernel(kc, a_panel, b_panel, cb, ldc);
              continue;
            }
            float tile[kMR * kNR] = {};
            micro_kernel(kc, a_panel, b_panel, tile, kNR);
            for (int64_t i = 0; i < std::min(kMR, mc - ip); ++i)
              for (int64_t j = 0; j < std::min(kNR, nc - jp); ++j) cb[i * ldc + j] += tile[i * kNR + j];
          }
      }
    }
  }
}

// ---- shared pieces of the row-wise ops

// Calls fn(bt, position, row) for every token of a [B, T] token tensor: its index there, the row
// of wpe it takes (its column t, or positions[t] when given) and the row of a [V, ..] table its
// id indexes, after checking that the position indexes a row of [P, ..] (a bad one would read
// outside them on a real GPU too). A whole table (vocab_begin kWholeTable) must hold every id;
// a slice of the vocabulary (rows from vocab_begin) holds some: the others get row -1.
template <typename Fn>
void for_each_token(const char* op, const Tensor& tokens, const Tensor& positions, int64_t B, int64_t T, int64_t V,
                    int64_t P, int64_t vocab_begin, Fn fn) {
  const int32_t* tok = tokens.i32();
  const int32_t* pos = positions.defined() ? positions.i32() : nullptr;
  for (int64_t t = 0; pos && t < T; ++t)
    if (pos[t] < 0 || pos[t] >= P)
      throw std::out_of_range(std::string(op) + ": position id " + std::to_string(pos[t]) + " at column " +
                              std::to_string(t) + " outside [0, " + std::to_string(P) + ")");
  for (int64_t bt = 0; bt < B * T; ++bt) {
    int64_t row = tok[bt];
    if (vocab_begin != kWholeTable) {
      row -= vocab_begin;
      if (row < 0 || row >= V) row = -1;
    } else if (row < 0 || row >= V) {
      throw std::out_of_range(std::string(op) + ": id " + std::to_string(tok[bt]) + " at position " +
                              std::to_string(bt) + " outside [0, " + std::to_string(V) + ")");
    }
    fn(bt, pos ? static_cast<int64_t>(pos[bt % T]) : bt % T, row);
  }
}

// An undefined table is a frozen one's gradient in backward: nothing to check.
void check_embedding(const char* op, const Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                     const Tensor& positions) {
  require_float(op, {out});
  for (const Tensor* t : {&wte, &wpe})
    if (t->defined()) require_float(op, {*t});
  require_i32(tokens, op, "tokens");
  if (out.shape.ndim != 3 || (wte.defined() && wte.shape.ndim != 2) || (wpe.defined() && wpe.shape.ndim != 2))
    fail(op, "expected out [B, T, C], wte [V, C], wpe [maxT, C], got " + out.shape.str() + ", " + wte.shape.str() +
                 ", " + wpe.shape.str());
  const int64_t B = out.shape[0], T = out.shape[1], C = out.shape[2];
  require_shape(tokens, {B, T}, op, "tokens");
  if (wte.defined()) require_shape(wte, {wte.shape[0], C}, op, "wte");
  if (positions.defined()) {
    require_i32(positions, op, "positions");
    require_shape(positions, {T}, op, "positions");
    if (wpe.defined()) require_shape(wpe, {wpe.shape[0], C}, op, "wpe");
  } else if (wpe.defined() && (wpe.shape[1] != C || wpe.shape[0] < T)) {
    fail(op, "wpe is " + wpe.shape.str() + ", expected [>= " + std::to_string(T) + ", " + std::to_string(C) + "]");
  }
}

// The accesses of a backward op to the gradients it accumulates into (read, then written),
// appended to `acc`; an undefined one (a frozen parameter's) is not touched.
void accumulates_into(std::vector<Access>& acc, std::initializer_list<const Tensor*> grads) {
  for (const Tensor* t : grads)
    if (t->defined()) acc.push_back(reads(*t));
  for (const Tensor* t : grads)
    if (t->defined()) acc.push_back(writes(*t));
}

// The accesses of an embedding op: `fixed` plus a read of the positions when there are any.
std::vector<Access> with_positions(std::vector<Access> fixed, const Tensor& positions) {
  if (positions.defined()) fixed.push_back(reads(positions));
  return fixed;
}

// Rows [N, C] of a layernorm with its saved statistics and parameters.
void check_layernorm(const char* op, const Tensor& inp, const Tensor& mean, const Tensor& rstd, const Tensor& weight) {
  require_float(op, {inp, weight});
  require_f32(op, {mean, rstd});  // the statistics stay float32, as PyTorch's layer_norm saves them
  const int64_t C = last_dim(inp, op, "inp");
  require_numel(mean, inp.numel() / std::max<int64_t>(C, 1), op, "mean");
  require_numel(rstd, mean.numel(), op, "rstd");
  require_numel(weight, C, op, "weight");
}

// out [.., OC] = inp [.., C] @ weight [OC, C]^T (+ bias [OC]).
void check_matmul(const char* op, const Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias) {
  require_float(op, {out, inp, weight});
  if (weight.shape.ndim != 2) fail(op, "weight is " + weight.shape.str() + ", expected [OC, C]");
  const int64_t OC = weight.shape[0], C = weight.shape[1];
  if (last_dim(inp, op, "inp") != C)
    fail(op, "inp " + inp.shape.str() + " does not match weight " + weight.shape.str() + " (want [.., C])");
  require_shape(out, with_last_dim(inp.shape, OC), op, "out");
  if (bias.defined()) {
    require_float(op, {bias});
    require_numel(bias, OC, op, "bias");
  }
}

// Every defined one of `ts` is bf16 (an undefined one, a missing bias, does not count).
bool all_bf16(std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    if (t->defined() && t->dtype != DType::bf16) return false;
  return true;
}

// logits [.., V] with one i32 target per row.
void check_crossentropy(const char* op, const Tensor& logits, const Tensor& targets) {
  require_float(op, {logits});
  require_i32(targets, op, "targets");
  const int64_t V = last_dim(logits, op, "logits");
  require_numel(targets, logits.numel() / std::max<int64_t>(V, 1), op, "targets");
}

float max_of(const float* x, int64_t n) {
  float m = -INFINITY;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, x[i]);
  return m;
}

int64_t target_of(const char* op, const int32_t* targets, int64_t row, int64_t V) {
  const int32_t t = targets[row];
  if (t < 0 || t >= V)
    throw std::out_of_range(std::string(op) + ": target " + std::to_string(t) + " at row " + std::to_string(row) +
                            " outside [0, " + std::to_string(V) + ")");
  return t;
}

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCube = 0.044715f;

}  // namespace

void fill(Device& dev, Stream& s, const Tensor& t, float value) {
  require_float("fill", {t});
  const int64_t n = t.numel();
  launch_f32(dev, s, kernel("fill", 0, KernelClass::elementwise, {writes(t)}), [=](const AsF32& f) {
    float* p = f(t);
    for (int64_t i = 0; i < n; ++i) p[i] = value;
  }, SHARDLAB_ON_CUDA_F32(cuda::fill(f(t), n, value, stream)));
}

// dst = src, byte for byte (any dtype): one read and one write of the tensor.
void copy(Device& dev, Stream& s, const Tensor& dst, const Tensor& src) {
  if (dst.numel() != src.numel() || dst.dtype != src.dtype)
    fail("copy", "dst " + dst.shape.str() + " " + std::string(dtype_name(dst.dtype)) + " and src " + src.shape.str() +
                     " " + std::string(dtype_name(src.dtype)) + " differ");
  dev.launch(s, kernel("copy", 0, KernelClass::elementwise, {reads(src), writes(dst)}),
             [=] { std::memcpy(dst.data, src.data, src.bytes()); },
             SHARDLAB_ON_CUDA(cuda::copy(dst.data, src.data, src.bytes(), stream)));
}

void add_(Device& dev, Stream& s, const Tensor& dst, const Tensor& src) {
  require_float("add_", {dst, src});
  if (dst.numel() != src.numel())
    throw std::invalid_argument("add_: " + dst.shape.str() + " += " + src.shape.str() + ": sizes differ");
  const int64_t n = dst.numel();
  // One FLOP and three accesses (read both, write one) per element.
  launch_f32(dev, s,
             kernel("add_", static_cast<double>(n), KernelClass::elementwise, {reads(src), reads(dst), writes(dst)}),
             [=](const AsF32& f) {
               float* d = f(dst);
               const float* a = f(src);
               for (int64_t i = 0; i < n; ++i) d[i] += a[i];
             },
             SHARDLAB_ON_CUDA_F32(cuda::add_(f(dst), f(src), n, stream)));
}

void copy_blocks(Device& dev, Stream& s, std::string_view name, int64_t rows, const std::vector<CopyBlock>& blocks) {
  const std::string op(name);
  if (rows < 0) fail(op.c_str(), "rows " + std::to_string(rows) + " is negative");
  std::vector<Access> accesses;
  double bytes = 0;
  for (size_t b = 0; b < blocks.size(); ++b) {
    const CopyBlock& x = blocks[b];
    const std::string which = "block " + std::to_string(b) + ": ";
    for (const Tensor* t : {&x.src, &x.dst})
      if (t->dtype != DType::f32 && t->dtype != DType::bf16)
        fail(op.c_str(), which + "only f32 and bf16 tensors, got " + std::string(dtype_name(t->dtype)));
    if (x.width < 0 || x.src_pitch < 0 || x.dst_pitch < x.width)
      fail(op.c_str(), which + "width " + std::to_string(x.width) + ", pitches " + std::to_string(x.src_pitch) + " and " +
                           std::to_string(x.dst_pitch) + ": a row must fit its destination pitch");
    if (rows > 0 && x.width > 0 && (rows - 1) * x.dst_pitch + x.width > x.dst.numel())
      fail(op.c_str(), which + std::to_string(rows) + " rows of " + std::to_string(x.width) + " at pitch " +
                           std::to_string(x.dst_pitch) + " do not fit a destination of " + std::to_string(x.dst.numel()));
    accesses.push_back(reads(x.src));
    accesses.push_back(writes(x.dst));
    bytes += static_cast<double>(rows * x.width) * static_cast<double>(dtype_size(x.src.dtype) + dtype_size(x.dst.dtype));
  }
  // Each element read once (or not: padding) and written once.
  dev.launch(s, {name, 0.0, bytes, DType::f32, KernelClass::elementwise, std::move(accesses)},
             [=] {
               for (const CopyBlock& x : blocks) {
                 const int64_t end = x.src.numel();
                 for (int64_t r = 0; r < rows; ++r) {
                   const int64_t from = r * x.src_pitch, to = r * x.dst_pitch;
                   const int64_t valid = std::clamp<int64_t>(end - from, 0, x.width);
                   if (x.src.dtype == DType::f32 && x.dst.dtype == DType::f32) {
                     if (valid > 0) std::memcpy(x.dst.f32() + to, x.src.f32() + from, static_cast<size_t>(valid) * 4);
                     std::fill(x.dst.f32() + to + valid, x.dst.f32() + to + x.width, 0.0f);
                     continue;
                   }
                   for (int64_t k = 0; k < x.width; ++k) {
                     const float v = k >= valid                   ? 0.0f
                                     : x.src.dtype == DType::f32 ? x.src.f32()[from + k]
                                                                 : from_bf16(x.src.bf16()[from + k]);
                     if (x.dst.dtype == DType::f32) x.dst.f32()[to + k] = v;
                     else x.dst.bf16()[to + k] = to_bf16(v);
                   }
                 }
               }
             },
             SHARDLAB_ON_CUDA({
               std::vector<cuda::CopyBlock> cb;
               for (const CopyBlock& x : blocks)
                 cb.push_back({x.src.data, x.dst.data, x.src.numel(), x.src_pitch, x.dst_pitch, x.width,
                               x.src.dtype == DType::bf16, x.dst.dtype == DType::bf16});
               cuda::copy_blocks(cb, rows, stream);
             }));
}

void scale_(Device& dev, Stream& s, const Tensor& t, float factor) {
  require_float("scale_", {t});
  const int64_t n = t.numel();
  launch_f32(dev, s, kernel("scale_", static_cast<double>(n), KernelClass::elementwise, {reads(t), writes(t)}),
             [=](const AsF32& f) {
               float* p = f(t);
               for (int64_t i = 0; i < n; ++i) p[i] *= factor;
             },
             SHARDLAB_ON_CUDA_F32(cuda::scale_(f(t), n, factor, stream)));
}

void divide_(Device& dev, Stream& s, const Tensor& t, float divisor) {
  require_float("divide_", {t});
  const int64_t n = t.numel();
  launch_f32(dev, s, kernel("divide_", static_cast<double>(n), KernelClass::elementwise, {reads(t), writes(t)}),
             [=](const AsF32& f) {
               float* p = f(t);
               for (int64_t i = 0; i < n; ++i) p[i] /= divisor;
             },
             SHARDLAB_ON_CUDA_F32(cuda::divide_(f(t), n, divisor, stream)));
}

// out = a + b: the residual stream of a transformer block (x + attn(ln(x))). Its backward is
// the identity on both inputs, which the caller does by accumulating the same gradient twice.
void residual_forward(Device& dev, Stream& s, const Tensor& out, const Tensor& a, const Tensor& b) {
  require_float("residual_forward", {out, a, b});
  if (a.numel() != out.numel() || b.numel() != out.numel())
    fail("residual_forward", out.shape.str() + " = " + a.shape.str() + " + " + b.shape.str() + ": sizes differ");
  const int64_t n = out.numel();
  launch_f32(dev, s, kernel("residual_forward", static_cast<double>(n), KernelClass::elementwise,
                       {reads(a), reads(b), writes(out)}),
             [=](const AsF32& f) {
               float* o = f(out);
               const float* x = f(a);
               const float* y = f(b);
               for (int64_t i = 0; i < n; ++i) o[i] = x[i] + y[i];
             },
             SHARDLAB_ON_CUDA_F32(cuda::residual_forward(f(out), f(a), f(b), n, stream)));
}

// out[b, t, :] = wte[tokens[b, t], :] + wpe[t, :]: a token's vector plus its position's. Only the
// gathered rows of wte move, so the traffic is B*T rows of it, not all V. A slice of the
// vocabulary's table (vocab_begin) adds only the rows it holds; without wpe no position is added.
void embedding_forward(Device& dev, Stream& s, const Tensor& out, const Tensor& tokens, const Tensor& wte,
                       const Tensor& wpe, const Tensor& positions, int64_t vocab_begin) {
  check_embedding("embedding_forward", out, tokens, wte, wpe, positions);
  const int64_t B = out.shape[0], T = out.shape[1], C = out.shape[2], V = wte.shape[0];
  const int64_t P = wpe.defined() ? wpe.shape[0] : INT32_MAX;
  std::vector<Access> acc{reads(tokens), reads(wte)};
  if (wpe.defined()) acc.push_back(reads(wpe));
  acc.push_back(writes(out));
  Kernel k = kernel("embedding_forward", static_cast<double>(B * T * C), KernelClass::elementwise,
                    with_positions(std::move(acc), positions));
  k.bytes = static_cast<double>(tokens.bytes() + out.bytes() + (positions.defined() ? positions.bytes() : 0)) +
            static_cast<double>(dtype_size(wte.dtype) * B * T * C + (wpe.defined() ? dtype_size(wpe.dtype) * T * C : 0));
  launch_f32(dev, s, k, [=](const AsF32& f) {
    float* const x = f(out);
    const float *const te = f(wte), *const pe = f(wpe);
    for_each_token("embedding_forward", tokens, positions, B, T, V, P, vocab_begin, [&](int64_t bt, int64_t t, int64_t row) {
      float* o = x + bt * C;
      const float* w = row >= 0 ? te + row * C : nullptr;
      const float* p = pe != nullptr ? pe + t * C : nullptr;
      for (int64_t i = 0; i < C; ++i) o[i] = (w != nullptr ? w[i] : 0.0f) + (p != nullptr ? p[i] : 0.0f);
    });
  }, SHARDLAB_ON_CUDA_F32(cuda::embedding_forward(f(out), tokens.i32(), positions.defined() ? positions.i32() : nullptr,
                                              f(wte), f(wpe), B, T, C, V, P, vocab_begin, stream)));
}

// The gradient of a gather is a scatter-add: each position's dout goes to its token's row of
// dwte and its position's row of dwpe (a token seen twice gets both contributions).
void embedding_backward(Device& dev, Stream& s, const Tensor& dwte, const Tensor& dwpe, const Tensor& dout,
                        const Tensor& tokens, const Tensor& positions, int64_t vocab_begin) {
  // A frozen table (requires_grad=False) has no gradient; both frozen, there is nothing to do.
  if (!dwte.defined() && !dwpe.defined()) return;
  check_embedding("embedding_backward", dout, tokens, dwte, dwpe, positions);
  const int64_t B = dout.shape[0], T = dout.shape[1], C = dout.shape[2];
  // A frozen table's ids are not bounded here (forward checked them against the table).
  const int64_t V = dwte.defined() ? dwte.shape[0] : INT32_MAX, P = dwpe.defined() ? dwpe.shape[0] : INT32_MAX;
  const int64_t begin = dwte.defined() ? vocab_begin : kWholeTable;
  std::vector<Access> acc{reads(dout), reads(tokens)};
  accumulates_into(acc, {&dwte, &dwpe});
  Kernel k = kernel("embedding_backward", 2.0 * static_cast<double>(B * T * C), KernelClass::elementwise,
                    with_positions(std::move(acc), positions));
  k.bytes = static_cast<double>(tokens.bytes() + dout.bytes() + (positions.defined() ? positions.bytes() : 0)) +
            2.0 * static_cast<double>(((dwte.defined() ? dtype_size(dwte.dtype) * B * T : 0) +
                                       (dwpe.defined() ? dtype_size(dwpe.dtype) * T : 0)) * C);
  launch_f32(dev, s, k, [=](const AsF32& f) {
    float* wte = f(dwte);
    float* wpe = f(dwpe);
    const float* dy = f(dout);
    for_each_token("embedding_backward", tokens, positions, B, T, V, P, begin, [&](int64_t bt, int64_t t, int64_t row) {
      const float* d = dy + bt * C;
      if (wte != nullptr && row >= 0)
        for (int64_t i = 0; i < C; ++i) wte[row * C + i] += d[i];
      if (wpe != nullptr)
        for (int64_t i = 0; i < C; ++i) wpe[t * C + i] += d[i];
    });
  }, SHARDLAB_ON_CUDA_F32(cuda::embedding_backward(f(dwte),
                                               f(dwpe), f(dout), tokens.i32(),
                                               positions.defined() ? positions.i32() : nullptr, B, T, C, V, P,
                                               begin, stream)));
}

// Per row: out = (x - mean) * rstd * weight + bias, rstd = 1 / sqrt(var + 1e-5) with the biased
// variance (divide by C, as PyTorch). mean and rstd are saved so backward need not recompute them.
// FLOPs per element: 1 for the mean, 3 for the variance, 4 for the output.
void layernorm_forward(Device& dev, Stream& s, const Tensor& out, const Tensor& mean, const Tensor& rstd,
                       const Tensor& inp, const Tensor& weight, const Tensor& bias) {
  check_layernorm("layernorm_forward", inp, mean, rstd, weight);
  require_float("layernorm_forward", {out, bias});
  require_numel(bias, weight.numel(), "layernorm_forward", "bias");
  require_shape(out, inp.shape, "layernorm_forward", "out");
  const int64_t C = weight.numel(), N = mean.numel();
  launch_f32(dev, s, kernel("layernorm_forward", 8.0 * static_cast<double>(N * C), KernelClass::elementwise,
                       {reads(inp), reads(weight), reads(bias), writes(out), writes(mean), writes(rstd)}),
             [=](const AsF32& f) {
               const float* w = f(weight);
               const float* b = f(bias);
               for (int64_t n = 0; n < N; ++n) {
                 const float* x = f(inp) + n * C;
                 float* o = f(out) + n * C;
                 float m = 0.0f;
                 for (int64_t i = 0; i < C; ++i) m += x[i];
                 m /= static_cast<float>(C);
                 float var = 0.0f;
                 for (int64_t i = 0; i < C; ++i) var += (x[i] - m) * (x[i] - m);
                 var /= static_cast<float>(C);
                 const float rs = 1.0f / std::sqrt(var + 1e-5f);
                 for (int64_t i = 0; i < C; ++i) o[i] = (x[i] - m) * rs * w[i] + b[i];
                 f(mean)[n] = m;
                 f(rstd)[n] = rs;
               }
             },
             SHARDLAB_ON_CUDA_F32(cuda::layernorm_forward(f(out), f(mean), f(rstd), f(inp), f(weight),
                                                      f(bias), N, C, stream)));
}

// With norm = (x - mean) * rstd and dnorm = weight * dout (as in llm.c):
//   dbias += dout, dweight += norm * dout,
//   dinp += rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)),
// the two means over the row being the gradient through mean and rstd. FLOPs per element: 6 for
// the two means, 13 for the three gradients (norm is recomputed rather than stored).
void layernorm_backward(Device& dev, Stream& s, const Tensor& dinp, const Tensor& dweight, const Tensor& dbias,
                        const Tensor& dout, const Tensor& inp, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd) {
  // dweight and dbias may each be undefined: a frozen parameter (requires_grad=False) gets no
  // gradient, and the input's gradient is computed all the same.
  check_layernorm("layernorm_backward", inp, mean, rstd, weight);
  require_float("layernorm_backward", {dinp, dout});
  require_shape(dinp, inp.shape, "layernorm_backward", "dinp");
  require_shape(dout, inp.shape, "layernorm_backward", "dout");
  for (auto [t, what] : {std::pair{&dweight, "dweight"}, std::pair{&dbias, "dbias"}}) {
    if (!t->defined()) continue;
    require_float("layernorm_backward", {*t});
    require_numel(*t, weight.numel(), "layernorm_backward", what);
  }
  const int64_t C = weight.numel(), N = mean.numel();
  std::vector<Access> acc{reads(dout), reads(inp), reads(weight), reads(mean), reads(rstd)};
  accumulates_into(acc, {&dinp, &dweight, &dbias});
  launch_f32(dev, s,
             kernel("layernorm_backward", 19.0 * static_cast<double>(N * C), KernelClass::elementwise, std::move(acc)),
             [=](const AsF32& f) {
               const float* w = f(weight);
               float* dw = f(dweight);
               float* db = f(dbias);
               for (int64_t n = 0; n < N; ++n) {
                 const float* x = f(inp) + n * C;
                 const float* dy = f(dout) + n * C;
                 float* dx = f(dinp) + n * C;
                 const float m = f(mean)[n], rs = f(rstd)[n];
                 float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
                 for (int64_t i = 0; i < C; ++i) {
                   const float dnorm = w[i] * dy[i];
                   dnorm_mean += dnorm;
                   dnorm_norm_mean += dnorm * (x[i] - m) * rs;
                 }
                 dnorm_mean /= static_cast<float>(C);
                 dnorm_norm_mean /= static_cast<float>(C);
                 if (db != nullptr)
                   for (int64_t i = 0; i < C; ++i) db[i] += dy[i];
                 if (dw != nullptr)
                   for (int64_t i = 0; i < C; ++i) dw[i] += (x[i] - m) * rs * dy[i];
                 for (int64_t i = 0; i < C; ++i)
                   dx[i] += (w[i] * dy[i] - dnorm_mean - (x[i] - m) * rs * dnorm_norm_mean) * rs;
               }
             },
             SHARDLAB_ON_CUDA_F32(cuda::layernorm_backward(f(dinp), f(dweight),
                                                       f(dbias), f(dout), f(inp),
                                                       f(weight), f(mean), f(rstd), N, C, stream)));
}

// out[N, OC] = inp[N, C] @ weight[OC, C]^T + bias: out starts as the bias (or zero) and the
// blocked gemm accumulates the 2*N*C*OC FLOPs of the product into it.
void matmul_forward(Device& dev, Stream& s, const Tensor& out, const Tensor& inp, const Tensor& weight,
                    const Tensor& bias) {
  check_matmul("matmul_forward", out, inp, weight, bias);
  const int64_t OC = weight.shape[0], C = weight.shape[1], N = inp.numel() / std::max<int64_t>(C, 1);
  std::vector<Access> acc{reads(inp), reads(weight), writes(out)};
  if (bias.defined()) acc.push_back(reads(bias));
  const Kernel k = kernel("matmul_forward", 2.0 * static_cast<double>(N * C * OC), KernelClass::matmul, std::move(acc));
  [[maybe_unused]] const bool bf16 = all_bf16({&out, &inp, &weight, &bias});
  dev.launch(s, k, f32_host(k, [=](const AsF32& f) {
               float* o = f(out);
               for (int64_t n = 0; n < N; ++n) {
                 if (bias.defined())
                   std::copy_n(f(bias), OC, o + n * OC);
                 else
                   std::fill_n(o + n * OC, OC, 0.0f);
               }
               gemm(N, OC, C, {f(inp), C, 1}, {f(weight), 1, C}, o, OC);
             }),
             // bf16 operands go to cuBLAS as they are (tensor cores); anything else in float32.
             SHARDLAB_ON_CUDA(if (bf16) {
               cuda::matmul_forward_bf16(out.data, inp.data, weight.data, bias.defined() ? bias.data : nullptr, N, C, OC,
                                         stream);
               return;
             } const AsF32 f(k.accesses, stream);
             cuda::matmul_forward(f(out), f(inp), f(weight), f(bias), N, C, OC, stream)));
}

// The two products of a linear layer's backward, as two kernels (the trace shows both):
//   dinp[N, C]     += dout[N, OC] @ weight[OC, C]
//   dweight[OC, C] += dout^T[OC, N] @ inp[N, C],  dbias[OC] += column sums of dout (N*OC FLOPs).
// Both read the operands in place through strides; the gemm accumulates into the gradients.
// Apart, they are what a zero-bubble pipeline (chapter 11) runs at different times.
void matmul_backward(Device& dev, Stream& s, const Tensor& dinp, const Tensor& dweight, const Tensor& dbias,
                     const Tensor& dout, const Tensor& inp, const Tensor& weight) {
  check_matmul("matmul_backward", dout, inp, weight, dbias);
  require_shape(dinp, inp.shape, "matmul_backward", "dinp");
  if (dweight.defined()) require_shape(dweight, weight.shape, "matmul_backward", "dweight");
  matmul_backward_input(dev, s, dinp, dout, weight);
  matmul_backward_weight(dev, s, dweight, dbias, dout, inp);
}

void matmul_backward_input(Device& dev, Stream& s, const Tensor& dinp, const Tensor& dout, const Tensor& weight) {
  check_matmul("matmul_backward_input", dout, dinp, weight, Tensor{});
  const int64_t OC = weight.shape[0], C = weight.shape[1], N = dinp.numel() / std::max<int64_t>(C, 1);
  const Kernel kin = kernel("matmul_backward_input", 2.0 * static_cast<double>(N * C * OC), KernelClass::matmul,
                            {reads(dout), reads(weight), reads(dinp), writes(dinp)});
  [[maybe_unused]] const bool bf16_in = all_bf16({&dinp, &dout, &weight});
  dev.launch(s, kin,
             f32_host(kin, [=](const AsF32& f) { gemm(N, C, OC, {f(dout), OC, 1}, {f(weight), C, 1}, f(dinp), C); }),
             SHARDLAB_ON_CUDA(if (bf16_in) {
               cuda::matmul_backward_input_bf16(dinp.data, dout.data, weight.data, N, C, OC, stream);
               return;
             } const AsF32 f(kin.accesses, stream);
             cuda::matmul_backward_input(f(dinp), f(dout), f(weight), N, C, OC, stream)));
}

void matmul_backward_weight(Device& dev, Stream& s, const Tensor& dweight, const Tensor& dbias, const Tensor& dout,
                            const Tensor& inp) {
  // A frozen weight (requires_grad=False) has no gradient: its GEMM is not run at all, a third
  // of the layer's backward FLOPs saved. A bias may still train on its own.
  if (!dweight.defined() && !dbias.defined()) return;
  const char* op = "matmul_backward_weight";
  require_float(op, {dout, inp});
  const int64_t OC = last_dim(dout, op, "dout"), C = last_dim(inp, op, "inp"), N = inp.numel() / std::max<int64_t>(C, 1);
  require_shape(dout, with_last_dim(inp.shape, OC), op, "dout");
  if (dweight.defined()) {
    require_float(op, {dweight});
    require_shape(dweight, Shape{OC, C}, op, "dweight");
  }
  if (dbias.defined()) {
    require_float(op, {dbias});
    require_numel(dbias, OC, op, "dbias");
  }
  std::vector<Access> acc{reads(dout)};
  if (dweight.defined()) acc.push_back(reads(inp));
  accumulates_into(acc, {&dweight, &dbias});
  const Kernel kw = kernel(dweight.defined() ? "matmul_backward_weight" : "matmul_backward_bias",
                           (dweight.defined() ? 2.0 * static_cast<double>(N * C * OC) : 0.0) +
                               (dbias.defined() ? static_cast<double>(N * OC) : 0.0),
                           KernelClass::matmul, std::move(acc));
  [[maybe_unused]] const bool bf16_w = dweight.defined() && all_bf16({&dweight, &dout, &inp});
  dev.launch(s, kw, f32_host(kw, [=](const AsF32& f) {
               if (dweight.defined()) gemm(OC, C, N, {f(dout), 1, OC}, {f(inp), C, 1}, f(dweight), C);
               if (!dbias.defined()) return;
               float* db = f(dbias);
               const float* dy = f(dout);
               for (int64_t n = 0; n < N; ++n)
                 for (int64_t j = 0; j < OC; ++j) db[j] += dy[n * OC + j];
             }),
             // In bf16 the weight's GEMM goes to cuBLAS as it is; the bias's column sums (a
             // reduction, not a GEMM) on float32 copies of dout and dbias.
             SHARDLAB_ON_CUDA(if (!bf16_w) {
               const AsF32 f(kw.accesses, stream);
               cuda::matmul_backward_weight(f(dweight), f(dbias), f(dout), f(inp), N, C, OC, stream);
               return;
             } cuda::matmul_backward_weight_bf16(dweight.data, dout.data, inp.data, N, C, OC, stream);
             if (dbias.defined()) {
               const AsF32 f({reads(dout), reads(dbias), writes(dbias)}, stream);
               cuda::matmul_backward_weight(nullptr, f(dbias), f(dout), nullptr, N, C, OC, stream);
             }));
}

// out[N, OC] += bias: one read-modify-write of out, N*OC FLOPs.
void bias_forward(Device& dev, Stream& s, const Tensor& out, const Tensor& bias) {
  require_float("bias_forward", {out, bias});
  const int64_t OC = bias.numel(), N = out.numel() / std::max<int64_t>(OC, 1);
  require_shape(out, with_last_dim(out.shape, OC), "bias_forward", "out");
  launch_f32(dev, s, kernel("bias_forward", static_cast<double>(N * OC), KernelClass::elementwise,
                            {reads(out), reads(bias), writes(out)}),
             [=](const AsF32& f) {
               float* o = f(out);
               const float* b = f(bias);
               for (int64_t n = 0; n < N; ++n)
                 for (int64_t j = 0; j < OC; ++j) o[n * OC + j] += b[j];
             },
             SHARDLAB_ON_CUDA_F32(cuda::add_bias(f(out), f(bias), N, OC, stream)));
}

// dbias[OC] += column sums of dout[N, OC]: matmul_backward's bias term on its own.
void bias_backward(Device& dev, Stream& s, const Tensor& dbias, const Tensor& dout) {
  if (!dbias.defined()) return;  // a frozen bias
  require_float("bias_backward", {dbias, dout});
  const int64_t OC = dbias.numel(), N = dout.numel() / std::max<int64_t>(OC, 1);
  require_shape(dout, with_last_dim(dout.shape, OC), "bias_backward", "dout");
  launch_f32(dev, s, kernel("bias_backward", static_cast<double>(N * OC), KernelClass::elementwise,
                            {reads(dout), reads(dbias), writes(dbias)}),
             [=](const AsF32& f) {
               float* db = f(dbias);
               const float* dy = f(dout);
               for (int64_t n = 0; n < N; ++n)
                 for (int64_t j = 0; j < OC; ++j) db[j] += dy[n * OC + j];
             },
             SHARDLAB_ON_CUDA_F32(cuda::matmul_backward_weight(nullptr, f(dbias), f(dout), nullptr, N, 0, OC, stream)));
}

// GPT-2's GELU, the tanh approximation: out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
// About 10 FLOPs per element, the tanh counted as one.
void gelu_forward(Device& dev, Stream& s, const Tensor& out, const Tensor& inp) {
  require_float("gelu_forward", {out, inp});
  require_shape(out, inp.shape, "gelu_forward", "out");
  const int64_t n = inp.numel();
  launch_f32(dev, s, kernel("gelu_forward", 10.0 * static_cast<double>(n), KernelClass::elementwise,
                       {reads(inp), writes(out)}),
             [=](const AsF32& f) {
               const float* x = f(inp);
               float* o = f(out);
               for (int64_t i = 0; i < n; ++i) {
                 const float u = kGeluScale * (x[i] + kGeluCube * x[i] * x[i] * x[i]);
                 o[i] = 0.5f * x[i] * (1.0f + std::tanh(u));
               }
             },
             SHARDLAB_ON_CUDA_F32(cuda::gelu_forward(f(out), f(inp), n, stream)));
}

// d/dx of 0.5 x (1 + tanh u), u = sqrt(2/pi) (x + 0.044715 x^3):
//   0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) sqrt(2/pi) (1 + 3 * 0.044715 x^2);  dinp += that * dout.
// About 20 FLOPs per element.
void gelu_backward(Device& dev, Stream& s, const Tensor& dinp, const Tensor& inp, const Tensor& dout) {
  require_float("gelu_backward", {dinp, inp, dout});
  require_shape(dinp, inp.shape, "gelu_backward", "dinp");
  require_shape(dout, inp.shape, "gelu_backward", "dout");
  const int64_t n = inp.numel();
  launch_f32(dev, s, kernel("gelu_backward", 20.0 * static_cast<double>(n), KernelClass::elementwise,
                       {reads(inp), reads(dout), reads(dinp), writes(dinp)}),
             [=](const AsF32& f) {
               const float* x = f(inp);
               const float* dy = f(dout);
               float* dx = f(dinp);
               for (int64_t i = 0; i < n; ++i) {
                 const float x2 = x[i] * x[i];
                 const float th = std::tanh(kGeluScale * (x[i] + kGeluCube * x2 * x[i]));
                 const float sech2 = 1.0f - th * th;
                 const float du = kGeluScale * (1.0f + 3.0f * kGeluCube * x2);
                 const float grad = 0.5f * (1.0f + th) + 0.5f * x[i] * sech2 * du;
                 dx[i] += grad * dy[i];
               }
             },
             SHARDLAB_ON_CUDA_F32(cuda::gelu_backward(f(dinp), f(inp), f(dout), n, stream)));
}

// loss = -log softmax(x)[target] = log(sum_j exp(x_j - max)) + max - x_target. Subtracting the
// row max keeps every exp <= 1, so large logits cannot overflow. About 3 FLOPs per logit.
void crossentropy_forward(Device& dev, Stream& s, const Tensor& losses, const Tensor& logits, const Tensor& targets) {
  check_crossentropy("crossentropy_forward", logits, targets);
  require_f32(losses, "crossentropy_forward");  // per-position losses in float32, whatever the logits
  require_numel(losses, targets.numel(), "crossentropy_forward", "losses");
  const int64_t V = last_dim(logits, "crossentropy_forward", "logits"), N = targets.numel();
  launch_f32(dev, s, kernel("crossentropy_forward", 3.0 * static_cast<double>(N * V), KernelClass::elementwise,
                       {reads(logits), reads(targets), writes(losses)}),
             [=](const AsF32& f) {
               for (int64_t n = 0; n < N; ++n) {
                 const float* x = f(logits) + n * V;
                 const int64_t t = target_of("crossentropy_forward", targets.i32(), n, V);
                 const float mx = max_of(x, V);
                 float sum = 0.0f;
                 for (int64_t i = 0; i < V; ++i) sum += std::exp(x[i] - mx);
                 f(losses)[n] = std::log(sum) + mx - x[t];
               }
             },
             SHARDLAB_ON_CUDA_F32(cuda::crossentropy_forward(f(losses), f(logits), targets.i32(), N, V, stream)));
}

// dlogits = (softmax(x) - onehot(target)) * dloss, written. The row's exps are stored in dlogits
// first and normalized in place, so each is computed once. About 4 FLOPs per logit.
void crossentropy_backward(Device& dev, Stream& s, const Tensor& dlogits, const Tensor& logits,
                           const Tensor& targets, float dloss) {
  check_crossentropy("crossentropy_backward", logits, targets);
  require_float("crossentropy_backward", {dlogits});
  require_shape(dlogits, logits.shape, "crossentropy_backward", "dlogits");
  const int64_t V = last_dim(logits, "crossentropy_backward", "logits"), N = targets.numel();
  launch_f32(dev, s, kernel("crossentropy_backward", 4.0 * static_cast<double>(N * V), KernelClass::elementwise,
                       {reads(logits), reads(targets), writes(dlogits)}),
             [=](const AsF32& f) {
               for (int64_t n = 0; n < N; ++n) {
                 const float* x = f(logits) + n * V;
                 float* dx = f(dlogits) + n * V;
                 const int64_t t = target_of("crossentropy_backward", targets.i32(), n, V);
                 const float mx = max_of(x, V);
                 float sum = 0.0f;
                 for (int64_t i = 0; i < V; ++i) {
                   dx[i] = std::exp(x[i] - mx);
                   sum += dx[i];
                 }
                 const float scale = dloss / sum;
                 for (int64_t i = 0; i < V; ++i) dx[i] *= scale;
                 dx[t] -= dloss;
               }
             },
             SHARDLAB_ON_CUDA_F32(cuda::crossentropy_backward(f(dlogits), f(logits), targets.i32(), N, V, dloss,
                                                          stream)));
}

// The vocabulary-parallel pieces (ops.h). Each row's three statistics, like the whole-row op's,
// in float32; the logits' slice is read once per op (about 1 FLOP per logit for the max, 3 for
// the sums, 4 for backward, as crossentropy_forward / _backward count theirs).
namespace {

void check_row_stats(const char* op, const Tensor& logits, std::initializer_list<Tensor> stats) {
  require_float(op, {logits});
  require_f32(op, stats);
  const int64_t N = logits.numel() / std::max<int64_t>(last_dim(logits, op, "logits"), 1);
  for (const Tensor& t : stats) require_numel(t, N, op, "a row statistic");
}

// The row of this slice that holds target t, or -1 where another rank's slice does.
int64_t slice_row(int32_t t, int64_t vocab_begin, int64_t V) {
  const int64_t row = static_cast<int64_t>(t) - vocab_begin;
  return row >= 0 && row < V ? row : -1;
}

}  // namespace

void crossentropy_row_max(Device& dev, Stream& s, const Tensor& row_max, const Tensor& logits) {
  check_row_stats("crossentropy_row_max", logits, {row_max});
  const int64_t V = last_dim(logits, "crossentropy_row_max", "logits"), N = row_max.numel();
  launch_f32(dev, s, kernel("crossentropy_row_max", static_cast<double>(N * V), KernelClass::elementwise,
                            {reads(logits), writes(row_max)}),
             [=](const AsF32& f) {
               for (int64_t n = 0; n < N; ++n) f(row_max)[n] = max_of(f(logits) + n * V, V);
             },
             SHARDLAB_ON_CUDA_F32(cuda::crossentropy_row_max(f(row_max), f(logits), N, V, stream)));
}

void crossentropy_row_sums(Device& dev, Stream& s, const Tensor& sum_exp, const Tensor& target_logit,
                           const Tensor& logits, const Tensor& row_max, const Tensor& targets, int64_t vocab_begin) {
  check_row_stats("crossentropy_row_sums", logits, {sum_exp, target_logit, row_max});
  require_i32(targets, "crossentropy_row_sums", "targets");
  require_numel(targets, row_max.numel(), "crossentropy_row_sums", "targets");
  const int64_t V = last_dim(logits, "crossentropy_row_sums", "logits"), N = row_max.numel();
  launch_f32(dev, s, kernel("crossentropy_row_sums", 2.0 * static_cast<double>(N * V), KernelClass::elementwise,
                            {reads(logits), reads(row_max), reads(targets), writes(sum_exp), writes(target_logit)}),
             [=](const AsF32& f) {
               for (int64_t n = 0; n < N; ++n) {
                 const float* x = f(logits) + n * V;
                 const float mx = f(row_max)[n];
                 float sum = 0.0f;
                 for (int64_t i = 0; i < V; ++i) sum += std::exp(x[i] - mx);
                 f(sum_exp)[n] = sum;
                 const int64_t t = slice_row(targets.i32()[n], vocab_begin, V);
                 f(target_logit)[n] = t >= 0 ? x[t] : 0.0f;
               }
             },
             SHARDLAB_ON_CUDA_F32(cuda::crossentropy_row_sums(f(sum_exp), f(target_logit), f(logits), f(row_max),
                                                              targets.i32(), N, V, vocab_begin, stream)));
}

void crossentropy_losses(Device& dev, Stream& s, const Tensor& losses, const Tensor& row_max, const Tensor& sum_exp,
                         const Tensor& target_logit) {
  require_f32("crossentropy_losses", {losses, row_max, sum_exp, target_logit});
  const int64_t N = losses.numel();
  for (const Tensor* t : {&row_max, &sum_exp, &target_logit}) require_numel(*t, N, "crossentropy_losses", "a row statistic");
  launch_f32(dev, s, kernel("crossentropy_losses", 3.0 * static_cast<double>(N), KernelClass::elementwise,
                            {reads(row_max), reads(sum_exp), reads(target_logit), writes(losses)}),
             [=](const AsF32& f) {
               for (int64_t n = 0; n < N; ++n) f(losses)[n] = std::log(f(sum_exp)[n]) + f(row_max)[n] - f(target_logit)[n];
             },
             SHARDLAB_ON_CUDA_F32(cuda::crossentropy_losses(f(losses), f(row_max), f(sum_exp), f(target_logit), N, stream)));
}

void crossentropy_backward_slice(Device& dev, Stream& s, const Tensor& dlogits, const Tensor& logits,
                                 const Tensor& targets, float dloss, const Tensor& row_max, const Tensor& sum_exp,
                                 int64_t vocab_begin) {
  check_row_stats("crossentropy_backward_slice", logits, {row_max, sum_exp});
  require_float("crossentropy_backward_slice", {dlogits});
  require_shape(dlogits, logits.shape, "crossentropy_backward_slice", "dlogits");
  require_i32(targets, "crossentropy_backward_slice", "targets");
  require_numel(targets, row_max.numel(), "crossentropy_backward_slice", "targets");
  const int64_t V = last_dim(logits, "crossentropy_backward_slice", "logits"), N = row_max.numel();
  launch_f32(dev, s, kernel("crossentropy_backward_slice", 4.0 * static_cast<double>(N * V), KernelClass::elementwise,
                            {reads(logits), reads(targets), reads(row_max), reads(sum_exp), writes(dlogits)}),
             [=](const AsF32& f) {
               for (int64_t n = 0; n < N; ++n) {
                 const float* x = f(logits) + n * V;
                 float* dx = f(dlogits) + n * V;
                 const float mx = f(row_max)[n], scale = dloss / f(sum_exp)[n];
                 for (int64_t i = 0; i < V; ++i) dx[i] = std::exp(x[i] - mx) * scale;
                 const int64_t t = slice_row(targets.i32()[n], vocab_begin, V);
                 if (t >= 0) dx[t] -= dloss;
               }
             },
             SHARDLAB_ON_CUDA_F32(cuda::crossentropy_backward_slice(f(dlogits), f(logits), f(row_max), f(sum_exp),
                                                                    targets.i32(), N, V, vocab_begin, dloss, stream)));
}

// torch.optim.AdamW, step t (from 1), in PyTorch's order: decay first, then the Adam step.
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2          (moment estimates)
//   mhat = m / (1 - b1^t);  vhat = v / (1 - b2^t)            (bias correction for the zero start)
//   p = p (1 - lr wd) - lr mhat / (sqrt(vhat) + eps)
// About 15 FLOPs per element; reads p, g, m, v and writes p, m, v.
void adamw(Device& dev, Stream& s, const Tensor& params, const Tensor& grads, const Tensor& m, const Tensor& v,
           int64_t t, const AdamW& hp) {
  require_f32("adamw", {params, grads, m, v});
  if (grads.numel() != params.numel() || m.numel() != params.numel() || v.numel() != params.numel())
    fail("adamw", "params " + params.shape.str() + ", grads " + grads.shape.str() + ", m " + m.shape.str() + ", v " +
                      v.shape.str() + ": sizes differ");
  if (t < 1) fail("adamw", "step " + std::to_string(t) + ", steps count from 1");
  const int64_t n = params.numel();
  const float b1 = hp.beta1, b2 = hp.beta2, lr = hp.lr, eps = hp.eps;
  const float decay = 1.0f - hp.lr * hp.weight_decay;
  const float b1_corr = static_cast<float>(1.0 - std::pow(static_cast<double>(b1), static_cast<double>(t)));
  const float b2_corr = static_cast<float>(1.0 - std::pow(static_cast<double>(b2), static_cast<double>(t)));
  dev.launch(s, kernel("adamw", 15.0 * static_cast<double>(n), KernelClass::elementwise,
                       {reads(params), reads(grads), reads(m), reads(v), writes(params), writes(m), writes(v)}),
             [=] {
               float* p = params.f32();
               const float* g = grads.f32();
               float* mm = m.f32();
               float* vv = v.f32();
               for (int64_t i = 0; i < n; ++i) {
                 mm[i] = b1 * mm[i] + (1.0f - b1) * g[i];
                 vv[i] = b2 * vv[i] + (1.0f - b2) * g[i] * g[i];
                 const float mhat = mm[i] / b1_corr, vhat = vv[i] / b2_corr;
                 p[i] = p[i] * decay - lr * mhat / (std::sqrt(vhat) + eps);
               }
             },
             SHARDLAB_ON_CUDA(cuda::adamw(params.f32(), grads.f32(), m.f32(), v.f32(), n, t, lr, b1, b2, eps,
                                          hp.weight_decay, stream)));
}

}  // namespace shardlab::ops
