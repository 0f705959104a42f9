// Chapter 08: context parallelism. Ring attention splits the sequence itself over ranks.
//
//   cmake --preset default && cmake --build --preset default
//   mpirun -np 4 build/chapters/shardlab_ch08                       # tiny GPT, 4 ranks per sequence: trains, checks itself
//   mpirun -np 8 build/chapters/shardlab_ch08 --model gpt2-small-128k --global-batch 1 --seq-len 32768
//       --compute skip --steps 2                                     # the timeline: zigzag ring on one node
//   (the same with --cp-layout contiguous)                           # the last rank does most of the work
//
// Every token-wise part of the model (embeddings, layernorms, MLPs, head, loss) runs on this
// rank's S / N tokens alone; attention is the one place a token needs the others, so each
// block's attention is handed to RingAttention (ring_attention.h), which passes the KV chunks
// around the group. Which tokens a rank holds, and what its queries compute at each step of the
// ring, is layout.h. Gradients are chapter 03's: every rank's come from its own tokens, and the
// buckets are all-reduced over every rank while backward goes on.
//
//   --cp N                    ranks per sequence (default: the world); world = data-parallel x N
//   --cp-layout zigzag        rank r holds chunks r and 2N-1-r of 2N: the same work everywhere
//   --cp-layout contiguous    rank r holds the r-th N-th of the sequence: causal work piles up last

#include <algorithm>
#include <cstdio>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "02_naive_ddp/data_parallel.h"
#include "03_bucketed_ddp/bucket.h"
#include "08_context_parallel/layout.h"
#include "08_context_parallel/memory.h"
#include "08_context_parallel/ring_attention.h"
#include "run/train_flags.h"
#include "trace/metrics.h"

using namespace shardlab;

