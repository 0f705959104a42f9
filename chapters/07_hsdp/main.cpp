// Chapter 07: HSDP. Shard inside a node, replicate across nodes.
//
//   cmake --preset default && cmake --build --preset default
//   mpirun -np 4 build/chapters/shardlab_ch07 --profile h100-2x2     # tiny GPT, mesh 2 x 2: trains, checks itself
//   mpirun -np 16 build/chapters/shardlab_ch07 --profile h100-2x8-1nic --model gpt-1b --global-batch 16
//       --seq-len 1024 --compute skip --steps 3                         # HYBRID_SHARD 2 x 8
//   (the same with --sharding full)                                     # FULL_SHARD over 16
//
// FULL_SHARD over two nodes puts every all-gather and reduce-scatter on a ring that crosses
// the network. HYBRID_SHARD (hsdp.h) shards each unit over the ranks of one node only, so its
// all-gathers stay on NVLink, and all-reduces each gradient shard across the nodes, once a
// step, on a stream of its own. Everything else is chapters 05 and 06: the hooks, backward
// prefetch, the rate limiter, with PyTorch's defaults.
//
//   --sharding hybrid        HYBRID_SHARD: FULL_SHARD inside a node, all-reduce across nodes
//   --sharding hybrid-zero2  _HYBRID_SHARD_ZERO2: SHARD_GRAD_OP inside a node (parameters kept
//                            from forward to the end of backward), the same all-reduce
//   --sharding full          FULL_SHARD over every rank (chapter 05), for comparison
//   --sharding grad-op       SHARD_GRAD_OP over every rank
//   --replicate R --shard S  the mesh, R x S = the world (S: the profile's GPUs per node)

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "02_naive_ddp/data_parallel.h"
#include "04_fsdp/checks.h"
#include "05_prefetch/fsdp_step.h"
#include "05_prefetch/memory.h"
#include "07_hsdp/hsdp.h"
#include "07_hsdp/traffic.h"
#include "run/train_flags.h"
#include "trace/metrics.h"

using namespace shardlab;

