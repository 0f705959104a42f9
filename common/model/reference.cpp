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
  SimDevice dev(load_profile("h100-8"), ComputeMode::real, 0, 1);
  Stream& s = dev.compute_stream();
  GPT model(dev, cfg, setup.global_batch, setup.T);
  const MarkovChain chain(static_cast<int>(cfg.vocab), setup.fanout, setup.seed);
  const Sampler sampler(chain, setup.global_batch, setup.T, 0, 1, setup.seed);

  // One flat buffer each for parameters, gradients and the two AdamW moments.
  const int64_t n = gpt_num_params(cfg);
  Tensor params = dev.empty({n}, DType::f32, s, "params");
  Tensor grads = dev.empty({n}, DType::f32, s, "grads");
  Tensor m = dev.empty({n}, DType::f32, s, "adam.m");
  Tensor v = dev.empty({n}, DType::f32, s, "adam.v");
  model.bind_flat(params, grads);
  // A frozen parameter gets no gradient (backward skips it) and no update: AdamW runs on each
  // run of consecutive parameters that train (the whole flat buffer when none is frozen), the
  // same elementwise math as over the flat buffer.
  const std::vector<bool> frozen = frozen_params(cfg, setup.freeze);
  for (size_t i = 0; i < frozen.size(); ++i)
    if (frozen[i]) model.grads()[i] = Tensor{};
  copy_to_device(dev, s, params, gpt_init_all(cfg, setup.seed).data());
  ops::fill(dev, s, m, 0.0f);
  ops::fill(dev, s, v, 0.0f);

  Tensor tokens = dev.empty({setup.global_batch, setup.T}, DType::i32, s, "tokens");
  Tensor targets = dev.empty({setup.global_batch, setup.T}, DType::i32, s, "targets");
  ReferenceRun run;
  run.loss_floor = chain.entropy_rate();
  for (int64_t step = 0; step < setup.steps; ++step) {
    const Batch batch = order == BatchOrder::reversed ? reversed_rows(sampler.global(step)) : sampler.global(step);
    copy_to_device(dev, s, tokens, batch.tokens.data());
    copy_to_device(dev, s, targets, batch.targets.data());
    model.set_batch(tokens, targets, 1.0f / static_cast<float>(setup.global_batch * setup.T));
    ops::fill(dev, s, grads, 0.0f);
    for (int u = 0; u < model.units(); ++u) model.forward(u, s);
    for (int u = model.units() - 1; u >= 0; --u) model.backward(u, s);
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
  for (Tensor* t : {&tokens, &targets, &v, &m, &grads, &params}) dev.free(*t);
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
