// traffic.h: the bytes each sharding should put on each link, per rank and step (the formula
// the trace's measurement is checked against).
//
// Ring model, as the metrics library counts (trace/metrics.h): a collective over n ranks of a
// buffer of S bytes sends (n - 1) / n x S from every rank for an all-gather or reduce-scatter
// (S the gathered size) and 2 (n - 1) / n x S for an all-reduce. A group pays the link its
// members share: the node's when they sit on one node, the network as soon as it spans two.
//
// Per unit of P elements (4-byte floats), sharded over s ranks (padded to a multiple of s):
//   all-gathers      FULL_SHARD: 2 a step (forward, backward), the root 1; SHARD_GRAD_OP: 1
//                    (s - 1) / s x 4 padded(P, s) each, on the shard group's link
//   reduce-scatters  1 a step, the same bytes, the same link
//   all-reduces      HSDP only: 1 a step of the shard, 4 padded(P, s) / s, over r replicas:
//                    2 (r - 1) / r of it, on the replicate group's link
// So FULL_SHARD over 16 ranks on two nodes puts about 3 x 4P x 15/16 on the network, and
// HYBRID_SHARD 2 x 8 about 2 x 1/2 x 4P / 8: 22.5 times less, and none of it on the critical path.
#pragma once

#include <cstdint>
#include <vector>

#include "04_fsdp/flat_param.h"
#include "04_fsdp/memory.h"
#include "model/model.h"

namespace ch07 {

using namespace shardlab;

struct LinkBytes {
  double intra_node = 0, network = 0;
  void add(bool on_network, double bytes) { (on_network ? network : intra_node) += bytes; }
};

// `shard_on_network`, `replicate_on_network`: whether those groups span nodes. replicas == 0:
// no all-reduce (FULL_SHARD or SHARD_GRAD_OP over the shard group, here the world).
inline LinkBytes expected_link_bytes(const GPTConfig& cfg, int shards, int replicas, bool full_shard,
                                     bool shard_on_network, bool replicate_on_network, int64_t micro_batches) {
  const ch04::UnitSizes n = ch04::unit_sizes(cfg);
  LinkBytes bytes;
  const auto unit = [&](int64_t numel, int gathers) {
    const ch04::ShardLayout layout{numel, shards};
    const double padded = 4.0 * static_cast<double>(layout.padded());
    if (shards > 1) bytes.add(shard_on_network, (gathers + 1) * (shards - 1.0) / shards * padded);
    if (replicas > 1) bytes.add(replicate_on_network, 2.0 * (replicas - 1.0) / replicas * padded / shards);
  };
  for (int64_t m = 0; m < micro_batches; ++m) {
    unit(n.root, 1);  // never freed between forward and backward
    for (int64_t l = 0; l < cfg.layers; ++l) unit(n.block, full_shard ? 2 : 1);
  }
  return bytes;
}

}  // namespace ch07
