#include "model/model.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <utility>

#include "device/allocator.h"
#include "model/attention.h"
#include "model/ops.h"
#include "model/rng.h"

namespace shardlab {

namespace {

constexpr int kParamsPerBlock = 12;

std::string block_name(int64_t l, const char* what) { return "h." + std::to_string(l) + "." + what; }

}  // namespace

GPTConfig GPTConfig::preset(const std::string& name) {
  //                 name           vocab  ctx  layers channels heads
  if (name == "tiny") return {name, 32, 64, 2, 32, 2};
  // tiny with 12 heads of 4 channels: tensor parallelism (chapter 10) divides them over 1, 2,
  // 3, 4, 6 or 12 ranks.
  if (name == "tiny-12h") return {name, 32, 64, 2, 48, 12};
  // tiny with 8 blocks: 10 units, enough stages for pipeline parallelism (chapter 11) over 4
  // ranks with 2 chunks each.
  if (name == "tiny-8l") return {name, 32, 64, 8, 32, 2};
  if (name == "gpt2-small") return {name, 50257, 1024, 12, 768, 12};
  if (name == "gpt2-medium") return {name, 50257, 1024, 24, 1024, 16};
  if (name == "gpt-1b") return {name, 50257, 1024, 20, 2048, 16};
  if (name == "gpt-15b") return {name, 50257, 1024, 32, 6144, 48};
  // GPT-2 small with a 128k-token context (chapter 08's long sequences): learned positions, so
  // wpe alone holds 131072 x 768 = 100.7M of its 224.3M parameters.
  if (name == "gpt2-small-128k") return {name, 50257, 131072, 12, 768, 12};
  std::string known;
  for (const auto& p : presets()) known += (known.empty() ? "" : ", ") + p;
  throw std::invalid_argument("--model " + name + ": no such model; presets: " + known);
}

std::vector<std::string> GPTConfig::presets() {
  return {"tiny", "tiny-12h", "tiny-8l", "gpt2-small", "gpt2-medium", "gpt-1b", "gpt-15b", "gpt2-small-128k"};
}

std::string slice_problem(const GPTConfig& c, int size) {
  if (size < 1) return "a tensor-parallel size of " + std::to_string(size) + " ranks";
  if (c.heads % size != 0)
    return c.name + "'s " + std::to_string(c.heads) + " heads do not divide over " + std::to_string(size) + " ranks";
  const ModelSlice last{size - 1, size};
  if (last.vocab_rows(c) < 1)
    return c.name + "'s vocabulary of " + std::to_string(c.vocab) + " cut in chunks of " +
           std::to_string(last.vocab_chunk(c)) + " (torch.chunk) leaves rank " + std::to_string(size - 1) + " none";
  return "";
}

std::vector<ParamInfo> gpt_params(const GPTConfig& c, ModelSlice slice) {
  const int64_t C = c.channels, Ca = slice.heads(c) * (C / c.heads), H = slice.hidden(c);
  std::vector<ParamInfo> p = {{"wte.weight", {slice.vocab_rows(c), C}, 0}, {"wpe.weight", {c.max_T, C}, 0}};
  for (int64_t l = 0; l < c.layers; ++l) {
    const int unit = static_cast<int>(l) + 1;
    p.push_back({block_name(l, "ln_1.weight"), {C}, unit});
    p.push_back({block_name(l, "ln_1.bias"), {C}, unit});
    p.push_back({block_name(l, "attn.c_attn.weight"), {3 * Ca, C}, unit});
    p.push_back({block_name(l, "attn.c_attn.bias"), {3 * Ca}, unit});
    p.push_back({block_name(l, "attn.c_proj.weight"), {C, Ca}, unit});
    p.push_back({block_name(l, "attn.c_proj.bias"), {C}, unit});
    p.push_back({block_name(l, "ln_2.weight"), {C}, unit});
    p.push_back({block_name(l, "ln_2.bias"), {C}, unit});
    p.push_back({block_name(l, "mlp.c_fc.weight"), {H, C}, unit});
    p.push_back({block_name(l, "mlp.c_fc.bias"), {H}, unit});
    p.push_back({block_name(l, "mlp.c_proj.weight"), {C, H}, unit});
    p.push_back({block_name(l, "mlp.c_proj.bias"), {C}, unit});
  }
  const int head = static_cast<int>(c.layers) + 1;
  p.push_back({"ln_f.weight", {C}, head});
  p.push_back({"ln_f.bias", {C}, head});
  return p;
}

int64_t gpt_num_params(const GPTConfig& cfg) {
  int64_t n = 0;
  for (const auto& p : gpt_params(cfg)) n += p.shape.numel();
  return n;
}

std::vector<bool> frozen_params(const GPTConfig& cfg, const std::string& patterns) {
  const std::vector<ParamInfo> params = gpt_params(cfg);
  std::vector<bool> frozen(params.size(), false);
  size_t start = 0;
  while (start < patterns.size()) {
    const size_t end = std::min(patterns.find(',', start), patterns.size());
    const std::string pattern = patterns.substr(start, end - start);
    start = end + 1;
    bool matched = false;
    for (size_t i = 0; i < params.size(); ++i)
      if (!pattern.empty() && params[i].name.find(pattern) != std::string::npos) frozen[i] = matched = true;
    if (!matched)
      throw std::invalid_argument("no parameter of " + cfg.name + " has \"" + pattern + "\" in its name (names: wte.weight, wpe.weight, h.0.ln_1.weight, h.0.attn.c_attn.weight, ..., ln_f.bias)");
  }
  return frozen;
}

void gpt_init_param(const GPTConfig& cfg, int index, uint64_t seed, float* out) {
  const ParamInfo p = gpt_params(cfg)[static_cast<size_t>(index)];
  const int64_t n = p.shape.numel();
  const auto ends_with = [&](const char* s) { return p.name.ends_with(s); };
  // GPT-2: layernorm weights 1, biases 0, other weights N(0, 0.02); the two projections that
  // write into the residual stream are scaled by 1 / sqrt(2 L) so its variance stays put.
  if (ends_with("bias") || (p.name.find("ln_") != std::string::npos && ends_with("weight"))) {
    const float v = ends_with("weight") ? 1.0f : 0.0f;
    for (int64_t i = 0; i < n; ++i) out[i] = v;
    return;
  }
  const double std = ends_with("c_proj.weight") ? 0.02 / std::sqrt(2.0 * static_cast<double>(cfg.layers)) : 0.02;
  Rng rng(derive_seed(seed, static_cast<uint64_t>(index)));
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(std * rng.normal());
}

std::vector<float> gpt_init_all(const GPTConfig& cfg, uint64_t seed) {
  const std::vector<ParamInfo> params = gpt_params(cfg);
  std::vector<float> all(static_cast<size_t>(gpt_num_params(cfg)));
  size_t offset = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    gpt_init_param(cfg, static_cast<int>(i), seed, all.data() + offset);
    offset += static_cast<size_t>(params[i].shape.numel());
  }
  return all;
}

