// mpi_job.h: a Job for the multi-rank tests of a chapter's mechanisms (a FlatParam, a batch
// share, ...): what run_chapter builds around a lesson, without its flags. Every rank of the
// test's MPI_COMM_WORLD, on a simulated h100-8, the collectives' debug mode on so that a rank out
// of step throws instead of hanging.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "comm/mpi_comm.h"
#include "device/profile.h"
#include "device/sim_device.h"
#include "run/job.h"
#include "mpi_world.h"

inline std::unique_ptr<shardlab::Job> make_test_job(const std::string& id, shardlab::ComputeMode compute) {
  using namespace shardlab;
  auto dev = std::make_unique<SimDevice>(load_profile("h100-8"), compute, world_rank(), world_size());
  auto world = MpiComm::world(*dev, /*debug=*/true);
  const ChapterInfo info{.id = id, .title = id, .default_steps = 1};
  return std::make_unique<Job>(info, CommonFlags{}, nlohmann::json::object(), nlohmann::json::object(),
                               std::move(dev), std::move(world));
}
