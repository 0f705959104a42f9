// model.h: a small GPT (GPT-2's architecture) with explicit per-unit forward and backward.
//
//   embeddings:  x = wte[tokens] + wpe[positions]
//   block l:     x = x + proj(attention(layernorm1(x)));  x = x + fcproj(gelu(fc(layernorm2(x))))
//   head:        logits = layernorm_f(x) @ wte^T   (the head is tied to the token embedding)
//   loss:        mean cross-entropy of logits against the next tokens
//
// There is no autograd: each unit's forward and backward are written out op by op (ops.h,
// attention.h), so a chapter can put its hooks between units, exactly where PyTorch's DDP and
// FSDP put theirs. Units are numbered 0 (embeddings), 1..L (blocks), L+1 (final norm and head).
// Each unit keeps the activations its backward needs from its forward until its backward has
// run, and frees them there (so the memory counters in the trace rise through forward and fall
// through backward).
//
// The model does not own parameter or gradient memory: a chapter binds tensors (views of flat
// buffers, of DDP buckets, of FSDP's unsharded FlatParameters...) to each parameter before a
// unit runs. Parameters are named and in a fixed order (PyTorch's registration order).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "device/device.h"

namespace shardlab {

struct GPTConfig {
  std::string name;
  int64_t vocab = 0, max_T = 0, layers = 0, channels = 0, heads = 0;

