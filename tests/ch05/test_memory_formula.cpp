// Chapter 05's peak-memory formula per prefetch mode (memory.h): what BACKWARD_PRE adds to
// chapter 04's peak, checked against bytes worked out by hand on `tiny` (two blocks of 12,704
// floats, padded to 12,704 or 12,705, 51,200 bytes whole after the allocator's rounding) at
// worlds 1 to 4, and the modes that must add nothing: BACKWARD_POST and none (the root's
// post-backward hook, which would prefetch the last block, runs at the very end), forward
// prefetch (one block more, far from the peak), SHARD_GRAD_OP (every block is whole already).
#include <catch2/catch.hpp>

#include "05_prefetch/memory.h"

using namespace shardlab;
using ch05::BackwardPrefetch;
using ch05::FsdpOptions;

namespace {

const GPTConfig kTiny = GPTConfig::preset("tiny");
// What FULL_SHARD holds whole at the peak without prefetching, at W > 1: the root's padded
// parameters and gradient, 12,800 B each (chapter 04's test works it out).
constexpr int64_t kRootWhole = 2 * 12800;
constexpr int64_t kBlockWhole = 51200;

int64_t unsharded(int w, FsdpOptions o) { return ch05::fsdp_peak_memory(kTiny, 1, 64, w, o).unsharded; }

}  // namespace

TEST_CASE("ch05: memory formula: BACKWARD_PRE holds one block more at the peak, by hand, at worlds 2 to 4", "[prefetch]") {
  for (int w = 2; w <= 4; ++w) {
    INFO("world " << w);
    for (bool forward_prefetch : {false, true}) {
      CHECK(unsharded(w, {true, BackwardPrefetch::pre, forward_prefetch}) == kRootWhole + kBlockWhole);
      CHECK(unsharded(w, {true, BackwardPrefetch::post, forward_prefetch}) == kRootWhole);
      CHECK(unsharded(w, {true, BackwardPrefetch::none, forward_prefetch}) == kRootWhole);
    }
  }
}

TEST_CASE("ch05: memory formula: world 1 and SHARD_GRAD_OP gather nothing more whatever the prefetch", "[prefetch]") {
  for (BackwardPrefetch p : {BackwardPrefetch::pre, BackwardPrefetch::post, BackwardPrefetch::none}) {
    INFO(ch05::to_string(p));
    CHECK(unsharded(1, {true, p, false}) == kRootWhole / 2);  // the root's gradient only
    CHECK(unsharded(1, {false, p, false}) == kRootWhole / 2);
    for (int w = 2; w <= 4; ++w) CHECK(unsharded(w, {false, p, true}) == kRootWhole + 2 * kBlockWhole);
  }
}

TEST_CASE("ch05: memory formula: prefetching changes only what is whole, never the state or the activations", "[prefetch]") {
  const GPTConfig cfg = GPTConfig::preset("gpt2-small");
  for (int w = 1; w <= 8; ++w) {
    INFO("world " << w);
    const ch04::MemoryFormula base = ch04::fsdp_peak_memory(cfg, 1, 1024, w, true);
    const ch04::MemoryFormula pre = ch05::fsdp_peak_memory(cfg, 1, 1024, w, {true, BackwardPrefetch::pre, true});
    const ch04::MemoryFormula post = ch05::fsdp_peak_memory(cfg, 1, 1024, w, {true, BackwardPrefetch::post, true});
    CHECK(pre.sharded_state == base.sharded_state);
    CHECK(pre.activations == base.activations);
    CHECK(post.total() == base.total());
    CHECK(pre.total() >= post.total());
    // More ranks: the block BACKWARD_PRE gathers is the same whole block, so the difference stays.
    if (w > 1) CHECK(pre.unsharded - post.unsharded == (4 * ((7087872 + w - 1) / w * w) + 511) / 512 * 512);
  }
}
