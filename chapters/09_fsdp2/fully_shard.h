// fully_shard.h: FSDP2's runtime: the hooks of fully_shard(model.h[i]) for every block and
// fully_shard(model) for the root, as torch/distributed/fsdp/_fully_shard/_fsdp_state.py and
// _fsdp_param_group.py run them, and one training step through them.
//
//   root_pre_forward   FSDP2's streams wait for the compute stream (the optimizer wrote the shards)
//   pre_forward(g)     unshard g (copy-in, all-gather) and wait for it (copy-out on compute); then
//                      the explicit forward prefetches, if any
//   post_forward(g)    reshard g (reshard_after_forward; the root keeps its parameters, as
//                      FSDP2's default does: backward starts with them); the root releases the
//                      last gathered buffer
//   pre_backward(g)    unshard g unless whole, wait; gradients to accumulate into; then prefetch:
//                      the explicit list, else the group before g in post-forward order
//   post_backward(g)   the reduce-scatter (param_group.h)
//   end_of_backward    the compute stream waits for every sharded gradient (the root's final
//                      callback)
//
// Prefetching in forward needs no code at all: unshard issues the copy-in and the all-gather
// on FSDP2's streams and returns, and the copy-out only makes the compute stream wait, so the
// CPU runs ahead and issues the next group's all-gather while the GPU still computes this one.
// What bounds it is memory: a group's gathered buffer is released only at the next group's
// copy-out, after the all-gather streams wait for its own copy-out.
#pragma once

#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "02_naive_ddp/data_parallel.h"
#include "05_prefetch/fsdp_step.h"
#include "09_fsdp2/param_group.h"

namespace ch09 {

struct Fsdp2Options {
  // reshard_after_forward, as the number of ranks a block's parameters stay spread over between
  // its forward and its backward (never the root's: FSDP2's default keeps them): the group's
  // size W (True, ZeRO-3: backward gathers them again), 1 (False, ZeRO-2: kept whole), or k
  // dividing W (an integer, ZeRO++'s hpZ: each rank keeps 1/k, backward gathers over k ranks).
  int reshard_after_forward = 0;  // 0: W
  // Explicit prefetching (set_modules_to_forward_prefetch / set_modules_to_backward_prefetch):
  // each block unshards the next `forward_prefetch` blocks after its own pre-forward, and the
  // `backward_prefetch` blocks before it after its pre-backward. 0: FSDP2's implicit prefetch.
  int forward_prefetch = 0;
  int backward_prefetch = 0;
  // MixedPrecisionPolicy(param_dtype, reduce_dtype=float32): the dtype the parameters are
  // gathered in and forward and backward compute in (f32, or bf16); the shards stay the float32
  // masters, the gradients are reduced in float32 and AdamW steps in float32.
  DType param_dtype = DType::f32;
};

class FullyShard {
 public:
  // Group 0 is the root: the embeddings, the final norm and so the tied head (the parameters
  // no block holds); group l the l-th block.
  // `frozen[i]`: model parameter i does not train (requires_grad=False). `init`: the parameters'
  // initial values (by default the seed's, gpt_init_param).
  FullyShard(Job& job, GPT& model, uint64_t seed, Comm& group, CommContext& ctx, Fsdp2Options options,
             const std::vector<bool>& frozen, ParamInit init = {})
      : dev_(job.device()), ctx_(ctx), options_(options) {
    if (!init) init = seeded_init(model.config(), seed);
    if (options_.reshard_after_forward == 0) options_.reshard_after_forward = group.size();
    const int k = options_.reshard_after_forward;
    if (k < 1 || group.size() % k != 0)
      throw std::invalid_argument("reshard_after_forward: " + std::to_string(k) + " ranks do not divide the group's " +
                                  std::to_string(group.size()));
    // hpZ's groups: k consecutive ranks each (FSDP2 views the mesh as (-1, k)).
    if (k > 1 && k < group.size()) post_forward_group_ = group.split(group.rank() / k, group.rank());
    const int L = static_cast<int>(model.config().layers);
    std::vector<int> root = model.params_of_unit(0);
    for (int i : model.params_of_unit(L + 1)) root.push_back(i);
    if (model.compute_dtype() != options_.param_dtype)
      throw std::invalid_argument("fully_shard: parameters in " + std::string(dtype_name(options_.param_dtype)) +
                                  " need a model computing in it, not in " + std::string(dtype_name(model.compute_dtype())));
    const DType dtype = options_.param_dtype;
    groups_.push_back(std::make_unique<FsdpParamGroup>(job, model, "root", root, init, group, ctx, frozen, dtype));
    for (int l = 1; l <= L; ++l)
      groups_.push_back(std::make_unique<FsdpParamGroup>(job, model, "block" + std::to_string(l - 1),
                                                         model.params_of_unit(l), init, group, ctx, frozen, dtype));
  }

