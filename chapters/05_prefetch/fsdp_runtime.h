// fsdp_runtime.h: FSDP1's runtime as hooks, with prefetching (chapters 05 to 07 build on it).
//
// Chapter 04 drove its FlatParams from one loop. PyTorch's FSDP1 drives them from hooks that
// autograd and the module's forward call (torch/distributed/fsdp/_runtime_utils.py); this file
// is those hooks, one method each, in the order a step calls them:
//
//   root_pre_forward   the unshard stream waits for the compute stream (the last optimizer step
//                      wrote the shards it will gather); forward prefetch re-arms every unit
//   pre_forward(u)     unshard u unless prefetched; compute waits for the unshard stream;
//                      THEN prefetch the next unit (forward_prefetch, from the second step)
//   post_forward(u)    record the post-forward order; reshard u (FULL_SHARD, never the root)
//   pre_backward(u)    unshard u unless prefetched; compute waits; THEN prefetch the next unit
//                      (BACKWARD_PRE); a zeroed flat gradient
//   post_backward(u)   reshard u; prefetch the next unit (BACKWARD_POST); reduce-scatter u's
//                      gradient on the post-backward stream
//   end_of_backward    compute waits for the post-backward stream; the next step begins
//
// "THEN" is the point of the chapter: the compute stream's wait is enqueued before the
// prefetch is issued, so unit u's kernels never wait for unit u+1's all-gather.
//
// Which unit is "next" (_exec_order_utils.py): in forward, the one after u in the pre-forward
// order recorded in the first step (so forward prefetch does nothing in step 1); in backward,
// the one before u in the post-forward order, recorded every step. Depth 1 in both.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "04_fsdp/flat_param.h"

namespace ch05 {

using namespace shardlab;

enum class BackwardPrefetch { none, pre, post };

inline std::string to_string(BackwardPrefetch p) {
  return p == BackwardPrefetch::pre ? "BACKWARD_PRE" : p == BackwardPrefetch::post ? "BACKWARD_POST" : "none";
}

struct FsdpOptions {
  bool full_shard = true;  // FULL_SHARD; false: SHARD_GRAD_OP (parameters kept from forward to backward)
  BackwardPrefetch backward_prefetch = BackwardPrefetch::pre;  // PyTorch's default
  bool forward_prefetch = false;                               // PyTorch's default
};

// The orders prefetching follows (FSDP1's _ExecOrderData).
class ExecOrder {
 public:
  void record_pre_forward(int u) {
    if (first_step_ && !contains(pre_forward_, u)) pre_forward_.push_back(u);
  }
  void record_post_forward(int u) { post_forward_.push_back(u); }
  // End of backward: the pre-forward order is fixed from now on; the post-forward order is
  // recorded again in the next step.
  void next_step() { first_step_ = false, post_forward_.clear(); }

  // The unit to prefetch after unit u's hook, if any.
  std::optional<int> forward_target(int u) const {
    // lab: begin 05.prefetch-target "which unit to prefetch: the next in forward, the one before in backward" #when-each-mode-issues-the-all-gather uses(u)
    return neighbour(pre_forward_, u, +1);
    // lab: end
  }
  std::optional<int> backward_target(int u) const {
    // lab: begin 05.prefetch-target "which unit to prefetch: the next in forward, the one before in backward" #when-each-mode-issues-the-all-gather uses(u)
    return neighbour(post_forward_, u, -1);
    // lab: end
  }

 private:
  static bool contains(const std::vector<int>& order, int u) {
    for (int v : order)
      if (v == u) return true;
    return false;
  }
  static std::optional<int> neighbour(const std::vector<int>& order, int u, int offset) {
    for (size_t i = 0; i < order.size(); ++i)
      if (order[i] == u) {
        const size_t j = i + static_cast<size_t>(offset);  // wraps to a huge value below 0
        if (j < order.size()) return order[j];
        return std::nullopt;
      }
    return std::nullopt;
  }
  bool first_step_ = true;
  std::vector<int> pre_forward_, post_forward_;
};

class FsdpRuntime {
 public:
  // Unit 0 is the root (it wraps the whole model); units 1..n-1 are nested in it. FSDP's own
  // streams: `unshard` for the all-gathers and their buffers, `post` for the reduce-scatters.
  FsdpRuntime(Device& dev, Stream& unshard, Stream& post, std::vector<std::unique_ptr<ch04::FlatParam>> units,
              FsdpOptions options)
      : dev_(dev), compute_(dev.compute_stream()), post_(post), unshard_(unshard), options_(options) {
    for (auto& flat : units) units_.push_back({std::move(flat)});
  }
  virtual ~FsdpRuntime() = default;
  FsdpRuntime(const FsdpRuntime&) = delete;
  FsdpRuntime& operator=(const FsdpRuntime&) = delete;

  int units() const { return static_cast<int>(units_.size()); }
  ch04::FlatParam& flat(int u) { return *unit(u).flat; }
  // Every unit's FlatParam: together they hold each parameter once (the reference check's input).
  std::vector<ch04::FlatParam*> flat_params() {
    std::vector<ch04::FlatParam*> all;
    for (Unit& x : units_) all.push_back(x.flat.get());
    return all;
  }

