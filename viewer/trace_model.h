// trace_model.h: a run's traces in memory, laid out for drawing: ranks, lanes, slices.
//
// The viewer's library (no UI): loads a run directory (every rank<R>.json) or trace files
// (.json or .json.gz; shardlab's own or PyTorch profiler / Kineto traces), merges the ranks onto
// one time axis, sorts each rank's lanes (CPU threads, then streams, by their sort indices),
// nests each lane's slices (depth), keeps flows, counters and step annotations, and builds
// each rank's RankTimeline so common/trace/metrics.h computes every figure (the same code as the
// run summary). Built for a million events: names are interned, slices are small PODs in
// time order per lane.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "trace/timeline.h"

namespace shardlab::viewer {

enum class Category : uint8_t { compute, comm, comm_wait, memcpy, cpu_op, runtime, annotation, other };

struct Slice {
  double start_us = 0, end_us = 0;
  uint32_t name = 0;      // index into TraceModel::names
  uint32_t args = 0;      // index into TraceModel::args_json (0: none)
  uint16_t depth = 0;     // nesting level within its lane (0 = outermost)
  Category category = Category::other;
  uint64_t correlation = 0;  // launch <-> kernel (0: none)
};

struct Lane {
  std::string name;        // "CPU thread", "stream 7 compute"
  std::string process;     // its process's name: "rank 0 GPU 0 (sim H100)" ("" if unnamed)
  // Numeric pid/tid as in the file; strings that spell one ("24572", "stream 7": PyTorch 1.8)
  // count as that number. Other strings (Kineto's "Spans", thread names) and numbers beyond int
  // get negative ids, numbered per file in order of appearance.
  int pid = 0, tid = 0;
  bool device = false;     // a GPU stream (else a CPU thread): it has kernel/gpu_memcpy/gpu_memset events
  int process_sort_index = 0;  // process_sort_index metadata, else the pid
  int sort_index = 0;          // thread_sort_index metadata, else the tid
  uint16_t max_depth = 0;
  std::vector<Slice> slices;  // sorted by start, then longer first
};

struct Counter {
  std::string name;  // "GPU memory allocated"
  std::vector<std::pair<double, double>> samples;  // (t_us, value), in time order
};

struct Flow {
  uint64_t id = 0;
  int from_lane = -1, to_lane = -1;  // indices into the rank's lanes
  double from_us = 0, to_us = 0;
  // The slices the ends bind to (indices into the lanes' slices, -1: none): the deepest slice
  // enclosing the time ("s", and "f" with "bp": "e"), else for "f" the next slice to start.
  int64_t from_slice = -1, to_slice = -1;
};

// An allocator instant (segment malloc or free, alloc retry, out of memory), drawn on the
// memory lane; its args (bytes, stream, released bytes, the request) are for the tooltip.
struct AllocatorMarker {
  double t_us = 0;
  AllocatorEventKind kind = AllocatorEventKind::segment_malloc;
  uint32_t args = 0;  // index into TraceModel::args_json (0: none)
};

struct Rank {
  int rank = 0;
  std::string file;
  std::vector<Lane> lanes;
  std::vector<Counter> counters;
  std::vector<Flow> flows;  // in order of from_us
  std::vector<AllocatorMarker> allocator;  // in time order
  RankTimeline timeline;  // for common/trace/metrics.h
  size_t skipped = 0;     // events dropped as unusable (bad pid/tid types, non-finite or negative times, unmatched E)
  // "" unless the file says its run failed before the end (shardlab's otherData.incomplete):
  // then why ("rank 1: deliberate failure"). Its events end where this rank stopped.
  std::string incomplete;
};

struct TraceModel {
  std::vector<Rank> ranks;            // in rank order
  std::vector<std::string> names;     // interned slice names
  std::vector<std::string> args_json; // interned args objects as JSON text ([0] is "")
  double start_us = 0, end_us = 0;    // over every rank
  size_t events = 0;                  // slices loaded
  size_t skipped = 0;                 // over every rank
};

// Thrown by load_traces when the progress callback returned false.
struct LoadCancelled : std::runtime_error {
  LoadCancelled() : std::runtime_error("loading cancelled") {}
};

// Progress: bytes read so far and the total (on disk: compressed bytes for .gz); return false
// to cancel. Called on the thread that called load_traces, after each MiB read and once at the end.
using LoadProgress = std::function<bool(size_t done, size_t total)>;

// Loads paths (a run directory or trace files). Throws std::runtime_error with a message naming
// the file and what is wrong (not JSON, truncated, no traceEvents, wrong types...); never
// crashes on hostile input. A directory contributes every rank<R>.json / rank<R>.json.gz in it
// (rank R); a file's rank is its distributedInfo.rank, else its position in `paths`. Files
// are parsed in parallel, one thread per file up to the hardware's threads, and a file's events
// in chunks on the threads no file needs (one large file uses every core).
TraceModel load_traces(const std::vector<std::string>& paths, const LoadProgress& progress = {});

}  // namespace shardlab::viewer
