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

struct ParamInfo {
  std::string name;  // "h.3.attn.qkv.weight"
  Shape shape;
  int unit;          // the unit that owns it (wte: 0, though the head uses it too)
};

// Parameter names, shapes and units of a config, in order. Pure: no device needed.
std::vector<ParamInfo> gpt_params(const GPTConfig& cfg);
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
// Forward + backward FLOPs of one step over `tokens` tokens of length T, the standard count:
// 6 x (parameters in matmuls) x tokens + the attention scores and mixing (causal pairs only).
double gpt_step_flops(const GPTConfig& cfg, int64_t tokens, int64_t T);

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

class GPT {
 public:
  // B rows of T tokens per forward on this rank. Throws std::invalid_argument naming the values
  // when heads do not divide channels or T exceeds the context. `compute` is the activations'
  // dtype: f32, or bf16 under mixed precision, where the chapter binds bf16 parameters and
  // gradients too (model/f32_math.h says how each op computes and rounds).
  GPT(Device& dev, GPTConfig cfg, int64_t B, int64_t T, DType compute = DType::f32);
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
  void set_attention(AttentionCore* core) { attention_ = core; }

  void forward(int unit, Stream& s);
  void backward(int unit, Stream& s);
  // The mean loss over every forward of the head since the last call (the micro-batches of a
  // step under gradient accumulation; their per-position losses add up on the device), copied
  // to the host: a host sync, like loss.item(). NaN under --compute skip.
  double mean_loss(Stream& s);

 private:
  struct Acts;
  Tensor act(Shape shape, std::string_view name, Stream& s);
  Tensor stat(Shape shape, std::string_view name, Stream& s);
  Tensor zeros(Shape shape, std::string_view name, Stream& s);
  void release(Tensor& t) { dev_.free(t); }
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
  float dloss_ = 0;
  Tensor dresidual_;  // the gradient flowing back along the residual stream
};

}  // namespace shardlab
