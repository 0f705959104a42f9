// Chapter 04's FlatParameter geometry and gradient factors against PyTorch FSDP1's
// (PyTorch torch/distributed/fsdp/_flat_param.py: FlatParamHandle._get_shard and _get_unpadded_shard;
// torch/distributed/fsdp/_init_utils.py: _init_process_group_state, whose factors come from
// torch/distributed/algorithms/_comm_hooks/default_hooks.py: DefaultState._get_gradient_predivide_factor).
#include <catch2/catch.hpp>

#include "04_fsdp/flat_param.h"

using ch04::ShardLayout;

namespace {
std::vector<int64_t> paddings(int64_t n, int w) {
  std::vector<int64_t> p;
  for (int r = 0; r < w; ++r) p.push_back(ShardLayout{n, w}.padding(r));
  return p;
}
}  // namespace

TEST_CASE("ch04: flat param: padding lands on the trailing ranks, as FSDP1's _get_shard", "[fsdp]") {
  CHECK(paddings(10, 4) == std::vector<int64_t>{0, 0, 0, 2});
  CHECK(paddings(5, 4) == std::vector<int64_t>{0, 0, 1, 2});
  CHECK(paddings(6, 4) == std::vector<int64_t>{0, 0, 0, 2});
  CHECK(paddings(1, 4) == std::vector<int64_t>{0, 1, 1, 1});
  CHECK(paddings(3, 8) == std::vector<int64_t>{0, 0, 0, 1, 1, 1, 1, 1});
  CHECK(paddings(13, 8) == std::vector<int64_t>{0, 0, 0, 0, 0, 0, 1, 2});
  for (int64_t n : {1, 5, 10, 13, 1000}) {
    for (int w : {1, 2, 3, 4, 7, 8}) {
      const ShardLayout s{n, w};
      int64_t valid = 0;
      for (int r = 0; r < w; ++r) valid += s.valid(r);
      CHECK(valid == n);
      CHECK(s.padded() == s.shard() * w);
      CHECK(s.padded() - n < w);
    }
  }
}

TEST_CASE("ch04: flat param: a gpt2-small block flattens to 7,087,872 elements", "[fsdp]") {
  int64_t n = 0;
  for (const auto& p : shardlab::gpt_params(shardlab::GPTConfig::preset("gpt2-small")))
    if (p.unit == 1) n += p.shape.numel();
  CHECK(n == 7087872);
  const ShardLayout s{n, 8};
  CHECK(s.shard() == 885984);
  CHECK(s.padding(7) == 0);
  const ShardLayout s3{n, 3};
  CHECK(s3.shard() == 2362624);
  CHECK(s3.padding(2) == 0);
}

// Under HSDP the factors are those of N = S x R, every rank averaging (chapter 07): 2 x 8 -> (4, 4),
// 4 x 8 -> (8, 4).
TEST_CASE("ch04: flat param: gradient pre- and post-divide factors", "[fsdp]") {
  const std::vector<std::pair<int, std::pair<double, double>>> cases = {
      {1, {1, 1}}, {2, {2, 1}},  {3, {2, 1.5}}, {4, {2, 2}},   {8, {4, 2}},
      {16, {4, 4}}, {32, {8, 4}}, {64, {8, 8}}, {128, {16, 8}}};
  for (const auto& [dp, expected] : cases) {
    const auto f = ch04::gradient_factors(dp);
    INFO("dp " << dp);
    CHECK(f.pre == expected.first);
    CHECK(f.post == expected.second);
    CHECK(f.pre * f.post == Approx(dp));
  }
}