namespace {

TrainFlags train;
std::string sharding = "hybrid";
int64_t replicate = 0, shard = 0;  // 0: from the profile and the world

void add_flags(Flags& f) {
  add_train_flags(f, train);
  f.add_int("grad-accum", &train.grad_accum, 1, 1024,
            "micro-batches per step; each one's gradients are reduced (and all-reduced across nodes)");
  f.add_choice("sharding", &sharding, {"hybrid", "hybrid-zero2", "full", "grad-op"},
               "hybrid: HYBRID_SHARD; hybrid-zero2: _HYBRID_SHARD_ZERO2; full: FULL_SHARD over every rank; "
               "grad-op: SHARD_GRAD_OP over every rank");
  f.add_int("shard", &shard, 0, 1 << 16,
            "S, ranks per shard group (0: the profile's GPUs per node, or the largest divisor of the world below it)");
  f.add_int("replicate", &replicate, 0, 1 << 16, "R, replicas of the shard group (0: the world / S)");
  f.add_check([](const RunShape& run) { ch07::mesh_shape(run.world_size, run.gpus_per_node, replicate, shard); });
  // FULL_SHARD and SHARD_GRAD_OP shard over every rank: a mesh asked for beside them would be
  // silently ignored.
  f.add_check([&f](const RunShape&) {
    const bool flat = sharding == "full" || sharding == "grad-op";
    const std::string allowed = "only with --sharding hybrid or hybrid-zero2 (full and grad-op shard over every rank)";
    require(!(flat && f.given("shard")), "--shard", shard, allowed);
    require(!(flat && f.given("replicate")), "--replicate", replicate, allowed);
  });
}

bool on_network(const Profile& profile, const Comm& group) {
  return link_tier_of(profile, group.world_ranks()) == LinkTierKind::network;
}

void lesson(Job& job) {
  Device& dev = job.device();
  const Profile& profile = dev.profile();
  const bool hybrid = sharding == "hybrid" || sharding == "hybrid-zero2";
  const bool full_shard = sharding == "hybrid" || sharding == "full";
  const TrainSetup setup = train_setup(train, job.steps(), job.flags().seed);
  ch02::BatchShare batch(job, setup, train.grad_accum);
  GPT model(dev, GPTConfig::preset(setup.model), batch.rows(), setup.T);
  const int L = static_cast<int>(model.config().layers);

  // 1. The mesh: my node's shard group, my local rank's replicate group. Without hybrid
  //    sharding the world is the one shard group.
  const auto [R, S] = ch07::mesh_shape(job.world_size(), profile.gpus_per_node, replicate, shard);
  std::optional<ch07::Mesh> mesh;
  if (hybrid) mesh = ch07::make_mesh(job.world(), R, S);
  Comm& shard_group = mesh ? *mesh->shard_group : job.world();
  Comm* replicate_group = mesh ? mesh->replicate_group.get() : nullptr;
  const int replicas = mesh ? R : 1;
  job.set_strategy(std::string(sharding == "hybrid"         ? "FSDP HYBRID_SHARD"
                               : sharding == "hybrid-zero2" ? "FSDP _HYBRID_SHARD_ZERO2"
                               : sharding == "full"         ? "FSDP FULL_SHARD"
                                                            : "FSDP SHARD_GRAD_OP") +
                   (hybrid ? " " + std::to_string(R) + " x " + std::to_string(S) : "") +
                   ", BACKWARD_PRE, limit_all_gathers");
  job.say("model " + setup.model + ": " + std::to_string(gpt_num_params(model.config())) + " parameters in " +
          std::to_string(L + 1) + " FlatParams; " + std::to_string(job.world_size()) + " ranks on " + profile.name + " (" +
          std::to_string(profile.gpus_per_node) + " GPUs a node)");
  job.say("shard group     " + group_ranks_text(shard_group.world_ranks()) + " on " +
          link_for(profile, shard_group.world_ranks()).name + ": all-gathers, reduce-scatters");
  if (replicate_group)
    job.say("replicate group " + group_ranks_text(replicate_group->world_ranks()) + " on " +
            link_for(profile, replicate_group->world_ranks()).name + ": one all-reduce per unit");
  if (dev.computes()) job.say("loss floor (the data's entropy rate): " + std::to_string(batch.chain().entropy_rate()) + " nats");
  job.say("");

  // 2. Chapter 06's runtime, reducing the HSDP way. FSDP's streams: all-gathers, reduce-scatters
  //    and, under HSDP, the all-reduces across nodes, each on its own.
  Stream& unshard = dev.create_stream("unshard");
  Stream& post = dev.create_stream("post_backward");
  Stream& all_reduce = hybrid ? dev.create_stream("all_reduce") : post;
  const ch05::FsdpOptions options{full_shard, ch05::BackwardPrefetch::pre, false};  // PyTorch's defaults
  ch07::HybridRuntime fsdp(dev, unshard, post, all_reduce, replicate_group,
                           ch05::wrap_units<ch07::ReplicatedFlatParam>(job, model, setup.seed, shard_group, replicas), options,
                           /*max_inflight=*/2);

  // 3. Chapter 05's step, hook by hook, --grad-accum passes of it.
  for (int64_t step = 0; step < setup.steps; ++step) {
    Job::Step s(job, step);
    ch05::fsdp_step(s, job, fsdp, model, batch, setup, step, train.grad_accum);
  }

  // 4. The last step: time, and bytes per link against the ring model (traffic.h).
  const StepMetrics last = step_metrics(dev.trace().timeline()).back();
  const ch07::LinkBytes expect =
      ch07::expected_link_bytes(model.config(), shard_group.size(), replicate_group ? replicas : 0, full_shard,
                                on_network(profile, shard_group),
                                replicate_group && on_network(profile, *replicate_group), train.grad_accum);
  job.figure("step_ms", last.step_us / 1000.0, "ms", "the last step");
  job.figure("exposed_comm_ms", last.exposed_comm_us / 1000.0, "ms", "communication with no compute under it");
  job.figure("network_MB", static_cast<double>(last.network_bytes) / 1e6, "MB", "this rank's bytes on the network, last step");
  job.figure("network_formula_MB", expect.network / 1e6, "MB", "the ring model (traffic.h)");
  job.figure("intra_node_MB", static_cast<double>(last.intra_node_bytes) / 1e6, "MB", "on NVLink (or PCIe), last step");
  job.figure("intra_node_formula_MB", expect.intra_node / 1e6, "MB", "the ring model");
  const ch04::MemoryFormula memory =
      ch05::fsdp_peak_memory(model.config(), batch.rows(), setup.T, shard_group.size(), options);
  job.figure("peak_allocated_MiB", MiB(static_cast<double>(last.peak_allocated)), "MiB", "rank 0, last step");
  job.figure("memory_formula_MiB", MiB(static_cast<double>(memory.total())), "MiB",
             "chapter 05's formula, sharded " + std::to_string(shard_group.size()) + " ways");

  // 5. What every FSDP chapter proves: chapter 04's collectives inside the shard group, plus
  //    one all-reduce per unit and pass under HSDP; single-rank numerics.
  const ch04::CollectiveCounts n =
      ch04::check_collective_counts(job, L, full_shard, job.steps(), shard_group.size(), static_cast<int>(train.grad_accum));
  const bool all_reduces = replicate_group && job.world_size() > 1;  // world 1 reduces nothing
  const int expect_all_reduces = all_reduces ? static_cast<int>(train.grad_accum) * (L + 1) : 0;
  if (n.all_reduces != expect_all_reduces)
    throw std::logic_error("expected " + std::to_string(expect_all_reduces) + " all-reduces per step, the trace shows " +
                           std::to_string(n.all_reduces));
  ch04::report_collective_counts(job, n);
  job.figure("allreduces_per_step", n.all_reduces, "", "from the trace: across the replicate group");
  ch04::check_against_reference(job, setup, model, fsdp.flat_params());
}

}  // namespace

int main(int argc, char** argv) {
  const ChapterInfo chapter{.id = "07_hsdp",
                            .title = "HSDP: shard inside a node, replicate across nodes",
                            .default_steps = 5};
  return run_chapter(argc, argv, chapter, add_flags, lesson);
}
