// The CUDA kernels (common/cuda/kernels.h, chapter 00's polynomial.cu) against the CPU ops.
//
// For every op: random inputs on a SimDevice (real compute); device copies of every tensor the
// op touches are taken first, then the CPU op runs on the sim and the CUDA function on the copies
// (on a non-default stream), and each result is compared with a relative error, max |gpu - cpu|
// over max |cpu|, printed for every output. Gradients start nonzero, so accumulation is checked.
//
//   cmake --build --preset default --target shardlab_cuda_tests && build/tests/shardlab_cuda_tests
//
// Built only with CUDA (its own executable, tests/CMakeLists.txt). Without a visible GPU it
// prints "skipped: no CUDA device visible (...)" and exits 77 before any test runs; ctest
// counts that as skipped (SKIP_RETURN_CODE 77).
#include <catch2/catch.hpp>

#include "catch_session.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "00_streams_events/polynomial.h"
#include "model/attention.h"
#include "cuda/check.h"
#include "cuda/cuda_device.h"
#include "cuda/cuda_probe.h"
#include "cuda/kernels.h"
#include "model/ops.h"
#include "device/bf16.h"
#include "device/sim_device.h"

using namespace shardlab;
using ops::AttentionMask;

void cuda_spin(int64_t ns, void* stream);  // cuda_spin.cu

namespace {

// A device copy of a sim tensor's current contents (cudaMalloc'd, freed on destruction).
class Gpu {
 public:
  explicit Gpu(const Tensor& t) : bytes_(t.bytes()) {
    CUDA_CHECK(cudaMalloc(&p_, std::max<size_t>(bytes_, 1)));
    CUDA_CHECK(cudaMemcpy(p_, t.data, bytes_, cudaMemcpyHostToDevice));
  }
  ~Gpu() { cudaFree(p_); }
  Gpu(const Gpu&) = delete;
  Gpu& operator=(const Gpu&) = delete;

  float* f() const { return static_cast<float*>(p_); }
  int32_t* i() const { return static_cast<int32_t*>(p_); }
  void* raw() const { return p_; }
  std::vector<float> values() const {
    std::vector<float> v(bytes_ / sizeof(float));
    CUDA_CHECK(cudaMemcpy(v.data(), p_, bytes_, cudaMemcpyDeviceToHost));
    return v;
  }

 private:
  void* p_ = nullptr;
  size_t bytes_;
};

// max |got - want| / max |want| over the finite elements of want; infinities must match
// exactly and a NaN on one side only is an infinite error. Printed, then checked.
double relative_error(const std::vector<float>& got, const float* want, size_t n) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < n; ++i) {
    const double g = got[i], w = want[i];
    if (std::isfinite(w)) scale = std::max(scale, std::abs(w));
    if (g == w || (std::isnan(g) && std::isnan(w))) continue;
    diff = std::max(diff, std::isfinite(g) && std::isfinite(w) ? std::abs(g - w) : INFINITY);
  }
  return scale > 0 ? diff / scale : diff;
}

void expect_close(const std::string& what, const Gpu& got, const Tensor& want, double tolerance) {
  const auto n = static_cast<size_t>(want.numel());
  const double rel = relative_error(got.values(), static_cast<const float*>(want.data), n);
  std::printf("  %-44s relative error %9.2e  (tolerance %.0e)\n", what.c_str(), rel, tolerance);
  INFO(what << ": relative error " << rel);
  CHECK(rel <= tolerance);
}

// Tolerances: one float rounding for elementwise math (tanh, exp may differ in the last ulp),
// more where the GPU sums in a different order (rows, dot products, GEMM tiles).
constexpr double kElementwise = 1e-6;
constexpr double kReduction = 1e-5;
constexpr double kGemm = 2e-5;

struct Fixture {
  SimDevice dev{load_profile("h100-8"), ComputeMode::real, 0, 1};
  std::mt19937 rng{1234};
  cudaStream_t cuda_stream = nullptr;

  Fixture() { CUDA_CHECK(cudaStreamCreate(&cuda_stream)); }
  ~Fixture() { cudaStreamDestroy(cuda_stream); }
  Fixture(const Fixture&) = delete;
  Fixture& operator=(const Fixture&) = delete;

  Stream& s() { return dev.compute_stream(); }
  void* stream() const { return cuda_stream; }

  Tensor random(Shape shape, float amplitude = 1.0f, const char* name = "t") {
    Tensor t = dev.empty(shape, DType::f32, s(), name);
    std::uniform_real_distribution<float> u(-amplitude, amplitude);
    for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = u(rng);
    return t;
  }
  Tensor ids(Shape shape, int32_t limit, const char* name = "ids") {
    Tensor t = dev.empty(shape, DType::i32, s(), name);
    std::uniform_int_distribution<int32_t> u(0, limit - 1);
    for (int64_t i = 0; i < t.numel(); ++i) t.i32()[i] = u(rng);
    return t;
  }
  // Waits for both sides: the sim's op and the CUDA stream.
  void finish() {
    dev.synchronize();
    CUDA_CHECK(cudaStreamSynchronize(cuda_stream));
  }
};

}  // namespace

