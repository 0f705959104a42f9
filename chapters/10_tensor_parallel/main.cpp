// Chapter 10: tensor parallelism, every block's matmuls cut over the ranks of a group.
//
//   cmake --preset default && cmake --build --preset default
//   mpirun -np 4 build/chapters/shardlab_ch10                              # tiny-12h, 4-way TP: trains, checks itself
//   mpirun -np 4 build/chapters/shardlab_ch10 --sequence-parallel          # the residual stream cut by tokens too
//   mpirun -np 4 build/chapters/shardlab_ch10 --tp 2                       # 2-way TP x 2-way data parallel
//   mpirun -np 8 build/chapters/shardlab_ch10 --model gpt2-small --global-batch 8 --seq-len 1024 --compute skip
//
// Every rank of a tensor-parallel group holds its slice of every block (its heads, its share of
// the MLP's hidden units) and of the vocabulary, and computes on the whole batch of its group:
// the model runs its slice's shapes (model.h's ModelSlice) and calls Megatron's f and g at the
// slice's edges (tensor_parallel.h). Across groups, data parallelism: each group trains on its
// share of the global batch and the gradients are averaged over the groups.
//
// What the run proves: the parameters and AdamW's moments, gathered from the slices, equal
// single-rank training on the global batch; the trace holds the collectives the formula says
// (four all-reduces a block a step, or their sequence-parallel halves).

#include <string>
#include <vector>

#include "02_naive_ddp/data_parallel.h"
#include "10_tensor_parallel/tensor_parallel.h"
#include "run/train_flags.h"
#include "trace/metrics.h"

using namespace shardlab;

