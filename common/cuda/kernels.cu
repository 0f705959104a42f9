// kernels.cu: the CUDA kernels of every device op (ops.h, attention.h), in the style of
// karpathy/llm.c: plain C-style kernels, one per op, fp32 throughout, cuBLAS for the matmuls.
// Each host function computes what the CPU body of its op in ops.cpp / attention.cpp computes,
// with the same formulas; kernels.h lists them. Sums run in another order on the GPU (across
// threads and tiles; atomically for the embedding backward, the column sums and attention's
// dq, so their last bits may change from run to run), which the GPU test allows for with a
// tolerance per kind of op. Attention's kernels are in attention_kernels.cuh, layernorm's backward in
// layernorm_kernels.cuh; cuBLAS is opened at run time by cublas_library.cpp.
//
// Build and run: CMake compiles this file into shardlab_common whenever nvcc is found, and the
// GPU test checks every kernel against the CPU ops (it skips with exit code 77 without a GPU):
//   cmake --preset default && cmake --build --preset default --target shardlab_cuda_tests
//   build/tests/shardlab_cuda_tests            # prints each op's relative error
//   build/tests/bench_cuda_matmul              # cuBLAS SGEMM at gpt2-small shapes, TFLOP/s
//
// Conventions: sizes arrive as int64_t; a kernel indexes memory with 64-bit offsets and uses
// int for what is bounded by a block or a row (lanes, channels, sequence positions). Every CUDA
// call goes through CUDA_CHECK (check.h), every launch is followed by
// CUDA_CHECK(cudaGetLastError()) so a bad launch names its op, every cuBLAS call through
// CUBLAS_CHECK; a launch with no work (n == 0) is skipped, since a grid of zero blocks is an error.
#include "kernels.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "check.h"
#include "cublas_library.h"

// A kernel's dynamic shared memory, under the name attention_kernels.cuh and
// layernorm_kernels.cuh ask for (the CPU emulator in tests/ defines its own).
__device__ inline float* dynamic_shared_floats() {
  extern __shared__ float dynamic_shared[];
  return dynamic_shared;
}
#include "attention_kernels.cuh"
#include "layernorm_kernels.cuh"

namespace shardlab::cuda {
namespace {

constexpr int kThreads = 256;  // threads per block of the one-thread-per-element kernels
constexpr int kWarp = 32;

cudaStream_t as_stream(void* stream) { return static_cast<cudaStream_t>(stream); }

// Blocks of `threads` that cover n items, one item per thread.
unsigned int blocks_for(int64_t n, int64_t threads) {
  const int64_t blocks = (n + threads - 1) / threads;
  if (blocks > INT_MAX) throw std::invalid_argument("kernels.cu: " + std::to_string(n) + " items need too many blocks");
  return static_cast<unsigned int>(blocks);
}

// A token id or target outside its table. The CPU op throws; a kernel cannot, so it prints the
// CPU's message and traps, as PyTorch's device-side asserts do: the launch fails, the error
// surfaces at the next synchronizing CUDA call, and the CUDA context is unusable afterwards.
// Every thread that would use the id checks it (so none reads outside the table); only the one
// with `print` set says why, so the message appears once per bad position.
__device__ void check_index(const char* op, const char* what, int id, const char* place, int64_t where, int64_t limit,
                            bool print) {
  if (id >= 0 && id < limit) return;
  if (print)
    printf("%s: %s %d at %s %lld outside [0, %lld)\n", op, what, id, place, static_cast<long long>(where),
           static_cast<long long>(limit));
  __trap();
}

// ============================================================================================
// Elementwise and memory. One thread per element: thread i of the grid handles element i.

__global__ void fill_kernel(float* t, int64_t n, float value) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) t[i] = value;
}

__global__ void add_kernel(float* dst, const float* src, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) dst[i] += src[i];
}

// ops::copy_blocks, up to kCopyBlocksPerLaunch blocks a launch, passed by value (a kernel's
// parameters may take 4 KiB): blockIdx.y picks the block, x strides over its rows * width.
constexpr int kCopyBlocksPerLaunch = 32;
struct CopyBlocks {
  CopyBlock block[kCopyBlocksPerLaunch];
};

__global__ void copy_blocks_kernel(CopyBlocks blocks, int64_t rows) {
  const CopyBlock& b = blocks.block[blockIdx.y];
  const int64_t n = rows * b.width;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / b.width, k = i - r * b.width;
    const int64_t from = r * b.src_pitch + k, to = r * b.dst_pitch + k;
    float v = 0.0f;
    if (from < b.src_numel)
      v = b.src_bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(b.src)[from]) : static_cast<const float*>(b.src)[from];
    if (b.dst_bf16) static_cast<__nv_bfloat16*>(b.dst)[to] = __float2bfloat16_rn(v);
    else static_cast<float*>(b.dst)[to] = v;
  }
}

__global__ void divide_kernel(float* t, int64_t n, float divisor) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) t[i] /= divisor;
}

__global__ void scale_kernel(float* t, int64_t n, float factor) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) t[i] *= factor;
}

__global__ void residual_forward_kernel(float* out, const float* a, const float* b, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}

}  // namespace

void fill(float* t, int64_t n, float value, void* stream) {
  if (n == 0) return;
  // Zeros (gradients before a backward, almost every fill) are all-zero bytes: the driver's
  // memset writes them at HBM's full bandwidth, about twice what one float a thread reaches.
  if (value == 0.0f && !std::signbit(value)) {
    CUDA_CHECK(cudaMemsetAsync(t, 0, static_cast<size_t>(n) * sizeof(float), as_stream(stream)));
    return;
  }
  fill_kernel<<<blocks_for(n, kThreads), kThreads, 0, as_stream(stream)>>>(t, n, value);
  CUDA_CHECK(cudaGetLastError());
}

// Byte for byte, any dtype: a device-to-device copy engine transfer, no kernel needed.
void copy(void* dst, const void* src, size_t bytes, void* stream) {
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, as_stream(stream)));
}

void add_(float* dst, const float* src, int64_t n, void* stream) {
  if (n == 0) return;
  add_kernel<<<blocks_for(n, kThreads), kThreads, 0, as_stream(stream)>>>(dst, src, n);
  CUDA_CHECK(cudaGetLastError());
}

void copy_blocks(const std::vector<CopyBlock>& blocks, int64_t rows, void* stream) {
  for (size_t first = 0; first < blocks.size(); first += kCopyBlocksPerLaunch) {
    CopyBlocks batch{};
    const size_t count = std::min<size_t>(kCopyBlocksPerLaunch, blocks.size() - first);
    int64_t widest = 0;
    for (size_t b = 0; b < count; ++b) batch.block[b] = blocks[first + b], widest = std::max(widest, rows * blocks[first + b].width);
    if (widest == 0) continue;
    const dim3 grid(std::min<unsigned int>(blocks_for(widest, kThreads), 1024), static_cast<unsigned int>(count));
    copy_blocks_kernel<<<grid, kThreads, 0, as_stream(stream)>>>(batch, rows);
    CUDA_CHECK(cudaGetLastError());
  }
}

float* scratch_f32(int64_t n, void* stream) {
  void* p = nullptr;
  CUDA_CHECK(cudaMallocAsync(&p, static_cast<size_t>(std::max<int64_t>(n, 1)) * sizeof(float), as_stream(stream)));
  return static_cast<float*>(p);
}

