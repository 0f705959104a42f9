// Chapter 11: pipeline parallelism, the model's units cut into stages over the ranks.
//
//   cmake --preset default && cmake --build --preset default
//   mpirun -np 4 build/chapters/shardlab_ch11                      # tiny: 4 stages, 1F1B, checks itself
//   mpirun -np 4 build/chapters/shardlab_ch11 --schedule gpipe      # every forward, then every backward
//   mpirun -np 2 build/chapters/shardlab_ch11 --micro-batches 6
//
// Every rank holds a stage: a run of the model's units (the embeddings with the first, the head
// with the last). A step splits the global batch into M micro-batches; each crosses the stages
// forward, its activations sent to the next stage, then backward, the gradients sent back.
// GPipe (Huang et al. 2019) runs every micro-batch's forward, then every backward, and adds up
// the gradients before one optimizer step: the same math as one rank on the whole batch.
//
// The token embedding is tied to the head, which lives on the last stage: that stage keeps a
// copy of wte, and the two copies' gradients are summed between the first and the last stage
// before the optimizer, so both take the same step (Megatron's embedding group).

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "02_naive_ddp/data_parallel.h"
#include "11_pipeline_parallel/schedule.h"
#include "run/train_flags.h"
#include "trace/metrics.h"

using namespace shardlab;