TEST_CASE("cuda: elementwise and memory ops", "[cuda]") {
  Fixture f;
  const int64_t n = 100'003;  // not a multiple of the block size
  std::printf("elementwise, n = %lld\n", static_cast<long long>(n));

  Tensor t = f.random({n});
  Gpu g(t);
  ops::fill(f.dev, f.s(), t, 0.37f);
  cuda::fill(g.f(), n, 0.37f, f.stream());
  f.finish();
  expect_close("fill", g, t, 0);

  Tensor src = f.random({n}), dst = f.random({n});
  Gpu gs(src), gd(dst);
  ops::copy(f.dev, f.s(), dst, src);
  cuda::copy(gd.raw(), gs.raw(), src.bytes(), f.stream());
  f.finish();
  expect_close("copy", gd, dst, 0);

  Tensor a = f.random({n}), b = f.random({n});
  Gpu ga(a), gb(b);
  ops::add_(f.dev, f.s(), a, b);
  cuda::add_(ga.f(), gb.f(), n, f.stream());
  f.finish();
  expect_close("add_", ga, a, kElementwise);

  ops::scale_(f.dev, f.s(), a, -1.7f);
  cuda::scale_(ga.f(), n, -1.7f, f.stream());
  f.finish();
  expect_close("scale_", ga, a, kElementwise);

  Tensor out = f.random({n});
  Gpu go(out);
  ops::residual_forward(f.dev, f.s(), out, a, b);
  cuda::residual_forward(go.f(), ga.f(), gb.f(), n, f.stream());
  f.finish();
  expect_close("residual_forward", go, out, kElementwise);

  Tensor x = f.random({n}, 4.0f), gelu = f.random({n}), dx = f.random({n}), dy = f.random({n});
  Gpu gx(x), ggelu(gelu), gdx(dx), gdy(dy);
  ops::gelu_forward(f.dev, f.s(), gelu, x);
  ops::gelu_backward(f.dev, f.s(), dx, x, dy);
  cuda::gelu_forward(ggelu.f(), gx.f(), n, f.stream());
  cuda::gelu_backward(gdx.f(), gx.f(), gdy.f(), n, f.stream());
  f.finish();
  expect_close("gelu_forward", ggelu, gelu, kElementwise);
  expect_close("gelu_backward (accumulated)", gdx, dx, kElementwise);

  // Again, the first element alone and then the rest: pointers off 16-byte alignment take the
  // kernels' one-float path.
  Tensor gelu_off = f.random({n}), dx_off = f.random({n});
  Gpu ggelu_off(gelu_off), gdx_off(dx_off);
  ops::gelu_backward(f.dev, f.s(), dx_off, x, dy);
  cuda::gelu_forward(ggelu_off.f(), gx.f(), 1, f.stream());
  cuda::gelu_forward(ggelu_off.f() + 1, gx.f() + 1, n - 1, f.stream());
  cuda::gelu_backward(gdx_off.f(), gx.f(), gdy.f(), 1, f.stream());
  cuda::gelu_backward(gdx_off.f() + 1, gx.f() + 1, gdy.f() + 1, n - 1, f.stream());
  f.finish();
  expect_close("gelu_forward, unaligned", ggelu_off, gelu, kElementwise);
  expect_close("gelu_backward (accumulated), unaligned", gdx_off, dx_off, kElementwise);
}

TEST_CASE("cuda: copy_blocks (FSDP2's copy-in, copy-out and chunk_cat), more blocks than one launch takes", "[cuda]") {
  Fixture f;
  // 40 parameters of uneven rows over 3 ranks: a chunk_cat into [3, slot], then the copy-out
  // back, on both devices.
  const int world = 3;
  std::vector<Tensor> params;
  std::vector<int64_t> widths;
  int64_t slot = 0;
  for (int i = 0; i < 40; ++i) {
    const int64_t rows = 1 + (i * 7) % 11, cols = 1 + i % 4, chunk = (rows + world - 1) / world;
    params.push_back(f.random({rows, cols}));
    widths.push_back(chunk * cols);
    slot += chunk * cols;
  }
  Tensor cat = f.random({world * slot}), back = f.random({world * slot});
  std::vector<std::unique_ptr<Gpu>> gp;
  for (const Tensor& t : params) gp.push_back(std::make_unique<Gpu>(t));
  Gpu gcat(cat), gback(back);
  std::vector<ops::CopyBlock> in, out;
  std::vector<cuda::CopyBlock> gin, gout;
  int64_t offset = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor dst = cat.view(offset, {world * slot - offset}), dback = back.view(offset, {world * slot - offset});
    in.push_back({params[i], dst, widths[i], slot, widths[i]});
    out.push_back({cat.view(offset, {world * slot - offset}), dback, slot, slot, widths[i]});
    gin.push_back({gp[i]->f(), gcat.f() + offset, params[i].numel(), widths[i], slot, widths[i]});
    gout.push_back({gcat.f() + offset, gback.f() + offset, world * slot - offset, slot, slot, widths[i]});
    offset += widths[i];
  }
  ops::copy_blocks(f.dev, f.s(), "chunk_cat", world, in);
  cuda::copy_blocks(gin, world, f.stream());
  f.finish();
  expect_close("copy_blocks (chunk_cat)", gcat, cat, 0);
  ops::copy_blocks(f.dev, f.s(), "split_with_sizes_copy", world, out);
  cuda::copy_blocks(gout, world, f.stream());
  f.finish();
  expect_close("copy_blocks (copy-out)", gback, back, 0);
}