int64_t bind_views(std::vector<Tensor>& slots, const Tensor& flat, const std::vector<ParamInfo>& params,
                   const std::vector<int>& indices, int64_t offset) {
  for (int i : indices) {
    const Shape& shape = params[static_cast<size_t>(i)].shape;
    slots[static_cast<size_t>(i)] = flat.view(offset, shape);
    offset += shape.numel();
  }
  return offset;
}

void place_params(const std::vector<ParamInfo>& params, const std::vector<int>& indices, const float* flat,
                  std::vector<float>& natural) {
  std::vector<int64_t> start(params.size() + 1, 0);
  for (size_t i = 0; i < params.size(); ++i) start[i + 1] = start[i] + params[i].shape.numel();
  for (int i : indices) {
    const int64_t n = params[static_cast<size_t>(i)].shape.numel();
    std::copy_n(flat, n, natural.begin() + start[static_cast<size_t>(i)]);
    flat += n;
  }
}

namespace {
int64_t f32_block(int64_t elements) {
  return static_cast<int64_t>(CachingAllocator::round_size(static_cast<size_t>(elements) * 4));
}

// Units are 0 (embeddings), 1..layers (blocks) and layers + 1 (the head).
void check_unit(const char* function, const GPTConfig& c, int unit) {
  if (unit < 0 || unit > c.layers + 1)
    throw std::invalid_argument(std::string(function) + ": unit " + std::to_string(unit) + " of " +
                                std::to_string(c.layers + 2));
}
}  // namespace

int64_t gpt_unit_activation_bytes(const GPTConfig& c, int unit, int64_t B, int64_t T) {
  check_unit("gpt_unit_activation_bytes", c, unit);
  const int64_t BT = B * T, BTC = BT * c.channels;
  if (unit == 0) return f32_block(BTC);  // the embeddings' sum
  // A block's Acts: nine [B,T,C]-sized tensors (ln1, q, k, v, o, atty, x2, ln2, out), qkv
  // [B,T,3C], fch and fch_gelu [B,T,4C], four [B,T] layernorm statistics, the lse [B,NH,T].
  if (unit <= c.layers)
    return 9 * f32_block(BTC) + f32_block(3 * BTC) + 2 * f32_block(4 * BTC) + 4 * f32_block(BT) +
           f32_block(B * c.heads * T);
  // The head: ln_f's output and statistics, the logits, the per-position losses.
  return f32_block(BTC) + 2 * f32_block(BT) + f32_block(BT * c.vocab) + f32_block(BT);
}