namespace {

TrainFlags train;
int64_t micro_batches = 4;
std::string schedule = "1f1b";

void add_flags(Flags& f) {
  f.add_check([](const RunShape& run) { train.sequence_ranks = run.world_size; });  // one pipeline: no data parallelism
  add_train_flags(f, train);
  f.add_int("micro-batches", &micro_batches, 1, 1024, "micro-batches a step (M): the global batch split M ways");
  f.add_choice("schedule", &schedule, {"gpipe", "1f1b"},
               "gpipe: every forward, then every backward; 1f1b: warm up, then one forward and one backward in turn");
  f.add_check([](const RunShape& run) {
    const int64_t units = GPTConfig::preset(train.model).layers + 2;
    require(run.world_size <= units, "--model", train.model,
            "a model with at least as many units (" + std::to_string(units) + ": embeddings, blocks, head) as stages (" +
                std::to_string(run.world_size) + ")");
    require(train.global_batch % micro_batches == 0, "--micro-batches", micro_batches,
            "a divisor of the global batch " + std::to_string(train.global_batch));
  });
}

// Every stage reads the whole global batch, micro-batch by micro-batch (only the first and the
// last use it: the tokens, the targets).
class MicroBatches : public ch02::BatchShare {
 public:
  MicroBatches(Job& job, const TrainSetup& setup, int64_t M) : BatchShare(job, setup, M, ch02::DataShard{0, 1}, setup.T) {}
};

// The units of stage s of P: an even split of the L + 2 units, in order.
struct Stage {
  int first = 0, last = 0;  // units [first, last]
};
Stage stage_of(int s, int P, int units) { return {s * units / P, (s + 1) * units / P - 1}; }

void lesson(Job& job) {
  Device& dev = job.device();
  Stream& compute = dev.compute_stream();
  TrainSetup setup = train_setup(train, job.steps(), job.flags().seed);
  const GPTConfig cfg = GPTConfig::preset(setup.model);
  const int P = job.world_size(), s = job.rank(), M = static_cast<int>(micro_batches);
  const int U = static_cast<int>(cfg.layers) + 2;
  const Stage me = stage_of(s, P, U);
  const bool first = s == 0, last = s == P - 1;
  job.set_strategy(std::string(schedule == "gpipe" ? "GPipe" : "1F1B") + ", " + std::to_string(P) + " stages, " +
                   std::to_string(M) + " micro-batches");

  // 1. One model object a micro-batch (each keeps its own activations), every one bound to the
  //    stage's parameters and gradients; each micro-batch's tokens in its own buffers.
  std::vector<std::unique_ptr<MicroBatches>> batches;
  std::vector<std::unique_ptr<GPT>> models;
  for (int m = 0; m < M; ++m) {
    batches.push_back(std::make_unique<MicroBatches>(job, setup, M));
    models.push_back(std::make_unique<GPT>(dev, cfg, batches.back()->rows(), setup.T));
  }
  const std::vector<ParamInfo>& params = models[0]->params();
  std::vector<int> mine;  // the stage's parameters: its units', and the tied wte on the last
  for (int u = me.first; u <= me.last; ++u)
    for (int i : models[0]->params_of_unit(u)) mine.push_back(i);
  const bool wte_copy = last && me.first > 0;
  if (wte_copy) mine.insert(mine.begin(), 0);
  int64_t n = 0;
  for (int i : mine) n += params[static_cast<size_t>(i)].shape.numel();
  Tensor weights = dev.empty({n}, DType::f32, compute, "params"), grads = dev.empty({n}, DType::f32, compute, "grads");
  Tensor adam_m = dev.empty({n}, DType::f32, compute, "adam.m"), adam_v = dev.empty({n}, DType::f32, compute, "adam.v");
  for (auto& model : models) {
    bind_views(model->weights(), weights, params, mine);
    bind_views(model->grads(), grads, params, mine);
  }
  ops::fill(dev, compute, adam_m, 0.0f);
  ops::fill(dev, compute, adam_v, 0.0f);
  if (dev.computes()) {
    std::vector<float> values(static_cast<size_t>(n));
    float* at = values.data();
    for (int i : mine) {
      gpt_init_param(cfg, i, setup.seed, at);
      at += params[static_cast<size_t>(i)].shape.numel();
    }
    copy_to_device(dev, compute, weights, values.data());
  }
  // The tied embedding's two copies: the first and the last stage (every rank splits).
  std::unique_ptr<Comm> embedding_group = job.world().split(first || last ? 0 : 1, s);
  job.say("model " + setup.model + ": " + std::to_string(U) + " units over " + std::to_string(P) + " stages; stage " +
          std::to_string(s) + " holds units " + std::to_string(me.first) + ".." + std::to_string(me.last));

  const Shape act{batches[0]->rows(), setup.T, cfg.channels};
  for (int64_t step = 0; step < job.steps(); ++step) {
    Job::Step st(job, step);
    ops::fill(dev, compute, grads, 0.0f);
    // 2. The stage's passes in the schedule's order. Before a pass, what it needs from a
    //    neighbour (a forward's input from the stage before, a backward's output gradient from
    //    the stage after); after it, what the neighbour needs: sent before the next pass's
    //    receive, or with it in one sendrecv where the schedule pairs them (schedule.h).
    Tensor to_send;
    int send_to = -1;
    for (const ch11::Action& a : ch11::schedule(schedule, P, s, M)) {
      GPT& model = *models[static_cast<size_t>(a.micro)];
      const bool forward = a.pass == ch11::Pass::forward;
      Tensor received;
      const int from = forward ? (first ? -1 : s - 1) : (last ? -1 : s + 1);
      if (from >= 0) received = dev.empty(act, DType::f32, compute, forward ? "stage.input" : "stage.output_grad");
      if (a.paired && send_to >= 0 && send_to == from) {
        job.world().sendrecv(to_send, send_to, received, from, compute);
      } else {
        if (send_to >= 0) job.world().sendrecv(to_send, send_to, Tensor{}, -1, compute);
        if (from >= 0) job.world().sendrecv(Tensor{}, -1, received, from, compute);
      }
      if (send_to >= 0) dev.free(to_send);
      send_to = -1;
      HostScope scope(dev, std::string(forward ? "forward" : "backward") + " micro-batch " + std::to_string(a.micro));
      if (forward) {
        if (first || last) batches[static_cast<size_t>(a.micro)]->load(model, step, a.micro);
        if (!first) model.set_input(me.first, received);
        for (int u = me.first; u <= me.last; ++u) model.forward(u, compute);
        if (!last) to_send = model.take_output(me.last), send_to = s + 1;
      } else {
        if (!last) model.set_output_grad(received);
        for (int u = me.last; u >= me.first; --u) model.backward(u, compute);
        if (!first) to_send = model.take_input_grad(), send_to = s - 1;
      }
    }
    if (send_to >= 0) {
      job.world().sendrecv(to_send, send_to, Tensor{}, -1, compute);
      dev.free(to_send);
    }
    // 3. The tied embedding's gradient summed over its two copies, then AdamW on the stage.
    if (P > 1 && (first || last)) {
      const int64_t wte = params[0].shape.numel();
      embedding_group->all_reduce(grads.view(0, {wte}), ReduceOp::sum, compute);
    }
    ops::adamw(dev, compute, weights, grads, adam_m, adam_v, step + 1, setup.adamw);
    // The loss lives on the last stage: every rank reports that one.
    double loss = 0;
    if (last)
      for (auto& model : models) loss += model->mean_loss(compute) / M;
    st.set_loss(job.every_rank(loss).back());
    st.set_tokens(batches[0]->tokens_per_step());
  }

  // 4. The bubble: the share of the last step each stage's compute stream sat idle, against
  //    (P - 1) / (M + P - 1), the formula for stages that take equal time per pass.
  const StepMetrics last_step = step_metrics(dev.trace().timeline()).back();
  const double idle = 1 - last_step.compute_us / last_step.step_us;
  const std::vector<double> idles = job.every_rank(idle);
  double mean = 0;
  for (double x : idles) mean += x / static_cast<double>(idles.size());
  job.figure("step_ms", last_step.step_us / 1000.0, "ms", "the last step");
  job.figure("bubble_mean", mean, "", "the stages' compute idle over the last step, the mean over stages");
  job.figure("bubble_formula", static_cast<double>(P - 1) / static_cast<double>(M + P - 1), "", "(P - 1) / (M + P - 1)");
  job.rank_figure("bubble", idle, "", "this stage's compute idle over the last step");
  job.figure("peak_allocated_MiB", MiB(static_cast<double>(dev.allocator().peak_allocated())), "MiB", "measured, rank 0 (the first stage)");

  // 5. The proof: the stages' parameters put together equal single-rank training.
  if (dev.computes() && setup.check_reference) {
    // Each stage places its parameters in the whole model (the tied wte's last-stage copy left
    // out: the first stage's is the one) and the stages' places are summed.
    const std::vector<int> placed(mine.begin() + (wte_copy ? 1 : 0), mine.end());
    const int64_t skipped = wte_copy ? params[0].shape.numel() : 0;
    const auto whole = [&](const Tensor& buffer) {
      std::vector<float> local(static_cast<size_t>(n)), natural(static_cast<size_t>(gpt_num_params(cfg)), 0.0f);
      copy_to_host(dev, compute, local.data(), buffer);
      place_params(params, placed, local.data() + skipped, natural);
      return ch02::summed_over(dev, job.world(), std::move(natural));
    };
    ch02::check_against_reference(job, setup, whole(weights), whole(adam_m));
  }
  for (Tensor* t : {&adam_v, &adam_m, &grads, &weights}) dev.free(*t);
}

}  // namespace

int main(int argc, char** argv) {
  const ChapterInfo chapter{.id = "11_pipeline_parallel",
                            .title = "Pipeline parallelism: stages and schedules",
                            .default_steps = 5};
  return run_chapter(argc, argv, chapter, add_flags, lesson);
}
