// Chapter 02: naive data parallelism.
//
//   cmake --preset default && cmake --build --preset default
//   mpirun -np 4 build/chapters/shardlab_ch02                  # tiny GPT: trains, checks against one rank
//   mpirun -np 8 build/chapters/shardlab_ch02 --model gpt2-small --global-batch 8 --seq-len 1024 --compute skip
//                                                              # the timeline of a real-sized model
//
// Every rank holds a whole replica of the model and trains on its share of the global batch.
// After backward every rank has a different gradient (it saw different data); averaging them
// across ranks gives exactly the gradient of the whole global batch, so every replica takes the
// same optimizer step and the replicas stay equal. The naive way: once backward is done, one
// all-reduce per parameter tensor. Nothing overlaps; that is chapter 03's job.
//
// With --grad-accum K each rank runs K micro-batches per step and reduces only after the last:
// the gradients of the first K-1 just add up locally (what DDP's no_sync() is for).

#include <string>

#include "02_naive_ddp/data_parallel.h"
#include "run/train_flags.h"

using namespace shardlab;

namespace {

TrainFlags train;

void add_flags(Flags& f) {
  add_train_flags(f, train);
  f.add_int("grad-accum", &train.grad_accum, 1, 1024, "micro-batches per step; only the last one synchronizes (no_sync)");
}

void lesson(Job& job) {
  Device& dev = job.device();
  job.set_strategy("naive DDP");
  Stream& compute = dev.compute_stream();
  // Collectives get their own stream, as NCCL's do in PyTorch.
  Stream& comm = dev.create_stream("comm");

  const TrainSetup setup = train_setup(train, job.steps(), job.flags().seed);
  ch02::Replica replica(job, setup, train.grad_accum, ch02::natural_layout(GPTConfig::preset(setup.model)));
  GPT& model = replica.model();
  job.say("model " + setup.model + ": " + std::to_string(gpt_num_params(model.config())) + " parameters in " +
          std::to_string(model.params().size()) + " tensors; global batch " + std::to_string(setup.global_batch) +
          " x " + std::to_string(setup.T) + " tokens, " + std::to_string(train.grad_accum) + " micro-batch(es) per step");

  // 1. The replicas start equal: rank 0's parameters are broadcast to every rank.
  ch02::start_training(job, replica);

  for (int64_t step = 0; step < job.steps(); ++step) {
    Job::Step s(job, step);
    replica.zero_grad();

    // 2. Forward and backward on this rank's share, micro-batch by micro-batch. Gradients
    //    accumulate in place; nothing is communicated yet (no_sync for the first K-1).
    for (int64_t micro = 0; micro < train.grad_accum; ++micro) {
      replica.load_micro_batch(step, micro);
      for (int u = 0; u < model.units(); ++u) model.forward(u, compute);
      for (int u = model.units() - 1; u >= 0; --u) model.backward(u, compute);
    }

    // 3. Average the gradients: one all-reduce per parameter tensor, after the whole backward.
    //    The comm stream waits for backward to finish; the optimizer waits for the comm stream.
    {
      HostScope scope(dev, "all-reduce gradients");
      // lab: begin 02.average-gradients "averaging the gradients: one all-reduce per tensor, on the comm stream" #the-idea uses(job, dev, compute, comm, model)
      dev.wait(comm, dev.record(compute));
      for (const Tensor& g : model.grads()) job.world().all_reduce(g, ReduceOp::avg, comm);
      dev.wait(compute, dev.record(comm));
      // lab: end
    }

    // 4. The same step on every replica.
    replica.optimizer_step(step);
    s.set_loss(model.mean_loss(compute));
    s.set_tokens(replica.tokens_per_step());
  }

  // 5. The proof: the parameters equal one rank training on the whole global batch, and the
  //    trace shows one all-reduce per parameter tensor.
  ch02::check_training(job, replica, static_cast<int>(model.params().size()), "parameter tensor");
}

}  // namespace

int main(int argc, char** argv) {
  const ChapterInfo chapter{.id = "02_naive_ddp",
                            .title = "Naive data parallelism",
                            .default_steps = 5};
  return run_chapter(argc, argv, chapter, add_flags, lesson);
}
