// Chapter 10's slices: over a tensor-parallel group, the ranks' runs of every parameter cover it
// exactly once (a replicated one: whole on every rank), their lengths are the shapes the model
// holds (gpt_params with the slice), and a rank's q, k and v rows are the same heads of each.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <vector>

#include "10_tensor_parallel/tensor_parallel.h"

using namespace shardlab;

TEST_CASE("ch10: the ranks' slices cover every parameter once, in the shapes the model holds", "[ch10]") {
  for (const char* model : {"tiny-12h", "gpt2-small"}) {
    const GPTConfig cfg = GPTConfig::preset(model);
    const std::vector<ParamInfo> whole = gpt_params(cfg);
    for (int size : {1, 2, 3, 4}) {
      INFO(model << " over " << size << " ranks");
      REQUIRE(slice_problem(cfg, size).empty());
      for (size_t i = 0; i < whole.size(); ++i) {
        INFO(whole[i].name);
        std::vector<int> covered(static_cast<size_t>(whole[i].shape.numel()), 0);
        for (int rank = 0; rank < size; ++rank) {
          const ModelSlice slice{rank, size};
          int64_t held = 0;
          for (const ch10::Run& r : ch10::slice_runs(cfg, slice, whole[i])) {
            for (int64_t e = r.whole; e < r.whole + r.count; ++e) ++covered[static_cast<size_t>(e)];
            held += r.count;
          }
          CHECK(held == gpt_params(cfg, slice)[i].shape.numel());
        }
        const int want = ch10::is_replicated(whole[i]) ? size : 1;
        CHECK(std::count(covered.begin(), covered.end(), want) == static_cast<std::ptrdiff_t>(covered.size()));
      }
    }
  }
}

TEST_CASE("ch10: a rank's qkv rows are its heads' rows of q, k and v, its vocabulary rows torch.chunk's", "[ch10]") {
  const GPTConfig cfg = GPTConfig::preset("tiny-12h");  // C 48, 12 heads of 4, vocabulary 32
  const ParamInfo qkv = gpt_params(cfg)[4];
  REQUIRE(qkv.name == "h.0.attn.c_attn.weight");
  const std::vector<ch10::Run> runs = ch10::slice_runs(cfg, {1, 3}, qkv);  // heads 4..7: channels 16..31
  REQUIRE(runs.size() == 3);
  CHECK(runs[0].whole == 16 * 48);
  CHECK(runs[1].whole == (48 + 16) * 48);
  CHECK(runs[2].whole == (96 + 16) * 48);
  for (const ch10::Run& r : runs) CHECK(r.count == 16 * 48);
  // torch.chunk(32 rows, 3): 11, 11, 10.
  CHECK(ModelSlice{0, 3}.vocab_rows(cfg) == 11);
  CHECK(ModelSlice{2, 3}.vocab_begin(cfg) == 22);
  CHECK(ModelSlice{2, 3}.vocab_rows(cfg) == 10);
}

TEST_CASE("ch10: a group the model cannot be cut over is named with its reason", "[ch10]") {
  CHECK(slice_problem(GPTConfig::preset("tiny"), 4) == "tiny's 2 heads do not divide over 4 ranks");
  GPTConfig few = GPTConfig::preset("tiny-12h");
  few.vocab = 5;  // torch.chunk(5, 4): 2, 2, 1, and nothing for the last rank
  CHECK(slice_problem(few, 4) ==
        "tiny-12h's vocabulary of 5 cut in chunks of 2 (torch.chunk) leaves rank 3 none");
  CHECK(slice_problem(few, 3).empty());
}
