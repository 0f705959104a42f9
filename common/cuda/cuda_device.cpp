// cuda_device.cpp: the Device interface on the CUDA runtime. See cuda_device.h for the design;
// the comments here say why each stream, event and synchronization is where it is.
//   build: cmake --preset default && cmake --build --preset default   (compiled whenever nvcc is found)
#include "cuda_device.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <utility>

#include "check.h"

namespace shardlab {
namespace {

constexpr int kComputeStreamId = 7;   // the sim's numbering, so traces of both devices read alike
constexpr size_t kFlushEvery = 4096;  // pending slices before completed ones are written out

// The system clock, not steady_clock: it is the one clock that ranks on different nodes share
// (kept in step by NTP, which slews it rather than jumping), so every rank's times count from
// rank 0's base, as Kineto's do from its baseTimeNanoseconds. steady_clock's zero is each
// machine's boot.
int64_t wall_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void free_pinned(void* p) { cudaFreeHost(p); }

// A shardlab Event on CUDA: the cudaEvent_t, destroyed with the last copy of the Event.
struct CudaEvent final : EventState {
  explicit CudaEvent(unsigned flags) { CUDA_CHECK(cudaEventCreateWithFlags(&event, flags)); }
  ~CudaEvent() override { cudaEventDestroy(event); }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  cudaEvent_t event = nullptr;
};

cudaEvent_t event_of(const Event& e, const char* what) {
  const auto* ce = dynamic_cast<const CudaEvent*>(e.state.get());
  if (!ce) throw std::invalid_argument(std::string(what) + ": the event was not recorded on a CUDA device");
  return ce->event;
}

// cudaEventQuery: done, not yet, or a real error (which must not read as "not yet").
// "Not yet" is returned as an error code, which the runtime can also keep as the thread's last
// error: left there, the next launch's cudaGetLastError check would report it as a failed
// launch. So it is cleared at once (PyTorch does the same); a real error throws.
bool event_complete(cudaEvent_t e) {
  const cudaError_t err = cudaEventQuery(e);
  if (err == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  CUDA_CHECK(err);
  return true;
}

}  // namespace

struct CudaDevice::CudaStream final : Stream {
  CudaStream(Device& d, int id, std::string name) : Stream(d, id, std::move(name)) {
    // Non-blocking: these streams never synchronize implicitly with the legacy default stream,
    // so every ordering between them is one the program asked for (a wait on an event).
    CUDA_CHECK(cudaStreamCreateWithFlags(&handle, cudaStreamNonBlocking));
  }
  ~CudaStream() override { cudaStreamDestroy(handle); }
  cudaStream_t handle = nullptr;
};

CudaDevice::CudaDevice(Profile profile, int rank, int world_size, int device_index, int64_t base_time_ns)
    : Device(std::move(profile), ComputeMode::real, rank, world_size, device_index),
      device_index_(device_index),
      base_time_ns_(base_time_ns) {
  int count = 0;
  CUDA_CHECK(cudaGetDeviceCount(&count));
  if (device_index < 0 || device_index >= count)
    throw std::runtime_error("rank " + std::to_string(rank) + " wants GPU " + std::to_string(device_index) +
                             " but this node has " + std::to_string(count) + " visible");
  CUDA_CHECK(cudaSetDevice(device_index));

  // What the trace header and the OOM messages report is this GPU, not the profile's.
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device_index));
  profile_.gpu_name = prop.name;
  profile_.memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
  profile_.sm_count = prop.multiProcessorCount;
  profile_.compute_major = prop.major;
  profile_.compute_minor = prop.minor;
  trace_.name_host("rank " + std::to_string(rank) + " CPU");
  trace_.name_device("rank " + std::to_string(rank) + " GPU " + std::to_string(device_index) + " (" + prop.name + ")");

  // The allocator may take what is free now: the CUDA context and other processes hold the rest.
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  set_allocator(std::make_unique<CachingAllocator>(static_cast<AllocatorBackend&>(*this), free_bytes));
  create_stream("compute");
  for (cudaEvent_t& e : calibration_events_) CUDA_CHECK(cudaEventCreate(&e));
  calibrate();
}

