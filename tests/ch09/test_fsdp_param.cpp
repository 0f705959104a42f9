// Chapter 09's per-parameter geometry against PyTorch FSDP2's (torch/distributed/fsdp/
// _fully_shard/_fsdp_common.py: _chunk_with_empty, which cuts with torch.chunk and pads the list
// with empty chunks; _fsdp_param.py: FSDPParam._init_sharded_param, whose padded shard has the
// first chunk's size on every rank).
#include <catch2/catch.hpp>

#include "09_fsdp2/fsdp_param.h"

using ch09::Dim0Chunks;

namespace {
std::vector<int64_t> rows(int64_t d0, int world) {
  std::vector<int64_t> r;
  for (int k = 0; k < world; ++k) r.push_back(Dim0Chunks{d0, 1, world}.rows_of(k));
  return r;
}
}  // namespace

TEST_CASE("ch09: fsdp param: rows per rank are torch.chunk's, then empty chunks", "[fsdp2]") {
  CHECK(rows(5, 3) == std::vector<int64_t>{2, 2, 1});
  CHECK(rows(2, 4) == std::vector<int64_t>{1, 1, 0, 0});
  CHECK(rows(6, 4) == std::vector<int64_t>{2, 2, 2, 0});  // not 2, 2, 1, 1
  CHECK(rows(13, 6) == std::vector<int64_t>{3, 3, 3, 3, 1, 0});  // torch.arange(13).chunk(6): 5 chunks
  CHECK(rows(7, 1) == std::vector<int64_t>{7});
  for (int64_t d0 : {1, 2, 3, 5, 13, 768, 2304, 50257}) {
    for (int w : {1, 2, 3, 4, 5, 7, 8}) {
      const Dim0Chunks c{d0, 3, w};
      INFO("d0 " << d0 << ", world " << w);
      int64_t total = 0;
      bool ended = false;
      for (int r = 0; r < w; ++r) {
        total += c.rows_of(r);
        if (c.rows_of(r) < c.chunk_rows()) ended = true;
        else CHECK_FALSE(ended);  // full chunks first: the padding sits after every real row
      }
      CHECK(total == d0);
      CHECK(c.padded_numel() * w >= c.numel());
      CHECK(c.padded_numel() * w - c.numel() < static_cast<int64_t>(w) * 3);  // fewer than W padding rows
    }
  }
}

TEST_CASE("ch09: fsdp param: a [3, 3] weight over 2 ranks pads rank 1 with one row, and a bias is rows of one element", "[fsdp2]") {
  const Dim0Chunks a = ch09::dim0_chunks(shardlab::Shape{3, 3}, 2);
  CHECK(a.chunk_rows() == 2);
  CHECK(a.padded_numel() == 6);
  CHECK(a.numel_of(0) == 6);
  CHECK(a.numel_of(1) == 3);
  const Dim0Chunks bias = ch09::dim0_chunks(shardlab::Shape{768}, 5);
  CHECK(bias.row_numel == 1);
  CHECK(bias.chunk_rows() == 154);
  CHECK(bias.rows_of(4) == 768 - 4 * 154);
  // gpt2-small's token embedding [50257, 768] over 8 ranks: 6283 rows each, the last 6276.
  const Dim0Chunks wte = ch09::dim0_chunks(shardlab::Shape{50257, 768}, 8);
  CHECK(wte.chunk_rows() == 6283);
  CHECK(wte.rows_of(7) == 50257 - 7 * 6283);
}
