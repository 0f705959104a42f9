// stage_replicas.h: pipeline x data parallelism. D copies of the whole pipeline, each on its
// own share of the batch; the copies of a stage average their gradients, DDP-style, or shard
// the optimizer between them (--shard-optimizer, Megatron-LM's distributed optimizer).
//
// The world is a D x P mesh. Megatron-LM puts the pipeline outermost ("tp-cp-ep-dp-pp"): the D
// replicas of a stage are consecutive ranks (on one node, on NVLink, when D divides a node), and
// a pipeline's P stages are D ranks apart (across nodes, where only an activation a micro-batch
// crosses). Rank r is stage r / D of replica r % D.
//
// Where the reduction goes is the schedule's to give. A stage's gradients are final once its last
// micro-batch's backward has run through them, so StageReplicas reduces each unit's gradients
// right after that unit's backward in the last backward pass of its chunk (DDP's no_sync for the
// other micro-batches, and chapter 03's buckets, a unit each), on a stream of its own, while the
// compute stream goes on with the units below. What nothing can hide is what comes last on the
// first stage: the embeddings' gradients, wte's 38.6M among them for GPT-2, reduced after every
// other backward of the step. Interleaving gives each rank more than one "last backward": a
// later chunk's finishes early, and its reductions hide under the earlier chunk's backwards.
//
// Sharding the optimizer (ZeRO-1; Megatron-LM's --use-distributed-optimizer): replica d keeps
// AdamW's moments for shard d of each run of parameters only, 1/D of them. Each unit's gradients
// are reduce-scattered instead of all-reduced (half the bytes: replica d receives the average of
// its shard), replica d updates its shard of the parameters, and the shards are all-gathered
// back into every replica's whole copy, each run as soon as its update is done, on the same
// stream as the reductions; the next step's forward of a unit waits for its run's gather. The
// parameters and the gradients stay whole: every micro-batch's forward and backward needs the
// parameters, and the gradients add up over M micro-batches before anything is reduced.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "device/device.h"
#include "model/model.h"
#include "model/ops.h"

namespace ch11 {

// A run of parameters laid out back to back in a rank's flat buffers: one unit's, with the
// tied wte always a run of its own (the first and the last stage sum their copies' gradients,
// run to run, so both must cut it alike). Each run starts at `offset` and is padded to a
// multiple of the replicas it is sharded over (`padded` elements, `count` of them parameters).
struct ParamRun {
  int unit;        // whose forward reads it
  bool tied_copy;  // the last stage's copy of wte (the head reads it): reduced at the step's end
  std::vector<int> params;
  int64_t offset, count, padded;
};

// The runs of the given units (ascending), the tied copy first when the rank holds one, each
// padded to a multiple of `shards`.
inline std::vector<ParamRun> param_runs(const shardlab::GPT& model, const std::vector<int>& units, bool tied_copy,
                                        int shards) {
  std::vector<ParamRun> runs;
  int64_t offset = 0;
  const auto add = [&](int unit, bool copy, std::vector<int> params) {
    int64_t count = 0;
    for (int i : params) count += model.params()[static_cast<size_t>(i)].shape.numel();
    const int64_t padded = (count + shards - 1) / shards * shards;
    runs.push_back({unit, copy, std::move(params), offset, count, padded});
    offset += padded;
  };
  if (tied_copy) add(model.units() - 1, true, {0});  // the head reads it
  for (int unit : units) {
    std::vector<int> params = model.params_of_unit(unit);
    if (unit == 0) {  // wte apart from the rest of the embeddings
      params.erase(std::find(params.begin(), params.end(), 0));
      add(0, false, {0});
    }
    if (!params.empty()) add(unit, false, std::move(params));
  }
  return runs;
}

class StageReplicas {
 public:
  // `replicas`: this stage's group across the data-parallel axis (nullptr or size 1: nothing to
  // reduce). `weights` and `grads`: the rank's flat buffers, laid out as `runs`. With `shard`,
  // the optimizer's moments are this replica's shards only.
  StageReplicas(shardlab::Device& dev, shardlab::Comm* replicas, shardlab::Tensor weights, shardlab::Tensor grads,
                std::vector<ParamRun> runs, bool shard)
      : dev_(dev),
        replicas_(replicas && replicas->size() > 1 ? replicas : nullptr),
        shards_(shard && replicas_ ? replicas_->size() : 1),
        shard_index_(shards_ > 1 ? replicas_->rank() : 0),
        weights_(weights),
        grads_(grads),
        runs_(std::move(runs)),
        stream_(replicas_ ? &dev.create_stream("dp") : nullptr),
        gathered_(runs_.size()) {
    shardlab::Stream& s = dev.compute_stream();
    const int64_t n = grads.numel() / shards_;
    m_ = dev.empty({n}, shardlab::DType::f32, s, shards_ > 1 ? "adam.m (shard)" : "adam.m");
    v_ = dev.empty({n}, shardlab::DType::f32, s, shards_ > 1 ? "adam.v (shard)" : "adam.v");
    shardlab::ops::fill(dev, s, m_, 0.0f);
    shardlab::ops::fill(dev, s, v_, 0.0f);
  }
  ~StageReplicas() {
    dev_.free(v_);
    dev_.free(m_);
  }

