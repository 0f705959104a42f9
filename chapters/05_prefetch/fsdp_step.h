// fsdp_step.h: one FSDP training step as PyTorch runs it, hook by hook (chapters 05 to 07).
//
// The hooks are fsdp_runtime.h's; this is where PyTorch's module calls and autograd call them
// around the model's units: the root's hooks wrap the whole model, each block's wrap the block.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "02_naive_ddp/data_parallel.h"
#include "04_fsdp/flat_param.h"
#include "05_prefetch/fsdp_runtime.h"

namespace ch05 {

// Chapter 04's FlatParams: unit 0 is the root (embeddings, final norm, and so the tied head),
// unit l the l-th block. `Flat` and `more`: a FlatParam subclass and what its constructor takes
// after the seed (chapter 07's).
template <class Flat = ch04::FlatParam, class... More>
std::vector<std::unique_ptr<ch04::FlatParam>> wrap_units(Job& job, GPT& model, uint64_t seed, More&... more) {
  const int L = static_cast<int>(model.config().layers);
  std::vector<int> root_params = model.params_of_unit(0);
  for (int i : model.params_of_unit(L + 1)) root_params.push_back(i);
  std::vector<std::unique_ptr<ch04::FlatParam>> units;
  units.push_back(std::make_unique<Flat>(job, model, "root", root_params, seed, more...));
  for (int l = 1; l <= L; ++l)
    units.push_back(std::make_unique<Flat>(job, model, "block" + std::to_string(l - 1), model.params_of_unit(l), seed, more...));
  return units;
}

// Events on the compute stream that split a step for the metrics.
struct StepMarks {
  Event start, forward_done;
};

// One forward and backward pass over the bound micro-batch; returns the end of its forward.
// `Runtime`: FsdpRuntime, or any runtime with the same hooks (chapter 09's FSDP2).
template <class Runtime = FsdpRuntime>
Event forward_backward(Device& dev, Runtime& fsdp, GPT& model) {
  Stream& compute = dev.compute_stream();
  const int L = static_cast<int>(model.config().layers);
  const int embeddings = 0, head = L + 1;  // the model's units around the blocks 1..L
  const int root = 0;                      // the runtime's unit wrapping them

  // Forward. The root's hooks wrap the whole model; each block's wrap the block.
  fsdp.root_pre_forward();
  fsdp.pre_forward(root);
  model.forward(embeddings, compute);
  for (int l = 1; l <= L; ++l) {
    HostScope scope(dev, "forward block " + std::to_string(l - 1));
    fsdp.pre_forward(l);
    model.forward(l, compute);
    fsdp.post_forward(l);
  }
  model.forward(head, compute);
  fsdp.post_forward(root);
  const Event forward_done = dev.record(compute);

  // Backward, from the head. Autograd calls a unit's pre-backward hook when the gradient reaches
  // its output, and its post-backward hook when its parameters' gradients are final: the root's
  // only after the embeddings (the head shares their weight).
  fsdp.pre_backward(root);
  model.backward(head, compute);
  for (int l = L; l >= 1; --l) {
    HostScope scope(dev, "backward block " + std::to_string(l - 1));
    fsdp.pre_backward(l);
    model.backward(l, compute);
    fsdp.post_backward(l);
  }
  model.backward(embeddings, compute);
  fsdp.post_backward(root);
  fsdp.end_of_backward();
  return forward_done;
}

// Step `step` (from 0) of training, inside its Job::Step `s`: `micro_batches` forward and
// backward passes (gradient accumulation, chapter 07; every pass reduces its gradients, which
// add up in the gradient shards), then the optimizer.
inline StepMarks fsdp_step(Job::Step& s, Job& job, FsdpRuntime& fsdp, GPT& model, ch02::BatchShare& batch,
                           const TrainSetup& setup, int64_t step, int64_t micro_batches = 1) {
  Device& dev = job.device();
  Stream& compute = dev.compute_stream();
  StepMarks marks;
  marks.start = dev.record(compute);
  for (int u = 0; u < fsdp.units(); ++u) fsdp.flat(u).zero_grad();
  for (int64_t micro = 0; micro < micro_batches; ++micro) {
    batch.load(model, step, micro);
    marks.forward_done = forward_backward(dev, fsdp, model);
  }

  // AdamW on the local shards.
  for (int u = 0; u < fsdp.units(); ++u) fsdp.flat(u).optimizer_step(compute, step, setup.adamw);
  s.set_loss(model.mean_loss(compute));
  s.set_tokens(batch.tokens_per_step());
  return marks;
}

}  // namespace ch05
