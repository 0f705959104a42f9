// Data module: the Markov chain's structure, stationary distribution and entropy rate, and the
// sampler's rank-independent global batch.
#include <catch2/catch.hpp>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/data.h"

using namespace shardlab;

namespace {

// The message of the E that f throws, or a marker that fails any message check.
template <class E, class F>
std::string thrown(F f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "(no exception of the expected type)";
}

// Number of successors of `from`, read through the public API.
int out_degree(const MarkovChain& c, int from) {
  int n = 0;
  for (int to = 0; to < c.vocab(); ++to) n += c.probability(from, to) > 0;
  return n;
}

}  // namespace

TEST_CASE("MarkovChain: same seed, same chain and samples, other seeds differ", "[data]") {
  const MarkovChain a(32, 5, 11), b(32, 5, 11), other(32, 5, 12);
  bool any_differs = false;
  for (int i = 0; i < 32; ++i)
    for (int j = 0; j < 32; ++j) {
      CHECK(a.probability(i, j) == b.probability(i, j));
      any_differs |= a.probability(i, j) != other.probability(i, j);
    }
  CHECK(any_differs);
  CHECK(a.stationary() == b.stationary());
  CHECK(a.entropy_rate() == b.entropy_rate());
  CHECK(a.sample(1000, 3) == b.sample(1000, 3));
  CHECK(a.sample(1000, 3) != a.sample(1000, 4));
  CHECK(a.sample(0, 3).empty());
}

TEST_CASE("MarkovChain: pinned values (the generators are written out, so these hold everywhere)", "[data]") {
  // Row probabilities use only IEEE-exact arithmetic on xoshiro256** output, so they are
  // bit-exact on every platform. A change here changes every run's data: make it on purpose.
  const MarkovChain c(16, 4, 7);
  CHECK(c.probability(0, 1) == 0x1.ade3a6932a59p-1);
  CHECK(c.probability(0, 0) == 0x1.21bb294c4a9f8p-3);
  CHECK(c.entropy_rate() == Approx(1.0548329852218596).epsilon(1e-12));
  CHECK(c.sample(12, 99) == std::vector<int32_t>{3, 12, 12, 1, 0, 1, 11, 12, 1, 0, 1, 11});
  const Batch b = Sampler(c, 4, 6, 0, 1, 5).global(3);
  CHECK(b.tokens == std::vector<int32_t>{11, 11, 12, 12, 13, 14, 1, 2, 3, 4, 6, 6,
                                         10, 2, 3, 11, 11, 12, 13, 7, 8, 8, 3, 12});
}

TEST_CASE("MarkovChain: rows have fanout successors including i+1 and i, and sum to 1", "[data]") {
  for (const auto& [vocab, fanout] : {std::pair{2, 2}, {3, 3}, {16, 4}, {64, 8}, {64, 64}, {300, 17}}) {
    INFO("vocab " << vocab << ", fanout " << fanout);
    const MarkovChain c(vocab, fanout, 5);
    REQUIRE(c.vocab() == vocab);
    for (int i = 0; i < vocab; ++i) {
      double sum = 0;
      for (int j = 0; j < vocab; ++j) sum += c.probability(i, j);
      CHECK(std::abs(sum - 1) < 1e-12);
      CHECK(out_degree(c, i) == fanout);
      CHECK(c.probability(i, (i + 1) % vocab) > 0);  // the cycle: irreducible
      CHECK(c.probability(i, i) > 0);                // the self loop: aperiodic
    }
  }
}

TEST_CASE("MarkovChain: pi is a positive distribution and pi = pi P", "[data]") {
  for (const auto& [vocab, fanout] : {std::pair{2, 2}, {16, 3}, {64, 8}, {500, 16}}) {
    INFO("vocab " << vocab << ", fanout " << fanout);
    const MarkovChain c(vocab, fanout, 21);
    const std::vector<double>& pi = c.stationary();
    REQUIRE(pi.size() == static_cast<size_t>(vocab));
    double total = 0;
    for (double p : pi) {
      CHECK(p > 0);
      total += p;
    }
    CHECK(std::abs(total - 1) < 1e-12);
    double l1 = 0;  // || pi P - pi ||_1, with P read back through probability()
    for (int j = 0; j < vocab; ++j) {
      double pj = 0;
      for (int i = 0; i < vocab; ++i) pj += pi[i] * c.probability(i, j);
      l1 += std::abs(pj - pi[j]);
    }
    CHECK(l1 < 1e-12);
  }
}

