// flat_param.h: PyTorch FSDP1's FlatParameter, one per unit.
//
// DDP keeps a whole replica of the model on every rank. FSDP keeps 1/W of it: every unit's
// parameters are flattened into one buffer (in the model's order), padded to a multiple of W
// and cut into W equal shards; rank r keeps shard r, with its gradient and its AdamW moments.
// Just before a unit runs, its shards are all-gathered into the whole flat buffer (the
// unsharded FlatParameter), whose slices become the unit's parameters; right after, the buffer
// is freed again. Backward does the same and, after a unit's backward, reduce-scatters the
// unit's padded flat gradient, so each rank receives the sum of its own shard's gradients.
//
// Geometry (torch/distributed/fsdp/_flat_param.py, _get_shard): N elements over W ranks,
//   shard = ceil(N / W) elements; rank r holds [r shard, (r + 1) shard) of the padded buffer;
//   the last ranks hold the padding (zeros), possibly several of them, possibly nothing else.
//
// The group: the ranks a FlatParam is sharded over, and whose gradients it averages (FSDP's
// process_group). In this chapter, the whole world.
//
// Streams, as FSDP1's: all-gathers and the unsharded buffers' allocations on the unshard
// stream (the compute stream waits for it before the unit runs); reduce-scatters on the
// post-backward stream (it waits for the compute stream). A buffer used on a stream other than
// the one it was allocated on is record_stream'ed before it is freed, so the caching allocator
// cannot hand its memory out again while that stream may still use it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "run/job.h"
#include "model/model.h"
#include "model/ops.h"

namespace ch04 {

using namespace shardlab;

struct ShardLayout {
  int64_t numel;  // N, the unit's parameters
  int world;      // W
  // Elements every rank holds: N / W rounded up.
  int64_t shard() const {
    // lab: begin 04.shard-geometry "the shard geometry: shard size, and the real elements of each shard" #the-flatparameter uses()
    return (numel + world - 1) / world;
    // lab: end
  }
  int64_t padded() const { return shard() * world; }
  // Elements of rank `rank`'s shard that are parameters, not padding.
  int64_t valid(int rank) const {
    // lab: begin 04.shard-geometry "the shard geometry: shard size, and the real elements of each shard" #the-flatparameter uses(rank)
    return std::clamp<int64_t>(numel - rank * shard(), 0, shard());
    // lab: end
  }
  int64_t padding(int rank) const { return shard() - valid(rank); }
};

// Gradient averaging in two halves around the reduce-scatter, so the sum neither overflows
// nor loses precision in low precision: predivide by f, postdivide by W / f. f is PyTorch's
// DefaultState._get_gradient_predivide_factor (torch/distributed/algorithms/_comm_hooks/
// default_hooks.py): starting from 1, f doubles while f divides W and f * f < W. For W a power
// of two that is the smallest power of two with f * f >= W (1 -> 1, 2 -> 2, 4 -> 2, 8 -> 4,
// 16 -> 4, 64 -> 8); otherwise the doubling also stops at the first power of two that does not
// divide W, and W / f can be fractional (3 -> 2 and 1.5, 6 -> 4 and 1.5, 12 -> 4 and 3).
struct GradientFactors {
  double pre, post;
};
inline GradientFactors gradient_factors(int world) {
  int f = 1;
  while (world % f == 0 && world / f > f) f *= 2;
  return {static_cast<double>(f), static_cast<double>(world) / f};
}

class FlatParam {
 public:
  // `params`: the model parameters this unit flattens, in order. Every rank starts from the same
  // initial values (they depend on the seed only) and keeps its shard of them.
  // `group`: the ranks it is sharded over, the world unless said.
  FlatParam(Job& job, GPT& model, std::string name, std::vector<int> params, uint64_t seed)
      : FlatParam(job, model, std::move(name), std::move(params), seed, job.world()) {}
  FlatParam(Job& job, GPT& model, std::string name, std::vector<int> params, uint64_t seed, Comm& group)
      : job_(job), model_(model), name_(std::move(name)), params_(std::move(params)), group_(group),
        layout_{numel_of(model, params_), group.size()} {
    Device& dev = job.device();
    Stream& s = dev.compute_stream();
    const int64_t n = layout_.shard();
    shard_ = dev.empty({n}, DType::f32, s, name_ + ".shard");
    m_ = dev.empty({n}, DType::f32, s, name_ + ".adam.m");
    v_ = dev.empty({n}, DType::f32, s, name_ + ".adam.v");
    for (const Tensor* t : {&m_, &v_}) ops::fill(dev, s, *t, 0.0f);
    if (dev.computes()) {
      const std::vector<float> flat = initial_flat(model, seed);
      copy_to_device(dev, s, shard_, flat.data() + group_.rank() * n);
    }
  }

