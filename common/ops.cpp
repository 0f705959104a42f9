#include "ops.h"

#include <stdexcept>
#include <string>

namespace shardlab::ops {
namespace {

void require_f32(const Tensor& t, const char* op) {
  if (t.dtype != DType::f32)
    throw std::invalid_argument(std::string(op) + ": only f32 tensors, got " + std::string(dtype_name(t.dtype)));
}

}  // namespace

void fill(Device& dev, Stream& s, const Tensor& t, float value) {
  require_f32(t, "fill");
  const int64_t n = t.numel();
  dev.launch(s, {"fill", 0, 4.0 * static_cast<double>(n), DType::f32, KernelClass::elementwise, {writes(t)}}, [=] {
    float* p = t.f32();
    for (int64_t i = 0; i < n; ++i) p[i] = value;
  });
}

void add_(Device& dev, Stream& s, const Tensor& dst, const Tensor& src) {
  require_f32(dst, "add_");
  require_f32(src, "add_");
  if (dst.numel() != src.numel())
    throw std::invalid_argument("add_: " + dst.shape.str() + " += " + src.shape.str() + ": sizes differ");
  const int64_t n = dst.numel();
  // One FLOP and three 4-byte accesses (read both, write one) per element.
  dev.launch(s, {"add_", static_cast<double>(n), 12.0 * static_cast<double>(n), DType::f32, KernelClass::elementwise,
                 {reads(src), reads(dst), writes(dst)}},
             [=] {
               float* d = dst.f32();
               const float* a = src.f32();
               for (int64_t i = 0; i < n; ++i) d[i] += a[i];
             });
}

void scale_(Device& dev, Stream& s, const Tensor& t, float factor) {
  require_f32(t, "scale_");
  const int64_t n = t.numel();
  dev.launch(s, {"scale_", static_cast<double>(n), 8.0 * static_cast<double>(n), DType::f32, KernelClass::elementwise,
                 {reads(t), writes(t)}},
             [=] {
               float* p = t.f32();
               for (int64_t i = 0; i < n; ++i) p[i] *= factor;
             });
}

}  // namespace shardlab::ops
