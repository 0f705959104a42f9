// Chapter 06: the all-gather rate limiter, and the caching allocator it protects.
//
//   cmake --preset default && cmake --build --preset default
//   (each command below is one line; the long ones wrap here)
//   mpirun -np 4 build/chapters/shardlab_ch06                              # tiny GPT: trains, checks itself
//   mpirun -np 8 build/chapters/shardlab_ch06 --model gpt-15b --global-batch 8 --seq-len 1024
//       --compute skip --steps 3 --limit-all-gathers off                  # the thrash: alloc retries
//   mpirun -np 8 build/chapters/shardlab_ch06 --model gpt-15b --global-batch 8 --seq-len 1024
//       --compute skip --steps 3                                          # the limiter on: none
//
// Chapter 05's FSDP, with PyTorch's defaults (FULL_SHARD, BACKWARD_PRE), and one addition:
// before each all-gather the CPU may have to wait for the GPU to finish with the parameters it
// freed two units ago (rate_limiter.h). Without that wait the CPU runs far ahead, the unshard
// stream piles up gathered buffers the allocator cannot reuse yet, and on a full GPU the
// allocator stalls everything to give its cache back.

#include <string>

#include "02_naive_ddp/data_parallel.h"
#include "04_fsdp/checks.h"
#include "05_prefetch/fsdp_step.h"
#include "05_prefetch/memory.h"
#include "06_rate_limit/rate_limiter.h"
#include "run/train_flags.h"
#include "trace/metrics.h"

using namespace shardlab;

namespace {

TrainFlags train;
std::string limit_all_gathers = "on";
int64_t inflight = 2;
bool forward_prefetch = false;

void add_flags(Flags& f) {
  add_train_flags(f, train);
  f.add_choice("limit-all-gathers", &limit_all_gathers, {"on", "off"},
               "on: the CPU waits for the free of unit k - N before the all-gather of unit k (PyTorch's default); off: it never waits");
  f.add_int("inflight-all-gathers", &inflight, 1, 64,
            "N, the free events the limiter lets be in flight (_max_num_inflight_all_gathers, 2 in PyTorch)");
  f.add_bool("forward-prefetch", &forward_prefetch, "chapter 05's forward prefetch (off by default, as in PyTorch)");
  // A limit given for a limiter that is off would be silently ignored.
  f.add_check([&f](const RunShape&) {
    require(!(limit_all_gathers == "off" && f.given("inflight-all-gathers")), "--inflight-all-gathers", inflight,
            "only with --limit-all-gathers on (with off nothing limits the all-gathers)");
  });
}

void lesson(Job& job) {
  Device& dev = job.device();
  const bool limited = limit_all_gathers == "on";
  const ch05::FsdpOptions options{true, ch05::BackwardPrefetch::pre, forward_prefetch};  // PyTorch's defaults
  job.set_strategy(std::string("FSDP FULL_SHARD, BACKWARD_PRE") + (forward_prefetch ? ", forward_prefetch" : "") +
                   ", limit_all_gathers " + (limited ? "on (" + std::to_string(inflight) + " in flight)" : "off"));
  const TrainSetup setup = train_setup(train, job.steps(), job.flags().seed);
  ch02::BatchShare batch(job, setup, 1);
  GPT model(dev, GPTConfig::preset(setup.model), batch.rows(), setup.T);
  const int L = static_cast<int>(model.config().layers);
  Stream& unshard = dev.create_stream("unshard");
  Stream& post = dev.create_stream("post_backward");

  // 1. Chapter 05's runtime; with the limiter, its two extension points hold the queue. Off,
  //    they do nothing: no free event is recorded and the CPU never waits, as in PyTorch.
  ch06::RateLimitedRuntime fsdp(dev, unshard, post, ch05::wrap_units(job, model, setup.seed), options,
                                limited ? std::optional<int>(static_cast<int>(inflight)) : std::nullopt);
  job.say("model " + setup.model + ": " + std::to_string(gpt_num_params(model.config())) + " parameters in " +
          std::to_string(fsdp.units()) + " FlatParams; " + std::to_string(job.world_size()) + " ranks on " +
          dev.profile().name + " (" + human_bytes(static_cast<double>(dev.allocator().capacity())) + " each)");
  if (dev.computes()) job.say("loss floor (the data's entropy rate): " + std::to_string(batch.chain().entropy_rate()) + " nats");
  job.say("");

  // 2. Chapter 05's step, hook by hook (fsdp_step.h).
  int64_t waits_before_last = 0, wait_ns_before_last = 0;
  for (int64_t step = 0; step < setup.steps; ++step) {
    Job::Step s(job, step);
    waits_before_last = fsdp.waits(), wait_ns_before_last = fsdp.wait_ns();
    ch05::fsdp_step(s, job, fsdp, model, batch, setup, step);
  }

  // 3. The last step, as torch.cuda.memory_stats() and the profiler would show it.
  const RankTimeline& tl = dev.trace().timeline();
  const StepMetrics last = step_metrics(tl).back();
  const AllocatorStats& stats = dev.allocator().stats();
  job.figure("step_ms", last.step_us / 1000.0, "ms", "the last step");
  job.figure("exposed_comm_ms", last.exposed_comm_us / 1000.0, "ms", "communication with no compute under it");
  job.figure("peak_allocated_MiB", MiB(static_cast<double>(last.peak_allocated)), "MiB", "live tensors, rank 0, last step");
  job.figure("peak_active_MiB", MiB(static_cast<double>(dev.allocator().peak_active())), "MiB",
             "live tensors and freed ones still held for another stream (record_stream)");
  job.figure("peak_reserved_MiB", MiB(static_cast<double>(last.peak_reserved)), "MiB", "segments the allocator holds");
  job.figure("alloc_retries", static_cast<double>(last.alloc_retries), "",
             "last step: device full, every stream waited for, the cache given back, the device asked again");
  job.figure("segment_mallocs", static_cast<double>(last.segment_mallocs), "", "last step: cudaMalloc calls");
  job.figure("segment_frees", static_cast<double>(last.segment_frees), "", "last step: cudaFree calls");
  job.figure("rate_limiter_waits", static_cast<double>(fsdp.waits() - waits_before_last), "",
             "last step: the CPU synchronized on a free event before an all-gather");
  job.figure("rate_limiter_wait_ms", static_cast<double>(fsdp.wait_ns() - wait_ns_before_last) / 1e6, "ms",
             "last step: the CPU's time in those synchronizations");
  job.figure("alloc_retries_total", static_cast<double>(stats.alloc_retries), "", "the whole run (num_alloc_retries)");
  job.figure("free_events_most_queued", static_cast<double>(fsdp.free_events_most_queued()), "",
             "the most free events the queue ever held");

  // 4. The limiter changes when, never what: chapter 04's collectives, single-rank numerics.
  ch04::check_collective_counts(job, L, options.full_shard, job.steps(), job.world_size());
  ch04::check_against_reference(job, setup, model, fsdp.flat_params());
}

}  // namespace

int main(int argc, char** argv) {
  const ChapterInfo chapter{.id = "06_rate_limit",
                            .title = "The all-gather rate limiter and the caching allocator",
                            .default_steps = 5};
  return run_chapter(argc, argv, chapter, add_flags, lesson);
}
