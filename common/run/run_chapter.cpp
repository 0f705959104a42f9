// run_chapter.cpp: the program around every lesson (run/job.h says what it does): MPI, the
// flags, every check that can run before step 1, the device and the world communicator, the
// lesson, and the end of the run, whole or failed.
#include "run/job.h"

#include <mpi.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <tuple>

#include "comm/mpi_comm.h"
#include "cuda/cuda_probe.h"
#include "device/sim_device.h"
#include "run/harness.h"
#include "run/placement.h"
#include "run/run_directory.h"

namespace shardlab {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Why this rank cannot write its trace into `dir` ("" when it can): the directory is created
// and a file written and removed in it, as the end of the run will. Each rank checks, since on
// several nodes each writes through its own file system.
std::string writable_problem(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return "--trace-dir: cannot create '" + dir + "': " + ec.message();
  const fs::path probe = fs::path(dir) / (".write-test-" + std::to_string(getpid()));
  std::string problem;
  {
    std::ofstream out(probe);
    out << "shardlab\n";
    out.flush();
    if (!out) problem = "--trace-dir: cannot write into '" + dir + "': " + std::strerror(errno);
  }
  fs::remove(probe, ec);  // also when the write failed (a full disk): no probe is left behind
  return problem;
}

// Rank 0's claim on the run directory (claim_run_directory), as a configuration problem.
std::string claim_problem(const std::string& dir, const std::string& chapter, int world_size) {
  try {
    claim_run_directory(dir, chapter, world_size);
    return "";
  } catch (const std::exception& e) {
    return std::string("--trace-dir: ") + e.what();
  }
}

// What std::bad_alloc means in a chapter, and what to change: the host ran out of memory for
// what --compute real holds there (the sim's tensors, the single-rank reference's copy of the
// model, host staging), whose sizes the flags decide.
std::string host_memory_exhausted(const CommonFlags& flags) {
  return "out of host memory (std::bad_alloc): this rank could not allocate what the run holds on the CPU"
         " (with --compute " + flags.compute + ", the simulated GPU's tensors live in host memory, and the"
         " training chapters' check trains a single-rank copy of the model too); use --compute skip for large"
         " models (time and memory are still simulated), or a smaller --model or --global-batch, or fewer"
         " ranks on this machine";
}

}  // namespace

// SIGTERM (mpirun ending the job because a rank died) or SIGINT (Ctrl+C): the next wait throws.
extern "C" void shardlab_on_signal(int sig) { Watchdog::signal_received.store(sig); }

