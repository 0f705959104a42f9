// Chapter 03's bucket assignment (chapters/03_bucketed_ddp/bucket.h) against DDP's rules:
// reverse parameter order, the first bucket capped at 1 MiB, a bucket closing once its size
// reaches the cap (with the tensor that crossed it).
#include <catch2/catch.hpp>

#include "03_bucketed_ddp/bucket.h"

using ch03::assign_buckets;

namespace {
constexpr int64_t MiB = 1 << 20;
}

TEST_CASE("ch03: buckets: reverse order, and a bucket closes with the tensor that crosses its cap", "[buckets]") {
  // Parameters 0..5 of 0.5, 0.5, 0.5, 0.75, 0.25, 0.5 MiB; first cap 1 MiB, then 1 MiB.
  const std::vector<int64_t> bytes = {MiB / 2, MiB / 2, MiB / 2, 3 * MiB / 4, MiB / 4, MiB / 2};
  const auto b = assign_buckets(bytes, MiB, MiB);
  // From the back: 5 (0.5) + 4 (0.25) + 3 (0.75) = 1.5 >= 1: closes with 3.
  // Then 2 (0.5) + 1 (0.5) = 1.0 >= 1: closes with 1 (reaching the cap exactly closes it).
  // Then 0 alone.
  CHECK(b == std::vector<std::vector<int>>{{5, 4, 3}, {2, 1}, {0}});
}

TEST_CASE("ch03: buckets: the first bucket has its own, smaller cap", "[buckets]") {
  const std::vector<int64_t> bytes(10, MiB / 2);  // ten 0.5 MiB tensors
  const auto b = assign_buckets(bytes, MiB, 2 * MiB);
  REQUIRE(b.size() == 3);
  CHECK(b[0] == std::vector<int>{9, 8});        // 1 MiB: the first cap
  CHECK(b[1] == std::vector<int>{7, 6, 5, 4});  // 2 MiB
  CHECK(b[2] == std::vector<int>{3, 2, 1, 0});
}

TEST_CASE("ch03: buckets: every parameter exactly once, a bucket closes with the tensor that fills it however large", "[buckets]") {
  const std::vector<int64_t> bytes = {100 * MiB, 4, 4, 30 * MiB, 4};
  const auto b = assign_buckets(bytes, MiB, 25 * MiB);
  CHECK(b == std::vector<std::vector<int>>{{4, 3}, {2, 1, 0}});
  CHECK(assign_buckets({4}, MiB, MiB) == std::vector<std::vector<int>>{{0}});
}

TEST_CASE("ch03: buckets: gpt2-small at 25 MiB: the first bucket ends with the last block's MLP projection", "[buckets]") {
  std::vector<int64_t> bytes;
  const auto params = shardlab::gpt_params(shardlab::GPTConfig::preset("gpt2-small"));
  for (const auto& p : params) bytes.push_back(p.shape.numel() * 4);
  const auto b = assign_buckets(bytes, MiB, 25 * MiB);
  REQUIRE(b.size() > 2);
  std::vector<std::string> first;
  for (int i : b[0]) first.push_back(params[static_cast<size_t>(i)].name);
  CHECK(first == std::vector<std::string>{"ln_f.bias", "ln_f.weight", "h.11.mlp.c_proj.bias", "h.11.mlp.c_proj.weight"});
  // Every bucket but the last reaches the cap; none holds more than the cap plus one tensor.
  for (size_t k = 1; k + 1 < b.size(); ++k) {
    int64_t total = 0, largest = 0;
    for (int i : b[k]) total += bytes[static_cast<size_t>(i)], largest = std::max(largest, bytes[static_cast<size_t>(i)]);
    CHECK(total >= 25 * MiB);
    CHECK(total - largest < 25 * MiB);
  }
  CHECK(b.back().back() == 0);  // wte, whose gradient is final only after the embeddings' backward
}