TEST_CASE("MarkovChain: entropy rate is the formula, lies between 0 and log fanout, and matches a long sample", "[data]") {
  const int vocab = 64, fanout = 6;
  const MarkovChain c(vocab, fanout, 2024);
  const double H = c.entropy_rate();

  // The formula again, from the public API: sum_i pi_i sum_j -P_ij log P_ij.
  double formula = 0;
  for (int i = 0; i < vocab; ++i)
    for (int j = 0; j < vocab; ++j) {
      const double p = c.probability(i, j);
      if (p > 0) formula -= c.stationary()[i] * p * std::log(p);
    }
  CHECK(H == Approx(formula).epsilon(1e-12));
  CHECK(H > 0);
  CHECK(H <= std::log(fanout));  // no row can beat uniform over its successors
  CHECK(H < std::log(vocab));

  // The loss of a model that knows the chain: the mean of -log P(x[t+1] | x[t]) over a long
  // sample converges to H (ergodic theorem). 10^6 steps puts it well inside 1%.
  const int64_t steps = 1000000;
  const std::vector<int32_t> x = c.sample(steps + 1, 77);
  double nll = 0;
  for (int64_t t = 0; t < steps; ++t) nll -= std::log(c.probability(x[t], x[t + 1]));
  CHECK(nll / steps == Approx(H).epsilon(0.01));
}

TEST_CASE("MarkovChain: the first token follows pi", "[data]") {
  const MarkovChain c(4, 3, 8);
  const int draws = 100000;
  std::vector<int> count(4, 0);
  for (int s = 0; s < draws; ++s) ++count[c.sample(1, static_cast<uint64_t>(s))[0]];
  for (int j = 0; j < 4; ++j) CHECK(std::abs(static_cast<double>(count[j]) / draws - c.stationary()[j]) < 0.01);
}

TEST_CASE("MarkovChain: fanout 1 is the deterministic cycle, uniform pi, entropy 0", "[data]") {
  // Periodic (period vocab): power iteration must still settle, which it does because the
  // uniform start vector is already stationary for a permutation.
  const int vocab = 7;
  const MarkovChain c(vocab, 1, 3);
  for (int i = 0; i < vocab; ++i) {
    CHECK(c.probability(i, (i + 1) % vocab) == 1.0);
    CHECK(out_degree(c, i) == 1);
    CHECK(c.stationary()[i] == Approx(1.0 / vocab).epsilon(1e-14));
  }
  CHECK(c.entropy_rate() == 0);
  const std::vector<int32_t> x = c.sample(30, 9);
  for (size_t t = 1; t < x.size(); ++t) CHECK(x[t] == (x[t - 1] + 1) % vocab);
}

TEST_CASE("MarkovChain: bad arguments throw, naming the values", "[data]") {
  CHECK_THAT(thrown<std::invalid_argument>([] { MarkovChain(1, 1, 0); }), Catch::Contains("vocab 1, fanout 1"));
  CHECK_THAT(thrown<std::invalid_argument>([] { MarkovChain(8, 0, 0); }), Catch::Contains("vocab 8, fanout 0"));
  CHECK_THAT(thrown<std::invalid_argument>([] { MarkovChain(8, 9, 0); }),
             Catch::Contains("vocab 8, fanout 9") && Catch::Contains("fanout <= vocab"));
  const MarkovChain c(8, 3, 0);
  CHECK_THAT(thrown<std::out_of_range>([&] { (void)c.probability(8, 0); }),
             Catch::Contains("probability(8, 0)") && Catch::Contains("0 to 7"));
  CHECK_THAT(thrown<std::out_of_range>([&] { (void)c.probability(0, -1); }), Catch::Contains("probability(0, -1)"));
  CHECK_THAT(thrown<std::invalid_argument>([&] { (void)c.sample(-2, 0); }), Catch::Contains("length -2"));
  // Fanout 2 is a cycle with self loops, whose mixing time grows as vocab^2: power iteration
  // gives up rather than return an unconverged pi.
  CHECK_THAT(thrown<std::runtime_error>([] { MarkovChain(1024, 2, 0); }),
             Catch::Contains("vocab 1024, fanout 2") && Catch::Contains("did not converge"));
}

