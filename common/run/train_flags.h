// train_flags.h: the flags every training chapter (02 onwards) adds to the shared ones.
//
//   --model NAME        tiny | gpt2-small | gpt2-medium | gpt-1b
//   --global-batch N    sequences per step over all ranks (must divide by the world size)
//   --seq-len T         tokens per sequence (at most the model's context)
//   --lr X              AdamW learning rate
//   --skip-reference    no final comparison with single-rank training (which runs on the CPU:
//                       minutes for gpt2-small; for timing runs of large models on a GPU)
// The seed and the number of steps are the shared --seed and --steps. Checked before step 1:
// the sequence fits the model's context, and the global batch divides into data-parallel ranks
// x micro-batches (grad_accum: chapters with --grad-accum bind it to that flag; the
// data-parallel ranks are the world, or the world / --cp where ranks share a sequence).
#pragma once

#include <string>

#include "run/flags.h"
#include "model/model.h"
#include "model/reference.h"

namespace shardlab {

struct TrainFlags {
  std::string model = "tiny";
  int64_t global_batch = 12;  // divides among 1, 2, 3, 4 and 6 ranks
  int64_t seq_len = 64;
  double lr = 3e-3;
  bool skip_reference = false;
  int64_t grad_accum = 1;  // micro-batches per step (--grad-accum, where a chapter has it)
  int64_t sequence_ranks = 1;  // ranks that share each sequence (chapter 08's --cp), a divisor of the world
};

inline void add_train_flags(Flags& f, TrainFlags& t) {
  f.add_choice("model", &t.model, GPTConfig::presets(), "the GPT to train");
  f.add_int("global-batch", &t.global_batch, 1, 1 << 20, "sequences per step over all ranks (a multiple of the ranks)");
  f.add_int("seq-len", &t.seq_len, 1, 1 << 20, "tokens per sequence (at most the model's context)");
  f.add_double("lr", &t.lr, 0.0, 1.0, "AdamW learning rate");
  f.add_bool("skip-reference", &t.skip_reference,
             "skip the final check against single-rank training (it runs on the CPU; for GPU timing runs)");
  f.add_check([&t](const RunShape& run) {
    const int64_t context = GPTConfig::preset(t.model).max_T;
    require(t.seq_len <= context, "--seq-len", t.seq_len,
            "1 to " + std::to_string(context) + " (the context of --model " + t.model + ")");
    const int64_t replicas = run.world_size / t.sequence_ranks;
    const int64_t share = replicas * t.grad_accum;
    require(t.global_batch % share == 0, "--global-batch", t.global_batch,
            "a multiple of " + std::to_string(replicas) + (t.sequence_ranks > 1 ? " data-parallel" : "") + " ranks x " +
                std::to_string(t.grad_accum) + " micro-batch(es) = " + std::to_string(share));
  });
}

// The run those flags describe, as the single-rank reference trainer takes it.
inline TrainSetup train_setup(const TrainFlags& t, int64_t steps, int64_t seed) {
  TrainSetup s;
  s.model = t.model;
  s.global_batch = t.global_batch;
  s.T = t.seq_len;
  s.steps = steps;
  s.seed = static_cast<uint64_t>(seed);
  s.adamw.lr = static_cast<float>(t.lr);
  s.check_reference = !t.skip_reference;
  return s;
}

}  // namespace shardlab
