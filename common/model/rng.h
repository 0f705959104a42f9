// rng.h: small random number generators whose output is the same everywhere.
//
// shardlab promises byte-identical results from the same seed, and <random>'s distributions
// are specified only in their statistics (libstdc++ and libc++ draw different numbers from the
// same engine). So every random number in the project comes from here:
//   splitmix64   (Steele, Lea, Flood 2014): hashes seeds into independent sub-streams;
//   xoshiro256** (Blackman, Vigna 2018):   the generator each stream draws from.
#pragma once

#include <cmath>
#include <cstdint>

namespace shardlab {

constexpr uint64_t kGoldenGamma = 0x9e3779b97f4a7c15ULL;

// splitmix64's output function: a bijective mix of all 64 bits (the state advance is the
// caller's + kGoldenGamma).
inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// One splitmix64 step from state x: a well-mixed 64-bit hash of x.
inline uint64_t splitmix64(uint64_t x) { return mix64(x + kGoldenGamma); }

// The seed of sub-stream (a, b) of `seed` (data: a sequence's (step, row); parameters: their
// index): splitmix64(splitmix64(splitmix64(seed) ^ a) ^ b). It depends on nothing else (not
// the rank, not the world size). Each stage is a bijection of its input, so distinct (a, b)
// under one seed cannot collide at the inner stages.
inline uint64_t derive_seed(uint64_t seed, uint64_t a, uint64_t b = 0) {
  return splitmix64(splitmix64(splitmix64(seed) ^ a) ^ b);
}

class Rng {
 public:
  // The authors' recommended seeding: four successive splitmix64 outputs, never all zero.
  explicit Rng(uint64_t seed) {
    for (uint64_t& word : s_) {
      seed += kGoldenGamma;
      word = mix64(seed);
    }
  }

  uint64_t next() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  // Uniform on [0, 1): the top 53 bits, so every value is exact in a double.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

  // Uniform on the open interval (0, 1): the same grid shifted by half a step.
  double uniform_open() { return (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53; }

  // Uniform integer in [0, n), n >= 1, without modulo bias: reject the lowest 2^64 mod n
  // values so the rest split evenly into n classes.
  uint64_t below(uint64_t n) {
    const uint64_t threshold = (0 - n) % n;  // 2^64 mod n
    for (;;) {
      const uint64_t r = next();
      if (r >= threshold) return r % n;
    }
  }

  // Standard normal by Box-Muller (used for parameter initialisation).
  double normal() {
    const double u1 = uniform_open(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

}  // namespace shardlab
