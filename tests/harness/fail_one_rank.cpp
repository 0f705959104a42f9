// fail_one_rank: a job in which one rank (--failing-rank, default 1) goes wrong in one step
// (--failing-step, default 2) while every other rank waits in a collective:
//   --mode throw  it throws: the harness prints its message, every rank writes its trace so far
//                 (marked incomplete), and the job ends with status 1 instead of hanging;
//   --mode skip   it skips that step's all-reduce and carries on, as a rank-dependent branch
//                 would: after --collective-timeout the job ends naming it;
//   --mode race   it fills the buffer on a second stream and all-reduces it on the first
//                 without a wait: the run finishes, the race check reports it, exit status 3;
//   --mode skip-sendrecv  it skips that step's ring sendrecv (each rank sends to the next):
//                 the rank after it waits for it, and the job ends naming the skipper;
//   --mode deadlock-sendrecv  in that step every rank sends to the next before it receives, in
//                 two calls instead of one sendrecv: each waits in its send for a receive the
//                 next has not issued, and the job ends naming the ranks that wait for each other;
//   --mode host-oom  it asks the host for more memory than any machine has (std::bad_alloc):
//                 the job ends saying what ran out and which flags make the run smaller;
//   --mode skip-loss  it records no loss for that step, so it skips the step's last
//                 collective, the loss all-reduce at the step's end, while the others wait in
//                 it: after --collective-timeout the job ends naming it, its traces written;
//   --mode slow-solve  every rank computes a value for all (Job::solved_once_each), its own
//                 taking a second longer than --collective-timeout: the others wait for it (a
//                 single-rank reference takes minutes), and the run ends well;
//   --mode solve-throws  the same, its own solve throwing: the others, waiting without a
//                 timeout, hear of it, and the job ends with its message.
// The failed step prints no progress line.
#include <chrono>
#include <functional>
#include <limits>
#include <stdexcept>
#include <thread>
#include <vector>
#include <string>

#include "model/ops.h"
#include "run/job.h"

using namespace shardlab;

namespace {
int64_t failing_rank = 1;
int64_t failing_step = 2;
std::string mode = "throw";
}  // namespace

int main(int argc, char** argv) {
  const auto add_flags = [](Flags& f) {
    f.add_int("failing-rank", &failing_rank, 0, 1 << 20, "the rank that goes wrong");
    f.add_int("failing-step", &failing_step, 1, 1 << 20, "the step (from 1) in which it does");
    f.add_choice("mode", &mode,
                 {"throw", "skip", "race", "skip-loss", "skip-sendrecv", "deadlock-sendrecv", "host-oom", "slow-solve",
                  "solve-throws"},
                 "throw: it throws; skip: it skips that step's all-reduce; race: it forgets a wait; "
                 "skip-loss: it skips the step's closing loss all-reduce; skip-sendrecv: it skips the step's ring sendrecv; "
                 "deadlock-sendrecv: every rank sends before it receives, in two calls; "
                 "host-oom: it runs out of host memory; slow-solve: its value for all outlasts --collective-timeout; "
                 "solve-throws: its value for all throws");
  };
  const ChapterInfo chapter{.id = "fail_one_rank", .title = "A failing rank", .default_steps = 2};
  return run_chapter(argc, argv, chapter, add_flags, [](Job& job) {
    Device& dev = job.device();
    Tensor t = dev.empty({16}, DType::f32, dev.compute_stream(), "t");
    Tensor ring = dev.empty({16}, DType::f32, dev.compute_stream(), "ring");
    Stream& side = dev.create_stream("side");
    std::vector<char> host;
    for (int64_t step = 0; step < job.steps(); ++step) {
      Job::Step s(job, step);
      ops::fill(dev, dev.compute_stream(), t, 1.0f);  // some device work in every step's trace
      const bool wrong = step + 1 == failing_step && job.rank() == failing_rank;
      if (wrong && mode == "throw") throw std::runtime_error("deliberate failure on rank " + std::to_string(job.rank()));
      if (wrong && mode == "host-oom") std::vector<char>(std::numeric_limits<size_t>::max() / 4).swap(host);
      if (wrong && mode == "race") ops::fill(dev, side, t, 2.0f);  // no wait before the all-reduce reads t
      if (!(wrong && mode == "skip")) job.world().all_reduce(t, ReduceOp::sum, dev.compute_stream());
      if (mode == "skip-loss" && !wrong) s.set_loss(1.0);  // the others join the step's loss all-reduce
      const int n = job.world_size(), r = job.rank();
      if (mode == "skip-sendrecv" && !wrong)  // a ring shift, as chapter 08's KV exchange
        job.world().sendrecv(t, (r + 1) % n, ring, (r + n - 1) % n, dev.compute_stream());
      if ((mode == "slow-solve" || mode == "solve-throws") && step + 1 == failing_step) {
        std::vector<std::function<std::vector<float>()>> solves;
        for (int i = 0; i < n; ++i)
          solves.emplace_back([i, &job] {
            if (i == failing_rank && mode == "solve-throws")
              throw std::runtime_error("deliberate failure in rank " + std::to_string(i) + "'s solve");
            if (i == failing_rank)
              std::this_thread::sleep_for(std::chrono::duration<double>(job.flags().collective_timeout_s + 1));
            return std::vector<float>{static_cast<float>(job.rank()), static_cast<float>(i)};
          });
        const std::vector<std::vector<float>> values = job.solved_once_each(solves);
        for (int i = 0; i < n; ++i)
          if (values[static_cast<size_t>(i)] != std::vector<float>{static_cast<float>(i), static_cast<float>(i)})
            throw std::logic_error("solved_once_each: value " + std::to_string(i) + " is not rank " + std::to_string(i) + "'s");
      }
      if (mode == "deadlock-sendrecv" && step + 1 == failing_step) {  // every rank: the send alone, first
        job.world().sendrecv(t, (r + 1) % n, Tensor{}, -1, dev.compute_stream());
        job.world().sendrecv(Tensor{}, -1, ring, (r + n - 1) % n, dev.compute_stream());
      }
    }
    dev.free(t);
    dev.free(ring);
  });
}
