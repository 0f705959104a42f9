// data_parallel.h: what every data-parallel chapter shares.
//
// Data parallelism keeps a whole replica of the model on every rank and gives each rank its
// share of the global batch. The replicas must start equal (rank 0's parameters are broadcast)
// and stay equal (every rank applies the same averaged gradient), and the result must be what
// one rank would get training on the whole global batch. This header holds that plumbing; each
// chapter's main.cpp holds its own training step, which is the lesson.
//
// Memory layout: parameters, gradients and the two AdamW moments each live in one flat buffer,
// the parameters laid out in an order the chapter chooses (chapter 02: the model's order;
// chapter 03: bucket order, so each bucket is one slice of the flat gradient). Every
// parameter and gradient of the model is a view into those buffers, so AdamW is one kernel over
// all of them.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <functional>
#include <memory>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/data.h"
#include "run/job.h"
#include "trace/metrics.h"
#include "model/model.h"
#include "model/ops.h"
#include "model/reference.h"

namespace ch02 {

using namespace shardlab;

// Which rows of the global batch a rank loads: those of data-parallel rank `rank` of `ranks`.
struct DataShard {
  int rank = 0, ranks = 1;
};
inline DataShard data_parallel_shard(const Job& job) { return {job.rank(), job.world_size()}; }

// This rank's share of each step's global batch, micro-batch by micro-batch, on the device.
class BatchShare {
 public:
  BatchShare(Job& job, const TrainSetup& setup, int64_t grad_accum)
      : BatchShare(job, setup, grad_accum, data_parallel_shard(job), setup.T) {}
  virtual ~BatchShare() {
    job_.device().free(targets_);
    job_.device().free(tokens_);
  }

  int64_t rows() const { return rows_; }  // per micro-batch
  int64_t T() const { return T_; }        // tokens of each row this rank holds
  const MarkovChain& chain() const { return chain_.value(); }  // with real compute only
  int64_t tokens_per_step() const { return setup_.global_batch * setup_.T; }

  // Micro-batch `micro` of this rank's share of step `step`, bound to the model. Each
  // position's loss gradient is 1 / (this rank's tokens per step), so summing K micro-batches
  // gives this rank's mean, and averaging over ranks the global mean.
  void load(GPT& model, int64_t step, int64_t micro) {
    Device& dev = job_.device();
    Stream& s = dev.compute_stream();
    const int64_t share_rows = setup_.global_batch / shard_.ranks;
    if (sampler_) {
      const Batch share = sampler_->batch(step);
      const int64_t offset = micro * rows_ * setup_.T;
      copy_to_device(dev, s, tokens_, mine(share.tokens, offset).data());
      copy_to_device(dev, s, targets_, mine(share.targets, offset).data());
    } else {  // --compute skip: the copies are timed, no data move
      copy_to_device(dev, s, tokens_, nullptr);
      copy_to_device(dev, s, targets_, nullptr);
    }
    bind(model, 1.0f / static_cast<float>(share_rows * T_));
  }

 protected:
  // The extension point: a share of `T` tokens of each row, which `mine` picks and `bind` hands
  // to the model (chapter 08 holds part of every sequence).
  BatchShare(Job& job, const TrainSetup& setup, int64_t grad_accum, DataShard shard, int64_t T)
      : job_(job), setup_(setup), shard_(shard), rows_(micro_rows(setup, shard_.ranks, grad_accum)), T_(T) {
    // The data exist only when the math is done: under --compute skip no token is ever read.
    // The chain's stationary distribution (seconds for GPT-2's vocabulary) is solved once, by
    // rank 0, and handed to every rank, instead of once per rank on the same cores.
    if (job.device().computes()) {
      const int vocab = static_cast<int>(GPTConfig::preset(setup.model).vocab);
      if (setup.model.starts_with("gpt"))  // seconds of silence otherwise: the chain, then the parameters
        job.say("preparing the data (a " + std::to_string(vocab) + "-state Markov chain) and the " + setup.model +
                " parameters on the CPU...");
      std::vector<double> pi = job.solved_once([&] { return MarkovChain(vocab, setup.fanout, setup.seed).stationary(); });
      chain_.emplace(vocab, setup.fanout, setup.seed, std::move(pi));
      sampler_.emplace(*chain_, setup.global_batch, setup.T, shard_.rank, shard_.ranks, setup.seed);
    }
    Device& dev = job.device();
    Stream& s = dev.compute_stream();
    tokens_ = dev.empty({rows_, T_}, DType::i32, s, "tokens");
    targets_ = dev.empty({rows_, T_}, DType::i32, s, "targets");
  }

