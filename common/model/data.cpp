// data.cpp: the random Markov chain and the rank-independent batch sampler.
//
// Reproducibility. Every random number comes from rng.h's generators rather than <random>: std::uniform_*_distribution is specified only
// in its statistics, so libstdc++ and libc++ draw different numbers from the same engine.
// The chain's probabilities are built with comparisons, subtractions and divisions only
// (no log or exp), so a given (vocab, fanout, seed) gives bit-identical transition rows on
// every IEEE-754 platform.
//
// (rng.h: splitmix64 hashes (seed, step, row) into a sequence's seed; xoshiro256** draws.)
//
// The chain. State i's successors are
//   fanout 1:  {i+1}                       (mod vocab) the deterministic cycle, entropy 0;
//   fanout 2+: {i+1, i, fanout-2 others}   the others a uniform random subset of the
//                                          remaining vocab-2 states.
// The edge i -> i+1 in every row makes the chain irreducible (the cycle visits every
// state), and the self loop i -> i makes it aperiodic, so the stationary distribution is
// unique and power iteration converges to it. A row's probabilities are the spacings of
// fanout-1 sorted uniforms on (0, 1): a uniform draw from the probability simplex
// (Dirichlet(1, ..., 1)), and the sorted uniforms are the row's cumulative distribution.
#include "model/data.h"

#include "model/rng.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>

