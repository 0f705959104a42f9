// The GPT of model.h: parameter counts, initialisation, FLOPs, memory accounting without
// memory, the wiring of every unit's backward (a directional derivative), the reference
// trainer reaching the data's loss floor, the errors for bad shapes, and a CUDA implementation
// behind every op.
#include <catch2/catch.hpp>

#include <cmath>
#include <numeric>
#include <set>
#include <string>
#include <tuple>

#include "model/attention.h"
#include "model/data.h"
#include "host_device.h"
#include "model/model.h"
#include "model/ops.h"
#include "model/reference.h"
#include "model/rng.h"
#include "device/sim_device.h"

using namespace shardlab;

namespace {

// The tiny GPT on a device of type D, bound to flat parameters and gradients, with one batch of
// B x T tokens from a Markov chain copied in and set.
template <class D>
struct TinyGPT {
  TinyGPT(int64_t batch, int64_t seq, uint64_t seed) : B(batch), T(seq) {
    model.bind_flat(params, grads);
    const MarkovChain chain(static_cast<int>(cfg.vocab), 4, seed);
    const Batch b = Sampler(chain, B, T, 0, 1, seed).global(0);
    copy_to_device(dev, s, tokens, b.tokens.data());
    copy_to_device(dev, s, targets, b.targets.data());
    model.set_batch(tokens, targets, 1.0f / static_cast<float>(B * T));
  }

  const GPTConfig cfg = GPTConfig::preset("tiny");
  const int64_t B, T, n = gpt_num_params(cfg);
  D dev{load_profile("h100-8"), ComputeMode::real, 0, 1};
  Stream& s = dev.compute_stream();
  GPT model{dev, cfg, B, T};
  Tensor params = dev.empty({n}, DType::f32, s, "params"), grads = dev.empty({n}, DType::f32, s, "grads");
  Tensor tokens = dev.empty({B, T}, DType::i32, s, "tokens"), targets = dev.empty({B, T}, DType::i32, s, "targets");
};

// GPT-2 small on a simulated device that skips the math (time, FLOPs and memory still counted),
// bound to flat parameters and gradients, with a batch of B x 1024 tokens set.
struct Gpt2SmallSkip {
  explicit Gpt2SmallSkip(int64_t batch) : B(batch) {
    model.bind_flat(params, grads);
    model.set_batch(tokens, targets, 1.0f / static_cast<float>(B * T));
  }

  const GPTConfig cfg = GPTConfig::preset("gpt2-small");
  const int64_t B, T = 1024, n = gpt_num_params(cfg);
  SimDevice dev{load_profile("h100-8"), ComputeMode::skip, 0, 1};
  Stream& s = dev.compute_stream();
  GPT model{dev, cfg, B, T};
  Tensor params = dev.empty({n}, DType::f32, s, "params"), grads = dev.empty({n}, DType::f32, s, "grads");
  Tensor tokens = dev.empty({B, T}, DType::i32, s, "tokens"), targets = dev.empty({B, T}, DType::i32, s, "targets");
};

}  // namespace

TEST_CASE("model: gpt2-small has GPT-2's 124,439,808 parameters (tied head), 7,087,872 per block", "[model]") {
  const GPTConfig cfg = GPTConfig::preset("gpt2-small");
  CHECK(gpt_num_params(cfg) == 124439808);
  int64_t block = 0;
  for (const auto& p : gpt_params(cfg))
    if (p.unit == 1) block += p.shape.numel();
  CHECK(block == 7087872);
  const auto params = gpt_params(cfg);
  CHECK(params.front().name == "wte.weight");
  CHECK(params[2].name == "h.0.ln_1.weight");
  CHECK(params.back().name == "ln_f.bias");
  CHECK(params.size() == 2 + 12 * 12 + 2);
}

TEST_CASE("model: units partition the parameters, the presets and their errors", "[model]") {
  SimDevice dev(load_profile("h100-8"), ComputeMode::skip, 0, 1);
  GPT model(dev, GPTConfig::preset("tiny"), 2, 16);
  CHECK(model.units() == 4);
  std::vector<int> seen;
  for (int u = 0; u < model.units(); ++u)
    for (int i : model.params_of_unit(u)) seen.push_back(i);
  std::sort(seen.begin(), seen.end());
  std::vector<int> all(model.params().size());
  std::iota(all.begin(), all.end(), 0);
  CHECK(seen == all);
  CHECK_THROWS_WITH(GPTConfig::preset("gpt5"), "--model gpt5: no such model; presets: tiny, tiny-12h, tiny-8l, gpt2-small, gpt2-medium, gpt-1b, gpt-15b, gpt2-small-128k");
  GPTConfig odd = GPTConfig::preset("tiny");
  odd.heads = 3;
  CHECK_THROWS_WITH(GPT(dev, odd, 2, 16), Catch::Contains("3 heads do not divide the width 32"));
  CHECK_THROWS_WITH(GPT(dev, GPTConfig::preset("tiny"), 2, 65), Catch::Contains("sequence length 65 is outside 1..64"));
  const MarkovChain chain(32, 4, 1);
  CHECK_THROWS_WITH(Sampler(chain, 10, 16, 0, 4, 1), Catch::Contains("global batch 10 does not divide among 4 ranks"));
}