  void root_pre_forward() {
    HostScope scope(dev_, "FullyShardedDataParallel._root_pre_forward");
    dev_.wait(unshard_, dev_.record(compute_));
    if (options_.forward_prefetch)
      for (Unit& x : units_) x.needs_pre_forward_unshard = true, x.prefetched = false;
  }

  void pre_forward(int u) {
    HostScope scope(dev_, "FullyShardedDataParallel._pre_forward");
    // lab: begin 05.unshard-hooks "the pre-forward and pre-backward hooks: unshard unless prefetched, wait, THEN prefetch" #the-hooks uses(u)
    order_.record_pre_forward(u);
    Unit& x = unit(u);
    if (!x.prefetched) unshard(x);
    x.needs_pre_forward_unshard = false;
    dev_.wait(compute_, dev_.record(unshard_));  // compute waits for what is queued so far...
    if (options_.forward_prefetch) prefetch(order_.forward_target(u), /*backward=*/false);  // ...then the prefetch
    // lab: end
  }

  void post_forward(int u) {
    HostScope scope(dev_, "FullyShardedDataParallel._post_forward");
    order_.record_post_forward(u);
    Unit& x = unit(u);
    // The root is never freed after forward: backward starts with it.
    if (options_.full_shard && u != 0) reshard(x);
    x.prefetched = false;
    x.needs_pre_backward_unshard = true;  // its output now carries the pre-backward hook
    x.ran_pre_backward = false;
  }

  void pre_backward(int u) {
    Unit& x = unit(u);
    if (x.ran_pre_backward) return;  // once per unit, however many outputs it has
    HostScope scope(dev_, "FullyShardedDataParallel._pre_backward_hook");
    // lab: begin 05.unshard-hooks "the pre-forward and pre-backward hooks: unshard unless prefetched, wait, THEN prefetch" #the-hooks uses(u)
    if (x.needs_pre_backward_unshard) {
      if (!x.prefetched) unshard(x);
      dev_.wait(compute_, dev_.record(unshard_));
    }
    x.needs_pre_backward_unshard = false;
    if (options_.backward_prefetch == BackwardPrefetch::pre) prefetch(order_.backward_target(u), /*backward=*/true);
    // lab: end
    x.flat->begin_grad(compute_);
    x.ran_pre_backward = true;
  }

  void post_backward(int u) {
    HostScope scope(dev_, "FullyShardedDataParallel._post_backward_hook");
    Unit& x = unit(u);
    reshard(x);
    if (options_.backward_prefetch == BackwardPrefetch::post) prefetch(order_.backward_target(u), /*backward=*/true);
    reduce_grad(*x.flat);
  }

  void end_of_backward() {
    HostScope scope(dev_, "FullyShardedDataParallel._post_backward_final_callback");
    wait_for_gradients();  // the optimizer needs every gradient shard
    for (Unit& x : units_) x.prefetched = false, x.ran_pre_backward = false;
    order_.next_step();
  }

 protected:
  // Where later chapters extend the runtime. Chapter 06's rate limiter: called in every
  // _unshard before its all-gather is issued, and after every reshard that freed memory.
  virtual void before_unshard() {}
  virtual void after_free() {}
  // Chapter 07's HSDP: how a unit's gradient is reduced, and what the end of backward waits for.
  virtual void reduce_grad(ch04::FlatParam& flat) { flat.reduce_grad(compute_, post_); }
  virtual void wait_for_gradients() { dev_.wait(compute_, dev_.record(post_)); }

  Device& dev_;
  Stream& compute_;
  Stream& post_;

 private:
  // A FlatParam and FSDP1's flags on its handle (FlatParamHandle).
  struct Unit {
    std::unique_ptr<ch04::FlatParam> flat;
    bool prefetched = false;                  // unsharded ahead of its own hook
    bool needs_pre_forward_unshard = false;   // guards against a mistargeted forward prefetch
    bool needs_pre_backward_unshard = false;  // ... and backward prefetch
    bool ran_pre_backward = false;
  };

  Unit& unit(int u) { return units_.at(static_cast<size_t>(u)); }

  // An all-gather on the unshard stream, unless the parameters are whole already
  // (SHARD_GRAD_OP keeps them from forward to the end of backward).
  void unshard(Unit& x) {
    before_unshard();
    if (!x.flat->unsharded()) x.flat->unshard(unshard_);
  }

  void reshard(Unit& x) {
    const bool frees = x.flat->unsharded() && x.flat->sharded();
    if (x.flat->unsharded()) x.flat->reshard(compute_);
    if (frees) after_free();
    x.prefetched = false;
  }

  // _prefetch_handle: unshard the target ahead of its hook, if its hook is still to come and
  // nobody unsharded it yet.
  void prefetch(std::optional<int> target, bool backward) {
    if (!target) return;
    Unit& x = unit(*target);
    const bool needed = backward ? x.needs_pre_backward_unshard : x.needs_pre_forward_unshard;
    if (!needed || x.prefetched) return;
    HostScope scope(dev_, backward ? "FullyShardedDataParallel._prefetch_handle (backward)"
                                   : "FullyShardedDataParallel._prefetch_handle (forward)");
    unshard(x);
    x.prefetched = true;
  }

  Stream& unshard_;
  FsdpOptions options_;
  std::vector<Unit> units_;
  ExecOrder order_;
};

}  // namespace ch05
