// trace.h: one rank's Chrome-format trace, written to the schema in README.md, "Traces" (Kineto-compatible).
//
// The devices and communicators call the typed methods below while a chapter runs; each call
// appends one JSON event (kept as text, ready to write) and, for device work, steps and memory,
// the matching entry of a RankTimeline that the metrics library reads. Times are integer
// nanoseconds since the job-wide base and are written as microseconds with exactly 3 decimals,
// so nesting decided in nanoseconds survives into the file unchanged.
//
// File layout (rank<R>.json), in this order:
//   {"distributedInfo": {"backend": ..., "rank": R, "world_size": W},
//    "schemaVersion": 1, "displayTimeUnit": "ns", "baseTimeNanoseconds": B,
//    "deviceProperties": [...], "otherData": {...},
//    "traceEvents": [ metadata..., events... ]}
// A run killed before it writes this file must not lose what it did: while the run goes on, the
// file grows by each step's events (begin_stream, flush_stream), the same layout cut after the
// last event appended, its otherData marked incomplete. A reader takes a file cut at any byte up
// to its last whole event (the viewer; tests/tools/validate_trace.py). write() then replaces it
// whole.
// Lanes: the host thread is pid = host_pid(rank), tid = 1 (cats cpu_op, user_annotation,
// cuda_runtime); the device is pid = the local device index, tid = stream id (cats kernel,
// gpu_memcpy, gpu_memset). Launches and their kernels are linked by ac2g flows ("s" at the
// launch, "f" with "bp": "e" at the kernel) whose ids, equal to the correlation, are unique
// across the job. Memory counters are "C" events on the device pid. No args key is named "rank".
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>  // declarations only: json.hpp costs every includer ~2 s to compile

#include "trace/file_output.h"
#include "trace/timeline.h"

namespace shardlab {

// Args of one event, serialized as they are added (deterministic key order).
class TraceArgs {
 public:
  TraceArgs& add(std::string_view key, int64_t v);
  TraceArgs& add(std::string_view key, int v) { return add(key, static_cast<int64_t>(v)); }
  TraceArgs& add(std::string_view key, uint64_t v) { return add(key, static_cast<int64_t>(v)); }
  TraceArgs& add(std::string_view key, double v);  // whole numbers exactly, others to 6 significant digits
  TraceArgs& add(std::string_view key, std::string_view v);
  TraceArgs& add(std::string_view key, const char* v) { return add(key, std::string_view(v)); }
  TraceArgs& add(std::string_view key, std::span<const int> list);  // "[0, 1]"; an empty one "[]"
  const std::string& json() const { return body_; }  // the inside of {...}, may be empty
  bool empty() const { return body_.empty(); }

 private:
  void append_key(std::string_view key);  // separator and "key": ; throws on "rank" (HTA regex)

  std::string body_;
};

// Everything NCCL's Kineto integration writes for a collective kernel.
struct CollectiveArgs {
  std::string name;           // "allreduce", "reduce_scatter", "allgather", "broadcast", "sendrecv"
  std::string kernel_name;    // "ncclDevKernel_AllReduce_Sum_f32_RING_SIMPLE"
  int64_t in_nelems = 0, out_nelems = 0;
  std::string dtype;          // Kineto's spelling: "Float"
  int dtype_bytes = 4;
  int group_size = 1;
  std::string group_name;     // "Process Group Name"
  std::vector<int> group_ranks;  // "Process Group Ranks": the group's ranks in the job
  int64_t seq = 0;
  // Ours, after Kineto's: the link this rank's bytes cross ("Link": the profile's name for the
  // tier, "Link tier": intra-node or network; comm.h, collective_args).
  std::string link;
  LinkTierKind link_tier = LinkTierKind::unknown;
};

class TraceRecorder {
 public:
  static int host_pid(int rank) { return 100000 + rank; }  // deterministic, unlike an OS pid
  static constexpr int kHostTid = 1;

  TraceRecorder(int rank, int world_size, int device_index);

  int rank() const { return rank_; }
  int device_pid() const { return device_index_; }

  // Metadata: lane names and order.
  void name_host(std::string_view process_name);             // "rank 0 CPU"
  void name_device(std::string_view process_name);           // "rank 0 GPU 0 (sim H100)"
  void name_stream(int stream_id, std::string_view name);    // "stream 7 compute"

  // Host thread. cpu_op and annotation slices are recorded when they end (scopes close inner
  // first), so the file is not sorted by time; viewers sort.
  void cpu_op(std::string_view name, int64_t ts_ns, int64_t dur_ns, const TraceArgs& args = {});
  void annotation(std::string_view name, int64_t ts_ns, int64_t dur_ns);
  void step(int step, int64_t ts_ns, int64_t dur_ns);  // "ProfilerStep#N" + a timeline step window
  // A runtime call on the host thread (cudaLaunchKernel, cudaMemcpyAsync, cudaEventRecord, ...).
  // Returns its correlation id (job-unique); `flow` also starts an ac2g flow at it.
  uint64_t runtime_call(std::string_view name, int64_t ts_ns, int64_t dur_ns, bool flow);

