#include "device/sim_device.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace shardlab {
namespace {

constexpr int kComputeStreamId = 7;  // PyTorch's default stream shows as stream 7 in Kineto traces

int64_t us_to_ns(double us) { return static_cast<int64_t>(std::llround(us * 1000.0)); }

}  // namespace

struct SimDevice::SimStream : Stream {
  SimStream(Device& d, int id, std::string name, int race_slot) : Stream(d, id, std::move(name)), slot(race_slot) {}
  int slot;             // index in the race check's vector clocks
  int64_t ready_ns = 0; // when the work queued so far ends (and any waited-on events)
};

struct SimDevice::SimEvent : EventState {
  int64_t t_ns = 0;   // when the work before it ends
  VectorClock clock;  // what it orders after (race check)
};

SimDevice::SimDevice(Profile profile, ComputeMode compute, int rank, int world_size)
    : Device(profile, compute, rank, world_size, rank % std::max(1, profile.gpus_per_node)) {
  trace_.name_host("rank " + std::to_string(rank) + " CPU");
  trace_.name_device("rank " + std::to_string(rank) + " GPU " + std::to_string(trace_.device_pid()) + " (sim " +
                     profile_.gpu_name + ")");
  set_allocator(std::make_unique<CachingAllocator>(static_cast<AllocatorBackend&>(*this),
                                                   static_cast<size_t>(profile_.memory_bytes)));
  create_stream("compute");
}

// The allocator frees its segments through this object's AllocatorBackend methods, so it must
// go while this object is still whole, not later in ~Device.
SimDevice::~SimDevice() { set_allocator(nullptr); }

SimDevice::SimStream& SimDevice::sim(Stream& s) {
  if (&s.device() != this) throw std::logic_error("stream '" + s.name() + "' belongs to another device");
  return static_cast<SimStream&>(s);
}

const SimDevice::SimStream& SimDevice::sim(const Stream& s) const { return static_cast<const SimStream&>(s); }

Stream& SimDevice::create_stream(std::string name) {
  const int id = kComputeStreamId + static_cast<int>(streams().size());
  const int slot = race_.add_stream(id, name);
  trace_.name_stream(id, "stream " + std::to_string(id) + " " + name);
  add_stream(std::make_unique<SimStream>(*this, id, std::move(name), slot));
  return *streams().back();
}

int64_t SimDevice::charge_cpu(int64_t ns) {
  const int64_t start = cpu_ns_;
  cpu_ns_ += ns;
  return start;
}

int64_t SimDevice::op_start(SimStream& s) const { return std::max(cpu_ns_, s.ready_ns); }

void SimDevice::occupy(SimStream& s, int64_t end_ns) { s.ready_ns = std::max(s.ready_ns, end_ns); }

int64_t SimDevice::stream_ready_ns(const Stream& s) const { return sim(s).ready_ns; }

void SimDevice::launch(Stream& stream, const Kernel& k, const HostBody& host, const CudaBody&) {
  SimStream& s = sim(stream);
  const int64_t launch_ns = us_to_ns(profile_.launch_us);
  const int64_t t0 = charge_cpu(launch_ns);
  const uint64_t corr = trace_.runtime_call("cudaLaunchKernel", t0, launch_ns, true);
  race_.on_op(s.slot, k.name, k.accesses, allocator());
  if (computes() && host) host();
  const int64_t start = op_start(s);
  const int64_t dur = kernel_ns(profile_, k.flops, k.bytes, k.dtype, k.cls);
  trace_.kernel(s.id(), k.name, start, dur, corr, k.flops, k.bytes);
  occupy(s, start + dur);
}

