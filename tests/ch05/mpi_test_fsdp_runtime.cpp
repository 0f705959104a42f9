// Chapter 05's FsdpRuntime hook by hook: after each hook fsdp_step.h calls, which units hold
// their whole parameters, and how many times the runtime entered _unshard (where chapter 06's
// rate limiter waits, so an extra call is an extra CPU wait even when nothing is gathered). Under
// each BackwardPrefetch mode, with and without forward prefetch, FULL_SHARD against
// SHARD_GRAD_OP, against FSDP1's hooks (torch/distributed/fsdp/_runtime_utils.py). The chapter's
// runs check the loss and the timeline; a prefetch one unit off, a unit gathered twice or freed a
// hook late changes neither the loss nor, on a small model, the checks on the trace.
//
// FlatParam needs a Job, and a Job needs MPI: every rank runs the same hooks, so the collectives
// line up at any world size (world 1: nothing is sharded, and the flags are the same). Tagged
// [fsdp-hooks]. Units: 0 the root, 1..3 three blocks, --compute skip.
#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <vector>

#include "05_prefetch/fsdp_runtime.h"
#include "05_prefetch/fsdp_step.h"
#include "../mpi_job.h"

using namespace shardlab;
using ch05::BackwardPrefetch;
using ch05::FsdpOptions;

namespace {

constexpr int kBlocks = 3;

// The runtime, counting its _unshard calls through chapter 06's extension point.
class CountingRuntime : public ch05::FsdpRuntime {
 public:
  using FsdpRuntime::FsdpRuntime;
  int unshard_calls = 0;

 protected:
  void before_unshard() override { ++unshard_calls; }
};

struct Hooks {
  explicit Hooks(FsdpOptions options)
      : fsdp(job->device(), unshard, post, ch05::wrap_units(*job, model, 1234), options) {}

  std::unique_ptr<Job> job = make_test_job("05_prefetch_hooks", ComputeMode::skip);
  GPT model{job->device(), GPTConfig{"hooks", 32, 64, kBlocks, 32, 2}, 1, 8};
  Stream& unshard = job->device().create_stream("unshard");
  Stream& post = job->device().create_stream("post");
  CountingRuntime fsdp;
  std::vector<std::string> log;

  // "pre_backward(3): 0 2 3 +1": after the hook, the units unsharded and the _unshard calls it made.
  template <class F>
  void hook(const std::string& name, F&& call) {
    const int before = fsdp.unshard_calls;
    call();
    std::string line = name + ":";
    for (int u = 0; u < fsdp.units(); ++u)
      if (fsdp.flat(u).unsharded()) line.append(1, ' ').append(std::to_string(u));
    log.push_back(line.append(" +").append(std::to_string(fsdp.unshard_calls - before)));
  }