  // "tiny" (numerics in seconds on a CPU), "gpt2-small" (124M), "gpt2-medium" (350M),
  // "gpt-1b" (1.1B, for timing-only runs). An unknown name lists the presets.
  static GPTConfig preset(const std::string& name);
  static std::vector<std::string> presets();
};

// Tensor parallelism (chapter 10) cuts every block and the vocabulary over `size` ranks; rank
// `rank` holds heads [rank x NH / size, (rank + 1) x NH / size) of each attention (its rows of
// the q, k and v projections, its columns of the output projection), the same share of each
// MLP's hidden columns, and rows of the token embedding (the tied head's columns) as torch.chunk
// cuts them: ceil(V / size) each, the last rank's fewer. Layer norms, the position embedding and
// the output projections' biases are whole on every rank. {0, 1} is the whole model.
struct ModelSlice {
  int rank = 0, size = 1;
  int64_t heads(const GPTConfig& c) const { return c.heads / size; }
  int64_t hidden(const GPTConfig& c) const { return 4 * c.channels / size; }
  int64_t vocab_begin(const GPTConfig& c) const { return std::min(c.vocab, rank * vocab_chunk(c)); }
  int64_t vocab_rows(const GPTConfig& c) const { return std::min(c.vocab, (rank + 1) * vocab_chunk(c)) - vocab_begin(c); }
  int64_t vocab_chunk(const GPTConfig& c) const { return (c.vocab + size - 1) / size; }
};
// Why `size` ranks cannot cut `cfg` (heads that do not divide, a rank left without vocabulary),
// naming the values; empty when they can.
std::string slice_problem(const GPTConfig& cfg, int size);

struct ParamInfo {
  std::string name;  // "h.3.attn.qkv.weight"
  Shape shape;
  int unit;          // the unit that owns it (wte: 0, though the head uses it too)
};

// Parameter names, shapes and units of a config, in order, as `slice` holds them (the whole
// model by default). Pure: no device needed.
std::vector<ParamInfo> gpt_params(const GPTConfig& cfg, ModelSlice slice = {});
int64_t gpt_num_params(const GPTConfig& cfg);
// The parameters that do not train (PyTorch's requires_grad=False), by index: those whose name
// contains one of the comma-separated `patterns` ("wte,wpe", "attn", "h.0."); none when empty.
// Throws std::invalid_argument naming a pattern that matches no parameter.
std::vector<bool> frozen_params(const GPTConfig& cfg, const std::string& patterns);
// The initial value of parameter `index` (GPT-2's scheme): depends on (cfg, index, seed) only,
// never on the world size or rank.
void gpt_init_param(const GPTConfig& cfg, int index, uint64_t seed, float* out);
// Every parameter's initial value, back to back in parameter order (gpt_num_params floats).
std::vector<float> gpt_init_all(const GPTConfig& cfg, uint64_t seed);
// Points slots[i] for each i in `indices` at consecutive views of `flat`, starting at element
// `offset`, in that order. Returns the element after the last view.
int64_t bind_views(std::vector<Tensor>& slots, const Tensor& flat, const std::vector<ParamInfo>& params,
                   const std::vector<int>& indices, int64_t offset = 0);
// The inverse of laying parameters out in another order: copies the parameters `indices`,
// stored back to back in `flat`, to their places in `natural` (the model's order).
void place_params(const std::vector<ParamInfo>& params, const std::vector<int>& indices, const float* flat,
                  std::vector<float>& natural);
// Device memory of the activations, as the units allocate them (each tensor rounded as the
// caching allocator rounds it): what forward keeps for backward (every unit), and what the
// head's backward adds on top at once (dlogits, dlnf, the residual gradient). For a model whose
// logits dominate (GPT-2's vocabulary) their sum is the activations' peak.
struct ActivationBytes {
  int64_t saved = 0;
  int64_t head_backward = 0;
};
ActivationBytes gpt_activation_bytes(const GPTConfig& cfg, int64_t B, int64_t T);
// What one unit's forward keeps until its backward, its output included (the next unit's input).
int64_t gpt_unit_activation_bytes(const GPTConfig& cfg, int unit, int64_t B, int64_t T);
// What a unit's B keeps for its W under GPT::split_backward: each matmul's input and output
// gradient. A block: ln1, atty, ln2 and two copies of the residual stream's gradient (the output
// projections') [B,T,C], dqkv [B,T,3C], fch_gelu and dfch [B,T,4C]; the head: ln_f's output and
// dlogits; the embeddings: nothing (no matmul).
int64_t gpt_unit_weight_grad_bytes(const GPTConfig& cfg, int unit, int64_t B, int64_t T);
// Forward + backward FLOPs of one step over `tokens` tokens of length T, the standard count:
// 6 x (parameters in matmuls) x tokens + the attention scores and mixing (causal pairs only).
double gpt_step_flops(const GPTConfig& cfg, int64_t tokens, int64_t T);
// The same count for one unit (0: the embeddings, 1..L: the blocks, L + 1: the head). The
// embeddings are lookups (no matmul: 0); the head's matmul is the tied wte's. Summed over the
// units: gpt_step_flops less wpe's 6 x parameters x tokens (the standard count's one lookup
// table not used as a matmul).
double gpt_unit_flops(const GPTConfig& cfg, int unit, int64_t tokens, int64_t T);

// The attention core of every block: causal self-attention of q, k, v [B, NH, T, hs] into out
// [B, NH, T, hs] and lse [B, NH, T], and its backward from the final out and lse, accumulating
// into dq, dk, dv (attention.h's contract). Without one the model computes it locally; chapter
// 08 plugs in ring attention, whose keys and values come from the other ranks of a sequence.
// `layer` says which block calls.
class AttentionCore {
 public:
  virtual ~AttentionCore() = default;
  virtual void forward(Stream& s, int layer, const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
                       const Tensor& v) = 0;
  virtual void backward(Stream& s, int layer, const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,
                        const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse) = 0;
};

// The collectives at the edges of a tensor-parallel slice (chapter 10). The model computes its
// slice of every unit on its slice's shapes and calls these where the ranks' partial results
// meet: Megatron's f (into a column-parallel matmul) and g (out of a row-parallel one), and the
// vocabulary-parallel embedding and loss. The residual stream between them is whole on every
// rank, or cut by rows under sequence parallelism (`residual_rows`). A call that returns a
// tensor returns its argument or a new tensor, which the model then frees. Not owned.
class TensorParallel {
 public:
  virtual ~TensorParallel() = default;
  virtual ModelSlice slice() const = 0;
  // Rows of the [N, C] residual stream (N = B x T tokens) this rank keeps.
  virtual int64_t residual_rows(int64_t N) const = 0;
  // f: x [rows, C] into a column-parallel matmul, whose input is [N, C]; backward: that input's
  // gradient [N, C], partial on every rank, summed into x's [rows, C].
  virtual Tensor f_forward(Stream& s, const Tensor& x) = 0;
  virtual Tensor f_backward(Stream& s, const Tensor& dinput) = 0;
  // A column-parallel matmul on f's output, out [N, OC] = f(x) @ weight^T (+ bias), in one:
  // async tensor parallelism overlaps f's all-gather with the matmul, piece by piece. Returns
  // false where it does not, and the model runs f and then the matmul.
  virtual bool fused_column_forward(Stream&, const Tensor& /*out*/, const Tensor& /*x*/, const Tensor& /*weight*/,
                                    const Tensor& /*bias*/) {
    return false;
  }
  // g: a row-parallel matmul's partial output [N, C] summed into the stream's [rows, C];
  // backward: the stream's gradient [rows, C] to the matmul output's [N, C].
  virtual Tensor g_forward(Stream& s, const Tensor& partial) = 0;
  virtual Tensor g_backward(Stream& s, const Tensor& dy) = 0;
  // The embeddings (tokens [B, T], this rank's wte rows, the whole wpe [T, C]) into a new
  // residual stream [rows, C]; backward from its gradient, accumulating into dwte and dwpe.
  virtual Tensor embedding_forward(Stream& s, const Tensor& tokens, const Tensor& wte, const Tensor& wpe) = 0;
  virtual void embedding_backward(Stream& s, const Tensor& dwte, const Tensor& dwpe, const Tensor& dresidual,
                                  const Tensor& tokens) = 0;
  // The loss of every token (losses [B, T] f32) from this rank's columns of the logits
  // [B, T, vocab rows]; backward writes their gradient (crossentropy_backward's contract).
  virtual void loss_forward(Stream& s, const Tensor& losses, const Tensor& logits, const Tensor& targets) = 0;
  virtual void loss_backward(Stream& s, const Tensor& dlogits, const Tensor& logits, const Tensor& targets,
                             float dloss) = 0;
};

class GPT {
 public:
  // B rows of T tokens per forward on this rank. Throws std::invalid_argument naming the values
  // when heads do not divide channels or T exceeds the context. `compute` is the activations'
  // dtype: f32, or bf16 under mixed precision, where the chapter binds bf16 parameters and
  // gradients too (model/f32_math.h says how each op computes and rounds).
  // With `tp` (chapter 10) the model holds and computes its tensor-parallel slice.
  GPT(Device& dev, GPTConfig cfg, int64_t B, int64_t T, DType compute = DType::f32, TensorParallel* tp = nullptr);
  ~GPT();
  GPT(const GPT&) = delete;
  GPT& operator=(const GPT&) = delete;

