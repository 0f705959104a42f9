#include "model/f32_math.h"

#include <stdexcept>
#include <string>

#include "cuda/kernels.h"
#include "device/bf16.h"

namespace shardlab::ops {

AsF32::AsF32(const std::vector<Access>& accesses, void* cuda_stream) : cuda_stream_(cuda_stream) {
  for (const Access& a : accesses) {
    if (!a.tensor.defined() || a.tensor.dtype != DType::bf16) continue;
    Copy* seen = nullptr;
    for (Copy& c : copies_)
      if (c.of.data == a.tensor.data) seen = &c;
    if (seen != nullptr) {  // the same tensor read and written (accumulated into): one copy
      if (seen->of.numel() != a.tensor.numel())
        throw std::logic_error("AsF32: two bf16 views start at one address with different sizes (" +
                               seen->of.shape.str() + ", " + a.tensor.shape.str() + ")");
      seen->written = seen->written || a.write;
      continue;
    }
    copies_.push_back({a.tensor, nullptr, a.write});
  }
  const bool cuda = cuda_stream_ != nullptr;
  for (Copy& c : copies_) {
    const int64_t n = c.of.numel();
    if (!cuda) {
      host_.emplace_back(static_cast<size_t>(n));
      c.f32 = host_.back().data();
      const uint16_t* b = c.of.bf16();
      for (int64_t i = 0; i < n; ++i) c.f32[i] = from_bf16(b[i]);
      continue;
    }
#ifdef SHARDLAB_WITH_CUDA
    c.f32 = cuda::scratch_f32(n, cuda_stream_);
    cuda::copy_blocks({{c.of.data, c.f32, n, n, n, n, true, false}}, 1, cuda_stream_);
#endif
  }
}

AsF32::~AsF32() {
  for (Copy& c : copies_) {
    const int64_t n = c.of.numel();
    if (cuda_stream_ == nullptr) {
      if (!c.written) continue;
      uint16_t* b = c.of.bf16();
      for (int64_t i = 0; i < n; ++i) b[i] = to_bf16(c.f32[i]);
      continue;
    }
#ifdef SHARDLAB_WITH_CUDA
    if (c.written) cuda::copy_blocks({{c.f32, c.of.data, n, n, n, n, false, true}}, 1, cuda_stream_);
    cuda::free_scratch(c.f32, cuda_stream_);  // stream-ordered: after the rounding reads it
#endif
  }
}

float* AsF32::operator()(const Tensor& t) const {
  if (!t.defined()) return nullptr;
  if (t.dtype == DType::f32) return t.f32();
  for (const Copy& c : copies_)
    if (c.of.data == t.data) return c.f32;
  throw std::logic_error("AsF32: a " + std::string(dtype_name(t.dtype)) + " tensor " + t.shape.str() +
                         " the op did not list among its accesses");
}

void launch_f32(Device& dev, Stream& s, const Kernel& k, F32Host host, F32Cuda cuda) {
  CudaBody on_cuda;
  if (cuda) on_cuda = [acc = k.accesses, cuda](void* stream) { const AsF32 f(acc, stream); cuda(f, stream); };
  dev.launch(s, k, f32_host(k, std::move(host)), on_cuda);
}

HostBody f32_host(const Kernel& k, F32Host host) {
  return [acc = k.accesses, host = std::move(host)] { const AsF32 f(acc); host(f); };
}

DType math_dtype(KernelClass cls, const std::vector<Access>& accesses) {
  if (cls == KernelClass::elementwise) return DType::f32;
  for (const Access& a : accesses)
    if (!a.write && a.tensor.defined() && a.tensor.dtype == DType::bf16) return DType::bf16;
  return DType::f32;
}

}  // namespace shardlab::ops
