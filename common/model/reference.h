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
enum class BatchOrder { as_sampled, reversed };

// `after_step(k)`, if given, is called after step k (counted from 1): for progress lines, since a
// large model trains for minutes on the CPU.
ReferenceRun train_reference(const TrainSetup& setup, const std::function<void(int64_t)>& after_step = {},
                             BatchOrder order = BatchOrder::as_sampled);

// ||params - reference|| / ||reference||: the norm-wise relative error chapters report. (Float
// sums in another order differ in the last bits, and AdamW's division by tiny second moments
// amplifies that for near-zero gradients: an element-wise bound would be meaningless.)
double relative_error(const std::vector<float>& params, const std::vector<float>& reference);

}  // namespace shardlab
