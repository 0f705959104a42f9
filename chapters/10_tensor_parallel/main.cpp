// Chapter 10: tensor parallelism, every block's matmuls cut over the ranks of a group.
//
//   cmake --preset default && cmake --build --preset default
//   mpirun -np 4 build/chapters/shardlab_ch10                              # tiny-12h, 4-way TP: trains, checks itself
//   mpirun -np 4 build/chapters/shardlab_ch10 --sequence-parallel          # the residual stream cut by tokens too
//   mpirun -np 4 build/chapters/shardlab_ch10 --sequence-parallel --async-tp  # all-gathers overlapped with the matmuls
//   mpirun -np 4 build/chapters/shardlab_ch10 --tp 2                       # 2-way TP x FSDP2 over 2
//   mpirun -np 4 build/chapters/shardlab_ch10 --model gpt2-small --global-batch 4 --seq-len 1024 --compute skip --steps 2
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

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "02_naive_ddp/data_parallel.h"
#include "05_prefetch/fsdp_step.h"
#include "10_tensor_parallel/memory.h"
#include "10_tensor_parallel/mesh_2d.h"
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
bool async_tp = false;

// --tp, 0 by default: the most ranks, up to one node's GPUs, that divide the world and that the
// model can be cut over (gpt2-small's 12 heads: 4 of a node's 8).
int tp_size(const RunShape& run) {
  if (tp_flag != 0) return static_cast<int>(tp_flag);
  int tp = std::min(run.world_size, run.gpus_per_node);
  while (run.world_size % tp != 0 || !slice_problem(GPTConfig::preset(train.model), tp).empty()) --tp;
  return tp;
}

