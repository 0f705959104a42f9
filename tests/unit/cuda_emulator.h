// cuda_emulator.h: runs a CUDA kernel's source on the CPU, one std::thread per CUDA thread, so
// that the logic of kernels (indexing, masking, tiling, reductions) is tested on machines
// without a GPU. Include it, then a kernel header written for it (attention_kernels.cuh).
//
// What it provides: threadIdx, blockIdx, blockDim (x and y); __syncthreads as a barrier of the
// block's threads; __shared__ variables (static: blocks run one at a time); __shfl_xor_sync as an exchange among a warp's 32 threads (every lane must
// call it, as the mask 0xffffffff promises on a GPU); atomicAdd on floats; dynamic shared memory
// through emulated_shared(). Blocks run one after another, so a block's shared memory and the
// grid's position can be plain globals. What it does not model: timing, the memory model
// beyond the barriers (a race the barriers allow may go unseen; compute-sanitizer's racecheck
// covers that on a GPU), warp divergence, and register or shared-memory limits.
//
// A kernel runs thousands of OS threads through many barriers: keep the shapes small.
#pragma once

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __launch_bounds__(threads)
#define __shared__ static

using std::max;
using std::min;

// CUDA's float4: four floats, 16-byte aligned, so a kernel's 128-bit loads work on it.
struct alignas(16) float4 {
  float x, y, z, w;
};

struct EmulatedDim {
  unsigned int x = 0, y = 1, z = 1;
};

// The running block's index and size, and each thread's own index.
inline EmulatedDim blockIdx, blockDim;
inline thread_local EmulatedDim threadIdx;

namespace cuda_emulator {

constexpr int kWarp = 32;

struct Block {
  explicit Block(int threads) : barrier(threads) {
    for (int w = 0; w < (threads + kWarp - 1) / kWarp; ++w) warps.push_back(std::make_unique<Warp>());
  }
  struct Warp {
    std::barrier<> barrier{kWarp};
    float lanes[kWarp] = {};
  };
  std::barrier<> barrier;
  std::vector<std::unique_ptr<Warp>> warps;
  std::vector<float> shared;
};

inline Block* running = nullptr;

// Runs kernel(args...) as a grid of blocks (x, y) of threads (x, y; x * y a multiple of 32),
// with `shared_bytes` of dynamic shared memory (zeroed, as a GPU's is not: a kernel that reads
// shared memory it never wrote is a bug the GPU test finds). Thread t of a block is
// (t % x, t / x), and warps are runs of 32 consecutive t, as on a GPU.
template <class Kernel, class... Args>
void launch(EmulatedDim grid, EmulatedDim block_dim, size_t shared_bytes, Kernel kernel, Args... args) {
  blockDim = block_dim;
  const unsigned int threads = block_dim.x * block_dim.y;
  for (unsigned int by = 0; by < grid.y; ++by)
    for (unsigned int bx = 0; bx < grid.x; ++bx) {
      blockIdx = {bx, by, 0};
      Block block(static_cast<int>(threads));
      block.shared.assign((shared_bytes + sizeof(float) - 1) / sizeof(float), 0.0f);
      running = &block;
      std::vector<std::thread> pool;
      pool.reserve(threads);
      for (unsigned int t = 0; t < threads; ++t)
        pool.emplace_back([=] {
          threadIdx = {t % block_dim.x, t / block_dim.x, 0};
          kernel(args...);
        });
      for (std::thread& th : pool) th.join();
      running = nullptr;
    }
}

template <class Kernel, class... Args>
void launch(unsigned int blocks, unsigned int threads, size_t shared_bytes, Kernel kernel, Args... args) {
  launch(EmulatedDim{blocks, 1, 1}, EmulatedDim{threads, 1, 1}, shared_bytes, kernel, args...);
}

}  // namespace cuda_emulator

inline float* emulated_shared() { return cuda_emulator::running->shared.data(); }

inline void __syncthreads() { cuda_emulator::running->barrier.arrive_and_wait(); }

inline float __shfl_xor_sync(unsigned /*mask*/, float value, int lane_mask) {
  using cuda_emulator::kWarp;
  const unsigned int t = threadIdx.y * blockDim.x + threadIdx.x;
  auto& warp = *cuda_emulator::running->warps[t / kWarp];
  const int lane = static_cast<int>(t % kWarp);
  warp.lanes[lane] = value;
  warp.barrier.arrive_and_wait();  // every lane has published its value
  const float got = warp.lanes[lane ^ lane_mask];
  warp.barrier.arrive_and_wait();  // every lane has read before any writes again
  return got;
}

inline float atomicAdd(float* address, float value) { return std::atomic_ref<float>(*address).fetch_add(value); }
