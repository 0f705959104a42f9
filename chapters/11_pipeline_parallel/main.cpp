// Chapter 11: pipeline parallelism, the model's units cut into stages over the ranks.
//
//   cmake --preset default && cmake --build --preset default
//   mpirun -np 4 build/chapters/shardlab_ch11                      # tiny-8l: 4 stages, 1F1B, checks itself
//   mpirun -np 4 build/chapters/shardlab_ch11 --schedule gpipe      # every forward, then every backward
//   mpirun -np 2 build/chapters/shardlab_ch11 --micro-batches 6
//   mpirun -np 4 build/chapters/shardlab_ch11 --schedule zb-h1      # backwards cut into B and W (zero bubble)
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

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "02_naive_ddp/data_parallel.h"
#include "11_pipeline_parallel/schedule.h"
#include "11_pipeline_parallel/stage_replicas.h"
#include "11_pipeline_parallel/stages.h"
#include "run/train_flags.h"
#include "trace/metrics.h"

using namespace shardlab;

namespace {

// tiny-8l by default: its 10 units make stages for 4 ranks with 2 chunks each (tiny has 4).
TrainFlags train = [] {
  TrainFlags t;
  t.model = "tiny-8l";
  return t;
}();
int64_t micro_batches = 4;
int64_t replicas = 1;  // D: copies of the pipeline (data parallelism)
bool shard_optimizer = false;  // the replicas split AdamW's moments (ZeRO-1)
int64_t virtual_stages = 0;  // 0: 2 under interleaving, 1 otherwise
std::string schedule = "1f1b";
std::string split = "flops";
bool print_schedule = false;

// The pipeline of a world of `world` ranks: P = world / D stages of ranks.
ch11::Pipeline pipeline_of(int world) {
  const int P = world / static_cast<int>(replicas);
  const int V = static_cast<int>(virtual_stages > 0 ? virtual_stages : schedule == "interleaved" ? 2 : 1);
  return {P, V, static_cast<int>(micro_batches)};
}

void add_flags(Flags& f) {
  f.add_int("dp", &replicas, 1, 1024,
            "copies of the pipeline (D), each on its share of the batch, their gradients averaged: the world is D x P");
  f.add_check([](const RunShape& run) {
    require(run.world_size % replicas == 0, "--dp", replicas,
            "a divisor of the " + std::to_string(run.world_size) + " ranks (the world is D x P)");
    train.sequence_ranks = run.world_size / replicas;  // the P ranks of a pipeline share each sequence
  });
  f.add_bool("shard-optimizer", &shard_optimizer,
             "the D replicas of a stage shard AdamW's moments and update (Megatron-LM's distributed optimizer, "
             "ZeRO-1): gradients reduce-scattered, each replica's shard updated, parameters all-gathered");
  f.add_check([](const RunShape&) {
    require(!shard_optimizer || replicas > 1, "--shard-optimizer", std::string("true"), "only with --dp 2 or more (the replicas to shard over)");
  });
  add_train_flags(f, train);
  f.add_int("micro-batches", &micro_batches, 1, 1024, "micro-batches a step (M): the global batch split M ways");
  f.add_choice("schedule", &schedule, {"gpipe", "1f1b", "interleaved", "zb-h1"},
               "gpipe: every forward, then every backward; 1f1b: warm up, then one forward and one backward in turn; "
               "interleaved: 1F1B over V model chunks a rank; zb-h1: 1F1B with each backward cut into B (the input's "
               "gradient) and W (the weights'), the W's held back into the bubble");
  f.add_choice("split", &split, {"even", "flops"},
               "how the model's units are cut into stages: even (as many units a stage) or flops (the costliest stage as "
               "cheap as it can be)");
  f.add_bool("print-schedule", &print_schedule,
             "print every rank's passes tick by tick (F3: forward of micro-batch 3, ..: waiting), then train");
  f.add_int("virtual-stages", &virtual_stages, 0, 64,
            "model chunks a rank holds (V), for --schedule interleaved; 0: 2 when interleaved, else 1");
  f.add_check([](const RunShape& run) {
    const ch11::Pipeline p = pipeline_of(run.world_size);
    require(p.chunks == 1 || schedule == "interleaved", "--virtual-stages", virtual_stages,
            "1 (or 0) unless --schedule interleaved: GPipe and 1F1B give a rank one chunk");
    const int64_t units = GPTConfig::preset(train.model).layers + 2;
    require(p.stages() <= units, "--model", train.model,
            "a model with at least as many units (" + std::to_string(units) + ": embeddings, blocks, head) as stages (" +
                std::to_string(p.ranks) + " ranks x " + std::to_string(p.chunks) + " chunks)");
    const int64_t share = train.global_batch / replicas;  // a replica's sequences a step
    require(share % micro_batches == 0, "--micro-batches", micro_batches,
            "a divisor of " + (replicas > 1 ? "a replica's " + std::to_string(share) + " sequences (the global batch " +
                                                  std::to_string(train.global_batch) + " over --dp " +
                                                  std::to_string(replicas) + ")"
                                            : "the global batch " + std::to_string(train.global_batch)));
    require(schedule != "interleaved" || micro_batches % p.ranks == 0, "--micro-batches", micro_batches,
            "a multiple of the " + std::to_string(p.ranks) +
                " pipeline ranks under --schedule interleaved (micro-batches go through each chunk in groups of P)");
  });
}

// Every stage of replica d reads the replica's share of the global batch, micro-batch by
// micro-batch (only the first and the last stage use it: the tokens, the targets).
class MicroBatches : public ch02::BatchShare {
 public:
  MicroBatches(Job& job, const TrainSetup& setup, int64_t M, ch02::DataShard replica)
      : BatchShare(job, setup, M, replica, setup.T) {}
};

// A tensor that crossed from another rank, and the event after which it is there.
struct Arrival {
  Tensor tensor;
  Event ready;
};

void lesson(Job& job) {
  Device& dev = job.device();
  Stream& compute = dev.compute_stream();
  // The activations and their gradients cross on a stream of their own, as PyTorch's NCCL
  // send/recv run on their own: the compute stream waits only where it uses what arrived.
  Stream& p2p = dev.create_stream("p2p");
  TrainSetup setup = train_setup(train, job.steps(), job.flags().seed);
  const GPTConfig cfg = GPTConfig::preset(setup.model);
  const int D = static_cast<int>(replicas), M = static_cast<int>(micro_batches);
  const ch11::Pipeline pipe = pipeline_of(job.world_size());
  const int P = pipe.ranks, s = job.rank() / D, d = job.rank() % D;  // this rank: stage s of replica d
  // The pipeline this rank is a stage of (its ranks in stage order), and its stage's replicas.
  std::unique_ptr<Comm> pipeline = job.world().split(d, s);
  std::unique_ptr<Comm> stage_replicas = job.world().split(s, d);
  const int S = pipe.stages(), U = static_cast<int>(cfg.layers) + 2;
  const std::vector<ch11::Units> stages = ch11::split_units(split, cfg, S, setup.T);
  const bool first = s == 0, last = s == P - 1;  // the ranks of stage 0 and stage S - 1
  const bool zero_bubble = schedule == "zb-h1";  // backwards cut into B and W
  job.set_strategy(std::string(schedule == "gpipe"  ? "GPipe"
                               : schedule == "1f1b" ? "1F1B"
                               : zero_bubble        ? "ZB-H1"
                                                    : "interleaved 1F1B") +
                   ", " + std::to_string(P) + " ranks" +
                   (pipe.chunks > 1 ? " x " + std::to_string(pipe.chunks) + " chunks" : std::string()) + ", " +
                   std::to_string(M) + " micro-batches" + (D > 1 ? ", " + std::to_string(D) + " replicas" : std::string()));

  // 1. One model object a micro-batch (each keeps its own activations), every one bound to the
  //    rank's parameters and gradients: its chunks' units, and the tied wte on the last rank.
  std::vector<std::unique_ptr<MicroBatches>> batches;
  std::vector<std::unique_ptr<GPT>> models;
  for (int m = 0; m < M; ++m) {
    batches.push_back(std::make_unique<MicroBatches>(job, setup, M, ch02::DataShard{d, D}));
    models.push_back(std::make_unique<GPT>(dev, cfg, batches.back()->rows(), setup.T));
    models.back()->split_backward(zero_bubble);  // backward(unit) is B, backward_weights(unit) W
  }
  const std::vector<ParamInfo>& params = models[0]->params();
  std::vector<int> units;  // this rank's, chunk by chunk
  for (int c = 0; c < pipe.chunks; ++c)
    for (int unit = stages[static_cast<size_t>(pipe.stage(s, c))].first;
         unit <= stages[static_cast<size_t>(pipe.stage(s, c))].last; ++unit)
      units.push_back(unit);
  const bool wte_copy = last && P > 1;
  // The rank's parameters and gradients in two flat buffers, a run a unit (stage_replicas.h),
  // each run padded to a multiple of D when the replicas shard the optimizer.
  const std::vector<ch11::ParamRun> runs = ch11::param_runs(*models[0], units, wte_copy, shard_optimizer ? D : 1);
  const int64_t n = runs.back().offset + runs.back().padded;
  Tensor weights = dev.empty({n}, DType::f32, compute, "params"), grads = dev.empty({n}, DType::f32, compute, "grads");
  for (auto& model : models)
    for (const ch11::ParamRun& run : runs) {
      bind_views(model->weights(), weights, params, run.params, run.offset);
      bind_views(model->grads(), grads, params, run.params, run.offset);
    }
  if (dev.computes()) {
    std::vector<float> values(static_cast<size_t>(n), 0.0f);  // the padding: zeros
    for (const ch11::ParamRun& run : runs) {
      float* at = values.data() + run.offset;
      for (int i : run.params) {
        gpt_init_param(cfg, i, setup.seed, at);
        at += params[static_cast<size_t>(i)].shape.numel();
      }
    }
    copy_to_device(dev, compute, weights, values.data());
  }
  // The tied embedding's two copies: the first and the last stage of the pipeline (every rank splits).
  std::unique_ptr<Comm> embedding_group = pipeline->split(first || last ? 0 : 1, s);
  // The replicas of this stage reduce each unit's gradients as soon as they are final, and hold
  // AdamW's moments (all of them, or their shard).
  ch11::StageReplicas dp(dev, stage_replicas.get(), weights, grads, runs, shard_optimizer);
  // The cut, and what each stage costs a micro-batch (forward and backward, gpt_unit_flops).
  std::string cut = "model " + setup.model + ": " + std::to_string(U) + " units in " + std::to_string(S) +
                    " stages over " + std::to_string(P) + " ranks (--split " + split + ")" +
                    (D > 1 ? ", " + std::to_string(D) + " replicas of the pipeline" : std::string());
  for (int k = 0; k < S; ++k) {
    double flops = 0;
    for (int u = stages[static_cast<size_t>(k)].first; u <= stages[static_cast<size_t>(k)].last; ++u)
      flops += gpt_unit_flops(cfg, u, batches[0]->rows() * setup.T, setup.T);
    char cost[64];
    std::snprintf(cost, sizeof cost, "%.3f GFLOP a micro-batch", flops / 1e9);
    const int r = pipe.rank_of(k);  // its rank in the pipeline; ranks r D .. r D + D - 1 in the world
    cut += "\n  stage " + std::to_string(k) +
           (D > 1 ? " (ranks " + std::to_string(r * D) + ".." + std::to_string(r * D + D - 1) + ")"
                  : " (rank " + std::to_string(r) + ")") +
           ": units " +
           std::to_string(stages[static_cast<size_t>(k)].first) + ".." + std::to_string(stages[static_cast<size_t>(k)].last) +
           ", " + cost;
  }
  job.say(cut);

  // Every rank's passes on one clock, and what crosses after each (schedule.h).
  std::vector<std::vector<ch11::Action>> orders;
  for (int r = 0; r < P; ++r) orders.push_back(ch11::order(schedule, pipe, r));
  const std::vector<std::vector<ch11::Tick>> all_ticks = ch11::lockstep(pipe, orders);
  const std::vector<ch11::Tick>& ticks = all_ticks[static_cast<size_t>(s)];
  if (print_schedule)
    job.say(std::string("the schedule, one column a tick") + (pipe.chunks > 1 ? " (F3.1: micro-batch 3's forward through chunk 1)" : "") +
            ":\n" + ch11::draw(all_ticks, pipe));

  const Shape act{batches[0]->rows(), setup.T, cfg.channels};
  // What a micro-batch's forward through one of this rank's chunks keeps until its backward:
  // its units' saved tensors, with the input that crossed from the stage before in place of
  // that stage's output, and without the output it sends on (freed once sent). Under zero
  // bubble its B frees all but what the W reads (gpt_unit_weight_grad_bytes), the W the rest.
  const auto held_change = [&](const ch11::Action& a) {
    const int k = pipe.stage(s, a.chunk);
    const int64_t crossing = gpt_unit_activation_bytes(cfg, 0, act[0], act[1]);  // one [B, T, C] f32 tensor
    int64_t saved = (k > 0 ? crossing : 0) - (k < S - 1 ? crossing : 0), for_w = 0;
    for (int u = stages[static_cast<size_t>(k)].first; u <= stages[static_cast<size_t>(k)].last; ++u) {
      saved += gpt_unit_activation_bytes(cfg, u, act[0], act[1]);
      if (zero_bubble) for_w += gpt_unit_weight_grad_bytes(cfg, u, act[0], act[1]);
    }
    return a.pass == ch11::Pass::forward ? saved : a.pass == ch11::Pass::backward ? for_w - saved : -for_w;
  };

  const int64_t before_steps = dev.allocator().allocated();
  for (int64_t step = 0; step < job.steps(); ++step) {
    Job::Step st(job, step);
    ops::fill(dev, compute, grads, 0.0f);
    // The tokens and targets of every micro-batch first, on the ranks of the first and the last
    // stage, each into its own buffers (a DataLoader's batches, ready before the step): the copy
    // waits for the stream (copy_to_device), which inside the schedule would stall the CPU
    // behind every pass queued so far.
    if (first || last)
      for (int m = 0; m < M; ++m) batches[static_cast<size_t>(m)]->load(*models[static_cast<size_t>(m)], step, m);
    std::map<std::pair<int, int>, Arrival> inputs, output_grads;  // (micro, chunk) -> what arrived for it
    // A chunk's gradients are final after its M-th backward (under zero bubble, its M-th W).
    const ch11::Pass last_gradient = zero_bubble ? ch11::Pass::weight : ch11::Pass::backward;
    std::vector<int> finished(static_cast<size_t>(pipe.chunks), 0);
    for (const ch11::Tick& tick : ticks) {
      // 2. This tick's pass, if the rank has one: a forward, a backward (under zero bubble its B),
      //    or a W, which runs the weight GEMMs its B queued and hands nothing on.
      Tensor out;  // what the pass hands to a neighbour
      int out_to = -1;
      if (tick.run) {
        const ch11::Action& a = *tick.run;
        GPT& model = *models[static_cast<size_t>(a.micro)];
        const int k = pipe.stage(s, a.chunk);
        const ch11::Units u = stages[static_cast<size_t>(k)];
        const bool forward = a.pass == ch11::Pass::forward;
        // Wait for what crossed, on the compute stream only, and tell the allocator the compute
        // stream uses it now (the model frees it there).
        const auto take = [&](std::map<std::pair<int, int>, Arrival>& box) {
          Arrival got = box.at({a.micro, a.chunk});
          box.erase({a.micro, a.chunk});
          dev.wait(compute, got.ready);
          dev.record_stream(got.tensor, compute);
          return got.tensor;
        };
        // "F3", "B3" (with chunks "F3.1"): the papers' names, on the CPU thread and above the
        // pass's kernels on the compute stream.
        RecordFunction range(dev, compute, ch11::name(a, pipe));
        if (forward && k > 0) model.set_input(u.first, take(inputs));
        if (a.pass == ch11::Pass::backward && k < S - 1) model.set_output_grad(take(output_grads));
        const bool final_pass = a.pass == last_gradient && ++finished[static_cast<size_t>(a.chunk)] == M;
        if (forward) {
          for (int unit = u.first; unit <= u.last; ++unit) {
            dp.params_ready(unit, compute);  // sharded: its parameters gathered after the last step
            model.forward(unit, compute);
          }
          if (k < S - 1) out = model.take_output(u.last), out_to = pipe.rank_of(k + 1);
        } else {
          for (int unit = u.last; unit >= u.first; --unit) {
            if (a.pass == ch11::Pass::backward)
              model.backward(unit, compute);
            else
              model.backward_weights(unit, compute);
            if (final_pass) dp.unit_done(unit, compute);  // the unit's gradients end here
          }
          if (a.pass == ch11::Pass::backward && k > 0) out = model.take_input_grad(), out_to = pipe.rank_of(k - 1);
        }
      }
      // 3. The two exchanges (schedule.h): forward outputs, then backward input gradients. Each
      //    is one sendrecv on the p2p stream, after the compute stream has made what it sends.
      const bool sends_forward = tick.run && tick.run->pass == ch11::Pass::forward && out_to >= 0;
      const bool sends_backward = tick.run && tick.run->pass == ch11::Pass::backward && out_to >= 0;
      const auto exchange = [&](bool sends, const std::optional<ch11::Action>& arrives, int from_stage_offset,
                                std::map<std::pair<int, int>, Arrival>& box) {
        Tensor received;
        int from = -1;
        if (arrives) {
          from = pipe.rank_of(pipe.stage(s, arrives->chunk) + from_stage_offset);
          if (from != s) received = dev.empty(act, DType::f32, p2p, from_stage_offset < 0 ? "stage.input" : "stage.output_grad");
        }
        const int to = sends ? out_to : -1;
        if (to == s) {  // one rank holds both stages (P = 1): the tensor stays here
          box[{arrives->micro, arrives->chunk}] = {out, dev.record(compute)};
          return;
        }
        if (to < 0 && from < 0) return;
        if (to >= 0) dev.wait(p2p, dev.record(compute));
        pipeline->sendrecv(to >= 0 ? out : Tensor{}, to, received, from, p2p);
        if (to >= 0) {
          dev.record_stream(out, p2p);
          dev.free(out);
        }
        if (from >= 0) box[{arrives->micro, arrives->chunk}] = {received, dev.record(p2p)};
      };
      exchange(sends_forward, tick.forward_input, -1, inputs);
      exchange(sends_backward, tick.output_grad, +1, output_grads);
    }
    // 4. The tied copy's average over the replicas, then the compute stream waits for every
    //    reduction; the tied embedding's gradient summed over its two copies; AdamW on the
    //    rank's parameters (sharded: on its shard, then all-gathered).
    dp.finish(compute);
    if (P > 1 && (first || last)) embedding_group->all_reduce(dp.tied_grad(), ReduceOp::sum, compute);
    {
      RecordFunction range(dev, compute, "optimizer");
      dp.step(compute, step + 1, setup.adamw);
    }
    // The loss lives on the last stage: every rank reports the mean of the replicas' (ranks
    // (P - 1) D .. P D - 1).
    double loss = 0;
    if (last)
      for (auto& model : models) loss += model->mean_loss(compute) / M;
    const std::vector<double> losses = job.every_rank(loss);
    double mean_loss = 0;
    for (int r = 0; r < D; ++r) mean_loss += losses[static_cast<size_t>((P - 1) * D + r)] / D;
    st.set_loss(mean_loss);
    st.set_tokens(batches[0]->tokens_per_step());
  }

  // 5. The bubble: the share of the last step each rank's compute stream sat idle, against the
  //    formula for stages whose passes take T_F, T_B (and T_W) each: the mean over the ranks.
  // Each kind of pass's time: the last step's ranges "F3", "B3", "W3" over the compute
  // stream's kernels (RecordFunction, a range a pass: the stream's last ones), the mean over
  // passes: the formula's T_F, T_B and T_W.
  dev.synchronize(compute);  // every slice landed, and so every range written
  std::map<char, std::pair<double, int>> pass_us;  // 'F', 'B', 'W' -> (total us, passes)
  int64_t passes_left = std::count_if(ticks.begin(), ticks.end(), [](const ch11::Tick& t) { return t.run.has_value(); });
  double optimizer_us = -1;  // the last step's "optimizer" range
  const std::vector<StreamRange>& ranges = dev.trace().timeline().stream_ranges;
  for (auto r = ranges.rbegin(); r != ranges.rend() && (passes_left > 0 || optimizer_us < 0); ++r) {
    if (r->stream != compute.id()) continue;
    if (r->name == "optimizer") {
      if (optimizer_us < 0) optimizer_us = r->end_us - r->start_us;
    } else if (passes_left > 0) {
      auto& [us, passes] = pass_us[r->name.at(0)];
      us += r->end_us - r->start_us;
      ++passes;
      --passes_left;
    }
  }
  const auto mean_over_ranks = [&](double x) {
    double sum = 0;
    for (double y : job.every_rank(x)) sum += y;
    return sum / job.world_size();
  };
  const auto pass_ms = [&](char kind) {
    const auto [us, passes] = pass_us[kind];
    return mean_over_ranks(passes > 0 ? us / 1000.0 / passes : 0.0);
  };
  const double t_f = pass_ms('F'), t_b = pass_ms('B'), t_w = zero_bubble ? pass_ms('W') : 0.0;
  // GPipe, 1F1B: (P - 1) / (M + P - 1), the passes' times cancelling; interleaving divides the
  // fill and drain by V; ZB-H1 (Qi et al. 2023) idles (P - 1)(T_F + T_B - T_W) a rank.
  const double formula =
      zero_bubble ? (P - 1) * (t_f + t_b - t_w) / (M * (t_f + t_b + t_w) + (P - 1) * (t_f + t_b - t_w))
                  : static_cast<double>(P - 1) / static_cast<double>(pipe.chunks * M + P - 1);
  const StepMetrics last_step = step_metrics(dev.trace().timeline()).back();
  const double idle = 1 - last_step.compute_us / last_step.step_us;
  const double mean = mean_over_ranks(idle);
  job.figure("step_ms", last_step.step_us / 1000.0, "ms", "the last step");
  job.figure("bubble_mean", mean, "", "the ranks' compute idle over the last step, the mean over ranks");
  job.figure("bubble_formula", formula, "",
             zero_bubble ? "(P - 1)(T_F + T_B - T_W) / (M (T_F + T_B + T_W) + (P - 1)(T_F + T_B - T_W))"
                         : "(P - 1) / (V M + P - 1)");
  job.rank_figure("bubble", idle, "", "this rank's compute idle over the last step");
  job.figure("pass_F_ms", t_f, "ms", "a forward pass, the last step's mean over passes and ranks");
  job.figure("pass_B_ms", t_b, "ms", zero_bubble ? "a B pass (the input's gradient), the same mean" : "a backward pass, the same mean");
  if (zero_bubble) job.figure("pass_W_ms", t_w, "ms", "a W pass (the weights' gradients), the same mean");
  if (const Stream* reductions = dp.stream()) {
    // The replicas' all-reduces on rank 0 (the first stage, whose last gradients come last).
    const StepWindow window = dev.trace().timeline().steps.back();
    const StreamMetrics m = stream_metrics(dev.trace().timeline(), reductions->id(), window.start_us, window.end_us);
    job.figure("dp_comm_ms", m.busy_us / 1000.0, "ms",
               shard_optimizer ? "rank 0's reduce-scatters and all-gathers over the replicas, the last step"
                               : "rank 0's all-reduces over the replicas, the last step");
    job.figure("dp_exposed_ms", m.exposed_comm_us / 1000.0, "ms", "the part of them no compute hid");
  }
  job.figure("optimizer_ms", optimizer_us / 1000.0, "ms", "rank 0's optimizer step on its stream, the last step");
  job.figure("adam_state_MiB", MiB(2.0 * static_cast<double>(dp.adam_m().bytes())), "MiB",
             shard_optimizer ? "AdamW's m and v on rank 0: its shard of its stage's" : "AdamW's m and v on rank 0");
  job.figure("peak_allocated_MiB", MiB(static_cast<double>(dev.allocator().peak_allocated())), "MiB", "measured, rank 0 (the first stage)");
  double most = 0;  // the rank whose memory must fit
  for (double peak : job.every_rank(static_cast<double>(dev.allocator().peak_allocated()))) most = std::max(most, peak);
  job.figure("peak_allocated_max_MiB", MiB(most), "MiB", "measured, the largest over the ranks");
  // The activations: rank 0's peak above what it held before the first step (parameters,
  // gradients, AdamW's moments, the batches), against what the schedule keeps in flight.
  job.figure("activations_MiB", MiB(static_cast<double>(dev.allocator().peak_allocated() - before_steps)), "MiB",
             "rank 0's peak allocated less what it held before the first step");
  job.figure("activations_schedule_MiB", MiB(static_cast<double>(ch11::peak_held(ticks, held_change))), "MiB",
             "rank 0: the most micro-batches' saved activations the schedule keeps at once");

  // 6. The proof: the ranks' parameters put together equal single-rank training.
  dp.all_gathered(compute);  // sharded: the last step's updates gathered
  if (dev.computes() && setup.check_reference) {
    // Each rank places what it holds in the whole model (the tied wte's last-stage copy left
    // out: the first stage's is the one), and the ranks' places are summed: over the pipeline
    // for what every replica holds whole, over the world for the moments' shards.
    const auto whole = [&](const Tensor& buffer, int shards) {
      const int index = shards > 1 ? dp.shard_index() : 0;
      std::vector<float> held(static_cast<size_t>(buffer.numel())), local(static_cast<size_t>(n), 0.0f),
          natural(static_cast<size_t>(gpt_num_params(cfg)), 0.0f);
      copy_to_host(dev, compute, held.data(), buffer);
      for (const ch11::ParamRun& run : runs) {
        if (run.tied_copy) continue;
        const int64_t shard = run.padded / shards;
        std::copy_n(held.data() + run.offset / shards, shard, local.data() + run.offset + index * shard);
        place_params(params, run.params, local.data() + run.offset, natural);
      }
      return ch02::summed_over(dev, shards > 1 ? job.world() : *pipeline, std::move(natural));
    };
    ch02::check_against_reference(job, setup, whole(weights, 1), whole(dp.adam_m(), dp.shards()));
  }
  for (Tensor* t : {&grads, &weights}) dev.free(*t);
}

}  // namespace

int main(int argc, char** argv) {
  const ChapterInfo chapter{.id = "11_pipeline_parallel",
                            .title = "Pipeline parallelism: stages and schedules",
                            .default_steps = 5};
  return run_chapter(argc, argv, chapter, add_flags, lesson);
}
