// allocator.h: one caching allocator for every device, modelled on PyTorch's
// CUDACachingAllocator (c10/cuda/CUDACachingAllocator.cpp).
//
// Why cache at all: cudaMalloc and cudaFree synchronize the device and cost tens of
// microseconds, so a training loop that frees and reallocates activations every step would
// stall. The allocator keeps freed blocks and hands them out again.
//
// The rules it teaches (and the tests check):
// - Sizes are rounded up to multiples of 512 bytes. Requests up to 1 MiB are carved from 2 MiB
//   segments (the small pool); larger ones from 20 MiB segments when under 10 MiB, else from a
//   segment of the request rounded up to 2 MiB (the large pool). A block larger than needed is
//   split: in the small pool when at least 512 bytes remain, in the large pool when more than
//   1 MiB remains. Freed neighbours in one segment merge again.
// - Pools are per stream: a block freed on stream A is reused only for allocations on stream A,
//   because work already queued on A is ordered before anything A runs next.
// - record_stream(block, B): the block is also used by stream B. When it is freed, an event is
//   recorded on B and the block is held back until that event has completed (an event query on
//   the CPU), so B's queued work cannot see the memory reused under it.
// - Counters: allocated (bytes of live blocks, rounded sizes) and reserved (bytes of segments
//   obtained from the device), with their peaks; every change is reported to the backend, which
//   writes it into the trace as a counter.
// - Out of memory: when a new segment would take reserved past the capacity, or the device
//   refuses it (a real GPU has less free memory than the capacity read at start when another
//   process or NCCL holds some: its raw_alloc throws OutOfMemory), the allocator does what
//   CUDACachingAllocator's release_cached_blocks does: it synchronizes the device (so every
//   pending block completes), gives every cached segment that holds no live block back, and asks
//   the device for the segment once more: an "alloc retry". It does not look in the pools again:
//   a block that came back inside a segment still partly live stays unused (fragmentation). If
//   the retry fails it throws OutOfMemory naming the requested, allocated, reserved and capacity
//   bytes (and the device's refusal).
// - Statistics, as torch.cuda.memory_stats() names them: device allocations and frees
//   (cudaMalloc, cudaFree), synchronizations of every stream, alloc retries and OOMs. Each is
//   also reported to the backend, which marks it in the trace.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "device/event.h"
#include "trace/timeline.h"

namespace shardlab {

// torch.cuda.memory_stats()'s num_device_alloc, num_device_free, num_sync_all_streams,
// num_alloc_retries and num_ooms: counts over the allocator's life.
struct AllocatorStats {
  int64_t segment_mallocs = 0;
  int64_t segment_frees = 0;
  int64_t sync_all_streams = 0;
  int64_t alloc_retries = 0;
  int64_t ooms = 0;
};

// One of those moments, for the trace.
struct AllocatorNote {
  AllocatorEventKind kind = AllocatorEventKind::segment_malloc;
  size_t bytes = 0;           // the segment (malloc, free) or the rounded request (retry, OOM)
  int stream_id = 0;          // the segment's or the request's stream
  size_t released_bytes = 0;  // retry: the cached segments it gave back
  std::string_view label;     // retry, OOM: the request's label
};

// What the allocator needs from a device. The sim implements it over virtual time (and host
// memory or none at all under --compute skip); CUDA over cudaMalloc and cudaEvent.
class AllocatorBackend {
 public:
  virtual ~AllocatorBackend() = default;
  // Obtain `bytes` of device memory. May return nullptr when no real memory backs the device
  // (--compute skip): the allocator tracks segments by id, not by pointer.
  virtual void* raw_alloc(size_t bytes) = 0;
  virtual void raw_free(void* ptr, size_t bytes) = 0;
  virtual Event record_event(Stream& stream) = 0;   // an event after the stream's queued work
  virtual bool event_done(const Event& event) = 0;   // has it completed, as the CPU sees it now?
  virtual void synchronize_device() = 0;             // before releasing cached segments
  virtual void memory_changed(size_t allocated, size_t reserved) = 0;  // trace counter
  virtual void allocator_event(const AllocatorNote&) {}  // trace instant
};

class OutOfMemory : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Allocation {
  void* ptr = nullptr;    // nullptr when the backend has no real memory
  uint64_t id = 0;        // unique per allocation, never reused
  uint64_t segment = 0;   // id of the segment it was carved from
  uint64_t offset = 0;    // byte offset inside that segment
  size_t size = 0;        // rounded size (what `allocated` counts)
  size_t requested = 0;   // what was asked for
};

class CachingAllocator {
 public:
  static constexpr size_t kMinBlock = 512;
  static constexpr size_t kSmallRequest = 1 << 20;    // <= 1 MiB: small pool
  static constexpr size_t kSmallSegment = 2 << 20;    // small pool segment
  static constexpr size_t kLargeSegment = 20 << 20;   // for large requests under 10 MiB
  static constexpr size_t kMinLargeAlloc = 10 << 20;
  static constexpr size_t kRoundLarge = 2 << 20;

  CachingAllocator(AllocatorBackend& backend, size_t capacity_bytes);
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A zero-byte request gives an allocation of size 0 that owns no block (like PyTorch).
  Allocation allocate(size_t bytes, Stream& stream, std::string_view label);
  void free(uint64_t id);
  void record_stream(uint64_t id, Stream& stream);
  void empty_cache();  // release every segment that holds no live or pending block

  static size_t round_size(size_t bytes);

  bool is_live(uint64_t id) const;
  std::string label(uint64_t id) const;  // also for freed allocations (race reports)

  size_t allocated() const { return allocated_; }
  size_t reserved() const { return reserved_; }
  size_t peak_allocated() const { return peak_allocated_; }
  size_t peak_reserved() const { return peak_reserved_; }
  // The peak of active bytes: allocated plus the freed blocks still held for another stream's
  // work (pending), as torch.cuda.memory_stats()'s active_bytes counts them.
  size_t peak_active() const { return peak_active_; }
  size_t capacity() const { return capacity_; }
  void reset_peaks();
  size_t segments() const;
  size_t cached_bytes() const;  // reserved but not allocated
  const AllocatorStats& stats() const { return stats_; }

 private:
  struct Block;
  struct Segment;
  struct Impl;  // the segments, the free-block index, pending blocks, allocation records

  Block* find_free_block(int stream_id, bool small_pool, size_t size);
  // A new segment, or nullptr when the device refuses it (its reason in *refusal).
  Block* allocate_segment(size_t segment_bytes, int stream_id, bool small_pool, std::string* refusal);
  void split_block(Block* block, size_t size);
  void return_to_pool(Block* block);
  void process_pending_blocks();
  size_t release_empty_segments();  // the bytes given back
  void note_change();
  [[noreturn]] void throw_out_of_memory(size_t size, const Stream& stream, std::string_view label,
                                        const std::string& refusal) const;

  std::unique_ptr<Impl> impl_;
  AllocatorBackend& backend_;
  size_t capacity_;
  size_t allocated_ = 0, reserved_ = 0, peak_allocated_ = 0, peak_reserved_ = 0;
  size_t pending_ = 0, peak_active_ = 0;
  AllocatorStats stats_;
};

}  // namespace shardlab
