// tensor_parallel.h: Megatron-LM's tensor parallelism, the collectives at the edges of a slice.
//
// Every block's matmuls are cut over the T ranks of a tensor-parallel group (model.h's
// ModelSlice): the qkv projection and the MLP's first matmul by output columns (each rank its
// heads, its share of the hidden units: "column-parallel"), the two output projections by input
// columns ("row-parallel"), so a block's slice needs no communication inside it. Two operators
// sit at its edges (Shoeybi et al. 2019, section 3; Megatron-Core's tensor_parallel/mappings.py):
//
//   f, before a column-parallel matmul:  forward identity     (every rank holds the whole input)
//                                        backward all-reduce  (each rank's slice gives a partial
//                                                              gradient of that input)
//   g, after a row-parallel matmul:      forward all-reduce   (each rank's slice gives a partial
//                                                              sum of the output)
//                                        backward identity
//
// So a block costs two all-reduces forward (g after the attention, g after the MLP) and two
// backward (f before each), each of the whole activation [B x T, C], on the compute stream's
// critical path: nothing can run until the sum is there.
//
// Sequence parallelism (Korthikanti et al. 2022) cuts what lies between the blocks' slices too:
// the residual stream, its layer norms and residual adds, by rows (tokens), T ways. Then
//
//   f: forward all-gather (the rows into the whole input),  backward reduce-scatter
//   g: forward reduce-scatter (sum, each rank keeps its rows), backward all-gather
//
// An all-reduce is a reduce-scatter followed by an all-gather, so the bytes on the wire are the
// same; what changes is that no rank holds the whole [B x T, C] stream any more. The input an
// all-gather made is not kept for backward: backward gathers it again (Megatron does the same,
// overlapping that all-gather with the input gradient's matmul).
//
// The vocabulary is cut too (VocabParallelEmbedding, vocab_parallel_cross_entropy): each rank
// holds rows of the token embedding, which the head reuses as its columns of the logits, and
// the loss is taken without ever gathering the logits [B x T, V]: only three numbers per token
// cross the group (cross_entropy.py): the row's max, its sum of exponentials and its target's
// logit.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "02_naive_ddp/data_parallel.h"
#include "09_fsdp2/fsdp_param.h"
#include "model/model.h"
#include "model/ops.h"
#include "run/job.h"

namespace ch10 {

using namespace shardlab;

class MegatronTP : public TensorParallel {
 public:
  // `ring`: a stream for async tensor parallelism's exchanges (sequence parallelism only);
  // nullptr: every f all-gathers before its matmul.
  MegatronTP(Device& dev, Comm& group, const GPTConfig& cfg, bool sequence_parallel, Stream* ring = nullptr)
      : dev_(dev), group_(group), cfg_(cfg), sequence_parallel_(sequence_parallel), ring_(ring) {
    if (ring_ != nullptr && !sequence_parallel_)
      throw std::invalid_argument("async tensor parallelism overlaps sequence parallelism's all-gathers: it needs them");
  }
  ~MegatronTP() override { free_loss_stats(); }

  ModelSlice slice() const override { return {group_.rank(), group_.size()}; }
  int64_t residual_rows(int64_t N) const override { return sequence_parallel_ ? N / group_.size() : N; }

