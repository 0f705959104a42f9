// ops.h: the device ops a GPT needs, each a Kernel (name, FLOPs, bytes, what it reads and
// writes) plus its math, launched through Device::launch.
//
// The sim charges every op with the cost model and the race check sees its accesses; under
// --compute skip the math is not run and no real memory is touched. CPU bodies are blocked,
// vectorizable loops; the CUDA device implements the same ops as kernels.
//
// Conventions (as in llm.c):
// - Shapes: B batch, T sequence, C channels, OC output channels, V vocabulary, NH heads,
//   hs = C / NH. Rows of a [N, C] tensor are contiguous. Linear weights are [OC, C]:
//   out = inp @ weight^T + bias.
// - Backward ops ACCUMULATE (+=) into every gradient they produce, parameter and activation
//   gradients alike, so residual branches and micro-batches add up; callers zero gradients.
//   The one exception is crossentropy_backward, which writes dlogits.
// - Float tensors are f32, or bf16 under mixed precision (chapter 09): an op then computes in
//   f32 and rounds each bf16 output once (f32_math.h). What stays f32 whatever the activations:
//   layer norms' mean and rstd, the per-position losses, AdamW's tensors. Token ids and targets
//   are i32.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "device/device.h"

namespace shardlab::ops {

// ---- elementwise and memory
void fill(Device& dev, Stream& s, const Tensor& t, float value);            // t = value
void copy(Device& dev, Stream& s, const Tensor& dst, const Tensor& src);    // dst = src (same numel)
void add_(Device& dev, Stream& s, const Tensor& dst, const Tensor& src);    // dst += src
void scale_(Device& dev, Stream& s, const Tensor& t, float factor);         // t *= factor
// t /= divisor: an average's last step as the MPI communicator takes it (sum, then divide);
// multiplying by 1 / divisor instead rounds differently where the divisor is no power of two.
void divide_(Device& dev, Stream& s, const Tensor& t, float divisor);
void residual_forward(Device& dev, Stream& s, const Tensor& out, const Tensor& a, const Tensor& b);  // out = a + b

// Several 2-D copies in one kernel, each `rows` rows of `width` elements: for every block and
// row r, dst[r * dst_pitch + k] = src[r * src_pitch + k], k < width, and 0 where that source
// index reaches src.numel() (the source has ended: padding). Chapter 09's copies around FSDP2's
// collectives are all this one shape: the all-gather's copy-in (rows = 1), its copy-out
// (split_with_sizes_copy: row r of the gathered buffer is rank r's slot) and the reduce-scatter's
// copy-in (chunk_cat: each gradient's r-th chunk into rank r's slot, padded with zeros).
// Source and destination are each f32 or bf16 (device/bf16.h): a copy between the two converts,
// rounding to nearest even into bf16, as mixed precision's copies do (the all-gather's input
// cast to the parameters' dtype, chunk_cat's widening to the reduce dtype).
struct CopyBlock {
  Tensor src, dst;
  int64_t src_pitch = 0, dst_pitch = 0, width = 0;
};
void copy_blocks(Device& dev, Stream& s, std::string_view name, int64_t rows, const std::vector<CopyBlock>& blocks);

// ---- embeddings: out[b, t, :] = wte[tokens[b, t], :] + wpe[p(t), :], p(t) = t, or positions[t]
// when given (a sequence split over ranks: chapter 08's tokens are not in order).
// `vocab_begin`: kWholeTable, wte is the whole vocabulary's table and an id outside it is an
// error; else wte holds rows [vocab_begin, vocab_begin + rows) of it (tensor parallelism's
// slice, chapter 10): an id outside them adds nothing and gets no gradient here. wpe undefined:
// no position is added.
constexpr int64_t kWholeTable = -1;
void embedding_forward(Device& dev, Stream& s, const Tensor& out /*[B,T,C]*/, const Tensor& tokens /*[B,T] i32*/,
                       const Tensor& wte /*[V,C]*/, const Tensor& wpe /*[maxT,C]*/,
                       const Tensor& positions = {} /*[T] i32*/, int64_t vocab_begin = kWholeTable);
void embedding_backward(Device& dev, Stream& s, const Tensor& dwte, const Tensor& dwpe, const Tensor& dout,
                        const Tensor& tokens, const Tensor& positions = {}, int64_t vocab_begin = kWholeTable);

// ---- layernorm over the last dimension (eps 1e-5); saves mean and rstd ([N]) for backward
void layernorm_forward(Device& dev, Stream& s, const Tensor& out /*[N,C]*/, const Tensor& mean /*[N]*/,
                       const Tensor& rstd /*[N]*/, const Tensor& inp /*[N,C]*/, const Tensor& weight /*[C]*/,
                       const Tensor& bias /*[C]*/);
void layernorm_backward(Device& dev, Stream& s, const Tensor& dinp, const Tensor& dweight, const Tensor& dbias,
                        const Tensor& dout, const Tensor& inp, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd);

// ---- linear layer: out[N,OC] = inp[N,C] @ weight[OC,C]^T (+ bias[OC] when defined)
void matmul_forward(Device& dev, Stream& s, const Tensor& out, const Tensor& inp, const Tensor& weight,
                    const Tensor& bias);
// dinp += dout @ weight; dweight += dout^T @ inp; dbias += column sums of dout (when defined).
void matmul_backward(Device& dev, Stream& s, const Tensor& dinp, const Tensor& dweight, const Tensor& dbias,
                     const Tensor& dout, const Tensor& inp, const Tensor& weight);
// Its two halves: the input's gradient (dinp += dout @ weight), and the weight's and bias's
// (either may be undefined: frozen, or no bias; both undefined, nothing runs).
void matmul_backward_input(Device& dev, Stream& s, const Tensor& dinp, const Tensor& dout, const Tensor& weight);
void matmul_backward_weight(Device& dev, Stream& s, const Tensor& dweight, const Tensor& dbias, const Tensor& dout,
                            const Tensor& inp);

// A bias on its own, out[N, OC] += bias[OC], and its gradient dbias += column sums of dout: a
// row-parallel linear (chapter 10) adds its bias once its ranks' partial products are summed.
void bias_forward(Device& dev, Stream& s, const Tensor& out, const Tensor& bias);
void bias_backward(Device& dev, Stream& s, const Tensor& dbias, const Tensor& dout);

// ---- GELU, tanh approximation (GPT-2's)
void gelu_forward(Device& dev, Stream& s, const Tensor& out, const Tensor& inp);
void gelu_backward(Device& dev, Stream& s, const Tensor& dinp, const Tensor& inp, const Tensor& dout);

// ---- softmax cross-entropy over the last dimension
// losses[b, t] = -log softmax(logits[b, t, :])[targets[b, t]]
void crossentropy_forward(Device& dev, Stream& s, const Tensor& losses /*[B,T]*/, const Tensor& logits /*[B,T,V]*/,
                          const Tensor& targets /*[B,T] i32*/);
// dlogits = (softmax(logits) - onehot(targets)) x dloss  (written, not accumulated); dloss is the
// gradient of the final loss with respect to each position's loss, 1 / (B x T) for a mean.
void crossentropy_backward(Device& dev, Stream& s, const Tensor& dlogits, const Tensor& logits,
                           const Tensor& targets, float dloss);

// ---- the same loss over a vocabulary cut over ranks (chapter 10): logits [.., V] are columns
// [vocab_begin, vocab_begin + V) of each row's logits. The softmax's row statistics are taken
// in pieces, each reduced across the ranks before the next:
//   crossentropy_row_max:   row_max[n] = max_j logits[n, j]                         (all-reduce max)
//   crossentropy_row_sums:  sum_exp[n] = sum_j exp(logits[n, j] - row_max[n]),
//                           target_logit[n] = logits[n, target - vocab_begin] where this
//                           slice holds the target, else 0                         (all-reduce sum)
//   crossentropy_losses:    losses[n] = log(sum_exp[n]) + row_max[n] - target_logit[n]
// and backward needs no communication at all: dlogits = (exp(logits - row_max) / sum_exp -
// onehot) x dloss, the one-hot on the rank that holds the target. Statistics are f32 [N].
void crossentropy_row_max(Device& dev, Stream& s, const Tensor& row_max, const Tensor& logits);
void crossentropy_row_sums(Device& dev, Stream& s, const Tensor& sum_exp, const Tensor& target_logit,
                           const Tensor& logits, const Tensor& row_max, const Tensor& targets, int64_t vocab_begin);
void crossentropy_losses(Device& dev, Stream& s, const Tensor& losses, const Tensor& row_max, const Tensor& sum_exp,
                         const Tensor& target_logit);
void crossentropy_backward_slice(Device& dev, Stream& s, const Tensor& dlogits, const Tensor& logits,
                                 const Tensor& targets, float dloss, const Tensor& row_max, const Tensor& sum_exp,
                                 int64_t vocab_begin);

// ---- AdamW (PyTorch's torch.optim.AdamW; decoupled weight decay applied to every element)
struct AdamW {
  float lr = 3e-4f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.0f;
};
// params -= lr * (mhat / (sqrt(vhat) + eps) + weight_decay * params), step t >= 1.
void adamw(Device& dev, Stream& s, const Tensor& params, const Tensor& grads, const Tensor& m, const Tensor& v,
           int64_t t, const AdamW& hp);

// ---- causal self-attention, block-wise with a log-sum-exp output (see attention.h)

}  // namespace shardlab::ops
