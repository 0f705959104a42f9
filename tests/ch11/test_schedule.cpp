// Chapter 11's schedules on the lockstep clock (schedule.h): every rank runs each pass once, in
// an order the data allows; everything that crosses arrives before the pass that uses it; the
// activations a rank holds at once are what each schedule promises; and with passes of equal
// time the clock's idle share is the bubble formula exactly. And the cuts into stages (stages.h).
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "11_pipeline_parallel/schedule.h"
#include "11_pipeline_parallel/stages.h"

using namespace ch11;

namespace {

struct Case {
  std::string schedule;
  Pipeline pipe;
};

// Every schedule at P = 1-5, M = 1 to 3P (interleaved: V = 2-4, M a multiple of P).
std::vector<Case> cases() {
  std::vector<Case> out;
  for (int P = 1; P <= 5; ++P)
    for (int M = 1; M <= 3 * P; ++M) {
      out.push_back({"gpipe", {P, 1, M}});
      out.push_back({"1f1b", {P, 1, M}});
      out.push_back({"zb-h1", {P, 1, M}});
      if (M % P == 0)
        for (int V = 2; V <= 4; ++V) out.push_back({"interleaved", {P, V, M}});
    }
  return out;
}

std::vector<std::vector<Tick>> play(const Case& c) {
  std::vector<std::vector<Action>> orders;
  for (int r = 0; r < c.pipe.ranks; ++r) orders.push_back(order(c.schedule, c.pipe, r));
  return lockstep(c.pipe, orders);
}

}  // namespace

TEST_CASE("ch11: each schedule runs every pass once, after what it needs, and what crosses arrives first", "[ch11]") {
  for (const Case& c : cases()) {
    const Pipeline& p = c.pipe;
    INFO(c.schedule << ", P " << p.ranks << ", V " << p.chunks << ", M " << p.micro_batches);
    const std::vector<std::vector<Tick>> ticks = play(c);
    REQUIRE(ticks.size() == static_cast<size_t>(p.ranks));
    // When each (pass, micro, stage) ran, and when its input or output gradient arrived.
    std::map<std::tuple<int, int, int>, int> ran, arrived;
    for (int r = 0; r < p.ranks; ++r) {
      REQUIRE(ticks[r].size() == ticks[0].size());  // one clock
      for (int t = 0; t < static_cast<int>(ticks[r].size()); ++t) {
        const Tick& tick = ticks[r][t];
        if (tick.run) {
          const auto key = std::make_tuple(static_cast<int>(tick.run->pass), tick.run->micro, stage_of(p, r, *tick.run));
          CHECK(ran.count(key) == 0);
          ran[key] = t;
        }
        for (const auto& in : {tick.forward_input, tick.output_grad})
          if (in) arrived[{static_cast<int>(in->pass), in->micro, stage_of(p, r, *in)}] = t;
      }
    }
    const int kinds = c.schedule == "zb-h1" ? 3 : 2;  // F, B (and W)
    CHECK(ran.size() == static_cast<size_t>(kinds * p.micro_batches * p.stages()));
    for (const auto& [key, t] : ran) {
      const auto [pass, micro, stage] = key;
      if (pass == static_cast<int>(Pass::forward)) {
        if (stage > 0) {
          CHECK(ran.at({pass, micro, stage - 1}) < t);
          CHECK(arrived.at(key) < t);  // arrived after the tick its producer ran in, before this one
        }
      } else if (pass == static_cast<int>(Pass::weight)) {
        CHECK(ran.at({static_cast<int>(Pass::backward), micro, stage}) < t);
      } else {
        CHECK(ran.at({static_cast<int>(Pass::forward), micro, stage}) < t);
        if (stage < p.stages() - 1) {
          CHECK(ran.at({pass, micro, stage + 1}) < t);
          CHECK(arrived.at(key) < t);
        }
      }
    }
  }
}