void free_scratch(float* p, void* stream) { CUDA_CHECK(cudaFreeAsync(p, as_stream(stream))); }

void scale_(float* t, int64_t n, float factor, void* stream) {
  if (n == 0) return;
  scale_kernel<<<blocks_for(n, kThreads), kThreads, 0, as_stream(stream)>>>(t, n, factor);
  CUDA_CHECK(cudaGetLastError());
}

void divide_(float* t, int64_t n, float divisor, void* stream) {
  if (n == 0) return;
  divide_kernel<<<blocks_for(n, kThreads), kThreads, 0, as_stream(stream)>>>(t, n, divisor);
  CUDA_CHECK(cudaGetLastError());
}

void residual_forward(float* out, const float* a, const float* b, int64_t n, void* stream) {
  if (n == 0) return;
  residual_forward_kernel<<<blocks_for(n, kThreads), kThreads, 0, as_stream(stream)>>>(out, a, b, n);
  CUDA_CHECK(cudaGetLastError());
}

// ============================================================================================
// Embeddings.

namespace {

// The row of wte (dwte) that token id ix reads, as for_each_token in ops.cpp finds it. A whole
// table (vocab_begin < 0) holds every id: one outside [0, V) traps. A slice of the vocabulary
// holds rows [vocab_begin, vocab_begin + V): an id outside them is another rank's, -1 (no row).
__device__ int64_t table_row(const char* op, int32_t ix, int64_t bt, int64_t V, int64_t vocab_begin, bool print) {
  if (vocab_begin < 0) {
    check_index(op, "id", ix, "position", bt, V, print);
    return ix;
  }
  const int64_t row = ix - vocab_begin;
  return row >= 0 && row < V ? row : -1;
}

// One block per position bt (B T of them), its threads over the C channels: thread x copies
// channels x, x + blockDim, ... of one wte row and one wpe row (coalesced), either one left out
// where there is none (an id another rank's slice holds, a null wpe). The block finds its token
// and position once; a thread per element would divide a 64-bit index by C for every element,
// which costs more than the copy (2x the sim's roofline on the H200). Positions are checked
// even without wpe, as the CPU checks them (against P = INT32_MAX then).
__global__ void embedding_forward_kernel(float* out, const int32_t* tokens, const int32_t* positions, const float* wte,
                                         const float* wpe, int64_t T, int64_t C, int64_t V, int64_t P,
                                         int64_t vocab_begin) {
  const int64_t bt = blockIdx.x, t = bt % T;
  const int64_t row = table_row("embedding_forward", tokens[bt], bt, V, vocab_begin, threadIdx.x == 0);
  const int32_t p = positions ? positions[t] : static_cast<int32_t>(t);
  check_index("embedding_forward", "position id", p, "column", t, P, threadIdx.x == 0 && bt < T);
  const float* e = row >= 0 ? wte + row * C : nullptr;
  const float* w = wpe != nullptr ? wpe + static_cast<int64_t>(p) * C : nullptr;
  float* o = out + bt * C;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
    o[c] = (e != nullptr ? e[c] : 0.0f) + (w != nullptr ? w[c] : 0.0f);
}

// One thread per element of dout, mapped as in the forward: it adds dout[bt, c] into
// dwte[row, c] (when the table holds the token's row) and dwpe[p, c]; a null dwte or dwpe (a
// frozen table) gets nothing. Positions that share a token (and, for dwpe, the B batch rows
// of one position) add into the same element concurrently, so both adds are atomicAdd. That is
// correct and fast here: collisions are few (a token repeated within a batch, B rows per
// position) and spread over different addresses. The price is that the order of the float
// additions, hence the last bits of the result, can change from run to run; llm.c's
// deterministic alternative sorts positions by token first, which is much more code.
__global__ void embedding_backward_kernel(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                                          const int32_t* positions, int64_t BT, int64_t T, int64_t C, int64_t V,
                                          int64_t P, int64_t vocab_begin) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= BT * C) return;
  const int64_t bt = i / C, c = i % C, t = bt % T;
  const int64_t row = table_row("embedding_backward", tokens[bt], bt, V, vocab_begin, c == 0);
  const int32_t p = positions ? positions[t] : static_cast<int32_t>(t);
  check_index("embedding_backward", "position id", p, "column", t, P, c == 0 && bt < T);
  if (dwte != nullptr && row >= 0) atomicAdd(&dwte[row * C + c], dout[i]);
  if (dwpe != nullptr) atomicAdd(&dwpe[static_cast<int64_t>(p) * C + c], dout[i]);
}

}  // namespace

void embedding_forward(float* out, const int32_t* tokens, const int32_t* positions, const float* wte, const float* wpe,
                       int64_t B, int64_t T, int64_t C, int64_t V, int64_t P, int64_t vocab_begin, void* stream) {
  if (B * T * C == 0) return;
  embedding_forward_kernel<<<blocks_for(B * T, 1), kThreads, 0, as_stream(stream)>>>(out, tokens, positions, wte, wpe,
                                                                                    T, C, V, P, vocab_begin);
  CUDA_CHECK(cudaGetLastError());
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, const int32_t* positions,
                        int64_t B, int64_t T, int64_t C, int64_t V, int64_t P, int64_t vocab_begin, void* stream) {
  const int64_t n = B * T * C;
  if (n == 0) return;
  embedding_backward_kernel<<<blocks_for(n, kThreads), kThreads, 0, as_stream(stream)>>>(
      dwte, dwpe, dout, tokens, positions, B * T, T, C, V, P, vocab_begin);
  CUDA_CHECK(cudaGetLastError());
}

// ============================================================================================
// A bias on its own: out[N, OC] += bias[OC]. One thread per element.

namespace {

// Element i of out[N, OC] adds bias[i % OC].
__global__ void add_bias_kernel(float* out, const float* bias, int64_t n, int64_t OC) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] += bias[i % OC];
}

}  // namespace

void add_bias(float* out, const float* bias, int64_t N, int64_t OC, void* stream) {
  if (N * OC == 0) return;
  add_bias_kernel<<<blocks_for(N * OC, kThreads), kThreads, 0, as_stream(stream)>>>(out, bias, N * OC, OC);
  CUDA_CHECK(cudaGetLastError());
}

// ============================================================================================
// Layernorm.

namespace {

constexpr int kRowWarps = 8;  // rows per block in the one-warp-per-row kernels

// One warp per row: warp w of block b normalizes row n = b * kRowWarps + w; its lanes stride
// over the row's channels (lane, lane + 32, ...), so each pass reads the row coalesced. Two
// passes as on the CPU: the mean, then the biased variance around it.
__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                                         const float* bias, int64_t N, int C) {
  const int lane = threadIdx.x % kWarp;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kRowWarps + threadIdx.x / kWarp;
  if (n >= N) return;
  const float* x = inp + n * C;
  float sum = 0.0f;
  for (int i = lane; i < C; i += kWarp) sum += x[i];
  const float m = layernorm::warp_sum(sum) / static_cast<float>(C);
  float sq = 0.0f;
  for (int i = lane; i < C; i += kWarp) sq += (x[i] - m) * (x[i] - m);
  const float rs = 1.0f / sqrtf(layernorm::warp_sum(sq) / static_cast<float>(C) + 1e-5f);
  float* o = out + n * C;
  for (int i = lane; i < C; i += kWarp) o[i] = (x[i] - m) * rs * weight[i] + bias[i];
  if (lane == 0) {
    mean[n] = m;
    rstd[n] = rs;
  }
}

