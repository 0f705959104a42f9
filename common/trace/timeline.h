// timeline.h: what a rank's device did, in the form the metrics library reads.
//
// Two producers fill it: the TraceRecorder while a chapter runs (sim or CUDA), and the
// viewer's loader from trace files on disk (ours, or PyTorch profiler traces). One consumer
// reads it: metrics.h. So the run summary, the tests and the viewer agree to the nanosecond.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace shardlab {

enum class SliceKind : uint8_t {
  compute,    // a kernel that is not communication
  comm,       // a collective or send/recv moving data (kernel named nccl...)
  comm_wait,  // a collective's stream waiting for the other members to arrive
  memcpy,     // cat gpu_memcpy
  memset,     // cat gpu_memset
};

struct DeviceSlice {
  double start_us = 0, end_us = 0;
  int stream = 0;
  SliceKind kind = SliceKind::compute;
  int32_t collective = -1;  // index into RankTimeline::collectives for comm slices
};

// The link tier a collective's bytes crossed, as the sim decides it (comm.h, link_for): inside
// one node (NVLink, PCIe) or between nodes (the network). Traces that do not say (PyTorch's
// profiler writes no such arg) leave it unknown.
enum class LinkTierKind : uint8_t { unknown, intra_node, network };

// "intra-node", "network": the trace's "Link tier" values; "unknown" for a trace that gives none.
inline std::string_view link_tier_name(LinkTierKind tier) {
  switch (tier) {
    case LinkTierKind::intra_node: return "intra-node";
    case LinkTierKind::network: return "network";
    case LinkTierKind::unknown: break;
  }
  return "unknown";
}

// The tier a "Link tier" value names; unknown for anything else.
inline LinkTierKind link_tier_from_name(std::string_view name) {
  if (name == link_tier_name(LinkTierKind::intra_node)) return LinkTierKind::intra_node;
  if (name == link_tier_name(LinkTierKind::network)) return LinkTierKind::network;
  return LinkTierKind::unknown;
}

// One collective (or send/recv) as NCCL-style args describe it.
struct CollectiveRecord {
  std::string name;         // "allreduce", "reduce_scatter", "allgather", "broadcast", "sendrecv", ...
  int64_t in_nelems = 0;    // "In msg nelems"
  int64_t out_nelems = 0;   // "Out msg nelems"
  int dtype_bytes = 4;
  int group_size = 1;       // "Group size"
  std::string group;        // "Process Group Name"
  int64_t seq = 0;          // "Seq"
  double start_us = 0, end_us = 0;  // the data movement itself (waiting excluded)
  std::string link;         // "Link": the tier's name in the profile, "NVLink4 (NVSwitch)" ("" if not given)
  LinkTierKind link_tier = LinkTierKind::unknown;  // "Link tier"
};

struct StepWindow {
  int step = 0;
  double start_us = 0, end_us = 0;  // the ProfilerStep#N annotation on the CPU thread
};

struct MemorySample {
  double t_us = 0;
  int64_t allocated = 0, reserved = 0;
};

// What the caching allocator did that users count (torch.cuda.memory_stats()): instants on the
// memory lane, cat "allocator".
enum class AllocatorEventKind : uint8_t {
  segment_malloc,  // a new segment from the device (cudaMalloc)
  segment_free,    // a cached segment given back (cudaFree)
  alloc_retry,     // no room: every event waited for, the cache released, the device asked again
  out_of_memory,   // the retry failed too
};

// "segment malloc", "segment free", "alloc retry", "out of memory": the names the trace gives them.
inline std::string_view allocator_event_name(AllocatorEventKind kind) {
  switch (kind) {
    case AllocatorEventKind::segment_malloc: return "segment malloc";
    case AllocatorEventKind::segment_free: return "segment free";
    case AllocatorEventKind::alloc_retry: return "alloc retry";
    case AllocatorEventKind::out_of_memory: return "out of memory";
  }
  return "?";
}

struct AllocatorMark {
  double t_us = 0;
  AllocatorEventKind kind = AllocatorEventKind::segment_malloc;
};

// A record_function range over a stream's work (Kineto's gpu_user_annotation): what a stretch
// of the stream was for ("F3": micro-batch 3's forward). From its first slice's start to its
// last's end.
struct StreamRange {
  std::string name;
  int stream = 0;
  double start_us = 0, end_us = 0;
};

struct RankTimeline {
  int rank = 0;
  std::vector<DeviceSlice> slices;           // any order
  std::vector<CollectiveRecord> collectives;
  std::vector<StepWindow> steps;             // in step order
  std::vector<MemorySample> memory;          // in time order
  std::vector<AllocatorMark> allocator;      // in time order
  std::vector<StreamRange> stream_ranges;    // as written (the TraceRecorder's; the viewer draws them as slices)
};

}  // namespace shardlab