  virtual ~FlatParam() {
    Device& dev = job_.device();
    for (Tensor* t : {&full_, &full_grad_})
      if (t->defined() && t->alloc_id != shard_.alloc_id && t->alloc_id != grad_shard_.alloc_id) dev.free(*t);
    if (grad_shard_.defined()) dev.free(grad_shard_);
    for (Tensor* t : {&v_, &m_, &shard_}) dev.free(*t);
  }

  const std::string& name() const { return name_; }
  const ShardLayout& layout() const { return layout_; }
  bool sharded() const { return layout_.world > 1; }  // world 1: NO_SHARD, as PyTorch falls back
  // The ranks whose gradients are averaged: the group's. Virtual for a strategy that also keeps
  // copies of the group (chapter 07's HSDP).
  virtual int grad_world() const { return layout_.world; }
  bool unsharded() const { return full_.defined(); }

  // All-gather the shards into the whole padded flat buffer, on the unshard stream; the
  // parameters become views into its first N elements.
  void unshard(Stream& unshard_stream) {
    // A CPU op around the launch names the unit: the all-gather kernel alone says only its size
    // (the viewer shows it as "launched in ... FlatParam.unshard (block8)").
    HostScope scope(job_.device(), "FlatParam.unshard (" + name_ + ")");
    // lab: begin 04.unshard "unshard: all-gather the shards into the flat parameter, on the unshard stream" #the-flatparameter uses(unshard_stream)
    Device& dev = job_.device();
    if (!sharded()) {
      full_ = shard_;  // nothing to gather: the shard is the whole thing
    } else {
      full_ = dev.empty({layout_.padded()}, DType::f32, unshard_stream, name_ + ".unsharded");
      group_.all_gather(shard_, full_, unshard_stream);
    }
    ready_ = dev.record(unshard_stream);
    bind_views(model_.weights(), full_, model_.params(), params_);
    // lab: end
  }

  // The compute stream must not read the parameters before the all-gather has written them.
  void wait_unshard(Stream& compute) { job_.device().wait(compute, ready_); }

  // Free the unsharded buffer. It was allocated on the unshard stream but read by the compute
  // stream: record_stream first, or the next all-gather could overwrite it under a kernel.
  void reshard(Stream& compute) {
    Device& dev = job_.device();
    for (int i : params_) model_.weights()[static_cast<size_t>(i)] = Tensor{};
    if (sharded()) {
      dev.record_stream(full_, compute);
      dev.free(full_);
    }
    full_ = Tensor{};
  }

  // Before this unit's backward: a zeroed, padded flat gradient whose slices are the
  // parameters' gradients (backward accumulates into them).
  void begin_grad(Stream& compute) {
    Device& dev = job_.device();
    if (grad_world() == 1) {  // NO_SHARD: backward accumulates straight into the local gradient
      if (!grad_shard_.defined()) {
        grad_shard_ = dev.empty({layout_.padded()}, DType::f32, compute, name_ + ".grad");
        ops::fill(dev, compute, grad_shard_, 0.0f);
      }
      full_grad_ = grad_shard_;
    } else {
      full_grad_ = dev.empty({layout_.padded()}, DType::f32, compute, name_ + ".unsharded_grad");
      ops::fill(dev, compute, full_grad_, 0.0f);
    }
    bind_views(model_.grads(), full_grad_, model_.params(), params_);
  }

  // After this unit's backward: predivide, reduce-scatter (sum) on the post-backward stream,
  // postdivide, accumulate into this rank's gradient shard.
  void reduce_grad(Stream& compute, Stream& post) {
    if (grad_world() == 1) {
      release_grad_views();
      full_grad_ = Tensor{};
      return;
    }
    Tensor reduced = reduce_scatter_grad(compute, post);
    accumulate_grad(reduced, post, post);
  }