// The matmul bias's gradient: column sums over N rows. Block (bx, by) of 32 x 32 threads owns
// 32 adjacent columns and one chunk of the rows: thread (x, y) sums rows y, y + 32, ... of the
// chunk in column 32 bx + x (a warp, fixed y, reads 32 adjacent floats of one row: coalesced);
// the 32 partial sums of each column are then added in shared memory and the chunk's total
// atomically into the result. Without chunks a row of 768 channels made only 24 blocks for a
// 132-SM GPU. The price of the atomics: the order in which chunks add, hence the last bits of
// dbias, may change from run to run.
constexpr int kChunkRows = 256;  // rows per chunk: 8 per thread

dim3 column_sum_grid(int64_t N, int64_t C) {
  const int64_t chunks = std::max<int64_t>(1, (N + kChunkRows - 1) / kChunkRows);
  if (chunks > 65535) throw std::invalid_argument("column sums: " + std::to_string(N) + " rows are too many");
  return dim3(blocks_for(C, kWarp), static_cast<unsigned int>(chunks));
}

// dbias[c] += sum over rows of dout[n, c].
__global__ void bias_backward_kernel(float* dbias, const float* dout, int64_t N, int OC) {
  __shared__ float partial[kWarp][kWarp + 1];
  const int x = threadIdx.x, y = threadIdx.y;
  const int c = blockIdx.x * kWarp + x;
  const int64_t first = static_cast<int64_t>(blockIdx.y) * kChunkRows, last = min(N, first + kChunkRows);
  float s = 0.0f;
  if (c < OC)
    for (int64_t n = first + y; n < last; n += kWarp) s += dout[n * OC + c];
  partial[y][x] = s;
  __syncthreads();
  if (y != 0 || c >= OC) return;
  for (int r = 1; r < kWarp; ++r) s += partial[r][x];
  atomicAdd(&dbias[c], s);
}

// A kernel may use more than the 48 KiB of shared memory every launch gets only after opting in
// (cudaFuncAttributeMaxDynamicSharedMemorySize), up to the GPU's limit: 227 KiB on an H100,
// 163 on an A100, 99 on most consumer cards. Attention's backward needs 109 KiB at head size 64,
// 173 at 128; layernorm's backward 8 bytes a channel. `needing` names what asks for that much.
template <class Kernel>
void allow_shared(Kernel kernel, const char* op, const std::string& needing, size_t bytes) {
  int device = 0, limit = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (bytes > static_cast<size_t>(limit))
    throw std::invalid_argument(std::string(op) + ": " + needing + " need " + std::to_string(bytes) +
                                " bytes of shared memory a block; this GPU allows " + std::to_string(limit));
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

// C fits an int (a row of 2^31 floats would not fit any GPU's block of work anyway).
int row_length(int64_t C, const char* op) {
  if (C > INT_MAX) throw std::invalid_argument(std::string(op) + ": rows of " + std::to_string(C) + " are too long");
  return static_cast<int>(C);
}

}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int64_t N, int64_t C, void* stream) {
  if (N == 0) return;
  layernorm_forward_kernel<<<blocks_for(N, kRowWarps), kRowWarps * kWarp, 0, as_stream(stream)>>>(
      out, mean, rstd, inp, weight, bias, N, row_length(C, "layernorm_forward"));
  CUDA_CHECK(cudaGetLastError());
}

// The backward's kernel is layernorm_kernels.cuh's (how warps map to rows, where the parameters'
// sums go). Up to eight blocks of 8 warps an SM (64 warps, all an SM holds): enough rows in flight
// to keep HBM busy, and each block adds its 2 C sums to the result once.
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C,
                        void* stream) {
  if (N == 0 || C == 0) return;
  const int c = row_length(C, "layernorm_backward");
  const size_t bytes = sizeof(float) * static_cast<size_t>(layernorm::backward_shared_floats(c));
  allow_shared(layernorm::backward_kernel, "layernorm_backward", "rows of " + std::to_string(C) + " channels", bytes);
  int device = 0, sms = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const int blocks = static_cast<int>(std::min<int64_t>(blocks_for(N, kRowWarps), 8 * static_cast<int64_t>(sms)));
  layernorm::backward_kernel<<<blocks, kRowWarps * kWarp, bytes, as_stream(stream)>>>(
      dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, c, blocks);
  CUDA_CHECK(cudaGetLastError());
}

// ============================================================================================
// Matmuls through cuBLAS SGEMM.
//
// cuBLAS is column-major (Fortran): a matrix is stored column by column. The usual transpose
// trick: a row-major [R, K] array, read column-major, is the [K, R] matrix, its transpose. So
// cuBLAS sees inp^T [C, N], weight^T [C, OC] and dout^T [OC, N] without any copy, and we ask it
// for the transpose of each result, written column-major, which is the result row-major:
//   out = inp weight^T       ->  out^T [OC, N]     = op_T(weight^T) op_N(inp^T)    (T, N), k = C
//   dinp += dout weight      ->  dinp^T [C, N]     = op_N(weight^T) op_N(dout^T)   (N, N), k = OC
//   dweight += dout^T inp    ->  dweight^T [C, OC] = op_N(inp^T) op_T(dout^T)      (N, T), k = N
// Leading dimensions are the row lengths of the row-major arrays.
// beta = 1 makes SGEMM accumulate, which is what the backward convention asks for.
//
// Precision: true fp32. The handle's math mode is CUBLAS_DEFAULT_MATH, which does not use TF32
// tensor cores for SGEMM: the same as PyTorch's default for fp32 matmuls
// (torch.backends.cuda.matmul.allow_tf32 = False), and what the CPU gemm is compared against.