int64_t gpt_unit_weight_grad_bytes(const GPTConfig& c, int unit, int64_t B, int64_t T) {
  check_unit("gpt_unit_weight_grad_bytes", c, unit);
  const int64_t BT = B * T, BTC = BT * c.channels;
  if (unit == 0) return 0;
  if (unit <= c.layers) return 5 * f32_block(BTC) + f32_block(3 * BTC) + 2 * f32_block(4 * BTC);
  return f32_block(BTC) + f32_block(BT * c.vocab);
}

ActivationBytes gpt_activation_bytes(const GPTConfig& c, int64_t B, int64_t T) {
  ActivationBytes a;
  for (int u = 0; u < c.layers + 2; ++u) a.saved += gpt_unit_activation_bytes(c, u, B, T);
  const int64_t BT = B * T, BTC = BT * c.channels;
  a.head_backward = f32_block(BT * c.vocab) /* dlogits */ + 2 * f32_block(BTC) /* dlnf, dresidual */;
  return a;
}

double gpt_step_flops(const GPTConfig& c, int64_t tokens, int64_t T) {
  const double params = static_cast<double>(gpt_num_params(c));
  // Each causal pair (query, key) costs 2 x C for the score and 2 x C for the mixing in
  // forward, twice that in backward: 12 x C per pair per layer.
  const double pairs_per_sequence = static_cast<double>(T) * static_cast<double>(T + 1) / 2;
  const double sequences = static_cast<double>(tokens) / static_cast<double>(T);
  return 6.0 * params * static_cast<double>(tokens) +
         12.0 * static_cast<double>(c.layers * c.channels) * pairs_per_sequence * sequences;
}

double gpt_unit_flops(const GPTConfig& c, int unit, int64_t tokens, int64_t T) {
  check_unit("gpt_unit_flops", c, unit);
  if (unit == 0) return 0;
  double params = 0;
  for (const ParamInfo& p : gpt_params(c))
    if (p.unit == unit) params += static_cast<double>(p.shape.numel());
  const double n = static_cast<double>(tokens);
  if (unit == c.layers + 1) return 6.0 * (params + static_cast<double>(c.vocab * c.channels)) * n;
  const double pairs_per_sequence = static_cast<double>(T) * static_cast<double>(T + 1) / 2;
  return 6.0 * params * n + 12.0 * static_cast<double>(c.channels) * pairs_per_sequence * n / static_cast<double>(T);
}

// What each unit keeps from its forward for its backward. `out` is the unit's output, the
// next unit's input; the next unit's backward frees it.
struct GPT::Acts {
  Tensor out;
  Tensor ln1, mean1, rstd1, qkv, q, k, v, o, lse, atty, x2, ln2, mean2, rstd2, fch, fch_gelu;  // blocks
  Tensor lnf, meanf, rstdf, logits, losses;                                                    // head
};

GPT::GPT(Device& dev, GPTConfig cfg, int64_t B, int64_t T, DType compute, TensorParallel* tp)
    : dev_(dev),
      cfg_(std::move(cfg)),
      B_(B),
      T_(T),
      compute_(compute),
      tp_(tp),
      slice_(tp ? tp->slice() : ModelSlice{}),
      rows_(tp ? tp->residual_rows(B * T) : B * T) {
  if (const std::string why = slice_problem(cfg_, slice_.size); !why.empty())
    throw std::invalid_argument("model " + cfg_.name + ": " + why);
  params_ = gpt_params(cfg_, slice_);
  if (compute_ != DType::f32 && compute_ != DType::bf16)
    throw std::invalid_argument("model " + cfg_.name + ": activations in " + std::string(dtype_name(compute_)) +
                                ", only f32 or bf16");
  if (cfg_.channels % cfg_.heads != 0)
    throw std::invalid_argument("model " + cfg_.name + ": " + std::to_string(cfg_.heads) +
                                " heads do not divide the width " + std::to_string(cfg_.channels));
  if (T < 1 || T > cfg_.max_T)
    throw std::invalid_argument("model " + cfg_.name + ": sequence length " + std::to_string(T) +
                                " is outside 1.." + std::to_string(cfg_.max_T) + " (the context)");
  if (B < 1) throw std::invalid_argument("model " + cfg_.name + ": batch rows " + std::to_string(B) + " < 1");
  unit_params_.resize(static_cast<size_t>(units()));
  for (size_t i = 0; i < params_.size(); ++i) unit_params_[static_cast<size_t>(params_[i].unit)].push_back(static_cast<int>(i));
  weights_.resize(params_.size());
  grads_.resize(params_.size());
  for (int u = 0; u < units(); ++u) acts_.push_back(std::make_unique<Acts>());
  weights_pass_.resize(static_cast<size_t>(units()));
}