CudaDevice::~CudaDevice() {
  // Nothing may throw here: the process may be unwinding from a CUDA error already.
  cudaDeviceSynchronize();
  closing_ = true;         // raw_free stops checking: after a device-side error every cudaFree fails
  set_allocator(nullptr);  // frees its segments through this object's raw_free
  for (const auto& p : in_flight_.entries()) cudaEventDestroy(p.start), cudaEventDestroy(p.end);
  for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
  for (cudaEvent_t e : calibration_events_) cudaEventDestroy(e);
}

cudaStream_t CudaDevice::handle(const Stream& s) { return static_cast<const CudaStream&>(s).handle; }

CudaDevice::CudaStream& CudaDevice::cuda_stream(Stream& s) {
  if (&s.device() != this) throw std::logic_error("stream '" + s.name() + "' belongs to another device");
  return static_cast<CudaStream&>(s);
}

Stream& CudaDevice::create_stream(std::string name) {
  const int id = kComputeStreamId + static_cast<int>(streams().size());
  trace_.name_stream(id, "stream " + std::to_string(id) + " " + name);
  add_stream(std::make_unique<CudaStream>(*this, id, std::move(name)));
  return *streams().back();
}

int64_t CudaDevice::now_ns() { return wall_ns() - base_time_ns_; }

// --- Measuring device time.

cudaEvent_t CudaDevice::timing_event() {
  if (free_events_.empty()) {
    cudaEvent_t e = nullptr;
    CUDA_CHECK(cudaEventCreate(&e));  // default flags: timing enabled
    return e;
  }
  cudaEvent_t e = free_events_.back();
  free_events_.pop_back();
  return e;
}

// Called with the device idle and nothing pending. The calibration event completes as soon as
// the GPU sees it; the host cannot observe that instant, only bracket it between the record
// call and the return of the synchronize, so it takes the middle: an error of up to half the
// bracket, the same for every slice until the next calibration. On an idle machine that is a
// few microseconds; on a loaded one (the H200's chapters stage runs 12 MPI jobs at once) the CPU
// can be taken away inside the bracket for hundreds. So the shortest of three brackets is kept,
// and a new calibration never places an instant earlier than the last one did: two copies on one
// stream, the first placed by an old calibration and the second by a new one 120 us earlier,
// overlapped in a trace of that stage. The device clock's drift against the host's (parts per
// million) is still followed forwards.
void CudaDevice::calibrate() {
  const int previous = calibration_;
  int64_t best_span = INT64_MAX, best_host_ns = 0;
  int best = -1;
  for (int i = 0; i < kCalibrationEvents; ++i) {
    if (i == previous) continue;  // still the zero of the slices placed so far
    const int64_t before = now_ns();
    CUDA_CHECK(cudaEventRecord(calibration_events_[i], cuda_stream(compute_stream()).handle));
    CUDA_CHECK(cudaEventSynchronize(calibration_events_[i]));
    const int64_t span = now_ns() - before;
    if (span >= best_span) continue;
    best_span = span;
    best = i;
    best_host_ns = before + span / 2;
  }
  if (previous >= 0) best_host_ns = std::max(best_host_ns, device_time_ns(calibration_events_[best]));
  calibration_ = best;
  calibration_host_ns_ = best_host_ns;
}

int64_t CudaDevice::device_time_ns(cudaEvent_t e) const {
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, calibration_events_[calibration_], e));
  return calibration_host_ns_ + std::llround(static_cast<double>(ms) * 1e6);
}

CudaDevice::Bracket CudaDevice::begin(Stream& s) {
  Bracket b;
  b.host_start_ns = now_ns();
  b.start = timing_event();
  // Recorded before the work, so it completes when the stream reaches the work: its start.
  CUDA_CHECK(cudaEventRecord(b.start, cuda_stream(s).handle));
  return b;
}

void CudaDevice::finish_bracket(Stream& s, const Bracket& b, MeasuredSlice slice) {
  slice.host_start_ns = b.host_start_ns;
  slice.stream = s.id();
  cudaEvent_t end = timing_event();
  CUDA_CHECK(cudaEventRecord(end, cuda_stream(s).handle));
  in_flight_.push({std::move(slice), b.start, end});
  if (in_flight_.size() >= kFlushEvery) flush_completed(false);
}

