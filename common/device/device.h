// device.h: the device interface every chapter programs against.
//
// Two implementations stand behind it: SimDevice (sim_device.h), a simulated GPU with virtual
// clocks and real CPU math, and the CUDA device (real streams, events and kernels). Chapter code
// only ever sees Device, Stream, Event and Tensor, so the same lesson runs on a laptop and on
// an H100.
//
// The calls mirror the CUDA runtime a PyTorch user drives without seeing it:
//   launch        cudaLaunchKernel  (asynchronous: the CPU returns at once)
//   memcpy        cudaMemcpyAsync   (on a stream; pinned host memory for real asynchrony)
//   record        cudaEventRecord
//   wait          cudaStreamWaitEvent  (the stream waits; the CPU does not)
//   synchronize   cudaEventSynchronize / cudaStreamSynchronize / cudaDeviceSynchronize
//   query         cudaEventQuery
//   elapsed_us    cudaEventElapsedTime
//   empty / free  the caching allocator (torch.empty / tensor going out of scope)
//   record_stream Tensor.record_stream
//   RecordFunction torch.profiler.record_function (its CPU and GPU ranges)
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "device/allocator.h"
#include "device/cost_model.h"
#include "device/event.h"
#include "device/profile.h"
#include "device/tensor.h"
#include "trace/trace.h"

namespace shardlab {

enum class ComputeMode : uint8_t { real, skip };

// What an op touches, for the race check: every op names the tensors it reads and writes.
struct Access {
  Tensor tensor;
  bool write = false;
};
inline Access reads(const Tensor& t) { return {t, false}; }
inline Access writes(const Tensor& t) { return {t, true}; }

// A kernel as the runtime sees it: its name, its cost and what it touches.
struct Kernel {
  std::string_view name;
  double flops = 0;
  double bytes = 0;  // device memory traffic
  DType dtype = DType::f32;
  KernelClass cls = KernelClass::elementwise;
  std::vector<Access> accesses;
};

using HostBody = std::function<void()>;            // the math, on the CPU (the sim)
using CudaBody = std::function<void(void* cuda_stream)>;  // the math, as a CUDA kernel launch

class Device {
 public:
  virtual ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  virtual std::string_view kind() const = 0;  // "sim" or "cuda"
  bool simulated() const { return kind() == "sim"; }
  bool computes() const { return compute_ == ComputeMode::real; }
  const Profile& profile() const { return profile_; }
  TraceRecorder& trace() { return trace_; }
  CachingAllocator& allocator() { return *allocator_; }

  // Streams. The compute stream exists from the start (PyTorch's default stream).
  Stream& compute_stream() { return *streams_.front(); }
  virtual Stream& create_stream(std::string name) = 0;
  const std::vector<std::unique_ptr<Stream>>& streams() const { return streams_; }

  // Work.
  virtual void launch(Stream& s, const Kernel& k, const HostBody& host, const CudaBody& cuda = {}) = 0;
  virtual void memcpy(Stream& s, const Tensor& dst, const Tensor& src) = 0;  // same numel and dtype

  // Ordering.
  virtual Event record(Stream& s) = 0;
  virtual void wait(Stream& s, const Event& e) = 0;
  virtual void synchronize(const Event& e) = 0;
  virtual void synchronize(Stream& s) = 0;
  virtual void synchronize() = 0;
  virtual bool query(const Event& e) = 0;
  // Device time between two completed events, in microseconds (cudaEventElapsedTime).
  virtual double elapsed_us(const Event& start, const Event& end) = 0;

  // The host clock, nanoseconds since the job's base time (virtual in the sim).
  virtual int64_t now_ns() = 0;

  // Memory. `name` labels the allocation in traces, race reports and OOM messages.
  Tensor empty(Shape shape, DType dtype, Stream& s, std::string_view name);
  void free(Tensor& t);  // gives the block back to its stream's pool; t becomes undefined
  void record_stream(const Tensor& t, Stream& s);
  // Pinned host memory (not from the device allocator). Real memory unless --compute skip.
  Tensor host_empty(Shape shape, DType dtype, std::string_view name);
  void host_free(Tensor& t);
  // The pinned buffer copy_to_device and copy_to_host stage through, as a host tensor of this
  // shape: one block, kept between calls and grown when a copy needs more (pinning memory costs
  // far more than most copies it serves, and cudaFreeHost synchronizes the whole device). Its
  // contents are valid until the next call.
  Tensor staging(Shape shape, DType dtype);

