// harness.h: what the harness's files share (job.cpp: the job and its steps; failure.cpp: a
// rank failing; placement.cpp: where a rank runs; run_chapter.cpp: the program around a lesson).
// Every wait on another rank goes through the watchdog, so a rank that never arrives ends the job
// with a timeout, not a hang. Internal to run/: chapters include run/job.h.
#pragma once

#include <mpi.h>

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "run/job.h"

namespace shardlab {

// The flight record's name for a step's closing loss all-reduce (Job::Step).
inline constexpr const char* kStepLossOp = "step_loss_allreduce";

// An error line in one write: stderr is unbuffered, so piece-by-piece output would interleave
// with the other ranks' lines that mpirun merges into the same terminal.
void print_error(const std::string& line);

// Every rank sends a string; rank 0 gets them all in rank order (the others, nothing).
std::vector<std::string> gather_strings(const std::string& mine);

// MPI_Bcast from `root` over MPI_COMM_WORLD; `what` names the wait if it times out. `timed`
// false: the others wait as long as the root takes (Watchdog::wait).
void broadcast(int root, void* data, int count, MPI_Datatype type, const std::string& what, bool timed = true);

// The lowest rank's problem, on every rank ("" when no rank has one): a check that may differ
// between ranks still ends the job with one message and the same exit on all of them.
std::string first_problem(const std::string& mine);

// <trace-dir>/<run-name>, the run name defaulting to the chapter id.
std::string run_dir(const CommonFlags& flags, const ChapterInfo& info);

// A JSON file written whole (trace/file_output.h), indented.
void write_json(const std::filesystem::path& path, const nlohmann::json& j);

}  // namespace shardlab
