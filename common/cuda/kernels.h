// kernels.h: the CUDA side of every device op (ops.h, attention.h), as plain functions.
//
// Each function takes raw device pointers and sizes, launches its kernel(s) on `stream` (a
// cudaStream_t passed as void*, so this header compiles with any C++ compiler and no CUDA
// headers) and returns at once, like a kernel launch. The semantics are those of the CPU bodies
// in ops.cpp and attention.cpp, conventions included: backward functions ACCUMULATE (+=) into
// every gradient, crossentropy_backward writes. Errors (a bad launch, a cuBLAS failure) throw
// std::runtime_error naming the call, the file, the line and the library's error string
// (cuda/check.h). Defined in kernels.cu.
//
// The ops wire these in through SHARDLAB_ON_CUDA (below), which also keeps builds without CUDA
// compiling and linking: there the CUDA bodies are not compiled at all.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

// SHARDLAB_ON_CUDA(statements): the CudaBody argument of Device::launch.
//   With CUDA (SHARDLAB_WITH_CUDA defined): a lambda [=](void* stream) { statements; } that the
//   CUDA device calls with its stream; the statements name that stream `stream`.
//   Without CUDA: an empty CudaBody (nullptr), and the statements are dropped unseen, so they may
//   call functions that a build without CUDA does not have.
// Usage: dev.launch(s, kernel, [=] { cpu math; }, SHARDLAB_ON_CUDA(cuda::fill(t.f32(), n, value, stream)));
#ifdef SHARDLAB_WITH_CUDA
#define SHARDLAB_ON_CUDA(...) [=](void* stream) { __VA_ARGS__; }
#else
#define SHARDLAB_ON_CUDA(...) nullptr
#endif

namespace shardlab::cuda {

// ---- elementwise and memory (n elements)
void fill(float* t, int64_t n, float value, void* stream);                       // t = value
void copy(void* dst, const void* src, size_t bytes, void* stream);               // dst = src
void add_(float* dst, const float* src, int64_t n, void* stream);                // dst += src
// ops::copy_blocks: each block's `rows` rows of `width` elements, zeros past src_numel; source
// and destination each float or bfloat16 (the flags), converted on the way (round to nearest
// even into bfloat16).
struct CopyBlock {
  const void* src;
  void* dst;
  int64_t src_numel, src_pitch, dst_pitch, width;
  bool src_bf16 = false, dst_bf16 = false;
};
void copy_blocks(const std::vector<CopyBlock>& blocks, int64_t rows, void* stream);
// Float32 scratch of n elements for one op's math on bf16 tensors (model/f32_math.h), allocated
// and freed in the stream's order (cudaMallocAsync's pool), so no device sync either way.
float* scratch_f32(int64_t n, void* stream);
void free_scratch(float* p, void* stream);
void scale_(float* t, int64_t n, float factor, void* stream);                    // t *= factor
void divide_(float* t, int64_t n, float divisor, void* stream);                  // t /= divisor
void residual_forward(float* out, const float* a, const float* b, int64_t n, void* stream);  // out = a + b

// ---- embeddings: out[B,T,C] = wte[tokens[b,t]] + wpe[p(t)], p(t) = positions[t] (or t when
// positions is null); backward accumulates into dwte, dwpe. wpe has P rows. A token id outside
// [0, V) or a position outside [0, P) stops the kernel with a device-side trap (see kernels.cu).
// vocab_begin >= 0: wte holds rows [vocab_begin, vocab_begin + V) of the vocabulary (tensor
// parallelism's slice); an id outside them adds nothing and gets no gradient, and is no error.
// wpe (dwpe) null: no position is added (accumulated).
void embedding_forward(float* out, const int32_t* tokens, const int32_t* positions, const float* wte, const float* wpe,
                       int64_t B, int64_t T, int64_t C, int64_t V, int64_t P, int64_t vocab_begin, void* stream);
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, const int32_t* positions,
                        int64_t B, int64_t T, int64_t C, int64_t V, int64_t P, int64_t vocab_begin, void* stream);

// ---- a bias on its own: out[N,OC] += bias[OC] (its gradient: matmul_backward_weight with no weight)
void add_bias(float* out, const float* bias, int64_t N, int64_t OC, void* stream);

// ---- layernorm over rows [N, C], eps 1e-5, saving mean and rstd [N]
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int64_t N, int64_t C, void* stream);
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C,
                        void* stream);

// ---- linear layer through cuBLAS SGEMM (fp32, no TF32): out[N,OC] = inp[N,C] @ weight[OC,C]^T + bias
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias /*nullable*/, int64_t N,
                    int64_t C, int64_t OC, void* stream);
// dinp[N,C] += dout[N,OC] @ weight[OC,C]
void matmul_backward_input(float* dinp, const float* dout, const float* weight, int64_t N, int64_t C, int64_t OC,
                           void* stream);
// dweight[OC,C] += dout^T @ inp; dbias[OC] += column sums of dout (when dbias is not null)
void matmul_backward_weight(float* dweight, float* dbias /*nullable*/, const float* dout, const float* inp, int64_t N,
                            int64_t C, int64_t OC, void* stream);
