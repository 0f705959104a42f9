// memory.h: chapter 04's peak-memory formula, per prefetch mode.
//
// The peak of a FULL_SHARD step comes at the head's backward, where the root's parameters and
// padded gradient are whole (chapter 04's memory.h). What each backward mode adds there
// (the BackwardPrefetch docstring of torch/distributed/fsdp/api.py):
//   BACKWARD_PRE   the root's pre-backward hook has already issued the last block's
//                  all-gather: one block's padded parameters more
//   BACKWARD_POST  nothing: the root's post-backward hook, the one that would prefetch the last
//                  block, runs only at the end of backward
//   none           nothing
// Forward prefetch holds one more block in forward, far from the peak. SHARD_GRAD_OP holds
// every block already: prefetching gathers nothing new.
#pragma once

#include "04_fsdp/memory.h"
#include "05_prefetch/fsdp_runtime.h"

namespace ch05 {

inline ch04::MemoryFormula fsdp_peak_memory(const GPTConfig& cfg, int64_t B, int64_t T, int world, const FsdpOptions& o) {
  ch04::MemoryFormula m = ch04::fsdp_peak_memory(cfg, B, T, world, o.full_shard);
  if (world > 1 && o.full_shard && o.backward_prefetch == BackwardPrefetch::pre) {
    const int64_t block = ch04::unit_sizes(cfg).block;
    m.unsharded += static_cast<int64_t>(CachingAllocator::round_size(static_cast<size_t>(ch04::ShardLayout{block, world}.padded()) * 4));
  }
  return m;
}

}  // namespace ch05