  // A group of one rank holds the whole model: nothing to communicate (as Megatron's mappings
  // return their input when the tensor-parallel world size is 1).
  Tensor f_forward(Stream& s, const Tensor& x) override {
    // lab: begin 10.f-and-g "f and g: the collectives at a slice's edges, with and without sequence parallelism" #f-and-g uses(s, x)
    if (alone() || !sequence_parallel_) return x;  // identity: every rank holds the whole input already
    return gathered(s, x, "f: all-gather");
    // lab: end
  }
  Tensor f_backward(Stream& s, const Tensor& dinput) override {
    // lab: begin 10.f-and-g "f and g: the collectives at a slice's edges, with and without sequence parallelism" #f-and-g uses(s, dinput)
    if (alone()) return dinput;
    if (!sequence_parallel_) {
      group_.all_reduce(dinput, ReduceOp::sum, s);  // every slice's part of the input's gradient
      return dinput;
    }
    return scattered(s, dinput, "f backward: reduce-scatter");
    // lab: end
  }
  // Async tensor parallelism (torchtitan's fused all-gather matmul, Megatron's TP comm overlap;
  // Wang et al. 2023 decompose it the same way): f's all-gather and the matmul after it, in T
  // pieces. The matmul's rows are independent, so the rows of the output that come from rank
  // j's tokens need only rank j's rows of the input. Each rank starts on its own rows while
  // passing them to the next rank of a ring; at step k it multiplies the rows that arrived from
  // k ranks back while the ring passes them on. T - 1 exchanges of one rank's rows each, the
  // all-gather's bytes, run on a stream of their own, each under one piece (the rows piece k + 1
  // needs travel while piece k multiplies): what is exposed is each exchange's excess over its
  // piece, nothing when the piece is the longer.
  bool fused_column_forward(Stream& s, const Tensor& out, const Tensor& x, const Tensor& weight,
                            const Tensor& bias) override {
    if (ring_ == nullptr || alone()) return false;
    const int T = group_.size(), r = group_.rank();
    const int64_t rows = x.shape[0], OC = weight.shape[0];
    Tensor held[2] = {dev_.empty(x.shape, x.dtype, s, "async_tp.chunk"), dev_.empty(x.shape, x.dtype, s, "async_tp.chunk")};
    Tensor chunk = x;
    for (int k = 0; k < T; ++k) {
      const int source = (r - k + T) % T;  // whose rows `chunk` holds
      Tensor next = held[k % 2];
      if (k + 1 < T) {
        // The exchange reads `chunk` and overwrites `next`, which the matmul two pieces back read.
        dev_.wait(*ring_, dev_.record(s));
        group_.sendrecv(chunk, (r + 1) % T, next, (r - 1 + T) % T, *ring_);
      }
      ops::matmul_forward(dev_, s, out.view(source * rows * OC, {rows, OC}), chunk, weight, bias);
      if (k + 1 < T) dev_.wait(s, dev_.record(*ring_));  // the next piece's rows have arrived
      chunk = next;
    }
    for (Tensor& t : held) dev_.free(t);
    return true;
  }

  Tensor g_forward(Stream& s, const Tensor& partial) override {
    // lab: begin 10.f-and-g "f and g: the collectives at a slice's edges, with and without sequence parallelism" #f-and-g uses(s, partial)
    if (alone()) return partial;
    if (!sequence_parallel_) {
      group_.all_reduce(partial, ReduceOp::sum, s);  // the slices' partial products summed
      return partial;
    }
    return scattered(s, partial, "g: reduce-scatter");
    // lab: end
  }
  Tensor g_backward(Stream& s, const Tensor& dy) override {
    // lab: begin 10.f-and-g "f and g: the collectives at a slice's edges, with and without sequence parallelism" #f-and-g uses(s, dy)
    if (alone() || !sequence_parallel_) return dy;  // identity: the sum's gradient is every part's
    return gathered(s, dy, "g backward: all-gather");
    // lab: end
  }

  // Each rank looks up the tokens its rows of wte hold (zeros for the rest); g sums the ranks'
  // lookups. The first rank adds the positions, so the sum holds them once: the result is the
  // whole model's embedding, bit for bit (one rank's row, zeros and one position row added).
  Tensor embedding_forward(Stream& s, const Tensor& tokens, const Tensor& wte, const Tensor& wpe) override {
    const ModelSlice me = slice();
    Tensor lookup = dev_.empty({tokens.shape[0], tokens.shape[1], cfg_.channels}, wte.dtype, s, "embeddings.lookup");
    ops::embedding_forward(dev_, s, lookup, tokens, wte, me.rank == 0 ? wpe : Tensor{}, Tensor{}, me.vocab_begin(cfg_));
    Tensor out = g_forward(s, lookup.view(0, {tokens.numel(), cfg_.channels}));
    if (out.alloc_id != lookup.alloc_id) dev_.free(lookup);
    return out;
  }
  // Every rank has the whole gradient of the sum (g's backward), so each takes its rows' part of
  // dwte, and all of dwpe (the position table is whole on every rank, and so is its gradient).
  void embedding_backward(Stream& s, const Tensor& dwte, const Tensor& dwpe, const Tensor& dresidual,
                          const Tensor& tokens) override {
    const int64_t N = tokens.numel();
    Tensor d = g_backward(s, dresidual.view(0, {residual_rows(N), cfg_.channels}));
    ops::embedding_backward(dev_, s, dwte, dwpe, d.view(0, {tokens.shape[0], tokens.shape[1], cfg_.channels}), tokens,
                            Tensor{}, slice().vocab_begin(cfg_));
    if (d.alloc_id != dresidual.alloc_id) dev_.free(d);
  }

