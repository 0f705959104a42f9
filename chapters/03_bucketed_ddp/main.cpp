// Chapter 03: bucketed data parallelism, all-reduce overlapping backward.
//
//   cmake --preset default && cmake --build --preset default
//   mpirun -np 4 build/chapters/shardlab_ch03                  # tiny GPT: trains, checks against one rank
//   mpirun -np 8 build/chapters/shardlab_ch03 --model gpt2-small --global-batch 8 --seq-len 1024 --compute skip
//                                                              # the timeline: compare with chapter 02's
//
// Chapter 02's step, with one change: gradients live in buckets (bucket.h), and each bucket is
// all-reduced on the communication stream as soon as backward has produced all of its
// gradients, while backward goes on computing the earlier layers'. Only the buckets that finish
// last, near the embeddings, are left exposed.

#include <string>

#include "03_bucketed_ddp/bucket.h"
#include "run/train_flags.h"

using namespace shardlab;

namespace {

TrainFlags train;
double bucket_cap_mb = ch03::kDefaultBucketCapMiB;
double first_bucket_mb = ch03::kDefaultFirstBucketMiB;

void add_flags(Flags& f) {
  add_train_flags(f, train);
  f.add_int("grad-accum", &train.grad_accum, 1, 1024, "micro-batches per step; only the last one synchronizes (no_sync)");
  f.add_double("bucket-cap-mb", &bucket_cap_mb, 0.001, 1 << 20, "bucket size cap in MiB");
  f.add_double("first-bucket-mb", &first_bucket_mb, 0.001, 1 << 20, "the first bucket's cap in MiB");
}

void lesson(Job& job) {
  Device& dev = job.device();
  job.set_strategy("bucketed DDP");
  Stream& compute = dev.compute_stream();
  Stream& comm = dev.create_stream("comm");

  // 1. Buckets: parameters in reverse order, 1 MiB first (--first-bucket-mb), then
  //    --bucket-cap-mb each. The flat buffers are laid out bucket after bucket, so gradients
  //    are views into the buckets.
  const TrainSetup setup = train_setup(train, job.steps(), job.flags().seed);
  std::vector<int64_t> bytes;
  for (const auto& p : gpt_params(GPTConfig::preset(setup.model))) bytes.push_back(p.shape.numel() * 4);
  const auto buckets = ch03::assign_buckets(bytes, static_cast<int64_t>(first_bucket_mb * (1 << 20)),
                                            static_cast<int64_t>(bucket_cap_mb * (1 << 20)));
  ch02::Replica replica(job, setup, train.grad_accum, ch03::bucket_layout(buckets));
  ch03::Reducer reducer(job, replica, buckets, comm);
  GPT& model = replica.model();
  job.say("model " + setup.model + ": " + std::to_string(gpt_num_params(model.config())) + " parameters in " +
          std::to_string(model.params().size()) + " tensors, " + std::to_string(reducer.buckets()) +
          (reducer.buckets() == 1 ? " bucket" : " buckets") + " (the first holds " + human_bytes(static_cast<double>(reducer.bucket_bytes(0))) + "; cap " +
          human_bytes(bucket_cap_mb * (1 << 20)) + ")");
  ch02::start_training(job, replica);

  for (int64_t step = 0; step < job.steps(); ++step) {
    Job::Step s(job, step);
    replica.zero_grad();
    for (int64_t micro = 0; micro < train.grad_accum; ++micro) {
      const bool sync = micro == train.grad_accum - 1;  // no_sync for all but the last micro-batch
      replica.load_micro_batch(step, micro);
      for (int u = 0; u < model.units(); ++u) model.forward(u, compute);
      if (sync) reducer.prepare();
      for (int u = model.units() - 1; u >= 0; --u) {
        model.backward(u, compute);
        // 2. The hook: this unit's gradients are final; full buckets go out now, overlapping
        //    the backward of the units still to come.
        if (sync) reducer.unit_done(model, u);
      }
    }
    // 3. The optimizer waits for the last bucket.
    reducer.finish();
    replica.optimizer_step(step);
    s.set_loss(model.mean_loss(compute));
    s.set_tokens(replica.tokens_per_step());
  }

  ch02::check_training(job, replica, static_cast<int>(reducer.buckets()), "bucket");
}

}  // namespace

int main(int argc, char** argv) {
  const ChapterInfo chapter{.id = "03_bucketed_ddp",
                            .title = "Bucketed data parallelism",
                            .default_steps = 5};
  return run_chapter(argc, argv, chapter, add_flags, lesson);
}