  // The job-wide base of now_ns() as Unix-epoch nanoseconds, written to the trace header:
  // 0 in the sim (its virtual clock starts at 0), rank 0's wall clock at start on CUDA.
  virtual int64_t base_time_ns() const { return 0; }

  // Host-side scopes on the CPU thread lane ("forward", "unit 3", ...), and CPU work that takes
  // time without touching the device (the sim charges `ns`; CUDA measures what really ran).
  virtual void host_work(std::string_view name, int64_t ns) = 0;
  // Race reports so far (sim only; empty on CUDA, which has compute-sanitizer for that).
  virtual const std::vector<std::string>& race_reports() const;

  // For communicators on a real device: a collective's device work, which no launch of ours
  // queues (an NCCL call, or an MPI operation staged through host memory). begin_collective
  // marks where stream s reaches the work and when the CPU began the call; end_collective, after
  // the call, closes the mark and puts one collective slice on the stream's lane, named as NCCL's
  // kernel, with the CPU's call (`api`) linked to it. Metrics, and the chapters that count their
  // collectives, so see them on either communicator. The sim times collectives itself
  // (SimDevice::comm_issue and comm_complete, on virtual clocks agreed across ranks) and refuses.
  struct CollectiveMark {
    int64_t host_start_ns = 0;
    void* device_event = nullptr;  // the device's own marker on the stream (CUDA: a cudaEvent_t)
  };
  virtual CollectiveMark begin_collective(Stream& s) = 0;
  virtual void end_collective(Stream& s, const CollectiveMark& m, std::string_view api, const CollectiveArgs& c) = 0;

 protected:
  Device(Profile profile, ComputeMode compute, int rank, int world_size, int device_index);
  void add_stream(std::unique_ptr<Stream> s) { streams_.push_back(std::move(s)); }
  void set_allocator(std::unique_ptr<CachingAllocator> a) { allocator_ = std::move(a); }
  // Host memory behind host_empty, with the function that frees it: heap memory by default,
  // page-locked memory (cudaMallocHost) on CUDA, where only pinned buffers copy asynchronously.
  using HostBlock = std::unique_ptr<void, void (*)(void*)>;
  virtual HostBlock host_alloc(size_t bytes);
  // The allocator's moment as an instant on the memory lane, at the host's time now (both
  // devices' AllocatorBackend::allocator_event).
  void trace_allocator_note(const AllocatorNote& note);

  Profile profile_;
  ComputeMode compute_;
  TraceRecorder trace_;

 private:
  std::vector<std::unique_ptr<Stream>> streams_;
  std::unique_ptr<CachingAllocator> allocator_;
  std::unordered_map<const void*, HostBlock> host_memory_;  // host_empty's blocks
  HostBlock staging_{nullptr, [](void*) {}};                 // staging()'s block...
  size_t staging_bytes_ = 0;                                  // ...and its size
};

// A copy's name in traces, as Kineto writes it ("Memcpy HtoD (Pinned -> Device)", ...), once
// dst and src are checked to match (same numel and dtype, not both on the host): every device's
// memcpy starts here.
std::string_view memcpy_name(const Tensor& dst, const Tensor& src);

// Host data to or from a device tensor through the device's pinned staging buffer (a memcpy on
// stream s, then a stream synchronize, so the buffer is free again on return). Under --compute
// skip only the time is charged.
void copy_to_device(Device& dev, Stream& s, const Tensor& dst, const void* src);
void copy_to_host(Device& dev, Stream& s, void* dst, const Tensor& src);

// RAII: a cpu_op slice on the host lane from construction to destruction.
class HostScope {
 public:
  HostScope(Device& d, std::string_view name);
  ~HostScope();
  HostScope(const HostScope&) = delete;
  HostScope& operator=(const HostScope&) = delete;

 private:
  Device& device_;
  std::string name_;
  int64_t start_ns_;
};

// RAII: torch.profiler.record_function's two ranges. On the host a user_annotation from
// construction to destruction; on `stream` a gpu_user_annotation over the work launched onto it
// meanwhile (TraceRecorder::open_gpu_range), so the stream's lane says what each stretch of its
// kernels is for: "forward mb 3" above the kernels of micro-batch 3's forward.
class RecordFunction {
 public:
  RecordFunction(Device& d, Stream& s, std::string_view name);
  ~RecordFunction();
  RecordFunction(const RecordFunction&) = delete;
  RecordFunction& operator=(const RecordFunction&) = delete;

 private:
  Device& device_;
  std::string name_;
  int64_t start_ns_;
  uint64_t gpu_range_;
};

}  // namespace shardlab