// Activations still held (a forward without its backward, the last losses) go back to the pool.
GPT::~GPT() {
  for (auto& a : acts_)
    for (Tensor* t : {&a->out, &a->ln1, &a->mean1, &a->rstd1, &a->qkv, &a->q, &a->k, &a->v, &a->o, &a->lse, &a->atty,
                      &a->x2, &a->ln2, &a->mean2, &a->rstd2, &a->fch, &a->fch_gelu, &a->lnf, &a->meanf, &a->rstdf,
                      &a->logits, &a->losses})
      if (t->defined()) release(*t);
  if (dresidual_.defined()) release(dresidual_);
  for (WeightPass& w : weights_pass_)
    for (Tensor& t : w.kept) dev_.free(t);
}

void GPT::bind_flat(const Tensor& params, const Tensor& grads) {
  std::vector<int> all(params_.size());
  std::iota(all.begin(), all.end(), 0);
  bind_views(weights_, params, params_, all);
  bind_views(grads_, grads, params_, all);
}

void GPT::set_batch(const Tensor& tokens, const Tensor& targets, float dloss, const Tensor& positions) {
  if (!(tokens.shape == Shape{B_, T_}) || !(targets.shape == Shape{B_, T_}))
    throw std::invalid_argument("GPT::set_batch: tokens " + tokens.shape.str() + " and targets " +
                                targets.shape.str() + " must be [" + std::to_string(B_) + ", " + std::to_string(T_) + "]");
  if (positions.defined() && tp_ != nullptr)
    throw std::logic_error("GPT::set_batch: positions (context parallelism) with tensor parallelism are not supported");
  if (positions.defined() && !(positions.shape == Shape{T_}))
    throw std::invalid_argument("GPT::set_batch: positions " + positions.shape.str() + " must be [" +
                                std::to_string(T_) + "]");
  tokens_ = tokens;
  targets_ = targets;
  positions_ = positions;
  dloss_ = dloss;
}

Tensor GPT::act(Shape shape, std::string_view name, Stream& s) { return dev_.empty(shape, compute_, s, name); }

// What stays float32 under mixed precision: layer norms' mean and rstd, attention's log-sum-exp
// and the per-position losses (as PyTorch's layer_norm, FlashAttention and llm.c keep them).
Tensor GPT::stat(Shape shape, std::string_view name, Stream& s) { return dev_.empty(shape, DType::f32, s, name); }

// Backward ops accumulate into their outputs, so activation gradients start at zero.
Tensor GPT::zeros(Shape shape, std::string_view name, Stream& s) {
  Tensor t = act(shape, name, s);
  ops::fill(dev_, s, t, 0.0f);
  return t;
}

void GPT::set_attention(AttentionCore* core) {
  if (core != nullptr && tp_ != nullptr)
    throw std::logic_error("GPT: an attention core (context parallelism) with tensor parallelism is not supported");
  attention_ = core;
}

Shape GPT::residual_shape() const {
  return rows_ == B_ * T_ ? Shape{B_, T_, cfg_.channels} : Shape{rows_, cfg_.channels};
}

Tensor GPT::replaced(Tensor in, Tensor out) {
  if (out.alloc_id != in.alloc_id || out.data != in.data) release(in);
  return out;
}

void GPT::column_forward(Stream& s, const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias) {
  if (tp_ && tp_->fused_column_forward(s, out, x, weight, bias)) return;
  Tensor in = tp_ ? tp_->f_forward(s, x) : x;
  ops::matmul_forward(dev_, s, out, in, weight, bias);
  replaced(in, x);  // a gathered input is gathered again in backward, not kept
}

const Tensor& GPT::w(int index) const {
  const Tensor& t = weights_[static_cast<size_t>(index)];
  if (!t.defined()) throw std::logic_error("GPT: parameter " + params_[static_cast<size_t>(index)].name + " is not bound");
  return t;
}

