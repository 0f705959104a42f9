// Unit tests for the caching allocator (common/device/allocator.h), against a fake backend that records
// every call and whose events complete when the test says so (or at a device synchronize).
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <utility>
#include <vector>

#include "device/allocator.h"

using namespace shardlab;

namespace {

constexpr size_t KiB = size_t{1} << 10;
constexpr size_t MiB = size_t{1} << 20;
constexpr size_t GiB = size_t{1} << 30;

struct FakeEvent : EventState {
  bool done = false;
};

class FakeBackend : public AllocatorBackend {
 public:
  // real_memory: back segments with host memory (to check pointers); otherwise return nullptr
  // like a device under --compute skip, which also lets tests use capacities of many GiB.
  explicit FakeBackend(bool real_memory = false) : real_memory_(real_memory) {}

  void* raw_alloc(size_t bytes) override {
    raw_allocs.push_back(bytes);
    // A real GPU can refuse below the allocator's capacity: other processes hold memory too.
    if (held + bytes > device_bytes) throw OutOfMemory("the fake device has " + std::to_string(device_bytes - held) + " bytes free");
    held += bytes;
    return real_memory_ ? std::malloc(bytes) : nullptr;
  }
  void raw_free(void* ptr, size_t bytes) override {
    raw_frees.push_back(bytes);
    held -= bytes;
    std::free(ptr);
  }
  Event record_event(Stream& stream) override {
    auto state = std::make_shared<FakeEvent>();
    events.push_back(state);
    recorded_on.push_back(stream.id());
    return Event{state, stream.id()};
  }
  bool event_done(const Event& event) override {
    return static_cast<const FakeEvent&>(*event.state).done;
  }
  void synchronize_device() override {
    ++synchronizations;
    complete_all_events();
  }
  void memory_changed(size_t allocated, size_t reserved) override {
    changes.emplace_back(allocated, reserved);
  }
  void allocator_event(const AllocatorNote& note) override {
    notes.push_back(note);
    notes.back().label = {};  // the label's storage is the caller's
  }

  void complete_all_events() {
    for (auto& event : events) event->done = true;
  }

  std::vector<size_t> raw_allocs, raw_frees;
  size_t device_bytes = SIZE_MAX, held = 0;  // what the device has, and what this allocator holds of it
  std::vector<std::shared_ptr<FakeEvent>> events;
  std::vector<int> recorded_on;
  int synchronizations = 0;
  std::vector<std::pair<size_t, size_t>> changes;  // (allocated, reserved) per memory_changed
  std::vector<AllocatorNote> notes;                 // per allocator_event

 private:
  bool real_memory_;
};

// Device is abstract and lives elsewhere; a Stream only keeps a reference to it, which neither
// the allocator nor these tests ever use. Binding the reference to dummy storage is enough.
Device& unused_device() {
  alignas(64) static unsigned char storage[1];
  return *reinterpret_cast<Device*>(storage);
}

}  // namespace

TEST_CASE("allocator: sizes round up to 512 bytes", "[allocator]") {
  CHECK(CachingAllocator::round_size(1) == 512);
  CHECK(CachingAllocator::round_size(512) == 512);
  CHECK(CachingAllocator::round_size(513) == 1024);
  CHECK(CachingAllocator::round_size(MiB) == MiB);
  CHECK(CachingAllocator::round_size(MiB + 1) == MiB + 512);

  FakeBackend backend;
  CachingAllocator alloc(backend, GiB);
  Stream stream(unused_device(), 0, "compute");
  const Allocation a = alloc.allocate(1, stream, "a");
  CHECK(a.size == 512);
  CHECK(a.requested == 1);
  CHECK(alloc.allocated() == 512);
}

TEST_CASE("allocator: requests up to 1 MiB share 2 MiB small segments", "[allocator]") {
  FakeBackend backend;
  CachingAllocator alloc(backend, GiB);
  Stream stream(unused_device(), 0, "compute");

  const Allocation a = alloc.allocate(1, stream, "a");
  REQUIRE(backend.raw_allocs == std::vector<size_t>{2 * MiB});
  CHECK(a.segment == 1);
  CHECK(a.offset == 0);

  const Allocation b = alloc.allocate(MiB, stream, "b");  // still small: same segment
  CHECK(b.segment == a.segment);
  CHECK(b.offset == 512);
  CHECK(backend.raw_allocs.size() == 1);

  const Allocation c = alloc.allocate(MiB + 1, stream, "c");  // large pool
  CHECK(c.segment == 2);
  CHECK(c.offset == 0);
  CHECK(backend.raw_allocs == std::vector<size_t>{2 * MiB, 20 * MiB});
  CHECK(alloc.segments() == 2);
  CHECK(alloc.reserved() == 22 * MiB);
}