namespace {

// Sequences of 48 tokens by default: chunks that divide evenly over 1 to 4 ranks (2N chunks).
TrainFlags train = [] {
  TrainFlags t;
  t.seq_len = 48;
  return t;
}();
int64_t cp = 0;  // 0: the world
std::string cp_layout = "zigzag";

int ranks_per_sequence(int world) { return cp == 0 ? world : static_cast<int>(cp); }

void add_flags(Flags& f) {
  f.add_int("cp", &cp, 0, 1 << 16, "ranks per sequence, a divisor of the world (0: the world)");
  f.add_choice("cp-layout", &cp_layout, {"zigzag", "contiguous"},
               "zigzag: rank r holds chunks r and 2N-1-r of 2N; contiguous: the r-th of N");
  f.add_check([](const RunShape& run) {
    require(run.world_size % ranks_per_sequence(run.world_size) == 0, "--cp", cp,
            "a divisor of the world size " + std::to_string(run.world_size));
    train.sequence_ranks = ranks_per_sequence(run.world_size);
  });
  add_train_flags(f, train);
  f.add_check([](const RunShape& run) {
    const int64_t chunks = (cp_layout == "zigzag" ? 2 : 1) * ranks_per_sequence(run.world_size);
    require(train.seq_len % chunks == 0, "--seq-len", train.seq_len,
            "a multiple of " + std::to_string(chunks) + " (--cp-layout " + cp_layout + " cuts each sequence into " +
                std::to_string(chunks) + " chunks)");
  });
}

// The slowest link between neighbours of the ring: every step waits for its slowest transfer.
RingPath slowest_hop(const Profile& profile, const Comm& group) {
  const std::vector<int>& ranks = group.world_ranks();
  RingPath slowest = ring_path(profile, {ranks[0], ranks[0]});
  for (size_t i = 0; i < ranks.size(); ++i) {
    RingPath hop = ring_path(profile, {ranks[i], ranks[(i + 1) % ranks.size()]});
    if (hop.link.busbw_GBps < slowest.link.busbw_GBps) slowest = std::move(hop);
  }
  return slowest;
}

void lesson(Job& job) {
  Device& dev = job.device();
  const Profile& profile = dev.profile();
  Stream& compute = dev.compute_stream();
  const TrainSetup setup = train_setup(train, job.steps(), job.flags().seed);
  const GPTConfig cfg = GPTConfig::preset(setup.model);

  // 1. The groups: N consecutive ranks share each sequence (on one node, where the profile
  //    allows); the groups are data-parallel replicas of each other.
  const int N = ranks_per_sequence(job.world_size()), replicas = job.world_size() / N;
  const std::unique_ptr<Comm> group = job.world().split(job.rank() / N, job.rank());
  const ch08::SequenceLayout layout(ch08::layout_named(cp_layout), N, group->rank(), setup.T);
  job.set_strategy("context parallel " + std::to_string(N) + " (" + cp_layout + ") x data parallel " +
                   std::to_string(replicas));

  // 2. Chapter 03's replica and buckets, on this rank's tokens of its group's sequences.
  std::vector<int64_t> bytes;
  for (const auto& p : gpt_params(cfg)) bytes.push_back(p.shape.numel() * 4);
  const auto buckets = ch03::assign_buckets(bytes, static_cast<int64_t>(ch03::kDefaultFirstBucketMiB * (1 << 20)),
                                            static_cast<int64_t>(ch03::kDefaultBucketCapMiB * (1 << 20)));
  ch02::Replica replica(job, setup,
                        std::make_unique<ch08::SequenceShare>(job, setup, ch02::DataShard{job.rank() / N, replicas},
                                                              layout.positions()),
                        ch03::bucket_layout(buckets));
  Stream& comm = dev.create_stream("comm");
  ch03::Reducer reducer(job, replica, buckets, comm);
  GPT& model = replica.model();

  // 3. Every block's attention goes around the ring: attention kernels on one stream, the KV
  //    transfers on another.
  Stream& attention = dev.create_stream("attention");
  Stream& ring = dev.create_stream("ring");
  ch08::RingAttention ring_attention(dev, *group, layout, attention, ring);
  model.set_attention(&ring_attention);
  job.say("model " + setup.model + ", " + std::to_string(setup.global_batch) + " sequence(s) of " +
          std::to_string(setup.T) + " tokens a step; " + std::to_string(N) + " ranks per sequence (" + cp_layout +
          "), " + std::to_string(layout.local_tokens()) + " tokens each; ring " +
          group_ranks_text(group->world_ranks()) + " over " + slowest_hop(profile, *group).link.name);
  ch02::start_training(job, replica);

  // 4. Chapter 03's step. Nothing in it knows about the ring: the model's attention does.
  for (int64_t step = 0; step < job.steps(); ++step) {
    Job::Step s(job, step);
    replica.zero_grad();
    replica.load_micro_batch(step, 0);
    for (int u = 0; u < model.units(); ++u) model.forward(u, compute);
    reducer.prepare();
    for (int u = model.units() - 1; u >= 0; --u) {
      model.backward(u, compute);
      reducer.unit_done(model, u);
    }
    reducer.finish();
    replica.optimizer_step(step);
    s.set_loss(model.mean_loss(compute));
    s.set_tokens(replica.tokens_per_step());
  }

  // 5. The last step, rank by rank: the work each rank's attention did, and how much of the
  //    KV exchange nothing hid.
  const RankTimeline& tl = dev.trace().timeline();
  const StepWindow last = tl.steps.back();
  const StepMetrics step_figures = step_metrics(tl).back();
  const double attention_ms = stream_metrics(tl, attention.id(), last.start_us, last.end_us).busy_us / 1000.0;
  const double exposed_kv_ms = stream_metrics(tl, ring.id(), last.start_us, last.end_us).exposed_comm_us / 1000.0;
  job.rank_figure("score_entries", static_cast<double>(ring_attention.score_entries()), "",
                  "unmasked score entries this rank's attention computed per sequence and head, one layer's forward");
  job.rank_figure("attention_ms", attention_ms, "ms", "this rank's attention stream busy, last step");
  job.rank_figure("exposed_kv_ms", exposed_kv_ms, "ms", "this rank's ring transfers with no compute under them");
  const std::vector<double> entries = job.every_rank(static_cast<double>(ring_attention.score_entries()));
  const std::vector<double> attention_all = job.every_rank(attention_ms);
  const std::vector<double> exposed_all = job.every_rank(exposed_kv_ms);
  const auto mean = [](const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size()); };
  const double slowest = *std::max_element(attention_all.begin(), attention_all.end());
  job.figure("step_ms", step_figures.step_us / 1000.0, "ms", "the last step");
  job.figure("score_entries_min", *std::min_element(entries.begin(), entries.end()), "", "per sequence and head, the rank that computes fewest");
  job.figure("score_entries_max", *std::max_element(entries.begin(), entries.end()), "", "the rank that computes most");
  job.figure("attention_slowest_ms", slowest, "ms", "the busiest rank's attention stream, last step");
  job.figure("attention_imbalance", mean(attention_all) > 0 ? slowest / mean(attention_all) : 1.0, "",
             "the busiest rank's attention time over the ranks' mean");
  job.figure("exposed_kv_ms", mean(exposed_all), "ms", "KV exchange with no compute under it, mean over ranks");

