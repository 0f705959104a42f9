// param_group.h: FSDP2's FSDPParamGroup: the parameters of one fully_shard call, gathered by one
// all-gather and reduced by one reduce-scatter, and the streams and events around them.
//
// One collective per group, however many parameters of whatever sizes it holds, needs one flat
// buffer per rank: a slot of sum(padded chunk) elements, parameter after parameter in the
// group's order. So FSDP2 copies around each collective (_fully_shard/_fsdp_collectives.py):
//
//   all-gather   copy-in (foreach_all_gather): each parameter's padded chunk into this rank's
//                slot of the gathered buffer, on the copy-in stream; the all-gather in place
//                on the all-gather stream; copy-out (split_with_sizes_copy) on the compute
//                stream: the [W, slot] buffer split along its columns into each parameter's
//                padded [W, c] rows, whose first d0 rows are the parameter.
//   reduce       copy-in (chunk_cat) on the compute stream: each gradient's r-th chunk, padded,
//                into row r of a [W, grad slot] buffer; the reduce-scatter (average) on the
//                reduce-scatter stream, whose output slot holds this rank's chunk of every
//                gradient: the sharded gradients are views into it. Only the parameters that
//                train have gradients: a frozen one (requires_grad=False) is gathered, never
//                reduced, and a group with none to train reduces nothing.
//
// Chapter 05 freed the gathered buffer at once and told the allocator with record_stream
// that another stream still reads it; the memory came back only when the CPU saw that work done,
// late and unpredictably (chapter 06's thrash). FSDP2 never calls record_stream: a buffer stays
// referenced until a later point at which the stream that will reuse its memory has been made
// to wait for the last work that reads it (the CommContext below holds it until then).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>
#include <memory>

#include "09_fsdp2/fsdp_param.h"
#include "comm/comm.h"

namespace ch09 {

// What every group shares (FSDPCommContext): FSDP2's own streams and the one buffer of each
// kind a group leaves for the next group to release.
struct CommContext {
  CommContext(Stream& copy_in_stream, Stream& all_gather_stream, Stream& reduce_scatter_stream)
      : copy_in(copy_in_stream), all_gather(all_gather_stream), reduce_scatter(reduce_scatter_stream) {}
  Stream& copy_in;         // all-gather copy-in, and the gathered buffers' memory
  Stream& all_gather;      // the all-gathers (so the collective waits on this stream, not on compute)
  Stream& reduce_scatter;  // the reduce-scatters, their outputs, the sharded gradients
  // A buffer and the event after its last reader: whoever releases it first makes the streams
  // that allocate from its pool wait for that event.
  struct Held {
    Tensor buffer;
    Event done;
  };
  std::optional<Held> all_gather_state;      // forward: the previous group's gathered buffer
  std::optional<Held> reduce_scatter_state;  // backward: the previous group's reduce-scatter input
};

class FsdpParamGroup {
 public:
  // The parameters `params` of `model` (indices, in the group's order), sharded over `group`;
  // `frozen[i]`: model parameter i does not train.
  // `param_dtype`: what the parameters are gathered and computed in (MixedPrecisionPolicy's
  // param_dtype: f32, or bf16); the shards, the reduction and AdamW stay float32.
  FsdpParamGroup(Job& job, GPT& model, std::string name, const std::vector<int>& params, const ParamInit& init,
                 Comm& group, CommContext& ctx, const std::vector<bool>& frozen, DType param_dtype)
      : job_(job), model_(model), name_(std::move(name)), group_(group), ctx_(ctx), param_dtype_(param_dtype) {
    for (int i : params) {
      const bool trains = !frozen[static_cast<size_t>(i)];
      params_.push_back(std::make_unique<FsdpParam>(job, model, i, group.rank(), group.size(), init, trains));
      const int64_t padded = params_.back()->chunks().padded_numel();
      offsets_.push_back(slot_);
      slot_ += padded;
      grad_offsets_.push_back(trains ? grad_slot_ : -1);
      if (trains) grad_slot_ += padded;
    }
  }
  ~FsdpParamGroup() {
    Device& dev = job_.device();
    for (Tensor* t : {&gathered_, &grad_shards_})
      if (t->defined()) dev.free(*t);
    for (Tensor& t : post_forward_) dev.free(t);
    if (unsharded()) reshard();
  }
  FsdpParamGroup(const FsdpParamGroup&) = delete;
  FsdpParamGroup& operator=(const FsdpParamGroup&) = delete;