  const GPTConfig& config() const { return cfg_; }
  const std::vector<ParamInfo>& params() const { return params_; }
  int units() const { return static_cast<int>(cfg_.layers) + 2; }
  const std::vector<int>& params_of_unit(int unit) const { return unit_params_[unit]; }
  int64_t B() const { return B_; }
  int64_t T() const { return T_; }
  DType compute_dtype() const { return compute_; }

  // Where parameter i and its gradient live now. Bind before the units that use them run. An
  // undefined gradient is a frozen parameter's: backward computes no gradient for it.
  std::vector<Tensor>& weights() { return weights_; }
  std::vector<Tensor>& grads() { return grads_; }
  // Every parameter and gradient as consecutive views of two flat buffers, in the model's order.
  void bind_flat(const Tensor& params, const Tensor& grads);

  // Device tensors [B, T] i32 for the next forward/backward. The loss gradient of each
  // position is `dloss` (1 / (B x T) for this rank's mean; a chapter accumulating K
  // micro-batches passes 1 / (B x T x K)). `positions` [T] i32, when given, is each column's
  // position in the sequence (which row of wpe it takes); by default column t is position t.
  void set_batch(const Tensor& tokens, const Tensor& targets, float dloss, const Tensor& positions = {});
  // Who computes attention from now on (nullptr: the model itself). Not owned.
  void set_attention(AttentionCore* core);

