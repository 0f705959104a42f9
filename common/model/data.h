// data.h: token sequences from a fixed random Markov chain, with a loss floor known exactly.
//
// A model that has learned the chain perfectly predicts the next token with the chain's
// transition probabilities, so its expected cross-entropy is the chain's entropy rate
//   H = sum_i pi_i x H(P[i, :])   (nats per token; pi the stationary distribution),
// and no model can do better on average. Training curves are judged against it.
//
// The global batch of step k is the same whatever the world size: sequence b of step k is
// drawn from a generator seeded by (seed, k, b) alone, and rank r of W takes sequences
// [r B / W, (r + 1) B / W).
#pragma once

#include <cstdint>
#include <vector>

namespace shardlab {

class MarkovChain {
 public:
  // `vocab` states; each row has `fanout` successors with random probabilities. Depends on
  // (vocab, fanout, seed) only. Costs O(vocab x fanout) for the rows plus the power iteration
  // for the stationary distribution, which dominates: about 4,000 sweeps for GPT-2's 50,257
  // states (a second or so).
  MarkovChain(int vocab, int fanout, uint64_t seed);
  // The same chain with its stationary distribution already solved (by MarkovChain(vocab,
  // fanout, seed) in another process, as rank 0 does for every rank): the rows are rebuilt,
  // the power iteration skipped, and the chain is bit-identical to the solved one. Throws
  // std::invalid_argument when `stationary` does not have `vocab` entries.
  MarkovChain(int vocab, int fanout, uint64_t seed, std::vector<double> stationary);
  int vocab() const { return vocab_; }
  double entropy_rate() const { return entropy_rate_; }        // nats per token
  const std::vector<double>& stationary() const { return pi_; }
  double probability(int from, int to) const;
  // A sequence of n tokens: the first from the stationary distribution, then transitions.
  std::vector<int32_t> sample(int64_t n, uint64_t seed) const;

 private:
  void build_rows(uint64_t seed);
  void solve_stationary();
  void finish();  // pi's running sums and the entropy rate, from the rows and pi
  int vocab_, fanout_;
  // Row i's successors and probabilities are entries [i x fanout, (i + 1) x fanout): every row
  // has exactly `fanout`, so one flat array each (the power iteration streams through them).
  std::vector<int32_t> succ_;
  std::vector<double> prob_;
  std::vector<double> row_cdf_;  // running sums of each row's probabilities, the row's last = 1
  std::vector<double> pi_;
  std::vector<double> pi_cdf_;   // running sums of pi_, last = 1
  double entropy_rate_ = 0;
};

// One rank's share of one step's global batch: tokens and next-token targets.
struct Batch {
  int64_t rows = 0, T = 0;          // this rank's rows x sequence length
  std::vector<int32_t> tokens;      // [rows, T]
  std::vector<int32_t> targets;     // [rows, T]: tokens shifted by one
};

class Sampler {
 public:
  // Throws std::invalid_argument (naming the values) when global_batch does not divide by
  // world_size.
  Sampler(const MarkovChain& chain, int64_t global_batch, int64_t T, int rank, int world_size, uint64_t seed);
  Batch batch(int64_t step) const;  // this rank's rows of step `step`
  Batch global(int64_t step) const; // all rows (the single-rank reference)

 private:
  Batch rows(int64_t step, int64_t first, int64_t count) const;
  const MarkovChain& chain_;
  int64_t global_batch_, T_;
  int rank_, world_size_;
  uint64_t seed_;
};

}  // namespace shardlab