  const std::string& name() const { return name_; }
  int world() const { return group_.size(); }
  int64_t slot() const { return slot_; }            // elements each rank sends and receives in an all-gather
  int64_t grad_slot() const { return grad_slot_; }  // and in a reduce-scatter: the parameters that train
  const std::vector<std::unique_ptr<FsdpParam>>& params() const { return params_; }
  bool unsharded() const { return !unsharded_.empty(); }
  bool unshard_pending() const { return gathered_.defined(); }

  // Copy-in and all-gather on FSDP2's streams; the CPU does not wait. Nothing to do when the
  // parameters are whole already or their all-gather is issued.
  void unshard() {
    if (unsharded() || unshard_pending()) return;
    HostScope scope(job_.device(), "FSDP::all_gather (" + name_ + ")");
    Device& dev = job_.device();
    // After a forward that resharded to a smaller group (reshard_to), gather from it: its k
    // ranks hold every row between them, in the same layout, W / k times the rows each.
    const bool from_post_forward = !post_forward_.empty();
    Comm& group = from_post_forward ? *post_forward_group_ : group_;
    if (from_post_forward) {  // the copy-in reads what the compute stream wrote after forward
      dev.wait(ctx_.copy_in, post_forward_ready_);
      dev.wait(ctx_.all_gather, post_forward_ready_);
    }
    gather_ranks_ = group.size();
    const int64_t slot = slot_ * world() / gather_ranks_;
    // In bf16 the copy-in casts each float32 shard as it copies it (foreach_all_gather's
    // all-gather input has the param dtype): the all-gather moves half the bytes.
    gathered_ = dev.empty({gather_ranks_ * slot}, param_dtype_, ctx_.copy_in, name_ + ".all_gather_output");
    const Tensor mine = gathered_.view(group.rank() * slot, {slot});  // the all-gather runs in place
    std::vector<ops::CopyBlock> copy_in;
    for (size_t i = 0; i < params_.size(); ++i) {
      const Tensor& part = from_post_forward ? post_forward_[i] : params_[i]->sharded();
      const int64_t n = part.numel();
      copy_in.push_back({part, mine.view(offsets_[i] * world() / gather_ranks_, {n}), n, n, n});
    }
    ops::copy_blocks(dev, ctx_.copy_in, "all_gather_copy_in", 1, copy_in);
    dev.wait(ctx_.all_gather, dev.record(ctx_.copy_in));  // the collective reads what the copy-in wrote
    if (gather_ranks_ > 1) group.all_gather(mine, gathered_, ctx_.all_gather);
    gathered_ready_ = dev.record(ctx_.all_gather);
  }

