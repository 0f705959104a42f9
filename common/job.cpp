#include "job.h"

#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cuda/cuda_probe.h"
#include "metrics.h"
#include "mpi_comm.h"
#include "sim_device.h"

namespace shardlab {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Every rank sends a string; rank 0 gets them all in rank order.
std::vector<std::string> gather_strings(const std::string& mine) {
  int size = 1, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int len = static_cast<int>(mine.size());
  std::vector<int> lens(size), offsets(size);
  MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  std::string all;
  if (rank == 0) {
    int total = 0;
    for (int r = 0; r < size; ++r) offsets[r] = total, total += lens[r];
    all.resize(total);
  }
  MPI_Gatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), offsets.data(), MPI_CHAR, 0, MPI_COMM_WORLD);
  std::vector<std::string> out;
  if (rank == 0)
    for (int r = 0; r < size; ++r) out.push_back(all.substr(offsets[r], lens[r]));
  return out;
}

json to_json(const StepMetrics& m) {
  return {{"step", m.step},
          {"step_us", m.step_us},
          {"compute_us", m.compute_us},
          {"comm_us", m.comm_us},
          {"overlap_us", m.overlap_us},
          {"exposed_comm_us", m.exposed_comm_us},
          {"comm_wait_us", m.comm_wait_us},
          {"memcpy_us", m.memcpy_us},
          {"idle_us", m.idle_us},
          {"peak_allocated_bytes", m.peak_allocated},
          {"peak_reserved_bytes", m.peak_reserved}};
}

json to_json(const CollectiveMetrics& c) {
  return {{"name", c.name},   {"step", c.step},           {"group_size", c.group_size},
          {"bytes", c.bytes}, {"time_us", c.time_us},     {"algbw_GBps", c.algbw_GBps},
          {"busbw_GBps", c.busbw_GBps}};
}

// Three decimals, or three significant digits for tiny values (errors, tolerances).
std::string format_figure(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, v != 0 && std::abs(v) < 0.01 ? "%.3e" : "%.3f", v);
  return buf;
}

}  // namespace

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) bytes /= 1024, ++u;
  char buf[64];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", bytes, units[u]);
  return buf;
}

Job::Job(const ChapterInfo& info, const CommonFlags& flags, json config, std::unique_ptr<Device> device)
    : info_(info), flags_(flags), config_(std::move(config)), device_(std::move(device)) {
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
  world_ = MpiComm::world(*device_, flags_.debug_collectives);
}

Job::~Job() = default;

std::string Job::run_dir() const {
  return (fs::path(flags_.trace_dir) / (flags_.run_name.empty() ? info_.id : flags_.run_name)).string();
}

void Job::say(const std::string& text) const {
  if (is_root()) std::cout << text << std::endl;
}

void Job::figure(const std::string& key, double value, const std::string& unit, const std::string& what) {
  figures_[key] = {{"value", value}, {"unit", unit}, {"what", what}};
  if (!is_root()) return;
  std::string left = "  " + key;
  if (left.size() < 34) left.resize(34, ' ');
  std::string num = format_figure(value) + " " + unit;
  if (num.size() < 16) num.insert(0, 16 - num.size(), ' ');
  std::cout << left << num << "   " << what << std::endl;
}

Job::Step::Step(Job& job, int64_t n, int64_t total, bool progress)
    : job_(job), n_(n), total_(total < 0 ? job.steps() : total), progress_(progress), start_ns_(job.device().now_ns()) {
  job_.device().allocator().reset_peaks();
}

