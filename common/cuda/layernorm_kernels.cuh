// layernorm_kernels.cuh: layernorm's backward in one kernel, its parameters' gradients summed
// in shared memory as it goes.
//
// Build: included by kernels.cu (which launches it) and by tests/unit/test_layernorm_kernels.cpp,
// which runs the same kernel on the CPU under tests/unit/cuda_emulator.h, so its logic is checked on
// machines without a GPU. The file uses nothing but threadIdx, blockIdx, blockDim,
// __syncthreads, __shfl_xor_sync and atomicAdd, and takes its dynamic shared memory from
// dynamic_shared_floats(), which the includer defines.
//
// The math (ops.h): per row, norm = (x - mean) rstd and dnorm = weight dout;
//   dinp    += rstd (dnorm - mean(dnorm) - norm mean(dnorm norm)),
//   dweight += sum over rows of norm dout,  dbias += sum over rows of dout.
//
// Threads and data. One warp per row, its 32 lanes striding over the row's C channels (lane l
// takes l, l + 32, ...: a warp reads 128 consecutive bytes at a time). Block b's warp w takes
// rows b W + w, then every `blocks` W rows (W warps a block). Each block keeps its rows' share
// of dweight and dbias in shared memory ([C] each, added to with shared-memory atomics by its
// warps) and adds it to the result once, at the end, with one global atomic a channel. The
// first version used two kernels, the second reading dout and the input again to sum the
// parameters' gradients by column: 2.3x the sim's roofline on an H200 (57.6 us for GPT-2 small's
// 8192 x 768). The price of the atomics: the order in which warps and blocks add, hence the last
// bits of dweight and dbias, may change from run to run.
#pragma once

namespace layernorm {

constexpr int kWarp = 32;

// A warp's 32 lanes combine through shuffles; every lane gets the sum. The forward's kernel
// (kernels.cu) uses it too.
__device__ inline float warp_sum(float x) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffff, x, offset);
  return x;
}

// Shared memory, in floats: the block's dweight and dbias.
__host__ __device__ constexpr int backward_shared_floats(int C) { return 2 * C; }

// static: each includer (kernels.cu, the emulator test) has its own copy.
static __global__ void backward_kernel(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                                       const float* weight, const float* mean, const float* rstd, long long N, int C,
                                       int blocks) {
  float* dw = dynamic_shared_floats();  // this block's rows' sum of norm dout, [C]
  float* db = dw + C;                   // and of dout, [C]
  for (int i = threadIdx.x; i < 2 * C; i += blockDim.x) dw[i] = 0.0f;
  __syncthreads();

  const int lane = threadIdx.x % kWarp, warps = blockDim.x / kWarp;
  // The loop is the same for the warp's 32 lanes, as its shuffles need.
  for (long long n = static_cast<long long>(blockIdx.x) * warps + threadIdx.x / kWarp; n < N;
       n += static_cast<long long>(blocks) * warps) {
    const float* x = inp + n * C;
    const float* dy = dout + n * C;
    float* dx = dinp + n * C;
    const float m = mean[n], rs = rstd[n];
    float dnorm_sum = 0.0f, dnorm_norm_sum = 0.0f;
    for (int i = lane; i < C; i += kWarp) {
      const float norm = (x[i] - m) * rs, g = dy[i], dnorm = weight[i] * g;
      dnorm_sum += dnorm;
      dnorm_norm_sum += dnorm * norm;
      atomicAdd(&dw[i], norm * g);
      atomicAdd(&db[i], g);
    }
    const float dnorm_mean = warp_sum(dnorm_sum) / static_cast<float>(C);
    const float dnorm_norm_mean = warp_sum(dnorm_norm_sum) / static_cast<float>(C);
    // The row again: the warp read it a moment ago, so it comes from L1, not HBM.
    for (int i = lane; i < C; i += kWarp)
      dx[i] += (weight[i] * dy[i] - dnorm_mean - (x[i] - m) * rs * dnorm_norm_mean) * rs;
  }

  __syncthreads();  // every warp has added its rows
  for (int i = threadIdx.x; i < C; i += blockDim.x) {  // null: a frozen weight or bias, nothing to add
    if (dweight != nullptr) atomicAdd(&dweight[i], dw[i]);
    if (dbias != nullptr) atomicAdd(&dbias[i], db[i]);
  }
}

}  // namespace layernorm