  int groups() const { return static_cast<int>(groups_.size()); }
  FsdpParamGroup& group(int g) { return *groups_.at(static_cast<size_t>(g)); }

  void root_pre_forward() {
    HostScope scope(dev_, "FSDP::root_pre_forward");
    const Event optimizer_done = dev_.record(dev_.compute_stream());
    dev_.wait(ctx_.copy_in, optimizer_done);
    dev_.wait(ctx_.all_gather, optimizer_done);
  }

  void pre_forward(int g) {
    HostScope scope(dev_, "FSDP::pre_forward");
    group(g).unshard();
    group(g).wait_for_unshard(/*forward=*/true);
    if (g != 0)
      for (int k = 1; k <= options_.forward_prefetch && g + k < groups(); ++k) group(g + k).unshard();
  }

  void post_forward(int g) {
    HostScope scope(dev_, "FSDP::post_forward");
    post_forward_order_.push_back(g);
    const int k = options_.reshard_after_forward;
    if (g == 0) {
      group(0).release_held_all_gather();  // the last block's gathered buffer
    } else if (post_forward_group_) {
      group(g).reshard_to(*post_forward_group_);
    } else if (k > 1) {
      group(g).reshard();
    }
  }

  void pre_backward(int g) {
    HostScope scope(dev_, "FSDP::pre_backward");
    group(g).unshard();
    group(g).wait_for_unshard(/*forward=*/false);
    group(g).begin_grads();
    // A group with an explicit list prefetches it; one without (the root, the first block)
    // falls back to the implicit prefetch, as FSDPState._pre_backward does per module.
    if (options_.backward_prefetch > 0 && g >= 2) {
      for (int k = 1; k <= options_.backward_prefetch && g - k >= 1; ++k) group(g - k).unshard();
    } else if (const std::optional<int> before = before_in_post_forward_order(g)) {
      group(*before).unshard();
    }
  }

  void post_backward(int g) { group(g).post_backward(); }

  void end_of_backward() {
    HostScope scope(dev_, "FSDP::root_post_backward_final_callback");
    for (auto& x : groups_) x->finalize_backward();
    group(0).release_held_reduce_scatter();
    post_forward_order_.clear();
  }

  void optimizer_step(int64_t step, const ops::AdamW& hp) {
    for (auto& x : groups_) x->optimizer_step(step, hp);
  }

  // Every parameter and its AdamW first moment, whole, in model order (all ranks call).
  void gather(const GPT& model, std::vector<float>& params, std::vector<float>& moments) {
    int64_t n = 0;
    for (const ParamInfo& p : model.params()) n += p.shape.numel();
    params.assign(static_cast<size_t>(n), 0.0f);
    moments.assign(params.size(), 0.0f);
    for (auto& x : groups_) x->gather(params, moments);
  }

 private:
  // Implicit backward prefetch: the group that ran before g in forward runs after it in backward.
  std::optional<int> before_in_post_forward_order(int g) const {
    for (size_t i = 0; i < post_forward_order_.size(); ++i)
      if (post_forward_order_[i] == g) return i == 0 ? std::nullopt : std::optional<int>(post_forward_order_[i - 1]);
    return std::nullopt;
  }

  Device& dev_;
  CommContext& ctx_;
  Fsdp2Options options_;
  std::unique_ptr<Comm> post_forward_group_;  // hpZ's k ranks
  std::vector<std::unique_ptr<FsdpParamGroup>> groups_;
  std::vector<int> post_forward_order_;
};

// One step: forward and backward through the hooks in chapter 05's order (fsdp_step.h: where
// PyTorch's modules and autograd call them), then AdamW on the shards.
inline ch05::StepMarks train_step(Job::Step& s, Job& job, FullyShard& fsdp, GPT& model, ch02::BatchShare& batch,
                                  const TrainSetup& setup, int64_t step) {
  Device& dev = job.device();
  Stream& compute = dev.compute_stream();
  ch05::StepMarks marks;
  marks.start = dev.record(compute);
  batch.load(model, step, 0);
  marks.forward_done = ch05::forward_backward(dev, fsdp, model);
  fsdp.optimizer_step(step, setup.adamw);
  s.set_loss(model.mean_loss(compute));
  s.set_tokens(batch.tokens_per_step());
  return marks;
}

}  // namespace ch09