  // Copy-out on the compute stream, which first waits for the all-gather; the parameters become
  // views of their unsharded tensors. In forward the gathered buffer stays referenced (in the
  // context) until the next group's copy-out; elsewhere it is released at once, both
  // all-gather streams waiting for this copy-out first.
  void wait_for_unshard(bool forward) {
    if (!unshard_pending()) return;
    HostScope scope(job_.device(), "FSDP::wait_for_unshard (" + name_ + ")");
    Device& dev = job_.device();
    Stream& compute = dev.compute_stream();
    if (forward) release_held_all_gather();  // the previous group's buffer: its copy-out is queued
    dev.wait(compute, gathered_ready_);
    // The gathered buffer is [G, slot] for G gathering ranks: row g is rank g's slot. Split
    // along the columns, each parameter's [G, W n / G] block is its padded rows in order.
    const int W = world(), G = gather_ranks_;
    const int64_t slot = slot_ * W / G;
    // lab: begin 09.copy-out "the all-gather's copy-out: each parameter's padded rows out of the [G, slot] buffer, one kernel" #one-collective-a-group-and-the-copies-around-it uses(W, G, slot, param_dtype_)
    std::vector<ops::CopyBlock> copy_out;
    for (size_t i = 0; i < params_.size(); ++i) {
      FsdpParam& p = *params_[i];
      const int64_t width = p.chunks().padded_numel() * W / G, offset = offsets_[i] * W / G;
      const Tensor whole = dev.empty({W * p.chunks().padded_numel()}, param_dtype_, compute, p.name() + ".unsharded");
      copy_out.push_back({gathered_.view(offset, {G * slot - offset}), whole, slot, width, width});
      unsharded_.push_back(whole);
      model_.weights()[static_cast<size_t>(p.index())] = whole.view(0, p.shape());  // the first d0 rows
    }
    ops::copy_blocks(dev, compute, "split_with_sizes_copy", G, copy_out);
    // lab: end
    // The post-forward parts were read by the copy-in, which the compute stream has waited for
    // (through the all-gather): their memory (compute's) is free to go.
    for (Tensor& t : post_forward_) dev.free(t);
    post_forward_.clear();
    const Event copied_out = dev.record(compute);
    if (forward) {
      ctx_.all_gather_state = CommContext::Held{gathered_, copied_out};
    } else {
      dev.wait(ctx_.copy_in, copied_out);
      dev.wait(ctx_.all_gather, copied_out);
      dev.free(gathered_);
    }
    gathered_ = Tensor{};
  }

  // The root's post-forward: release the last group's gathered buffer (no next copy-out will).
  void release_held_all_gather() {
    if (!ctx_.all_gather_state) return;
    Device& dev = job_.device();
    dev.wait(ctx_.copy_in, ctx_.all_gather_state->done);
    dev.wait(ctx_.all_gather, ctx_.all_gather_state->done);
    dev.free(ctx_.all_gather_state->buffer);
    ctx_.all_gather_state.reset();
  }

  // Free the unsharded parameters: allocated and read on the compute stream, nothing to wait for.
  void reshard() {
    Device& dev = job_.device();
    for (auto& p : params_) model_.weights()[static_cast<size_t>(p->index())] = Tensor{};
    for (Tensor& t : unsharded_) dev.free(t);
    unsharded_.clear();
  }

  // reshard_after_forward=k (ZeRO++'s hpZ): instead of freeing the parameters after forward,
  // keep 1/k of each (a copy, so the whole can go) for backward to gather over the k ranks of
  // `small`, a group of consecutive ranks: W/k times the memory of a shard (W the world), none of
  // the all-gather across the rest of the world (FSDPParam.to_sharded_post_forward).
  void reshard_to(Comm& small) {
    Device& dev = job_.device();
    Stream& compute = dev.compute_stream();
    post_forward_group_ = &small;
    for (size_t i = 0; i < params_.size(); ++i) {
      const int64_t n = unsharded_[i].numel() / small.size();
      Tensor part = dev.empty({n}, param_dtype_, compute, params_[i]->name() + ".sharded_post_forward");
      ops::copy(dev, compute, part, unsharded_[i].view(small.rank() * n, {n}));
      post_forward_.push_back(part);
    }
    post_forward_ready_ = dev.record(compute);
    reshard();
  }