TEST_CASE("Sampler: rank shards concatenate to the global batch at world sizes 1, 2, 4", "[data]") {
  const MarkovChain c(50, 6, 1);
  const int64_t B = 8, T = 16;
  const uint64_t seed = 123;
  for (int64_t step : {0, 1, 17}) {
    const Batch global = Sampler(c, B, T, 0, 1, seed).global(step);
    REQUIRE(global.rows == B);
    REQUIRE(global.T == T);
    REQUIRE(global.tokens.size() == static_cast<size_t>(B * T));
    REQUIRE(global.targets.size() == static_cast<size_t>(B * T));
    for (int W : {1, 2, 4}) {
      INFO("step " << step << ", world size " << W);
      Batch joined;
      for (int r = 0; r < W; ++r) {
        const Sampler s(c, B, T, r, W, seed);
        const Batch b = s.batch(step);
        CHECK(b.rows == B / W);
        CHECK(b.T == T);
        CHECK(s.global(step).tokens == global.tokens);  // every rank sees the same global batch
        joined.tokens.insert(joined.tokens.end(), b.tokens.begin(), b.tokens.end());
        joined.targets.insert(joined.targets.end(), b.targets.begin(), b.targets.end());
      }
      CHECK(joined.tokens == global.tokens);
      CHECK(joined.targets == global.targets);
    }
  }
}

TEST_CASE("Sampler: targets are the tokens shifted by one, along chain transitions", "[data]") {
  const MarkovChain c(40, 4, 6);
  const int64_t B = 6, T = 32;
  const Batch b = Sampler(c, B, T, 0, 1, 8).global(5);
  for (int64_t r = 0; r < B; ++r)
    for (int64_t t = 0; t < T; ++t) {
      const int32_t x = b.tokens[r * T + t], y = b.targets[r * T + t];
      if (t + 1 < T) CHECK(y == b.tokens[r * T + t + 1]);
      CHECK(c.probability(x, y) > 0);
    }
}

TEST_CASE("Sampler: deterministic, steps, rows and seeds differ", "[data]") {
  const MarkovChain c(100, 8, 2);
  const int64_t B = 4, T = 64;
  const Sampler s(c, B, T, 0, 1, 10);
  CHECK(s.global(3).tokens == Sampler(c, B, T, 0, 1, 10).global(3).tokens);
  CHECK(s.global(3).tokens != s.global(4).tokens);
  CHECK(s.global(3).tokens != Sampler(c, B, T, 0, 1, 11).global(3).tokens);
  const Batch b = s.global(0);
  for (int64_t r = 1; r < B; ++r)
    CHECK(std::vector<int32_t>(b.tokens.begin() + r * T, b.tokens.begin() + (r + 1) * T) !=
          std::vector<int32_t>(b.tokens.begin(), b.tokens.begin() + T));
}

TEST_CASE("Sampler: bad arguments throw, naming the values", "[data]") {
  const MarkovChain c(8, 3, 0);
  CHECK(thrown<std::invalid_argument>([&] { Sampler(c, 10, 4, 0, 4, 0); }) ==
        "Sampler: global batch 10 does not divide among 4 ranks (10 % 4 = 2); "
        "choose a global batch that is a multiple of the world size");
  CHECK_THAT(thrown<std::invalid_argument>([&] { Sampler(c, 0, 4, 0, 1, 0); }), Catch::Contains("global batch 0"));
  CHECK_THAT(thrown<std::invalid_argument>([&] { Sampler(c, 4, 0, 0, 1, 0); }), Catch::Contains("sequence length 0"));
  CHECK_THAT(thrown<std::invalid_argument>([&] { Sampler(c, 4, 4, 0, 0, 0); }), Catch::Contains("world size 0"));
  CHECK_THAT(thrown<std::invalid_argument>([&] { Sampler(c, 4, 4, 4, 4, 0); }),
             Catch::Contains("rank 4 is outside 0..3"));
  CHECK_THAT(thrown<std::invalid_argument>([&] { Sampler(c, 4, 4, -1, 4, 0); }), Catch::Contains("rank -1"));
  const Sampler s(c, 4, 4, 0, 1, 0);
  CHECK_THAT(thrown<std::invalid_argument>([&] { (void)s.batch(-1); }), Catch::Contains("step -1"));
}

TEST_CASE("Sampler: a 64 x 1024 global batch (speed sanity, not timed)", "[data]") {
  const MarkovChain c(256, 16, 4);
  const Batch b = Sampler(c, 64, 1024, 0, 1, 1).global(0);
  CHECK(b.tokens.size() == static_cast<size_t>(64 * 1024));
  CHECK(b.targets.size() == static_cast<size_t>(64 * 1024));
}
