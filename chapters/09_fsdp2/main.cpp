// Chapter 09: FSDP2, every parameter sharded on its own (fully_shard).
//
//   cmake --preset default && cmake --build --preset default
//   mpirun -np 4 build/chapters/shardlab_ch09                              # tiny GPT: trains, checks itself
//   mpirun -np 4 build/chapters/shardlab_ch09 --reshard-after-forward false  # ZeRO-2: no backward all-gather
//   mpirun -np 4 build/chapters/shardlab_ch09 --reshard-after-forward 2      # hpZ: backward gathers over 2 ranks
//   mpirun -np 4 build/chapters/shardlab_ch09 --freeze attn                  # the attention weights do not train
//   mpirun -np 4 build/chapters/shardlab_ch09 --mixed-precision bf16         # bf16 compute, float32 masters and reduce
//   mpirun -np 8 build/chapters/shardlab_ch09 --model gpt2-small --global-batch 8 --seq-len 1024 --compute skip
//
// Chapter 05's step, with FSDP2's data structures and streams in place of FSDP1's:
//
//   fsdp_param.h    each parameter cut on dim 0 as torch.chunk cuts it, its rows padded
//   param_group.h   one all-gather and one reduce-scatter per group, with the copies around them
//                   (copy-in, copy-out, chunk_cat) and no record_stream
//   fully_shard.h   the hooks, implicit and explicit prefetching, one training step
//
// The groups are chapter 04's units: the root (embeddings, final norm, the tied head) and one
// per block. What the run proves: the same collectives a step as FSDP1 (chapter 04's counts),
// the parameters and AdamW's moments equal to single-rank training, no race.

#include <string>
#include <vector>

#include "02_naive_ddp/data_parallel.h"
#include "04_fsdp/checks.h"
#include "09_fsdp2/fully_shard.h"
#include "run/train_flags.h"
#include "trace/metrics.h"

using namespace shardlab;