Job::Step::~Step() {
  Device& d = job_.device();
  d.synchronize();
  const int64_t end = d.now_ns();
  d.trace().step(static_cast<int>(n_), start_ns_, end - start_ns_);
  if (!job_.is_root() || !progress_) return;
  const double us = static_cast<double>(end - start_ns_) / 1000.0;
  std::string line = "step " + std::to_string(n_ + 1) + "/" + std::to_string(total_);
  char buf[160];
  if (has_loss_ && std::isnan(loss_)) line += " | loss n/a (compute skip)";
  else if (has_loss_) std::snprintf(buf, sizeof buf, " | loss %.4f", loss_), line += buf;
  std::snprintf(buf, sizeof buf, " | %.3f ms (%s)", us / 1000.0, d.simulated() ? "simulated" : "measured");
  line += buf;
  if (tokens_ > 0) std::snprintf(buf, sizeof buf, " | %.0f tokens/s", static_cast<double>(tokens_) / us * 1e6), line += buf;
  if (job_.world_size() > 1) {
    const RangeMetrics m = range_metrics(d.trace().timeline(), static_cast<double>(start_ns_) / 1e3,
                                         static_cast<double>(end) / 1e3);
    std::snprintf(buf, sizeof buf, " | exposed comm %.3f ms", m.exposed_comm_us / 1000.0);
    line += buf;
  }
  line += " | peak allocated " + human_bytes(static_cast<double>(d.allocator().peak_allocated())) + ", reserved " +
          human_bytes(static_cast<double>(d.allocator().peak_reserved()));
  std::cout << line << std::endl;
}

void Job::finish() {
  Device& d = device();
  d.synchronize();
  const RankTimeline& tl = d.trace().timeline();

  // Per-rank results, computed by the one metrics library, gathered to rank 0.
  json mine = {{"rank", rank_}, {"steps", json::array()}, {"collectives", json::array()},
               {"races", d.race_reports()}, {"trace_events", d.trace().event_count()},
               {"peak_allocated_bytes", d.allocator().peak_allocated()},
               {"peak_reserved_bytes", d.allocator().peak_reserved()}};
  for (const auto& m : step_metrics(tl)) mine["steps"].push_back(to_json(m));
  for (const auto& c : collective_metrics(tl)) mine["collectives"].push_back(to_json(c));
  const std::vector<std::string> per_rank = gather_strings(mine.dump());

  // Traces: rank 0 clears the run directory's old rank files (a previous run may have had
  // more ranks), then every rank writes its own.
  const fs::path dir = run_dir();
  if (is_root()) {
    fs::create_directories(dir);
    for (const auto& entry : fs::directory_iterator(dir))
      if (entry.path().filename().string().rfind("rank", 0) == 0) fs::remove(entry.path());
  }
  MPI_Barrier(MPI_COMM_WORLD);
  const Profile& p = d.profile();
  const json device_properties = json::array({{{"id", d.trace().device_pid()},
                                               {"name", p.gpu_name},
                                               {"totalGlobalMem", p.memory_bytes},
                                               {"computeMajor", p.compute_major},
                                               {"computeMinor", p.compute_minor},
                                               {"numSms", p.sm_count},
                                               {"simulated", d.simulated()}}});
  const json other = {{"chapter", info_.id},       {"strategy", strategy_},      {"device", std::string(d.kind())},
                      {"profile", p.name},         {"simulated", d.simulated()}, {"compute", flags_.compute},
                      {"world_size", world_size_}, {"config", config_}};
  d.trace().write((dir / ("rank" + std::to_string(rank_) + ".json")).string(), d.simulated() ? "mpi" : "nccl", 0,
                  device_properties, other);

  if (is_root()) {
    json summary = other;
    summary["title"] = info_.title;
    summary["run"] = dir.filename().string();
    summary["times"] = d.simulated() ? "simulated" : "measured";
    summary["figures"] = figures_;
    summary["results"] = results_;
    summary["ranks"] = json::array();
    size_t races = 0;
    for (const auto& s : per_rank) {
      summary["ranks"].push_back(json::parse(s));
      races += summary["ranks"].back()["races"].size();
    }
    std::ofstream out(dir / "summary.json");
    out << summary.dump(2) << "\n";
    if (!out) throw std::runtime_error("cannot write " + (dir / "summary.json").string());

    if (races > 0) {
      std::cout << "\nrace check: " << races << " report(s):\n";
      for (const auto& r : summary["ranks"])
        for (const auto& text : r["races"]) std::cout << "  rank " << r["rank"].get<int>() << ": " << text.get<std::string>() << "\n";
    }
    const fs::path abs = fs::absolute(dir);
    std::cout << "\ntraces: " << abs.string() << "/rank{0.." << world_size_ - 1 << "}.json, summary: "
              << (abs / "summary.json").string() << "\n"
              << "open them: drag a rank file into https://ui.perfetto.dev (or chrome://tracing)" << std::endl;
  }
}