  // This micro-batch's rows of the share (from element `offset`): every token of each.
  virtual std::vector<int32_t> mine(const std::vector<int32_t>& share, int64_t offset) const {
    const auto first = share.begin() + offset;
    return {first, first + rows_ * setup_.T};
  }
  virtual void bind(GPT& model, float dloss) { model.set_batch(tokens_, targets_, dloss); }

  Job& job_;
  TrainSetup setup_;
  DataShard shard_;
  int64_t rows_, T_;
  Tensor tokens_, targets_;

 private:
  static int64_t micro_rows(const TrainSetup& setup, int world, int64_t accum) {
    if (setup.global_batch % (world * accum) != 0)
      throw std::invalid_argument("global batch " + std::to_string(setup.global_batch) + " does not divide into " +
                                  std::to_string(world) + " ranks x " + std::to_string(accum) +
                                  " micro-batches; choose a multiple of " + std::to_string(world * accum));
    return setup.global_batch / (world * accum);
  }

  std::optional<MarkovChain> chain_;
  std::optional<Sampler> sampler_;
};

class Replica {
 public:
  // `layout`: the parameter indices in the order the flat buffers hold them. The replica trains
  // on data parallelism's share of each batch, or on `batch` (chapter 08's share of sequences).
  Replica(Job& job, const TrainSetup& setup, int64_t grad_accum, std::vector<int> layout)
      : Replica(job, setup, std::make_unique<BatchShare>(job, setup, grad_accum), std::move(layout)) {}
  Replica(Job& job, const TrainSetup& setup, std::unique_ptr<BatchShare> batch, std::vector<int> layout)
      : job_(job),
        setup_(setup),
        cfg_(GPTConfig::preset(setup.model)),
        batch_(std::move(batch)),
        layout_(std::move(layout)),
        model_(job.device(), cfg_, batch_->rows(), batch_->T()) {
    Device& dev = job.device();
    Stream& s = dev.compute_stream();
    const int64_t n = gpt_num_params(cfg_);
    params_ = dev.empty({n}, DType::f32, s, "params");
    grads_ = dev.empty({n}, DType::f32, s, "grads");
    m_ = dev.empty({n}, DType::f32, s, "adam.m");
    v_ = dev.empty({n}, DType::f32, s, "adam.v");
    bind_views(model_.weights(), params_, model_.params(), layout_);
    bind_views(model_.grads(), grads_, model_.params(), layout_);
    ops::fill(dev, s, m_, 0.0f);
    ops::fill(dev, s, v_, 0.0f);
    // Rank 0 initialises from the seed; the others start from something else on purpose, so
    // the broadcast that follows visibly matters.
    const uint64_t seed = job.rank() == 0 ? setup.seed : setup.seed + 1000 + static_cast<uint64_t>(job.rank());
    if (dev.computes()) {
      const std::vector<float> natural = gpt_init_all(cfg_, seed);
      copy_to_device(dev, s, params_, in_layout(natural).data());
    }
  }

  ~Replica() {
    for (Tensor* t : {&v_, &m_, &grads_, &params_}) job_.device().free(*t);
  }

  GPT& model() { return model_; }
  const TrainSetup& setup() const { return setup_; }
  const MarkovChain& chain() const { return batch_->chain(); }
  const std::vector<int>& layout() const { return layout_; }
  const Tensor& params() const { return params_; }
  const Tensor& grads() const { return grads_; }
  int64_t tokens_per_step() const { return batch_->tokens_per_step(); }
  void load_micro_batch(int64_t step, int64_t micro) { batch_->load(model_, step, micro); }

  void zero_grad() { ops::fill(job_.device(), job_.device().compute_stream(), grads_, 0.0f); }

  void optimizer_step(int64_t step) {
    ops::adamw(job_.device(), job_.device().compute_stream(), params_, grads_, m_, v_, step + 1, setup_.adamw);
  }

