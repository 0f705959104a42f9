#include "model/reference.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>

#include "model/data.h"
#include "model/model.h"
#include "device/sim_device.h"

namespace shardlab {

// The batch with its sequences in the other order (rows reversed).
static Batch reversed_rows(Batch b) {
  for (int64_t r = 0; r < b.rows / 2; ++r)
    for (std::vector<int32_t>* v : {&b.tokens, &b.targets})
      std::swap_ranges(v->begin() + r * b.T, v->begin() + (r + 1) * b.T, v->begin() + (b.rows - 1 - r) * b.T);
  return b;
}

ReferenceRun train_reference(const TrainSetup& setup, const std::function<void(int64_t)>& after_step, BatchOrder order) {
  const GPTConfig cfg = GPTConfig::preset(setup.model);
  const bool bf16 = setup.param_dtype == DType::bf16;
  if (!bf16 && setup.param_dtype != DType::f32)
    throw std::invalid_argument("train_reference: parameters in " + std::string(dtype_name(setup.param_dtype)) +
                                ", only f32 or bf16");
  const int64_t shards = bf16 ? setup.grad_shards : 1;
  if (shards < 1 || setup.global_batch % shards != 0)
    throw std::invalid_argument("train_reference: " + std::to_string(shards) + " gradient shards do not divide the batch of " +
                                std::to_string(setup.global_batch));
  const int64_t rows = setup.global_batch / shards;
  SimDevice dev(load_profile("h100-8"), ComputeMode::real, 0, 1);
  Stream& s = dev.compute_stream();
  GPT model(dev, cfg, rows, setup.T, setup.param_dtype);
  const MarkovChain chain(static_cast<int>(cfg.vocab), setup.fanout, setup.seed);
  const Sampler sampler(chain, setup.global_batch, setup.T, 0, 1, setup.seed);

  // One flat buffer each for parameters, gradients and the two AdamW moments; in bf16 the model
  // computes on a bf16 copy of the parameters into bf16 gradients, the flat float32 ones being
  // the masters and the shards' sum.
  const int64_t n = gpt_num_params(cfg);
  Tensor params = dev.empty({n}, DType::f32, s, "params");
  Tensor grads = dev.empty({n}, DType::f32, s, "grads");
  Tensor m = dev.empty({n}, DType::f32, s, "adam.m");
  Tensor v = dev.empty({n}, DType::f32, s, "adam.v");
  Tensor params_bf16, grads_bf16;
  if (bf16) {
    params_bf16 = dev.empty({n}, DType::bf16, s, "params (bf16)");
    grads_bf16 = dev.empty({n}, DType::bf16, s, "grads (bf16)");
    model.bind_flat(params_bf16, grads_bf16);
  } else {
    model.bind_flat(params, grads);
  }
  // A frozen parameter gets no gradient (backward skips it) and no update: AdamW runs on each
  // run of consecutive parameters that train (the whole flat buffer when none is frozen), the
  // same elementwise math as over the flat buffer.
  const std::vector<bool> frozen = frozen_params(cfg, setup.freeze);
  for (size_t i = 0; i < frozen.size(); ++i)
    if (frozen[i]) model.grads()[i] = Tensor{};
  copy_to_device(dev, s, params, gpt_init_all(cfg, setup.seed).data());
  ops::fill(dev, s, m, 0.0f);
  ops::fill(dev, s, v, 0.0f);

  Tensor tokens = dev.empty({rows, setup.T}, DType::i32, s, "tokens");
  Tensor targets = dev.empty({rows, setup.T}, DType::i32, s, "targets");
  ReferenceRun run;
  run.loss_floor = chain.entropy_rate();
  const bool shares_reversed = order == BatchOrder::shares_reversed;
  for (int64_t step = 0; step < setup.steps; ++step) {
    const Batch batch = order == BatchOrder::reversed ? reversed_rows(sampler.global(step)) : sampler.global(step);
    if (bf16) ops::copy_blocks(dev, s, "cast_to_bf16", 1, {{params, params_bf16, n, n, n}});
    ops::fill(dev, s, grads, 0.0f);
    for (int64_t k = 0; k < shards; ++k) {
      const int64_t shard = shares_reversed ? shards - 1 - k : k;
      const int64_t first = shard * rows * setup.T;
      copy_to_device(dev, s, tokens, batch.tokens.data() + first);
      copy_to_device(dev, s, targets, batch.targets.data() + first);
      model.set_batch(tokens, targets, 1.0f / static_cast<float>(rows * setup.T));
      if (bf16) ops::fill(dev, s, grads_bf16, 0.0f);
      for (int u = 0; u < model.units(); ++u) model.forward(u, s);
      for (int u = model.units() - 1; u >= 0; --u) model.backward(u, s);
      if (bf16) ops::add_(dev, s, grads, grads_bf16);  // widened exactly, summed in float32
    }
    // The average as the ranks' reduce-scatter takes it: summed, then divided (shares_reversed:
    // multiplied by the reciprocal, BatchOrder above).
    if (shards > 1 && shares_reversed) ops::scale_(dev, s, grads, 1.0f / static_cast<float>(shards));
    else if (shards > 1) ops::divide_(dev, s, grads, static_cast<float>(shards));
    int64_t offset = 0;
    for (size_t i = 0; i < frozen.size();) {
      int64_t k = 0;
      const bool trains = !frozen[i];
      for (; i < frozen.size() && !frozen[i] == trains; ++i) k += model.params()[i].shape.numel();
      const auto piece = [&](const Tensor& t) { return t.view(offset, {k}); };
      if (trains) ops::adamw(dev, s, piece(params), piece(grads), piece(m), piece(v), step + 1, setup.adamw);
      offset += k;
    }
    run.losses.push_back(model.mean_loss(s));
    if (after_step) after_step(step + 1);
  }
  run.params.resize(static_cast<size_t>(n));
  copy_to_host(dev, s, run.params.data(), params);
  run.moments.resize(static_cast<size_t>(n));
  copy_to_host(dev, s, run.moments.data(), m);
  for (Tensor* t : {&tokens, &targets, &grads_bf16, &params_bf16, &v, &m, &grads, &params})
    if (t->defined()) dev.free(*t);
  return run;
}

double relative_error(const std::vector<float>& params, const std::vector<float>& reference) {
  if (params.size() != reference.size())
    throw std::invalid_argument("relative_error: " + std::to_string(params.size()) + " parameters against " +
                                std::to_string(reference.size()));
  double diff = 0, norm = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const double d = static_cast<double>(params[i]) - reference[i];
    diff += d * d;
    norm += static_cast<double>(reference[i]) * reference[i];
  }
  return std::sqrt(diff / norm);
}

}  // namespace shardlab
