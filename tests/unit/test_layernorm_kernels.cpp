// The CUDA layernorm backward (common/cuda/layernorm_kernels.cuh) runs on the CPU under the
// emulator (cuda_emulator.h) against the CPU op of ops.h: rows that do not fill the last block,
// blocks that walk several rows, channels that do not fill a warp's last pass, one row, one
// channel. tests/gpu/cuda_test_ops.cpp checks the same kernel on a GPU.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "device/sim_device.h"
#include "model/ops.h"

// Last: the emulator defines CUDA's keywords as macros.
#include "cuda_emulator.h"
inline float* dynamic_shared_floats() { return emulated_shared(); }
#include "cuda/layernorm_kernels.cuh"

using namespace shardlab;

namespace {

std::vector<float> values(const Tensor& t) { return {t.f32(), t.f32() + t.numel()}; }

double relative_error(const std::vector<float>& got, const Tensor& want) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    scale = std::max(scale, std::abs(static_cast<double>(want.f32()[i])));
    diff = std::max(diff, std::abs(static_cast<double>(got[i]) - want.f32()[i]));
  }
  return scale > 0 ? diff / scale : diff;
}

// rows x channels, the kernel launched on `blocks` blocks of `warps` warps.
void check(int64_t N, int C, int blocks, int warps) {
  INFO("N " << N << " C " << C << ", " << blocks << " blocks of " << warps << " warps");
  SimDevice dev{load_profile("h100-8"), ComputeMode::real, 0, 1};
  Stream& s = dev.compute_stream();
  std::mt19937 rng(77);
  const auto random = [&](Shape shape) {
    Tensor t = dev.empty(shape, DType::f32, s, "t");
    std::uniform_real_distribution<float> u(-1, 1);
    for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = u(rng);
    return t;
  };
  Tensor inp = random({N, C}), weight = random({C}), bias = random({C}), out = random({N, C});
  Tensor mean = random({N}), rstd = random({N});
  ops::layernorm_forward(dev, s, out, mean, rstd, inp, weight, bias);
  Tensor dout = random({N, C}), dinp = random({N, C}), dweight = random({C}), dbias = random({C});
  std::vector<float> edinp = values(dinp), edweight = values(dweight), edbias = values(dbias);

  ops::layernorm_backward(dev, s, dinp, dweight, dbias, dout, inp, weight, mean, rstd);
  cuda_emulator::launch(static_cast<unsigned>(blocks), static_cast<unsigned>(warps * 32),
                        sizeof(float) * static_cast<size_t>(layernorm::backward_shared_floats(C)),
                        layernorm::backward_kernel, edinp.data(), edweight.data(), edbias.data(), dout.f32(),
                        inp.f32(), weight.f32(), mean.f32(), rstd.f32(), static_cast<long long>(N), C, blocks);
  CHECK(relative_error(edinp, dinp) <= 1e-5);
  CHECK(relative_error(edweight, dweight) <= 1e-5);
  CHECK(relative_error(edbias, dbias) <= 1e-5);
}

}  // namespace

TEST_CASE("layernorm backward kernel (emulated) equals the CPU op", "[layernorm][cuda-emulated]") {
  check(67, 771, 3, 8);  // 24 warps for 67 rows: each walks two or three; 771 = 24 warp passes + 3
  check(67, 771, 9, 8);  // more warps than rows: some take none
  check(1, 1, 1, 1);
  check(5, 32, 2, 2);
  check(40, 100, 1, 4);  // one block: no other block adds to the result
}