int run_chapter(int argc, char** argv, const ChapterInfo& info, const AddFlags& add_flags, const Lesson& lesson) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  CommonFlags common;
  common.steps = info.default_steps;
  Flags flags(argc > 0 ? argv[0] : "shardlab_" + info.id);  // usage names the program as it was run
  flags.add_choice("device", &common.device, {"auto", "sim", "cuda"},
                   "where to run: sim (simulated GPU, virtual time) or cuda; auto picks cuda when a GPU is visible (the sim under --compute skip)");
  flags.add_choice("comm", &common.comm, {"auto", "mpi", "nccl"},
                   "communicator: nccl (GPUs) or mpi (the sim; on cuda, host-staged so ranks can share a GPU); "
                   "auto picks nccl on cuda, mpi on the sim");
  flags.add_string("profile", &common.profile, "hardware profile for the sim: a name in common/device/profiles/ or a .json path");
  flags.add_choice("compute", &common.compute, {"real", "skip"},
                   "real: do the math; skip: only simulate time and memory (for large shapes)");
  flags.add_int("steps", &common.steps, 1, 1000000, "training steps (or repetitions) to run");
  flags.add_int("seed", &common.seed, 0, INT64_MAX, "random seed");
  flags.add_string("trace-dir", &common.trace_dir, "directory for traces: <trace-dir>/<run-name>/rank<R>.json");
  flags.add_string("run-name", &common.run_name, "name of this run's trace directory (default: the chapter id)",
                   run_name_problem);
  flags.add_bool("debug-collectives", &common.debug_collectives,
                 "check that all ranks issue the same collective, count and dtype in the same order");
  flags.add_double("collective-timeout", &common.collective_timeout_s, 0, 86400,
                   "seconds a rank waits in a collective before the job ends naming the ranks that never issued it (0: forever)");
  // A timeout shorter than a collective's latency would fail every run with a misleading message.
  flags.add_check([&common](const RunShape&) {
    char given[32];
    std::snprintf(given, sizeof given, "%g", common.collective_timeout_s);
    require(common.collective_timeout_s == 0 || common.collective_timeout_s >= 0.1, "--collective-timeout", given,
            "0 (wait forever) or 0.1 to 86400 seconds");
  });
  if (add_flags) add_flags(flags);

  // Configuration errors are the same on every rank: each exits 2, rank 0 says why.
  auto config_error = [&](const std::string& msg) {
    if (rank == 0) print_error(info.id + ": error: " + msg);
    MPI_Finalize();
    return 2;
  };
  std::unique_ptr<Job> job;
  try {
    if (!flags.parse(argc, argv)) {
      if (rank == 0) std::cout << info.title << "\n\n" << flags.usage();
      MPI_Finalize();
      return 0;
    }
    Watchdog::get().start(common.collective_timeout_s);
    std::signal(SIGTERM, shardlab_on_signal);
    std::signal(SIGINT, shardlab_on_signal);
    const ComputeMode mode = common.compute == "skip" ? ComputeMode::skip : ComputeMode::real;
    std::string device = common.device;
    // Where this rank sits on its node: which GPU it takes, and a record in summary.json.
    const int gpus = cuda_device_count();
    const NodePlacement node = node_placement(rank);
    if (device == "auto") device = auto_device(common, gpus, node, rank);
    if (common.comm == "auto") common.comm = device == "cuda" ? "nccl" : "mpi";
    Profile profile = load_profile(common.profile);
    // Everything that can be checked before step 1 is, so a bad configuration costs no work and
    // ends with one message: the device's own conditions, the chapter's checks of its flags
    // against the run's shape, and a trace directory this job can write.
    if (device == "cuda") {
      if (const std::string problem = cuda_config_problem(common, gpus, node); !problem.empty()) return config_error(problem);
    } else {
      if (common.comm == "nccl") return config_error("--comm nccl: NCCL needs --device cuda; the sim uses --comm mpi");
      if (size > profile.max_ranks())
        return config_error("--profile " + profile.name + " has " + std::to_string(profile.max_ranks()) +
                            " GPUs, but the job has " + std::to_string(size) +
                            " ranks; use fewer ranks or a larger profile (" + [] {
                              std::string n;
                              for (const auto& p : profile_names()) n += (n.empty() ? "" : ", ") + p;
                              return n;
                            }() + ")");
    }
    flags.check(RunShape{size, profile.gpus_per_node});
    if (const std::string problem = first_problem(writable_problem(run_dir(common, info))); !problem.empty())
      return config_error(problem);
    // The directory is this run's from now on: rank 0 removes what the last run there listed,
    // and nothing else, then lists this run's files (run_directory.h).
    if (const std::string problem = first_problem(rank == 0 ? claim_problem(run_dir(common, info), info.id, size) : "");
        !problem.empty())
      return config_error(problem);

    std::unique_ptr<Device> dev;
    std::unique_ptr<Comm> world;
    if (device == "cuda") {
#ifdef SHARDLAB_WITH_CUDA
      // Not a configuration error, the same on every rank: a GPU that one rank cannot use (busy,
      // exclusive-process mode, an NCCL failure) fails that rank alone while the others wait in
      // a collective of this setup. So it is reported and ends the job as a failing lesson does.
      try {
        std::tie(dev, world) = cuda_runtime(std::move(profile), common, rank, size, node.local_rank % gpus, info);
      } catch (const std::exception& e) {
        print_error("rank " + std::to_string(rank) + ": error: " + e.what());
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
#endif
    } else {
      if (rank == 0)
        std::cout << "shardlab " << info.id << ": " << info.title << "\n"
                  << size << " rank(s), device sim (times are SIMULATED from profile " << profile.name << ": "
                  << profile.gpu_name << "), compute " << common.compute << "\n"
                  << std::endl;
      dev = std::make_unique<SimDevice>(std::move(profile), mode, rank, size);
      world = MpiComm::world(*dev, common.debug_collectives);
    }
    // The host's name only on a GPU: a sim run writes the same bytes on every machine.
    json placement = {{"local_rank", node.local_rank},
                      {"local_rank_from", node.local_rank_from},
                      {"ranks_on_node", node.local_size}};
    if (device == "cuda") placement["host"] = node.host, placement["gpu"] = node.local_rank % gpus;
    job = std::make_unique<Job>(info, common, flags.values(), std::move(placement), std::move(dev), std::move(world));
  } catch (const FlagError& e) {
    return config_error(std::string(e.what()) + "\n(run with --help for every flag)");
  } catch (const std::exception& e) {
    return config_error(e.what());
  }

  // One rank failing must not leave the others waiting in a collective forever, nor lose
  // what they have: fail() writes every rank's trace so far and ends the job (status 1).
  int status = 0;
  try {
    lesson(*job);
    status = job->finish();
  } catch (const JobFailure& f) {
    job->fail(f.failure, f.origin);
  } catch (const std::bad_alloc&) {
    job->fail({rank, "error", host_memory_exhausted(common)}, true);
  } catch (const std::exception& e) {
    job->fail({rank, "error", e.what()}, true);
  }
  job.reset();
  Watchdog::get().stop();
  MPI_Finalize();
  return status;
}

}  // namespace shardlab