TEST_CASE("allocator: a small block splits down to a 512-byte remainder", "[allocator]") {
  FakeBackend backend;
  CachingAllocator alloc(backend, GiB);
  Stream stream(unused_device(), 0, "compute");

  const Allocation a = alloc.allocate(MiB, stream, "a");
  const Allocation b = alloc.allocate(MiB - 512, stream, "b");  // leaves exactly 512 B
  const Allocation c = alloc.allocate(1, stream, "c");
  CHECK(b.size == MiB - 512);
  CHECK(c.segment == a.segment);
  CHECK(c.offset == 2 * MiB - 512);
  CHECK(alloc.segments() == 1);
  CHECK(alloc.cached_bytes() == 0);
}

TEST_CASE("allocator: large segment sizes", "[allocator]") {
  FakeBackend backend;
  CachingAllocator alloc(backend, 10 * GiB);
  Stream s1(unused_device(), 1, "one");
  Stream s2(unused_device(), 2, "two");
  Stream s3(unused_device(), 3, "three");
  Stream s4(unused_device(), 4, "four");

  // Different streams, so that each request needs a segment of its own.
  alloc.allocate(5 * MiB, s1, "5 MiB");
  alloc.allocate(10 * MiB - 512, s2, "just under 10 MiB");
  alloc.allocate(10 * MiB, s3, "10 MiB");
  alloc.allocate(11 * MiB + 1, s4, "11 MiB and a byte");
  CHECK(backend.raw_allocs == std::vector<size_t>{20 * MiB, 20 * MiB, 10 * MiB, 12 * MiB});
}

TEST_CASE("allocator: large blocks split only when more than 1 MiB remains", "[allocator]") {
  FakeBackend backend;
  CachingAllocator alloc(backend, GiB);
  Stream stream(unused_device(), 0, "compute");

  const Allocation a = alloc.allocate(5 * MiB, stream, "a");  // 20 MiB segment, 15 MiB left
  const Allocation b = alloc.allocate(14 * MiB, stream, "b");
  CHECK(b.segment == a.segment);
  CHECK(b.offset == 5 * MiB);
  // The 1 MiB left over is not worth a block of its own: b takes the rest.
  CHECK(b.size == 15 * MiB);
  CHECK(b.requested == 14 * MiB);
  CHECK(alloc.allocated() == 20 * MiB);
  CHECK(alloc.cached_bytes() == 0);

  alloc.free(b.id);
  const Allocation c = alloc.allocate(13 * MiB, stream, "c");  // 2 MiB remains: split
  CHECK(c.offset == 5 * MiB);
  CHECK(c.size == 13 * MiB);
  CHECK(alloc.cached_bytes() == 2 * MiB);
  CHECK(backend.raw_allocs.size() == 1);
}

TEST_CASE("allocator: a freed block is reused on the same stream", "[allocator]") {
  FakeBackend backend;
  CachingAllocator alloc(backend, GiB);
  Stream stream(unused_device(), 0, "compute");

  const Allocation first = alloc.allocate(4 * KiB, stream, "first");
  alloc.free(first.id);
  const Allocation second = alloc.allocate(4 * KiB, stream, "second");
  CHECK(second.segment == first.segment);
  CHECK(second.offset == first.offset);
  CHECK(second.id != first.id);
  CHECK(backend.raw_allocs.size() == 1);

  // Best fit: with a 64 KiB and a 4 KiB free block, a 4 KiB request takes the 4 KiB one even
  // though the other comes first in the segment. Live fences keep the free blocks from merging.
  const Allocation big = alloc.allocate(64 * KiB, stream, "big");
  alloc.allocate(4 * KiB, stream, "fence");
  const Allocation small = alloc.allocate(4 * KiB, stream, "small");
  alloc.allocate(4 * KiB, stream, "fence");
  alloc.free(big.id);
  alloc.free(small.id);
  const Allocation third = alloc.allocate(4 * KiB, stream, "third");
  CHECK(third.offset == small.offset);
  CHECK(third.offset == 72 * KiB);
}

