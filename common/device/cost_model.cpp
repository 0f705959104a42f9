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

double protocol_us(const RingPath& p, CollectiveKind kind, double bytes, bool ll) {
  const double busbw_bytes_per_us = p.link.busbw_GBps * 1e3 * (ll ? p.link.ll_bw_fraction : 1.0);
  return collective_latency_us(p, kind, ll) + ring_shape(kind, p.ranks).traffic * bytes / busbw_bytes_per_us;
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

int64_t collective_ns(const RingPath& path, CollectiveKind kind, double bytes) {
  if (path.ranks <= 1) return to_ns(path.link.simple_base_us);  // NCCL still launches a (local) kernel
  return to_ns(std::min(protocol_us(path, kind, bytes, false), protocol_us(path, kind, bytes, true)));
}

int ring_steps(CollectiveKind kind, int n) { return ring_shape(kind, n).steps; }

// The steps of a ring that cross the network. A ring visits each node once, so it crosses between
// nodes `nodes` times a turn; a piece of data travels n-1 steps (all-gather, reduce-scatter) and
// crosses nodes-1 of those boundaries, twice over for an all-reduce. (Tag v2.19.4-1 charged an
// all-reduce 2 x nodes network steps; v2.23.4-1 corrected it to 2(nodes-1).)
int ring_network_steps(CollectiveKind kind, int nodes) {
  if (nodes <= 1) return 0;
  return kind == CollectiveKind::all_reduce ? 2 * (nodes - 1) : nodes - 1;
}

double collective_latency_us(const RingPath& p, CollectiveKind kind, bool ll) {
  const double base = ll ? p.link.ll_base_us : p.link.simple_base_us;
  auto of = [ll](const StepLatency& s) { return ll ? s.ll_us : s.simple_us; };
  if (kind == CollectiveKind::broadcast) return base + of(p.broadcast_hop);
  const int steps = ring_shape(kind, p.ranks).steps, crossing = ring_network_steps(kind, p.nodes);
  return base + (steps - crossing) * of(p.intra_step) + crossing * of(p.inter_step);
}

std::string_view collective_protocol(const RingPath& path, CollectiveKind kind, double bytes) {
  if (path.ranks <= 1) return "SIMPLE";
  return protocol_us(path, kind, bytes, true) < protocol_us(path, kind, bytes, false) ? "LL" : "SIMPLE";
}

int64_t p2p_ns(const RingPath& pair, double bytes) {
  // A send/recv pair is its own NCCL launch: it pays the base latency and one hop of its link.
  const double hop_us = pair.nodes > 1 ? pair.inter_step.simple_us : pair.intra_step.simple_us;
  return to_ns(pair.link.simple_base_us + hop_us + bytes / (pair.link.busbw_GBps * 1e3));
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
