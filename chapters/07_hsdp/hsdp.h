// hsdp.h: HYBRID_SHARD. Shard inside a node, replicate across nodes.
//
// The mesh. W = R x S ranks, numbered node by node. PyTorch's 2-D device mesh puts the
// replicas on dim 0 and the shards on dim 1 (_init_intra_and_inter_node_groups):
//
//            shard group (one node, NVLink)
//            local 0   local 1   local 2   local 3
//   node 0   rank 0    rank 1    rank 2    rank 3       R = 2 replicas of the model,
//   node 1   rank 4    rank 5    rank 6    rank 7       each sharded S = 4 ways
//              |         |
//            replicate groups (the same local rank on every node: the network)
//
// Every unit is sharded over its node's group only: all-gathers never leave the node. Every
// rank of a node's group saw different data from the same rank of the other nodes' groups, so
// after the reduce-scatter inside the node each shard's gradient is still a partial sum: it is
// all-reduced across the replicate group, on a stream of its own, and only then kept as the
// rank's gradient shard.
//
// The gradient's way (FSDP1's _reduce_grad under HYBRID_SHARD):
//   compute stream        backward of unit u
//   post_backward stream  waits on compute; predivide; reduce-scatter over the shard group
//   all_reduce stream     waits on post_backward; all-reduce the shard over the replicate
//                         group; postdivide; the result is the gradient shard (chapter 04)
//   end of backward       compute waits on post_backward and on all_reduce
// The all-reduce has its own stream so that it does not hold up the next unit's reduce-scatter
// (one NCCL communicator runs its operations in order, but two communicators need not wait
// for each other): it overlaps the rest of backward (pytorch/pytorch#106080).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "06_rate_limit/rate_limiter.h"

namespace ch07 {

using namespace shardlab;

// R x S ranks: this rank's node's shard group and its replicate group.
struct Mesh {
  int replicas = 1, shards = 1;  // R, S
  std::unique_ptr<Comm> shard_group, replicate_group;
};

// R x S from the run (its world size, the profile's GPUs per node) and --replicate and --shard
// (0: not given); a mesh that does not fit the world throws FlagError, naming the flag. Neither
// given: S is one node's GPUs, or the largest divisor of the world below that.
inline std::pair<int, int> mesh_shape(int world_size, int gpus_per_node, int64_t replicate, int64_t shard) {
  const std::string divisor = "a divisor of the world size " + std::to_string(world_size);
  if (replicate != 0) require(world_size % replicate == 0, "--replicate", replicate, divisor);
  int64_t s = shard != 0 ? shard : replicate != 0 ? world_size / replicate : gpus_per_node;
  if (shard == 0 && replicate == 0)  // one node's GPUs, or the largest divisor of the world below that
    while (world_size % s != 0) --s;
  require(world_size % s == 0, "--shard", s, divisor);
  const int64_t r = replicate != 0 ? replicate : world_size / s;
  require(r * s == world_size, "--replicate", r,
          std::to_string(world_size / s) + ": R x S must equal the world size " + std::to_string(world_size) +
              " (S = " + std::to_string(s) + ")");
  return {static_cast<int>(r), static_cast<int>(s)};
}

// Both groups are world.split()s, so every rank must call this, in the same order.
inline Mesh make_mesh(Comm& world, int replicas, int shards) {
  // lab: begin 07.mesh "the mesh: a shard group per node, a replicate group per local rank" #the-mesh uses(world, replicas, shards)
  const int r = world.rank();
  Mesh mesh{replicas, shards, nullptr, nullptr};
  mesh.shard_group = world.split(/*color=*/r / shards, /*key=*/r % shards);      // my node's ranks
  mesh.replicate_group = world.split(/*color=*/r % shards, /*key=*/r / shards);  // my local rank's peers
  return mesh;
  // lab: end
}

// Chapter 04's FlatParam, sharded over a node's group and replicated on every node: its gradient
// is averaged over all R x S ranks, so the predivide and postdivide factors are those of R x S.
class ReplicatedFlatParam : public ch04::FlatParam {
 public:
  ReplicatedFlatParam(Job& job, GPT& model, std::string name, std::vector<int> params, uint64_t seed,
                      Comm& shard_group, int replicas)
      : FlatParam(job, model, std::move(name), std::move(params), seed, shard_group), replicas_(replicas) {}
  int grad_world() const override { return layout().world * replicas_; }

 private:
  int replicas_;
};

// Chapters 05 and 06's runtime (hooks, prefetching, rate limiter) reducing gradients the HSDP
// way. Without a replicate group it is FULL_SHARD or SHARD_GRAD_OP over the world, unchanged.
class HybridRuntime : public ch06::RateLimitedRuntime {
 public:
  HybridRuntime(Device& dev, Stream& unshard, Stream& post, Stream& all_reduce, Comm* replicate_group,
                std::vector<std::unique_ptr<ch04::FlatParam>> units, ch05::FsdpOptions options,
                std::optional<int> max_inflight)
      : RateLimitedRuntime(dev, unshard, post, std::move(units), options, max_inflight),
        all_reduce_(all_reduce), replicate_(replicate_group) {}

 protected:
  void reduce_grad(ch04::FlatParam& flat) override {
    // Names the unit for the replicas' all-reduce, as FlatParam's own ops do for its collectives.
    HostScope scope(dev_, "HybridRuntime.reduce_grad (" + flat.name() + ")");
    // lab: begin 07.reduce-grad "HSDP's gradient: reduce-scatter in the node, then all-reduce across replicas" #the-mesh uses(flat)
    if (!replicate_ || flat.grad_world() == 1) return RateLimitedRuntime::reduce_grad(flat);  // world 1: nothing
    // Predivide and reduce-scatter inside the node, on post_backward, as chapter 04 does...
    Tensor shard = flat.reduce_scatter_grad(compute_, post_);
    // ...then sum the shard over the replicas on the all-reduce stream, once the reduce-scatter
    // has written it. With S = 1 there was nothing to scatter, and this all-reduce is the whole
    // reduction: pytorch/pytorch#154888 is the bug where HSDP skipped it there.
    dev_.wait(all_reduce_, dev_.record(post_));
    replicate_->all_reduce(shard, ReduceOp::sum, all_reduce_);
    // Postdivide by N / f (N = R x S), after the all-reduce, on its stream: the gradient shard.
    flat.accumulate_grad(shard, all_reduce_, post_);
    // lab: end
  }

  void wait_for_gradients() override {
    // lab: begin 07.reduce-grad "HSDP's gradient: reduce-scatter in the node, then all-reduce across replicas" #the-mesh uses()
    RateLimitedRuntime::wait_for_gradients();
    if (replicate_) dev_.wait(compute_, dev_.record(all_reduce_));  // the optimizer reads the sums
    // lab: end
  }

 private:
  Stream& all_reduce_;
  Comm* replicate_;  // nullptr: no replicas (full, grad-op)
};

}  // namespace ch07
