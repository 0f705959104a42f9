// checks.h: what every FSDP chapter proves at the end of a run (chapters 04 to 07).
//
//   collectives  the trace's all-gathers and reduce-scatters of the last step, counted against
//                what the sharding strategy must issue: per block FULL_SHARD gathers twice
//                (forward, backward) and SHARD_GRAD_OP once; the root, never freed after
//                forward, once; every unit reduce-scatters once (world 1: NO_SHARD, none).
//                Prefetching moves collectives; it must never add or drop one.
//   numerics     the shards, gathered, equal single-rank training on the global batch.
//   memory       the step's peak, measured by the caching allocator, against the formula, in
//                MiB (which reads well from the tiny model's 1.6 to gpt2-small's 1700).
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "02_naive_ddp/data_parallel.h"
#include "04_fsdp/flat_param.h"
#include "04_fsdp/memory.h"
#include "trace/metrics.h"

namespace ch04 {

struct CollectiveCounts {
  int allgathers = 0, reduce_scatters = 0, all_reduces = 0;
};

// The collectives of step `step`, counted from the trace.
inline CollectiveCounts count_collectives(Job& job, int64_t step) {
  CollectiveCounts n;
  for (const auto& c : collective_metrics(job.device().trace().timeline()))
    if (c.step == step)
      n.allgathers += c.name == "allgather", n.reduce_scatters += c.name == "reduce_scatter",
          n.all_reduces += c.name == "allreduce";
  return n;
}

// Throws unless `n` holds the all-gathers and reduce-scatters expected.
inline void require_collective_counts(const CollectiveCounts& n, int allgathers, int reduce_scatters) {
  if (n.allgathers != allgathers || n.reduce_scatters != reduce_scatters)
    throw std::logic_error("expected " + std::to_string(allgathers) + " all-gathers and " +
                           std::to_string(reduce_scatters) + " reduce-scatters per step, the trace shows " +
                           std::to_string(n.allgathers) + " and " + std::to_string(n.reduce_scatters));
}

// The counts in step `step` (the last, usually); throws unless the all-gathers and
// reduce-scatters are what the strategy issues, sharding over `shard_world` ranks (the world;
// a node's ranks under chapter 07's HSDP), `micro_batches` forward and backward passes a step.
inline CollectiveCounts check_collective_counts(Job& job, int blocks, bool full_shard, int64_t step,
                                                int shard_world, int micro_batches = 1) {
  const CollectiveCounts n = count_collectives(job, step);
  const int expect_gathers = shard_world == 1 ? 0 : micro_batches * ((full_shard ? 2 : 1) * blocks + 1);
  const int expect_scatters = shard_world == 1 ? 0 : micro_batches * (blocks + 1);
  require_collective_counts(n, expect_gathers, expect_scatters);
  return n;
}

inline void report_collective_counts(Job& job, const CollectiveCounts& n) {
  job.figure("allgathers_per_step", n.allgathers, "", "from the trace");
  job.figure("reduce_scatters_per_step", n.reduce_scatters, "", "from the trace");
}

// `units`: every FlatParam; together they hold each parameter once.
inline void check_against_reference(Job& job, const TrainSetup& setup, const GPT& model,
                                    const std::vector<FlatParam*>& units) {
  if (!job.device().computes() || !setup.check_reference) return;
  std::vector<float> params(static_cast<size_t>(gpt_num_params(model.config()))), moments(params.size());
  Stream& s = job.device().compute_stream();
  for (FlatParam* u : units) {
    place_params(model.params(), u->params(), u->gather(s).data(), params);
    place_params(model.params(), u->params(), u->gather_moments(s).data(), moments);
  }
  ch02::check_against_reference(job, setup, params, moments);
}

inline void report_memory(Job& job, const MemoryFormula& f) {
  Device& dev = job.device();
  job.figure("peak_allocated_MiB", MiB(dev.allocator().peak_allocated()), "MiB", "measured, rank 0, last step");
  job.figure("peak_reserved_MiB", MiB(dev.allocator().peak_reserved()), "MiB", "measured: segments the allocator holds");
  job.figure("formula_MiB", MiB(f.total()), "MiB", "sharded state + unsharded at the peak + activations");
  job.figure("formula_sharded_state_MiB", MiB(f.sharded_state), "MiB", "parameters, AdamW m and v: 1/W each (gradients freed by zero_grad)");
  job.figure("formula_unsharded_MiB", MiB(f.unsharded), "MiB", "gathered parameters and gradients in flight at the peak");
  job.figure("formula_activations_MiB", MiB(f.activations), "MiB", "saved activations + the head's backward");
}

}  // namespace ch04
