// cost_model.h: how long things take on the simulated GPU. Pure functions of a profile.
//
// Kernel:   max(flops / (peak(dtype) x efficiency), bytes / HBM bandwidth) + kernel overhead.
//           A kernel is bound by whichever of arithmetic and memory traffic takes longer. The
//           efficiency is the profile's for the kernel's class: matmul (a cuBLAS GEMM),
//           attention (a fused FlashAttention-style kernel) or elementwise (everything else).
// Memcpy:   latency + bytes / link bandwidth (PCIe for host <-> device, HBM read+write on device).
// Ring collective (NCCL's model, src/graph/tuning.cc, tag v2.23.4-1): for each protocol (Simple,
//           LL), time = base + latency of the ring's steps + bytes / algbw, algbw = busbw x n /
//           steps' bytes factor; NCCL picks the faster protocol, so do we. Steps: all-reduce 2(n-1),
//           reduce-scatter and all-gather n-1. On one node every step is an intra-node hop. On a
//           ring through several nodes only the steps that cross the network pay its latency: an
//           all-gather or reduce-scatter has nodes-1 of them, an all-reduce 2(nodes-1); the others
//           pay the intra-node hop, but no less than the network's post overhead (x3 for Simple).
//           Broadcast (pipelined): base + one hop + the bytes of one pass.
// Send/recv: its own launch: base + one hop + bytes / busbw (NCCL's tuner has no send/recv model;
//           this is ours: a hand-written ring step, one hop of the pair's link).
// All results are nanoseconds, rounded up, at least 1 for any nonzero work.
#pragma once

#include <cstdint>
#include <string_view>

#include "device/profile.h"
#include "device/tensor.h"

namespace shardlab {

enum class KernelClass : uint8_t { matmul, attention, elementwise };
enum class CopyKind : uint8_t { host_to_device, device_to_host, device_to_device };
enum class CollectiveKind : uint8_t { all_reduce, reduce_scatter, all_gather, broadcast };

int64_t kernel_ns(const Profile& p, double flops, double bytes, DType dtype, KernelClass cls);
int64_t memcpy_ns(const Profile& p, double bytes, CopyKind kind);
// The latency of one ring step, per protocol.
struct StepLatency {
  double simple_us = 0, ll_us = 0;
};

// What a group's ring runs over, as NCCL's tuner charges it. comm.h's ring_path builds it from a
// profile and the group's ranks; tests build their own.
struct RingPath {
  LinkTier link;              // the ring's bandwidth (its slowest link), base latencies and name
  int ranks = 1;              // members
  int nodes = 1;              // nodes they sit on
  StepLatency intra_step;     // a step between two GPUs of one node
  StepLatency inter_step;     // a step that crosses the network (nodes > 1)
  StepLatency broadcast_hop;  // the one hop a pipelined broadcast is charged
};

// `bytes`: the all-reduce buffer, the gathered / scattered total, the broadcast buffer.
int64_t collective_ns(const RingPath& path, CollectiveKind kind, double bytes);
// A ring collective's steps over n ranks, and how many of them cross the network on `nodes` nodes.
int ring_steps(CollectiveKind kind, int n);
int ring_network_steps(CollectiveKind kind, int nodes);
// The latency part alone (us), per protocol: what the tests check against NCCL's formula.
double collective_latency_us(const RingPath& path, CollectiveKind kind, bool ll);
// A send/recv between the two ranks of `pair`.
int64_t p2p_ns(const RingPath& pair, double bytes);
// Which protocol collective_ns chose (for the kernel name): "SIMPLE" or "LL".
std::string_view collective_protocol(const RingPath& path, CollectiveKind kind, double bytes);

std::string_view collective_name(CollectiveKind kind);  // "allreduce", "reduce_scatter", ...

}  // namespace shardlab