  // Three numbers per token cross the group, in two all-reduces: the max (each rank's slice's
  // max, then the group's), then the sum of exponentials and the target's logit together in one
  // [2, N] buffer (Megatron reduces these two apart; one collective of twice the size costs one
  // latency less). Backward needs no communication: each rank's softmax columns are
  // exp(logit - max) / sum, the one-hot on the rank that holds the target.
  void loss_forward(Stream& s, const Tensor& losses, const Tensor& logits, const Tensor& targets) override {
    if (row_max_.defined()) throw std::logic_error("MegatronTP: a second loss forward before the first one's backward");
    // lab: begin 10.vocab-loss "the loss without gathering the logits: three numbers a token, two all-reduces" #the-vocabulary uses(s, losses, logits, targets)
    const int64_t N = targets.numel(), vocab_begin = slice().vocab_begin(cfg_);
    row_max_ = dev_.empty({N}, DType::f32, s, "loss.row_max");
    sums_ = dev_.empty({2, N}, DType::f32, s, "loss.sum_exp|target_logit");
    const Tensor sum_exp = sums_.view(0, {N}), target_logit = sums_.view(N, {N});
    ops::crossentropy_row_max(dev_, s, row_max_, logits);
    if (!alone()) group_.all_reduce(row_max_, ReduceOp::max, s);
    ops::crossentropy_row_sums(dev_, s, sum_exp, target_logit, logits, row_max_, targets, vocab_begin);
    if (!alone()) group_.all_reduce(sums_, ReduceOp::sum, s);
    ops::crossentropy_losses(dev_, s, losses, row_max_, sum_exp, target_logit);
    // lab: end
  }
  void loss_backward(Stream& s, const Tensor& dlogits, const Tensor& logits, const Tensor& targets,
                     float dloss) override {
    if (!row_max_.defined()) throw std::logic_error("MegatronTP: a loss backward without its forward");
    // lab: begin 10.vocab-loss "the loss without gathering the logits: three numbers a token, two all-reduces" #the-vocabulary uses(s, dlogits, logits, targets, dloss)
    ops::crossentropy_backward_slice(dev_, s, dlogits, logits, targets, dloss, row_max_,
                                     sums_.view(0, {targets.numel()}), slice().vocab_begin(cfg_));
    // lab: end
    free_loss_stats();
  }

 private:
  bool alone() const { return group_.size() == 1; }
  // Sequence parallelism's two collectives: this rank's rows into the whole [N, C] (all-gather),
  // and a whole [N, C], partial on every rank, summed into this rank's rows (reduce-scatter).
  Tensor gathered(Stream& s, const Tensor& rows, std::string_view name) {
    Tensor whole = dev_.empty({rows.shape[0] * group_.size(), rows.shape[1]}, rows.dtype, s, name);
    group_.all_gather(rows, whole, s);
    return whole;
  }
  Tensor scattered(Stream& s, const Tensor& whole, std::string_view name) {
    Tensor rows = dev_.empty({whole.shape[0] / group_.size(), whole.shape[1]}, whole.dtype, s, name);
    group_.reduce_scatter(whole, rows, ReduceOp::sum, s);
    return rows;
  }
  void free_loss_stats() {
    if (row_max_.defined()) dev_.free(row_max_);
    if (sums_.defined()) dev_.free(sums_);
    row_max_ = sums_ = Tensor{};
  }