  // Before `unit`'s forward: the compute stream waits for the gather of its updated parameters
  // (sharded, after the step before), once.
  void params_ready(int unit, shardlab::Stream& compute) {
    for (size_t r = 0; r < runs_.size(); ++r)
      if (runs_[r].unit == unit && gathered_[r]) {
        dev_.wait(compute, *gathered_[r]);
        gathered_[r].reset();
      }
  }

  // After `unit`'s backward in its chunk's last backward pass: its gradients are final.
  void unit_done(int unit, shardlab::Stream& compute) {
    if (!replicas_) return;
    std::vector<const ParamRun*> mine;
    for (const ParamRun& r : runs_)
      if (r.unit == unit && !r.tied_copy) mine.push_back(&r);
    reduce(mine, compute);
  }
  // The gradients outside every unit (the tied wte's copy on the last stage), and then the
  // compute stream waits for every reduction before it reads the gradients.
  void finish(shardlab::Stream& compute) {
    if (!replicas_) return;
    std::vector<const ParamRun*> copy;
    for (const ParamRun& r : runs_)
      if (r.tied_copy) copy.push_back(&r);
    reduce(copy, compute);
    dev_.wait(compute, dev_.record(*stream_));
  }

  // The reduced gradient of the tied wte (the rank's shard of it when sharded): the first and
  // the last stage sum theirs.
  shardlab::Tensor tied_grad() const {
    for (const ParamRun& r : runs_)
      if (r.params == std::vector<int>{0}) return shard_of(grads_, r);
    throw std::logic_error("StageReplicas::tied_grad: this rank holds no wte");
  }

  // AdamW on what this replica updates: everything, or its shard of each run, which it then
  // all-gathers into every replica's parameters.
  void step(shardlab::Stream& compute, int64_t t, const shardlab::ops::AdamW& hp) {
    if (shards_ == 1) return shardlab::ops::adamw(dev_, compute, weights_, grads_, m_, v_, t, hp);
    for (size_t i = 0; i < runs_.size(); ++i) {
      const ParamRun& r = runs_[i];
      const int64_t shard = r.padded / shards_, at = r.offset / shards_;
      shardlab::ops::adamw(dev_, compute, shard_of(weights_, r), shard_of(grads_, r), m_.view(at, {shard}),
                           v_.view(at, {shard}), t, hp);
      // The gather reads what the update wrote, on the replicas' stream: the compute stream
      // goes on with the next run's update.
      dev_.wait(*stream_, dev_.record(compute));
      replicas_->all_gather(shard_of(weights_, r), weights_.view(r.offset, {r.padded}), *stream_);
      gathered_[i] = dev_.record(*stream_);
    }
  }
  // After the last step: the compute stream waits for every gather still pending.
  void all_gathered(shardlab::Stream& compute) {
    for (auto& g : gathered_)
      if (g) dev_.wait(compute, *g), g.reset();
  }

  const shardlab::Tensor& adam_m() const { return m_; }
  int shards() const { return shards_; }
  int shard_index() const { return shard_index_; }
  const std::vector<ParamRun>& runs() const { return runs_; }
  const shardlab::Stream* stream() const { return stream_; }  // nullptr without replicas

 private:
  // This replica's piece of run r in a flat buffer laid out as the runs (the whole run unsharded).
  shardlab::Tensor shard_of(const shardlab::Tensor& flat, const ParamRun& r) const {
    const int64_t shard = r.padded / shards_;
    return flat.view(r.offset + shard_index_ * shard, {shard});
  }
  void reduce(const std::vector<const ParamRun*>& runs, shardlab::Stream& compute) {
    if (runs.empty()) return;
    // The reduction reads what the compute stream wrote: it waits for it there, on its own
    // stream, and the compute stream goes on.
    dev_.wait(*stream_, dev_.record(compute));
    if (shards_ == 1) {  // replicated: the unit's runs lie back to back, one all-reduce
      const int64_t begin = runs.front()->offset, end = runs.back()->offset + runs.back()->padded;
      replicas_->all_reduce(grads_.view(begin, {end - begin}), shardlab::ReduceOp::avg, *stream_);
      return;
    }
    // Sharded: each run reduce-scattered in place, this replica's average landing on its shard.
    for (const ParamRun* r : runs)
      replicas_->reduce_scatter(grads_.view(r->offset, {r->padded}), shard_of(grads_, *r), shardlab::ReduceOp::avg,
                                *stream_);
  }

  shardlab::Device& dev_;
  shardlab::Comm* replicas_;
  int shards_, shard_index_;
  shardlab::Tensor weights_, grads_, m_, v_;
  std::vector<ParamRun> runs_;
  shardlab::Stream* stream_;
  std::vector<std::optional<shardlab::Event>> gathered_;  // per run: its all-gather, not yet waited for
};

}  // namespace ch11
