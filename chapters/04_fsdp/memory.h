// memory.h: what FSDP's peak memory should be, term by term (the lesson's formula).
//
// Per rank, with P parameters in units of P_u elements, W ranks, 4-byte floats:
//   sharded state     3 x sum_u ceil(P_u / W) x 4 B   (parameters, AdamW m and v). No gradient
//                     shard: zero_grad(set_to_none) freed them all before forward, and a unit's
//                     comes back with its reduce-scatter, after the peak.
//   unsharded         what is whole at the peak, parameters and gradients. The peak comes at
//                     the head's backward: the root's parameters and its padded gradient are
//                     whole; FULL_SHARD holds no block (all freed after forward); SHARD_GRAD_OP
//                     still holds every block's parameters (kept from forward to the end of
//                     backward). World 1 shards nothing: the root's gradient is the one buffer.
//   activations       everything forward keeps, plus the head's backward temporaries
//                     (gpt_activation_bytes in common/model/model.h).
// DDP, for comparison, keeps 16 P bytes of state (ZeRO's "plain DP" in fp32) and the same
// activations.
#pragma once

#include <cstdint>

#include "04_fsdp/flat_param.h"
#include "model/model.h"

namespace ch04 {

struct MemoryFormula {
  int64_t sharded_state = 0;
  int64_t unsharded = 0;
  int64_t activations = 0;
  int64_t total() const { return sharded_state + unsharded + activations; }
};

// The parameters of FSDP's units: the root (embeddings, final norm) and one block (all alike).
struct UnitSizes {
  int64_t root = 0, block = 0;
};
inline UnitSizes unit_sizes(const GPTConfig& cfg) {
  UnitSizes n;
  for (const auto& p : gpt_params(cfg)) {
    if (p.unit == 0 || p.unit == cfg.layers + 1) n.root += p.shape.numel();
    else if (p.unit == 1) n.block += p.shape.numel();
  }
  return n;
}

inline MemoryFormula fsdp_peak_memory(const GPTConfig& cfg, int64_t B, int64_t T, int world, bool full_shard) {
  const auto f32 = [](int64_t elements) { return static_cast<int64_t>(CachingAllocator::round_size(static_cast<size_t>(elements) * 4)); };
  const UnitSizes n = unit_sizes(cfg);
  const ShardLayout r{n.root, world}, b{n.block, world};
  MemoryFormula m;
  m.sharded_state = 3 * (f32(r.shard()) + cfg.layers * f32(b.shard()));
  m.unsharded = world == 1 ? f32(r.padded()) : 2 * f32(r.padded()) + (full_shard ? 0 : cfg.layers * f32(b.padded()));
  const ActivationBytes a = gpt_activation_bytes(cfg, B, T);
  m.activations = a.saved + a.head_backward;
  return m;
}

}  // namespace ch04
