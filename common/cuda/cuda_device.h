// cuda_device.h: the real GPU behind the Device interface (README.md, "Real GPUs").
//
// Every Device call maps onto the CUDA runtime call it is named after: launch runs the op's
// CUDA body on the stream, record/wait/synchronize/query are cudaEventRecord,
// cudaStreamWaitEvent, cudaEvent/Stream/DeviceSynchronize and cudaEventQuery, the caching
// allocator (allocator.h, the same one the sim uses) takes its segments from cudaMalloc and
// knows a freed block's other-stream work has finished by querying an event.
//
// Traces. The trace has the sim's fields, but its times are measured:
//   - host lane: each runtime call is timed on the CPU (the system clock, from a job-wide base);
//   - device lanes: every kernel, copy and collective is bracketed by two timing events on its
//     stream; once they have completed, their times are cudaEventElapsedTime from a calibration
//     event whose host time is known. Calibration happens while the device is idle (at the
//     first use and after each full synchronize, which every training step ends with), so the
//     elapsed times stay short and exact to about a microsecond, and device and host lanes
//     share one clock. Ranks share the base (rank 0's clock, broadcast by the job), so lanes
//     of all ranks line up on one node.
// Slices are written as their events complete (at synchronize points), not in time order;
// viewers sort.
//
// Not on CUDA: the race check (compute-sanitizer --tool racecheck does that on real GPUs) and
// --compute skip (real GPUs always compute).
//
//   build: cmake --preset default && cmake --build --preset default   (whenever nvcc is found)
//   run:   mpirun -np 2 build/chapters/02_naive_ddp/02_naive_ddp --device cuda
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <vector>

#include "device/device.h"
#include "device/in_flight.h"

namespace shardlab {

class CudaDevice final : public Device, private AllocatorBackend {
 public:
  // Binds this process to GPU `device_index` (the local rank). `profile` supplies what only the
  // sim uses (cost constants) and is overwritten with the GPU's measured name, memory, SM count
  // and compute capability. `base_time_ns`: the job-wide time origin (Unix-epoch ns).
  CudaDevice(Profile profile, int rank, int world_size, int device_index, int64_t base_time_ns);
  ~CudaDevice() override;

  std::string_view kind() const override { return "cuda"; }
  Stream& create_stream(std::string name) override;
  void launch(Stream& s, const Kernel& k, const HostBody& host, const CudaBody& cuda = {}) override;
  void memcpy(Stream& s, const Tensor& dst, const Tensor& src) override;
  Event record(Stream& s) override;
  void wait(Stream& s, const Event& e) override;
  void synchronize(const Event& e) override;
  void synchronize(Stream& s) override;
  void synchronize() override;
  bool query(const Event& e) override;
  double elapsed_us(const Event& start, const Event& end) override;
  int64_t now_ns() override;
  int64_t base_time_ns() const override { return base_time_ns_; }
  void host_work(std::string_view name, int64_t ns) override;

  static cudaStream_t handle(const Stream& s);

  CollectiveMark begin_collective(Stream& s) override;
  void end_collective(Stream& s, const CollectiveMark& m, std::string_view api, const CollectiveArgs& c) override;

 private:
  struct CudaStream;
  // Device work in flight: `begin` times a runtime or library call on the host and records an
  // event before the work it queues on the stream; finish_bracket records the one after it.
  struct Bracket {
    int64_t host_start_ns = 0;
    cudaEvent_t start = nullptr;
  };
  Bracket begin(Stream& s);

  CudaStream& cuda_stream(Stream& s);
  cudaEvent_t timing_event();                         // from the pool
  void finish_bracket(Stream& s, const Bracket& b, MeasuredSlice slice);
  void flush_completed(bool all_done);                // write completed slices to the trace
  void calibrate();                                   // device idle: pin device time to host time
  int64_t device_time_ns(cudaEvent_t e) const;

  // AllocatorBackend
  void* raw_alloc(size_t bytes) override;
  void raw_free(void* ptr, size_t bytes) override;
  Event record_event(Stream& stream) override;
  bool event_done(const Event& event) override;
  void synchronize_device() override;
  void memory_changed(size_t allocated, size_t reserved) override;
  void allocator_event(const AllocatorNote& note) override { trace_allocator_note(note); }
  HostBlock host_alloc(size_t bytes) override;

  int device_index_;
  int64_t base_time_ns_;
  InFlight<cudaEvent_t> in_flight_;        // device slices whose events have not been read yet
  std::vector<cudaEvent_t> free_events_;   // timing events ready for reuse
  static constexpr int kCalibrationEvents = 4;             // the current zero and three tries
  cudaEvent_t calibration_events_[kCalibrationEvents] = {};
  int calibration_ = -1;                   // which of them is device time zero (-1: none yet)...
  int64_t calibration_host_ns_ = 0;        // ...and its host time
  bool closing_ = false;                   // in the destructor: raw_free must not throw
};

}  // namespace shardlab
