// The Job's own exchanges between ranks (run/job.h), at whatever world size mpirun gives (1 to 4):
// values computed once for all ranks.
#include <catch2/catch.hpp>

#include <functional>
#include <string>
#include <vector>

#include "../mpi_job.h"

using namespace shardlab;

TEST_CASE("job: solved_once_each runs each solve on one rank and gives every rank every value", "[setup]") {
  const std::unique_ptr<Job> job = make_test_job("solved_once_each", ComputeMode::real);
  const int n = job->world_size();
  // Five values (more than the ranks at worlds 1-4: the i-th on rank i mod n), one of them empty,
  // each saying which rank computed it.
  int ran = 0;
  std::vector<std::function<std::vector<float>()>> solves;
  for (int i = 0; i < 5; ++i)
    solves.emplace_back([i, &ran, &job] {
      ++ran;
      return i == 3 ? std::vector<float>{} : std::vector<float>(static_cast<size_t>(i + 1), static_cast<float>(job->rank()));
    });
  const std::vector<std::vector<float>> values = job->solved_once_each(solves);
  int mine = 0;
  for (int i = 0; i < 5; ++i) mine += i % n == job->rank();
  CHECK(ran == mine);
  REQUIRE(values.size() == 5);
  for (int i = 0; i < 5; ++i) {
    INFO("value " << i);
    CHECK(values[static_cast<size_t>(i)] ==
          (i == 3 ? std::vector<float>{} : std::vector<float>(static_cast<size_t>(i + 1), static_cast<float>(i % n))));
  }
  // The single-value form: rank 0 only.
  int solved = 0;
  const std::vector<double> once = job->solved_once([&] { return ++solved, std::vector<double>{0.5, 2.0}; });
  CHECK(solved == (job->rank() == 0 ? 1 : 0));
  CHECK(once == std::vector<double>{0.5, 2.0});
}
