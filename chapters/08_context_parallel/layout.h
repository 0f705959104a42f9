// layout.h: which tokens of a sequence each rank of a context-parallel group holds, and what
// its queries compute against each chunk of keys and values the ring brings.
//
// A sequence of S tokens is split over the N ranks of the group; every token-wise operation
// (embeddings, layernorm, MLP, head, loss) then runs on each rank's tokens alone. Attention is
// the exception: rank r's queries need the keys and values of every earlier position, so the
// ranks pass their KV chunks around a ring, and at ring step s rank r holds the chunk of rank
// (r - s) mod N. Under the causal mask, what r computes against that chunk depends on where
// both sit in the sequence:
//
//   contiguous: rank r holds tokens [r S/N, (r + 1) S/N). Step 0 is its own chunk (causal); a
//     chunk from an earlier rank is seen whole; one from a later rank not at all. Rank N-1
//     computes 2N - 1 times rank 0's work, and the ring goes at the pace of the slowest rank.
//   zigzag: cut the sequence into 2N chunks of c = S/2N tokens; rank r holds chunk r and chunk
//     2N-1-r (one early, one late). Step 0: its own 2c tokens, causal (chunk r comes before
//     chunk 2N-1-r, so the causal mask over the pair is the right one). A chunk from an earlier
//     rank j < r: every query of r sees the first half (chunk j) and none sees the second
//     (chunk 2N-1-j, later than both of r's). From a later rank j > r: only r's late half
//     (chunk 2N-1-r) sees anything, and it sees both of j's chunks. Either way c x 2c score
//     entries, the same on every rank at every step after the first.
// Without the causal mask (an encoder's attention) every query sees every key: each step is
// the whole local q against the whole chunk, whatever the layout.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "02_naive_ddp/data_parallel.h"
#include "model/attention.h"

namespace ch08 {

using shardlab::ops::AttentionMask;
using shardlab::ops::Rows;

enum class Layout { zigzag, contiguous };

inline Layout layout_named(const std::string& name) { return name == "contiguous" ? Layout::contiguous : Layout::zigzag; }

class SequenceLayout {
 public:
  // Rank `rank` of `ranks` sharing sequences of S tokens; S must divide into 2N chunks (zigzag)
  // or N (contiguous): the chapter checks the flags before step 1.
  SequenceLayout(Layout layout, int ranks, int rank, int64_t S, AttentionMask mask = AttentionMask::causal)
      : layout_(layout), mask_(mask), N_(ranks), r_(rank), local_(S / ranks) {}

  Layout layout() const { return layout_; }
  int64_t local_tokens() const { return local_; }

  // The positions in the sequence of this rank's tokens, in the order it holds them.
  std::vector<int32_t> positions() const {
    std::vector<int32_t> out;
    const auto chunk = [&](int64_t first, int64_t count) {
      for (int64_t t = first; t < first + count; ++t) out.push_back(static_cast<int32_t>(t));
    };
    if (layout_ == Layout::contiguous) {
      chunk(r_ * local_, local_);
    } else {
      // lab: begin 08.zigzag "the zigzag layout: each rank's early and late chunk" #zigzag-the-same-work-on-every-rank uses(chunk)
      const int64_t c = local_ / 2;
      chunk(r_ * c, c);
      chunk((2 * N_ - 1 - r_) * c, c);
      // lab: end
    }
    return out;
  }

  // The KV chunk this rank holds at ring step `step`: rank (r - step) mod N's.
  int owner(int step) const { return (r_ - step % N_ + N_) % N_; }

  // What this rank's queries compute against the chunk of ring step `step` (rows of its local
  // q and of the chunk's k, v); `any` is false when no query sees any of its keys.
  struct Block {
    bool any = true;
    AttentionMask mask = AttentionMask::none;
    Rows q_rows, kv_rows;
  };
  Block block(int step) const {
    if (mask_ == AttentionMask::none) return {};
    if (step == 0) return {true, AttentionMask::causal, {}, {}};
    const int j = owner(step);
    if (layout_ == Layout::contiguous) return j < r_ ? Block{} : Block{false, AttentionMask::none, {}, {}};
    // lab: begin 08.step-cases "the zigzag step cases: which queries see which keys of a chunk" #zigzag-the-same-work-on-every-rank uses(j)
    const int64_t c = local_ / 2;
    if (j < r_) return {true, AttentionMask::none, {}, {0, c}};  // every query, the early half of the keys
    return {true, AttentionMask::none, {c, c}, {}};              // the late half of the queries, every key
    // lab: end
  }

  // The unmasked score entries of a block, per sequence and head: what its kernel computes.
  int64_t score_entries(const Block& b) const {
    if (!b.any) return 0;
    const int64_t q = b.q_rows.count < 0 ? local_ - b.q_rows.begin : b.q_rows.count;
    const int64_t k = b.kv_rows.count < 0 ? local_ - b.kv_rows.begin : b.kv_rows.count;
    return b.mask == AttentionMask::causal ? q * (q + 1) / 2 : q * k;
  }

 private:
  Layout layout_;
  AttentionMask mask_;
  int N_, r_;
  int64_t local_;  // tokens this rank holds, S / N
};

// Chapter 02's share of the batch, cut along the sequence: the rows of the group's data-parallel
// rank, and of each row only this rank's positions, in the order it holds them. The model learns
// where each of its tokens sits from `positions`, loaded once.
class SequenceShare : public ch02::BatchShare {
 public:
  SequenceShare(shardlab::Job& job, const shardlab::TrainSetup& setup, ch02::DataShard rows, std::vector<int32_t> positions)
      : BatchShare(job, setup, /*grad_accum=*/1, rows, static_cast<int64_t>(positions.size())),
        positions_(std::move(positions)) {
    shardlab::Device& dev = job.device();
    positions_tensor_ = dev.empty({T_}, shardlab::DType::i32, dev.compute_stream(), "positions");
    shardlab::copy_to_device(dev, dev.compute_stream(), positions_tensor_, dev.computes() ? positions_.data() : nullptr);
  }
  ~SequenceShare() override { job_.device().free(positions_tensor_); }

 protected:
  std::vector<int32_t> mine(const std::vector<int32_t>& share, int64_t offset) const override {
    const auto first = share.begin() + offset;
    std::vector<int32_t> out;
    out.reserve(static_cast<size_t>(rows_ * T_));
    for (int64_t r = 0; r < rows_; ++r)
      for (const int32_t p : positions_) out.push_back(first[r * setup_.T + p]);
    return out;
  }
  void bind(shardlab::GPT& model, float dloss) override { model.set_batch(tokens_, targets_, dloss, positions_tensor_); }

 private:
  std::vector<int32_t> positions_;
  shardlab::Tensor positions_tensor_;
};

}  // namespace ch08