namespace {

// One cuBLAS handle per GPU, created the first time that GPU (the current device) multiplies,
// and kept for the life of the process (destroying it at exit would race the CUDA runtime's own
// teardown). Handles are shared by every stream of their GPU: each call sets its stream first,
// under a lock, so two host threads cannot interleave a stream switch and a GEMM.
std::mutex cublas_mutex;
std::vector<cublasHandle_t> cublas_handles;  // indexed by device

cublasHandle_t cublas_handle_locked() {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  if (cublas_handles.size() <= static_cast<size_t>(device)) cublas_handles.resize(static_cast<size_t>(device) + 1);
  cublasHandle_t& handle = cublas_handles[static_cast<size_t>(device)];
  if (handle == nullptr) {
    CUBLAS_CHECK(cublas().create(&handle));
    CUBLAS_CHECK(cublas().set_math_mode(handle, CUBLAS_DEFAULT_MATH));
  }
  return handle;
}

int gemm_dim(int64_t d, const char* op) {
  if (d > INT_MAX)
    throw std::invalid_argument(std::string(op) + ": dimension " + std::to_string(d) + " exceeds cuBLAS's int");
  return static_cast<int>(d);
}

// Calls call(handle) with this GPU's cuBLAS handle set to `stream`, under the lock.
template <class Call>
void on_stream(void* stream, Call call) {
  std::lock_guard<std::mutex> lock(cublas_mutex);
  cublasHandle_t handle = cublas_handle_locked();
  CUBLAS_CHECK(cublas().set_stream(handle, as_stream(stream)));
  call(handle);
}

// Column-major C[m,n] = alpha op(A)[m,k] op(B)[k,n] + beta C on `stream`.
void sgemm(cublasOperation_t op_a, cublasOperation_t op_b, int64_t m, int64_t n, int64_t k, const float* A, int64_t lda,
           const float* B, int64_t ldb, float beta, float* C, int64_t ldc, void* stream, const char* op) {
  if (m == 0 || n == 0) return;
  const float alpha = 1.0f;
  on_stream(stream, [&](cublasHandle_t handle) {
    CUBLAS_CHECK(cublas().sgemm(handle, op_a, op_b, gemm_dim(m, op), gemm_dim(n, op), gemm_dim(k, op), &alpha, A,
                                gemm_dim(lda, op), B, gemm_dim(ldb, op), &beta, C, gemm_dim(ldc, op)));
  });
}

// The same with bf16 A, B and C (cublasGemmEx, CUDA_R_16BF): products summed in float32
// (CUBLAS_COMPUTE_32F), C = round(A B + beta C) to bf16 once, on tensor cores.
void gemm_bf16(cublasOperation_t op_a, cublasOperation_t op_b, int64_t m, int64_t n, int64_t k, const void* A,
               int64_t lda, const void* B, int64_t ldb, float beta, void* C, int64_t ldc, void* stream, const char* op) {
  if (m == 0 || n == 0) return;
  const float alpha = 1.0f;
  on_stream(stream, [&](cublasHandle_t handle) {
    CUBLAS_CHECK(cublas().gemm_ex(handle, op_a, op_b, gemm_dim(m, op), gemm_dim(n, op), gemm_dim(k, op), &alpha, A,
                                  CUDA_R_16BF, gemm_dim(lda, op), B, CUDA_R_16BF, gemm_dim(ldb, op), &beta, C,
                                  CUDA_R_16BF, gemm_dim(ldc, op), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  });
}

// One thread per element of out[N, OC]: element i starts as bias[i % OC] (the GEMM then adds).
__global__ void broadcast_bias_kernel(float* out, const float* bias, int64_t n, int64_t OC) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = bias[i % OC];
}

}  // namespace

// As on the CPU: out starts as the bias (or, with beta = 0, is simply overwritten) and the GEMM
// accumulates the product into it.
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int64_t N, int64_t C,
                    int64_t OC, void* stream) {
  float beta = 0.0f;
  if (bias != nullptr && N * OC > 0) {
    broadcast_bias_kernel<<<blocks_for(N * OC, kThreads), kThreads, 0, as_stream(stream)>>>(out, bias, N * OC, OC);
    CUDA_CHECK(cudaGetLastError());
    beta = 1.0f;
  }
  sgemm(CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, weight, C, inp, C, beta, out, OC, stream, "matmul_forward");
}

void matmul_backward_input(float* dinp, const float* dout, const float* weight, int64_t N, int64_t C, int64_t OC,
                           void* stream) {
  sgemm(CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, weight, C, dout, OC, 1.0f, dinp, C, stream, "matmul_backward_input");
}

void matmul_backward_weight(float* dweight, float* dbias, const float* dout, const float* inp, int64_t N, int64_t C,
                            int64_t OC, void* stream) {
  // dweight null: a frozen weight, no GEMM (its bias may still train).
  if (dweight != nullptr)
    sgemm(CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, inp, C, dout, OC, 1.0f, dweight, C, stream, "matmul_backward_weight");
  if (dbias == nullptr || N == 0 || OC == 0) return;
  bias_backward_kernel<<<column_sum_grid(N, OC), dim3(kWarp, kWarp), 0, as_stream(stream)>>>(
      dbias, dout, N, row_length(OC, "matmul_backward_weight"));
  CUDA_CHECK(cudaGetLastError());
}

// Mixed precision's GEMMs, the same three products on bf16 operands. The bias's rows are copied
// as they are (bf16 to bf16: copy_blocks with a source pitch of 0 reads the bias for every row).
void matmul_forward_bf16(void* out, const void* inp, const void* weight, const void* bias, int64_t N, int64_t C,
                         int64_t OC, void* stream) {
  float beta = 0.0f;
  if (bias != nullptr && N * OC > 0) {
    copy_blocks({{bias, out, OC, 0, OC, OC, true, true}}, N, stream);
    beta = 1.0f;
  }
  gemm_bf16(CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, weight, C, inp, C, beta, out, OC, stream, "matmul_forward");
}

void matmul_backward_input_bf16(void* dinp, const void* dout, const void* weight, int64_t N, int64_t C, int64_t OC,
                                void* stream) {
  gemm_bf16(CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, weight, C, dout, OC, 1.0f, dinp, C, stream, "matmul_backward_input");
}

void matmul_backward_weight_bf16(void* dweight, const void* dout, const void* inp, int64_t N, int64_t C, int64_t OC,
                                 void* stream) {
  gemm_bf16(CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, inp, C, dout, OC, 1.0f, dweight, C, stream, "matmul_backward_weight");
}

// ============================================================================================
// GELU, tanh approximation. Four elements a thread.