namespace {

// tiny-12h by default: 12 heads divide over 1, 2, 3 and 4 ranks (tiny's 2 do not).
TrainFlags train = [] {
  TrainFlags t;
  t.model = "tiny-12h";
  return t;
}();
int64_t tp_flag = 0;
bool sequence_parallel = false;

// --tp, 0 by default: the world, or one node's GPUs when the world spans nodes.
int tp_size(const RunShape& run) {
  if (tp_flag != 0) return static_cast<int>(tp_flag);
  int tp = std::min(run.world_size, run.gpus_per_node);
  while (run.world_size % tp != 0) --tp;
  return tp;
}

void add_flags(Flags& f) {
  f.add_int("tp", &tp_flag, 0, 1024,
            "ranks in each tensor-parallel group (they must divide the world and the model's heads; 0: one node's GPUs, "
            "or the world if smaller); the world / tp groups are data-parallel");
  f.add_bool("sequence-parallel", &sequence_parallel,
             "cut the residual stream, layer norms and residual adds by tokens too: f and g become all-gather and "
             "reduce-scatter (default: false)");
  f.add_check([](const RunShape& run) {
    const int tp = tp_size(run);
    require(run.world_size % tp == 0, "--tp", tp, "a divisor of the world size " + std::to_string(run.world_size));
    const std::string why = slice_problem(GPTConfig::preset(train.model), tp);
    require(why.empty(), "--tp", tp, "a number of ranks the model can be cut over: " + why);
    train.sequence_ranks = tp;  // the global batch divides among the data-parallel groups only
  });
  add_train_flags(f, train);
  f.add_check([](const RunShape& run) {
    const int tp = tp_size(run);
    const int64_t tokens = train.global_batch / (run.world_size / tp) * train.seq_len;
    require(!sequence_parallel || tokens % tp == 0, "--sequence-parallel", "on",
            "off, or a group's " + std::to_string(tokens) + " tokens a step divisible by --tp " + std::to_string(tp));
  });
}

// This rank's rows of the global batch: those of its data-parallel group (every rank of a
// tensor-parallel group trains on the same rows).
class GroupBatch : public ch02::BatchShare {
 public:
  GroupBatch(Job& job, const TrainSetup& setup, const ch10::Mesh& mesh)
      : BatchShare(job, setup, 1, ch02::DataShard{mesh.dp_group->rank(), mesh.dp}, setup.T) {}
};

void lesson(Job& job) {
  Device& dev = job.device();
  Stream& compute = dev.compute_stream();
  const TrainSetup setup = train_setup(train, job.steps(), job.flags().seed);
  const GPTConfig cfg = GPTConfig::preset(setup.model);

  // 1. The mesh: tensor-parallel groups of consecutive ranks, data-parallel groups across them.
  const int tp = tp_size({job.world_size(), dev.profile().gpus_per_node});
  ch10::Mesh mesh = ch10::make_mesh(job.world(), tp);
  job.set_strategy("TP=" + std::to_string(tp) + (sequence_parallel ? " + SP" : "") +
                   (mesh.dp > 1 ? " x DP=" + std::to_string(mesh.dp) : ""));

  // 2. The model's slice: its parameters laid out with the ones sequence parallelism leaves
  //    partial (whole on every rank, but each rank's gradient covers its tokens only) first, so
  //    their gradients are one slice of the flat buffer and one all-reduce.
  ch10::MegatronTP collectives(dev, *mesh.tp_group, cfg, sequence_parallel);
  GroupBatch batch(job, setup, mesh);
  GPT model(dev, cfg, batch.rows(), setup.T, DType::f32, &collectives);
  const ModelSlice slice = collectives.slice();
  std::vector<int> layout, rest;
  int64_t token_partial = 0;  // elements of the gradients sequence parallelism leaves partial
  const std::vector<ParamInfo> whole = gpt_params(cfg);
  for (size_t i = 0; i < whole.size(); ++i) {
    const bool partial = ch10::is_replicated(whole[i]) && whole[i].name != "wpe.weight";
    (partial ? layout : rest).push_back(static_cast<int>(i));
    if (partial) token_partial += whole[i].shape.numel();
  }
  layout.insert(layout.end(), rest.begin(), rest.end());
  int64_t n = 0;
  for (const ParamInfo& p : model.params()) n += p.shape.numel();
  Tensor params = dev.empty({n}, DType::f32, compute, "params"), grads = dev.empty({n}, DType::f32, compute, "grads");
  Tensor m = dev.empty({n}, DType::f32, compute, "adam.m"), v = dev.empty({n}, DType::f32, compute, "adam.v");
  bind_views(model.weights(), params, model.params(), layout);
  bind_views(model.grads(), grads, model.params(), layout);
  ops::fill(dev, compute, m, 0.0f);
  ops::fill(dev, compute, v, 0.0f);
  // Every rank initializes its slice from the seed: the whole parameter, then its runs.
  if (dev.computes()) {
    std::vector<float> mine;
    for (int i : layout) {
      std::vector<float> values(static_cast<size_t>(whole[static_cast<size_t>(i)].shape.numel()));
      gpt_init_param(cfg, i, setup.seed, values.data());
      for (const ch10::Run& r : ch10::slice_runs(cfg, slice, whole[static_cast<size_t>(i)]))
        mine.insert(mine.end(), values.begin() + r.whole, values.begin() + r.whole + r.count);
    }
    copy_to_device(dev, compute, params, mine.data());
  }
  job.say("model " + setup.model + ": " + std::to_string(gpt_num_params(cfg)) + " parameters; this rank holds " +
          std::to_string(n) + " (" + std::to_string(slice.heads(cfg)) + " of " + std::to_string(cfg.heads) +
          " heads a block, vocabulary rows " + std::to_string(slice.vocab_begin(cfg)) + ".." +
          std::to_string(slice.vocab_begin(cfg) + slice.vocab_rows(cfg)) + ")");
  if (dev.computes()) job.say("loss floor (the data's entropy rate): " + std::to_string(batch.chain().entropy_rate()) + " nats\n");

  // 3. The steps: forward and backward through the slices (the collectives inside, on the
  //    compute stream), the partial gradients summed, the groups' gradients averaged, AdamW.
  for (int64_t step = 0; step < job.steps(); ++step) {
    Job::Step s(job, step);
    ops::fill(dev, compute, grads, 0.0f);
    batch.load(model, step, 0);
    for (int u = 0; u < model.units(); ++u) model.forward(u, compute);
    for (int u = model.units() - 1; u >= 0; --u) model.backward(u, compute);
    if (sequence_parallel && tp > 1) {
      HostScope scope(dev, "all-reduce sequence-parallel gradients");
      mesh.tp_group->all_reduce(grads.view(0, {token_partial}), ReduceOp::sum, compute);
    }
    if (mesh.dp > 1) {
      HostScope scope(dev, "all-reduce gradients (data parallel)");
      mesh.dp_group->all_reduce(grads, ReduceOp::avg, compute);
    }
    ops::adamw(dev, compute, params, grads, m, v, step + 1, setup.adamw);
    s.set_loss(model.mean_loss(compute));
    s.set_tokens(batch.tokens_per_step());
  }

  // 4. The last step's figures.
  const RankTimeline& tl = dev.trace().timeline();
  const StepWindow& last = tl.steps.back();
  job.figure("step_ms", (last.end_us - last.start_us) / 1000.0, "ms", "the last step");
  const StepMetrics metrics = step_metrics(tl).back();
  job.figure("exposed_comm_ms", metrics.exposed_comm_us / 1000.0, "ms", "communication with no compute under it");
  job.figure("peak_allocated_MiB", MiB(static_cast<double>(dev.allocator().peak_allocated())), "MiB", "measured, rank 0");

  // 5. The collectives of the tensor-parallel group in the last step, against the formula:
  //    per block, f and g forward and backward; the embedding's g; the head's f; the loss's two.
  int all_reduces = 0, all_gathers = 0, reduce_scatters = 0;
  for (const CollectiveMetrics& c : collective_metrics(tl))
    if (c.step == job.steps() && c.group == mesh.tp_group->name())
      all_reduces += c.name == "allreduce", all_gathers += c.name == "allgather", reduce_scatters += c.name == "reduce_scatter";
  const int L = static_cast<int>(cfg.layers);
  const bool alone = tp == 1;
  const int want_ar = alone ? 0 : sequence_parallel ? 3 : 4 * L + 4;
  const int want_ag = alone || !sequence_parallel ? 0 : 6 * L + 3;
  const int want_rs = alone || !sequence_parallel ? 0 : 4 * L + 2;
  job.figure("tp_allreduces_per_step", all_reduces, "", "from the trace");
  job.figure("tp_allgathers_per_step", all_gathers, "", "from the trace");
  job.figure("tp_reduce_scatters_per_step", reduce_scatters, "", "from the trace");
  if (all_reduces != want_ar || all_gathers != want_ag || reduce_scatters != want_rs)
    throw std::logic_error("expected " + std::to_string(want_ar) + " all-reduces, " + std::to_string(want_ag) +
                           " all-gathers and " + std::to_string(want_rs) +
                           " reduce-scatters in the tensor-parallel group a step; the trace shows " +
                           std::to_string(all_reduces) + ", " + std::to_string(all_gathers) + " and " +
                           std::to_string(reduce_scatters));

  // 6. The proof: the slices put together equal single-rank training on the global batch. Each
  //    rank places its runs in a whole-model buffer of zeros (a replicated parameter: the
  //    group's first rank only) and the group sums them.
  if (dev.computes() && setup.check_reference) {
    const auto put_together = [&](const Tensor& buffer) {
      std::vector<float> local(static_cast<size_t>(n)), natural(static_cast<size_t>(gpt_num_params(cfg)), 0.0f);
      copy_to_host(dev, compute, local.data(), buffer);
      std::vector<int64_t> start(whole.size() + 1, 0);
      for (size_t i = 0; i < whole.size(); ++i) start[i + 1] = start[i] + whole[i].shape.numel();
      size_t at = 0;
      for (int i : layout)
        for (const ch10::Run& r : ch10::slice_runs(cfg, slice, whole[static_cast<size_t>(i)])) {
          if (slice.rank == 0 || !ch10::is_replicated(whole[static_cast<size_t>(i)]))
            std::copy_n(local.begin() + static_cast<int64_t>(at), r.count, natural.begin() + start[static_cast<size_t>(i)] + r.whole);
          at += static_cast<size_t>(r.count);
        }
      Tensor sum = dev.empty({static_cast<int64_t>(natural.size())}, DType::f32, compute, "check.whole_model");
      copy_to_device(dev, compute, sum, natural.data());
      mesh.tp_group->all_reduce(sum, ReduceOp::sum, compute);
      copy_to_host(dev, compute, natural.data(), sum);
      dev.free(sum);
      return natural;
    };
    const std::vector<float> whole_params = put_together(params), whole_moments = put_together(m);
    ch02::check_against_reference(job, setup, whole_params, whole_moments);
  }
  for (Tensor* t : {&v, &m, &grads, &params}) dev.free(*t);
}

}  // namespace

int main(int argc, char** argv) {
  const ChapterInfo chapter{.id = "10_tensor_parallel",
                            .title = "Tensor parallelism: Megatron's f and g",
                            .default_steps = 5};
  return run_chapter(argc, argv, chapter, add_flags, lesson);
}
