// Chapter 05's ExecOrder (fsdp_runtime.h) against FSDP1's _ExecOrderData
// (torch/distributed/fsdp/_exec_order_utils.py): the forward prefetch follows the pre-forward
// order recorded in the first step only, the backward prefetch the reverse of the post-forward
// order recorded again every step, depth 1 both ways. The chapter's runs see these orders only
// through their timings; a prefetch aimed one unit off, or at a unit that never runs, still
// trains to the same loss. The hooks that use them (FsdpRuntime) need a Job, so MPI: their cases
// are in mpi_test_fsdp_runtime.cpp.
//
// The order a step records, as fsdp_step.h's forward_backward calls the hooks for units 0 (the
// root, wrapping the model) and blocks 1..L: pre-forward 0, 1, ..., L; post-forward 1, ..., L, 0.
#include <catch2/catch.hpp>

#include <optional>
#include <vector>

#include "05_prefetch/fsdp_runtime.h"

using ch05::ExecOrder;

namespace {

constexpr int kNone = -1;

int or_none(std::optional<int> u) { return u ? *u : kNone; }

// Every unit's forward and backward target, for units 0..n-1.
std::vector<int> forward_targets(const ExecOrder& o, int n) {
  std::vector<int> t;
  for (int u = 0; u < n; ++u) t.push_back(or_none(o.forward_target(u)));
  return t;
}
std::vector<int> backward_targets(const ExecOrder& o, int n) {
  std::vector<int> t;
  for (int u = 0; u < n; ++u) t.push_back(or_none(o.backward_target(u)));
  return t;
}

// One step's forward as the chapter's hooks record it: the root around blocks 1..L.
void record_forward(ExecOrder& o, int L) {
  o.record_pre_forward(0);
  for (int l = 1; l <= L; ++l) o.record_pre_forward(l), o.record_post_forward(l);
  o.record_post_forward(0);
}

}  // namespace

TEST_CASE("ch05: ExecOrder: before anything is recorded no unit has a target", "[prefetch]") {
  const ExecOrder o;
  for (int u : {0, 1, 2, 7}) {
    CHECK_FALSE(o.forward_target(u));
    CHECK_FALSE(o.backward_target(u));
  }
}

TEST_CASE("ch05: ExecOrder: in the first step the forward target is the next unit once it has run, so forward prefetch does nothing", "[prefetch]") {
  ExecOrder o;
  // The pre-forward hook asks for its target right after recording itself: the next unit is
  // not known yet.
  o.record_pre_forward(0);
  CHECK_FALSE(o.forward_target(0));
  o.record_pre_forward(1);
  CHECK_FALSE(o.forward_target(1));
  CHECK(or_none(o.forward_target(0)) == 1);  // known now, but unit 0's hook has passed
}

TEST_CASE("ch05: ExecOrder: forward targets follow the first step's pre-forward order, the last unit none", "[prefetch]") {
  ExecOrder o;
  record_forward(o, 3);
  o.next_step();
  CHECK(forward_targets(o, 4) == std::vector<int>{1, 2, 3, kNone});
  // Step 2 runs the blocks in another order: the recorded order stands (FSDP1 records it once
  // and only warns when it changes).
  o.record_pre_forward(0);
  for (int l : {3, 2, 1}) o.record_pre_forward(l), o.record_post_forward(l);
  o.record_post_forward(0);
  CHECK(forward_targets(o, 4) == std::vector<int>{1, 2, 3, kNone});
}

TEST_CASE("ch05: ExecOrder: a unit run twice in the first step is recorded once, at its first run", "[prefetch]") {
  ExecOrder o;
  for (int u : {0, 1, 2, 1, 3}) o.record_pre_forward(u);  // 1 is called again (weights reused)
  o.next_step();
  CHECK(forward_targets(o, 4) == std::vector<int>{1, 2, 3, kNone});
}

TEST_CASE("ch05: ExecOrder: the backward target is the unit before in post-forward order: the root's is the last block", "[prefetch]") {
  ExecOrder o;
  record_forward(o, 3);  // post-forward: 1, 2, 3, 0
  // Backward runs the other way: the root's pre-backward prefetches block 3, block 3's block 2,
  // ..., block 1 (the first to have run forward) nothing.
  CHECK(backward_targets(o, 4) == std::vector<int>{3, kNone, 1, 2});
}

TEST_CASE("ch05: ExecOrder: the post-forward order is recorded again every step", "[prefetch]") {
  ExecOrder o;
  record_forward(o, 3);
  o.next_step();
  // Between the end of backward and the next forward nothing is known to prefetch in backward.
  CHECK(backward_targets(o, 4) == std::vector<int>{kNone, kNone, kNone, kNone});
  // Step 2's forward runs the blocks 3, 1, 2: backward follows this step's order, not step 1's.
  o.record_pre_forward(0);
  for (int l : {3, 1, 2}) o.record_pre_forward(l), o.record_post_forward(l);
  o.record_post_forward(0);
  CHECK(backward_targets(o, 4) == std::vector<int>{2, 3, 1, kNone});
}

TEST_CASE("ch05: ExecOrder: units that never run are never a target and have none", "[prefetch]") {
  ExecOrder o;
  // Units 0..4 exist; 2 and 4 never run (a branch the model does not take).
  o.record_pre_forward(0);
  for (int l : {1, 3}) o.record_pre_forward(l), o.record_post_forward(l);
  o.record_post_forward(0);
  CHECK(backward_targets(o, 5) == std::vector<int>{3, kNone, kNone, 1, kNone});
  o.next_step();
  CHECK(forward_targets(o, 5) == std::vector<int>{1, 3, kNone, kNone, kNone});
  // Unit 2 runs from step 2 on: too late for the forward order, fixed in step 1.
  o.record_pre_forward(0);
  for (int l : {1, 2, 3}) o.record_pre_forward(l), o.record_post_forward(l);
  o.record_post_forward(0);
  CHECK(forward_targets(o, 5) == std::vector<int>{1, 3, kNone, kNone, kNone});
  CHECK(backward_targets(o, 5) == std::vector<int>{3, kNone, 1, 2, kNone});
}