namespace {

TrainFlags train;
std::string reshard_after_forward = "true";
std::string freeze;
std::string mixed_precision = "none";
int64_t forward_prefetch = 0, backward_prefetch = 0;

// --reshard-after-forward as ranks: true is the world, false 1, an integer itself.
int reshard_ranks(int world) {
  return reshard_after_forward == "true" ? world : reshard_after_forward == "false" ? 1 : std::stoi(reshard_after_forward);
}

void add_flags(Flags& f) {
  add_train_flags(f, train);
  f.add_string("reshard-after-forward", &reshard_after_forward,
               "true: free each block's parameters after its forward and gather them again in backward (ZeRO-3); false: keep "
               "them (ZeRO-2); K: keep 1/K of them and gather over K ranks in backward (hpZ)",
               [](const std::string& v) -> std::string {
                 if (v == "true" || v == "false") return "";
                 if (v.find_first_not_of("0123456789") == std::string::npos && v.size() < 6 && std::stoi(v) >= 1) return "";
                 return "true, false or a number of ranks from 1";
               });
  f.add_check([](const RunShape& run) {
    require(run.world_size % reshard_ranks(run.world_size) == 0, "--reshard-after-forward", reshard_after_forward,
            "true, false or a number of ranks that divides the world size " + std::to_string(run.world_size));
  });
  f.add_string("freeze", &freeze,
               "parameters that do not train (requires_grad=False): those whose name contains one of these comma-separated "
               "parts, e.g. wte,wpe or attn or h.0. (default: none)");
  f.add_check([](const RunShape&) {
    std::string why;
    try {
      frozen_params(GPTConfig::preset(train.model), freeze);
    } catch (const std::invalid_argument& e) {
      why = e.what();
    }
    require(why.empty(), "--freeze", freeze, "comma-separated parts of parameter names; " + why);
  });
  f.add_string("mixed-precision", &mixed_precision,
               "none: everything float32; bf16: MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=float32), parameters "
               "gathered and computed in bf16, gradients reduced and AdamW in float32 (default: none)",
               [](const std::string& v) -> std::string { return v == "none" || v == "bf16" ? "" : "none or bf16"; });
  f.add_int("forward-prefetch", &forward_prefetch, 0, 64,
            "explicit forward prefetch: each block unshards the next N blocks after its own pre-forward (0: implicit)");
  f.add_int("backward-prefetch", &backward_prefetch, 0, 64,
            "explicit backward prefetch: each block unshards the N blocks before it after its pre-backward (0: implicit, one)");
}

void lesson(Job& job) {
  Device& dev = job.device();
  const int keep = reshard_ranks(job.world_size());
  const DType param_dtype = mixed_precision == "bf16" ? DType::bf16 : DType::f32;
  const ch09::Fsdp2Options options{keep, static_cast<int>(forward_prefetch), static_cast<int>(backward_prefetch),
                                   param_dtype};
  job.set_strategy("FSDP2 reshard_after_forward=" +
                   (keep == job.world_size() ? std::string("True") : keep == 1 ? std::string("False") : std::to_string(keep)) +
                   (param_dtype == DType::bf16 ? " param_dtype=bf16" : ""));

  // 1. FSDP2's streams (FSDPCommContext), besides the compute stream: the copy-in of each
  //    all-gather, the all-gathers, the reduce-scatters.
  ch09::CommContext ctx{dev.create_stream("all_gather_copy_in"), dev.create_stream("all_gather"),
                        dev.create_stream("reduce_scatter")};

  TrainSetup setup = train_setup(train, job.steps(), job.flags().seed);
  setup.freeze = freeze;
  // The single-rank reference in bf16 rounds each rank's share of the gradient apart, as the
  // ranks do (reference.h).
  setup.param_dtype = param_dtype;
  setup.grad_shards = job.world_size();
  ch02::BatchShare batch(job, setup, 1);
  GPT model(dev, GPTConfig::preset(setup.model), batch.rows(), setup.T, param_dtype);
  const int L = static_cast<int>(model.config().layers);

  // 2. fully_shard on every block, then on the model (the root); --freeze sets requires_grad=False.
  const std::vector<bool> frozen = frozen_params(model.config(), setup.freeze);
  ch09::FullyShard fsdp(job, model, setup.seed, job.world(), ctx, options, frozen);
  int64_t padding = 0, params = 0;
  for (int g = 0; g < fsdp.groups(); ++g)
    for (const auto& p : fsdp.group(g).params())
      padding += p->chunks().padded_numel() * job.world_size() - p->chunks().numel(), ++params;
  job.say("model " + setup.model + ": " + std::to_string(gpt_num_params(model.config())) + " parameters in " +
          std::to_string(params) + " tensors, " + std::to_string(fsdp.groups()) + " groups; each tensor cut on dim 0 over " +
          std::to_string(job.world_size()) + " ranks (" + std::to_string(padding) + " elements of padding in all)");
  if (dev.computes()) job.say("loss floor (the data's entropy rate): " + std::to_string(batch.chain().entropy_rate()) + " nats\n");

  // 3. The steps.
  ch05::StepMarks marks;
  for (int64_t step = 0; step < job.steps(); ++step) {
    Job::Step s(job, step);
    marks = ch09::train_step(s, job, fsdp, model, batch, setup, step);
  }

  // 4. The last step's figures: time, where communication was exposed, memory.
  const RankTimeline& tl = dev.trace().timeline();
  const StepWindow& last = tl.steps.back();
  const double split = last.start_us + dev.elapsed_us(marks.start, marks.forward_done);
  job.figure("step_ms", (last.end_us - last.start_us) / 1000.0, "ms", "the last step");
  job.figure("forward_exposed_comm_ms", range_metrics(tl, last.start_us, split).exposed_comm_us / 1000.0, "ms",
             "forward: communication with no compute under it");
  job.figure("backward_exposed_comm_ms", range_metrics(tl, split, last.end_us).exposed_comm_us / 1000.0, "ms",
             "backward and optimizer: the same");
  const StepMetrics metrics = step_metrics(tl).back();
  job.figure("network_MB", static_cast<double>(metrics.network_bytes) / 1e6, "MB", "this rank's bytes on the network, last step");
  job.figure("intra_node_MB", static_cast<double>(metrics.intra_node_bytes) / 1e6, "MB", "on NVLink (or PCIe), last step");
  job.figure("peak_allocated_MiB", MiB(static_cast<double>(dev.allocator().peak_allocated())), "MiB", "measured, rank 0, last step");
  job.figure("peak_active_MiB", MiB(static_cast<double>(dev.allocator().peak_active())), "MiB",
             "live tensors and freed ones still held for another stream (none: no record_stream)");
  job.figure("peak_reserved_MiB", MiB(static_cast<double>(dev.allocator().peak_reserved())), "MiB", "segments the allocator holds");
  job.figure("alloc_retries_total", static_cast<double>(dev.allocator().stats().alloc_retries), "",
             "the whole run (num_alloc_retries)");

  // 5. The collectives of the last step: FSDP1's counts (chapter 04), one all-gather and one
  //    reduce-scatter a group where FSDP1 had one a FlatParameter; a group with nothing to train
  //    reduces nothing.
  int training_groups = 0;
  for (int g = 0; g < fsdp.groups(); ++g) training_groups += fsdp.group(g).grad_slot() > 0;
  const ch04::CollectiveCounts counts = ch04::count_collectives(job, job.steps());
  const bool one = job.world_size() == 1;
  ch04::require_collective_counts(counts, one ? 0 : (keep > 1 ? 2 : 1) * L + 1, one ? 0 : training_groups);
  ch04::report_collective_counts(job, counts);

  // 6. The proof: gathered, the shards equal single-rank training on the global batch.
  if (dev.computes() && setup.check_reference) {
    std::vector<float> whole, moments;
    fsdp.gather(model, whole, moments);
    ch02::check_against_reference(job, setup, whole, moments);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const ChapterInfo chapter{.id = "09_fsdp2",
                            .title = "FSDP2: per-parameter sharding",
                            .default_steps = 5};
  return run_chapter(argc, argv, chapter, add_flags, lesson);
}
