// stages.h: which of the model's units each pipeline stage runs.
//
// The model is L + 2 units in a row (the embeddings, L blocks, the head), and a stage runs a
// contiguous run of them. Two ways to cut:
//
//   even: the same number of units a stage, give or take one (DeepSpeed's "uniform"; Megatron
//     splits the blocks evenly). Simple, and blind to what a unit costs: GPT-2 small's head (a
//     768 x 50257 matmul and a softmax over 50257 logits a token) costs about as much as five
//     blocks, and the embeddings almost nothing, so the stage with the head sets the pace and
//     every other stage waits for it.
//   flops: the cut whose costliest stage is the cheapest, each unit weighed by its forward and
//     backward FLOPs (gpt_unit_flops). The head then gets a stage of its own, or nearly.
//     torchgpipe's balance_by_time does the same from measured times; Megatron leaves it to the
//     user (fewer layers on the first and last stage).
#pragma once

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "model/model.h"

namespace ch11 {

struct Units {
  int first = 0, last = 0;  // [first, last]
  int count() const { return last - first + 1; }
};

inline std::vector<Units> even_split(int units, int stages) {
  std::vector<Units> out;
  for (int k = 0; k < stages; ++k) out.push_back({k * units / stages, (k + 1) * units / stages - 1});
  return out;
}

// Contiguous runs of `cost` into `stages` non-empty runs, the largest run's sum as small as it can
// be (the classic linear partition; of equal cuts, the one whose stages begin earliest).
inline std::vector<Units> balanced_split(const std::vector<double>& cost, int stages) {
  // lab: begin 11.balance "the cut whose costliest stage is the cheapest (the linear partition)" #the-bubble-measured-balance-the-stages-first uses(cost, stages)
  const int U = static_cast<int>(cost.size());
  std::vector<double> prefix(static_cast<size_t>(U) + 1, 0.0);
  for (int u = 0; u < U; ++u) prefix[u + 1] = prefix[u] + cost[u];
  const double inf = std::numeric_limits<double>::infinity();
  // best[k][u]: the smallest largest run when the first u units make k stages; cut[k][u]: where
  // the k-th stage begins.
  std::vector<std::vector<double>> best(stages + 1, std::vector<double>(U + 1, inf));
  std::vector<std::vector<int>> cut(stages + 1, std::vector<int>(U + 1, 0));
  best[0][0] = 0;
  for (int k = 1; k <= stages; ++k)
    for (int u = k; u <= U; ++u)
      for (int begin = k - 1; begin < u; ++begin) {
        const double worst = std::max(best[k - 1][begin], prefix[u] - prefix[begin]);
        if (worst < best[k][u]) best[k][u] = worst, cut[k][u] = begin;
      }
  std::vector<Units> out(stages);
  for (int k = stages, u = U; k >= 1; --k) {
    out[k - 1] = {cut[k][u], u - 1};
    u = cut[k][u];
  }
  return out;
  // lab: end
}

// The stages' units for `split` ("even" or "flops") over S stages.
inline std::vector<Units> split_units(const std::string& split, const shardlab::GPTConfig& cfg, int stages, int64_t T) {
  const int U = static_cast<int>(cfg.layers) + 2;
  if (split == "even") return even_split(U, stages);
  std::vector<double> cost;
  for (int u = 0; u < U; ++u) cost.push_back(shardlab::gpt_unit_flops(cfg, u, T, T));  // per sequence: any count cuts alike
  return balanced_split(cost, stages);
}

}  // namespace ch11
