// Chapter 05: prefetching, and FSDP as PyTorch runs it: from hooks.
//
//   cmake --preset default && cmake --build --preset default
//   mpirun -np 4 build/chapters/shardlab_ch05                              # tiny GPT: trains, checks itself
//   mpirun -np 4 build/chapters/shardlab_ch05 --backward-prefetch none     # chapter 04's schedule
//   mpirun -np 8 build/chapters/shardlab_ch05 --model gpt2-small --global-batch 8 --seq-len 1024 --compute skip --steps 2 --sweep
//                                                                          # every mode, one table
//
// Chapter 04's FULL_SHARD backward left every all-gather exposed: unit u-1's all-gather was
// issued after unit u's reduce-scatter, on the same communicator, which runs its operations in
// the order they were issued. Prefetching issues it earlier:
//
//   --backward-prefetch pre   (BACKWARD_PRE, PyTorch's default) in unit u's pre-backward hook,
//                             before u's backward kernels are even issued
//   --backward-prefetch post  (BACKWARD_POST) in u's post-backward hook, after u's parameters
//                             are freed and before u's reduce-scatter
//   --backward-prefetch none  in u-1's own pre-backward hook, as chapter 04 did
//   --forward-prefetch        in forward, unit u+1's all-gather right after unit u's (from the
//                             second step: the order is recorded in the first)
//
// The step is chapter 04's, driven by the hooks of fsdp_runtime.h as PyTorch's autograd and
// module calls drive FSDP1's.

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "02_naive_ddp/data_parallel.h"
#include "04_fsdp/checks.h"
#include "05_prefetch/fsdp_runtime.h"
#include "05_prefetch/fsdp_step.h"
#include "05_prefetch/memory.h"
#include "run/train_flags.h"
#include "trace/metrics.h"

using namespace shardlab;

