// Chapter 04's peak-memory formula (memory.h), which the chapter's runs compare their measured
// peak against, checked here against bytes worked out by hand from its documented terms on
// `tiny`, and for the properties any sharding formula must have: more ranks never more state per
// rank, 1/W of world 1's up to padding and the allocator's 512-byte blocks, SHARD_GRAD_OP holding
// exactly every block more than FULL_SHARD, activations untouched by sharding.
//
// tiny (vocab 32, context 64, 2 blocks, 32 channels): the root (wte 32 x 32, wpe 64 x 32, ln_f)
// has 3,136 elements, a block 12 C^2 + 13 C = 12,704. Every tensor is rounded up to a multiple of
// 512 bytes by the caching allocator.
#include <catch2/catch.hpp>

#include <cstdint>

#include "04_fsdp/memory.h"

using namespace shardlab;

namespace {

const GPTConfig kTiny = GPTConfig::preset("tiny");
constexpr int64_t kB = 1, kT = 64;
// The activations at B = 1, T = 64 (gpt_activation_bytes' terms, BT = 64, BTC = 2,048 floats):
// a block 9 x 8,192 + 24,576 + 2 x 32,768 + 4 x 512 + 512 = 166,400; saved = 8,192 (embeddings)
// + 2 blocks + 8,192 + 2 x 512 (ln_f) + 8,192 (logits) + 512 (losses) = 358,912; the head's
// backward 8,192 + 2 x 8,192 = 24,576.
constexpr int64_t kActivations = 358912 + 24576;

}  // namespace

TEST_CASE("ch04: memory formula: tiny's sharded state, by hand, at worlds 1 to 4", "[fsdp]") {
  // 3 x (root shard + 2 block shards): parameters, m and v; the gradient shards were freed by
  // zero_grad (set_to_none) and come back after the peak. Each shard ceil(N / W) floats rounded
  // to 512 B:
  //   W 1: root 12,544 B -> 12,800; block 50,816 B -> 51,200: 3 x 115,200
  //   W 2: root 1,568 floats, 6,272 B -> 6,656; block 6,352, 25,408 B -> 25,600: 3 x 57,856
  //   W 3: root 1,046 floats, 4,184 B -> 4,608; block 4,235, 16,940 B -> 17,408: 3 x 39,424
  //   W 4: root 784 floats, 3,136 B -> 3,584; block 3,176, 12,704 B -> 12,800: 3 x 29,184
  const int64_t expected[] = {345600, 173568, 118272, 87552};
  for (int w = 1; w <= 4; ++w)
    for (bool full_shard : {true, false}) {
      INFO("world " << w << (full_shard ? ", FULL_SHARD" : ", SHARD_GRAD_OP"));
      CHECK(ch04::fsdp_peak_memory(kTiny, kB, kT, w, full_shard).sharded_state == expected[w - 1]);
    }
}

TEST_CASE("ch04: memory formula: what is whole at the peak, by hand: the root's parameters and gradient, and SHARD_GRAD_OP's blocks", "[fsdp]") {
  // The root padded to a multiple of W: 3,136 floats (W 2, 4) or 3,138 (W 3), 12,800 B either way,
  // twice (parameters and gradient). SHARD_GRAD_OP adds both blocks, padded 12,704 or 12,705
  // floats: 51,200 B each.
  for (int w = 2; w <= 4; ++w) {
    INFO("world " << w);
    CHECK(ch04::fsdp_peak_memory(kTiny, kB, kT, w, true).unsharded == 2 * 12800);
    CHECK(ch04::fsdp_peak_memory(kTiny, kB, kT, w, false).unsharded == 2 * 12800 + 2 * 51200);
  }
  // World 1 shards nothing and gathers nothing; the root's gradient, 3,136 floats, is whole at
  // the head's backward as at any world.
  CHECK(ch04::fsdp_peak_memory(kTiny, kB, kT, 1, true).unsharded == 12800);
  CHECK(ch04::fsdp_peak_memory(kTiny, kB, kT, 1, false).unsharded == 12800);
}

TEST_CASE("ch04: memory formula: the activations are the model's, whatever the sharding, and the total is the sum of the terms", "[fsdp]") {
  for (int w = 1; w <= 4; ++w)
    for (bool full_shard : {true, false}) {
      const ch04::MemoryFormula m = ch04::fsdp_peak_memory(kTiny, kB, kT, w, full_shard);
      CHECK(m.activations == kActivations);
      CHECK(m.total() == m.sharded_state + m.unsharded + m.activations);
    }
  CHECK(ch04::fsdp_peak_memory(kTiny, kB, kT, 2, true).total() == 173568 + 25600 + kActivations);
}

TEST_CASE("ch04: memory formula: more ranks never hold more state, and each holds 1/W of world 1's up to padding and rounding", "[fsdp]") {
  for (const char* name : {"tiny", "gpt2-small"}) {
    const GPTConfig cfg = GPTConfig::preset(name);
    const int64_t one = ch04::fsdp_peak_memory(cfg, 1, 64, 1, true).sharded_state;
    // Per tensor (3 per unit, L + 1 units): under one float of padding and one 512-byte block.
    const int64_t slack = 3 * (cfg.layers + 1) * (512 + 4);
    int64_t previous = one;
    for (int w = 2; w <= 16; ++w) {
      INFO(name << ", world " << w);
      const int64_t state = ch04::fsdp_peak_memory(cfg, 1, 64, w, true).sharded_state;
      CHECK(state <= previous);
      CHECK(state * w >= one);  // the shards together hold at least the whole model
      CHECK(state <= one / w + slack);
      previous = state;
    }
  }
}

TEST_CASE("ch04: memory formula: SHARD_GRAD_OP holds exactly every padded block more than FULL_SHARD", "[fsdp]") {
  const GPTConfig cfg = GPTConfig::preset("gpt2-small");
  const int64_t block = ch04::unit_sizes(cfg).block;
  CHECK(block == 7087872);  // 12 x 768^2 + 13 x 768
  for (int w = 2; w <= 8; ++w) {
    INFO("world " << w);
    const ch04::MemoryFormula full = ch04::fsdp_peak_memory(cfg, 1, 64, w, true);
    const ch04::MemoryFormula grad_op = ch04::fsdp_peak_memory(cfg, 1, 64, w, false);
    const int64_t padded = (block + w - 1) / w * w;
    const int64_t rounded = (padded * 4 + 511) / 512 * 512;
    CHECK(grad_op.unsharded - full.unsharded == cfg.layers * rounded);
    CHECK(grad_op.sharded_state == full.sharded_state);
    CHECK(grad_op.activations == full.activations);
  }
}