namespace {

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCube = 0.044715f;

__device__ inline float gelu(float x) {
  const float u = kGeluScale * (x + kGeluCube * x * x * x);
  return 0.5f * x * (1.0f + tanhf(u));
}

// d gelu / dx = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
__device__ inline float gelu_grad(float x) {
  const float x2 = x * x;
  const float th = tanhf(kGeluScale * (x + kGeluCube * x2 * x));
  const float sech2 = 1.0f - th * th;
  const float du = kGeluScale * (1.0f + 3.0f * kGeluCube * x2);
  return 0.5f * (1.0f + th) + 0.5f * x * sech2 * du;
}

// Thread i handles floats [4i, 4i + 4): as one float4 load and store per tensor when `vec` (every
// pointer 16-byte aligned) and the four are whole, one float at a time otherwise. A quarter of
// the memory instructions of one float a thread: the GELUs of the MLP ran at 1.7x the sim's
// roofline that way on the H200.
__global__ void gelu_forward_kernel(float* out, const float* inp, int64_t n, bool vec) {
  const int64_t i = 4 * (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x);
  if (vec && i + 4 <= n) {
    const float4 x = *reinterpret_cast<const float4*>(inp + i);
    *reinterpret_cast<float4*>(out + i) = float4{gelu(x.x), gelu(x.y), gelu(x.z), gelu(x.w)};
    return;
  }
  for (int64_t j = i; j < min(n, i + 4); ++j) out[j] = gelu(inp[j]);
}

// dinp += gelu'(inp) dout
__global__ void gelu_backward_kernel(float* dinp, const float* inp, const float* dout, int64_t n, bool vec) {
  const int64_t i = 4 * (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x);
  if (vec && i + 4 <= n) {
    const float4 x = *reinterpret_cast<const float4*>(inp + i), dy = *reinterpret_cast<const float4*>(dout + i);
    float4 d = *reinterpret_cast<float4*>(dinp + i);
    d.x += gelu_grad(x.x) * dy.x;
    d.y += gelu_grad(x.y) * dy.y;
    d.z += gelu_grad(x.z) * dy.z;
    d.w += gelu_grad(x.w) * dy.w;
    *reinterpret_cast<float4*>(dinp + i) = d;
    return;
  }
  for (int64_t j = i; j < min(n, i + 4); ++j) dinp[j] += gelu_grad(inp[j]) * dout[j];
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

void gelu_forward(float* out, const float* inp, int64_t n, void* stream) {
  if (n == 0) return;
  gelu_forward_kernel<<<blocks_for((n + 3) / 4, kThreads), kThreads, 0, as_stream(stream)>>>(
      out, inp, n, aligned16(out) && aligned16(inp));
  CUDA_CHECK(cudaGetLastError());
}

void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n, void* stream) {
  if (n == 0) return;
  gelu_backward_kernel<<<blocks_for((n + 3) / 4, kThreads), kThreads, 0, as_stream(stream)>>>(
      dinp, inp, dout, n, aligned16(dinp) && aligned16(inp) && aligned16(dout));
  CUDA_CHECK(cudaGetLastError());
}

// ============================================================================================
// Softmax cross-entropy. One block per row of logits: its threads stride over the V logits
// (thread t reads t, t + blockDim, ...: coalesced) and reduce the row's max and sum of
// exponentials in ONE pass, as an online softmax does (Milakov and Gimelshein, "Online
// normalizer calculation for softmax", 2018): each thread keeps a running max m and the sum s
// of exp(x - m), rescaling s when m grows; pairs from threads then combine exactly. A row of
// GPT-2's 50,257 logits is 201 KB, and the blocks in flight hold far more rows than L2 does,
// so a second pass over the row (a max, then a sum) read it from HBM twice: the forward ran
// 3.5x the sim's roofline on the H200, the backward 3.4x. With one float a thread and a branch
// on every logit, the one-pass version still ran at 2.0x and 2.5x (2026-11-27): too few loads in
// flight. So the row is read as float4s: the floats before its first 16-byte boundary, then
// whole float4s (four logits, at most one rescale, four exps), then the rest.

namespace {

constexpr int kRowThreads = 512;  // threads per block of the one-block-per-row kernels

struct SoftmaxStats {
  float m;  // the largest logit seen
  float s;  // sum of exp(x - m) over the logits seen
};

__device__ SoftmaxStats combine(SoftmaxStats a, SoftmaxStats b) {
  const float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return {m, 0.0f};  // neither saw a logit: no e^(-inf - -inf)
  return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}

// One logit into a running (max, sum): a new max rescales the sum instead of adding a term.
__device__ inline void add_logit(SoftmaxStats& t, float x) {
  if (x > t.m) {
    t.s = t.s * expf(t.m - x) + 1.0f;
    t.m = x;
  } else {
    t.s += expf(x - t.m);
  }
}

// Four logits: at most one rescale, then four exps.
__device__ inline void add_logits(SoftmaxStats& t, float4 x) {
  const float m4 = fmaxf(fmaxf(x.x, x.y), fmaxf(x.z, x.w));
  if (m4 > t.m) {
    t.s *= expf(t.m - m4);
    t.m = m4;
  }
  t.s += expf(x.x - t.m) + expf(x.y - t.m) + expf(x.z - t.m) + expf(x.w - t.m);
}

// A row of floats as [0, head) single floats, `body` float4s from x + head (16-byte aligned),
// and [head + 4 body, V) single floats.
struct RowParts {
  int64_t head, body;
};
__device__ inline RowParts row_parts(const float* x, int64_t V) {
  const int64_t misaligned = static_cast<int64_t>(reinterpret_cast<uintptr_t>(x) / sizeof(float) % 4);
  const int64_t head = min(V, (4 - misaligned) % 4);
  return {head, (V - head) / 4};
}

// The row's (max, sum of exp(x - max)), every thread of the block gets it.
__device__ SoftmaxStats row_softmax_stats(const float* x, int64_t V) {
  SoftmaxStats t{-INFINITY, 0.0f};
  const RowParts part = row_parts(x, V);
  const float4* body = reinterpret_cast<const float4*>(x + part.head);
#pragma unroll 4
  for (int64_t i = threadIdx.x; i < part.body; i += blockDim.x) add_logits(t, body[i]);
  for (int64_t i = threadIdx.x; i < part.head; i += blockDim.x) add_logit(t, x[i]);
  for (int64_t i = part.head + 4 * part.body + threadIdx.x; i < V; i += blockDim.x) add_logit(t, x[i]);
  for (int offset = 16; offset > 0; offset /= 2)
    t = combine(t, {__shfl_xor_sync(0xffffffff, t.m, offset), __shfl_xor_sync(0xffffffff, t.s, offset)});
  __shared__ SoftmaxStats partial[32];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, warps = blockDim.x / kWarp;
  if (lane == 0) partial[warp] = t;
  __syncthreads();
  t = lane < warps ? partial[lane] : SoftmaxStats{-INFINITY, 0.0f};
  for (int offset = 16; offset > 0; offset /= 2)
    t = combine(t, {__shfl_xor_sync(0xffffffff, t.m, offset), __shfl_xor_sync(0xffffffff, t.s, offset)});
  return t;
}

// f(x[i]) for each logit of the row this thread reads, one at a time, in row_parts' three parts
// (float4 loads in the body): the passes of the vocabulary-parallel statistics.
template <class F>
__device__ inline void for_row_logits(const float* x, int64_t V, F f) {
  const RowParts part = row_parts(x, V);
  const float4* body = reinterpret_cast<const float4*>(x + part.head);
#pragma unroll 4
  for (int64_t i = threadIdx.x; i < part.body; i += blockDim.x) {
    const float4 xi = body[i];
    f(xi.x);
    f(xi.y);
    f(xi.z);
    f(xi.w);
  }
  for (int64_t i = threadIdx.x; i < part.head; i += blockDim.x) f(x[i]);
  for (int64_t i = part.head + 4 * part.body + threadIdx.x; i < V; i += blockDim.x) f(x[i]);
}

// The threads' values combined by `op` (a max, a sum) as row_softmax_stats combines its pairs:
// within each warp, then the warps' results; every thread of the block gets it. `identity` stands
// in for the warps the block does not have.
template <class Op>
__device__ float block_reduce(float v, float identity, Op op) {
  for (int offset = 16; offset > 0; offset /= 2) v = op(v, __shfl_xor_sync(0xffffffff, v, offset));
  __shared__ float partial[32];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, warps = blockDim.x / kWarp;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < warps ? partial[lane] : identity;
  for (int offset = 16; offset > 0; offset /= 2) v = op(v, __shfl_xor_sync(0xffffffff, v, offset));
  return v;
}

// losses[n] = log(sum_j exp(x_j - max)) + max - x[target]
__global__ void crossentropy_forward_kernel(float* losses, const float* logits, const int32_t* targets, int64_t V) {
  const int64_t n = blockIdx.x;
  const float* x = logits + n * V;
  const int32_t target = targets[n];
  check_index("crossentropy_forward", "target", target, "row", n, V, threadIdx.x == 0);
  const SoftmaxStats st = row_softmax_stats(x, V);
  if (threadIdx.x == 0) losses[n] = logf(st.s) + st.m - x[target];
}

// One row of dx = exp(x - m) scale - onehot(target) dloss, written, as float4s where dx's row is
// aligned as x's row is (always, for tensors of the device's allocator). Each element is written
// by the one thread that reads it, the target's too; a target outside [0, V) is in no element.
__device__ inline void write_softmax_grad(float* dx, const float* x, int64_t V, float m, float scale, int64_t target,
                                          float dloss) {
  const auto grad = [&](float xi, int64_t i) { return expf(xi - m) * scale - (i == target ? dloss : 0.0f); };
  RowParts part{V, 0};  // all single floats, unless the two rows are aligned alike
  if ((reinterpret_cast<uintptr_t>(dx) - reinterpret_cast<uintptr_t>(x)) % sizeof(float4) == 0) part = row_parts(x, V);
  const float4* body = reinterpret_cast<const float4*>(x + part.head);
  float4* dbody = reinterpret_cast<float4*>(dx + part.head);
#pragma unroll 4
  for (int64_t i = threadIdx.x; i < part.body; i += blockDim.x) {
    const float4 xi = body[i];
    const int64_t e = part.head + 4 * i;
    dbody[i] = float4{grad(xi.x, e), grad(xi.y, e + 1), grad(xi.z, e + 2), grad(xi.w, e + 3)};
  }
  for (int64_t i = threadIdx.x; i < part.head; i += blockDim.x) dx[i] = grad(x[i], i);
  for (int64_t i = part.head + 4 * part.body + threadIdx.x; i < V; i += blockDim.x) dx[i] = grad(x[i], i);
}

// dlogits = softmax(x) dloss - onehot(target) dloss, written: one pass for the row's stats,
// one to read the logits again and write (write_softmax_grad). The second read comes from HBM
// again: a grid of one block per SM, each walking rows (132 rows, 26 MB in flight, which the
// H200's L2 holds), was slower on the H200 (1.38 ms against 1.24 for GPT-2 small's logits).
__global__ void crossentropy_backward_kernel(float* dlogits, const float* logits, const int32_t* targets, int64_t V,
                                             float dloss) {
  const int64_t n = blockIdx.x;
  const float* x = logits + n * V;
  const int32_t target = targets[n];
  check_index("crossentropy_backward", "target", target, "row", n, V, threadIdx.x == 0);
  const SoftmaxStats st = row_softmax_stats(x, V);
  write_softmax_grad(dlogits + n * V, x, V, st.m, dloss / st.s, target, dloss);
}

unsigned int row_blocks(int64_t N, const char* op) {
  if (N > INT_MAX) throw std::invalid_argument(std::string(op) + ": " + std::to_string(N) + " rows are too many");
  return static_cast<unsigned int>(N);
}

}  // namespace

void crossentropy_forward(float* losses, const float* logits, const int32_t* targets, int64_t N, int64_t V,
                          void* stream) {
  if (N == 0) return;
  crossentropy_forward_kernel<<<row_blocks(N, "crossentropy_forward"), kRowThreads, 0, as_stream(stream)>>>(
      losses, logits, targets, V);
  CUDA_CHECK(cudaGetLastError());
}

void crossentropy_backward(float* dlogits, const float* logits, const int32_t* targets, int64_t N, int64_t V,
                           float dloss, void* stream) {
  if (N == 0) return;
  crossentropy_backward_kernel<<<row_blocks(N, "crossentropy_backward"), kRowThreads, 0, as_stream(stream)>>>(
      dlogits, logits, targets, V, dloss);
  CUDA_CHECK(cudaGetLastError());
}

// The same over a slice of the vocabulary (tensor parallelism): the row's max must be reduced
// across ranks before any exp is summed, so the one-pass statistics above cannot serve. Each
// statistic is a pass over the slice with one block per row (for_row_logits, block_reduce);
// the sums, taken around the whole row's max, need no rescaling. The backward is
// crossentropy_backward's second pass on the reduced statistics. A target is not checked: the
// slice holds no other rank's target, and none is an error here.

namespace {

// row_max[n] = max_j x_j
__global__ void crossentropy_row_max_kernel(float* row_max, const float* logits, int64_t V) {
  const int64_t n = blockIdx.x;
  float m = -INFINITY;
  for_row_logits(logits + n * V, V, [&](float xi) { m = fmaxf(m, xi); });
  m = block_reduce(m, -INFINITY, [](float a, float b) { return fmaxf(a, b); });
  if (threadIdx.x == 0) row_max[n] = m;
}

// sum_exp[n] = sum_j exp(x_j - row_max[n]); target_logit[n] = x[target - vocab_begin] where the
// slice holds the target, else 0
__global__ void crossentropy_row_sums_kernel(float* sum_exp, float* target_logit, const float* logits,
                                             const float* row_max, const int32_t* targets, int64_t V,
                                             int64_t vocab_begin) {
  const int64_t n = blockIdx.x;
  const float* x = logits + n * V;
  const float m = row_max[n];
  float s = 0.0f;
  for_row_logits(x, V, [&](float xi) { s += expf(xi - m); });
  s = block_reduce(s, 0.0f, [](float a, float b) { return a + b; });
  if (threadIdx.x != 0) return;
  sum_exp[n] = s;
  const int64_t j = targets[n] - vocab_begin;
  target_logit[n] = j >= 0 && j < V ? x[j] : 0.0f;
}

// One thread per row: losses[n] = log(sum_exp[n]) + row_max[n] - target_logit[n]
__global__ void crossentropy_losses_kernel(float* losses, const float* row_max, const float* sum_exp,
                                           const float* target_logit, int64_t N) {
  const int64_t n = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (n < N) losses[n] = logf(sum_exp[n]) + row_max[n] - target_logit[n];
}

// dlogits = exp(x - row_max) dloss / sum_exp - onehot(target - vocab_begin) dloss, written
__global__ void crossentropy_backward_slice_kernel(float* dlogits, const float* logits, const float* row_max,
                                                   const float* sum_exp, const int32_t* targets, int64_t V,
                                                   int64_t vocab_begin, float dloss) {
  const int64_t n = blockIdx.x;
  write_softmax_grad(dlogits + n * V, logits + n * V, V, row_max[n], dloss / sum_exp[n], targets[n] - vocab_begin,
                     dloss);
}

}  // namespace

void crossentropy_row_max(float* row_max, const float* logits, int64_t N, int64_t V, void* stream) {
  if (N == 0) return;
  crossentropy_row_max_kernel<<<row_blocks(N, "crossentropy_row_max"), kRowThreads, 0, as_stream(stream)>>>(
      row_max, logits, V);
  CUDA_CHECK(cudaGetLastError());
}

void crossentropy_row_sums(float* sum_exp, float* target_logit, const float* logits, const float* row_max,
                           const int32_t* targets, int64_t N, int64_t V, int64_t vocab_begin, void* stream) {
  if (N == 0) return;
  crossentropy_row_sums_kernel<<<row_blocks(N, "crossentropy_row_sums"), kRowThreads, 0, as_stream(stream)>>>(
      sum_exp, target_logit, logits, row_max, targets, V, vocab_begin);
  CUDA_CHECK(cudaGetLastError());
}

void crossentropy_losses(float* losses, const float* row_max, const float* sum_exp, const float* target_logit,
                         int64_t N, void* stream) {
  if (N == 0) return;
  crossentropy_losses_kernel<<<blocks_for(N, kThreads), kThreads, 0, as_stream(stream)>>>(losses, row_max, sum_exp,
                                                                                          target_logit, N);
  CUDA_CHECK(cudaGetLastError());
}

void crossentropy_backward_slice(float* dlogits, const float* logits, const float* row_max, const float* sum_exp,
                                 const int32_t* targets, int64_t N, int64_t V, int64_t vocab_begin, float dloss,
                                 void* stream) {
  if (N == 0) return;
  crossentropy_backward_slice_kernel<<<row_blocks(N, "crossentropy_backward_slice"), kRowThreads, 0,
                                       as_stream(stream)>>>(dlogits, logits, row_max, sum_exp, targets, V,
                                                            vocab_begin, dloss);
  CUDA_CHECK(cudaGetLastError());
}

// ============================================================================================
// AdamW. One thread per parameter: it updates m, v and the parameter in PyTorch's order
// (decoupled decay, then the bias-corrected Adam step).

namespace {

__global__ void adamw_kernel(float* params, const float* grads, float* m, float* v, int64_t n, float lr, float beta1,
                             float beta2, float eps, float decay, float b1_corr, float b2_corr) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float g = grads[i];
  const float mi = beta1 * m[i] + (1.0f - beta1) * g;
  const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
  m[i] = mi;
  v[i] = vi;
  const float mhat = mi / b1_corr, vhat = vi / b2_corr;
  params[i] = params[i] * decay - lr * mhat / (sqrtf(vhat) + eps);
}

}  // namespace