namespace {

TrainFlags train;
std::string sharding = "full";
std::string backward_prefetch = "pre";
bool forward_prefetch = false;
bool sweep = false;

void add_flags(Flags& f) {
  add_train_flags(f, train);
  f.add_choice("sharding", &sharding, {"full", "grad-op"},
               "full: FULL_SHARD (reshard after forward); grad-op: SHARD_GRAD_OP (keep parameters until backward ends)");
  f.add_choice("backward-prefetch", &backward_prefetch, {"pre", "post", "none"},
               "when backward issues the next unit's all-gather: pre (BACKWARD_PRE, before this unit's backward), "
               "post (BACKWARD_POST, after it), none (in the next unit's own hook)");
  f.add_bool("forward-prefetch", &forward_prefetch, "issue the next unit's all-gather right after this unit's in forward");
  f.add_bool("sweep", &sweep,
             "train every backward mode with and without forward prefetch, --steps each from the same start, and "
             "print one table (in place of --backward-prefetch and --forward-prefetch)");
  // The sweep runs every mode itself: a mode asked for beside it would be silently ignored.
  f.add_check([&f](const RunShape&) {
    require(!(sweep && f.given("backward-prefetch")), "--backward-prefetch", backward_prefetch,
            "not with --sweep, which runs every backward prefetch with and without forward prefetch");
    require(!(sweep && f.given("forward-prefetch")), "--forward-prefetch", forward_prefetch ? "true" : "false",
            "not with --sweep, which runs every backward prefetch with and without forward prefetch");
  });
}

// What one configuration's last step measured.
struct ModeResult {
  ch05::FsdpOptions options;
  double step_ms = 0, forward_exposed_ms = 0, backward_exposed_ms = 0;
  double peak_allocated_MiB = 0, formula_MiB = 0;
  ch04::CollectiveCounts collectives;
};

// Trains --steps steps under `options` from the initial parameters (numbered from first_step + 1
// in the trace), checks its collectives and its numerics, and returns its last step's figures.
ModeResult train_fsdp(Job& job, const TrainSetup& setup, ch02::BatchShare& batch, GPT& model,
                      const ch05::FsdpOptions& options, Stream& unshard, Stream& post, int64_t first_step,
                      int64_t total_steps) {
  Device& dev = job.device();
  const int L = static_cast<int>(model.config().layers);

  // 1. Chapter 04's FlatParams, one per unit, owned by the runtime.
  ch05::FsdpRuntime fsdp(dev, unshard, post, ch05::wrap_units(job, model, setup.seed), options);

  // 2. The steps, each a sequence of hook calls (fsdp_step.h): root pre-forward, then per unit
  //    pre-forward, forward, post-forward; from the head, pre-backward, backward, post-backward;
  //    end of backward; the optimizer.
  ch05::StepMarks marks;  // of the last step
  for (int64_t step = 0; step < setup.steps; ++step) {
    Job::Step s(job, first_step + step, total_steps);
    marks = ch05::fsdp_step(s, job, fsdp, model, batch, setup, step);
  }

  // 3. Where the last step's communication was exposed: in forward (from the step's start to
  //    the end of the head's forward on the compute stream) and in backward (the rest).
  ModeResult r;
  r.options = options;
  const RankTimeline& tl = dev.trace().timeline();
  const StepWindow& last = tl.steps.back();
  const double split = last.start_us + dev.elapsed_us(marks.start, marks.forward_done);  // the step ended in a sync
  r.step_ms = (last.end_us - last.start_us) / 1000.0;
  r.forward_exposed_ms = range_metrics(tl, last.start_us, split).exposed_comm_us / 1000.0;
  r.backward_exposed_ms = range_metrics(tl, split, last.end_us).exposed_comm_us / 1000.0;
  r.peak_allocated_MiB = MiB(static_cast<double>(dev.allocator().peak_allocated()));
  r.formula_MiB = MiB(static_cast<double>(ch05::fsdp_peak_memory(model.config(), batch.rows(), setup.T, job.world_size(), options).total()));

  // 4. Prefetching moves collectives; it never adds or drops one (checks.h).
  r.collectives = ch04::check_collective_counts(job, L, options.full_shard, first_step + setup.steps,
                                                   job.world_size());

  // 5. Prefetching changes when, never what: the shards equal single-rank training.
  ch04::check_against_reference(job, setup, model, fsdp.flat_params());
  return r;
}

std::string describe(const ch05::FsdpOptions& o) {
  return std::string(o.full_shard ? "FSDP FULL_SHARD" : "FSDP SHARD_GRAD_OP") + ", " + ch05::to_string(o.backward_prefetch) +
         (o.forward_prefetch ? ", forward_prefetch" : "");
}

void lesson(Job& job) {
  Device& dev = job.device();
  const TrainSetup setup = train_setup(train, job.steps(), job.flags().seed);
  ch02::BatchShare batch(job, setup, 1);
  GPT model(dev, GPTConfig::preset(setup.model), batch.rows(), setup.T);
  Stream& unshard = dev.create_stream("unshard");     // FSDP's all-gathers and their buffers
  Stream& post = dev.create_stream("post_backward");  // its reduce-scatters

  // The configurations to train: the flags' one, or all six.
  const bool full_shard = sharding == "full";
  std::vector<ch05::FsdpOptions> configs;
  if (sweep) {
    for (auto mode : {ch05::BackwardPrefetch::none, ch05::BackwardPrefetch::post, ch05::BackwardPrefetch::pre})
      for (bool forward : {false, true}) configs.push_back({full_shard, mode, forward});
  } else {
    const auto mode = backward_prefetch == "pre"    ? ch05::BackwardPrefetch::pre
                      : backward_prefetch == "post" ? ch05::BackwardPrefetch::post
                                                    : ch05::BackwardPrefetch::none;
    configs.push_back({full_shard, mode, forward_prefetch});
  }
  job.set_strategy(sweep ? std::string(full_shard ? "FSDP FULL_SHARD" : "FSDP SHARD_GRAD_OP") + ", every prefetch mode"
                         : describe(configs[0]));
  // A unit's parameters as its FlatParam holds them, padded to a multiple of the world.
  const ch04::UnitSizes sizes = ch04::unit_sizes(model.config());
  const auto padded = [&](int64_t n) { return std::to_string(ch04::ShardLayout{n, job.world_size()}.padded()); };
  job.say("model " + setup.model + ": " + std::to_string(gpt_num_params(model.config())) + " parameters in " +
          std::to_string(model.config().layers + 1) + " FlatParams (the root " + padded(sizes.root) + ", a block " +
          padded(sizes.block) + ", padded to a multiple of " + std::to_string(job.world_size()) + ")");
  if (job.world_size() == 1) job.say("world size 1: nothing to shard, FSDP falls back to NO_SHARD (as PyTorch does)");
  if (dev.computes()) job.say("loss floor (the data's entropy rate): " + std::to_string(batch.chain().entropy_rate()) + " nats");

  std::vector<ModeResult> results;
  for (size_t c = 0; c < configs.size(); ++c) {
    // Every configuration starts from an empty cache, as a process of its own would: what the
    // allocator has cached changes which blocks it can reuse, and so the peaks it counts.
    dev.synchronize();
    dev.allocator().empty_cache();
    job.say("");
    job.say(describe(configs[c]) + ":");
    const auto total = static_cast<int64_t>(configs.size()) * setup.steps;
    results.push_back(train_fsdp(job, setup, batch, model, configs[c], unshard, post, static_cast<int64_t>(c) * setup.steps, total));
  }

  // 6. The figures: one configuration's, or the sweep's table (also in summary.json).
  if (!sweep) {
    const ModeResult& r = results[0];
    job.figure("step_ms", r.step_ms, "ms", "the last step");
    job.figure("forward_exposed_comm_ms", r.forward_exposed_ms, "ms", "forward: communication with no compute under it");
    job.figure("backward_exposed_comm_ms", r.backward_exposed_ms, "ms", "backward and optimizer: the same");
    ch04::report_collective_counts(job, r.collectives);
    ch04::report_memory(job, ch05::fsdp_peak_memory(model.config(), batch.rows(), setup.T, job.world_size(), r.options));
    return;
  }
  job.say("\nthe last step of each (" + job.device().profile().name + ", " + std::to_string(job.world_size()) + " ranks):");
  job.say("backward       forward prefetch   step (ms)   exposed comm: forward   backward (ms)   peak allocated (MiB)   formula");
  for (const ModeResult& r : results) {
    char line[200];
    std::snprintf(line, sizeof line, "%-14s %-16s %11.3f %23.3f %15.3f %22.3f %9.3f", ch05::to_string(r.options.backward_prefetch).c_str(),
                  r.options.forward_prefetch ? "on" : "off", r.step_ms, r.forward_exposed_ms, r.backward_exposed_ms,
                  r.peak_allocated_MiB, r.formula_MiB);
    job.say(line);
    job.result_row("sweep", {{"backward_prefetch", ch05::to_string(r.options.backward_prefetch)},
                             {"forward_prefetch", r.options.forward_prefetch},
                             {"step_ms", r.step_ms},
                             {"forward_exposed_comm_ms", r.forward_exposed_ms},
                             {"backward_exposed_comm_ms", r.backward_exposed_ms},
                             {"peak_allocated_MiB", r.peak_allocated_MiB},
                             {"formula_MiB", r.formula_MiB}});
  }
}

}  // namespace

int main(int argc, char** argv) {
  const ChapterInfo chapter{.id = "05_prefetch",
                            .title = "Prefetching: FSDP's hooks and when they issue all-gathers",
                            .default_steps = 5};
  return run_chapter(argc, argv, chapter, add_flags, lesson);
}
