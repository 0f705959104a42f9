// memory.h: a context-parallel rank's peak memory, term by term (the lesson's formula).
//
// Per rank, with P parameters, B sequences of S tokens per data-parallel rank, N ranks per
// sequence, 4-byte floats:
//   state         4 x P x 4 B: parameters, gradients, AdamW m and v, whole on every rank
//                 (context parallelism shards no state: the ranks of a sequence hold the same
//                 model, as data-parallel replicas do)
//   activations   everything forward keeps for backward, plus the head's backward
//                 temporaries (gpt_activation_bytes in common/model/model.h), for S / N tokens:
//                 the one term that context parallelism divides.
// The peak comes at the head's backward, where the logits and their gradient coexist; the ring's
// buffers (two KV chunks, three dKV chunks of 2 x B x S/N x C floats) live only inside
// attention and are smaller than what the head's backward adds.
#pragma once

#include <cstdint>

#include "device/allocator.h"
#include "model/model.h"

namespace ch08 {

using namespace shardlab;

struct MemoryFormula {
  int64_t state = 0;
  int64_t activations = 0;
  int64_t total() const { return state + activations; }
};

inline MemoryFormula cp_peak_memory(const GPTConfig& cfg, int64_t B, int64_t S, int ranks_per_sequence) {
  const auto f32 = [](int64_t elements) { return static_cast<int64_t>(CachingAllocator::round_size(static_cast<size_t>(elements) * 4)); };
  const ActivationBytes a = gpt_activation_bytes(cfg, B, S / ranks_per_sequence);
  return {4 * f32(gpt_num_params(cfg)), a.saved + a.head_backward};
}

}  // namespace ch08
