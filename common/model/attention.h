// attention.h: causal self-attention, written block-wise with a log-sum-exp output.
//
// One call computes one block: queries q against keys and values k, v, for every batch row and
// head. Besides the output it writes the log-sum-exp of each query's scaled scores,
//   lse[i] = log sum_j exp(scale x q_i . k_j),   scale = 1 / sqrt(hs),
// which is everything needed to (a) merge the outputs of several key blocks computed apart
// (attention_merge: chapter 08's ring attention) and (b) run backward from the final output
// alone, without storing the attention matrix (FlashAttention's trick).
//
// Layouts: q [B, NH, Tq, hs]; k, v [B, NH, Tk, hs]; out [B, NH, Tq, hs]; lse [B, NH, Tq].
// Masks: causal (Tq == Tk, query i sees keys 0..i) or none (every query sees every key).
// A query that sees no key at all has lse = -inf and output 0, never NaN.
//
// Row blocks: every call may work on a block of rows of its tensors instead of all of them,
// `q_rows` of q (and of out, lse, dq, dout) against `kv_rows` of k and v (and dk, dv), for
// every batch row and head; rows outside the blocks are neither read nor written. Ring
// attention (chapter 08) computes its steps on halves of the local sequence this way, as
// FlashAttention's kernels take strided views. A causal mask then applies inside the blocks
// (query i of the block sees keys 0..i of the block), which must be equally long.
#pragma once

#include "device/device.h"

namespace shardlab::ops {

enum class AttentionMask : uint8_t { causal, none };

// Rows [begin, begin + count) along T; the default, every row.
struct Rows {
  int64_t begin = 0;
  int64_t count = -1;  // -1: to the end
};

void attention_forward(Device& dev, Stream& s, const Tensor& out, const Tensor& lse, const Tensor& q,
                       const Tensor& k, const Tensor& v, AttentionMask mask, Rows q_rows = {}, Rows kv_rows = {});

// Gradients from the FINAL out and lse (for a merged result, the merged ones):
//   P = exp(scale q k^T - lse), D = rowsum(dout * out), dS = P * (dout v^T - D),
//   dv += P^T dout, dq += scale dS k, dk += scale dS^T q.   (accumulated)
void attention_backward(Device& dev, Stream& s, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                        const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& lse, AttentionMask mask, Rows q_rows = {}, Rows kv_rows = {});

// Merges a partial result (out_b, lse_b) into (out, lse), in place, on `rows` of each head:
//   m = max(lse, lse_b), n = min(...), new = m + log1p(exp(n - m)),
//   out = out exp(lse - new) + out_b exp(lse_b - new).   (-inf on either side: take the other)
void attention_merge(Device& dev, Stream& s, const Tensor& out, const Tensor& lse, const Tensor& out_b,
                     const Tensor& lse_b, Rows rows = {});

// Layout changes around the attention core.
// qkv [B, T, 3C] (the qkv projection's output: q | k | v along the last dim) -> q, k, v [B, NH, T, hs].
void qkv_split(Device& dev, Stream& s, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& qkv, int nh);
void qkv_split_backward(Device& dev, Stream& s, const Tensor& dqkv, const Tensor& dq, const Tensor& dk,
                        const Tensor& dv, int nh);  // dqkv += ...
// o [B, NH, T, hs] -> out [B, T, C]
void heads_merge(Device& dev, Stream& s, const Tensor& out, const Tensor& o);
void heads_merge_backward(Device& dev, Stream& s, const Tensor& d_o, const Tensor& dout);  // d_o += ...

}  // namespace shardlab::ops
