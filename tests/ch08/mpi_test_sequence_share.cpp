// Chapter 08's SequenceShare, chapter 02's BatchShare cut along the sequence: every rank of a
// group binds the group's rows, and of each row only the tokens at its positions (zigzag or
// contiguous), in the order it holds them. A rank holding the right count of the wrong tokens
// trains without an error until the single-rank check at the end of a run; here each rank
// compares what it bound with the Sampler's rows at its positions.
//
// A share needs a Job, and a Job needs MPI: tagged [sequence-share], run at worlds 1 to 4.
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "08_context_parallel/layout.h"
#include "../ch02/recorded_share.h"
#include "../mpi_job.h"

using namespace shardlab;

TEST_CASE("ch08: SequenceShare: every rank of a group binds its positions of the group's rows", "[sequence-share]") {
  const std::unique_ptr<Job> job = make_test_job("08_sequence_share", ComputeMode::real);
  const int W = world_size(), r = world_rank();
  const int64_t T = 8 * W;  // zigzag: 2W chunks of 4 tokens
  for (const ch08::Layout kind : {ch08::Layout::zigzag, ch08::Layout::contiguous}) {
    // The whole world shares each sequence: one data-parallel rank, B rows.
    const int64_t B = 3;
    TrainSetup setup;
    setup.global_batch = B;
    setup.T = T;
    const ch08::SequenceLayout layout(kind, W, r, T);
    const std::vector<int32_t> positions = layout.positions();
    Recorded<ch08::SequenceShare> share(*job, setup, ch02::DataShard{0, 1}, positions);
    CHECK(share.rows() == B);
    CHECK(share.T() == T / W);
    GPT model(job->device(), GPTConfig::preset("tiny"), share.rows(), share.T());
    share.load(model, /*step=*/1, /*micro=*/0);

    const Batch whole = Sampler(share.chain(), B, T, 0, 1, setup.seed).batch(1);
    std::vector<int32_t> expected;
    for (int64_t row = 0; row < B; ++row)
      for (const int32_t p : positions) expected.push_back(whole.tokens[static_cast<size_t>(row * T + p)]);
    CHECK(share.tokens == expected);
    // Each token's loss gradient: 1 / (the group's tokens per step on this rank), as chapter 02's.
    CHECK(share.dloss == Approx(1.0 / static_cast<double>(B * (T / W))));
  }
}