void adamw(float* params, const float* grads, float* m, float* v, int64_t n, int64_t t, float lr, float beta1,
           float beta2, float eps, float weight_decay, void* stream) {
  if (n == 0) return;
  // The scalars exactly as ops.cpp forms them.
  const float decay = 1.0f - lr * weight_decay;
  const float b1_corr = static_cast<float>(1.0 - std::pow(static_cast<double>(beta1), static_cast<double>(t)));
  const float b2_corr = static_cast<float>(1.0 - std::pow(static_cast<double>(beta2), static_cast<double>(t)));
  adamw_kernel<<<blocks_for(n, kThreads), kThreads, 0, as_stream(stream)>>>(params, grads, m, v, n, lr, beta1, beta2,
                                                                           eps, decay, b1_corr, b2_corr);
  CUDA_CHECK(cudaGetLastError());
}

// ============================================================================================
// Attention with log-sum-exp (attention.h): FlashAttention-2's forward and backward, whose
// kernels live in attention_kernels.cuh (it says how threads and tiles map to the data). Here:
// the launches, and the checks of what the kernels cannot do.

namespace {

// The sizes of one attention call as the kernels take them; throws for what they cannot do.
struct AttnLaunch {
  int Tq, Tk, hs;
  float scale;
};

AttnLaunch attention_launch(const char* op, int64_t B, int64_t NH, int64_t Tq, int64_t Tk, int64_t hs) {
  if (hs < 1 || hs > flash::kMaxHs)
    throw std::invalid_argument(std::string(op) + ": head size " + std::to_string(hs) + " outside [1, " +
                                std::to_string(flash::kMaxHs) + "] (the CUDA kernel's register budget)");
  if (Tq > INT_MAX || Tk > INT_MAX) throw std::invalid_argument(std::string(op) + ": sequence too long");
  const int64_t blocks = B * NH * ((std::max(Tq, Tk) + flash::kTile - 1) / flash::kTile);
  if (blocks > INT_MAX) throw std::invalid_argument(std::string(op) + ": too many blocks");
  // The scale exactly as attention.cpp forms it.
  return {static_cast<int>(Tq), static_cast<int>(Tk), static_cast<int>(hs), 1.0f / std::sqrt(static_cast<float>(hs))};
}

template <int kCh>
void launch_attention_forward(float* out, float* lse, const float* q, const float* k, const float* v, int64_t heads,
                              const AttnLaunch& a, int64_t ldq, int64_t ldk, bool causal, cudaStream_t stream) {
  const size_t bytes = sizeof(float) * static_cast<size_t>(flash::forward_shared_floats(a.hs));
  allow_shared(flash::flash_forward_kernel<kCh>, "attention_forward", "heads of size " + std::to_string(a.hs), bytes);
  const auto blocks = static_cast<unsigned int>(heads * flash::blocks_of(a.Tq));
  flash::flash_forward_kernel<kCh><<<blocks, flash::kThreads, bytes, stream>>>(
      out, lse, q, k, v, a.Tq, a.Tk, ldq, ldk, a.hs, causal, a.scale, static_cast<int>(heads));
  CUDA_CHECK(cudaGetLastError());
}

template <int kCh>
void launch_attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                               const float* v, const float* out, const float* lse, int64_t heads, const AttnLaunch& a,
                               int64_t ldq, int64_t ldk, bool causal, cudaStream_t stream) {
  const size_t bytes = sizeof(float) * static_cast<size_t>(flash::backward_shared_floats(a.hs));
  allow_shared(flash::flash_backward_kernel<kCh>, "attention_backward", "heads of size " + std::to_string(a.hs), bytes);
  const auto blocks = static_cast<unsigned int>(heads * flash::blocks_of(a.Tk));
  flash::flash_backward_kernel<kCh><<<blocks, flash::kThreads, bytes, stream>>>(
      dq, dk, dv, dout, q, k, v, out, lse, a.Tq, a.Tk, ldq, ldk, a.hs, causal, a.scale, static_cast<int>(heads));
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace

// The kernels index each head from the first row of its block: the pointers are offset once here.
void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v, int64_t B, int64_t NH,
                       AttnRows q_rows, AttnRows kv_rows, int64_t hs, bool causal, void* stream) {
  if (B * NH == 0 || q_rows.count == 0) return;
  const AttnLaunch a = attention_launch("attention_forward", B, NH, q_rows.count, kv_rows.count, hs);
  const int64_t qf = q_rows.first * hs, kf = kv_rows.first * hs;
  // k and v may be null when there are no keys (Tk == 0): they are then never read.
  const float* kb = k ? k + kf : nullptr;
  const float* vb = v ? v + kf : nullptr;
  (flash::channels_per_thread(a.hs) == 4 ? launch_attention_forward<4> : launch_attention_forward<8>)(
      out + qf, lse + q_rows.first, q + qf, kb, vb, B * NH, a, q_rows.ld, kv_rows.ld, causal, as_stream(stream));
}

