// bf16.h: bfloat16, the top 16 bits of a float32: float32's 8-bit exponent (its range) with 7
// bits of mantissa (about 2.4 decimal digits).
//
// A float becomes a bfloat16 by rounding to the nearest, ties to the even one, and a NaN to the
// canonical quiet NaN 0x7FC0: c10::BFloat16's round_to_nearest_even in PyTorch
// (c10/util/BFloat16.h), and CUDA's __float2bfloat16_rn for every non-NaN. Widening back is
// exact: a bfloat16 is a float with its low 16 bits zero. So a product of two bfloat16s is exact
// in float32, and a GEMM that multiplies bfloat16s and sums in float32 (cuBLAS's with
// CUBLAS_COMPUTE_32F) differs from a float32 GEMM of the widened values only in its summation
// order.
#pragma once

#include <cstdint>
#include <cstring>

namespace shardlab {

inline uint16_t to_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0;  // NaN
  // Adding 0x7FFF, plus 1 when the kept part is odd, carries into bit 16 exactly when the
  // dropped half is above one half, or exactly one half and the kept part odd.
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float from_bf16(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// x rounded to the nearest bfloat16, as a float.
inline float round_bf16(float x) { return from_bf16(to_bf16(x)); }

}  // namespace shardlab