// Under mixed precision, the same products on bf16 operands (uint16_t bits), through
// cublasGemmEx with CUBLAS_COMPUTE_32F: summed in float32, each output rounded to bf16 once, as
// model/f32_math.h's rule says and the CPU does (in another summation order). The bias's
// gradient, a column sum, goes through the float32 kernel above on float32 copies.
void matmul_forward_bf16(void* out, const void* inp, const void* weight, const void* bias /*nullable*/, int64_t N,
                         int64_t C, int64_t OC, void* stream);
void matmul_backward_input_bf16(void* dinp, const void* dout, const void* weight, int64_t N, int64_t C, int64_t OC,
                                void* stream);
void matmul_backward_weight_bf16(void* dweight, const void* dout, const void* inp, int64_t N, int64_t C, int64_t OC,
                                 void* stream);

// ---- GELU (tanh approximation); backward accumulates
void gelu_forward(float* out, const float* inp, int64_t n, void* stream);
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n, void* stream);

// ---- softmax cross-entropy over rows [N, V]; a target outside [0, V) traps like a bad token id
void crossentropy_forward(float* losses, const float* logits, const int32_t* targets, int64_t N, int64_t V,
                          void* stream);
void crossentropy_backward(float* dlogits, const float* logits, const int32_t* targets, int64_t N, int64_t V,
                           float dloss, void* stream);  // written, not accumulated
// The same over a vocabulary cut over ranks: logits [N, V] are columns [vocab_begin, vocab_begin
// + V) of each row's logits; the row's statistics are reduced across ranks between the calls.
//   row_max:  row_max[n] = max_j logits[n, j]
//   row_sums: sum_exp[n] = sum_j exp(logits[n, j] - row_max[n]); target_logit[n] = logits[n,
//             targets[n] - vocab_begin] where the slice holds the target, else 0
//   losses:   losses[n] = log(sum_exp[n]) + row_max[n] - target_logit[n]
//   backward: dlogits = (exp(logits - row_max) / sum_exp - onehot(targets - vocab_begin)) dloss, written
// A target outside [0, vocab size) is not an error here: the slice holds no other rank's target.
void crossentropy_row_max(float* row_max, const float* logits, int64_t N, int64_t V, void* stream);
void crossentropy_row_sums(float* sum_exp, float* target_logit, const float* logits, const float* row_max,
                           const int32_t* targets, int64_t N, int64_t V, int64_t vocab_begin, void* stream);
void crossentropy_losses(float* losses, const float* row_max, const float* sum_exp, const float* target_logit,
                         int64_t N, void* stream);
void crossentropy_backward_slice(float* dlogits, const float* logits, const float* row_max, const float* sum_exp,
                                 const int32_t* targets, int64_t N, int64_t V, int64_t vocab_begin, float dloss,
                                 void* stream);

// ---- AdamW (torch.optim.AdamW), step t >= 1
void adamw(float* params, const float* grads, float* m, float* v, int64_t n, int64_t t, float lr, float beta1,
           float beta2, float eps, float weight_decay, void* stream);

// ---- attention with log-sum-exp (attention.h): q, out [B,NH,*,hs]; k, v [B,NH,*,hs]; lse [B,NH,*].
// Each call works on a block of rows of every head: `q_rows` of q, out, lse (dq, dout) and
// `kv_rows` of k, v (dk, dv). causal needs q_rows.count == kv_rows.count. Head sizes up to 128
// (kernels.cu says why); larger ones throw.
struct AttnRows {
  int64_t first = 0;  // the block's first row
  int64_t count = 0;  // its rows
  int64_t ld = 0;     // the rows each head holds in memory (the tensor's T)
};
void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v, int64_t B, int64_t NH,
                       AttnRows q_rows, AttnRows kv_rows, int64_t hs, bool causal, void* stream);
void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                        const float* v, const float* out, const float* lse, int64_t B, int64_t NH, AttnRows q_rows,
                        AttnRows kv_rows, int64_t hs, bool causal, void* stream);
// (out, lse) <- merge of (out, lse) and (out_b, lse_b) on `rows` of each of `heads` = B*NH heads
void attention_merge(float* out, float* lse, const float* out_b, const float* lse_b, int64_t heads, AttnRows rows,
                     int64_t hs, void* stream);

// ---- layouts: qkv [B,T,3C] <-> q, k, v [B,NH,T,hs];  o [B,NH,T,hs] <-> out [B,T,C]  (C = NH hs)
void qkv_split(float* q, float* k, float* v, const float* qkv, int64_t B, int64_t T, int64_t NH, int64_t hs,
               void* stream);
void qkv_split_backward(float* dqkv, const float* dq, const float* dk, const float* dv, int64_t B, int64_t T,
                        int64_t NH, int64_t hs, void* stream);  // dqkv += ...
void heads_merge(float* out, const float* o, int64_t B, int64_t NH, int64_t T, int64_t hs, void* stream);
void heads_merge_backward(float* d_o, const float* dout, int64_t B, int64_t NH, int64_t T, int64_t hs,
                          void* stream);  // d_o += ...

}  // namespace shardlab::cuda