void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                        const float* v, const float* out, const float* lse, int64_t B, int64_t NH, AttnRows q_rows,
                        AttnRows kv_rows, int64_t hs, bool causal, void* stream) {
  if (B * NH == 0 || q_rows.count == 0 || kv_rows.count == 0) return;  // no (query, key) pair: no gradient
  const AttnLaunch a = attention_launch("attention_backward", B, NH, q_rows.count, kv_rows.count, hs);
  const int64_t qf = q_rows.first * hs, kf = kv_rows.first * hs;
  (flash::channels_per_thread(a.hs) == 4 ? launch_attention_backward<4> : launch_attention_backward<8>)(
      dq + qf, dk + kf, dv + kf, dout + qf, q + qf, k + kf, v + kf, out + qf, lse + q_rows.first, B * NH, a,
      q_rows.ld, kv_rows.ld, causal, as_stream(stream));
}

// ============================================================================================
// Attention merge: one warp per row of the block (warp w of block b: the block's row
// n = b * kRowWarps + w, in head n / count), lanes over its hs channels. Every lane reads both
// lses before lane 0 writes the new one (__syncwarp).

namespace {

__global__ void attention_merge_kernel(float* out, float* lse, const float* out_b, const float* lse_b, int64_t rows,
                                       int64_t count, int64_t ld, int hs) {
  const int lane = threadIdx.x % kWarp;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kRowWarps + threadIdx.x / kWarp;
  if (n >= rows) return;
  const int64_t r = (n / count) * ld + n % count;  // its place in [B*NH, ld], from the block's first row
  const float la = lse[r], lb = lse_b[r];
  __syncwarp();
  if (lb == -INFINITY) return;  // the partial result saw no keys: nothing to add
  float* oa = out + r * hs;
  const float* ob = out_b + r * hs;
  if (la == -INFINITY) {  // ours saw none: take theirs (our out is never read, it may be garbage)
    for (int c = lane; c < hs; c += kWarp) oa[c] = ob[c];
    if (lane == 0) lse[r] = lb;
    return;
  }
  const float m = fmaxf(la, lb), mn = fminf(la, lb);
  const float l = m + log1pf(expf(mn - m));
  const float wa = expf(la - l), wb = expf(lb - l);
  for (int c = lane; c < hs; c += kWarp) oa[c] = wa * oa[c] + wb * ob[c];
  if (lane == 0) lse[r] = l;
}

}  // namespace