TEST_CASE("model: initial parameters depend on the seed only", "[model]") {
  const GPTConfig cfg = GPTConfig::preset("tiny");
  const auto a = gpt_init_all(cfg, 7), b = gpt_init_all(cfg, 7), c = gpt_init_all(cfg, 8);
  CHECK(a == b);
  CHECK(a != c);
  CHECK(a.size() == static_cast<size_t>(gpt_num_params(cfg)));
  // wte ~ N(0, 0.02): its sample standard deviation is close.
  const int64_t n = cfg.vocab * cfg.channels;
  double sq = 0;
  for (int64_t i = 0; i < n; ++i) sq += a[static_cast<size_t>(i)] * a[static_cast<size_t>(i)];
  CHECK(std::sqrt(sq / static_cast<double>(n)) == Approx(0.02).epsilon(0.1));
}

// Unit by unit: what each unit's kernels declare over its forward and backward is its share of
// the count (chapter 11 balances pipeline stages by it); the units add up to the whole count
// less wpe's lookup.
TEST_CASE("model: each unit's declared FLOPs match gpt_unit_flops, and the units add up to the step's count", "[model]") {
  Gpt2SmallSkip small(2);
  auto& [cfg, B, T, n, dev, s, model, params, grads, tokens, targets] = small;
  std::vector<double> declared(static_cast<size_t>(model.units()));
  for (int u = 0; u < model.units(); ++u) {
    const double before = dev.trace().total_flops();
    model.forward(u, s);
    declared[static_cast<size_t>(u)] = dev.trace().total_flops() - before;
  }
  double sum = 0;
  for (int u = model.units() - 1; u >= 0; --u) {
    const double before = dev.trace().total_flops();
    model.backward(u, s);
    declared[static_cast<size_t>(u)] += dev.trace().total_flops() - before;
    INFO("unit " << u);
    const double counted = gpt_unit_flops(cfg, u, B * T, T);
    sum += counted;
    if (u == 0) CHECK(declared[0] < 0.01 * gpt_unit_flops(cfg, 1, B * T, T));  // lookups, next to a block
    else CHECK(declared[static_cast<size_t>(u)] == Approx(counted).epsilon(0.02));
  }
  const double wpe = static_cast<double>(cfg.max_T * cfg.channels);
  CHECK(sum == Approx(gpt_step_flops(cfg, B * T, T) - 6.0 * wpe * static_cast<double>(B * T)).epsilon(1e-12));
  CHECK_THROWS_WITH(gpt_unit_flops(cfg, 14, B * T, T), "gpt_unit_flops: unit 14 of 14");
}

// gpt2-small, one step under --compute skip: every kernel's declared FLOPs add up to the
// standard count, and the memory counters move although no real memory is used.
TEST_CASE("model: gpt2-small FLOPs per step match 6 N D + attention, skip mode accounts memory it never allocates", "[model]") {
  Gpt2SmallSkip small(4);
  auto& [cfg, B, T, n, dev, s, model, params, grads, tokens, targets] = small;

  const double before = dev.trace().total_flops();
  for (int u = 0; u < model.units(); ++u) model.forward(u, s);
  const size_t after_forward = dev.allocator().allocated();
  for (int u = model.units() - 1; u >= 0; --u) model.backward(u, s);
  const double flops = dev.trace().total_flops() - before;
  CHECK(flops == Approx(gpt_step_flops(cfg, B * T, T)).epsilon(0.01));

  // Activations: the logits alone are B x T x V floats; all of it accounted, none real.
  CHECK(after_forward > static_cast<size_t>(2 * n * 4) + static_cast<size_t>(B * T * cfg.vocab * 4));
  CHECK(params.data == nullptr);
  CHECK(dev.allocator().peak_allocated() >= after_forward);
  CHECK(std::isnan(model.mean_loss(s)));
  for (Tensor* t : {&tokens, &targets, &grads, &params}) dev.free(*t);
}

