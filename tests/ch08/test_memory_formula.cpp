// Chapter 08's peak-memory formula (memory.h): context parallelism divides the activations by
// the ranks of a sequence and shards no state. Checked against bytes worked out by hand on
// `tiny` (28,544 parameters) for 64 tokens over 1, 2 and 4 ranks and 48 over 3, and for what
// must hold on any model: the state never changes with the ranks, the activations never grow.
#include <catch2/catch.hpp>

#include <cstdint>

#include "08_context_parallel/memory.h"

using namespace shardlab;

namespace {

const GPTConfig kTiny = GPTConfig::preset("tiny");
// 4 x 28,544 floats x 4 B = 4 x 114,176 B (a multiple of 512: no rounding): parameters,
// gradients, AdamW m and v, whole on every rank.
constexpr int64_t kState = 4 * 114176;

}  // namespace

TEST_CASE("ch08: memory formula: tiny's state and activations by hand, 64 tokens over 1, 2 and 4 ranks and 48 over 3", "[context-parallel]") {
  // Activations of T = S / N tokens a rank (gpt_activation_bytes' terms; every tensor rounded up
  // to 512 B; C = 32, vocab 32, 2 heads, 2 blocks):
  //   T 64: a block 9 x 8,192 + 24,576 + 2 x 32,768 + 4 x 512 + 512 = 166,400; saved 8,192 +
  //         2 x 166,400 + 8,192 + 1,024 + 8,192 + 512 = 358,912; head backward 24,576
  //   T 32: a block 9 x 4,096 + 12,288 + 2 x 16,384 + 2,048 + 512 = 84,480; saved 182,784;
  //         head backward 12,288
  //   T 16: a block 9 x 2,048 + 6,144 + 2 x 8,192 + 2,048 + 512 = 43,520; saved 94,720;
  //         head backward 6,144
  struct Case {
    int64_t S;
    int N;
    int64_t activations;
  };
  for (const Case c : {Case{64, 1, 358912 + 24576}, Case{64, 2, 182784 + 12288}, Case{64, 4, 94720 + 6144},
                       Case{48, 3, 94720 + 6144}}) {
    INFO("S " << c.S << " over " << c.N);
    const ch08::MemoryFormula m = ch08::cp_peak_memory(kTiny, 1, c.S, c.N);
    CHECK(m.state == kState);
    CHECK(m.activations == c.activations);
    CHECK(m.total() == kState + c.activations);
  }
}

TEST_CASE("ch08: memory formula: more ranks per sequence never change the state and never add activations", "[context-parallel]") {
  for (const char* name : {"tiny", "gpt2-small"}) {
    const GPTConfig cfg = GPTConfig::preset(name);
    const int64_t S = cfg.max_T;
    const ch08::MemoryFormula one = ch08::cp_peak_memory(cfg, 2, S, 1);
    ch08::MemoryFormula previous = one;
    for (int n : {2, 4, 8, 16}) {
      INFO(name << ", " << n << " ranks");
      const ch08::MemoryFormula m = ch08::cp_peak_memory(cfg, 2, S, n);
      CHECK(m.state == one.state);
      CHECK(m.activations < previous.activations);
      // N ranks of S tokens hold what one rank of S / N tokens holds.
      CHECK(m.activations == ch08::cp_peak_memory(cfg, 2, S / n, 1).activations);
      previous = m;
    }
  }
}