TEST_CASE("allocator: no reuse across streams", "[allocator]") {
  FakeBackend backend;
  CachingAllocator alloc(backend, GiB);
  Stream compute(unused_device(), 7, "compute");
  Stream comm(unused_device(), 8, "comm");

  const Allocation a = alloc.allocate(4 * KiB, compute, "a");
  alloc.free(a.id);
  const Allocation b = alloc.allocate(4 * KiB, comm, "b");
  CHECK(b.segment != a.segment);
  CHECK(backend.raw_allocs.size() == 2);
  CHECK(alloc.segments() == 2);
}

TEST_CASE("allocator: record_stream holds a freed block until the event completes", "[allocator]") {
  FakeBackend backend;
  CachingAllocator alloc(backend, GiB);
  Stream compute(unused_device(), 7, "compute");
  Stream comm(unused_device(), 8, "comm");

  const Allocation a = alloc.allocate(4 * KiB, compute, "bucket");
  alloc.record_stream(a.id, compute);  // its own stream: needs no event
  alloc.record_stream(a.id, comm);
  alloc.record_stream(a.id, comm);  // recorded once per stream
  alloc.free(a.id);
  REQUIRE(backend.events.size() == 1);
  CHECK(backend.recorded_on == std::vector<int>{8});
  CHECK_FALSE(alloc.is_live(a.id));
  CHECK(alloc.allocated() == 0);  // pending blocks no longer count as allocated...
  CHECK(alloc.reserved() == 2 * MiB);  // ...but still as reserved

  // comm's event has not completed: the block must not be handed out again.
  const Allocation b = alloc.allocate(4 * KiB, compute, "b");
  CHECK(b.offset != a.offset);
  CHECK(b.segment == a.segment);

  // Nor may empty_cache release its segment.
  alloc.free(b.id);
  alloc.empty_cache();
  CHECK(alloc.segments() == 1);

  backend.events[0]->done = true;
  const Allocation c = alloc.allocate(4 * KiB, compute, "c");
  CHECK(c.segment == a.segment);
  CHECK(c.offset == a.offset);
  CHECK(backend.raw_allocs.size() == 1);
  CHECK(backend.synchronizations == 0);  // completion was queried, never waited for
}

TEST_CASE("allocator: a pending block returns to the pool at empty_cache", "[allocator]") {
  FakeBackend backend;
  CachingAllocator alloc(backend, GiB);
  Stream compute(unused_device(), 7, "compute");
  Stream comm(unused_device(), 8, "comm");

  const Allocation a = alloc.allocate(4 * KiB, compute, "a");
  alloc.record_stream(a.id, comm);
  alloc.free(a.id);
  backend.complete_all_events();
  alloc.empty_cache();
  CHECK(alloc.segments() == 0);
  CHECK(alloc.reserved() == 0);
  CHECK(backend.raw_frees == std::vector<size_t>{2 * MiB});
}

TEST_CASE("allocator: freed neighbours merge", "[allocator]") {
  FakeBackend backend;
  CachingAllocator alloc(backend, GiB);
  Stream stream(unused_device(), 0, "compute");

  const Allocation a = alloc.allocate(512 * KiB, stream, "a");
  const Allocation b = alloc.allocate(512 * KiB, stream, "b");
  const Allocation c = alloc.allocate(512 * KiB, stream, "c");
  CHECK(b.segment == a.segment);
  CHECK(b.offset == 512 * KiB);
  CHECK(c.offset == MiB);

  // Freed in the order that exercises merging with the previous neighbour (b into a).
  alloc.free(a.id);
  alloc.free(b.id);
  // 1 MiB fits only in the merged a+b; the 512 KiB tail after c is too small.
  const Allocation d = alloc.allocate(MiB, stream, "d");
  CHECK(d.segment == a.segment);
  CHECK(d.offset == 0);
  CHECK(backend.raw_allocs.size() == 1);

  // Merging with the next neighbour too: free c (merges with the tail), then d (merges with
  // both) and the segment is whole again, so empty_cache can release it.
  alloc.free(c.id);
  alloc.free(d.id);
  alloc.empty_cache();
  CHECK(alloc.segments() == 0);
  CHECK(alloc.reserved() == 0);
}

