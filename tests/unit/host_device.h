// host_device.h: a Device that is not simulated, for tests of the code paths real GPUs take.
//
// Ops run their CPU bodies at launch, memory is host memory, every event has completed by the
// time it exists, and times are the wall clock: a GPU whose every stream finishes its work the
// moment it is queued. Code that branches on "not the sim" (MpiComm's host staging, which the
// CUDA device uses with --comm mpi) can so be tested on any machine, at every world size.
// Its trace, like CudaDevice's, learns when a collective ended only at a synchronize: each
// slice waits in the same in-flight queue (in_flight.h) until its stream or the whole device
// is synchronized, so slices of two streams leave that queue out of issue order as on a GPU.
#pragma once

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>
#include <string>

#include "device/device.h"
#include "device/in_flight.h"

namespace shardlab {

class HostDevice final : public Device, private AllocatorBackend {
 public:
  HostDevice(Profile profile, ComputeMode compute, int rank, int world_size)
      : Device(std::move(profile), compute, rank, world_size, 0) {
    set_allocator(std::make_unique<CachingAllocator>(static_cast<AllocatorBackend&>(*this),
                                                     static_cast<size_t>(profile_.memory_bytes)));
    create_stream("compute");
  }
  ~HostDevice() override { set_allocator(nullptr); }

  std::string_view kind() const override { return "host"; }
  Stream& create_stream(std::string name) override {
    add_stream(std::make_unique<Stream>(*this, 7 + static_cast<int>(streams().size()), std::move(name)));
    return *streams().back();
  }
  void launch(Stream&, const Kernel& k, const HostBody& host, const CudaBody& cuda) override {
    launched.emplace(k.name);
    if (!cuda) launched_without_cuda.emplace(k.name);
    if (host) host();
  }
  void memcpy(Stream&, const Tensor& dst, const Tensor& src) override {
    if (src.bytes() > 0) std::memcpy(dst.data, src.data, src.bytes());
  }
  Event record(Stream& s) override { return Event{std::make_shared<EventState>(), s.id()}; }
  void wait(Stream&, const Event&) override {}
  void synchronize(const Event& e) override { finish(e.stream_id); }
  void synchronize(Stream& s) override { finish(s.id()); }
  void synchronize() override { finish(-1); }
  bool query(const Event&) override { return true; }
  double elapsed_us(const Event&, const Event&) override { return 0; }
  int64_t now_ns() override {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start_).count();
  }
  void host_work(std::string_view name, int64_t ns) override { trace_.cpu_op(name, now_ns(), ns); }

  // Every kernel name launched so far, and those launched with no CUDA body: on a real GPU each
  // of the latter stops the chapter ("this op has no CUDA implementation"), so a test can catch
  // one on any machine.
  std::set<std::string> launched, launched_without_cuda;
  // The stream's work ran as the CPU queued it: the collective's slice is the call's span.
  CollectiveMark begin_collective(Stream&) override { return {now_ns(), nullptr}; }
  void end_collective(Stream& s, const CollectiveMark& m, std::string_view api, const CollectiveArgs& c) override {
    const int64_t end = now_ns();
    MeasuredSlice slice;
    slice.kind = MeasuredSlice::Kind::collective;
    slice.stream = s.id();
    slice.name = c.kernel_name;
    slice.collective = c;
    slice.host_start_ns = m.host_start_ns;
    slice.correlation = trace_.runtime_call(api, m.host_start_ns, end - m.host_start_ns, true);
    in_flight_.push({std::move(slice), m.host_start_ns, end});
  }

 private:
  void* raw_alloc(size_t bytes) override { return std::aligned_alloc(64, (bytes + 63) / 64 * 64); }
  void raw_free(void* ptr, size_t) override { std::free(ptr); }
  Event record_event(Stream& s) override { return record(s); }
  bool event_done(const Event&) override { return true; }
  void synchronize_device() override {}
  void memory_changed(size_t allocated, size_t reserved) override {
    trace_.memory(now_ns(), static_cast<int64_t>(allocated), static_cast<int64_t>(reserved));
  }

  // Writes the slices of `stream` (every slice for -1) to the trace, keeping the others queued.
  void finish(int stream) {
    in_flight_.flush([&](const InFlight<int64_t>::Entry& e) { return stream < 0 || e.slice.stream == stream; },
                     [&](const InFlight<int64_t>::Entry& e) {
                       trace_.collective(e.slice.stream, e.slice.collective, e.start, e.start, e.end,
                                         e.slice.correlation);
                     });
  }

  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  InFlight<int64_t> in_flight_;  // collective slices; the markers are their start and end times
};

}  // namespace shardlab