// Mixed precision's copies: f32 into bf16 (round to nearest even) and back, padding zero.
TEST_CASE("cuda: copy_blocks between f32 and bf16", "[cuda]") {
  Fixture f;
  const int64_t n = 1000, rows = 4, width = 256;  // 4 rows of 256 from 1000: 24 of padding
  Tensor src = f.random({n}, 100.0f);
  Tensor half = f.dev.empty({rows * width}, DType::bf16, f.s(), "half"), back = f.random({rows * width});
  Gpu gsrc(src), ghalf(half), gback(back);
  ops::copy_blocks(f.dev, f.s(), "all_gather_copy_in", rows, {{src, half, width, width, width}});
  ops::copy_blocks(f.dev, f.s(), "chunk_cat", 1, {{half, back, rows * width, rows * width, rows * width}});
  cuda::copy_blocks({{gsrc.raw(), ghalf.raw(), n, width, width, width, false, true}}, rows, f.stream());
  cuda::copy_blocks({{ghalf.raw(), gback.raw(), rows * width, rows * width, rows * width, rows * width, true, false}}, 1,
                    f.stream());
  f.finish();
  std::vector<uint16_t> bits(static_cast<size_t>(rows * width));
  CUDA_CHECK(cudaMemcpy(bits.data(), ghalf.raw(), bits.size() * sizeof(uint16_t), cudaMemcpyDeviceToHost));
  CHECK(bits == std::vector<uint16_t>(half.bf16(), half.bf16() + rows * width));  // the same rounding, bit for bit
  expect_close("copy_blocks bf16 -> f32", gback, back, 0);
}

TEST_CASE("cuda: embedding forward and backward", "[cuda]") {
  // In order (position t for column t), and with position ids as chapter 08 gives them: columns
  // taken out of order from a longer table.
  for (const bool with_positions : {false, true}) {
    Fixture f;
    const int64_t B = 3, T = 37, C = 71, V = 101, maxT = with_positions ? 3 * T : T + 5;  // V small: tokens repeat
    std::printf("embedding, B %lld T %lld C %lld V %lld%s\n", static_cast<long long>(B), static_cast<long long>(T),
                static_cast<long long>(C), static_cast<long long>(V), with_positions ? ", position ids" : "");
    Tensor tokens = f.ids({B, T}, static_cast<int32_t>(V));
    Tensor positions = with_positions ? f.ids({T}, static_cast<int32_t>(maxT)) : Tensor{};
    Tensor wte = f.random({V, C}), wpe = f.random({maxT, C}), out = f.random({B, T, C});
    Tensor dout = f.random({B, T, C}), dwte = f.random({V, C}), dwpe = f.random({maxT, C});
    Gpu gtok(tokens), gwte(wte), gwpe(wpe), gout(out), gdout(dout), gdwte(dwte), gdwpe(dwpe);
    std::optional<Gpu> gpos;
    if (with_positions) gpos.emplace(positions);
    const int32_t* pos = gpos ? gpos->i() : nullptr;
    ops::embedding_forward(f.dev, f.s(), out, tokens, wte, wpe, positions);
    ops::embedding_backward(f.dev, f.s(), dwte, dwpe, dout, tokens, positions);
    cuda::embedding_forward(gout.f(), gtok.i(), pos, gwte.f(), gwpe.f(), B, T, C, V, maxT, ops::kWholeTable, f.stream());
    cuda::embedding_backward(gdwte.f(), gdwpe.f(), gdout.f(), gtok.i(), pos, B, T, C, V, maxT, ops::kWholeTable, f.stream());
    f.finish();
    expect_close("embedding_forward", gout, out, kElementwise);
    expect_close("embedding_backward dwte", gdwte, dwte, kElementwise);
    expect_close("embedding_backward dwpe", gdwpe, dwpe, kElementwise);
    // The token embedding frozen (chapter 09's --freeze): dwte null, dwpe as before.
    ops::embedding_backward(f.dev, f.s(), Tensor{}, dwpe, dout, tokens, positions);
    cuda::embedding_backward(nullptr, gdwpe.f(), gdout.f(), gtok.i(), pos, B, T, C, V, maxT, ops::kWholeTable, f.stream());
    f.finish();
    expect_close("embedding_backward dwpe (wte frozen)", gdwpe, dwpe, kElementwise);
  }
}

TEST_CASE("cuda: layernorm forward and backward", "[cuda]") {
  Fixture f;
  const int64_t N = 67, C = 771;  // C not a multiple of 32
  std::printf("layernorm, N %lld C %lld\n", static_cast<long long>(N), static_cast<long long>(C));
  Tensor inp = f.random({N, C}, 3.0f), weight = f.random({C}), bias = f.random({C});
  Tensor out = f.random({N, C}), mean = f.random({N}), rstd = f.random({N});
  Tensor dout = f.random({N, C}), dinp = f.random({N, C}), dweight = f.random({C}), dbias = f.random({C});
  Gpu ginp(inp), gweight(weight), gbias(bias), gout(out), gmean(mean), grstd(rstd);
  Gpu gdout(dout), gdinp(dinp), gdweight(dweight), gdbias(dbias);
  ops::layernorm_forward(f.dev, f.s(), out, mean, rstd, inp, weight, bias);
  ops::layernorm_backward(f.dev, f.s(), dinp, dweight, dbias, dout, inp, weight, mean, rstd);
  cuda::layernorm_forward(gout.f(), gmean.f(), grstd.f(), ginp.f(), gweight.f(), gbias.f(), N, C, f.stream());
  cuda::layernorm_backward(gdinp.f(), gdweight.f(), gdbias.f(), gdout.f(), ginp.f(), gweight.f(), gmean.f(), grstd.f(),
                           N, C, f.stream());
  f.finish();
  expect_close("layernorm_forward out", gout, out, kReduction);
  expect_close("layernorm_forward mean", gmean, mean, kReduction);
  expect_close("layernorm_forward rstd", grstd, rstd, kReduction);
  expect_close("layernorm_backward dinp", gdinp, dinp, kReduction);
  expect_close("layernorm_backward dweight", gdweight, dweight, kReduction);
  expect_close("layernorm_backward dbias", gdbias, dbias, kReduction);

  // A frozen bias (chapter 09's --freeze): its gradient is null and skipped, the others as before.
  Tensor dinp2 = f.random({N, C}), dweight2 = f.random({C});
  Gpu gdinp2(dinp2), gdweight2(dweight2);
  ops::layernorm_backward(f.dev, f.s(), dinp2, dweight2, Tensor{}, dout, inp, weight, mean, rstd);
  cuda::layernorm_backward(gdinp2.f(), gdweight2.f(), nullptr, gdout.f(), ginp.f(), gweight.f(), gmean.f(), grstd.f(),
                           N, C, f.stream());
  f.finish();
  expect_close("layernorm_backward dinp (bias frozen)", gdinp2, dinp2, kReduction);
  expect_close("layernorm_backward dweight (bias frozen)", gdweight2, dweight2, kReduction);
}