  // Every parameter, back in the model's order, on the host; and AdamW's first moment of each.
  std::vector<float> gather_params() { return in_natural_order(params_); }
  std::vector<float> gather_moments() { return in_natural_order(m_); }

 private:
  // Where each parameter starts in the model's natural order.
  std::vector<int64_t> natural_offsets() const {
    std::vector<int64_t> at(model_.params().size());
    int64_t offset = 0;
    for (size_t i = 0; i < at.size(); ++i) at[i] = offset, offset += model_.params()[i].shape.numel();
    return at;
  }

  // A buffer in this replica's layout, on the host in the model's order.
  std::vector<float> in_natural_order(const Tensor& laid_out_buffer) {
    std::vector<float> laid_out(static_cast<size_t>(laid_out_buffer.numel()));
    copy_to_host(job_.device(), job_.device().compute_stream(), laid_out.data(), laid_out_buffer);
    std::vector<float> natural(laid_out.size());
    place_params(model_.params(), layout_, laid_out.data(), natural);
    return natural;
  }

  // A buffer in the model's order, rearranged into this replica's layout.
  std::vector<float> in_layout(const std::vector<float>& natural) const {
    std::vector<float> out;
    out.reserve(natural.size());
    const std::vector<int64_t> at = natural_offsets();
    for (int i : layout_) {
      const auto begin = natural.begin() + at[static_cast<size_t>(i)];
      out.insert(out.end(), begin, begin + model_.params()[static_cast<size_t>(i)].shape.numel());
    }
    return out;
  }

  Job& job_;
  TrainSetup setup_;
  GPTConfig cfg_;
  std::unique_ptr<BatchShare> batch_;
  std::vector<int> layout_;
  GPT model_;
  Tensor params_, grads_, m_, v_;
};

// The model's own parameter order: 0, 1, 2, ...
inline std::vector<int> natural_layout(const GPTConfig& cfg) {
  std::vector<int> order(gpt_params(cfg).size());
  std::iota(order.begin(), order.end(), 0);
  return order;
}

// Replicas start equal: rank 0's parameters go to everyone (DDP does this in its constructor).
// Then every rank checks it holds exactly rank 0's values; returns the largest difference.
inline double broadcast_parameters(Job& job, Replica& r) {
  Device& dev = job.device();
  Stream& s = dev.compute_stream();
  job.world().broadcast(r.params(), 0, s);
  dev.synchronize();  // DDP's constructor returns only once the broadcast is done
  if (!dev.computes()) return 0;
  // Check: everyone receives rank 0's copy again and compares with its own.
  Tensor mine = dev.empty(r.params().shape, DType::f32, s, "params.check");
  ops::copy(dev, s, mine, r.params());
  job.world().broadcast(mine, 0, s);
  std::vector<float> a(static_cast<size_t>(mine.numel())), b(a.size());
  copy_to_host(dev, s, a.data(), mine);
  copy_to_host(dev, s, b.data(), r.params());
  dev.free(mine);
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, static_cast<double>(std::abs(a[i] - b[i])));
  if (worst != 0) throw std::runtime_error("replicas differ after the broadcast by up to " + std::to_string(worst));
  return worst;
}

// For the check below, when each rank holds part of the model: every rank's `parts` (its
// parameters in their places of the whole model's flat order, zeros elsewhere) summed over
// `group`, through the device as any collective goes. Every rank of the group gets the whole.
inline std::vector<float> summed_over(Device& dev, Comm& group, std::vector<float> parts) {
  Stream& s = dev.compute_stream();
  Tensor sum = dev.empty({static_cast<int64_t>(parts.size())}, DType::f32, s, "check.whole_model");
  copy_to_device(dev, s, sum, parts.data());
  group.all_reduce(sum, ReduceOp::sum, s);
  copy_to_host(dev, s, parts.data(), sum);
  dev.free(sum);
  return parts;
}

