// reference.h: single-rank training on the global batch, the ground truth of every chapter.
//
// Data parallelism, FSDP and the rest must not change the math: after K steps every rank's
// parameters must equal what one rank gets training on the whole global batch. This trainer is
// that one rank: the GPT of model.h on the Markov data of data.h, AdamW over one flat buffer.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/ops.h"

namespace shardlab {

struct TrainSetup {
  std::string model = "tiny";
  int64_t global_batch = 8;  // sequences per step, over all ranks
  int64_t T = 64;            // tokens per sequence
  int64_t steps = 5;
  uint64_t seed = 1234;      // parameters and data
  int fanout = 4;            // successors per state of the Markov chain
  ops::AdamW adamw{3e-3f, 0.9f, 0.95f, 1e-8f, 0.0f};
  bool check_reference = true;  // chapters: compare the result with train_reference at the end
  std::string freeze;           // parameters that do not train (frozen_params' patterns in model.h)
  // Mixed precision (chapter 09's MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=float32)):
  // forward and backward in bf16 on parameters cast from float32 masters, the gradients
  // widened to float32, averaged, and AdamW in float32. Each data-parallel rank rounds the
  // gradient of its own share to bf16 before the reduction, so the single-rank run takes the
  // global batch as `grad_shards` micro-batches (the ranks' shares, in rank order), each
  // backward into bf16 gradients of its own, summed in float32 and divided by their number:
  // the same roundings as the ranks'.
  DType param_dtype = DType::f32;
  int64_t grad_shards = 1;
};

struct ReferenceRun {
  std::vector<float> params;    // every parameter after the last step, flat, in parameter order
  std::vector<float> moments;   // AdamW's first moment m after the last step, in the same order
  std::vector<double> losses;   // mean loss of each step (before its update)
  double loss_floor = 0;        // the data's entropy rate (nats per token)
};

// The order of each global batch's sequences. `reversed` trains on the same sequences, last
// first: the same math, its sums over the batch taken in another order. Its distance from the
// `as_sampled` run is what float32 rounding alone does to this training (chapters' tolerance).
// In bf16 it also moves sequences between the shards, so every bf16 rounding changes: its
// distance is what any difference in arithmetic grows to under bf16, the scale a GPU's run
// (whose every sum has its own order) is held to. `shares_reversed` keeps each shard's
// sequences and sums the shards' gradients last first, averaging by multiplying by the
// reciprocal instead of dividing (as NCCL's average pre-multiplies): only the float32 average's
// arithmetic differs, the scale the simulator's runs, which round as the reference does, are
// held to. (In float32, with one shard, it is `as_sampled`.)
enum class BatchOrder { as_sampled, reversed, shares_reversed };

// `after_step(k)`, if given, is called after step k (counted from 1): for progress lines, since a
// large model trains for minutes on the CPU.
ReferenceRun train_reference(const TrainSetup& setup, const std::function<void(int64_t)>& after_step = {},
                             BatchOrder order = BatchOrder::as_sampled);

// ||params - reference|| / ||reference||: the norm-wise relative error chapters report. (Float
// sums in another order differ in the last bits, and AdamW's division by tiny second moments
// amplifies that for near-zero gradients: an element-wise bound would be meaningless.)
double relative_error(const std::vector<float>& params, const std::vector<float>& reference);

}  // namespace shardlab