  void forward(int unit, Stream& s);
  void backward(int unit, Stream& s);

  // Zero-bubble pipelines (chapter 11) cut a unit's backward in two: B, its input's gradient
  // (what the stage before waits for), and W, its matmuls' weight gradients (what only the
  // optimizer waits for). With split_backward(true), backward(unit) is B: it queues each weight
  // GEMM, keeping the tensors it reads (its input, its output's gradient), and
  // backward_weights(unit) runs the queue and frees them. The layer norms' and the embeddings'
  // gradients stay in B: no GEMM, little work.
  void split_backward(bool on) { split_backward_ = on; }
  void backward_weights(int unit, Stream& s);

  // Pipeline parallelism (chapter 11): the residual stream crosses ranks between units. Before
  // the forward of a stage's first unit u > 0, set_input(u, x) hands it the previous stage's
  // output, which the model frees in u's backward; take_output(u) hands out a stage's last
  // unit's output, which the caller frees once sent. In backward, set_output_grad(d) hands the
  // stage's last unit the gradient of its output (the model frees it), and take_input_grad()
  // hands out the gradient of the stage's first unit's input after its backward (the caller
  // frees it).
  void set_input(int unit, const Tensor& x);
  Tensor take_output(int unit);
  void set_output_grad(const Tensor& d);
  Tensor take_input_grad();
  // The mean loss over every forward of the head since the last call (the micro-batches of a
  // step under gradient accumulation; their per-position losses add up on the device), copied
  // to the host: a host sync, like loss.item(). NaN under --compute skip.
  double mean_loss(Stream& s);

 private:
  struct Acts;
  Tensor act(Shape shape, std::string_view name, Stream& s);
  Tensor stat(Shape shape, std::string_view name, Stream& s);
  Tensor zeros(Shape shape, std::string_view name, Stream& s);
  // Frees t, or under split_backward keeps it for the queued weight GEMM that reads it.
  void release(Tensor& t);
  // dweight += dout^T @ inp (dbias += column sums of dout): now, or queued under split_backward.
  void weight_grad(Stream& s, const Tensor& dweight, const Tensor& dbias, const Tensor& dout, const Tensor& inp);
  // The residual stream's rows on this rank, as the units hand it on: [B, T, C] when whole.
  Shape residual_shape() const;
  // Frees `in` when a tensor-parallel call returned another tensor `out`; returns `out`.
  Tensor replaced(Tensor in, Tensor out);
  // out = f(x) @ weight^T + bias: a column-parallel matmul, whole when there is no slice.
  void column_forward(Stream& s, const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias);
  void forward_embeddings(Stream& s);
  void forward_block(int l, Stream& s);
  void forward_head(Stream& s);
  void backward_embeddings(Stream& s);
  void backward_block(int l, Stream& s);
  void backward_head(Stream& s);
  const Tensor& w(int unit_param) const;

  Device& dev_;
  GPTConfig cfg_;
  int64_t B_, T_;
  DType compute_;
  int64_t heads_since_loss_ = 0;  // forwards of the head summed into the losses since mean_loss
  std::vector<ParamInfo> params_;
  std::vector<std::vector<int>> unit_params_;
  std::vector<Tensor> weights_, grads_;
  std::vector<std::unique_ptr<Acts>> acts_;  // per unit, between its forward and its backward
  Tensor tokens_, targets_, positions_;
  AttentionCore* attention_ = nullptr;
  TensorParallel* tp_ = nullptr;
  ModelSlice slice_;
  int64_t rows_;  // of the residual stream on this rank
  float dloss_ = 0;
  Tensor dresidual_;  // the gradient flowing back along the residual stream
  // Under split_backward: the weight GEMMs a unit's B left, and the tensors kept for them.
  struct WeightGEMM {
    Tensor dweight, dbias, dout, inp;
  };
  struct WeightPass {
    std::vector<WeightGEMM> gemms;
    std::vector<Tensor> kept;
  };
  bool split_backward_ = false;
  WeightPass queued_;                // the unit in backward now
  std::vector<WeightPass> weights_pass_;  // per unit, from its B to its W
};

}  // namespace shardlab
