// Chapter 04: fully sharded data parallelism (FSDP1's FlatParameter design).
//
//   cmake --preset default && cmake --build --preset default
//   mpirun -np 4 build/chapters/shardlab_ch04                              # tiny GPT: trains, checks itself
//   mpirun -np 4 build/chapters/shardlab_ch04 --sharding grad-op           # SHARD_GRAD_OP
//   mpirun -np 8 build/chapters/shardlab_ch04 --model gpt2-small --global-batch 8 --seq-len 1024 --compute skip
//
// Data parallelism as in chapters 02 and 03 (every rank trains on its share of the batch), but
// no rank holds the whole model: each unit's parameters, gradients and optimizer state are
// sharded W ways (flat_param.h). Around each unit the step gathers the unit's parameters just
// in time and frees them right after, and scatters the unit's gradient sums so each rank keeps
// only its shard:
//
//   pre-forward    unshard: all-gather the unit's shards (unshard stream); compute waits
//   post-forward   reshard: free the unsharded parameters (not the root, which backward needs
//                  first; not at all under SHARD_GRAD_OP)
//   pre-backward   unshard again (FULL_SHARD); a zeroed flat gradient
//   post-backward  reshard; reduce-scatter the flat gradient (post-backward stream)
//   optimizer      AdamW on the local shards only
//
// The units: the root (token and position embeddings, final norm; the head is tied to the
// token embedding) and one per transformer block.

#include <memory>
#include <string>

#include "02_naive_ddp/data_parallel.h"
#include "04_fsdp/checks.h"
#include "04_fsdp/flat_param.h"
#include "run/train_flags.h"

using namespace shardlab;

namespace {

TrainFlags train;
std::string sharding = "full";

void add_flags(Flags& f) {
  add_train_flags(f, train);
  f.add_choice("sharding", &sharding, {"full", "grad-op"},
               "full: FULL_SHARD (reshard after forward); grad-op: SHARD_GRAD_OP (keep parameters until backward ends)");
}

void lesson(Job& job) {
  Device& dev = job.device();
  const bool full_shard = sharding == "full";
  job.set_strategy(full_shard ? "FSDP FULL_SHARD" : "FSDP SHARD_GRAD_OP");
  Stream& compute = dev.compute_stream();
  Stream& unshard = dev.create_stream("unshard");        // all-gathers and their buffers
  Stream& post = dev.create_stream("post_backward");     // reduce-scatters

  const TrainSetup setup = train_setup(train, job.steps(), job.flags().seed);
  ch02::BatchShare batch(job, setup, 1);
  GPT model(dev, GPTConfig::preset(setup.model), batch.rows(), setup.T);
  const int L = static_cast<int>(model.config().layers);

  // 1. One FlatParam per unit: the root takes the embeddings, the final norm (and so the tied
  //    head); each block is its own unit.
  std::vector<int> root_params = model.params_of_unit(0);
  for (int i : model.params_of_unit(L + 1)) root_params.push_back(i);
  ch04::FlatParam root(job, model, "root", root_params, setup.seed);
  std::vector<std::unique_ptr<ch04::FlatParam>> blocks;
  for (int l = 1; l <= L; ++l)
    blocks.push_back(std::make_unique<ch04::FlatParam>(job, model, "block" + std::to_string(l - 1), model.params_of_unit(l), setup.seed));
  auto unit = [&](int u) -> ch04::FlatParam& { return u == 0 || u == L + 1 ? root : *blocks[static_cast<size_t>(u - 1)]; };

  job.say("model " + setup.model + ": " + std::to_string(gpt_num_params(model.config())) + " parameters in " +
          std::to_string(L + 1) + " FlatParams; each rank keeps 1/" + std::to_string(job.world_size()) + " (" +
          (full_shard ? "FULL_SHARD" : "SHARD_GRAD_OP") + ")");
  if (job.world_size() == 1) job.say("world size 1: nothing to shard, FSDP falls back to NO_SHARD (as PyTorch does)");
  if (dev.computes()) job.say("loss floor (the data's entropy rate): " + std::to_string(batch.chain().entropy_rate()) + " nats\n");

  for (int64_t step = 0; step < job.steps(); ++step) {
    Job::Step s(job, step);
    for (int u = 0; u <= L; ++u) unit(u).zero_grad();
    batch.load(model, step, 0);

    // 2. Forward, unit by unit: gather just in time, free right after.
    for (int u = 0; u <= L + 1; ++u) {
      HostScope scope(dev, "forward unit " + std::to_string(u));
      ch04::FlatParam& fp = unit(u);
      if (!fp.unsharded()) {  // pre-forward: unshard (the root stays unsharded for the head)
        fp.unshard(unshard);
        fp.wait_unshard(compute);
      }
      model.forward(u, compute);
      if (full_shard && u >= 1 && u <= L) fp.reshard(compute);  // post-forward (never the root)
    }

    // 3. Backward, unit by unit, from the head: gather again (FULL_SHARD), compute the unit's
    //    gradient into a padded flat buffer, free the parameters, reduce-scatter the gradient.
    root.begin_grad(compute);  // the head's and the embeddings' gradients both land in the root
    for (int u = L + 1; u >= 0; --u) {
      HostScope scope(dev, "backward unit " + std::to_string(u));
      ch04::FlatParam& fp = unit(u);
      if (!fp.unsharded()) {  // pre-backward: unshard
        fp.unshard(unshard);
        fp.wait_unshard(compute);
      }
      if (u >= 1 && u <= L) fp.begin_grad(compute);
      model.backward(u, compute);
      if (u >= 1 && u <= L) {  // post-backward: reshard, then reduce-scatter
        fp.reshard(compute);
        fp.reduce_grad(compute, post);
      }
    }
    root.reshard(compute);
    root.reduce_grad(compute, post);
    // End of backward: the optimizer needs every gradient shard.
    dev.wait(compute, dev.record(post));

    // 4. AdamW on the local shards.
    for (int u = 0; u <= L; ++u) unit(u).optimizer_step(compute, step, setup.adamw);
    s.set_loss(model.mean_loss(compute));
    s.set_tokens(batch.tokens_per_step());
  }

  // 5. The collectives of the last step, from the trace: per block FULL_SHARD gathers twice
  //    (forward, backward) and SHARD_GRAD_OP once; the root, never freed after forward, once;
  //    every unit reduce-scatters once (checks.h).
  ch04::report_collective_counts(job, ch04::check_collective_counts(job, L, full_shard, job.steps(), job.world_size()));

  // 6. Memory: the peak of a step, measured by the caching allocator, against the formula.
  ch04::report_memory(job, ch04::fsdp_peak_memory(model.config(), batch.rows(), setup.T, job.world_size(), full_shard));

  // 7. The proof: gathered, the shards equal single-rank training on the global batch.
  std::vector<ch04::FlatParam*> units;
  for (int u = 0; u <= L; ++u) units.push_back(&unit(u));
  ch04::check_against_reference(job, setup, model, units);
}

}  // namespace

int main(int argc, char** argv) {
  const ChapterInfo chapter{.id = "04_fsdp",
                            .title = "Fully sharded data parallelism",
                            .default_steps = 5};
  return run_chapter(argc, argv, chapter, add_flags, lesson);
}