TEST_CASE("cuda: matmul forward and backward (cuBLAS)", "[cuda]") {
  Fixture f;
  const int64_t B = 2, T = 65, C = 97, OC = 131;  // N = 130 rows
  const int64_t N = B * T;
  for (const bool with_bias : {true, false}) {
    std::printf("matmul, N %lld C %lld OC %lld, %s\n", static_cast<long long>(N), static_cast<long long>(C),
                static_cast<long long>(OC), with_bias ? "with bias" : "no bias");
    const std::string tag = with_bias ? " (bias)" : " (no bias)";
    Tensor inp = f.random({B, T, C}), weight = f.random({OC, C}), out = f.random({B, T, OC});
    Tensor bias = with_bias ? f.random({OC}) : Tensor{};
    Tensor dout = f.random({B, T, OC}), dinp = f.random({B, T, C}), dweight = f.random({OC, C});
    Tensor dbias = with_bias ? f.random({OC}) : Tensor{};
    Gpu ginp(inp), gweight(weight), gout(out), gdout(dout), gdinp(dinp), gdweight(dweight);
    Gpu gbias(with_bias ? bias : f.random({1})), gdbias(with_bias ? dbias : f.random({1}));
    ops::matmul_forward(f.dev, f.s(), out, inp, weight, bias);
    ops::matmul_backward(f.dev, f.s(), dinp, dweight, dbias, dout, inp, weight);
    cuda::matmul_forward(gout.f(), ginp.f(), gweight.f(), with_bias ? gbias.f() : nullptr, N, C, OC, f.stream());
    cuda::matmul_backward_input(gdinp.f(), gdout.f(), gweight.f(), N, C, OC, f.stream());
    cuda::matmul_backward_weight(gdweight.f(), with_bias ? gdbias.f() : nullptr, gdout.f(), ginp.f(), N, C, OC,
                                 f.stream());
    f.finish();
    expect_close("matmul_forward" + tag, gout, out, kGemm);
    expect_close("matmul_backward dinp" + tag, gdinp, dinp, kGemm);
    expect_close("matmul_backward dweight" + tag, gdweight, dweight, kGemm);
    if (with_bias) expect_close("matmul_backward dbias", gdbias, dbias, kReduction);
  }
  // A frozen weight whose bias trains (chapter 09's --freeze): no GEMM, the bias's column sums.
  Tensor inp = f.random({B, T, C}), dout = f.random({B, T, OC}), dbias = f.random({OC});
  Gpu ginp(inp), gdout(dout), gdbias(dbias);
  ops::matmul_backward(f.dev, f.s(), f.random({B, T, C}), Tensor{}, dbias, dout, inp, f.random({OC, C}));
  cuda::matmul_backward_weight(nullptr, gdbias.f(), gdout.f(), ginp.f(), N, C, OC, f.stream());
  f.finish();
  expect_close("matmul_backward dbias (weight frozen)", gdbias, dbias, kReduction);
}

// Mixed precision's GEMMs (cublasGemmEx on bf16, float32 accumulation) against the CPU's rule
// (model/f32_math.h: widen, compute in float32, round once). Only the summation order differs,
// so each bf16 result is the CPU's or a neighbour: within one bf16 step (2^-7, relative to the
// largest element) of it.
TEST_CASE("cuda: matmul in bf16 (cuBLAS's bf16 GEMM) against the CPU's rounding rule", "[cuda]") {
  Fixture f;
  const int64_t B = 2, T = 65, C = 97, OC = 131;
  const int64_t N = B * T;
  auto half = [&](Shape shape) {
    Tensor wide = f.random(shape), h = f.dev.empty(shape, DType::bf16, f.s(), "bf16");
    ops::copy_blocks(f.dev, f.s(), "cast", 1, {{wide, h, wide.numel(), wide.numel(), wide.numel()}});
    return h;
  };
  // A bf16 device buffer's values, widened, and the CPU's bf16 result as a float32 tensor.
  auto widened = [&](const Gpu& g, int64_t n) {
    std::vector<uint16_t> bits(static_cast<size_t>(n));
    CUDA_CHECK(cudaMemcpy(bits.data(), g.raw(), bits.size() * sizeof(uint16_t), cudaMemcpyDeviceToHost));
    std::vector<float> v(bits.size());
    for (size_t i = 0; i < v.size(); ++i) v[i] = from_bf16(bits[i]);
    return v;
  };
  auto check = [&](const char* what, const Gpu& g, const Tensor& cpu) {
    std::vector<float> want(static_cast<size_t>(cpu.numel()));
    for (size_t i = 0; i < want.size(); ++i) want[i] = from_bf16(cpu.bf16()[i]);
    const double rel = relative_error(widened(g, cpu.numel()), want.data(), want.size());
    std::printf("  %-44s relative error %9.2e  (tolerance %.0e)\n", what, rel, 0x1p-7);
    INFO(what << ": relative error " << rel);
    CHECK(rel <= 0x1p-7);
  };
  Tensor inp = half({B, T, C}), weight = half({OC, C}), bias = half({OC}), out = half({B, T, OC});
  Tensor dout = half({B, T, OC}), dinp = half({B, T, C}), dweight = half({OC, C});
  Gpu ginp(inp), gweight(weight), gbias(bias), gout(out), gdout(dout), gdinp(dinp), gdweight(dweight);
  ops::matmul_forward(f.dev, f.s(), out, inp, weight, bias);
  ops::matmul_backward(f.dev, f.s(), dinp, dweight, Tensor{}, dout, inp, weight);
  cuda::matmul_forward_bf16(gout.raw(), ginp.raw(), gweight.raw(), gbias.raw(), N, C, OC, f.stream());
  cuda::matmul_backward_input_bf16(gdinp.raw(), gdout.raw(), gweight.raw(), N, C, OC, f.stream());
  cuda::matmul_backward_weight_bf16(gdweight.raw(), gdout.raw(), ginp.raw(), N, C, OC, f.stream());
  f.finish();
  check("matmul_forward (bf16, bias)", gout, out);
  check("matmul_backward dinp (bf16)", gdinp, dinp);
  check("matmul_backward dweight (bf16)", gdweight, dweight);
}