int run_chapter(int argc, char** argv, const ChapterInfo& info, const AddFlags& add_flags, const Lesson& lesson) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  CommonFlags common;
  common.steps = info.default_steps;
  Flags flags(info.id);
  flags.add_choice("device", &common.device, {"auto", "sim", "cuda"},
                   "where to run: sim (simulated GPU, virtual time) or cuda; auto picks cuda when a GPU is visible");
  flags.add_string("profile", &common.profile, "hardware profile for the sim: a name in common/profiles/ or a .json path");
  flags.add_choice("compute", &common.compute, {"real", "skip"},
                   "real: do the math; skip: only simulate time and memory (for large shapes)");
  flags.add_int("steps", &common.steps, 1, 1000000, "training steps (or repetitions) to run");
  flags.add_int("seed", &common.seed, 0, INT64_MAX, "random seed");
  flags.add_string("trace-dir", &common.trace_dir, "directory for traces: <trace-dir>/<run-name>/rank<R>.json");
  flags.add_string("run-name", &common.run_name, "name of this run's trace directory (default: the chapter id)");
  flags.add_bool("debug-collectives", &common.debug_collectives,
                 "check that all ranks issue the same collective, count and dtype in the same order");
  if (add_flags) add_flags(flags);

  // Configuration errors are the same on every rank: each exits 2, rank 0 says why.
  auto config_error = [&](const std::string& msg) {
    if (rank == 0) std::cerr << info.id << ": error: " << msg << std::endl;
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
    std::string device = common.device;
    if (device == "auto") device = "sim";  // the CUDA device is not built yet; see below
    if (device == "cuda") {
      const std::string why = cuda_device_count() > 0 ? "this version has no CUDA device implementation yet"
                                                      : cuda_unavailable_reason();
      return config_error("--device cuda: not available (" + why + "); use --device sim");
    }
    Profile profile = load_profile(common.profile);
    if (size > profile.max_ranks())
      return config_error("--profile " + profile.name + " has " + std::to_string(profile.max_ranks()) +
                          " GPUs, but the job has " + std::to_string(size) +
                          " ranks; use fewer ranks or a larger profile (" + [] {
                            std::string n;
                            for (const auto& p : profile_names()) n += (n.empty() ? "" : ", ") + p;
                            return n;
                          }() + ")");
    const ComputeMode mode = common.compute == "skip" ? ComputeMode::skip : ComputeMode::real;
    if (rank == 0)
      std::cout << "shardlab " << info.id << ": " << info.title << "\n"
                << size << " rank(s), device sim (times are SIMULATED from profile " << profile.name << ": "
                << profile.gpu_name << "), compute " << common.compute << "\n"
                << std::endl;
    auto dev = std::make_unique<SimDevice>(std::move(profile), mode, rank, size);
    job = std::make_unique<Job>(info, common, flags.values(), std::move(dev));
  } catch (const FlagError& e) {
    return config_error(std::string(e.what()) + "\n(run with --help for every flag)");
  } catch (const std::exception& e) {
    return config_error(e.what());
  }

  try {
    lesson(*job);
    job->finish();
  } catch (const std::exception& e) {
    // One rank failing must not leave the others waiting in a collective forever.
    std::cerr << "rank " << rank << ": error: " << e.what() << std::endl;
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  job.reset();
  MPI_Finalize();
  return 0;
}

}  // namespace shardlab