  Device& dev_;
  Comm& group_;
  GPTConfig cfg_;
  bool sequence_parallel_;
  Stream* ring_;
  Tensor row_max_, sums_;  // the loss's statistics, from its forward to its backward
};

// Which elements of a whole parameter a slice holds: runs of consecutive elements, in the
// order the slice stores them.
struct Run {
  int64_t whole = 0, count = 0;  // where the run starts in the whole parameter, its length
};

// Whether a parameter is whole on every rank of the group: the layer norms, the position table,
// the row-parallel linears' biases (added once, after g's sum).
inline bool is_replicated(const ParamInfo& p) {
  for (const char* sliced : {"wte.weight", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
                             "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight"})
    if (p.name.ends_with(sliced)) return false;
  return true;
}

// Whether, under sequence parallelism, each rank's gradient of a parameter covers its own tokens
// only: the replicated parameters that act on the residual stream's rows (the layer norms, the
// row-parallel biases); the group sums them after backward (Megatron's
// _allreduce_layernorm_grads). The position table's gradient comes from g's all-gathered
// gradient, whole on every rank.
inline bool sums_over_tokens(const ParamInfo& p) { return is_replicated(p) && p.name != "wpe.weight"; }

inline std::vector<Run> slice_runs(const GPTConfig& cfg, ModelSlice slice, const ParamInfo& whole) {
  const int64_t C = cfg.channels, hs = C / cfg.heads, Ca = slice.heads(cfg) * hs, H = slice.hidden(cfg);
  const int64_t head0 = slice.rank * Ca, hidden0 = slice.rank * H;
  const auto ends = [&](const char* s) { return whole.name.ends_with(s); };
  const int64_t cols = whole.shape.ndim == 2 ? whole.shape[1] : 1;
  std::vector<Run> runs;
  // lab: begin 10.slice-runs "which elements of each whole parameter a rank's slice holds" #cutting-a-block-column-parallel-then-row-parallel uses(cfg, slice, whole, C, hs, Ca, H, head0, hidden0, ends, cols)
  if (ends("wte.weight")) {
    runs.push_back({slice.vocab_begin(cfg) * C, slice.vocab_rows(cfg) * C});
  } else if (ends("attn.c_attn.weight") || ends("attn.c_attn.bias")) {  // rows q | k | v: its heads' rows of each
    for (int64_t part = 0; part < 3; ++part) runs.push_back({(part * C + head0) * cols, Ca * cols});
  } else if (ends("attn.c_proj.weight")) {  // its heads' columns of every row
    for (int64_t row = 0; row < C; ++row) runs.push_back({row * C + head0, Ca});
  } else if (ends("mlp.c_fc.weight") || ends("mlp.c_fc.bias")) {
    runs.push_back({hidden0 * cols, H * cols});
  } else if (ends("mlp.c_proj.weight")) {
    for (int64_t row = 0; row < C; ++row) runs.push_back({row * 4 * C + hidden0, H});
  } else {
    runs.push_back({0, whole.shape.numel()});  // replicated
  }
  // lab: end
  return runs;
}

// The initial values of a slice: every parameter whole from the seed (as one rank would
// start), then this rank's runs of it.
inline ch09::ParamInit slice_init(const GPTConfig& cfg, ModelSlice slice, uint64_t seed) {
  return [cfg, slice, seed](int index, float* out) {
    const ParamInfo whole = gpt_params(cfg)[static_cast<size_t>(index)];
    std::vector<float> values(static_cast<size_t>(whole.shape.numel()));
    gpt_init_param(cfg, index, seed, values.data());
    for (const Run& r : slice_runs(cfg, slice, whole)) out = std::copy_n(values.begin() + r.whole, r.count, out);
  };
}

// The whole model from every rank's slice (`mine`: this rank's parameters back to back in the
// model's order, as gpt_params(cfg, slice) lists them): each rank places its runs in a buffer
// of zeros the size of the whole model (a replicated parameter: the group's first rank only)
// and the group sums the buffers. All ranks of the group call; every one gets the whole.
inline std::vector<float> whole_model(Device& dev, Comm& group, const GPTConfig& cfg, ModelSlice slice,
                                      const std::vector<float>& mine) {
  const std::vector<ParamInfo> whole = gpt_params(cfg);
  std::vector<float> natural(static_cast<size_t>(gpt_num_params(cfg)), 0.0f);
  auto from = mine.begin();
  int64_t start = 0;
  for (const ParamInfo& p : whole) {
    for (const Run& r : slice_runs(cfg, slice, p)) {
      if (slice.rank == 0 || !is_replicated(p)) std::copy_n(from, r.count, natural.begin() + start + r.whole);
      from += r.count;
    }
    start += p.shape.numel();
  }
  return ch02::summed_over(dev, group, std::move(natural));
}

}  // namespace ch10