void GPT::forward(int unit, Stream& s) {
  if (unit == 0) forward_embeddings(s);
  else if (unit <= cfg_.layers) forward_block(unit - 1, s);
  else forward_head(s);
}

void GPT::backward(int unit, Stream& s) {
  WeightPass& w = weights_pass_.at(static_cast<size_t>(unit));
  if (!w.gemms.empty())
    throw std::logic_error("GPT::backward: unit " + std::to_string(unit) +
                           "'s weight gradients of the last backward are still queued: run backward_weights first");
  if (unit == 0) backward_embeddings(s);
  else if (unit <= cfg_.layers) backward_block(unit - 1, s);
  else backward_head(s);
  w = std::exchange(queued_, WeightPass{});
}

void GPT::backward_weights(int unit, Stream& s) {
  WeightPass w = std::exchange(weights_pass_.at(static_cast<size_t>(unit)), WeightPass{});
  for (const WeightGEMM& g : w.gemms) ops::matmul_backward_weight(dev_, s, g.dweight, g.dbias, g.dout, g.inp);
  for (Tensor& t : w.kept) dev_.free(t);
}

void GPT::weight_grad(Stream& s, const Tensor& dweight, const Tensor& dbias, const Tensor& dout, const Tensor& inp) {
  if (!split_backward_) return ops::matmul_backward_weight(dev_, s, dweight, dbias, dout, inp);
  if (!dweight.defined() && !dbias.defined()) return;  // frozen, no bias: nothing to run
  // The residual stream's gradient changes on as B goes down the block: W reads a copy of it.
  Tensor out = dout;
  if (dresidual_.defined() && dout.alloc_id == dresidual_.alloc_id) {
    out = act(dout.shape, "dresidual (kept for W)", s);
    ops::copy(dev_, s, out, dout);
    queued_.kept.push_back(out);
  }
  queued_.gemms.push_back({dweight, dbias, out, inp});
}

void GPT::release(Tensor& t) {
  for (const WeightGEMM& g : queued_.gemms)
    if (t.alloc_id == g.dout.alloc_id || t.alloc_id == g.inp.alloc_id) {
      queued_.kept.push_back(t);
      t = Tensor{};
      return;
    }
  dev_.free(t);
}

void GPT::set_input(int unit, const Tensor& x) {
  if (unit < 1 || unit >= units()) throw std::invalid_argument("GPT::set_input: unit " + std::to_string(unit) + " has no input to set");
  Tensor& in = acts_[static_cast<size_t>(unit) - 1]->out;
  if (in.defined()) throw std::logic_error("GPT::set_input: unit " + std::to_string(unit) + "'s input is set already");
  in = x;
}

Tensor GPT::take_output(int unit) {
  Tensor out = acts_.at(static_cast<size_t>(unit))->out;
  if (!out.defined()) throw std::logic_error("GPT::take_output: unit " + std::to_string(unit) + " has no output");
  acts_[static_cast<size_t>(unit)]->out = Tensor{};
  return out;
}

void GPT::set_output_grad(const Tensor& d) {
  if (dresidual_.defined()) throw std::logic_error("GPT::set_output_grad: a gradient is set already");
  dresidual_ = d;
}

Tensor GPT::take_input_grad() {
  Tensor d = dresidual_;
  if (!d.defined()) throw std::logic_error("GPT::take_input_grad: no gradient: run the stage's backward first");
  dresidual_ = Tensor{};
  return d;
}

void GPT::forward_embeddings(Stream& s) {
  Acts& a = *acts_[0];
  if (tp_) {
    a.out = tp_->embedding_forward(s, tokens_, w(0), w(1).view(0, {T_, cfg_.channels}));
    return;
  }
  a.out = act({B_, T_, cfg_.channels}, "embeddings.out", s);
  if (positions_.defined())
    ops::embedding_forward(dev_, s, a.out, tokens_, w(0), w(1), positions_);
  else
    ops::embedding_forward(dev_, s, a.out, tokens_, w(0), w(1).view(0, {T_, cfg_.channels}));
}