void attention_merge(float* out, float* lse, const float* out_b, const float* lse_b, int64_t heads, AttnRows rows,
                     int64_t hs, void* stream) {
  const int64_t n = heads * rows.count;
  if (n == 0) return;
  const int64_t f = rows.first;
  attention_merge_kernel<<<blocks_for(n, kRowWarps), kRowWarps * kWarp, 0, as_stream(stream)>>>(
      out + f * hs, lse + f, out_b + f * hs, lse_b + f, n, rows.count, rows.ld, row_length(hs, "attention_merge"));
  CUDA_CHECK(cudaGetLastError());
}

// ============================================================================================
// Layouts around attention: pure permutations (the backward ones add). A block per token row
// (b, t) of the [B, T, C] side (and, for qkv, per part in blockIdx.y: q, k, v); its threads walk
// the row's C channels, channel c being channel c % hs of head c / hs on the [B, NH, T, hs]
// side. Both sides move runs of consecutive floats: the row's C, and hs of each head row. The
// first version, one thread per element, took each index apart with 64-bit divisions, and that
// arithmetic, not memory, held it to a quarter of HBM's bandwidth on an H200.

namespace {

// The [B, NH, T, hs] index of channel c of row (b, t).
__device__ inline int64_t head_index(int b, int t, int c, int T, int NH, int hs) {
  const int h = c / hs;
  return (static_cast<int64_t>(b * NH + h) * T + t) * hs + (c - h * hs);
}

__global__ void qkv_split_kernel(float* q, float* k, float* v, const float* qkv, int T, int NH, int hs) {
  const int row = blockIdx.x, b = row / T, t = row - b * T, C = NH * hs;
  float* dst = blockIdx.y == 0 ? q : blockIdx.y == 1 ? k : v;
  const float* src = qkv + (static_cast<int64_t>(row) * 3 + blockIdx.y) * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) dst[head_index(b, t, c, T, NH, hs)] = src[c];
}

__global__ void qkv_split_backward_kernel(float* dqkv, const float* dq, const float* dk, const float* dv, int T,
                                          int NH, int hs) {
  const int row = blockIdx.x, b = row / T, t = row - b * T, C = NH * hs;
  const float* src = blockIdx.y == 0 ? dq : blockIdx.y == 1 ? dk : dv;
  float* dst = dqkv + (static_cast<int64_t>(row) * 3 + blockIdx.y) * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) dst[c] += src[head_index(b, t, c, T, NH, hs)];
}

// out is [B, T, NH hs], o is [B, NH, T, hs].
__global__ void heads_merge_kernel(float* out, const float* o, int T, int NH, int hs) {
  const int row = blockIdx.x, b = row / T, t = row - b * T, C = NH * hs;
  float* dst = out + static_cast<int64_t>(row) * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) dst[c] = o[head_index(b, t, c, T, NH, hs)];
}

__global__ void heads_merge_backward_kernel(float* d_o, const float* dout, int T, int NH, int hs) {
  const int row = blockIdx.x, b = row / T, t = row - b * T, C = NH * hs;
  const float* src = dout + static_cast<int64_t>(row) * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) d_o[head_index(b, t, c, T, NH, hs)] += src[c];
}

// The grid of a layout kernel: B T rows by `parts`, threads for up to C channels. Sizes past
// 32-bit indices are refused, naming the op.
struct LayoutLaunch {
  dim3 grid;
  unsigned int threads;
  int T, NH, hs;
};

LayoutLaunch layout_launch(const char* op, int64_t B, int64_t T, int64_t NH, int64_t hs, unsigned int parts) {
  if (B * T > INT_MAX || B * NH > INT_MAX || NH * hs > INT_MAX)
    throw std::invalid_argument(std::string(op) + ": B " + std::to_string(B) + ", T " + std::to_string(T) + ", NH " +
                                std::to_string(NH) + ", hs " + std::to_string(hs) +
                                " need indices past 32 bits, which the layout kernels do not take");
  const int64_t C = NH * hs;
  return {dim3(static_cast<unsigned int>(B * T), parts), static_cast<unsigned int>(std::min<int64_t>(C, kThreads)),
          static_cast<int>(T), static_cast<int>(NH), static_cast<int>(hs)};
}

}  // namespace

void qkv_split(float* q, float* k, float* v, const float* qkv, int64_t B, int64_t T, int64_t NH, int64_t hs,
               void* stream) {
  if (B * T * NH * hs == 0) return;
  const LayoutLaunch l = layout_launch("qkv_split", B, T, NH, hs, 3);
  qkv_split_kernel<<<l.grid, l.threads, 0, as_stream(stream)>>>(q, k, v, qkv, l.T, l.NH, l.hs);
  CUDA_CHECK(cudaGetLastError());
}

void qkv_split_backward(float* dqkv, const float* dq, const float* dk, const float* dv, int64_t B, int64_t T,
                        int64_t NH, int64_t hs, void* stream) {
  if (B * T * NH * hs == 0) return;
  const LayoutLaunch l = layout_launch("qkv_split_backward", B, T, NH, hs, 3);
  qkv_split_backward_kernel<<<l.grid, l.threads, 0, as_stream(stream)>>>(dqkv, dq, dk, dv, l.T, l.NH, l.hs);
  CUDA_CHECK(cudaGetLastError());
}

void heads_merge(float* out, const float* o, int64_t B, int64_t NH, int64_t T, int64_t hs, void* stream) {
  if (B * T * NH * hs == 0) return;
  const LayoutLaunch l = layout_launch("heads_merge", B, T, NH, hs, 1);
  heads_merge_kernel<<<l.grid, l.threads, 0, as_stream(stream)>>>(out, o, l.T, l.NH, l.hs);
  CUDA_CHECK(cudaGetLastError());
}

void heads_merge_backward(float* d_o, const float* dout, int64_t B, int64_t NH, int64_t T, int64_t hs, void* stream) {
  if (B * T * NH * hs == 0) return;
  const LayoutLaunch l = layout_launch("heads_merge_backward", B, T, NH, hs, 1);
  heads_merge_backward_kernel<<<l.grid, l.threads, 0, as_stream(stream)>>>(d_o, dout, l.T, l.NH, l.hs);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace shardlab::cuda
