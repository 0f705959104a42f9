#include "mpi_job.h"

#include <nlohmann/json.hpp>

#include "comm/mpi_comm.h"
#include "device/profile.h"
#include "device/sim_device.h"

std::unique_ptr<shardlab::Job> make_test_job(const std::string& id, shardlab::ComputeMode compute) {
  using namespace shardlab;
  auto dev = std::make_unique<SimDevice>(load_profile("h100-8"), compute, world_rank(), world_size());
  auto world = MpiComm::world(*dev, /*debug=*/true);
  const ChapterInfo info{.id = id, .title = id, .default_steps = 1};
  return std::make_unique<Job>(info, CommonFlags{}, nlohmann::json::object(), nlohmann::json::object(),
                               std::move(dev), std::move(world));
}
