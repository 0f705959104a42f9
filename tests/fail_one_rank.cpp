// fail_one_rank: a job in which rank 1 throws while every other rank waits in a collective.
// The harness must print rank 1's message and bring the whole job down, not hang.
#include <stdexcept>

#include "job.h"

using namespace shardlab;

int main(int argc, char** argv) {
  return run_chapter(argc, argv, {"fail_one_rank", "A failing rank", 1}, nullptr, [](Job& job) {
    if (job.rank() == 1) throw std::runtime_error("deliberate failure on rank 1");
    Tensor t = job.device().empty({16}, DType::f32, job.device().compute_stream(), "t");
    job.world().all_reduce(t, ReduceOp::sum, job.device().compute_stream());  // rank 1 never joins
    job.device().synchronize();
  });
}