// The numerics check of every training chapter: this rank's parameters after training (`params`,
// in the model's natural order) and AdamW's first moments (`moments`, the same order) against one
// rank training on the whole global batch.
//
// What "equal" means comes from the arithmetic. Float32 sums taken in another order differ in
// their last bits, and training amplifies that: AdamW divides by the square root of tiny second
// moments, so an element whose gradient is near zero moves by a different step, and the
// difference grows with the steps (on `tiny`, 3 ranks of chapter 05: 1.3e-5 of the parameters'
// norm after 200 steps, 2.7e-5 after 1,000). A fixed
// tolerance is either too tight for long runs or too loose for short ones. So the reference
// trains twice, the second time on the same batches with their sequences in reverse order (the
// same math, its sums in another order): the distance between the two is what float32 alone does
// to this training at this many steps, and the chapter's run may be at most kRoundingMargin times
// as far (or kRoundingFloor, for runs so short that the two agree nearly to the bit).
//
// The parameters cannot catch every bug: AdamW's step m / sqrt(v) does not change when a
// gradient is scaled, so a gradient summed over W ranks instead of averaged moves the parameters
// as the right one would. Its first moment m is the running mean of the gradients, scaled with
// them. So m is compared too: as a whole, by the same rule, and tensor by tensor for its scale:
// the factor c that best maps the reference's m of a tensor onto the run's (c = <m, m_ref> /
// <m_ref, m_ref>). Rounding moves c by at most that tensor's relative error; a reduction with the
// wrong divisor moves it by a factor of the world size or more, |c - 1| >= 1/2.
//
// The reference trains on the CPU, minutes for a large model, so the run says what it is doing
// and, beyond `tiny`, prints a line per step rather than fall silent.
constexpr double kRoundingMargin = 10;   // how much farther than float32's own noise a run may be
constexpr double kRoundingFloor = 1e-6;  // ... and the least tolerance, for very short runs
constexpr double kScaleTolerance = 0.1;  // |c - 1| of a tensor's m beyond which its gradient was scaled wrong

// The tensor of `moments` whose scale against the reference is farthest from 1.
struct MomentScale {
  std::string tensor;
  double scale = 1;
};
inline MomentScale worst_moment_scale(const GPTConfig& cfg, const std::vector<float>& moments,
                                      const std::vector<float>& reference) {
  MomentScale worst;
  size_t at = 0;
  for (const ParamInfo& p : gpt_params(cfg)) {
    double dot = 0, norm = 0;
    for (size_t i = at; i < at + static_cast<size_t>(p.shape.numel()); ++i) {
      dot += static_cast<double>(moments[i]) * reference[i];
      norm += static_cast<double>(reference[i]) * reference[i];
    }
    at += static_cast<size_t>(p.shape.numel());
    const double scale = norm > 0 ? dot / norm : 1;  // a tensor no gradient reached has nothing to scale
    if (std::abs(scale - 1) > std::abs(worst.scale - 1)) worst = {p.name, scale};
  }
  return worst;
}

