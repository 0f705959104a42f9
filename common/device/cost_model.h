// cost_model.h: how long things take on the simulated GPU. Pure functions of a profile.
//
// Kernel:   max(flops / (peak(dtype) x efficiency), bytes / HBM bandwidth) + kernel overhead.
//           A kernel is bound by whichever of arithmetic and memory traffic takes longer. The
//           efficiency is the profile's for the kernel's class: matmul (a cuBLAS GEMM),
//           attention (a fused FlashAttention-style kernel) or elementwise (everything else).
// Memcpy:   latency + bytes / link bandwidth (PCIe for host <-> device, HBM read+write on device).
// Ring collective (NCCL's model, src/graph/tuning.cc): for each protocol (Simple, LL),
//           time = base + steps x hop + bytes / algbw, algbw = busbw x n / steps' bytes factor;
//           NCCL picks the faster protocol, so do we. Steps: all-reduce 2(n-1), reduce-scatter
//           and all-gather n-1, broadcast n-1 (pipelined: bandwidth term of one pass).
// Send/recv: its own launch: base + one hop + bytes / busbw (a hand-written ring step).
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
// `bytes`: the all-reduce buffer, the gathered / scattered total, the broadcast buffer.
int64_t collective_ns(const LinkTier& link, CollectiveKind kind, double bytes, int ranks);
int64_t p2p_ns(const LinkTier& link, double bytes);
// Which protocol collective_ns chose (for the kernel name): "SIMPLE" or "LL".
std::string_view collective_protocol(const LinkTier& link, CollectiveKind kind, double bytes, int ranks);

std::string_view collective_name(CollectiveKind kind);  // "allreduce", "reduce_scatter", ...

}  // namespace shardlab