  // Device lanes. `correlation` 0 means no launch links to it.
  void kernel(int stream, std::string_view name, int64_t ts_ns, int64_t dur_ns, uint64_t correlation,
              double flops, double bytes);
  void memcpy(int stream, std::string_view name, int64_t ts_ns, int64_t dur_ns, uint64_t correlation,
              double bytes);
  void memset(int stream, std::string_view name, int64_t ts_ns, int64_t dur_ns, uint64_t correlation,
              double bytes);
  // A collective: an optional wait slice [wait_start, start) when this rank arrived before the
  // others, then the kernel [start, end). Both named nccl... (the wait is part of the NCCL kernel
  // on a real GPU); the timeline marks the wait as comm_wait.
  void collective(int stream, const CollectiveArgs& c, int64_t wait_start_ns, int64_t start_ns,
                  int64_t end_ns, uint64_t correlation);

  // A record_function range on a stream (Kineto's gpu_user_annotation): it spans the device
  // slices launched onto `stream` between open_gpu_range and close_gpu_range, from the first's
  // start to the last's end, so a timeline names what each stretch of a stream does. A device
  // that learns its slices' times late (a real GPU) records them after the range closed, so the
  // range is written once they are all known: when a slice launched after it lands on its
  // stream, or at flush_stream and write. A range without slices is not written.
  uint64_t open_gpu_range(int stream, std::string_view name);
  void close_gpu_range(uint64_t id);

  void memory(int64_t ts_ns, int64_t allocated, int64_t reserved);
  // An allocator instant on the memory lane (the device process), cat "allocator", named
  // "segment malloc", "segment free", "alloc retry" or "out of memory".
  void allocator_event(AllocatorEventKind kind, int64_t ts_ns, const TraceArgs& args);
  // An instant event on the host thread (race reports, warnings), cat "shardlab".
  void instant(std::string_view name, int64_t ts_ns, const TraceArgs& args);

  const RankTimeline& timeline() const { return timeline_; }
  size_t event_count() const { return events_.size(); }
  double total_flops() const { return total_flops_; }  // what every kernel so far declared

  // Writes rank<R>.json. `other_data` and `device_properties` go into the header as given.
  // A stream to the same path ends first; the file replaces it whole.
  void write(const std::string& path, std::string_view backend, int64_t base_time_ns,
             const nlohmann::json& device_properties, const nlohmann::json& other_data);

  // The file as the run goes (see the top): begin_stream writes the header and the events so
  // far to `path`; each flush_stream appends the events recorded since. Both throw
  // std::runtime_error naming the file and errno's reason, and the stream then stops.
  void begin_stream(const std::string& path, std::string_view backend, int64_t base_time_ns,
                    const nlohmann::json& device_properties, const nlohmann::json& other_data);
  void flush_stream();
  bool streaming() const { return stream_ != nullptr; }

 private:
  // Everything before the first event: distributedInfo first (HTA reads the rank from the
  // first "rank":\s+N in the file), through "traceEvents": [.
  std::string header(std::string_view backend, int64_t base_time_ns, const nlohmann::json& device_properties,
                     const nlohmann::json& other_data) const;
  void emit(std::string line);
  std::string complete(int pid, int tid, std::string_view cat, std::string_view name, int64_t ts, int64_t dur,
                       const std::string& args) const;
  void flow_end(int stream, uint64_t correlation, int64_t ts_ns);
  // An ac2g flow event: 's' at a launch, 'f' at the kernel it launched.
  static std::string flow_event(char ph, int pid, int tid, uint64_t id, int64_t ts_ns);
  void metadata(std::string_view what, int pid, int tid, const TraceArgs& args);
  TraceArgs device_args(int stream, uint64_t correlation) const;  // "device", "stream", "correlation"
  // A device slice launched with `correlation` landed on `stream`: the ranges it falls in grow,
  // the closed ranges it comes after are written.
  void extend_gpu_ranges(int stream, uint64_t correlation, int64_t ts_ns, int64_t end_ns);
  void write_gpu_ranges();  // every closed range, as flush_stream and write end
  // One slice on a device lane: its event and its timeline entry.
  void device_slice(int stream, std::string_view cat, std::string_view name, int64_t ts_ns, int64_t dur_ns,
                    const TraceArgs& args, SliceKind kind, int32_t collective = -1);

  int rank_, world_size_, device_index_;
  uint64_t next_correlation_ = 1;
  struct GpuRange {
    uint64_t id;
    int stream;
    std::string name;
    uint64_t after, through;  // the launches it holds: correlations in (after, through]
    bool closed = false;
    int64_t start_ns = INT64_MAX, end_ns = INT64_MIN;
  };
  void write_gpu_range(const GpuRange& r);
  std::vector<GpuRange> gpu_ranges_;  // not yet written, in the order they opened
  uint64_t next_gpu_range_ = 1;
  std::vector<std::string> meta_;    // M events
  std::vector<std::string> events_;  // everything else
  RankTimeline timeline_;
  double total_flops_ = 0;
  std::unique_ptr<GrowingFile> stream_;
  size_t streamed_meta_ = 0, streamed_events_ = 0;  // lines already in the stream
};

// "12.345" from 12345 ns: microseconds with exactly three decimals.
std::string format_us(int64_t ns);
// A JSON string literal with escapes.
std::string json_string(std::string_view s);

}  // namespace shardlab