void CudaDevice::flush_completed(bool all_done) {
  in_flight_.flush([&](const auto& p) { return all_done || event_complete(p.end); },
                   [&](const auto& p) {
                     const MeasuredSlice& s = p.slice;
                     // The calibration's error (a few microseconds) could place work before the
                     // host issued it, and a kernel before its launch; it cannot have begun
                     // there, so it starts no earlier.
                     const int64_t start = std::max(device_time_ns(p.start), s.host_start_ns);
                     const int64_t end = std::max(device_time_ns(p.end), start);
                     switch (s.kind) {
                       case MeasuredSlice::Kind::kernel:
                         trace_.kernel(s.stream, s.name, start, end - start, s.correlation, s.flops, s.bytes);
                         break;
                       case MeasuredSlice::Kind::memcpy:
                         trace_.memcpy(s.stream, s.name, start, end - start, s.correlation, s.bytes);
                         break;
                       case MeasuredSlice::Kind::collective:
                         // A real NCCL kernel's wait for late peers is inside the kernel: no
                         // separate wait slice.
                         trace_.collective(s.stream, s.collective, start, start, end, s.correlation);
                         break;
                     }
                     free_events_.push_back(p.start);
                     free_events_.push_back(p.end);
                   });
}

// --- Work.

void CudaDevice::launch(Stream& stream, const Kernel& k, const HostBody&, const CudaBody& cuda) {
  if (!cuda) throw std::logic_error(std::string(k.name) + ": this op has no CUDA implementation");
  const Bracket b = begin(stream);
  cuda(cuda_stream(stream).handle);
  CUDA_CHECK(cudaGetLastError());  // a bad launch configuration shows here, at the op that made it
  MeasuredSlice slice;
  slice.kind = MeasuredSlice::Kind::kernel;
  slice.name = std::string(k.name);
  slice.flops = k.flops;
  slice.bytes = k.bytes;
  slice.correlation = trace_.runtime_call("cudaLaunchKernel", b.host_start_ns, now_ns() - b.host_start_ns, true);
  finish_bracket(stream, b, std::move(slice));
}

void CudaDevice::memcpy(Stream& stream, const Tensor& dst, const Tensor& src) {
  const std::string_view name = memcpy_name(dst, src);
  const Bracket b = begin(stream);
  // cudaMemcpyDefault: unified addressing tells the direction from the pointers. Host tensors
  // come from host_empty, which pins them, so the copy is truly asynchronous.
  if (src.bytes() > 0)
    CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, src.bytes(), cudaMemcpyDefault, cuda_stream(stream).handle));
  MeasuredSlice slice;
  slice.kind = MeasuredSlice::Kind::memcpy;
  slice.name = std::string(name);
  slice.bytes = static_cast<double>(src.bytes());
  slice.correlation = trace_.runtime_call("cudaMemcpyAsync", b.host_start_ns, now_ns() - b.host_start_ns, true);
  finish_bracket(stream, b, std::move(slice));
}

Device::CollectiveMark CudaDevice::begin_collective(Stream& s) {
  const Bracket b = begin(s);
  return {b.host_start_ns, b.start};
}

void CudaDevice::end_collective(Stream& s, const CollectiveMark& m, std::string_view api, const CollectiveArgs& c) {
  const Bracket b{m.host_start_ns, static_cast<cudaEvent_t>(m.device_event)};
  MeasuredSlice slice;
  slice.kind = MeasuredSlice::Kind::collective;
  slice.name = c.kernel_name;
  slice.bytes = static_cast<double>(std::max(c.in_nelems, c.out_nelems) * c.dtype_bytes);
  slice.collective = c;
  slice.correlation = trace_.runtime_call(api, b.host_start_ns, now_ns() - b.host_start_ns, true);
  finish_bracket(s, b, std::move(slice));
}

// --- Ordering.

Event CudaDevice::record(Stream& stream) {
  const int64_t t0 = now_ns();
  // Timing stays enabled: the chapters time with elapsed_us (cudaEventElapsedTime).
  auto e = std::make_shared<CudaEvent>(cudaEventDefault);
  CUDA_CHECK(cudaEventRecord(e->event, cuda_stream(stream).handle));
  trace_.runtime_call("cudaEventRecord", t0, now_ns() - t0, false);
  return Event{std::move(e), stream.id()};
}

