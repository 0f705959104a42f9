// mesh_2d.h: tensor parallelism inside a node, FSDP2 (chapter 09) across nodes.
//
// Tensor parallelism's collectives sit on every block's critical path, so its group belongs on
// the fastest links, a node's NVLink; data parallelism's collectives can overlap compute, so it
// takes the network. Torchtitan's 2-D setup does exactly this: a device mesh (dp, tp), the
// model parallelized on "tp" first, then fully_shard on "dp" over the TP-sliced parameters.
// Here chapter 09's FullyShard shards each rank's slice over its data-parallel group: every
// parameter is cut twice, by tensor parallelism (heads, columns, vocabulary rows) and then by
// FSDP2 on dim 0 of the slice.
#pragma once

#include <memory>
#include <vector>

#include "09_fsdp2/fully_shard.h"
#include "10_tensor_parallel/tensor_parallel.h"

namespace ch10 {

using namespace shardlab;

// The 2-D mesh: W = D x T ranks, numbered node by node; a tensor-parallel group is T
// consecutive ranks (one node's, on NVLink: its collectives are on every block's critical
// path), a data-parallel group the ranks with the same place in their tensor-parallel group.
//
//             tensor-parallel group (NVLink)
//             tp 0     tp 1     tp 2     tp 3
//   dp 0      rank 0   rank 1   rank 2   rank 3      D = 2 copies of the model,
//   dp 1      rank 4   rank 5   rank 6   rank 7      each cut T = 4 ways
//               |        |
//             data-parallel groups (the network, once T fills a node)
struct Mesh {
  int dp = 1, tp = 1;
  std::unique_ptr<Comm> tp_group, dp_group;
};

// Both groups are world.split()s, so every rank calls this, in the same order. Their colors
// differ (0 .. D-1 for the tensor-parallel groups, D .. D+T-1 for the data-parallel ones) so that
// every group's name in the trace ("world.split(c)") is its own.
inline Mesh make_mesh(Comm& world, int tp) {
  const int r = world.rank(), dp = world.size() / tp;
  Mesh mesh{dp, tp, nullptr, nullptr};
  mesh.tp_group = world.split(/*color=*/r / tp, /*key=*/r % tp);
  mesh.dp_group = world.split(/*color=*/dp + r % tp, /*key=*/r / tp);
  return mesh;
}

// FSDP2's hooks (chapter 09) with sequence parallelism's one addition: before a group's
// gradients are reduce-scattered over the data-parallel group, the gradients each tensor-parallel
// rank computed from its own tokens only (sums_over_tokens) are summed over the tensor-parallel
// group, one all-reduce each, on the compute stream (as DTensor reduces a replicated
// parameter's partial gradient in backward). Everything else is FullyShard's.
class FsdpOverSlices {
 public:
  FsdpOverSlices(Device& dev, ch09::FullyShard& fsdp, GPT& model, Comm& tp_group, bool sequence_parallel)
      : dev_(dev), fsdp_(fsdp), model_(model), tp_group_(tp_group), sequence_parallel_(sequence_parallel) {}

  void root_pre_forward() { fsdp_.root_pre_forward(); }
  void pre_forward(int g) { fsdp_.pre_forward(g); }
  void post_forward(int g) { fsdp_.post_forward(g); }
  void pre_backward(int g) { fsdp_.pre_backward(g); }
  void post_backward(int g) {
    if (sequence_parallel_ && tp_group_.size() > 1) {
      HostScope scope(dev_, "all-reduce sequence-parallel gradients");
      for (const auto& p : fsdp_.group(g).params()) {
        const int i = p->index();
        if (sums_over_tokens(model_.params()[static_cast<size_t>(i)]) && p->requires_grad())
          tp_group_.all_reduce(model_.grads()[static_cast<size_t>(i)], ReduceOp::sum, dev_.compute_stream());
      }
    }
    fsdp_.post_backward(g);
  }
  void end_of_backward() { fsdp_.end_of_backward(); }

 private:
  Device& dev_;
  ch09::FullyShard& fsdp_;
  GPT& model_;
  Comm& tp_group_;
  bool sequence_parallel_;
};

}  // namespace ch10