// Under tensor parallelism every matmul computes this rank's slice: the qkv projection and the
// MLP's first matmul its columns (column-parallel, whole input through f), the two output
// projections their partial sums over its columns of the input (row-parallel, summed by g, the
// bias added once, after the sum). The residual stream keeps `rows_` rows.
void GPT::forward_block(int l, Stream& s) {
  const int64_t C = cfg_.channels, NH = slice_.heads(cfg_), hs = C / cfg_.heads, Ca = NH * hs,
                H = slice_.hidden(cfg_), N = B_ * T_, R = rows_;
  const int p = 2 + kParamsPerBlock * l;  // this block's first parameter
  const Tensor& x = acts_[static_cast<size_t>(l)]->out;
  Acts& a = *acts_[static_cast<size_t>(l) + 1];
  const Tensor x2d = x.view(0, {R, C});
  // The g (then the bias) of a row-parallel matmul; f is inside column_forward.
  const auto g = [&](Tensor partial, int bias) {
    if (!tp_) return partial;
    Tensor sum = replaced(partial, tp_->g_forward(s, partial));
    ops::bias_forward(dev_, s, sum, w(bias));
    return sum;
  };
  const auto row_bias = [&](int bias) { return tp_ ? Tensor{} : w(bias); };

  // Attention: x2 = x + proj(attention(ln1(x)))
  a.ln1 = act({R, C}, "ln_1", s), a.mean1 = stat({R}, "ln_1.mean", s), a.rstd1 = stat({R}, "ln_1.rstd", s);
  ops::layernorm_forward(dev_, s, a.ln1, a.mean1, a.rstd1, x2d, w(p), w(p + 1));
  a.qkv = act({N, 3 * Ca}, "qkv", s);
  column_forward(s, a.qkv, a.ln1, w(p + 2), w(p + 3));
  a.q = act({B_, NH, T_, hs}, "q", s), a.k = act({B_, NH, T_, hs}, "k", s), a.v = act({B_, NH, T_, hs}, "v", s);
  ops::qkv_split(dev_, s, a.q, a.k, a.v, a.qkv.view(0, {B_, T_, 3 * Ca}), static_cast<int>(NH));
  a.o = act({B_, NH, T_, hs}, "attention.out", s), a.lse = stat({B_, NH, T_}, "attention.lse", s);
  if (attention_)
    attention_->forward(s, l, a.o, a.lse, a.q, a.k, a.v);
  else
    ops::attention_forward(dev_, s, a.o, a.lse, a.q, a.k, a.v, ops::AttentionMask::causal);
  a.atty = act({N, Ca}, "attention.merged", s);
  ops::heads_merge(dev_, s, a.atty.view(0, {B_, T_, Ca}), a.o);
  Tensor proj = act({N, C}, "attention.proj", s);
  ops::matmul_forward(dev_, s, proj, a.atty, w(p + 4), row_bias(p + 5));
  proj = g(proj, p + 5);
  a.x2 = act({R, C}, "residual.attention", s);
  ops::residual_forward(dev_, s, a.x2, x2d, proj);
  release(proj);

  // MLP: out = x2 + fcproj(gelu(fc(ln2(x2))))
  a.ln2 = act({R, C}, "ln_2", s), a.mean2 = stat({R}, "ln_2.mean", s), a.rstd2 = stat({R}, "ln_2.rstd", s);
  ops::layernorm_forward(dev_, s, a.ln2, a.mean2, a.rstd2, a.x2, w(p + 6), w(p + 7));
  a.fch = act({N, H}, "mlp.fc", s);
  column_forward(s, a.fch, a.ln2, w(p + 8), w(p + 9));
  a.fch_gelu = act({N, H}, "mlp.gelu", s);
  ops::gelu_forward(dev_, s, a.fch_gelu, a.fch);
  Tensor fcproj = act({N, C}, "mlp.proj", s);
  ops::matmul_forward(dev_, s, fcproj, a.fch_gelu, w(p + 10), row_bias(p + 11));
  fcproj = g(fcproj, p + 11);
  a.out = act(residual_shape(), "block.out", s);
  ops::residual_forward(dev_, s, a.out.view(0, {R, C}), a.x2, fcproj);
  release(fcproj);
}