  // Before backward reaches the group: zeroed gradients for its parameters (autograd's, which
  // backward accumulates into; one buffer for the group, one fill), in the parameters' dtype.
  // A frozen parameter's gradient stays undefined: backward skips it.
  void begin_grads() {
    Device& dev = job_.device();
    Stream& compute = dev.compute_stream();
    int64_t n = 0;
    for (auto& p : params_)
      if (p->requires_grad()) n += p->chunks().numel();
    if (n == 0) return;
    grads_ = dev.empty({n}, param_dtype_, compute, name_ + ".unsharded_grads");
    ops::fill(dev, compute, grads_, 0.0f);
    int64_t offset = 0;
    for (auto& p : params_) {
      if (!p->requires_grad()) continue;
      model_.grads()[static_cast<size_t>(p->index())] = grads_.view(offset, p->shape());
      offset += p->chunks().numel();
    }
  }

  // After the group's backward: the reduce-scatter's copy-in on the compute stream, the
  // gradients freed, the parameters resharded, then the reduce-scatter and the sharded
  // gradients on the reduce-scatter stream.
  void post_backward() {
    HostScope scope(job_.device(), "FSDP::post_backward (" + name_ + ")");
    Device& dev = job_.device();
    Stream& compute = dev.compute_stream();
    const int W = world();
    if (!grads_.defined()) {  // every parameter frozen: nothing to reduce
      reshard();
      return;
    }
    // The previous group's reduce-scatter input: compute waits for that reduce-scatter before
    // its memory (compute's pool) can be handed out again.
    // lab: begin 09.reduce-scatter "release the last reduce-scatter's input without record_stream, then the copy-in of this one (chunk_cat)" #one-collective-a-group-and-the-copies-around-it uses()
    if (ctx_.reduce_scatter_state) {
      dev.wait(compute, ctx_.reduce_scatter_state->done);
      dev.free(ctx_.reduce_scatter_state->buffer);
      ctx_.reduce_scatter_state.reset();
    }
    // lab: end
    const int64_t slot = grad_slot_;
    // The reduce dtype is float32 whatever the parameters': in bf16 chunk_cat widens each
    // gradient as it copies it (foreach_reduce's input has reduce_dtype), and the reduce-scatter
    // sums W float32 shares, not W bf16 ones (each sum would round to 8 bits of mantissa).
    const Tensor input = dev.empty({W * slot}, DType::f32, compute, name_ + ".reduce_scatter_input");
    // lab: begin 09.reduce-scatter "release the last reduce-scatter's input without record_stream, then the copy-in of this one (chunk_cat)" #one-collective-a-group-and-the-copies-around-it uses(input, slot)
    std::vector<ops::CopyBlock> chunk_cat;
    int64_t offset = 0;
    for (size_t i = 0; i < params_.size(); ++i) {
      if (!params_[i]->requires_grad()) continue;
      const Dim0Chunks& c = params_[i]->chunks();
      const int64_t at = grad_offsets_[i];
      chunk_cat.push_back({grads_.view(offset, {c.numel()}), input.view(at, {W * slot - at}), c.padded_numel(), slot,
                           c.padded_numel()});
      offset += c.numel();
    }
    ops::copy_blocks(dev, compute, "chunk_cat", W, chunk_cat);
    // lab: end
    for (auto& p : params_) model_.grads()[static_cast<size_t>(p->index())] = Tensor{};
    dev.free(grads_);  // read by the copy-in, on its own stream: free at once
    grads_ = Tensor{};
    reshard();

    dev.wait(ctx_.reduce_scatter, dev.record(compute));  // the copy-in is done
    Tensor output = dev.empty({slot}, DType::f32, ctx_.reduce_scatter, name_ + ".reduce_scatter_output");
    if (W > 1) group_.reduce_scatter(input, output, ReduceOp::avg, ctx_.reduce_scatter);
    else ops::copy(dev, ctx_.reduce_scatter, output, input);
    ctx_.reduce_scatter_state = CommContext::Held{input, dev.record(ctx_.reduce_scatter)};
    // The sharded gradients are views into the first output; later micro-batches add theirs.
    if (!grad_shards_.defined()) {
      grad_shards_ = output;
    } else {
      ops::add_(dev, ctx_.reduce_scatter, grad_shards_, output);
      dev.free(output);
    }
    reduced_ = dev.record(ctx_.reduce_scatter);
  }