void SimDevice::memcpy(Stream& stream, const Tensor& dst, const Tensor& src) {
  const std::string_view name = memcpy_name(dst, src);
  SimStream& s = sim(stream);
  const CopyKind kind = src.on_host() ? CopyKind::host_to_device
                        : dst.on_host() ? CopyKind::device_to_host
                                        : CopyKind::device_to_device;
  const int64_t call_ns = us_to_ns(profile_.runtime_call_us);
  const int64_t t0 = charge_cpu(call_ns);
  const uint64_t corr = trace_.runtime_call("cudaMemcpyAsync", t0, call_ns, true);
  race_.on_op(s.slot, name, {reads(src), writes(dst)}, allocator());
  if (computes() && src.bytes() > 0) std::memcpy(dst.data, src.data, src.bytes());
  const int64_t start = op_start(s);
  const int64_t dur = memcpy_ns(profile_, static_cast<double>(src.bytes()), kind);
  trace_.memcpy(s.id(), name, start, dur, corr, static_cast<double>(src.bytes()));
  occupy(s, start + dur);
}

Event SimDevice::record(Stream& stream) {
  SimStream& s = sim(stream);
  const int64_t call_ns = us_to_ns(profile_.runtime_call_us);
  trace_.runtime_call("cudaEventRecord", charge_cpu(call_ns), call_ns, false);
  auto e = std::make_shared<SimEvent>();
  // The event completes when the stream's queued work does; but it is recorded now, so work
  // the CPU has not launched yet cannot be behind it.
  e->t_ns = std::max(s.ready_ns, cpu_ns_);
  e->clock = race_.clock_of(s.slot);
  return Event{std::move(e), s.id()};
}

void SimDevice::wait(Stream& stream, const Event& event) {
  SimStream& s = sim(stream);
  const auto* e = dynamic_cast<const SimEvent*>(event.state.get());
  if (!e) throw std::invalid_argument("wait: the event was not recorded on this sim device");
  const int64_t call_ns = us_to_ns(profile_.runtime_call_us);
  trace_.runtime_call("cudaStreamWaitEvent", charge_cpu(call_ns), call_ns, false);
  // cudaStreamWaitEvent: everything queued on s from now on starts after the event.
  occupy(s, e->t_ns);
  race_.on_wait(s.slot, e->clock);
}

void SimDevice::synchronize(const Event& event) {
  const auto* e = dynamic_cast<const SimEvent*>(event.state.get());
  if (!e) throw std::invalid_argument("synchronize: the event was not recorded on this sim device");
  const int64_t t0 = cpu_ns_;
  cpu_ns_ = std::max(cpu_ns_ + us_to_ns(profile_.runtime_call_us), e->t_ns);
  trace_.runtime_call("cudaEventSynchronize", t0, cpu_ns_ - t0, false);
  race_.on_host_sync(e->clock);
}

void SimDevice::synchronize(Stream& stream) {
  SimStream& s = sim(stream);
  const int64_t t0 = cpu_ns_;
  cpu_ns_ = std::max(cpu_ns_ + us_to_ns(profile_.runtime_call_us), s.ready_ns);
  trace_.runtime_call("cudaStreamSynchronize", t0, cpu_ns_ - t0, false);
  race_.on_host_sync(race_.clock_of(s.slot));
}

void SimDevice::synchronize() {
  const int64_t t0 = cpu_ns_;
  int64_t t = cpu_ns_ + us_to_ns(profile_.runtime_call_us);
  for (const auto& s : streams()) t = std::max(t, sim(*s).ready_ns);
  cpu_ns_ = t;
  trace_.runtime_call("cudaDeviceSynchronize", t0, cpu_ns_ - t0, false);
  race_.on_host_sync_all();
}

bool SimDevice::query(const Event& event) {
  const auto* e = dynamic_cast<const SimEvent*>(event.state.get());
  if (!e) throw std::invalid_argument("query: the event was not recorded on this sim device");
  const int64_t call_ns = us_to_ns(profile_.runtime_call_us);
  trace_.runtime_call("cudaEventQuery", charge_cpu(call_ns), call_ns, false);
  const bool done = cpu_ns_ >= e->t_ns;
  if (done) race_.on_host_sync(e->clock);  // the CPU now knows that work is finished
  return done;
}