TEST_CASE("ch11: with equal passes the clock's idle share is (P - 1) / (V M + P - 1), ZB-H1's P - 1 ticks in 3 M + P - 1", "[ch11]") {
  for (const Case& c : cases()) {
    const Pipeline& p = c.pipe;
    INFO(c.schedule << ", P " << p.ranks << ", V " << p.chunks << ", M " << p.micro_batches);
    const std::vector<std::vector<Tick>> ticks = play(c);
    if (c.schedule == "zb-h1") {
      // 3 M passes; the idle ticks, P - 1 (T_F + T_B - T_W with each 1), once there are P
      // micro-batches to fill the pipeline; with fewer, one more for each missing.
      const int P = p.ranks, M = p.micro_batches;
      CHECK(ticks[0].size() == static_cast<size_t>(3 * M + P - 1 + std::max(0, P - M)));
      continue;
    }
    // A rank runs 2 V M passes; the step lasts 2 (V M + P - 1) ticks: it idles 2 (P - 1).
    CHECK(ticks[0].size() == static_cast<size_t>(2 * (p.chunks * p.micro_batches + p.ranks - 1)));
  }
}

TEST_CASE("ch11: GPipe holds M micro-batches' activations, 1F1B at most P - s on rank s, ZB-H1 at most P from F to W", "[ch11]") {
  for (const Case& c : cases()) {
    if (c.schedule == "interleaved") continue;
    const Pipeline& p = c.pipe;
    INFO(c.schedule << ", P " << p.ranks << ", M " << p.micro_batches);
    const std::vector<std::vector<Tick>> ticks = play(c);
    const bool zb = c.schedule == "zb-h1";
    for (int r = 0; r < p.ranks; ++r) {
      // Micro-batches held: one more at F, one fewer at the pass that frees the last of it.
      const int64_t most = peak_held(ticks[r], [&](const Action& a) {
        return a.pass == Pass::forward ? int64_t{1} : a.pass == (zb ? Pass::weight : Pass::backward) ? int64_t{-1} : 0;
      });
      if (zb) {
        // 1F1B's peak, P, on every stage: the later stages hold their W's back, and with them
        // what the W's read (a part of what F kept; B frees the rest).
        CHECK(most == std::min(p.ranks, p.micro_batches));
      } else {
        CHECK(most == (c.schedule == "gpipe" ? p.micro_batches : std::min(p.ranks - r, p.micro_batches)));
      }
    }
  }
}

TEST_CASE("ch11: an order that can never finish throws naming each rank's stuck pass", "[ch11]") {
  const Pipeline p{2, 1, 2};
  // Rank 0 wants micro-batch 1's backward before its forward: that backward needs rank 1's,
  // which needs rank 1's forward of micro-batch 1, which needs rank 0's.
  const std::vector<std::vector<Action>> orders = {
      {{Pass::forward, 0}, {Pass::backward, 1}, {Pass::forward, 1}, {Pass::backward, 0}}, one_f_one_b(p, 1)};
  CHECK_THROWS_WITH(lockstep(p, orders), "pipeline schedule never finishes: at tick 3 every rank waits for a pass "
                                         "that has not run (rank 0 at B1, rank 1 at F1)");
}

TEST_CASE("ch11: stages cut evenly, or so that the costliest is as cheap as it can be", "[ch11]") {
  CHECK(even_split(14, 4).back().first == 10);  // 3, 4, 3, 4 units: rank s takes units s U / P ..
  const std::vector<Units> even = even_split(14, 4);
  CHECK(even[0].count() + even[1].count() + even[2].count() + even[3].count() == 14);
  // A head that costs five blocks gets a stage of its own; the blocks share the rest.
  const std::vector<double> cost = {0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 5};
  const std::vector<Units> flops = balanced_split(cost, 4);
  REQUIRE(flops.size() == 4);
  CHECK(flops[3].first == 13);
  CHECK(flops[3].last == 13);
  CHECK(flops[0].first == 0);
  double worst = 0;
  for (const Units& u : flops) {
    double sum = 0;
    for (int i = u.first; i <= u.last; ++i) sum += cost[static_cast<size_t>(i)];
    worst = std::max(worst, sum);
    if (&u != &flops[0]) CHECK(u.first == (&u - 1)->last + 1);  // contiguous
  }
  CHECK(worst == 5);
  // As many stages as units: one each, whatever the costs.
  for (const Units& u : balanced_split(cost, 14)) CHECK(u.count() == 1);
  // GPT-2 small by FLOPs over 4 stages: the head alone on the last.
  const std::vector<Units> gpt2 = split_units("flops", shardlab::GPTConfig::preset("gpt2-small"), 4, 1024);
  CHECK(gpt2[3].first == 13);
}
