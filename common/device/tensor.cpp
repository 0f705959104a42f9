#include "device/tensor.h"

#include <string>

namespace shardlab {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::bf16: return 2;
    case DType::f16: return 2;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::u8: return 1;
  }
  return 0;
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::u8: return "u8";
  }
  return "?";
}

std::string_view kineto_dtype(DType t) {
  switch (t) {
    case DType::f32: return "Float";
    case DType::bf16: return "BFloat16";
    case DType::f16: return "Half";
    case DType::i32: return "Int";
    case DType::i64: return "Long";
    case DType::u8: return "Byte";
  }
  return "?";
}

Shape::Shape(std::initializer_list<int64_t> d) {
  if (d.size() > static_cast<size_t>(kMaxDims))
    throw std::invalid_argument("Shape: at most 4 dimensions, got " + std::to_string(d.size()));
  for (int64_t v : d) {
    if (v < 0) throw std::invalid_argument("Shape: negative dimension " + std::to_string(v));
    dims[ndim++] = v;
  }
}

int64_t Shape::numel() const {
  if (ndim == 0) return 0;
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= dims[i];
  return n;
}

bool Shape::operator==(const Shape& o) const {
  if (ndim != o.ndim) return false;
  for (int i = 0; i < ndim; ++i)
    if (dims[i] != o.dims[i]) return false;
  return true;
}

std::string Shape::str() const {
  std::string s = "[";
  for (int i = 0; i < ndim; ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

Tensor Tensor::view(int64_t elem_offset, Shape s) const {
  if (elem_offset < 0 || elem_offset + s.numel() > numel())
    throw std::out_of_range("Tensor::view: elements [" + std::to_string(elem_offset) + ", " +
                            std::to_string(elem_offset + s.numel()) + ") outside a tensor of " +
                            std::to_string(numel()));
  Tensor v = *this;
  v.shape = s;
  const size_t byte_off = static_cast<size_t>(elem_offset) * dtype_size(dtype);
  v.offset = offset + byte_off;
  if (data) v.data = static_cast<char*>(data) + byte_off;
  return v;
}

bool overlaps(const Tensor& a, const Tensor& b) {
  if (a.bytes() == 0 || b.bytes() == 0 || a.on_host() != b.on_host()) return false;
  if (!a.on_host()) return a.segment == b.segment && a.offset < b.offset + b.bytes() && b.offset < a.offset + a.bytes();
  const auto* pa = static_cast<const char*>(a.data);
  const auto* pb = static_cast<const char*>(b.data);
  return pa && pb && pa < pb + b.bytes() && pb < pa + a.bytes();
}

float* Tensor::f32() const {
  if (dtype != DType::f32) throw std::logic_error("Tensor::f32 on a " + std::string(dtype_name(dtype)) + " tensor");
  return static_cast<float*>(data);
}

uint16_t* Tensor::bf16() const {
  if (dtype != DType::bf16) throw std::logic_error("Tensor::bf16 on a " + std::string(dtype_name(dtype)) + " tensor");
  return static_cast<uint16_t*>(data);
}

int32_t* Tensor::i32() const {
  if (dtype != DType::i32) throw std::logic_error("Tensor::i32 on a " + std::string(dtype_name(dtype)) + " tensor");
  return static_cast<int32_t*>(data);
}

}  // namespace shardlab