  // reduce_grad's two halves, which a later strategy may put more work between (chapter 07's
  // all-reduce across nodes). The first: predivide and reduce-scatter on `post`; returns this
  // rank's shard of the sum, allocated on `post` (a group of one has nothing to scatter: its
  // shard is the whole gradient).
  Tensor reduce_scatter_grad(Stream& compute, Stream& post) {
    HostScope scope(job_.device(), "FlatParam.reduce_scatter (" + name_ + ")");  // names the unit, as unshard's
    // lab: begin 04.reduce-grad "the gradient: predivide, reduce-scatter on the post-backward stream, postdivide, accumulate" #the-step uses(compute, post)
    Device& dev = job_.device();
    release_grad_views();
    dev.wait(post, dev.record(compute));  // the gradients exist before they travel
    ops::scale_(dev, post, full_grad_, static_cast<float>(1.0 / gradient_factors(grad_world()).pre));
    if (!sharded()) return full_grad_;
    Tensor reduced = dev.empty({layout_.shard()}, DType::f32, post, name_ + ".reduced_grad");
    group_.reduce_scatter(full_grad_, reduced, ReduceOp::sum, post);
    return reduced;
    // lab: end
  }
  // The second, on stream `s`: postdivide, then keep the result as this rank's gradient shard
  // (or add it to the one an earlier backward of this step left), free the rest.
  void accumulate_grad(Tensor reduced, Stream& s, Stream& post) {
    // lab: begin 04.reduce-grad "the gradient: predivide, reduce-scatter on the post-backward stream, postdivide, accumulate" #the-step uses(reduced, s, post)
    Device& dev = job_.device();
    const bool is_gradient = reduced.alloc_id == full_grad_.alloc_id;  // a group of one scattered nothing
    ops::scale_(dev, s, reduced, static_cast<float>(1.0 / gradient_factors(grad_world()).post));
    // Allocated on `post` (on the compute stream when it is the gradient itself) and used on
    // `post` and `s`: both must be done with it before its memory is reused.
    dev.record_stream(reduced, s);
    dev.record_stream(reduced, post);
    if (!grad_shard_.defined()) {
      grad_shard_ = reduced;  // zero_grad left no gradient: the reduced shard becomes it, no copy
    } else {
      ops::add_(dev, s, grad_shard_, reduced);  // a second backward this step: accumulate
      dev.free(reduced);
    }
    if (!is_gradient) {
      dev.record_stream(full_grad_, post);  // allocated on the compute stream, last used on post
      dev.free(full_grad_);
    }
    full_grad_ = Tensor{};
    // lab: end
  }

  // optimizer.zero_grad(set_to_none=True), PyTorch's default: the gradient shard is freed, not
  // zeroed, so between the optimizer and this unit's next reduce-scatter it takes no memory.
  void zero_grad() {
    if (grad_shard_.defined()) job_.device().free(grad_shard_);
  }

  // AdamW on this rank's shard only: 1/W of the optimizer's work and memory.
  void optimizer_step(Stream& compute, int64_t step, const ops::AdamW& hp) {
    ops::adamw(job_.device(), compute, shard_, grad_shard_, m_, v_, step + 1, hp);
  }

  // The whole unit's parameters, in the model's order, on the host (all ranks must call); and
  // AdamW's first moment of each.
  std::vector<float> gather(Stream& s) { return gather_whole(shard_, s); }
  std::vector<float> gather_moments(Stream& s) { return gather_whole(m_, s); }

  const std::vector<int>& params() const { return params_; }

 private:
  // The unit's whole flat buffer of which `piece` is this rank's shard, on the host.
  std::vector<float> gather_whole(const Tensor& piece, Stream& s) {
    Device& dev = job_.device();
    Tensor all = dev.empty({layout_.padded()}, DType::f32, s, name_ + ".gathered");
    if (sharded()) group_.all_gather(piece, all, s);
    else ops::copy(dev, s, all, piece);
    std::vector<float> host(static_cast<size_t>(layout_.padded()));
    copy_to_host(dev, s, host.data(), all);
    dev.free(all);
    host.resize(static_cast<size_t>(layout_.numel));
    return host;
  }

  // Autograd's gradients were views into the flat gradient: they end with it.
  void release_grad_views() {
    for (int i : params_) model_.grads()[static_cast<size_t>(i)] = Tensor{};
  }

  static int64_t numel_of(const GPT& model, const std::vector<int>& params) {
    int64_t n = 0;
    for (int i : params) n += model.params()[static_cast<size_t>(i)].shape.numel();
    return n;
  }

  // This unit's initial parameters, flattened in order and right-padded with zeros.
  std::vector<float> initial_flat(const GPT& model, uint64_t seed) const {
    std::vector<float> flat;
    flat.reserve(static_cast<size_t>(layout_.padded()));
    for (int i : params_) {
      std::vector<float> p(static_cast<size_t>(model.params()[static_cast<size_t>(i)].shape.numel()));
      gpt_init_param(model.config(), i, seed, p.data());
      flat.insert(flat.end(), p.begin(), p.end());
    }
    flat.resize(static_cast<size_t>(layout_.padded()), 0.0f);
    return flat;
  }

  Job& job_;
  GPT& model_;
  std::string name_;
  std::vector<int> params_;
  Comm& group_;
  ShardLayout layout_;
  Tensor shard_, m_, v_;     // persistent: this rank's 1/W
  Tensor grad_shard_;        // this rank's 1/W of the gradient, from its reduce-scatter to zero_grad
  Tensor full_, full_grad_;  // transient: the unsharded parameter and gradient
  Event ready_;
};

}  // namespace ch04