  // The KV exchange hides under a step's attention when each rank's chunk is long enough
  // (README.md, "When the exchange hides"): per step a rank sends 2 s C x 4 bytes and computes
  // 4 s^2 C x rho FLOPs (rho = 1/2 for the balanced causal steps), so s >= (4 / (2 rho)) F / B.
  const RingPath hop = slowest_hop(profile, *group);
  const double F = profile.peak_tflops_f32 * 1e12 * profile.attention_efficiency;
  const double B = hop.link.busbw_GBps * 1e9;
  job.figure("kv_hidden_from_tokens", 4.0 * F / B, "tokens",
             "per rank and step, by the formula on the slowest hop (" + hop.link.name + ")");
  // The same formula for a bf16 run: 2-byte K and V, attention on the tensor cores at the same
  // fraction of their peak (README.md: the threshold grows with the kernel's speed).
  const double F_bf16 = profile.peak_tflops_bf16 * 1e12 * profile.attention_efficiency;
  char bf16[192];
  std::snprintf(bf16, sizeof bf16, "kv_hidden_from_tokens in bf16 (2-byte K and V, %.1f TFLOP/s x %.2f on the tensor cores): %.1f tokens per rank",
                profile.peak_tflops_bf16, profile.attention_efficiency, 2.0 * F_bf16 / B);
  job.say(bf16);
  // One transfer per layer no compute can hide: backward's last dK, dV hop, which brings each
  // rank its own chunk's gradient after its last kernel.
  const double chunk_bytes = 2.0 * static_cast<double>(model.B() * layout.local_tokens() * cfg.channels) * 4;
  const double last_hop_ms = N > 1 ? static_cast<double>(cfg.layers * p2p_ns(hop, chunk_bytes)) / 1e6 : 0.0;
  job.figure("kv_exposed_floor_ms", last_hop_ms, "ms", "backward's last dK, dV hop, once per layer (the cost model)");

  const ch08::MemoryFormula memory = ch08::cp_peak_memory(cfg, replica.model().B(), setup.T, N);
  job.figure("peak_allocated_MiB", MiB(static_cast<double>(step_figures.peak_allocated)), "MiB", "rank 0, last step");
  job.figure("memory_formula_MiB", MiB(static_cast<double>(memory.total())), "MiB",
             "state " + human_bytes(static_cast<double>(memory.state)) + " + activations of S/N tokens " +
                 human_bytes(static_cast<double>(memory.activations)) + " (memory.h)");

  // 6. The proof: the parameters equal one rank training on the whole sequences.
  ch02::check_training(job, replica, static_cast<int>(reducer.buckets()), "bucket");
}

}  // namespace

int main(int argc, char** argv) {
  const ChapterInfo chapter{.id = "08_context_parallel",
                            .title = "Context parallelism: ring attention",
                            .default_steps = 5};
  return run_chapter(argc, argv, chapter, add_flags, lesson);
}
