// trace_model.h: a run's traces in memory, laid out for drawing: ranks, lanes, slices.
//
// The viewer's library (no UI): loads a run directory (every *.json and *.json.gz trace file in it)
// or trace files (shardlab's own or PyTorch profiler / Kineto traces), merges the ranks onto
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

// What a load holds at most, so that no file (hostile, broken, or only huge) takes the machine's
// memory or the renderer past its limits; shardlab-view's --max-name-bytes, --max-file-bytes and
// --max-events set them. A file that reaches a cap opens with what was read before it, and says
// so (Rank::stopped).
struct LoadLimits {
  // An event name longer than this is kept cut, with "... (N bytes)" after it: a name of
  // hundreds of megabytes would otherwise take that much memory again in every frame that draws
  // it, and overflow the renderer's vertex counts. No real trace comes near it.
  size_t max_name_bytes = 4096;
  // JSON bytes read from one file (a .gz's once decompressed: a gzip bomb stops here).
  uint64_t max_file_bytes = uint64_t{8} << 30;
  // Events read from one file: the model keeps about 200 bytes an event, so 4 GB at the cap.
  size_t max_events = 20'000'000;
};

// Slices nested deeper than this on one lane are dropped and counted (Rank::skipped): a lane
// 1,000 rows high is already past reading, and a row holds only slices that never overlap, so
// the renderer draws a bounded number of them however the file overlaps its events.
constexpr uint16_t kMaxDepth = 1000;

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

// Where a file's rank number came from, in the order they are tried.
enum class RankSource : uint8_t {
  distributed_info,  // the file's distributedInfo.rank (shardlab's, and PyTorch's in a distributed job)
  file_name,         // a number in the file's name: after "rank" ("rank-3.json.gz"), else its only one
  file_order,        // neither: the lowest rank no other file claims, in the order of the files' names
};
const char* rank_source_name(RankSource source);  // "distributedInfo", "file name", "file order"

struct Rank {
  int rank = 0;
  RankSource rank_from = RankSource::distributed_info;
  std::string file;
  std::vector<Lane> lanes;
  std::vector<Counter> counters;
  std::vector<Flow> flows;  // in order of from_us
  std::vector<AllocatorMarker> allocator;  // in time order
  RankTimeline timeline;  // for common/trace/metrics.h
  // Events dropped as unusable (bad pid/tid types, non-finite or negative times, unmatched E),
  // or nested deeper than kMaxDepth.
  size_t skipped = 0;
  size_t names_cut = 0;   // event names longer than LoadLimits::max_name_bytes, kept cut (see there)
  // "" when the file was read to its end; else where the reading stopped and why: the file ends
  // inside its events (a run killed while writing it: the events before the cut are here), or
  // it reached a LoadLimits cap.
  std::string stopped;
  // "" unless the file says its run failed before the end (shardlab's otherData.incomplete):
  // then why ("rank 1: deliberate failure"). Its events end where this rank stopped.
  std::string incomplete;
};

// A file the load did not open, and why: not a trace (summary.json), unreadable or broken, or
// its rank already taken by another file. The rest of the run opens without it.
struct NotOpened {
  std::string file;
  std::string why;
  bool not_a_trace = false;  // JSON without traceEvents: expected beside rank files (summary.json)
};

struct TraceModel {
  std::vector<Rank> ranks;            // in rank order
  std::vector<NotOpened> not_opened;
  std::vector<std::string> names;     // interned slice names
  std::vector<std::string> args_json; // interned args objects as JSON text ([0] is "")
  double start_us = 0, end_us = 0;    // over every rank
  size_t events = 0;                  // slices loaded
  size_t skipped = 0;                 // over every rank
  size_t names_cut = 0;               // over every rank
  LoadLimits limits;                  // what the load was allowed
};

// Thrown by load_traces when the progress callback returned false.
struct LoadCancelled : std::runtime_error {
  LoadCancelled() : std::runtime_error("loading cancelled") {}
};

// Progress: bytes read so far and the total (on disk: compressed bytes for .gz); return false
// to cancel. Called on the thread that called load_traces, after each MiB read and once at the end.
using LoadProgress = std::function<bool(size_t done, size_t total)>;

// Loads paths (a run directory or trace files). A directory contributes every *.json and
// *.json.gz file in it (Kineto's <worker>.<time>.pt.trace.json(.gz) among them), in the order of
// their names (numbers compared as numbers). A file's rank is its distributedInfo.rank, else a
// number in its name, else the lowest rank no other file claims (RankSource).
// A file that does not open (not a trace, not JSON, truncated, wrong types..., or a rank another
// file has already claimed) goes into not_opened with why, and the rest open; only when no file
// opens does this throw std::runtime_error, with each file's message naming the file and what is
// wrong. Never crashes on hostile input. Files are parsed in parallel, one thread per file up to
// the hardware's threads, and a file's events in chunks on the threads no file needs (one large
// file uses every core).
TraceModel load_traces(const std::vector<std::string>& paths, const LoadProgress& progress = {},
                       const LoadLimits& limits = {});

}  // namespace shardlab::viewer
