// mpi_job.h: a Job for the multi-rank tests of a chapter's mechanisms (a FlatParam, a batch
// share, ...): what run_chapter builds around a lesson, without its flags. Every rank of the
// test's MPI_COMM_WORLD, on a simulated h100-8, the collectives' debug mode on so that a rank out
// of step throws instead of hanging. Defined in mpi_job.cpp, compiled once with Catch2's MPI
// entry point, so that the tests that include this header do not compile json.hpp.
#pragma once

#include <memory>
#include <string>

#include "run/job.h"
#include "mpi_world.h"

std::unique_ptr<shardlab::Job> make_test_job(const std::string& id, shardlab::ComputeMode compute);