void GPT::forward_head(Stream& s) {
  const int64_t C = cfg_.channels, N = B_ * T_, R = rows_, V = slice_.vocab_rows(cfg_);
  const int p = 2 + kParamsPerBlock * static_cast<int>(cfg_.layers);
  const Tensor x = acts_[static_cast<size_t>(cfg_.layers)]->out.view(0, {R, C});
  Acts& a = *acts_.back();
  a.lnf = act({R, C}, "ln_f", s), a.meanf = stat({R}, "ln_f.mean", s), a.rstdf = stat({R}, "ln_f.rstd", s);
  ops::layernorm_forward(dev_, s, a.lnf, a.meanf, a.rstdf, x, w(p), w(p + 1));
  // The head is column-parallel over the vocabulary: this rank's columns of the logits.
  a.logits = act({B_, T_, V}, "logits", s);
  column_forward(s, a.logits.view(0, {N, V}), a.lnf, w(0), Tensor{});  // tied to wte
  const auto losses_of = [&](const Tensor& losses) {
    if (tp_)
      tp_->loss_forward(s, losses, a.logits, targets_);
    else
      ops::crossentropy_forward(dev_, s, losses, a.logits, targets_);
  };
  // The losses add up until mean_loss reads them: one micro-batch's directly, a later one's
  // through a temporary (one more small kernel per micro-batch).
  if (heads_since_loss_++ == 0) {
    a.losses = stat({B_, T_}, "losses", s);
    losses_of(a.losses);
  } else {
    Tensor losses = stat({B_, T_}, "losses (micro-batch)", s);
    losses_of(losses);
    ops::add_(dev_, s, a.losses, losses);
    release(losses);
  }
}

void GPT::backward_head(Stream& s) {
  const int64_t C = cfg_.channels, N = B_ * T_, R = rows_, V = slice_.vocab_rows(cfg_);
  const int p = 2 + kParamsPerBlock * static_cast<int>(cfg_.layers);
  Acts& a = *acts_.back();
  Acts& in = *acts_[static_cast<size_t>(cfg_.layers)];
  Tensor dlogits = act({B_, T_, V}, "dlogits", s);
  if (tp_)
    tp_->loss_backward(s, dlogits, a.logits, targets_, dloss_);
  else
    ops::crossentropy_backward(dev_, s, dlogits, a.logits, targets_, dloss_);
  Tensor lnf = tp_ ? tp_->f_forward(s, a.lnf) : a.lnf;
  Tensor dlnf = zeros({N, C}, "dlnf", s);
  ops::matmul_backward_input(dev_, s, dlnf, dlogits.view(0, {N, V}), w(0));
  weight_grad(s, grads_[0], Tensor{}, dlogits.view(0, {N, V}), lnf);
  replaced(lnf, a.lnf);
  if (tp_) dlnf = replaced(dlnf, tp_->f_backward(s, dlnf));
  // The residual stream's gradient starts here and flows back through every block.
  dresidual_ = zeros(residual_shape(), "dresidual", s);
  ops::layernorm_backward(dev_, s, dresidual_.view(0, {R, C}), grads_[static_cast<size_t>(p)],
                          grads_[static_cast<size_t>(p) + 1], dlnf, in.out.view(0, {R, C}), w(p), a.meanf, a.rstdf);
  for (Tensor* t : {&dlogits, &dlnf, &a.lnf, &a.meanf, &a.rstdf, &a.logits, &in.out}) release(*t);
}

