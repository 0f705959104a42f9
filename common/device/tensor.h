// tensor.h: a small typed view of memory on a device (or on the host).
//
// A Tensor does not own memory: the caching allocator does (allocator.h), and the Device
// hands out Tensors that point into its blocks. Views (FSDP's parameters inside a flat
// buffer) share their parent's allocation id and carry their own byte offset, so the race
// check sees exactly which bytes an op touches.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <string_view>

namespace shardlab {

class Device;

enum class DType : uint8_t { f32, bf16, f16, i32, i64, u8 };

size_t dtype_size(DType t);
std::string_view dtype_name(DType t);     // "f32", "bf16", ... (flags, messages)
std::string_view kineto_dtype(DType t);   // "Float", "BFloat16", ... (what PyTorch traces write)

// Up to four dimensions; enough for every tensor the chapters use, and no heap allocation.
struct Shape {
  static constexpr int kMaxDims = 4;
  int64_t dims[kMaxDims] = {0, 0, 0, 0};
  int ndim = 0;

  Shape() = default;
  Shape(std::initializer_list<int64_t> d);
  int64_t numel() const;
  int64_t operator[](int i) const { return dims[i]; }
  bool operator==(const Shape& o) const;
  std::string str() const;  // "[4, 1024]"
};

struct Tensor {
  void* data = nullptr;       // nullptr under --compute skip: nothing real is allocated
  Shape shape;
  DType dtype = DType::f32;
  Device* device = nullptr;   // nullptr: host (pinned) memory
  uint64_t alloc_id = 0;      // the allocation this tensor lives in (0: untracked host memory)
  uint64_t segment = 0;       // the allocator segment, for address-range conflicts
  uint64_t offset = 0;        // byte offset of data inside that segment

  int64_t numel() const { return shape.numel(); }
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  bool on_host() const { return device == nullptr; }
  bool defined() const { return shape.ndim > 0 || alloc_id != 0 || data != nullptr; }

  // A view of `shape` elements starting `elem_offset` elements into this tensor.
  Tensor view(int64_t elem_offset, Shape shape) const;

  float* f32() const;     // typed access; throws if the dtype differs
  int32_t* i32() const;
  uint16_t* bf16() const;  // bfloat16's bits (device/bf16.h converts them)
};

// Whether two tensors share a byte: on the device, the same allocator segment and intersecting
// byte ranges (so also under --compute skip, where nothing has an address); on the host,
// intersecting addresses. Empty tensors share nothing.
bool overlaps(const Tensor& a, const Tensor& b);

}  // namespace shardlab