double SimDevice::elapsed_us(const Event& start, const Event& end) {
  const auto* a = dynamic_cast<const SimEvent*>(start.state.get());
  const auto* b = dynamic_cast<const SimEvent*>(end.state.get());
  if (!a || !b) throw std::invalid_argument("elapsed_us: the events were not recorded on this sim device");
  if (cpu_ns_ < a->t_ns || cpu_ns_ < b->t_ns)
    throw std::logic_error("elapsed_us: an event has not completed yet (synchronize on it first)");
  return static_cast<double>(b->t_ns - a->t_ns) / 1e3;
}

void SimDevice::host_work(std::string_view name, int64_t ns) {
  trace_.cpu_op(name, charge_cpu(ns), ns);
}

namespace {
std::logic_error not_measured(std::string_view call) {
  return std::logic_error("SimDevice::" + std::string(call) +
                          ": the sim times collectives on its virtual clocks (comm_issue, comm_complete), not by "
                          "measuring them");
}
}  // namespace

Device::CollectiveMark SimDevice::begin_collective(Stream&) { throw not_measured("begin_collective"); }

void SimDevice::end_collective(Stream&, const CollectiveMark&, std::string_view, const CollectiveArgs&) {
  throw not_measured("end_collective");
}

SimDevice::CommIssue SimDevice::comm_issue(Stream& stream, std::string_view api, int64_t comm_last_end_ns) {
  SimStream& s = sim(stream);
  const int64_t launch_ns = us_to_ns(profile_.launch_us);
  const int64_t t0 = charge_cpu(launch_ns);
  const uint64_t corr = trace_.runtime_call(api, t0, launch_ns, true);
  return {std::max({cpu_ns_, s.ready_ns, comm_last_end_ns}), corr};
}

void SimDevice::comm_complete(Stream& stream, const CollectiveArgs& c, const CommIssue& issue, int64_t start_ns,
                              int64_t end_ns, const std::vector<Access>& accesses) {
  SimStream& s = sim(stream);
  race_.on_op(s.slot, c.kernel_name, accesses, allocator());
  trace_.collective(s.id(), c, issue.ready_ns, start_ns, end_ns, issue.correlation);
  occupy(s, end_ns);
}

void SimDevice::host_wait_until(int64_t t_ns, std::string_view name) {
  const int64_t t0 = cpu_ns_;
  cpu_ns_ = std::max(cpu_ns_, t_ns);
  trace_.cpu_op(name, t0, cpu_ns_ - t0);
}

// --- The caching allocator's view of this device.

void* SimDevice::raw_alloc(size_t bytes) {
  const int64_t ns = us_to_ns(profile_.malloc_us);
  trace_.runtime_call("cudaMalloc", charge_cpu(ns), ns, false);
  if (!computes()) return nullptr;  // --compute skip: account for memory, touch none
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!p) throw OutOfMemory("host memory exhausted backing a simulated segment of " + std::to_string(bytes) + " bytes");
  return p;
}

void SimDevice::raw_free(void* ptr, size_t) {
  const int64_t ns = us_to_ns(profile_.free_us);
  trace_.runtime_call("cudaFree", charge_cpu(ns), ns, false);
  std::free(ptr);
}

Event SimDevice::record_event(Stream& stream) { return record(stream); }

bool SimDevice::event_done(const Event& event) {
  const auto* e = static_cast<const SimEvent*>(event.state.get());
  const bool done = cpu_ns_ >= e->t_ns;
  if (done) race_.on_host_sync(e->clock);
  return done;
}

void SimDevice::synchronize_device() { synchronize(); }

void SimDevice::memory_changed(size_t allocated, size_t reserved) {
  trace_.memory(cpu_ns_, static_cast<int64_t>(allocated), static_cast<int64_t>(reserved));
}

}  // namespace shardlab
