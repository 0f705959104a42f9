// stage_replicas.h: pipeline x data parallelism. D copies of the whole pipeline, each on its
// own share of the batch; the copies of a stage average their gradients, DDP-style.
//
// The world is a D x P mesh. Megatron-LM puts the pipeline outermost ("tp-cp-ep-dp-pp"): the D
// replicas of a stage are consecutive ranks (on one node, on NVLink, when D divides a node), and
// a pipeline's P stages are D ranks apart (across nodes, where only an activation a micro-batch
// crosses). Rank r is stage r / D of replica r % D.
//
// Where the reduction goes is the schedule's to give. A stage's gradients are final once its last
// micro-batch's backward has run through them, so StageReplicas all-reduces each unit's
// gradients right after that unit's backward in the last backward pass of its chunk (DDP's
// no_sync for the other micro-batches, and chapter 03's buckets, a unit each), on a stream of its
// own, while the compute stream goes on with the units below. What nothing can hide is what comes
// last on the first stage: the embeddings' gradients, wte's 38.6M among them for GPT-2, reduced
// after every other backward of the step. Interleaving gives each rank more than one "last
// backward": a later chunk's finishes early, and its reductions hide under the earlier chunk's
// backwards.
#pragma once

#include <map>
#include <utility>
#include <vector>

#include "comm/comm.h"
#include "device/device.h"

namespace ch11 {

class StageReplicas {
 public:
  // `replicas`: this stage's group across the data-parallel axis (nullptr or size 1: nothing to
  // reduce). `runs`: each unit's gradients as [offset, count) in the flat `grads`.
  StageReplicas(shardlab::Device& dev, shardlab::Comm* replicas, shardlab::Tensor grads,
                std::map<int, std::pair<int64_t, int64_t>> runs)
      : dev_(dev),
        replicas_(replicas && replicas->size() > 1 ? replicas : nullptr),
        grads_(grads),
        runs_(std::move(runs)),
        stream_(replicas_ ? &dev.create_stream("dp") : nullptr) {}

  // After `unit`'s backward in its chunk's last backward pass: its gradients are final.
  void unit_done(int unit, shardlab::Stream& compute) {
    if (!replicas_) return;
    const auto [offset, count] = runs_.at(unit);
    reduce(offset, count, compute);
  }
  // Gradients outside every unit (the tied wte's copy on the last stage), and then the compute
  // stream waits for every reduction before the optimizer reads the gradients.
  void finish(int64_t offset, int64_t count, shardlab::Stream& compute) {
    if (!replicas_) return;
    if (count > 0) reduce(offset, count, compute);
    dev_.wait(compute, dev_.record(*stream_));
  }
  const shardlab::Stream* stream() const { return stream_; }  // nullptr without replicas

 private:
  void reduce(int64_t offset, int64_t count, shardlab::Stream& compute) {
    // The reduction reads what the compute stream wrote: it waits for it there, on its own
    // stream, and the compute stream goes on.
    dev_.wait(*stream_, dev_.record(compute));
    replicas_->all_reduce(grads_.view(offset, {count}), shardlab::ReduceOp::avg, *stream_);
  }

  shardlab::Device& dev_;
  shardlab::Comm* replicas_;
  shardlab::Tensor grads_;
  std::map<int, std::pair<int64_t, int64_t>> runs_;
  shardlab::Stream* stream_;
};

}  // namespace ch11