TEST_CASE("allocator: pointers are segment base plus offset, or null without memory",
          "[allocator]") {
  Stream stream(unused_device(), 0, "compute");
  {
    FakeBackend backend(/*real_memory=*/true);
    CachingAllocator alloc(backend, GiB);
    const Allocation a = alloc.allocate(1000, stream, "a");
    const Allocation b = alloc.allocate(1000, stream, "b");
    REQUIRE(a.ptr != nullptr);
    CHECK(static_cast<char*>(b.ptr) - static_cast<char*>(a.ptr) == 1024);
    static_cast<char*>(b.ptr)[b.requested - 1] = 1;  // the memory is there (ASan checks)
  }
  {
    FakeBackend backend;
    CachingAllocator alloc(backend, GiB);
    const Allocation a = alloc.allocate(1000, stream, "a");
    CHECK(a.ptr == nullptr);
  }
}

TEST_CASE("allocator: counters, peaks and memory_changed", "[allocator]") {
  FakeBackend backend;
  CachingAllocator alloc(backend, GiB);
  Stream stream(unused_device(), 0, "compute");

  const Allocation a = alloc.allocate(1000, stream, "a");
  CHECK(alloc.allocated() == 1024);
  CHECK(alloc.reserved() == 2 * MiB);
  using Change = std::pair<size_t, size_t>;
  // The segment first (reserved), then the block (allocated).
  CHECK(backend.changes == std::vector<Change>{{0, 2 * MiB}, {1024, 2 * MiB}});

  const Allocation b = alloc.allocate(3 * MiB, stream, "b");
  CHECK(alloc.allocated() == 1024 + 3 * MiB);
  CHECK(alloc.reserved() == 22 * MiB);
  CHECK(alloc.cached_bytes() == 22 * MiB - 1024 - 3 * MiB);
  alloc.free(b.id);
  CHECK(backend.changes.back() == Change{1024, 22 * MiB});
  CHECK(alloc.allocated() == 1024);
  CHECK(alloc.peak_allocated() == 1024 + 3 * MiB);
  CHECK(alloc.peak_reserved() == 22 * MiB);

  alloc.empty_cache();  // the large segment is empty, the small one is not
  CHECK(alloc.reserved() == 2 * MiB);
  CHECK(backend.changes.back() == Change{1024, 2 * MiB});
  CHECK(alloc.peak_reserved() == 22 * MiB);

  alloc.reset_peaks();
  CHECK(alloc.peak_allocated() == 1024);
  CHECK(alloc.peak_reserved() == 2 * MiB);

  // A cached allocation changes allocated only.
  const size_t calls = backend.changes.size();
  const Allocation c = alloc.allocate(1000, stream, "c");
  CHECK(backend.changes.size() == calls + 1);
  CHECK(backend.changes.back() == Change{2048, 2 * MiB});
  CHECK(alloc.peak_allocated() == 2048);
  alloc.free(a.id);
  alloc.free(c.id);
  CHECK(alloc.allocated() == 0);
  CHECK(alloc.peak_allocated() == 2048);
}

TEST_CASE("allocator: empty_cache releases only empty segments", "[allocator]") {
  FakeBackend backend;
  CachingAllocator alloc(backend, GiB);
  Stream stream(unused_device(), 0, "compute");

  const Allocation kept = alloc.allocate(4 * KiB, stream, "kept");       // 2 MiB segment
  const Allocation big = alloc.allocate(12 * MiB, stream, "big");        // 12 MiB segment, full
  const Allocation dropped = alloc.allocate(4 * MiB, stream, "dropped");  // 20 MiB segment
  alloc.free(dropped.id);
  alloc.empty_cache();
  CHECK(backend.raw_frees == std::vector<size_t>{20 * MiB});
  CHECK(alloc.segments() == 2);
  CHECK(alloc.reserved() == 14 * MiB);
  CHECK(alloc.is_live(kept.id));
  CHECK(alloc.is_live(big.id));

  alloc.empty_cache();  // nothing more to release
  CHECK(backend.raw_frees.size() == 1);
}

TEST_CASE("allocator: the destructor releases every segment", "[allocator]") {
  FakeBackend backend(/*real_memory=*/true);
  Stream stream(unused_device(), 0, "compute");
  {
    CachingAllocator alloc(backend, GiB);
    alloc.allocate(4 * KiB, stream, "leaked on purpose");
    const Allocation b = alloc.allocate(4 * MiB, stream, "b");
    alloc.free(b.id);
  }
  CHECK(backend.raw_frees.size() == 2);
}

