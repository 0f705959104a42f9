// memory.h: what a tensor-parallel rank's forward keeps for backward, tensor by tensor.
//
// Korthikanti et al. 2022 (section 4) count a transformer layer's activations, in bytes of
// 16-bit activations with dropout and the attention matrices stored:
//   no parallelism         s b h (34 + 5 a s / h)
//   tensor parallel        s b h (10 + 24 / t + 5 a s / (h t))
//   + sequence parallel    s b h (34 / t + 5 a s / (h t))
// Tensor parallelism divides what lies inside the slices (the attention's and the MLP's
// activations) by t, but the layer norms' inputs and outputs and the residual stream are whole
// on every rank: the 10 that does not shrink. Sequence parallelism cuts those by tokens too, so
// the whole layer divides by t.
//
// This model's layer, counted the same way, in float32 elements, with N = b s tokens of the
// group, C = h, no dropout and FlashAttention-style attention (no s x s matrix: the log-sum-exp,
// a heads x N, is all it keeps):
//   residual-stream side, R rows (N, or N / t under sequence parallelism):
//       ln_1, x2 (after the attention's residual add), ln_2, the block's output: 4 R C;
//       the two layer norms' mean and rstd: 4 R
//   inside the slice, N rows: qkv 3C/t, q, k, v 3C/t, the attention's output C/t and merged
//       C/t, the MLP's fc and gelu outputs 4C/t each: 16 N C / t; lse N a / t
// So N C (4 + 16 / t) per layer with tensor parallelism, N C 20 / t with sequence parallelism:
// the paper's shape, 10 + 24/t against 34/t, in this model's numbers. Around the blocks: the
// embeddings' output (R C), the final norm (R C + 2 R), this rank's columns of the logits
// (N x its vocabulary rows), the losses (N) and the loss's statistics (3 N, until backward).
// Every tensor is rounded as the caching allocator rounds it, so the sum is what the allocator
// counts, to the byte, unless it hands a large request a cached block up to 1 MiB larger,
// which it does not split (PyTorch's rule): then it counts that block, a little more.
#pragma once

#include <cstdint>

#include "device/allocator.h"
#include "model/model.h"

namespace ch10 {

using namespace shardlab;

struct Activations {
  int64_t per_block = 0;  // one block's saved tensors
  int64_t total = 0;      // the whole forward's: blocks, embeddings, head, loss
  int64_t large = 0;      // how many of them the allocator serves from its large pool
  // The most the allocator may count beyond `total`: 1 MiB unsplit a large tensor.
  int64_t slack() const { return large * static_cast<int64_t>(CachingAllocator::kSmallRequest); }
};

inline Activations saved_activations(const GPTConfig& cfg, int64_t B, int64_t T, ModelSlice slice, bool sequence_parallel) {
  Activations a;
  int64_t large_in_block = 0;
  const auto f32 = [&](int64_t elements) {
    const auto bytes = static_cast<int64_t>(CachingAllocator::round_size(static_cast<size_t>(elements) * 4));
    large_in_block += bytes > static_cast<int64_t>(CachingAllocator::kSmallRequest);
    return bytes;
  };
  const int64_t N = B * T, C = cfg.channels, t = slice.size, R = sequence_parallel ? N / t : N;
  const int64_t Ca = C / t, H = 4 * C / t, heads = cfg.heads / t;
  a.per_block = 4 * f32(R * C) + 4 * f32(R)                                   // ln_1, x2, ln_2, out; statistics
                + f32(N * 3 * Ca) + 3 * f32(N * Ca) + 2 * f32(N * Ca)          // qkv; q, k, v; out, merged
                + 2 * f32(N * H) + f32(N * heads);                             // fc, gelu; lse
  const int64_t block_large = large_in_block;
  a.total = f32(R * C) /* embeddings */ + cfg.layers * a.per_block + f32(R * C) + 2 * f32(R) /* ln_f */ +
            f32(N * slice.vocab_rows(cfg)) /* logits */ + f32(N) /* losses */ + f32(N) + f32(2 * N) /* loss statistics */;
  a.large = large_in_block + (cfg.layers - 1) * block_large;  // one block counted so far, not L
  return a;
}

}  // namespace ch10