TEST_CASE("cuda: cross-entropy forward and backward", "[cuda]") {
  // Rows of 5003 and of 1001 logits (odd: rows start off 16-byte alignment, each by a different
  // amount), 21 and 600 of them.
  for (const auto [B, T, V] : {std::array<int64_t, 3>{3, 7, 5003}, std::array<int64_t, 3>{4, 150, 1001}}) {
    Fixture f;
    std::printf("crossentropy, N %lld V %lld\n", static_cast<long long>(B * T), static_cast<long long>(V));
    Tensor logits = f.random({B, T, V}, 8.0f), targets = f.ids({B, T}, static_cast<int32_t>(V));
    Tensor losses = f.random({B, T}), dlogits = f.random({B, T, V});
    Gpu glogits(logits), gtargets(targets), glosses(losses), gdlogits(dlogits);
    const float dloss = 1.0f / static_cast<float>(B * T);
    ops::crossentropy_forward(f.dev, f.s(), losses, logits, targets);
    ops::crossentropy_backward(f.dev, f.s(), dlogits, logits, targets, dloss);
    cuda::crossentropy_forward(glosses.f(), glogits.f(), gtargets.i(), B * T, V, f.stream());
    cuda::crossentropy_backward(gdlogits.f(), glogits.f(), gtargets.i(), B * T, V, dloss, f.stream());
    f.finish();
    expect_close("crossentropy_forward", glosses, losses, kReduction);
    expect_close("crossentropy_backward (written)", gdlogits, dlogits, kReduction);
  }
}

// Chapter 10's pieces: a slice of the vocabulary (rows [begin, begin + V) of 3 V), whose ids
// outside add nothing; its cross-entropy statistics and gradient, with statistics given as the
// reductions over the other slices would leave them; a bias on its own.
TEST_CASE("cuda: a slice of the vocabulary (embedding, cross-entropy pieces) and a bias on its own", "[cuda]") {
  Fixture f;
  const int64_t B = 3, T = 37, N = B * T, C = 71, V = 1001, begin = 1001;
  std::printf("vocabulary slice, N %lld C %lld V %lld of %lld\n", static_cast<long long>(N), static_cast<long long>(C),
              static_cast<long long>(V), static_cast<long long>(3 * V));
  Tensor tokens = f.ids({B, T}, static_cast<int32_t>(3 * V));
  Tensor wte = f.random({V, C}), wpe = f.random({T, C}), out = f.random({B, T, C}), dout = f.random({B, T, C});
  Tensor dwte = f.random({V, C});
  Gpu gtok(tokens), gwte(wte), gwpe(wpe), gout(out), gdout(dout), gdwte(dwte);
  ops::embedding_forward(f.dev, f.s(), out, tokens, wte, Tensor{}, Tensor{}, begin);
  ops::embedding_backward(f.dev, f.s(), dwte, Tensor{}, dout, tokens, Tensor{}, begin);
  cuda::embedding_forward(gout.f(), gtok.i(), nullptr, gwte.f(), nullptr, B, T, C, V, T, begin, f.stream());
  cuda::embedding_backward(gdwte.f(), nullptr, gdout.f(), gtok.i(), nullptr, B, T, C, V, T, begin, f.stream());

  Tensor logits = f.random({B, T, V}, 8.0f), row_max = f.random({N}), sum_exp = f.random({N});
  Tensor target = f.random({N}), losses = f.random({N}), dlogits = f.random({B, T, V});
  Gpu glogits(logits), gmax(row_max), gsum(sum_exp), gtarget(target), glosses(losses), gdlogits(dlogits);
  ops::crossentropy_row_max(f.dev, f.s(), row_max, logits);
  ops::crossentropy_row_sums(f.dev, f.s(), sum_exp, target, logits, row_max, tokens, begin);
  ops::crossentropy_losses(f.dev, f.s(), losses, row_max, sum_exp, target);
  ops::crossentropy_backward_slice(f.dev, f.s(), dlogits, logits, tokens, 0.25f, row_max, sum_exp, begin);
  cuda::crossentropy_row_max(gmax.f(), glogits.f(), N, V, f.stream());
  cuda::crossentropy_row_sums(gsum.f(), gtarget.f(), glogits.f(), gmax.f(), gtok.i(), N, V, begin, f.stream());
  cuda::crossentropy_losses(glosses.f(), gmax.f(), gsum.f(), gtarget.f(), N, f.stream());
  cuda::crossentropy_backward_slice(gdlogits.f(), glogits.f(), gmax.f(), gsum.f(), gtok.i(), N, V, begin, 0.25f, f.stream());

  Tensor y = f.random({N, C}), bias = f.random({C}), dbias = f.random({C});
  Gpu gy(y), gbias(bias), gdbias(dbias);
  ops::bias_forward(f.dev, f.s(), y, bias);
  ops::bias_backward(f.dev, f.s(), dbias, dout.view(0, {N, C}));
  cuda::add_bias(gy.f(), gbias.f(), N, C, f.stream());
  cuda::matmul_backward_weight(nullptr, gdbias.f(), gdout.f(), nullptr, N, 0, C, f.stream());
  f.finish();
  expect_close("embedding_forward (a slice)", gout, out, kElementwise);
  expect_close("embedding_backward dwte (a slice)", gdwte, dwte, kElementwise);
  expect_close("crossentropy_row_max", gmax, row_max, kElementwise);
  expect_close("crossentropy_row_sums sum_exp", gsum, sum_exp, kReduction);
  expect_close("crossentropy_row_sums target_logit", gtarget, target, kElementwise);
  expect_close("crossentropy_losses", glosses, losses, kReduction);
  expect_close("crossentropy_backward_slice", gdlogits, dlogits, kReduction);
  expect_close("bias_forward", gy, y, kElementwise);
  expect_close("bias_backward", gdbias, dbias, kReduction);
}