  // One forward and backward, the hooks in fsdp_step.h's order (no model: only the hooks run).
  std::vector<std::string> step() {
    log.clear();
    fsdp.root_pre_forward();
    hook("pre_forward(0)", [&] { fsdp.pre_forward(0); });
    for (int l = 1; l <= kBlocks; ++l) {
      hook("pre_forward(" + std::to_string(l) + ")", [&] { fsdp.pre_forward(l); });
      hook("post_forward(" + std::to_string(l) + ")", [&] { fsdp.post_forward(l); });
    }
    hook("post_forward(0)", [&] { fsdp.post_forward(0); });
    hook("pre_backward(0)", [&] { fsdp.pre_backward(0); });
    for (int l = kBlocks; l >= 1; --l) {
      hook("pre_backward(" + std::to_string(l) + ")", [&] { fsdp.pre_backward(l); });
      hook("post_backward(" + std::to_string(l) + ")", [&] { fsdp.post_backward(l); });
    }
    hook("post_backward(0)", [&] { fsdp.post_backward(0); });
    hook("end_of_backward", [&] { fsdp.end_of_backward(); });
    job->device().synchronize();
    return log;
  }
};

using Log = std::vector<std::string>;

// FULL_SHARD's forward without forward prefetch: each block whole from its pre-forward to its
// post-forward, the root from its pre-forward on (backward starts with it).
const Log kFullShardForward = {
    "pre_forward(0): 0 +1",  "pre_forward(1): 0 1 +1", "post_forward(1): 0 +0", "pre_forward(2): 0 2 +1",
    "post_forward(2): 0 +0", "pre_forward(3): 0 3 +1", "post_forward(3): 0 +0", "post_forward(0): 0 +0"};

Log concat(Log a, const Log& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

TEST_CASE("ch05: FsdpRuntime: BACKWARD_PRE gathers the unit before in each pre-backward hook, the root's the last block", "[fsdp-hooks]") {
  Hooks h(FsdpOptions{true, BackwardPrefetch::pre, false});
  const Log expected = concat(kFullShardForward, {
      "pre_backward(0): 0 3 +2",  // the root (already whole: no gather) and its prefetch of block 3
      "pre_backward(3): 0 2 3 +1",  // block 3 was prefetched: only block 2's prefetch
      "post_backward(3): 0 2 +0", "pre_backward(2): 0 1 2 +1", "post_backward(2): 0 1 +0",
      "pre_backward(1): 0 1 +0",  // block 1 ran first in forward: nothing before it
      "post_backward(1): 0 +0", "post_backward(0): +0", "end_of_backward: +0"});
  CHECK(h.step() == expected);
  CHECK(h.step() == expected);  // step 2: the prefetched marks were cleared at the end of backward
}

TEST_CASE("ch05: FsdpRuntime: BACKWARD_POST gathers the unit before in each post-backward hook, and the root's finds nothing left", "[fsdp-hooks]") {
  Hooks h(FsdpOptions{true, BackwardPrefetch::post, false});
  const Log expected = concat(kFullShardForward, {
      "pre_backward(0): 0 +1", "pre_backward(3): 0 3 +1",
      "post_backward(3): 0 2 +1",  // block 3 freed, then block 2 gathered
      "pre_backward(2): 0 2 +0", "post_backward(2): 0 1 +1", "pre_backward(1): 0 1 +0", "post_backward(1): 0 +0",
      "post_backward(0): +0",  // its target, block 3, has run its pre-backward: no prefetch
      "end_of_backward: +0"});
  CHECK(h.step() == expected);
  CHECK(h.step() == expected);
}

TEST_CASE("ch05: FsdpRuntime: without backward prefetch each unit is gathered in its own pre-backward hook", "[fsdp-hooks]") {
  Hooks h(FsdpOptions{true, BackwardPrefetch::none, false});
  const Log expected = concat(kFullShardForward, {
      "pre_backward(0): 0 +1", "pre_backward(3): 0 3 +1", "post_backward(3): 0 +0", "pre_backward(2): 0 2 +1",
      "post_backward(2): 0 +0", "pre_backward(1): 0 1 +1", "post_backward(1): 0 +0", "post_backward(0): +0",
      "end_of_backward: +0"});
  CHECK(h.step() == expected);
}

TEST_CASE("ch05: FsdpRuntime: forward prefetch gathers the next unit in each pre-forward hook from the second step on", "[fsdp-hooks]") {
  Hooks h(FsdpOptions{true, BackwardPrefetch::none, true});
  const Log step1 = h.step();
  // Step 1 records the order: nothing to prefetch yet.
  CHECK(Log(step1.begin(), step1.begin() + 8) == kFullShardForward);
  const Log step2 = h.step();
  CHECK(Log(step2.begin(), step2.begin() + 8) ==
        Log{"pre_forward(0): 0 1 +2",     // the root, and block 1 ahead of its hook
            "pre_forward(1): 0 1 2 +1",   // block 1 prefetched: only block 2's prefetch
            "post_forward(1): 0 2 +0", "pre_forward(2): 0 2 3 +1", "post_forward(2): 0 3 +0",
            "pre_forward(3): 0 3 +0",     // the last block: nothing after it
            "post_forward(3): 0 +0", "post_forward(0): 0 +0"});
  CHECK(h.step() == step2);
}

TEST_CASE("ch05: FsdpRuntime: SHARD_GRAD_OP keeps every unit's parameters from its forward to its post-backward", "[fsdp-hooks]") {
  Hooks h(FsdpOptions{false, BackwardPrefetch::pre, false});
  const Log expected = {
      "pre_forward(0): 0 +1", "pre_forward(1): 0 1 +1", "post_forward(1): 0 1 +0", "pre_forward(2): 0 1 2 +1",
      "post_forward(2): 0 1 2 +0", "pre_forward(3): 0 1 2 3 +1", "post_forward(3): 0 1 2 3 +0",
      "post_forward(0): 0 1 2 3 +0",
      // Backward prefetch still enters _unshard for its target, which gathers nothing: it is whole.
      "pre_backward(0): 0 1 2 3 +2", "pre_backward(3): 0 1 2 3 +1", "post_backward(3): 0 1 2 +0",
      "pre_backward(2): 0 1 2 +1", "post_backward(2): 0 1 +0", "pre_backward(1): 0 1 +0", "post_backward(1): 0 +0",
      "post_backward(0): +0", "end_of_backward: +0"};
  CHECK(h.step() == expected);
  CHECK(h.step() == expected);
}