TEST_CASE("allocator: out of memory names the request, allocated, reserved and capacity",
          "[allocator]") {
  FakeBackend backend;
  CachingAllocator alloc(backend, 80 * GiB);
  Stream stream(unused_device(), 7, "compute");

  alloc.allocate(70 * GiB, stream, "weights");
  const Allocation scratch = alloc.allocate(2 * GiB, stream, "scratch");
  alloc.free(scratch.id);  // cached, but too small for the next request once released
  const auto expected =
      "out of memory: tried to allocate 10.50 GiB (11274289152 bytes) (\"activations\") "
      "on stream 7; "
      "allocated 70.00 GiB (75161927680 bytes), reserved 70.00 GiB (75161927680 bytes), "
      "capacity 80.00 GiB (85899345920 bytes)";
  CHECK_THROWS_WITH(alloc.allocate(10 * GiB + 512 * MiB, stream, "activations"), expected);
  CHECK(backend.synchronizations == 1);
  CHECK(alloc.reserved() == 70 * GiB);  // the empty 2 GiB segment went back on the way
  CHECK(alloc.allocated() == 70 * GiB);

  // Small figures use smaller units.
  FakeBackend small_backend;
  CachingAllocator tiny(small_backend, MiB);
  CHECK_THROWS_AS(tiny.allocate(100, stream, "x"), OutOfMemory);
  CHECK_THROWS_WITH(tiny.allocate(100, stream, "x"),
                    "out of memory: tried to allocate 512 B (512 bytes) (\"x\") on stream 7; "
                    "allocated 0 B (0 bytes), reserved 0 B (0 bytes), "
                    "capacity 1.00 MiB (1048576 bytes)");
  CHECK(tiny.reserved() == 0);
}

TEST_CASE("allocator: out of memory releases cached segments and retries", "[allocator]") {
  FakeBackend backend;
  CachingAllocator alloc(backend, 64 * MiB);
  Stream compute(unused_device(), 7, "compute");
  Stream comm(unused_device(), 8, "comm");

  // 40 MiB cached on another stream, where compute cannot reuse it.
  const Allocation other = alloc.allocate(40 * MiB, comm, "other stream");
  alloc.free(other.id);
  // And a pending block: a 20 MiB segment that only an event on comm keeps alive.
  const Allocation pending = alloc.allocate(5 * MiB, compute, "pending");
  alloc.record_stream(pending.id, comm);
  alloc.free(pending.id);
  CHECK(alloc.reserved() == 60 * MiB);

  const Allocation big = alloc.allocate(30 * MiB, compute, "big");
  CHECK(backend.synchronizations == 1);
  // Both cached segments went back: the pending block completed at the synchronize.
  CHECK(backend.raw_frees == std::vector<size_t>{40 * MiB, 20 * MiB});
  CHECK(alloc.reserved() == 30 * MiB);
  CHECK(alloc.segments() == 1);
  CHECK(big.size == 30 * MiB);
  // What torch.cuda.memory_stats() would count, and the trace's marks in order.
  const AllocatorStats& st = alloc.stats();
  CHECK(st.segment_mallocs == 3);
  CHECK(st.segment_frees == 2);
  CHECK(st.sync_all_streams == 1);
  CHECK(st.alloc_retries == 1);
  CHECK(st.ooms == 0);
  using K = AllocatorEventKind;
  std::vector<K> kinds;
  for (const AllocatorNote& n : backend.notes) kinds.push_back(n.kind);
  CHECK(kinds == std::vector<K>{K::segment_malloc, K::segment_malloc, K::segment_free, K::segment_free,
                                K::alloc_retry, K::segment_malloc});
  const AllocatorNote& retry = backend.notes[4];
  CHECK(retry.bytes == 30 * MiB);
  CHECK(retry.stream_id == 7);
  CHECK(retry.released_bytes == 60 * MiB);
}

TEST_CASE("allocator: a device that refuses below the capacity gets the cached segments back, then an error",
          "[allocator]") {
  FakeBackend backend;
  backend.device_bytes = 64 * MiB;  // another process took the rest of what the capacity counts on
  CachingAllocator alloc(backend, 96 * MiB);
  Stream compute(unused_device(), 7, "compute");
  Stream comm(unused_device(), 8, "comm");

  const Allocation other = alloc.allocate(40 * MiB, comm, "other stream");
  alloc.free(other.id);
  // Within the capacity (40 + 30 <= 96) but not on the device (40 + 30 > 64): it refuses, the
  // cached segment goes back, and the retry fits.
  const Allocation big = alloc.allocate(30 * MiB, compute, "big");
  CHECK(backend.synchronizations == 1);
  CHECK(backend.raw_allocs == std::vector<size_t>{40 * MiB, 30 * MiB, 30 * MiB});
  CHECK(backend.raw_frees == std::vector<size_t>{40 * MiB});
  CHECK(big.size == 30 * MiB);
  CHECK(alloc.reserved() == 30 * MiB);
  // Nothing cached is left to give back: the refusal becomes the error, with the device's reason.
  CHECK_THROWS_WITH(alloc.allocate(40 * MiB, compute, "too big"),
                    Catch::Contains("out of memory: tried to allocate") && Catch::Contains("\"too big\"") &&
                        Catch::Contains("the device refused: the fake device has"));
  CHECK(alloc.reserved() == 30 * MiB);
}