TEST_CASE("cuda: AdamW", "[cuda]") {
  Fixture f;
  const int64_t n = 10'007;
  const ops::AdamW hp{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f};
  std::printf("adamw, n %lld, three steps\n", static_cast<long long>(n));
  Tensor params = f.random({n}), grads = f.random({n}), m = f.random({n}, 0.1f), v = f.random({n}, 0.1f);
  for (int64_t i = 0; i < n; ++i) v.f32()[i] = std::abs(v.f32()[i]);  // a second moment is >= 0
  Gpu gparams(params), ggrads(grads), gm(m), gv(v);
  for (int64_t t = 1; t <= 3; ++t) {
    ops::adamw(f.dev, f.s(), params, grads, m, v, t, hp);
    cuda::adamw(gparams.f(), ggrads.f(), gm.f(), gv.f(), n, t, hp.lr, hp.beta1, hp.beta2, hp.eps, hp.weight_decay,
                f.stream());
  }
  f.finish();
  expect_close("adamw params", gparams, params, kElementwise);
  expect_close("adamw m", gm, m, kElementwise);
  expect_close("adamw v", gv, v, kElementwise);
}

TEST_CASE("cuda: attention forward and backward", "[cuda]") {
  struct Case {
    int64_t B, NH, Tq, Tk, hs;
    AttentionMask mask;
  };
  // Odd lengths (tiles and row blocks end mid-way), head sizes below, at and between warp
  // multiples, the largest supported (128), and a longer causal sequence of GPT-2's head size.
  const Case cases[] = {
      {2, 3, 77, 77, 16, AttentionMask::causal}, {2, 3, 45, 70, 16, AttentionMask::none},
      {1, 2, 33, 33, 100, AttentionMask::causal}, {1, 2, 40, 9, 128, AttentionMask::none},
      {1, 2, 300, 300, 64, AttentionMask::causal}, {2, 1, 1, 1, 8, AttentionMask::causal},
  };
  for (const Case& c : cases) {
    Fixture f;
    const bool causal = c.mask == AttentionMask::causal;
    char label[128];
    std::snprintf(label, sizeof label, "B %lld NH %lld Tq %lld Tk %lld hs %lld %s", static_cast<long long>(c.B),
                  static_cast<long long>(c.NH), static_cast<long long>(c.Tq), static_cast<long long>(c.Tk),
                  static_cast<long long>(c.hs), causal ? "causal" : "none");
    std::printf("attention, %s\n", label);
    const Shape qs{c.B, c.NH, c.Tq, c.hs}, ks{c.B, c.NH, c.Tk, c.hs};
    Tensor q = f.random(qs, 2.0f), k = f.random(ks, 2.0f), v = f.random(ks), out = f.random(qs);
    Tensor lse = f.random({c.B, c.NH, c.Tq});
    Tensor dout = f.random(qs), dq = f.random(qs), dk = f.random(ks), dv = f.random(ks);
    Gpu gq(q), gk(k), gv(v), gout(out), glse(lse), gdout(dout), gdq(dq), gdk(dk), gdv(dv);
    ops::attention_forward(f.dev, f.s(), out, lse, q, k, v, c.mask);
    cuda::attention_forward(gout.f(), glse.f(), gq.f(), gk.f(), gv.f(), c.B, c.NH, {0, c.Tq, c.Tq}, {0, c.Tk, c.Tk},
                            c.hs, causal, f.stream());
    f.finish();
    expect_close("attention_forward out", gout, out, kReduction);
    expect_close("attention_forward lse", glse, lse, kReduction);
    // Backward from the CPU's out and lse on both sides, so only the backward is compared.
    Gpu gout_cpu(out), glse_cpu(lse);
    ops::attention_backward(f.dev, f.s(), dq, dk, dv, dout, q, k, v, out, lse, c.mask);
    cuda::attention_backward(gdq.f(), gdk.f(), gdv.f(), gdout.f(), gq.f(), gk.f(), gv.f(), gout_cpu.f(), glse_cpu.f(),
                             c.B, c.NH, {0, c.Tq, c.Tq}, {0, c.Tk, c.Tk}, c.hs, causal, f.stream());
    f.finish();
    expect_close("attention_backward dq", gdq, dq, kGemm);
    expect_close("attention_backward dk", gdk, dk, kGemm);
    expect_close("attention_backward dv", gdv, dv, kGemm);
  }
}

