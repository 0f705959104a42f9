#include "device/cost_model.h"

#include <algorithm>
#include <cmath>

namespace shardlab {
namespace {

int64_t to_ns(double us) {
  if (!(us > 0)) return 0;
  return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(us * 1000.0 - 1e-6)));
}

// Ring steps and the bytes each rank pushes through its link, as multiples of the buffer S.
struct RingShape {
  int steps;
  double traffic;  // busbw x time = traffic x S
};

RingShape ring_shape(CollectiveKind kind, int n) {
  switch (kind) {
    case CollectiveKind::all_reduce: return {2 * (n - 1), 2.0 * (n - 1) / n};
    case CollectiveKind::reduce_scatter:
    case CollectiveKind::all_gather: return {n - 1, double(n - 1) / n};
    case CollectiveKind::broadcast: return {n - 1, 1.0};
  }
  return {0, 0};
}

double simple_us(const LinkTier& l, CollectiveKind kind, double bytes, int n) {
  const RingShape r = ring_shape(kind, n);
  return l.simple_base_us + r.steps * l.simple_hop_us + r.traffic * bytes / (l.busbw_GBps * 1e3);
}

double ll_us(const LinkTier& l, CollectiveKind kind, double bytes, int n) {
  const RingShape r = ring_shape(kind, n);
  return l.ll_base_us + r.steps * l.ll_hop_us + r.traffic * bytes / (l.busbw_GBps * l.ll_bw_fraction * 1e3);
}

double efficiency(const Profile& p, KernelClass cls) {
  switch (cls) {
    case KernelClass::matmul: return p.matmul_efficiency;
    case KernelClass::attention: return p.attention_efficiency;
    case KernelClass::elementwise: return p.elementwise_efficiency;
  }
  return p.elementwise_efficiency;
}

}  // namespace

int64_t kernel_ns(const Profile& p, double flops, double bytes, DType dtype, KernelClass cls) {
  const bool tensor_core = dtype == DType::bf16 || dtype == DType::f16;
  const double peak = (tensor_core ? p.peak_tflops_bf16 : p.peak_tflops_f32) * 1e6;  // FLOP per us
  const double eff = efficiency(p, cls);
  const double math_us = flops / (peak * eff);
  const double memory_us = bytes / (p.hbm_GBps * 1e3);  // GB/s = 1e3 bytes per us
  return to_ns(std::max(math_us, memory_us) + p.kernel_overhead_us);
}

int64_t memcpy_ns(const Profile& p, double bytes, CopyKind kind) {
  double GBps = 0;
  switch (kind) {
    case CopyKind::host_to_device: GBps = p.h2d_GBps; break;
    case CopyKind::device_to_host: GBps = p.d2h_GBps; break;
    case CopyKind::device_to_device: GBps = p.hbm_GBps / 2; break;  // every byte is read and written
  }
  return to_ns(p.memcpy_latency_us + bytes / (GBps * 1e3));
}

int64_t collective_ns(const LinkTier& link, CollectiveKind kind, double bytes, int ranks) {
  if (ranks <= 1) return to_ns(link.simple_base_us);  // NCCL still launches a (local) kernel
  return to_ns(std::min(simple_us(link, kind, bytes, ranks), ll_us(link, kind, bytes, ranks)));
}

std::string_view collective_protocol(const LinkTier& link, CollectiveKind kind, double bytes, int ranks) {
  if (ranks <= 1) return "SIMPLE";
  return ll_us(link, kind, bytes, ranks) < simple_us(link, kind, bytes, ranks) ? "LL" : "SIMPLE";
}

int64_t p2p_ns(const LinkTier& link, double bytes) {
  // A send/recv pair is its own NCCL launch: it pays the base latency and one hop.
  return to_ns(link.simple_base_us + link.simple_hop_us + bytes / (link.busbw_GBps * 1e3));
}

std::string_view collective_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::all_reduce: return "allreduce";
    case CollectiveKind::reduce_scatter: return "reduce_scatter";
    case CollectiveKind::all_gather: return "allgather";
    case CollectiveKind::broadcast: return "broadcast";
  }
  return "?";
}

}  // namespace shardlab