namespace shardlab {
namespace {

// Index of the outcome that u in [0, 1) selects from a cumulative distribution whose last
// entry is 1: the first entry above u.
int pick(const double* cdf, int n, double u) {
  const double* it = std::upper_bound(cdf, cdf + n, u);
  return static_cast<int>(std::min(it - cdf, static_cast<std::ptrdiff_t>(n) - 1));
}

// For the error message: std::to_string would print a change of 3e-9 as 0.000000.
std::string scientific(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", x);
  return buf;
}

// Power iteration stops when one step moves pi by less than this in L1...
constexpr double kStationaryTolerance = 1e-15;
// ...and gives up after this many steps. The random successors are what make a chain mix
// fast: fanout 2 has none (a cycle with self loops, mixing time ~ vocab^2) and fails from
// about a thousand states; fanout 3 converges up to vocab 32768 at least, larger fanouts
// faster still.
constexpr int kMaxPowerIterations = 100000;

void check_shape(int vocab, int fanout) {
  if (vocab < 2 || fanout < 1 || fanout > vocab)
    throw std::invalid_argument("MarkovChain: vocab " + std::to_string(vocab) + ", fanout " + std::to_string(fanout) +
                                ": need vocab >= 2 and 1 <= fanout <= vocab");
}

}  // namespace

MarkovChain::MarkovChain(int vocab, int fanout, uint64_t seed) : vocab_(vocab), fanout_(fanout) {
  check_shape(vocab, fanout);
  build_rows(seed);
  solve_stationary();
  finish();
}

MarkovChain::MarkovChain(int vocab, int fanout, uint64_t seed, std::vector<double> stationary)
    : vocab_(vocab), fanout_(fanout), pi_(std::move(stationary)) {
  check_shape(vocab, fanout);
  if (pi_.size() != static_cast<size_t>(vocab))
    throw std::invalid_argument("MarkovChain: a stationary distribution of " + std::to_string(pi_.size()) +
                                " entries for a chain of " + std::to_string(vocab) + " states");
  build_rows(seed);
  finish();
}

void MarkovChain::build_rows(uint64_t seed) {
  const int vocab = vocab_, fanout = fanout_;
  Rng rng(seed);
  const size_t entries = static_cast<size_t>(vocab) * static_cast<size_t>(fanout);
  succ_.resize(entries);
  prob_.resize(entries);
  row_cdf_.resize(entries);

  // Floyd's algorithm picks the fanout-2 "others" as a uniform subset of the vocab-2
  // candidates (i+2, ..., i+vocab-1 mod vocab) in fanout-2 draws; `taken` marks the chosen
  // candidate indices and is cleared after each row, so the whole build is O(vocab x fanout).
  const int others = std::max(fanout - 2, 0);
  const int candidates = vocab - 2;
  std::vector<char> taken(candidates, 0);
  std::vector<int> chosen;
  std::vector<double> cuts(fanout - 1);
  for (int i = 0; i < vocab; ++i) {
    int32_t* succ = &succ_[static_cast<size_t>(i) * fanout];
    int k = 0;
    succ[k++] = (i + 1) % vocab;
    if (fanout >= 2) succ[k++] = i;
    chosen.clear();
    for (int j = candidates - others; j < candidates; ++j) {
      const int t = static_cast<int>(rng.below(static_cast<uint64_t>(j) + 1));
      const int c = taken[t] ? j : t;
      taken[c] = 1;
      chosen.push_back(c);
    }
    for (int c : chosen) {
      taken[c] = 0;
      succ[k++] = (i + 2 + c) % vocab;
    }

    // Sorted distinct uniforms on (0, 1) cut [0, 1] into fanout positive pieces. A tie (odds
    // about fanout^2 / 2^54) would make a zero-probability successor, so it is redrawn.
    do {
      for (double& u : cuts) u = rng.uniform_open();
      std::sort(cuts.begin(), cuts.end());
    } while (std::adjacent_find(cuts.begin(), cuts.end()) != cuts.end());
    double* cdf = &row_cdf_[static_cast<size_t>(i) * fanout];
    double* prob = &prob_[static_cast<size_t>(i) * fanout];
    std::copy(cuts.begin(), cuts.end(), cdf);
    cdf[fanout - 1] = 1.0;
    double prev = 0;
    for (int q = 0; q < fanout; ++q) {
      prob[q] = cdf[q] - prev;
      prev = cdf[q];
    }
  }
}

// Stationary distribution: pi <- pi P from the uniform vector, renormalized each step so
// rounding cannot drift the total mass. For fanout 1 (the periodic cycle) no special case is
// needed: P is a permutation, the uniform start is already stationary, and the first step
// moves nothing.
void MarkovChain::solve_stationary() {
  const int vocab = vocab_, fanout = fanout_;
  pi_.assign(vocab, 1.0 / vocab);
  std::vector<double> next(vocab);
  double change = 0;
  int iter = 0;
  for (; iter < kMaxPowerIterations; ++iter) {
    std::fill(next.begin(), next.end(), 0.0);
    for (int i = 0; i < vocab; ++i) {
      const size_t row = static_cast<size_t>(i) * fanout;
      for (int q = 0; q < fanout; ++q) next[succ_[row + q]] += pi_[i] * prob_[row + q];
    }
    double mass = 0;
    for (double x : next) mass += x;
    change = 0;
    for (int j = 0; j < vocab; ++j) {
      next[j] /= mass;
      change += std::abs(next[j] - pi_[j]);
    }
    pi_.swap(next);
    if (change < kStationaryTolerance) break;
  }
  if (iter == kMaxPowerIterations)
    throw std::runtime_error("MarkovChain: vocab " + std::to_string(vocab) + ", fanout " + std::to_string(fanout) +
                             ": the stationary distribution did not converge in " +
                             std::to_string(kMaxPowerIterations) + " power iterations (last L1 change " +
                             scientific(change) + "); the chain mixes too slowly, use a larger fanout");
}

void MarkovChain::finish() {
  pi_cdf_.resize(vocab_);
  double running = 0;
  for (int j = 0; j < vocab_; ++j) pi_cdf_[j] = running += pi_[j];
  pi_cdf_.back() = 1.0;  // so every u in [0, 1) lands somewhere despite rounding

  // H = sum_i pi_i H(P[i, :]); every listed probability is positive, so log is finite.
  entropy_rate_ = 0;
  for (int i = 0; i < vocab_; ++i) {
    double row_entropy = 0;
    for (int q = 0; q < fanout_; ++q) {
      const double p = prob_[static_cast<size_t>(i) * fanout_ + q];
      row_entropy -= p * std::log(p);
    }
    entropy_rate_ += pi_[i] * row_entropy;
  }
}

double MarkovChain::probability(int from, int to) const {
  if (from < 0 || from >= vocab_ || to < 0 || to >= vocab_)
    throw std::out_of_range("MarkovChain::probability(" + std::to_string(from) + ", " + std::to_string(to) +
                            "): states run from 0 to " + std::to_string(vocab_ - 1));
  for (int q = 0; q < fanout_; ++q)
    if (succ_[static_cast<size_t>(from) * fanout_ + q] == to) return prob_[static_cast<size_t>(from) * fanout_ + q];
  return 0;
}

std::vector<int32_t> MarkovChain::sample(int64_t n, uint64_t seed) const {
  if (n < 0) throw std::invalid_argument("MarkovChain::sample: length " + std::to_string(n) + " is negative");
  std::vector<int32_t> out(n);
  if (n == 0) return out;
  Rng rng(seed);
  int state = pick(pi_cdf_.data(), vocab_, rng.uniform());
  out[0] = state;
  for (int64_t t = 1; t < n; ++t) {
    const size_t row = static_cast<size_t>(state) * fanout_;
    state = succ_[row + pick(&row_cdf_[row], fanout_, rng.uniform())];
    out[t] = state;
  }
  return out;
}

Sampler::Sampler(const MarkovChain& chain, int64_t global_batch, int64_t T, int rank, int world_size, uint64_t seed)
    : chain_(chain), global_batch_(global_batch), T_(T), rank_(rank), world_size_(world_size), seed_(seed) {
  if (global_batch < 1)
    throw std::invalid_argument("Sampler: global batch " + std::to_string(global_batch) + " must be at least 1");
  if (T < 1) throw std::invalid_argument("Sampler: sequence length " + std::to_string(T) + " must be at least 1");
  if (world_size < 1)
    throw std::invalid_argument("Sampler: world size " + std::to_string(world_size) + " must be at least 1");
  if (rank < 0 || rank >= world_size)
    throw std::invalid_argument("Sampler: rank " + std::to_string(rank) + " is outside 0.." +
                                std::to_string(world_size - 1) + " (world size " + std::to_string(world_size) + ")");
  if (global_batch % world_size != 0)
    throw std::invalid_argument("Sampler: global batch " + std::to_string(global_batch) + " does not divide among " +
                                std::to_string(world_size) + " ranks (" + std::to_string(global_batch) + " % " +
                                std::to_string(world_size) + " = " + std::to_string(global_batch % world_size) +
                                "); choose a global batch that is a multiple of the world size");
}

Batch Sampler::batch(int64_t step) const {
  const int64_t per_rank = global_batch_ / world_size_;
  return rows(step, rank_ * per_rank, per_rank);
}

Batch Sampler::global(int64_t step) const { return rows(step, 0, global_batch_); }

// Rows [first, first + count) of step `step`. Each row is one chain sequence of T + 1
// tokens: the first T are the inputs, the last T the targets, so targets[t] = tokens[t + 1].
Batch Sampler::rows(int64_t step, int64_t first, int64_t count) const {
  if (step < 0) throw std::invalid_argument("Sampler: step " + std::to_string(step) + " is negative");
  Batch b;
  b.rows = count;
  b.T = T_;
  b.tokens.reserve(count * T_);
  b.targets.reserve(count * T_);
  for (int64_t r = first; r < first + count; ++r) {
    const std::vector<int32_t> seq = chain_.sample(T_ + 1, derive_seed(seed_, static_cast<uint64_t>(step), static_cast<uint64_t>(r)));
    b.tokens.insert(b.tokens.end(), seq.begin(), seq.end() - 1);
    b.targets.insert(b.targets.end(), seq.begin() + 1, seq.end());
  }
  return b;
}

}  // namespace shardlab