TEST_CASE("cuda: attention with no visible key gives lse -inf and output 0", "[cuda]") {
  Fixture f;
  const int64_t B = 1, NH = 2, Tq = 5, hs = 16;
  Tensor q = f.random({B, NH, Tq, hs}), out = f.random({B, NH, Tq, hs}), lse = f.random({B, NH, Tq});
  Gpu gq(q), gout(out), glse(lse);
  // No keys: k and v are empty, and never read.
  cuda::attention_forward(gout.f(), glse.f(), gq.f(), nullptr, nullptr, B, NH, {0, Tq, Tq}, {0, 0, 0}, hs, false,
                          f.stream());
  f.finish();
  for (float x : glse.values()) CHECK(x == -INFINITY);
  for (float x : gout.values()) CHECK(x == 0.0f);
  std::printf("attention, Tk = 0: lse -inf and output 0 on every row\n");
}

TEST_CASE("cuda: attention merge", "[cuda]") {
  Fixture f;
  const int64_t B = 2, NH = 3, T = 41, hs = 48;
  std::printf("attention_merge, B %lld NH %lld T %lld hs %lld, some lses -inf\n", static_cast<long long>(B),
              static_cast<long long>(NH), static_cast<long long>(T), static_cast<long long>(hs));
  Tensor out = f.random({B, NH, T, hs}), out_b = f.random({B, NH, T, hs});
  Tensor lse = f.random({B, NH, T}, 20.0f), lse_b = f.random({B, NH, T}, 20.0f);
  for (int64_t r = 0; r < lse.numel(); r += 7) lse.f32()[r] = -INFINITY;      // ours saw no keys
  for (int64_t r = 3; r < lse.numel(); r += 11) lse_b.f32()[r] = -INFINITY;   // theirs saw none
  Gpu gout(out), gout_b(out_b), glse(lse), glse_b(lse_b);
  ops::attention_merge(f.dev, f.s(), out, lse, out_b, lse_b);
  cuda::attention_merge(gout.f(), glse.f(), gout_b.f(), glse_b.f(), B * NH, {0, T, T}, hs, f.stream());
  f.finish();
  expect_close("attention_merge out", gout, out, kElementwise);
  expect_close("attention_merge lse", glse, lse, kElementwise);
}

// Ring attention's blocks (chapter 08): rows of q against rows of k and v, and a merge on rows,
// each head's block starting mid-tensor; rows outside the blocks must stay as they were.
TEST_CASE("cuda: attention on row blocks", "[cuda]") {
  struct Case {
    int64_t Tq, Tk;
    ops::Rows q_rows, kv_rows;
    AttentionMask mask;
  };
  const Case cases[] = {
      {40, 40, {0, 40}, {0, 20}, AttentionMask::none},    // every query, the first half of the keys
      {40, 40, {20, 20}, {0, 40}, AttentionMask::none},   // the second half of the queries, every key
      {33, 21, {5, 7}, {11, 7}, AttentionMask::causal},   // a causal block inside both
      {16, 16, {3, 1}, {9, 1}, AttentionMask::none},      // one row each
  };
  for (const Case& c : cases) {
    Fixture f;
    const int64_t B = 2, NH = 3, hs = 24;
    const bool causal = c.mask == AttentionMask::causal;
    std::printf("attention on rows [%lld, +%lld) of %lld against [%lld, +%lld) of %lld, %s\n",
                static_cast<long long>(c.q_rows.begin), static_cast<long long>(c.q_rows.count),
                static_cast<long long>(c.Tq), static_cast<long long>(c.kv_rows.begin),
                static_cast<long long>(c.kv_rows.count), static_cast<long long>(c.Tk), causal ? "causal" : "none");
    const Shape qs{B, NH, c.Tq, hs}, ks{B, NH, c.Tk, hs};
    Tensor q = f.random(qs, 2.0f), k = f.random(ks, 2.0f), v = f.random(ks), out = f.random(qs);
    Tensor lse = f.random({B, NH, c.Tq}), out_b = f.random(qs), lse_b = f.random({B, NH, c.Tq}, 5.0f);
    Tensor dout = f.random(qs), dq = f.random(qs), dk = f.random(ks), dv = f.random(ks);
    Gpu gq(q), gk(k), gv(v), gout(out), glse(lse), gout_b(out_b), glse_b(lse_b), gdout(dout), gdq(dq), gdk(dk), gdv(dv);
    const cuda::AttnRows qr{c.q_rows.begin, c.q_rows.count, c.Tq}, kr{c.kv_rows.begin, c.kv_rows.count, c.Tk};
    ops::attention_forward(f.dev, f.s(), out, lse, q, k, v, c.mask, c.q_rows, c.kv_rows);
    cuda::attention_forward(gout.f(), glse.f(), gq.f(), gk.f(), gv.f(), B, NH, qr, kr, hs, causal, f.stream());
    ops::attention_backward(f.dev, f.s(), dq, dk, dv, dout, q, k, v, out, lse, c.mask, c.q_rows, c.kv_rows);
    // The CPU's forward result, kept (the merge below changes out and lse), and on the GPU as the
    // input of its backward and merge, so each GPU op is compared on the CPU's inputs.
    Tensor out_forward = f.random(qs), lse_forward = f.random({B, NH, c.Tq});
    ops::copy(f.dev, f.s(), out_forward, out);
    ops::copy(f.dev, f.s(), lse_forward, lse);
    Gpu gout_cpu(out), glse_cpu(lse);
    cuda::attention_backward(gdq.f(), gdk.f(), gdv.f(), gdout.f(), gq.f(), gk.f(), gv.f(), gout_cpu.f(), glse_cpu.f(),
                             B, NH, qr, kr, hs, causal, f.stream());
    ops::attention_merge(f.dev, f.s(), out, lse, out_b, lse_b, c.q_rows);
    cuda::attention_merge(gout_cpu.f(), glse_cpu.f(), gout_b.f(), glse_b.f(), B * NH, qr, hs, f.stream());
    f.finish();
    expect_close("attention_forward out", gout, out_forward, kReduction);
    expect_close("attention_forward lse", glse, lse_forward, kReduction);
    expect_close("attention_backward dq", gdq, dq, kGemm);
    expect_close("attention_backward dk", gdk, dk, kGemm);
    expect_close("attention_backward dv", gdv, dv, kGemm);
    expect_close("attention_merge out", gout_cpu, out, kElementwise);
    expect_close("attention_merge lse", glse_cpu, lse, kElementwise);
  }
}