void add_flags(Flags& f) {
  f.add_int("tp", &tp_flag, 0, 1024,
            "ranks in each tensor-parallel group, dividing the world and the model's heads (0: the most, up to one "
            "node's GPUs); the world / tp groups are data-parallel");
  f.add_bool("sequence-parallel", &sequence_parallel,
             "cut the residual stream, layer norms and residual adds by tokens too: f and g become all-gather and "
             "reduce-scatter (default: false)");
  f.add_bool("async-tp", &async_tp,
             "overlap each f's all-gather with its matmul in pieces, passing the rows around a ring on a stream of "
             "their own (needs --sequence-parallel; default: false)");
  f.add_check([](const RunShape&) {
    require(!async_tp || sequence_parallel, "--async-tp", "on", "off, or on with --sequence-parallel");
  });
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

// A slice's parameters on one data-parallel rank (D = 1): flat buffers, laid out with the
// parameters whose gradients sequence parallelism leaves partial first, so that those gradients
// are one slice of the flat gradient and one all-reduce.
struct WholeSlice {
  WholeSlice(Job& job, GPT& model, const ch09::ParamInit& init) : dev(job.device()) {
    Stream& s = dev.compute_stream();
    std::vector<int> rest;
    for (size_t i = 0; i < model.params().size(); ++i) {
      const bool partial = ch10::sums_over_tokens(model.params()[i]);
      (partial ? layout : rest).push_back(static_cast<int>(i));
      if (partial) token_partial += model.params()[i].shape.numel();
    }
    layout.insert(layout.end(), rest.begin(), rest.end());
    for (const ParamInfo& p : model.params()) n += p.shape.numel();
    for (auto [t, name] : {std::pair{&params, "params"}, {&grads, "grads"}, {&m, "adam.m"}, {&v, "adam.v"}})
      *t = dev.empty({n}, DType::f32, s, name);
    bind_views(model.weights(), params, model.params(), layout);
    bind_views(model.grads(), grads, model.params(), layout);
    ops::fill(dev, s, m, 0.0f);
    ops::fill(dev, s, v, 0.0f);
    if (dev.computes()) {  // every parameter's initial slice, in the layout's order
      std::vector<float> mine(static_cast<size_t>(n));
      float* at = mine.data();
      for (int i : layout) {
        init(i, at);
        at += model.params()[static_cast<size_t>(i)].shape.numel();
      }
      copy_to_device(dev, s, params, mine.data());
    }
  }
  ~WholeSlice() {
    for (Tensor* t : {&v, &m, &grads, &params}) dev.free(*t);
  }
  // A buffer of this layout, on the host in the model's order.
  std::vector<float> natural(const GPT& model, const Tensor& buffer) {
    std::vector<float> laid_out(static_cast<size_t>(n)), out(static_cast<size_t>(n));
    copy_to_host(dev, dev.compute_stream(), laid_out.data(), buffer);
    place_params(model.params(), layout, laid_out.data(), out);
    return out;
  }

  Device& dev;
  std::vector<int> layout;
  int64_t n = 0, token_partial = 0;
  Tensor params, grads, m, v;
};

void lesson(Job& job) {
  Device& dev = job.device();
  Stream& compute = dev.compute_stream();
  const TrainSetup setup = train_setup(train, job.steps(), job.flags().seed);
  const GPTConfig cfg = GPTConfig::preset(setup.model);

  // 1. The mesh: tensor-parallel groups of consecutive ranks, data-parallel groups across them.
  const int tp = tp_size({job.world_size(), dev.profile().gpus_per_node});
  ch10::Mesh mesh = ch10::make_mesh(job.world(), tp);
  job.set_strategy("TP=" + std::to_string(tp) + (sequence_parallel ? " + SP" : "") + (async_tp ? " (async)" : "") +
                   (mesh.dp > 1 ? " x FSDP2 over " + std::to_string(mesh.dp) : ""));

  // 2. The model computes its slice; Megatron's collectives are its f and g.
  // Async tensor parallelism's exchanges get a stream of their own, to run under the matmuls.
  Stream* ring = async_tp ? &dev.create_stream("async_tp") : nullptr;
  ch10::MegatronTP collectives(dev, *mesh.tp_group, cfg, sequence_parallel, ring);
  GroupBatch batch(job, setup, mesh);
  GPT model(dev, cfg, batch.rows(), setup.T, DType::f32, &collectives);
  const ModelSlice slice = collectives.slice();
  const ch09::ParamInit init = ch10::slice_init(cfg, slice, setup.seed);
  int64_t n = 0;
  for (const ParamInfo& p : model.params()) n += p.shape.numel();
  job.say("model " + setup.model + ": " + std::to_string(gpt_num_params(cfg)) + " parameters; each rank's slice holds " +
          std::to_string(n) + " (" + std::to_string(slice.heads(cfg)) + " of " + std::to_string(cfg.heads) +
          " heads a block, vocabulary rows [" + std::to_string(slice.vocab_begin(cfg)) + ", " +
          std::to_string(slice.vocab_begin(cfg) + slice.vocab_rows(cfg)) + "))" +
          (mesh.dp > 1 ? ", sharded by FSDP2 over " + std::to_string(mesh.dp) + " data-parallel ranks" : ""));
  if (dev.computes()) job.say("loss floor (the data's entropy rate): " + std::to_string(batch.chain().entropy_rate()) + " nats\n");

  // 3. The parameters: the slice whole on this rank (one data-parallel rank), or the slice
  //    sharded over the data-parallel group by chapter 09's fully_shard.
  std::optional<WholeSlice> whole;
  std::optional<ch09::CommContext> ctx;
  std::optional<ch09::FullyShard> fsdp;
  std::optional<ch10::FsdpOverSlices> hooks;
  if (mesh.dp == 1) {
    whole.emplace(job, model, init);
  } else {
    ctx.emplace(dev.create_stream("all_gather_copy_in"), dev.create_stream("all_gather"), dev.create_stream("reduce_scatter"));
    fsdp.emplace(job, model, setup.seed, *mesh.dp_group, *ctx, ch09::Fsdp2Options{}, std::vector<bool>(model.params().size()), init);
    hooks.emplace(dev, *fsdp, model, *mesh.tp_group, sequence_parallel);
  }

  int64_t saved = 0;  // bytes the last forward kept for backward (one data-parallel rank)

  // 4. The steps: forward and backward through the slices (their collectives inside, on the
  //    compute stream); with one data-parallel rank, the partial gradients summed and AdamW;
  //    with more, FSDP2's step around the same model.
  for (int64_t step = 0; step < job.steps(); ++step) {
    Job::Step s(job, step);
    batch.load(model, step, 0);
    if (whole) {
      ops::fill(dev, compute, whole->grads, 0.0f);
      const size_t before_forward = dev.allocator().allocated();
      for (int u = 0; u < model.units(); ++u) model.forward(u, compute);
      saved = static_cast<int64_t>(dev.allocator().allocated() - before_forward);
      for (int u = model.units() - 1; u >= 0; --u) model.backward(u, compute);
      if (sequence_parallel && tp > 1) {
        HostScope scope(dev, "all-reduce sequence-parallel gradients");
        mesh.tp_group->all_reduce(whole->grads.view(0, {whole->token_partial}), ReduceOp::sum, compute);
      }
      ops::adamw(dev, compute, whole->params, whole->grads, whole->m, whole->v, step + 1, setup.adamw);
    } else {
      ch05::forward_backward(dev, *hooks, model);
      fsdp->optimizer_step(step, setup.adamw);
    }
    s.set_loss(model.mean_loss(compute));
    s.set_tokens(batch.tokens_per_step());
  }

  // 5. The last step's figures.
  const RankTimeline& tl = dev.trace().timeline();
  const StepWindow& last = tl.steps.back();
  job.figure("step_ms", (last.end_us - last.start_us) / 1000.0, "ms", "the last step");
  const StepMetrics metrics = step_metrics(tl).back();
  job.figure("exposed_comm_ms", metrics.exposed_comm_us / 1000.0, "ms", "communication with no compute under it");
  job.figure("peak_allocated_MiB", MiB(static_cast<double>(dev.allocator().peak_allocated())), "MiB", "measured, rank 0");

  // What forward kept for backward, against memory.h's count (where no FSDP buffer mixes in).
  const ch10::Activations formula = ch10::saved_activations(cfg, batch.rows(), setup.T, slice, sequence_parallel);
  job.figure("block_activations_MiB", MiB(static_cast<double>(formula.per_block)), "MiB",
             "one block's saved activations, memory.h's count");
  if (whole) {
    job.figure("saved_activations_MiB", MiB(static_cast<double>(saved)), "MiB", "what the last forward kept for backward, measured");
    if (saved < formula.total || saved - formula.total > formula.slack())
      throw std::logic_error("forward kept " + std::to_string(saved) + " bytes for backward; memory.h counts " +
                             std::to_string(formula.total) + " (and the allocator may count up to " +
                             std::to_string(formula.slack()) + " more, in blocks it did not split)");
  }

  // 6. The collectives of the tensor-parallel group in the last step, against the formula:
  //    per block, f and g forward and backward; the embedding's g; the head's f; the loss's two.
  int all_reduces = 0, all_gathers = 0, reduce_scatters = 0, exchanges = 0;
  double tp_us = 0, dp_us = 0;
  for (const CollectiveMetrics& c : collective_metrics(tl)) {
    if (c.step != job.steps()) continue;
    if (c.group == mesh.dp_group->name()) dp_us += c.time_us;
    if (c.group != mesh.tp_group->name()) continue;
    tp_us += c.time_us;
    all_reduces += c.name == "allreduce", all_gathers += c.name == "allgather", reduce_scatters += c.name == "reduce_scatter";
    exchanges += c.name == "sendrecv";
  }
  job.figure("tp_comm_ms", tp_us / 1000.0, "ms", "the tensor-parallel group's collectives, summed");
  job.figure("dp_comm_ms", dp_us / 1000.0, "ms", "the data-parallel group's (FSDP2's), summed");
  job.figure("network_MB", static_cast<double>(metrics.network_bytes) / 1e6, "MB", "this rank's bytes on the network");
  job.figure("intra_node_MB", static_cast<double>(metrics.intra_node_bytes) / 1e6, "MB", "on NVLink (or PCIe)");
  const int L = static_cast<int>(cfg.layers);
  int partial_grads = 0;  // all-reduces of the gradients sequence parallelism leaves partial
  for (const ParamInfo& p : model.params()) partial_grads += ch10::sums_over_tokens(p);
  const bool alone = tp == 1;
  const int want_ar = alone ? 0 : sequence_parallel ? 2 + (whole ? 1 : partial_grads) : 4 * L + 4;
  // Async TP: forward's 2L + 1 all-gathers (two f's a block, the head's) become T - 1 exchanges each.
  const int fused = alone || !async_tp ? 0 : 2 * L + 1;
  const int want_ag = alone || !sequence_parallel ? 0 : 6 * L + 3 - fused;
  const int want_rs = alone || !sequence_parallel ? 0 : 4 * L + 2;
  const int want_sr = fused * (tp - 1);
  job.figure("tp_allreduces_per_step", all_reduces, "", "from the trace");
  job.figure("tp_allgathers_per_step", all_gathers, "", "from the trace");
  job.figure("tp_reduce_scatters_per_step", reduce_scatters, "", "from the trace");
  if (async_tp) job.figure("tp_exchanges_per_step", exchanges, "", "async TP's sendrecvs, from the trace");
  if (all_reduces != want_ar || all_gathers != want_ag || reduce_scatters != want_rs || exchanges != want_sr)
    throw std::logic_error("expected " + std::to_string(want_ar) + " all-reduces, " + std::to_string(want_ag) +
                           " all-gathers, " + std::to_string(want_rs) + " reduce-scatters and " + std::to_string(want_sr) +
                           " exchanges in the tensor-parallel group a step; the trace shows " + std::to_string(all_reduces) +
                           ", " + std::to_string(all_gathers) + ", " + std::to_string(reduce_scatters) + " and " +
                           std::to_string(exchanges));

  // 7. The proof: the slices put together equal single-rank training on the global batch.
  if (dev.computes() && setup.check_reference) {
    std::vector<float> params, moments;
    if (whole) {
      params = whole->natural(model, whole->params);
      moments = whole->natural(model, whole->m);
    } else {
      fsdp->gather(model, params, moments);
    }
    ch02::check_against_reference(job, setup, ch10::whole_model(dev, *mesh.tp_group, cfg, slice, params),
                                  ch10::whole_model(dev, *mesh.tp_group, cfg, slice, moments));
  }
}

}  // namespace

int main(int argc, char** argv) {
  const ChapterInfo chapter{.id = "10_tensor_parallel",
                            .title = "Tensor parallelism: Megatron's f and g",
                            .default_steps = 5};
  return run_chapter(argc, argv, chapter, add_flags, lesson);
}