inline void check_against_reference(Job& job, const TrainSetup& setup, const std::vector<float>& params,
                                    const std::vector<float>& moments) {
  const bool long_run = setup.model.starts_with("gpt");  // not tiny or tiny-12h
  job.say("checking against single-rank training on the global batch (on the CPU, twice, " +
          std::to_string(setup.steps) + " step(s) each" + (long_run ? ": minutes for this model" : "") + ")...");
  const auto start = std::chrono::steady_clock::now();
  const auto progress = [&](const char* which) {
    return [&, which](int64_t step) {
      const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
      char line[128];
      std::snprintf(line, sizeof line, "  single-rank step %lld/%lld done%s (%.0f s)", static_cast<long long>(step),
                    static_cast<long long>(setup.steps), which, took.count());
      job.say(line);
    };
  };
  using Progress = std::function<void(int64_t)>;
  // The noise run (reference.h): the sequences reversed; in bf16 on the simulator, which rounds
  // as the reference does, only the ranks' shares summed in another order.
  const bool same_roundings = setup.param_dtype == DType::bf16 && job.device().simulated();
  const BatchOrder noise_order = same_roundings ? BatchOrder::shares_reversed : BatchOrder::reversed;
  // Each run once, on its own rank (the reference on rank 0, the noise run on rank 1, side by
  // side), every rank getting both: its parameters, then its moments, in one vector.
  const auto trained = [&setup](BatchOrder order, Progress after_step) {
    return [&setup, order, after_step] {
      ReferenceRun run = train_reference(setup, after_step, order);
      run.params.insert(run.params.end(), run.moments.begin(), run.moments.end());
      return std::move(run.params);
    };
  };
  const std::vector<std::vector<float>> runs = job.solved_once_each(
      {trained(BatchOrder::as_sampled, long_run ? Progress(progress("")) : Progress{}),
       trained(noise_order, long_run ? Progress(progress(same_roundings ? ", shares reversed" : ", sequences reversed"))
                                     : Progress{})});
  const auto unpacked = [](const std::vector<float>& both) {
    const auto half = both.begin() + static_cast<std::ptrdiff_t>(both.size() / 2);
    ReferenceRun run;
    run.params.assign(both.begin(), half);
    run.moments.assign(half, both.end());
    return run;
  };
  const ReferenceRun reference = unpacked(runs[0]), reordered = unpacked(runs[1]);
  const double err = relative_error(params, reference.params);
  const double noise = relative_error(reordered.params, reference.params);
  const double tolerance = std::max(kRoundingFloor, kRoundingMargin * noise);
  const double m_err = relative_error(moments, reference.moments);
  const double m_tolerance = std::max(kRoundingFloor, kRoundingMargin * relative_error(reordered.moments, reference.moments));
  const MomentScale scale = worst_moment_scale(GPTConfig::preset(setup.model), moments, reference.moments);
  job.figure("relative_error_vs_single_rank", err, "", "||params - single-rank params|| / ||single-rank params||");
  job.figure("rounding_noise", noise, "",
             same_roundings ? "the same between two single-rank runs, the shares' gradients summed in another order"
                            : "the same between two single-rank runs, sequences in another order");
  job.figure("moment_error_vs_single_rank", m_err, "", "the same for AdamW's first moment m");
  job.figure("moment_scale_worst", scale.scale, "", "the run's m over the reference's, the tensor farthest from 1 (" + scale.tensor + ")");
  char why[512];
  if (err > tolerance) {
    std::snprintf(why, sizeof why, "parameters differ from single-rank training: relative error %s, above %.3g "
                  "(%g x float32's own noise at %lld steps, %.3g)", std::to_string(err).c_str(), tolerance,
                  kRoundingMargin, static_cast<long long>(setup.steps), noise);
    throw std::runtime_error(why);
  }
  if (std::abs(scale.scale - 1) > kScaleTolerance || m_err > m_tolerance) {
    std::snprintf(why, sizeof why, "AdamW's first moment differs from single-rank training: relative error %.3g "
                  "(tolerance %.3g), %s's %.3g times the reference's: a gradient reduced with the wrong divisor "
                  "(summed instead of averaged, or divided twice)?", m_err, m_tolerance, scale.tensor.c_str(), scale.scale);
    throw std::runtime_error(why);
  }
}

// How many all-reduces the trace shows in step `step` (the lesson's claim, checked).
inline int allreduces_in_step(Device& dev, int64_t step) {
  int n = 0;
  for (const auto& c : collective_metrics(dev.trace().timeline())) n += c.step == step && c.name == "allreduce";
  return n;
}

// Before training: the loss floor, then replicas made equal.
inline void start_training(Job& job, Replica& r) {
  if (job.device().computes())
    job.say("loss floor (the data's entropy rate): " + std::to_string(r.chain().entropy_rate()) + " nats");
  broadcast_parameters(job, r);
  job.say("replicas agree after broadcasting rank 0's parameters\n");
}

// After training, the chapter's two claims checked: the parameters equal single-rank training
// on the global batch (with real math), and the last step issued `expected` all-reduces (one
// per `what`). Either failing ends the run with an error.
inline void check_training(Job& job, Replica& r, int expected, const std::string& what) {
  Device& dev = job.device();
  if (dev.computes() && r.setup().check_reference)
    check_against_reference(job, r.setup(), r.gather_params(), r.gather_moments());
  const int allreduces = allreduces_in_step(dev, job.steps());  // the last step (steps count from 1)
  job.figure("allreduces_per_step", allreduces, "", "from the trace: one per " + what);
  if (allreduces != expected)
    throw std::logic_error("expected one all-reduce per " + what + " (" + std::to_string(expected) +
                           "), the trace shows " + std::to_string(allreduces));
}

}  // namespace ch02