// Backward against the forward: for a random direction d, (L(w + e d) - L(w - e d)) / 2e must
// equal grad . d. One check through every unit, the residual stream and the tied head.
TEST_CASE("model: the gradient of the tiny GPT matches a directional finite difference", "[model]") {
  TinyGPT<SimDevice> tiny(2, 16, 3);
  auto& [cfg, B, T, n, dev, s, model, params, grads, tokens, targets] = tiny;
  const std::vector<float> w0 = gpt_init_all(cfg, 3);

  auto loss_at = [&](const std::vector<float>& w) {
    copy_to_device(dev, s, params, w.data());
    for (int u = 0; u < model.units(); ++u) model.forward(u, s);
    const double loss = model.mean_loss(s);
    for (int u = model.units() - 1; u >= 0; --u) model.backward(u, s);  // frees the activations
    return loss;
  };
  ops::fill(dev, s, grads, 0.0f);
  loss_at(w0);
  std::vector<float> g(static_cast<size_t>(n));
  copy_to_host(dev, s, g.data(), grads);

  Rng rng(11);
  std::vector<float> d(static_cast<size_t>(n));
  for (auto& x : d) x = static_cast<float>(rng.normal());
  double g_dot_d = 0;
  for (size_t i = 0; i < d.size(); ++i) g_dot_d += static_cast<double>(g[i]) * d[i];
  const float eps = 1e-3f;
  std::vector<float> plus = w0, minus = w0;
  for (size_t i = 0; i < d.size(); ++i) plus[i] += eps * d[i], minus[i] -= eps * d[i];
  const double fd = (loss_at(plus) - loss_at(minus)) / (2.0 * eps);
  CHECK(fd == Approx(g_dot_d).epsilon(2e-2));
  CHECK(dev.race_reports().empty());
  for (Tensor* t : {&tokens, &targets, &grads, &params}) dev.free(*t);
  // Every activation was freed by the backward that used it, and the losses by the mean_loss
  // that read them: nothing is left.
  CHECK(dev.allocator().allocated() == 0);
}

// Zero-bubble pipelines' split backward (chapter 11): B of every unit, then W of every unit,
// gives the gradients of the whole backward, with the FLOPs moved from B to W and the
// tensors W reads held from one to the other, and nothing left when W is done.
TEST_CASE("model: split_backward's B then W equals backward bit for bit, and W frees what B kept", "[model]") {
  TinyGPT<SimDevice> tiny(2, 16, 5);
  auto& [cfg, B, T, n, dev, s, model, params, grads, tokens, targets] = tiny;
  const std::vector<float> w0 = gpt_init_all(cfg, 5);
  copy_to_device(dev, s, params, w0.data());
  const auto gradients = [&](bool split) {
    model.split_backward(split);
    ops::fill(dev, s, grads, 0.0f);
    for (int u = 0; u < model.units(); ++u) model.forward(u, s);
    model.mean_loss(s);
    const double before = dev.trace().total_flops();
    for (int u = model.units() - 1; u >= 0; --u) model.backward(u, s);
    const double b_flops = dev.trace().total_flops() - before;
    const size_t kept = dev.allocator().allocated();
    if (split) {
      CHECK_THROWS_WITH(model.backward(1, s), Catch::Matchers::Contains("run backward_weights first"));
      for (int u = model.units() - 1; u >= 0; --u) model.backward_weights(u, s);
    }
    std::vector<float> g(static_cast<size_t>(n));
    copy_to_host(dev, s, g.data(), grads);
    return std::tuple{g, b_flops, kept};
  };
  const auto [whole, whole_flops, whole_kept] = gradients(false);
  const auto [split, b_flops, b_kept] = gradients(true);
  // The tied wte adds up the head's W and the embeddings' B in the other order: the same sum,
  // rounded apart. Every other gradient is the same sum in the same order.
  const int64_t wte = cfg.vocab * cfg.channels;
  REQUIRE(split.size() == whole.size());
  for (size_t i = 0; i < split.size(); ++i) {
    INFO("gradient element " << i);
    if (static_cast<int64_t>(i) < wte) REQUIRE(split[i] == Approx(whole[i]).margin(1e-6));
    else REQUIRE(split[i] == whole[i]);
  }
  // B leaves the weight GEMMs (a third of the matmuls' backward) to W...
  CHECK(b_flops < 0.75 * whole_flops);
  // ...and holds what they read until W, as gpt_unit_weight_grad_bytes counts it.
  int64_t promised = 0;
  for (int u = 0; u < model.units(); ++u) promised += gpt_unit_weight_grad_bytes(cfg, u, B, T);
  CHECK(b_kept - whole_kept == static_cast<size_t>(promised));
  CHECK(promised > 0);
  CHECK(dev.race_reports().empty());
  for (Tensor* t : {&tokens, &targets, &grads, &params}) dev.free(*t);
  CHECK(dev.allocator().allocated() == 0);
}

