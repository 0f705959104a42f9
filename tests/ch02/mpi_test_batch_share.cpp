// Chapter 02's BatchShare: which tokens each rank loads. The chapters' runs prove the training
// equals single-rank training, which a share that loaded the wrong rows would break only at some
// world sizes and batch shapes; here every rank compares what it bound to the model with the rows
// the Sampler deals it (common/model/data.h), micro-batch by micro-batch.
//
// A share needs a Job, and a Job needs MPI: tagged [batch-share], run at worlds 1 to 4.
#include <catch2/catch.hpp>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "02_naive_ddp/data_parallel.h"
#include "../mpi_job.h"
#include "recorded_share.h"

using namespace shardlab;

namespace {

TrainSetup tiny_setup(int64_t global_batch, int64_t T) {
  TrainSetup s;
  s.global_batch = global_batch;
  s.T = T;
  return s;
}

}  // namespace

TEST_CASE("ch02: BatchShare: each micro-batch binds this rank's next rows of the Sampler's share", "[batch-share]") {
  const std::unique_ptr<Job> job = make_test_job("02_batch_share", ComputeMode::real);
  const int W = world_size(), r = world_rank();
  const int64_t accum = 2, B = 4 * W, T = 16;  // 4 rows a rank, 2 a micro-batch
  const TrainSetup setup = tiny_setup(B, T);
  Recorded<ch02::BatchShare> share(*job, setup, accum);
  CHECK(share.rows() == 2);
  CHECK(share.T() == T);
  GPT model(job->device(), GPTConfig::preset("tiny"), share.rows(), T);

  const Sampler sampler(share.chain(), B, T, r, W, setup.seed);
  for (int64_t step : {0, 3}) {
    const Batch mine = sampler.batch(step);
    for (int64_t micro = 0; micro < accum; ++micro) {
      share.load(model, step, micro);
      const auto first = mine.tokens.begin() + micro * 2 * T;
      CHECK(share.tokens == std::vector<int32_t>(first, first + 2 * T));
      const auto first_target = mine.targets.begin() + micro * 2 * T;
      CHECK(share.targets == std::vector<int32_t>(first_target, first_target + 2 * T));
      // The loss gradient of each token: 1 / (this rank's tokens per step), so K micro-batches
      // sum to this rank's mean.
      CHECK(share.dloss == Approx(1.0 / (4.0 * T)));
    }
  }
}

TEST_CASE("ch02: BatchShare: a batch that does not divide into ranks x micro-batches is an error naming both", "[batch-share]") {
  const std::unique_ptr<Job> job = make_test_job("02_batch_share", ComputeMode::real);
  const int W = world_size();
  const int64_t B = 3 * W + 1;  // one more than a multiple of ranks x micro-batches
  try {
    ch02::BatchShare share(*job, tiny_setup(B, 8), /*grad_accum=*/3);
    FAIL("a global batch of " << B << " at world " << W << " x 3 micro-batches was accepted");
  } catch (const std::invalid_argument& e) {
    CHECK_THAT(e.what(), Catch::Contains("global batch " + std::to_string(B) + " does not divide into " +
                                         std::to_string(W) + " ranks x 3 micro-batches; choose a multiple of " +
                                         std::to_string(3 * W)));
  }
}
