// bench_cuda_ops: every op of a GPT-2-small training step on the real GPU, next to what the
// sim predicts for it. The same op call runs twice: on the CUDA device (timed with events over
// repetitions) and on a sim device with --compute skip (its cost model's duration, from the
// same events). Where the two disagree, either the kernel or the profile's constants are off:
// the ratio says which ops to look at. A benchmark, not a test.
//
//   cmake --build --preset default --target bench_cuda_ops
//   build/tests/bench_cuda_ops [--profile h100-8] [--batch 8] [--seq-len 1024]
// Without a visible GPU it prints why and exits 77.
#include <cstdio>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "model/attention.h"
#include "cuda/cuda_device.h"
#include "cuda/cuda_probe.h"
#include "run/flags.h"
#include "model/ops.h"
#include "device/sim_device.h"

using namespace shardlab;

namespace {

// One op at fixed shapes, written once against Device so both devices run the same call.
struct OpCase {
  std::string name;
  std::function<void(Device&, Stream&, const std::vector<Tensor>&)> run;
  std::vector<Shape> shapes;  // the tensors it needs, in the order `run` reads them
  std::vector<DType> dtypes = {};  // f32 unless said
};

// Microseconds per call of op on dev: a warm-up call, then `reps` calls between two events.
double time_op(Device& dev, const OpCase& op, int reps) {
  Stream& s = dev.compute_stream();
  std::vector<Tensor> ts;
  for (size_t i = 0; i < op.shapes.size(); ++i) {
    const DType dt = i < op.dtypes.size() ? op.dtypes[i] : DType::f32;
    ts.push_back(dev.empty(op.shapes[i], dt, s, op.name));
    // Token ids must be valid indices; every float starts at a small value.
    if (dt == DType::i32) {
      std::vector<int32_t> zeros(static_cast<size_t>(ts.back().numel()), 0);
      copy_to_device(dev, s, ts.back(), zeros.data());
    } else {
      ops::fill(dev, s, ts.back(), 0.01f);
    }
  }
  op.run(dev, s, ts);
  const Event start = dev.record(s);
  for (int i = 0; i < reps; ++i) op.run(dev, s, ts);
  const Event end = dev.record(s);
  dev.synchronize(end);
  const double us = dev.elapsed_us(start, end) / reps;
  for (Tensor& t : ts) dev.free(t);
  return us;
}

// Causal attention of one head group at a long sequence (B 1, NH 12, hs 64): its time, and the
// device memory the call needs. The kernels keep no T x T matrix, so the peak allocated is its
// tensors' (O(T)), while a stored score matrix alone would take T^2 x 4 bytes per head.
void long_attention(CudaDevice& gpu, int64_t T) {
  const int64_t B = 1, NH = 12, hs = 64;
  Stream& s = gpu.compute_stream();
  const Shape x{B, NH, T, hs}, row{B, NH, T};
  std::vector<Tensor> ts;
  for (const Shape& shape : {x, row, x, x, x, x, x, x, x}) {  // out, lse, q, k, v, dout, dq, dk, dv
    ts.push_back(gpu.empty(shape, DType::f32, s, "long attention"));
    ops::fill(gpu, s, ts.back(), 0.01f);
  }
  gpu.synchronize();
  const size_t tensors = gpu.allocator().allocated();
  gpu.allocator().reset_peaks();
  const Event e0 = gpu.record(s);
  ops::attention_forward(gpu, s, ts[0], ts[1], ts[2], ts[3], ts[4], ops::AttentionMask::causal);
  const Event e1 = gpu.record(s);
  ops::attention_backward(gpu, s, ts[6], ts[7], ts[8], ts[5], ts[2], ts[3], ts[4], ts[0], ts[1],
                          ops::AttentionMask::causal);
  const Event e2 = gpu.record(s);
  gpu.synchronize();
  const double scores_mb = static_cast<double>(B * NH * T * T) * 4 / 1e6;
  std::printf("\nattention at T = %lld (B 1, NH 12, hs 64, causal): forward %.3f ms, backward %.3f ms; peak allocated "
              "%.1f MB, all of it the tensors' %.1f MB (a stored T x T score matrix would be %.0f MB)\n",
              static_cast<long long>(T), gpu.elapsed_us(e0, e1) / 1e3, gpu.elapsed_us(e1, e2) / 1e3,
              static_cast<double>(gpu.allocator().peak_allocated()) / 1e6, static_cast<double>(tensors) / 1e6,
              scores_mb);
  for (Tensor& t : ts) gpu.free(t);
}

}  // namespace