void GPT::backward_block(int l, Stream& s) {
  const int64_t C = cfg_.channels, NH = slice_.heads(cfg_), hs = C / cfg_.heads, Ca = NH * hs,
                H = slice_.hidden(cfg_), N = B_ * T_, R = rows_;
  const size_t p = 2 + kParamsPerBlock * static_cast<size_t>(l);
  const auto g = [&](size_t i) -> const Tensor& { return grads_[p + i]; };
  const auto wt = [&](size_t i) -> const Tensor& { return w(static_cast<int>(p + i)); };
  Acts& a = *acts_[static_cast<size_t>(l) + 1];
  Acts& in = *acts_[static_cast<size_t>(l)];
  const Tensor dres = dresidual_.view(0, {R, C});  // d(out) on entry, d(x) on exit
  // Tensor parallelism's operators backwards: g's (the row-parallel output's gradient, the bias's
  // taken apart), f's (the column-parallel input's partial gradients summed), and f's forward
  // again for the input a weight's gradient needs (gathered anew under sequence parallelism).
  const auto g_backward = [&](size_t bias) {
    if (!tp_) return dres;
    ops::bias_backward(dev_, s, g(bias), dres);
    return tp_->g_backward(s, dres);
  };
  const auto f_backward = [&](Tensor dinput) { return tp_ ? replaced(dinput, tp_->f_backward(s, dinput)) : dinput; };
  const auto f_again = [&](const Tensor& x) { return tp_ ? tp_->f_forward(s, x) : x; };
  const auto row_bias = [&](size_t bias) { return tp_ ? Tensor{} : g(bias); };

  // MLP, backwards. The residual passes dres straight through to x2; the branch adds to it.
  Tensor dfcproj = g_backward(11);
  Tensor dgelu = zeros({N, H}, "dgelu", s);
  ops::matmul_backward_input(dev_, s, dgelu, dfcproj, wt(10));
  weight_grad(s, g(10), row_bias(11), dfcproj, a.fch_gelu);
  replaced(dfcproj, dres);
  Tensor dfch = zeros({N, H}, "dfch", s);
  ops::gelu_backward(dev_, s, dfch, a.fch, dgelu);
  Tensor ln2 = f_again(a.ln2);
  Tensor dln2 = zeros({N, C}, "dln2", s);
  ops::matmul_backward_input(dev_, s, dln2, dfch, wt(8));
  weight_grad(s, g(8), g(9), dfch, ln2);
  replaced(ln2, a.ln2);
  dln2 = f_backward(dln2);
  ops::layernorm_backward(dev_, s, dres, g(6), g(7), dln2, a.x2, wt(6), a.mean2, a.rstd2);

  // Attention, backwards: dres is now d(x2).
  Tensor dproj = g_backward(5);
  Tensor datty = zeros({N, Ca}, "datty", s);
  ops::matmul_backward_input(dev_, s, datty, dproj, wt(4));
  weight_grad(s, g(4), row_bias(5), dproj, a.atty);
  replaced(dproj, dres);
  Tensor d_o = zeros({B_, NH, T_, hs}, "d_o", s);
  ops::heads_merge_backward(dev_, s, d_o, datty.view(0, {B_, T_, Ca}));
  Tensor dq = zeros({B_, NH, T_, hs}, "dq", s);
  Tensor dk = zeros({B_, NH, T_, hs}, "dk", s);
  Tensor dv = zeros({B_, NH, T_, hs}, "dv", s);
  if (attention_)
    attention_->backward(s, l, dq, dk, dv, d_o, a.q, a.k, a.v, a.o, a.lse);
  else
    ops::attention_backward(dev_, s, dq, dk, dv, d_o, a.q, a.k, a.v, a.o, a.lse, ops::AttentionMask::causal);
  Tensor dqkv = zeros({N, 3 * Ca}, "dqkv", s);
  ops::qkv_split_backward(dev_, s, dqkv.view(0, {B_, T_, 3 * Ca}), dq, dk, dv, static_cast<int>(NH));
  Tensor ln1 = f_again(a.ln1);
  Tensor dln1 = zeros({N, C}, "dln1", s);
  ops::matmul_backward_input(dev_, s, dln1, dqkv, wt(2));
  weight_grad(s, g(2), g(3), dqkv, ln1);
  replaced(ln1, a.ln1);
  dln1 = f_backward(dln1);
  ops::layernorm_backward(dev_, s, dres, g(0), g(1), dln1, in.out.view(0, {R, C}), wt(0), a.mean1, a.rstd1);

  for (Tensor* t : {&dgelu, &dfch, &dln2, &datty, &d_o, &dq, &dk, &dv, &dqkv, &dln1, &a.ln1, &a.mean1, &a.rstd1,
                    &a.qkv, &a.q, &a.k, &a.v, &a.o, &a.lse, &a.atty, &a.x2, &a.ln2, &a.mean2, &a.rstd2, &a.fch,
                    &a.fch_gelu, &in.out})
    release(*t);
}

void GPT::backward_embeddings(Stream& s) {
  if (tp_)
    tp_->embedding_backward(s, grads_[0], grads_[1].defined() ? grads_[1].view(0, {T_, cfg_.channels}) : Tensor{},
                            dresidual_, tokens_);
  else if (positions_.defined())
    ops::embedding_backward(dev_, s, grads_[0], grads_[1], dresidual_, tokens_, positions_);
  else
    ops::embedding_backward(dev_, s, grads_[0], grads_[1].defined() ? grads_[1].view(0, {T_, cfg_.channels}) : Tensor{},
                            dresidual_, tokens_);
  release(dresidual_);
}

double GPT::mean_loss(Stream& s) {
  Tensor& losses = acts_.back()->losses;
  if (!losses.defined()) throw std::logic_error("GPT::mean_loss: run the head's forward first");
  double mean = std::nan("");
  if (dev_.computes()) {
    Tensor host = dev_.host_empty(losses.shape, DType::f32, "losses (host)");
    dev_.memcpy(s, host, losses);
    dev_.synchronize(s);
    double sum = 0;
    const int64_t n = host.numel();
    for (int64_t i = 0; i < n; ++i) sum += host.f32()[i];
    dev_.host_free(host);
    mean = sum / static_cast<double>(n * heads_since_loss_);
  }
  release(losses);
  heads_since_loss_ = 0;
  return mean;
}

}  // namespace shardlab
