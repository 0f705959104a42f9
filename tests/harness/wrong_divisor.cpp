// wrong_divisor: chapter 02's naive DDP with a bug in its gradient reduction, chosen by --bug,
// to show that the numerics check every training chapter ends with catches each one in 2 steps:
//   --bug none   the chapter's reduction (every gradient averaged): the check passes;
//   --bug sum    the token embedding's gradient summed over the ranks instead of averaged. AdamW's
//                step does not change when a gradient is scaled, so the parameters barely move
//                apart: the first moment m, scaled with the gradient, gives it away;
//   --bug twice  that gradient averaged, then divided by the world size again (the same);
//   --bug skip   that gradient never reduced: each rank steps on its own, the parameters differ.
//
//   mpirun -np 2 build/tests/wrong_divisor --bug sum     # exits 1 naming wte.weight's factor 2
#include <string>

#include "02_naive_ddp/data_parallel.h"
#include "run/train_flags.h"

using namespace shardlab;

namespace {

TrainFlags train;
std::string bug = "sum";

void lesson(Job& job) {
  Device& dev = job.device();
  Stream& compute = dev.compute_stream();
  const TrainSetup setup = train_setup(train, job.steps(), job.flags().seed);
  ch02::Replica replica(job, setup, 1, ch02::natural_layout(GPTConfig::preset(setup.model)));
  GPT& model = replica.model();
  ch02::start_training(job, replica);
  for (int64_t step = 0; step < job.steps(); ++step) {
    Job::Step s(job, step);
    replica.zero_grad();
    replica.load_micro_batch(step, 0);
    for (int u = 0; u < model.units(); ++u) model.forward(u, compute);
    for (int u = model.units() - 1; u >= 0; --u) model.backward(u, compute);
    for (size_t i = 0; i < model.grads().size(); ++i) {
      const Tensor& g = model.grads()[i];
      const bool wrong = i == 0 && bug != "none";  // parameter 0: the token embedding
      if (wrong && bug == "skip") continue;
      job.world().all_reduce(g, wrong && bug == "sum" ? ReduceOp::sum : ReduceOp::avg, compute);
      if (wrong && bug == "twice") ops::scale_(dev, compute, g, 1.0f / static_cast<float>(job.world_size()));
    }
    replica.optimizer_step(step);
    s.set_loss(model.mean_loss(compute));
    s.set_tokens(replica.tokens_per_step());
  }
  const int expected = static_cast<int>(model.params().size()) - (bug == "skip" ? 1 : 0);
  ch02::check_training(job, replica, expected, "parameter tensor");
}

}  // namespace

int main(int argc, char** argv) {
  const auto add_flags = [](Flags& f) {
    add_train_flags(f, train);
    f.add_choice("bug", &bug, {"none", "sum", "twice", "skip"},
                 "none: averaged; sum: one gradient summed; twice: divided twice; skip: never reduced");
  };
  const ChapterInfo chapter{.id = "wrong_divisor",
                            .title = "A gradient reduced with the wrong divisor",
                            .default_steps = 2};
  return run_chapter(argc, argv, chapter, add_flags, lesson);
}