TEST_CASE("cuda: qkv split and heads merge, with their adjoints", "[cuda]") {
  Fixture f;
  const int64_t B = 2, T = 29, NH = 3, hs = 24, C = NH * hs;
  std::printf("layouts, B %lld T %lld NH %lld hs %lld\n", static_cast<long long>(B), static_cast<long long>(T),
              static_cast<long long>(NH), static_cast<long long>(hs));
  const Shape heads{B, NH, T, hs};
  Tensor qkv = f.random({B, T, 3 * C}), q = f.random(heads), k = f.random(heads), v = f.random(heads);
  Tensor dqkv = f.random({B, T, 3 * C}), dq = f.random(heads), dk = f.random(heads), dv = f.random(heads);
  Tensor merged = f.random({B, T, C}), dmerged = f.random({B, T, C}), d_o = f.random(heads);
  Gpu gqkv(qkv), gq(q), gk(k), gv(v), gdqkv(dqkv), gdq(dq), gdk(dk), gdv(dv);
  Gpu gmerged(merged), gdmerged(dmerged), gd_o(d_o);
  const int nh = static_cast<int>(NH);
  ops::qkv_split(f.dev, f.s(), q, k, v, qkv, nh);
  ops::qkv_split_backward(f.dev, f.s(), dqkv, dq, dk, dv, nh);
  ops::heads_merge(f.dev, f.s(), merged, q);
  ops::heads_merge_backward(f.dev, f.s(), d_o, dmerged);
  cuda::qkv_split(gq.f(), gk.f(), gv.f(), gqkv.f(), B, T, NH, hs, f.stream());
  cuda::qkv_split_backward(gdqkv.f(), gdq.f(), gdk.f(), gdv.f(), B, T, NH, hs, f.stream());
  cuda::heads_merge(gmerged.f(), gq.f(), B, NH, T, hs, f.stream());
  cuda::heads_merge_backward(gd_o.f(), gdmerged.f(), B, NH, T, hs, f.stream());
  f.finish();
  expect_close("qkv_split q", gq, q, 0);
  expect_close("qkv_split k", gk, k, 0);
  expect_close("qkv_split v", gv, v, 0);
  expect_close("qkv_split_backward (accumulated)", gdqkv, dqkv, kElementwise);
  expect_close("heads_merge", gmerged, merged, 0);
  expect_close("heads_merge_backward (accumulated)", gd_o, d_o, kElementwise);
}

TEST_CASE("cuda: chapter 00's polynomial", "[cuda]") {
  Fixture f;
  const int64_t n = 4099;
  for (const int64_t degree : {int64_t{1}, int64_t{255}, int64_t{3000}}) {
    Tensor x = f.random({n}), y = f.random({n});
    Gpu gx(x), gy(y);
    ch00::polynomial(f.dev, f.s(), x, y, degree);
    ch00::polynomial_cuda(gx.f(), gy.f(), n, degree, f.stream());
    f.finish();
    // Bit for bit, as chapter 00 checks it: the kernel rounds every step as the CPU does.
    expect_close("polynomial, degree " + std::to_string(degree), gy, y, 0);
  }
}

// The CUDA device itself: synchronizing one stream reads the trace events of every stream, and
// an event query can answer "not ready". The runtime can keep that answer as the thread's
// last error; it must not come back as a failed launch at the next op. The side stream is
// busy for 200 ms of wall time (cuda_spin.cu), so the test ends as soon under racecheck.
TEST_CASE("cuda device: a launch after another stream's unfinished work", "[cuda]") {
  CudaDevice dev(load_profile("h100-8"), 0, 1, 0, 0);
  Stream& compute = dev.compute_stream();
  Stream& side = dev.create_stream("side");
  Tensor t = dev.empty({16}, DType::f32, compute, "t");
  dev.launch(side, Kernel{"spin 200 ms", 0, 0, DType::f32, KernelClass::elementwise, {}}, [] {},
             [](void* stream) { cuda_spin(200'000'000, stream); });
  const Event busy = dev.record(side);
  ops::fill(dev, compute, t, 1.0f);
  dev.synchronize(compute);  // queries the unfinished slices of `side`
  const bool done_early = dev.query(busy);
  ops::fill(dev, compute, t, 2.0f);
  std::vector<float> got(16);
  copy_to_host(dev, compute, got.data(), t);
  dev.synchronize();
  std::printf("cuda device: side stream %s at the query; the next launch ran\n",
              done_early ? "already done (path not exercised)" : "still busy");
  CHECK(dev.query(busy));
  CHECK(got[0] == 2.0f);
  dev.free(t);
}

int main(int argc, char** argv) {
  if (skipped_without_gpu()) return kSkippedExitCode;
  return run_catch_session(argc, argv);
}