TEST_CASE("model: the reference trainer is deterministic and the tiny GPT learns the chain to within 5% of its loss floor", "[model][train]") {
  TrainSetup setup;
  setup.steps = 3;
  const ReferenceRun a = train_reference(setup), b = train_reference(setup);
  CHECK(a.params == b.params);
  CHECK(a.losses == b.losses);
  CHECK(a.losses[0] == Approx(std::log(32.0)).epsilon(0.05));  // untrained: about uniform over 32 tokens

  setup.steps = 600;
  const ReferenceRun trained = train_reference(setup);
  const double last = std::accumulate(trained.losses.end() - 10, trained.losses.end(), 0.0) / 10;
  INFO("loss floor " << trained.loss_floor << ", mean loss of the last 10 steps " << last);
  CHECK(last < 1.05 * trained.loss_floor);
  CHECK(last > 0.9 * trained.loss_floor);  // nobody beats the entropy rate by much on 512 tokens
}

#ifdef SHARDLAB_WITH_CUDA
// A real GPU stops a chapter at the first op with no CUDA body. A device that records what it
// launches finds one here, with no GPU: a training step of the tiny GPT, then the ops no model
// step calls (the chapters' copy, add_ and scale_: the hand ring's reduction, FSDP's gradient
// scaling; attention_merge, for context-parallel attention).
TEST_CASE("model: every op a training step launches, and every other op, has a CUDA implementation", "[model]") {
  TinyGPT<HostDevice> tiny(2, 8, 1);
  auto& [cfg, B, T, n, dev, s, model, params, grads, tokens, targets] = tiny;
  Tensor m = dev.empty({n}, DType::f32, s, "m"), v = dev.empty({n}, DType::f32, s, "v");
  copy_to_device(dev, s, params, gpt_init_all(cfg, 1).data());
  for (const Tensor& t : {grads, m, v}) ops::fill(dev, s, t, 0.0f);
  for (int u = 0; u < model.units(); ++u) model.forward(u, s);
  CHECK(std::isfinite(model.mean_loss(s)));
  for (int u = model.units() - 1; u >= 0; --u) model.backward(u, s);
  ops::adamw(dev, s, params, grads, m, v, 1, ops::AdamW{});

  ops::copy(dev, s, m, grads);
  ops::add_(dev, s, m, grads);
  ops::scale_(dev, s, m, 0.5f);
  ops::divide_(dev, s, m, 3.0f);
  Tensor out = dev.empty({1, 2, 4, 8}, DType::f32, s, "out"), lse = dev.empty({1, 2, 4}, DType::f32, s, "lse");
  Tensor out_b = dev.empty({1, 2, 4, 8}, DType::f32, s, "out_b"), lse_b = dev.empty({1, 2, 4}, DType::f32, s, "lse_b");
  for (const Tensor& t : {out, lse, out_b, lse_b}) ops::fill(dev, s, t, 0.25f);
  ops::attention_merge(dev, s, out, lse, out_b, lse_b);

  const std::set<std::string> every_op = {
      "fill", "copy", "add_", "scale_", "divide_", "residual_forward", "embedding_forward", "embedding_backward",
      "layernorm_forward", "layernorm_backward", "matmul_forward", "matmul_backward_input", "matmul_backward_weight",
      "gelu_forward", "gelu_backward", "crossentropy_forward", "crossentropy_backward", "adamw", "attention_forward",
      "attention_backward", "attention_merge", "qkv_split", "qkv_split_backward", "heads_merge", "heads_merge_backward"};
  CHECK(dev.launched == every_op);
  CHECK(dev.launched_without_cuda == std::set<std::string>{});  // names any op that lacks one
}
#endif

TEST_CASE("model: frozen_params picks parameters by parts of their names and names a part that matches none", "[model]") {
  const GPTConfig cfg = GPTConfig::preset("tiny");  // 2 blocks of 12 parameters
  const std::vector<ParamInfo> params = gpt_params(cfg);
  const auto names = [&](const std::vector<bool>& frozen) {
    std::vector<std::string> out;
    for (size_t i = 0; i < frozen.size(); ++i)
      if (frozen[i]) out.push_back(params[i].name);
    return out;
  };
  CHECK(names(frozen_params(cfg, "")).empty());
  CHECK(names(frozen_params(cfg, "wte,wpe")) == std::vector<std::string>{"wte.weight", "wpe.weight"});
  CHECK(names(frozen_params(cfg, "h.1.attn.c_proj")) ==
        std::vector<std::string>{"h.1.attn.c_proj.weight", "h.1.attn.c_proj.bias"});
  CHECK(names(frozen_params(cfg, "h.0.")).size() == 12);
  CHECK(names(frozen_params(cfg, "attn")).size() == 8);
  CHECK(names(frozen_params(cfg, "ln_f,ln_f")) == std::vector<std::string>{"ln_f.weight", "ln_f.bias"});
  CHECK_THROWS_WITH(frozen_params(cfg, "attn,nosuch"), Catch::Contains("no parameter of tiny has \"nosuch\" in its name"));
}
