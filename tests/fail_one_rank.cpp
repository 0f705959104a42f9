// fail_one_rank: a job in which one rank (--failing-rank, default 1) throws in its second step
// while every other rank waits in a collective. The harness must print that rank's message and
// bring the whole job down, not hang; the failed step prints no progress line.
#include <stdexcept>
#include <string>

#include "run/job.h"

using namespace shardlab;

namespace {
int64_t failing_rank = 1;
}

int main(int argc, char** argv) {
  const auto add_flags = [](Flags& f) { f.add_int("failing-rank", &failing_rank, 0, 1 << 20, "the rank that throws"); };
  return run_chapter(argc, argv, {"fail_one_rank", "A failing rank", 2}, add_flags, [](Job& job) {
    Device& dev = job.device();
    Tensor t = dev.empty({16}, DType::f32, dev.compute_stream(), "t");
    for (int64_t step = 0; step < 2; ++step) {
      Job::Step s(job, step);
      if (step == 1 && job.rank() == failing_rank)
        throw std::runtime_error("deliberate failure on rank " + std::to_string(job.rank()));
      job.world().all_reduce(t, ReduceOp::sum, dev.compute_stream());  // in step 2 the failing rank never joins
    }
  });
}
