// metrics.h: the one implementation of every timeline figure shardlab reports.
//
// Definitions (per rank, over a time window, usually one ProfilerStep):
// - compute busy: the union of compute kernel intervals, clipped to the window.
// - comm busy: the union of communication intervals (comm and comm_wait slices), clipped.
// - overlapped: |compute ∪ ... ∩ comm| : communication time during which some compute kernel ran.
// - exposed comm: comm busy - overlapped: communication nothing hid.
// - comm wait: the union of comm_wait slices (a stream waiting for late peers), part of comm busy.
// - memcpy busy: the union of memcpy and memset slices.
// - copy overlap: |compute ∩ memcpy busy|: copy time during which some compute kernel ran
//   (copies hidden under compute on another stream: chapter 00).
// - idle: window - |compute ∪ comm ∪ memcpy|: no device work at all.
// - peak allocated / reserved: the largest counter value in effect during the window.
// - intra-node bytes / network bytes: for each collective whose start lies in the window, the
//   bytes this rank sends over its link (link bytes, below), added to the tier its record names
//   (intra-node: NVLink or PCIe inside a node; network: between nodes). Records that name no
//   tier (PyTorch's traces) count in neither.
// Per collective: bytes S (all-reduce, broadcast: the buffer; all-gather and reduce-scatter: the
// gathered total; send/recv: what is sent), algbw = S / t, busbw = algbw x factor with
// factor 2(n-1)/n (all-reduce), (n-1)/n (all-gather, reduce-scatter), 1 (broadcast, send/recv),
// as nccl-tests defines them (doc/PERFORMANCE.md). Link bytes = S x factor, to the nearest byte:
// what one rank sends in NCCL's ring algorithm (all-reduce: 2(n-1) chunks of S/n; all-gather and
// reduce-scatter: n-1 chunks; broadcast: the buffer, forwarded; n = 1: nothing), the bytes whose
// time busbw measures. The model ignores NCCL's other algorithms (tree, NVLS, CollNet), which
// move other amounts, and protocol overheads (LL's flags).
// Its assumption for a group that spans nodes: all of a rank's share is network bytes, as the
// sim's cost model charges all of it at the network tier's busbw. That holds exactly where the
// group has one member per node (an HSDP replica group): every ring hop leaves a node. With g
// members per node only the hops that cross a node boundary use a NIC; NCCL runs one ring per
// channel, each leaving a node through another GPU's NIC, so with one NIC per GPU a rank's own
// NIC carries about 1/g of its share and NVLink the rest, and the ring's busbw approaches g
// NICs' bandwidth (two nodes of four A100s: busbw 78 GB/s over four 200 Gb/s NICs, 45 over two;
// https://github.com/NVIDIA/nccl-tests/issues/277). So read network bytes as what a rank sends
// in collectives that the network paces.
#pragma once

#include <string>
#include <vector>

#include "trace/timeline.h"

namespace shardlab {

struct RangeMetrics {
  double window_us = 0;
  double compute_us = 0;
  double comm_us = 0;
  double overlap_us = 0;
  double exposed_comm_us = 0;
  double comm_wait_us = 0;
  double memcpy_us = 0;
  double copy_overlap_us = 0;
  double idle_us = 0;
  int64_t peak_allocated = 0;
  int64_t peak_reserved = 0;
  // The allocator's instants in the window (torch.cuda.memory_stats() counts the same things).
  int64_t segment_mallocs = 0, segment_frees = 0, alloc_retries = 0, ooms = 0;
  // Link bytes of the collectives that start in the window, by the tier they crossed.
  int64_t intra_node_bytes = 0, network_bytes = 0;
};

struct StepMetrics : RangeMetrics {
  int rank = 0;
  int step = 0;
  double step_us = 0;  // == window_us
};

struct CollectiveMetrics {
  int rank = 0;
  int step = -1;        // the step window containing its start, -1 if none
  std::string name;
  int group_size = 1;
  std::string group;      // the record's "Process Group Name"
  int64_t bytes = 0;
  double time_us = 0;
  double algbw_GBps = 0;  // 1 GB = 1e9 bytes
  double busbw_GBps = 0;
  std::string link;       // the record's "Link" ("" if the trace does not say)
  LinkTierKind link_tier = LinkTierKind::unknown;
  int64_t link_bytes = 0;  // what this rank sends over that link
};

// One stream over [t0, t1): `busy`, the union of its kernels and transfers (waits for other
// members of a collective count, idle gaps do not); `exposed_comm`, its communication during
// which no compute kernel ran on any stream. Chapter 08: the attention stream's busy time is
// a rank's attention work, the ring stream's exposed time the KV exchange nothing hid.
struct StreamMetrics {
  double busy_us = 0;
  double exposed_comm_us = 0;
};
StreamMetrics stream_metrics(const RankTimeline& tl, int stream, double t0_us, double t1_us);

// Union length of intervals [a, b) clipped to [t0, t1).
double union_length(std::vector<std::pair<double, double>> intervals, double t0, double t1);

RangeMetrics range_metrics(const RankTimeline& tl, double t0_us, double t1_us);
std::vector<StepMetrics> step_metrics(const RankTimeline& tl);
std::vector<CollectiveMetrics> collective_metrics(const RankTimeline& tl);
// One record's figures (rank 0, step -1: a lone record knows neither).
CollectiveMetrics collective_metrics(const CollectiveRecord& c);

// nccl-tests' bus bandwidth factor for a collective name ("allreduce", "allgather", ...).
double bus_factor(const std::string& collective, int group_size);
// "1.25 GiB": bytes in binary units with two decimals (whole bytes under 1 KiB); a difference
// keeps its sign. How the run's messages and the viewer write an amount of bytes.
std::string human_bytes(double bytes);
// Bytes in MiB, as the chapters' memory figures report them.
template <class Bytes>
constexpr double MiB(Bytes bytes) {
  return static_cast<double>(bytes) / (1024.0 * 1024.0);
}

// Per operation (the viewer's table of operations): the union of a rank's compute kernels, as
// disjoint intervals in time order (what hides communication), and the part of [a, b) in
// [t0, t1) it leaves uncovered: a communication slice's share of exposed comm.
std::vector<std::pair<double, double>> compute_union(const RankTimeline& tl);
double uncovered_length(double a, double b, double t0, double t1, const std::vector<std::pair<double, double>>& disjoint);

// Bytes S for the algbw of a collective record (see above).
int64_t collective_bytes(const CollectiveRecord& c);
// The bytes one rank sends over its link in the ring model: S x the bus factor (see above).
int64_t link_bytes(const CollectiveRecord& c);
// What an operation moves, as a label says it: its bytes S ("3.00 MiB"); for a sendrecv each
// side that moves anything ("sends 3.00 MiB, receives 3.00 MiB"; a pipeline's first stage, which
// only takes gradients back, "receives 3.00 MiB"), since its S is what it sends.
std::string collective_size_text(const CollectiveRecord& c);

}  // namespace shardlab