void CudaDevice::wait(Stream& stream, const Event& e) {
  const int64_t t0 = now_ns();
  // The stream, not the CPU, waits: work queued on it from now on starts after the event.
  CUDA_CHECK(cudaStreamWaitEvent(cuda_stream(stream).handle, event_of(e, "wait"), 0));
  trace_.runtime_call("cudaStreamWaitEvent", t0, now_ns() - t0, false);
}

void CudaDevice::synchronize(const Event& e) {
  const int64_t t0 = now_ns();
  CUDA_CHECK(cudaEventSynchronize(event_of(e, "synchronize")));
  trace_.runtime_call("cudaEventSynchronize", t0, now_ns() - t0, false);
  flush_completed(false);
}

void CudaDevice::synchronize(Stream& stream) {
  const int64_t t0 = now_ns();
  CUDA_CHECK(cudaStreamSynchronize(cuda_stream(stream).handle));
  trace_.runtime_call("cudaStreamSynchronize", t0, now_ns() - t0, false);
  flush_completed(false);
}

void CudaDevice::synchronize() {
  const int64_t t0 = now_ns();
  CUDA_CHECK(cudaDeviceSynchronize());
  trace_.runtime_call("cudaDeviceSynchronize", t0, now_ns() - t0, false);
  // Everything has run: write it all, then re-pin device time while the GPU is idle.
  flush_completed(true);
  calibrate();
}

bool CudaDevice::query(const Event& e) {
  const int64_t t0 = now_ns();
  const bool done = event_complete(event_of(e, "query"));
  trace_.runtime_call("cudaEventQuery", t0, now_ns() - t0, false);
  return done;
}

double CudaDevice::elapsed_us(const Event& start, const Event& end) {
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, event_of(start, "elapsed_us"), event_of(end, "elapsed_us")));
  return static_cast<double>(ms) * 1e3;
}

// CPU work of a given length: the CPU really is busy for it (a spin, not a sleep, so the
// thread does not give up its core and come back late).
void CudaDevice::host_work(std::string_view name, int64_t ns) {
  const int64_t t0 = now_ns();
  while (now_ns() - t0 < ns) {
  }
  trace_.cpu_op(name, t0, now_ns() - t0);
}

// --- The caching allocator's view of this GPU.

void* CudaDevice::raw_alloc(size_t bytes) {
  const int64_t t0 = now_ns();
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes);
  trace_.runtime_call("cudaMalloc", t0, now_ns() - t0, false);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // clear the sticky-free error so the next call does not see it
    throw OutOfMemory("cudaMalloc of " + std::to_string(bytes) + " bytes failed on GPU " +
                      std::to_string(device_index_) + " (another process may hold memory)");
  }
  CUDA_CHECK(err);
  return p;
}

void CudaDevice::raw_free(void* ptr, size_t) {
  const int64_t t0 = now_ns();
  // cudaFree synchronizes the device: one reason the allocator caches.
  const cudaError_t err = cudaFree(ptr);
  trace_.runtime_call("cudaFree", t0, now_ns() - t0, false);
  // From the destructor a throw would end the process in std::terminate, hiding the error
  // being unwound (a trapped kernel leaves the context unusable, so these frees fail too).
  if (!closing_) CUDA_CHECK(err);
}

Event CudaDevice::record_event(Stream& stream) {
  // Only ever queried, never timed: timing off makes it cheaper.
  auto e = std::make_shared<CudaEvent>(cudaEventDisableTiming);
  CUDA_CHECK(cudaEventRecord(e->event, cuda_stream(stream).handle));
  return Event{std::move(e), stream.id()};
}

bool CudaDevice::event_done(const Event& event) { return event_complete(event_of(event, "event_done")); }

void CudaDevice::synchronize_device() { synchronize(); }

void CudaDevice::memory_changed(size_t allocated, size_t reserved) {
  trace_.memory(now_ns(), static_cast<int64_t>(allocated), static_cast<int64_t>(reserved));
}

Device::HostBlock CudaDevice::host_alloc(size_t bytes) {
  void* p = nullptr;
  CUDA_CHECK(cudaMallocHost(&p, bytes));  // page-locked: the DMA engines copy from it directly
  return HostBlock(p, &free_pinned);
}

}  // namespace shardlab