TEST_CASE("allocator: a pending block freed inside a live segment is not reused by the retry: out of memory",
          "[allocator]") {
  FakeBackend backend;
  CachingAllocator alloc(backend, 20 * MiB);
  Stream compute(unused_device(), 7, "compute");
  Stream comm(unused_device(), 8, "comm");

  const Allocation a = alloc.allocate(5 * MiB, compute, "a");
  alloc.record_stream(a.id, comm);
  alloc.free(a.id);
  // The rest of the segment; its 512 KiB remainder is too small to split off.
  const Allocation b = alloc.allocate(14 * MiB + 512 * KiB, compute, "b");
  CHECK(b.segment == a.segment);
  // c would fit in a's block once the synchronize completes it, but CUDACachingAllocator's
  // retry only releases whole free segments and asks the device again; the segment is still
  // partly live (b), so nothing is released and the new 20 MiB segment does not fit.
  CHECK_THROWS_AS(alloc.allocate(5 * MiB, compute, "c"), OutOfMemory);
  CHECK(backend.synchronizations == 1);
  CHECK(backend.raw_allocs.size() == 1);
  CHECK(backend.raw_frees.empty());
  const AllocatorStats& st = alloc.stats();
  CHECK(st.sync_all_streams == 1);
  CHECK(st.alloc_retries == 1);
  CHECK(st.ooms == 1);
  CHECK(backend.notes.back().kind == AllocatorEventKind::out_of_memory);
  CHECK(backend.notes.back().bytes == 5 * MiB);
  // The freed block is back in the pool: the next request of its size takes it without a retry.
  const Allocation d = alloc.allocate(5 * MiB, compute, "d");
  CHECK(d.offset == a.offset);
  CHECK(st.alloc_retries == 1);
}

TEST_CASE("allocator: zero-byte allocations own nothing", "[allocator]") {
  FakeBackend backend;
  CachingAllocator alloc(backend, GiB);
  Stream stream(unused_device(), 0, "compute");

  const Allocation a = alloc.allocate(0, stream, "empty");
  const Allocation b = alloc.allocate(0, stream, "empty too");
  CHECK(a.size == 0);
  CHECK(a.ptr == nullptr);
  CHECK(a.id != 0);
  CHECK(b.id != a.id);
  CHECK(backend.raw_allocs.empty());
  CHECK(alloc.allocated() == 0);
  CHECK(alloc.label(a.id) == "empty");
  alloc.record_stream(a.id, stream);
  alloc.free(a.id);
  alloc.free(a.id);  // owns nothing, so freeing is always a no-op
  CHECK(backend.changes.empty());
}

TEST_CASE("allocator: freeing twice or an unknown id is an error", "[allocator]") {
  FakeBackend backend;
  CachingAllocator alloc(backend, GiB);
  Stream stream(unused_device(), 0, "compute");

  const Allocation a = alloc.allocate(4 * KiB, stream, "grad bucket");
  CHECK(alloc.is_live(a.id));
  alloc.free(a.id);
  CHECK_FALSE(alloc.is_live(a.id));
  CHECK(alloc.label(a.id) == "grad bucket");  // labels outlive the allocation
  CHECK_THROWS_AS(alloc.free(a.id), std::logic_error);
  CHECK_THROWS_WITH(alloc.free(a.id), Catch::Contains("allocation " + std::to_string(a.id)) &&
                                          Catch::Contains("grad bucket"));
  CHECK_THROWS_WITH(alloc.free(12345), Catch::Contains("12345"));
  CHECK_THROWS_AS(alloc.record_stream(a.id, stream), std::logic_error);
  CHECK_FALSE(alloc.is_live(12345));
  CHECK(alloc.allocated() == 0);
}
