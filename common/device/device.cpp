#include "device/device.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>

namespace shardlab {

Device::Device(Profile profile, ComputeMode compute, int rank, int world_size, int device_index)
    : profile_(std::move(profile)), compute_(compute), trace_(rank, world_size, device_index) {}

Device::~Device() = default;

const std::vector<std::string>& Device::race_reports() const {
  static const std::vector<std::string> none;
  return none;
}

Tensor Device::empty(Shape shape, DType dtype, Stream& s, std::string_view name) {
  Tensor t;
  t.shape = shape;
  t.dtype = dtype;
  t.device = this;
  const Allocation a = allocator().allocate(t.bytes(), s, name);
  t.data = a.ptr;
  t.alloc_id = a.id;
  t.segment = a.segment;
  t.offset = a.offset;
  return t;
}

void Device::free(Tensor& t) {
  if (t.on_host()) throw std::logic_error("Device::free on a host tensor: use host_free");
  allocator().free(t.alloc_id);
  t = Tensor{};
}

void Device::record_stream(const Tensor& t, Stream& s) { allocator().record_stream(t.alloc_id, s); }

Device::HostBlock Device::host_alloc(size_t bytes) {
  HostBlock block(std::malloc(bytes), &std::free);
  if (!block)
    throw std::runtime_error("out of host memory: cannot allocate " + std::to_string(bytes) +
                             " bytes of host staging memory; use --compute skip, or a smaller --model or --global-batch");
  return block;
}

Tensor Device::host_empty(Shape shape, DType dtype, std::string_view) {
  Tensor t;
  t.shape = shape;
  t.dtype = dtype;
  if (computes() && t.bytes() > 0) {
    HostBlock block = host_alloc(t.bytes());
    t.data = block.get();
    host_memory_.emplace(t.data, std::move(block));
  }
  return t;
}

Tensor Device::staging(Shape shape, DType dtype) {
  Tensor t;
  t.shape = shape;
  t.dtype = dtype;
  if (!computes() || t.bytes() == 0) return t;
  if (t.bytes() > staging_bytes_) {
    staging_.reset();  // the old block goes first: the two need not fit in memory together
    staging_bytes_ = 0;
    staging_ = host_alloc(t.bytes());
    staging_bytes_ = t.bytes();
  }
  t.data = staging_.get();
  return t;
}

void Device::host_free(Tensor& t) {
  if (!t.on_host()) throw std::logic_error("Device::host_free on a device tensor: use free");
  if (t.data) host_memory_.erase(t.data);
  t = Tensor{};
}

void Device::trace_allocator_note(const AllocatorNote& note) {
  TraceArgs args;
  args.add("bytes", static_cast<uint64_t>(note.bytes)).add("stream", note.stream_id);
  if (note.kind == AllocatorEventKind::alloc_retry) args.add("released_bytes", static_cast<uint64_t>(note.released_bytes));
  if (!note.label.empty()) args.add("request", note.label);
  trace_.allocator_event(note.kind, now_ns(), args);
}

std::string_view memcpy_name(const Tensor& dst, const Tensor& src) {
  if (dst.numel() != src.numel() || dst.dtype != src.dtype)
    throw std::invalid_argument("memcpy: destination " + dst.shape.str() + " " + std::string(dtype_name(dst.dtype)) +
                                " and source " + src.shape.str() + " " + std::string(dtype_name(src.dtype)) +
                                " differ");
  if (src.on_host() && dst.on_host()) throw std::invalid_argument("memcpy: both tensors are on the host");
  return src.on_host()   ? "Memcpy HtoD (Pinned -> Device)"
         : dst.on_host() ? "Memcpy DtoH (Device -> Pinned)"
                         : "Memcpy DtoD (Device -> Device)";
}

void copy_to_device(Device& dev, Stream& s, const Tensor& dst, const void* src) {
  const Tensor staging = dev.staging(dst.shape, dst.dtype);
  if (staging.data) std::memcpy(staging.data, src, dst.bytes());
  dev.memcpy(s, dst, staging);
  dev.synchronize(s);
}

void copy_to_host(Device& dev, Stream& s, void* dst, const Tensor& src) {
  const Tensor staging = dev.staging(src.shape, src.dtype);
  dev.memcpy(s, staging, src);
  dev.synchronize(s);
  if (staging.data) std::memcpy(dst, staging.data, src.bytes());
}

HostScope::HostScope(Device& d, std::string_view name) : device_(d), name_(name), start_ns_(d.now_ns()) {}

HostScope::~HostScope() { device_.trace().cpu_op(name_, start_ns_, device_.now_ns() - start_ns_); }

RecordFunction::RecordFunction(Device& d, Stream& s, std::string_view name)
    : device_(d), name_(name), start_ns_(d.now_ns()), gpu_range_(d.trace().open_gpu_range(s.id(), name)) {}

RecordFunction::~RecordFunction() {
  device_.trace().close_gpu_range(gpu_range_);
  device_.trace().annotation(name_, start_ns_, device_.now_ns() - start_ns_);
}

}  // namespace shardlab