  // The end of backward: the optimizer (compute) needs the sharded gradients.
  void finalize_backward() {
    Device& dev = job_.device();
    if (grad_shards_.defined()) dev.wait(dev.compute_stream(), reduced_);
  }
  // The root's final callback: the last reduce-scatter input is released.
  void release_held_reduce_scatter() {
    if (!ctx_.reduce_scatter_state) return;
    Device& dev = job_.device();
    dev.wait(dev.compute_stream(), ctx_.reduce_scatter_state->done);
    dev.free(ctx_.reduce_scatter_state->buffer);
    ctx_.reduce_scatter_state.reset();
  }

  // AdamW on this rank's rows of every parameter, then the gradients set to None (their
  // buffer, the reduce-scatter's output, freed).
  void optimizer_step(int64_t step, const ops::AdamW& hp) {
    if (!grad_shards_.defined()) return;  // nothing here trains
    Device& dev = job_.device();
    Stream& compute = dev.compute_stream();
    for (size_t i = 0; i < params_.size(); ++i)
      if (params_[i]->requires_grad())
        params_[i]->optimizer_step(compute, grad_shards_.view(grad_offsets_[i], {params_[i]->local_numel()}), step, hp);
    dev.free(grad_shards_);
    grad_shards_ = Tensor{};
  }

  // Every parameter whole, and AdamW's first moment of each, on the host (all ranks call), for
  // the check against single-rank training: placed into `params` and `moments` in model order.
  void gather(std::vector<float>& params, std::vector<float>& moments) {
    Device& dev = job_.device();
    Stream& s = dev.compute_stream();
    const int W = world();
    for (auto& p : params_) {
      const int64_t n = p->chunks().padded_numel();
      Tensor all = dev.empty({W * n}, DType::f32, s, p->name() + ".gathered");
      Tensor mine = dev.empty({n}, DType::f32, s, p->name() + ".gather_input");
      for (auto [piece, out] : {std::pair{p->local(), &params}, std::pair{p->first_moment(), &moments}}) {
        ops::fill(dev, s, mine, 0.0f);  // the padding rows (an empty piece on a rank that holds none)
        if (p->local_numel() > 0 && piece.defined()) ops::copy(dev, s, mine.view(0, {p->local_numel()}), piece);
        if (W > 1) group_.all_gather(mine, all, s);
        else ops::copy(dev, s, all, mine);
        std::vector<float> host(static_cast<size_t>(W * n));
        copy_to_host(dev, s, host.data(), all);
        place_params(model_.params(), {p->index()}, host.data(), *out);  // its first d0 rows are the parameter
      }
      dev.free(mine);
      dev.free(all);
    }
  }

 private:
  Job& job_;
  GPT& model_;
  std::string name_;
  Comm& group_;
  CommContext& ctx_;
  DType param_dtype_;
  std::vector<std::unique_ptr<FsdpParam>> params_;
  std::vector<int64_t> offsets_;       // each parameter's place in a rank's all-gather slot
  int64_t slot_ = 0;
  std::vector<int64_t> grad_offsets_;  // and in its reduce-scatter slot (-1: frozen)
  int64_t grad_slot_ = 0;
  Tensor gathered_;               // an all-gather issued, not yet copied out
  Event gathered_ready_;
  int gather_ranks_ = 1;           // the ranks it gathers from: the group's, or the post-forward group's
  Comm* post_forward_group_ = nullptr;
  std::vector<Tensor> post_forward_;  // after reshard_to: this rank's part of each parameter
  Event post_forward_ready_;
  std::vector<Tensor> unsharded_;  // each parameter's padded rows, gathered
  Tensor grads_;                   // the unsharded gradients, during the group's backward
  Tensor grad_shards_;             // the reduce-scatter's output: this rank's rows of every gradient
  Event reduced_;
};

}  // namespace ch09
