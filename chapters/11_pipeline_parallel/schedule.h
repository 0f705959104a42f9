// schedule.h: which pass of which micro-batch a pipeline stage runs next.
//
// A schedule is, for each stage s of P, the order of its 2M passes: F m (forward of micro-batch
// m) and B m (its backward). Every stage runs the same micro-batches in the same order within
// each kind (a micro-batch's forward crosses the stages first to last, its backward last to
// first); schedules differ in how they interleave the two kinds.
//
//   GPipe (Huang et al. 2019): every forward, then every backward. Each stage holds the
//   activations of all M micro-batches at once.
//   1F1B (PipeDream-Flush, Narayanan et al. 2021): stage s runs P - s - 1 forwards to fill the
//   pipeline (warm-up), then alternates one forward and one backward, then drains the
//   backwards. A stage holds at most P - s micro-batches' activations, whatever M.
//
// Both flush: every backward of the step ends before the optimizer, so both compute exactly
// what one rank would on the whole batch, and both leave the same idle time, the bubble,
// (P - 1) / (M + P - 1) of the step when every stage takes the same time per pass.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

namespace ch11 {

enum class Pass { forward, backward };

struct Action {
  Pass pass;
  int micro;
  // This pass's receive goes in one sendrecv with the previous pass's send, to the same
  // neighbour: 1F1B's steady state, where two neighbours each send, then receive from the
  // other, and would both wait in their send (Megatron's send_forward_recv_backward and
  // send_backward_recv_forward). Everywhere else the neighbours' operations pair one by one.
  bool paired = false;
};

inline std::vector<Action> gpipe(int /*P*/, int /*s*/, int M) {
  std::vector<Action> order;
  for (int m = 0; m < M; ++m) order.push_back({Pass::forward, m, false});
  for (int m = 0; m < M; ++m) order.push_back({Pass::backward, m, false});
  return order;
}

inline std::vector<Action> one_f_one_b(int P, int s, int M) {
  const int warmup = std::min(P - s - 1, M);
  std::vector<Action> order;
  for (int m = 0; m < warmup; ++m) order.push_back({Pass::forward, m, false});
  for (int i = 0; i < M - warmup; ++i) {
    order.push_back({Pass::forward, warmup + i, i > 0});
    order.push_back({Pass::backward, i, true});
  }
  for (int m = M - warmup; m < M; ++m) order.push_back({Pass::backward, m, false});
  return order;
}

inline std::vector<Action> schedule(const std::string& name, int P, int s, int M) {
  return name == "gpipe" ? gpipe(P, s, M) : one_f_one_b(P, s, M);
}

}  // namespace ch11