int main(int argc, char** argv) {
  std::string profile_name = "h100-8";
  int64_t B = 8, T = 1024, reps = 20, long_T = 8192;
  Flags flags("bench_cuda_ops");
  flags.add_string("profile", &profile_name, "the sim profile to compare against");
  flags.add_int("batch", &B, 1, 1024, "sequences");
  flags.add_int("seq-len", &T, 1, 1024, "tokens per sequence");
  flags.add_int("reps", &reps, 1, 10000, "timed calls per op");
  flags.add_int("long-seq-len", &long_T, 1, 1 << 20, "the sequence length of the long attention run");
  try {
    if (!flags.parse(argc, argv)) {
      std::cout << flags.usage();
      return 0;
    }
  } catch (const FlagError& e) {
    std::cerr << "bench_cuda_ops: error: " << e.what() << "\n";
    return 2;
  }
  if (skipped_without_gpu()) return kSkippedExitCode;

  const int64_t C = 768, NH = 12, V = 50257, N = B * T, hs = C / NH;
  const Tensor none;
  const std::vector<OpCase> cases = {
      {"matmul_forward qkv", [&](Device& d, Stream& s, const auto& t) { ops::matmul_forward(d, s, t[0], t[1], t[2], t[3]); },
       {{N, 3 * C}, {N, C}, {3 * C, C}, {3 * C}}},
      {"matmul_backward qkv", [&](Device& d, Stream& s, const auto& t) { ops::matmul_backward(d, s, t[0], t[1], t[2], t[3], t[4], t[5]); },
       {{N, C}, {3 * C, C}, {3 * C}, {N, 3 * C}, {N, C}, {3 * C, C}}},
      {"matmul_forward fc", [&](Device& d, Stream& s, const auto& t) { ops::matmul_forward(d, s, t[0], t[1], t[2], t[3]); },
       {{N, 4 * C}, {N, C}, {4 * C, C}, {4 * C}}},
      {"matmul_forward lm head", [&](Device& d, Stream& s, const auto& t) { ops::matmul_forward(d, s, t[0], t[1], t[2], none); },
       {{N, V}, {N, C}, {V, C}}},
      {"matmul_backward lm head", [&](Device& d, Stream& s, const auto& t) { ops::matmul_backward(d, s, t[0], t[1], none, t[2], t[3], t[4]); },
       {{N, C}, {V, C}, {N, V}, {N, C}, {V, C}}},
      {"layernorm_forward", [&](Device& d, Stream& s, const auto& t) { ops::layernorm_forward(d, s, t[0], t[1], t[2], t[3], t[4], t[5]); },
       {{N, C}, {N}, {N}, {N, C}, {C}, {C}}},
      {"layernorm_backward", [&](Device& d, Stream& s, const auto& t) { ops::layernorm_backward(d, s, t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7]); },
       {{N, C}, {C}, {C}, {N, C}, {N, C}, {C}, {N}, {N}}},
      {"gelu_forward", [&](Device& d, Stream& s, const auto& t) { ops::gelu_forward(d, s, t[0], t[1]); }, {{N, 4 * C}, {N, 4 * C}}},
      {"gelu_backward", [&](Device& d, Stream& s, const auto& t) { ops::gelu_backward(d, s, t[0], t[1], t[2]); },
       {{N, 4 * C}, {N, 4 * C}, {N, 4 * C}}},
      {"attention_forward", [&](Device& d, Stream& s, const auto& t) { ops::attention_forward(d, s, t[0], t[1], t[2], t[3], t[4], ops::AttentionMask::causal); },
       {{B, NH, T, hs}, {B, NH, T}, {B, NH, T, hs}, {B, NH, T, hs}, {B, NH, T, hs}}},
      {"attention_backward", [&](Device& d, Stream& s, const auto& t) { ops::attention_backward(d, s, t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8], ops::AttentionMask::causal); },
       {{B, NH, T, hs}, {B, NH, T, hs}, {B, NH, T, hs}, {B, NH, T, hs}, {B, NH, T, hs}, {B, NH, T, hs}, {B, NH, T, hs}, {B, NH, T, hs}, {B, NH, T}}},
      {"crossentropy_forward", [&](Device& d, Stream& s, const auto& t) { ops::crossentropy_forward(d, s, t[0], t[1], t[2]); },
       {{B, T}, {B, T, V}, {B, T}}, {DType::f32, DType::f32, DType::i32}},
      {"crossentropy_backward", [&](Device& d, Stream& s, const auto& t) { ops::crossentropy_backward(d, s, t[0], t[1], t[2], 1.0f / static_cast<float>(N)); },
       {{B, T, V}, {B, T, V}, {B, T}}, {DType::f32, DType::f32, DType::i32}},
      {"embedding_forward", [&](Device& d, Stream& s, const auto& t) { ops::embedding_forward(d, s, t[0], t[1], t[2], t[3]); },
       {{B, T, C}, {B, T}, {V, C}, {1024, C}}, {DType::f32, DType::i32}},
      {"residual_forward", [&](Device& d, Stream& s, const auto& t) { ops::residual_forward(d, s, t[0], t[1], t[2]); },
       {{N, C}, {N, C}, {N, C}}},
      {"adamw (124M parameters)", [&](Device& d, Stream& s, const auto& t) { ops::adamw(d, s, t[0], t[1], t[2], t[3], 1, ops::AdamW{}); },
       {{124439808}, {124439808}, {124439808}, {124439808}}},
  };

  try {
    const Profile profile = load_profile(profile_name);
    SimDevice sim(profile, ComputeMode::skip, 0, 1);
    CudaDevice gpu(profile, 0, 1, 0, 0);
    std::printf("GPU: %s; sim profile %s (%s); B=%lld T=%lld (GPT-2 small shapes)\n\n", gpu.profile().gpu_name.c_str(),
                profile.name.c_str(), profile.gpu_name.c_str(), static_cast<long long>(B), static_cast<long long>(T));
    std::printf("%-28s %12s %12s %8s\n", "op", "GPU us", "sim us", "GPU/sim");
    for (const OpCase& op : cases) {
      const double measured = time_op(gpu, op, static_cast<int>(reps));
      const double predicted = time_op(sim, op, static_cast<int>(reps));
      std::printf("%-28s %12.1f %12.1f %8.2f\n", op.name.c_str(), measured, predicted, measured / predicted);
    }
    long_attention(gpu, long_T);
  } catch (const std::exception& e) {
    std::cerr << "bench_cuda_ops: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
