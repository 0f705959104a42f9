#include "run/job.h"

#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <map>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>
#include <tuple>

#include "cuda/cuda_probe.h"
#include "trace/file_output.h"
#include "trace/metrics.h"
#include "trace/metrics_json.h"
#include "run/run_directory.h"
#include "comm/mpi_comm.h"
#include "device/sim_device.h"
#ifdef SHARDLAB_WITH_CUDA
#include "cuda/cuda_device.h"
#include "cuda/nccl_comm.h"
#endif

namespace shardlab {
namespace {

// The flight record's name for a step's closing loss all-reduce (Job::Step).
constexpr const char* kStepLossOp = "step_loss_allreduce";

namespace fs = std::filesystem;
using nlohmann::json;

// An error line in one write: stderr is unbuffered, so piece-by-piece output would interleave
// with the other ranks' lines that mpirun merges into the same terminal.
void print_error(const std::string& line) {
  const std::string text = line + "\n";
  std::fwrite(text.data(), 1, text.size(), stderr);
  std::fflush(stderr);
}

// Every rank sends a string; rank 0 gets them all in rank order. Its waits are the watchdog's:
// a rank that never arrives ends the job with a timeout, not a hang.
std::vector<std::string> gather_strings(const std::string& mine) {
  int size = 1, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int len = static_cast<int>(mine.size());
  std::vector<int> lens(size), offsets(size);
  MPI_Request request;
  MPI_Igather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, MPI_COMM_WORLD, &request);
  Watchdog::get().wait(request, "a gather to rank 0 (the harness: checks or the run summary)");
  std::string all;
  if (rank == 0) {
    int total = 0;
    for (int r = 0; r < size; ++r) offsets[r] = total, total += lens[r];
    all.resize(total);
  }
  MPI_Igatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), offsets.data(), MPI_CHAR, 0, MPI_COMM_WORLD,
               &request);
  Watchdog::get().wait(request, "a gather to rank 0 (the harness: checks or the run summary)");
  std::vector<std::string> out;
  if (rank == 0)
    for (int r = 0; r < size; ++r) out.push_back(all.substr(offsets[r], lens[r]));
  return out;
}

// MPI_Bcast from rank 0 through the watchdog.
void broadcast(void* data, int count, MPI_Datatype type, const std::string& what) {
  MPI_Request request;
  MPI_Ibcast(data, count, type, 0, MPI_COMM_WORLD, &request);
  Watchdog::get().wait(request, what);
}

// <trace-dir>/<run-name>, the run name defaulting to the chapter id.
std::string run_dir(const CommonFlags& flags, const ChapterInfo& info) {
  return (fs::path(flags.trace_dir) / (flags.run_name.empty() ? info.id : flags.run_name)).string();
}

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

// The lowest rank's problem, on every rank ("" when no rank has one): a check that may differ
// between ranks still ends the job with one message and the same exit on all of them.
std::string first_problem(const std::string& mine) {
  const std::vector<std::string> all = gather_strings(mine);
  std::string first;
  for (const auto& p : all)
    if (first.empty()) first = p;
  int len = static_cast<int>(first.size());
  broadcast(&len, 1, MPI_INT, "the configuration checks' verdict");
  first.resize(static_cast<size_t>(len));
  broadcast(first.data(), len, MPI_CHAR, "the configuration checks' verdict");
  return first;
}

// Three decimals, or three significant digits for tiny values (errors, tolerances).
// A count (no unit, a whole number) prints as one: "28", not "28.000".
std::string format_figure(double v, const std::string& unit) {
  char buf[64];
  if (unit.empty() && v == std::floor(v) && std::abs(v) < 1e15)
    std::snprintf(buf, sizeof buf, "%.0f", v);
  else
    std::snprintf(buf, sizeof buf, v != 0 && std::abs(v) < 0.01 ? "%.3e" : "%.3f", v);
  return buf;
}

// Where this rank sits on its node: its local rank as the launcher says (Open MPI:
// OMPI_COMM_WORLD_LOCAL_RANK, Slurm's srun: SLURM_LOCALID), else its place among the ranks MPI
// finds sharing the node's memory, and how many ranks share the node. Collective over
// MPI_COMM_WORLD. Each rank's summary.json entry records it ("placement").
struct NodePlacement {
  int local_rank = 0, local_size = 1;
  std::string local_rank_from = "MPI_COMM_TYPE_SHARED", host;
};

NodePlacement node_placement(int rank) {
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  NodePlacement p;
  MPI_Comm_rank(node, &p.local_rank);
  MPI_Comm_size(node, &p.local_size);
  MPI_Comm_free(&node);
  char host[MPI_MAX_PROCESSOR_NAME];
  int len = 0;
  MPI_Get_processor_name(host, &len);
  p.host.assign(host, static_cast<size_t>(len));
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"}) {
    const char* v = std::getenv(var);
    if (!v) continue;
    // Only this rank may see a bad value, so it warns and goes on rather than leaving the
    // others waiting in the next collective.
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    if (end == v || *end != '\0' || n < 0 || n > INT32_MAX) {
      std::cerr << "rank " << rank << ": warning: " << var << "='" << v
                << "' is not a local rank (a whole number from 0); using the place MPI finds: " << p.local_rank
                << std::endl;
      break;
    }
    p.local_rank = static_cast<int>(n);
    p.local_rank_from = var;
    break;
  }
  return p;
}

// Why --device cuda cannot run with these flags on a node with `gpus` GPUs, or "" when it can.
std::string cuda_config_problem(const CommonFlags& f, int gpus, const NodePlacement& node) {
  if (gpus == 0) return "--device cuda: not available (" + cuda_unavailable_reason() + "); use --device sim";
  if (f.compute == "skip")
    return "--compute skip: only the sim can skip the math (a GPU always computes); use --compute real";
  if (f.comm == "nccl" && node.local_size > gpus)
    return std::to_string(node.local_size) + " ranks share this node but it has " + std::to_string(gpus) +
           " GPU(s): NCCL refuses two ranks on one GPU (\"Duplicate GPU detected\", NCCL before 2.30); run at most " +
           std::to_string(gpus) + " rank(s) per node, or add --comm mpi to share GPUs (host-staged, for correctness runs)";
  return "";
}

// --device auto: cuda where every rank of this node can have a GPU of its own (or --comm mpi
// lets them share), else the sim, saying why when GPUs exist but are too few. --compute skip
// always means the sim: only it can skip the math.
std::string auto_device(const CommonFlags& f, int gpus, const NodePlacement& node, int rank) {
  if (gpus == 0 || f.compute == "skip") return "sim";
  if (node.local_size <= gpus || f.comm == "mpi") return "cuda";
  if (rank == 0)
    std::cout << "note: " << node.local_size << " ranks share this node's " << gpus
              << " GPU(s), so --device auto runs the sim; --device cuda --comm mpi shares the GPUs instead\n";
  return "sim";
}

#ifdef SHARDLAB_WITH_CUDA
// The CUDA device on GPU `gpu` (the local rank, modulo the GPUs: shared under --comm mpi) and
// the world communicator. Every rank measures time from rank 0's clock, so lanes line up.
std::pair<std::unique_ptr<Device>, std::unique_ptr<Comm>> cuda_runtime(Profile profile, const CommonFlags& f, int rank,
                                                                       int size, int gpu, const ChapterInfo& info) {
  int64_t base = std::chrono::duration_cast<std::chrono::nanoseconds>(
                     std::chrono::system_clock::now().time_since_epoch())
                     .count();
  MPI_Bcast(&base, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
  auto dev = std::make_unique<CudaDevice>(std::move(profile), rank, size, gpu, base);
  if (rank == 0)
    std::cout << "shardlab " << info.id << ": " << info.title << "\n"
              << size << " rank(s), device cuda (" << dev->profile().gpu_name << ", times are MEASURED), comm "
              << f.comm << (f.comm == "mpi" ? " (host-staged)" : "") << "\n"
              << std::endl;
  std::unique_ptr<Comm> world;
  if (f.comm == "nccl")
    world = NcclComm::world(*dev, f.debug_collectives);
  else
    world = MpiComm::world(*dev, f.debug_collectives);
  return {std::move(dev), std::move(world)};
}
#endif

void write_json(const fs::path& path, const json& j) { write_whole_file(path, j.dump(2) + "\n"); }

}  // namespace

Job::Job(const ChapterInfo& info, const CommonFlags& flags, json config, json placement, std::unique_ptr<Device> device,
         std::unique_ptr<Comm> world)
    : info_(info),
      flags_(flags),
      config_(std::move(config)),
      placement_(std::move(placement)),
      device_(std::move(device)),
      world_(std::move(world)) {
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
}

// The communicator may still reference the device's streams and memory: it goes first.
Job::~Job() { world_.reset(); }

std::string Job::run_dir() const { return shardlab::run_dir(flags_, info_); }

std::vector<double> Job::solved_once(const std::function<std::vector<double>()>& solve) {
  std::vector<double> value;
  if (is_root()) value = solve();
  if (world_size_ == 1) return value;
  // The watchdog's waits sleep between polls: the others leave rank 0 the cores.
  uint64_t n = value.size();
  broadcast(&n, 1, MPI_UINT64_T, "a value rank 0 computes for all");
  value.resize(n);
  broadcast(value.data(), static_cast<int>(n), MPI_DOUBLE, "a value rank 0 computes for all");
  return value;
}

std::vector<double> Job::every_rank(double mine) {
  std::vector<double> all(static_cast<size_t>(world_size_));
  MPI_Request request;
  MPI_Iallgather(&mine, 1, MPI_DOUBLE, all.data(), 1, MPI_DOUBLE, MPI_COMM_WORLD, &request);
  Watchdog::get().wait(request, "an all-gather of one value per rank (the harness: a figure across ranks)");
  return all;
}

void Job::say(const std::string& text) const {
  if (is_root()) std::cout << text << std::endl;
}

void Job::figure(const std::string& key, double value, const std::string& unit, const std::string& what) {
  figures_[key] = {{"value", value}, {"unit", unit}, {"what", what}};
  if (!is_root()) return;
  std::string left = "  " + key;
  if (left.size() < 34) left.resize(34, ' ');
  std::string num = format_figure(value, unit) + " " + unit;
  if (num.size() < 16) num.insert(0, 16 - num.size(), ' ');
  std::cout << left << num << "   " << what << std::endl;
}

void Job::rank_figure(const std::string& key, double value, const std::string& unit, const std::string& what) {
  rank_figures_[key] = {{"value", value}, {"unit", unit}, {"what", what}};
}

Job::Step::Step(Job& job, int64_t n, int64_t total, bool progress)
    : job_(job),
      n_(n),
      total_(total < 0 ? job.steps() : total),
      progress_(progress),
      start_ns_(job.device().now_ns()),
      uncaught_at_start_(std::uncaught_exceptions()) {
  job_.device().allocator().reset_peaks();
}

Job::Step::~Step() noexcept(false) {
  // Unwinding from an error: no synchronize (after a failed kernel it would throw again, and a
  // second exception ends the process in std::terminate, losing the first one's message), and
  // no progress line for a step that did not finish.
  if (std::uncaught_exceptions() > uncaught_at_start_) return;
  Device& d = job_.device();
  d.synchronize();
  const int64_t end = d.now_ns();
  d.trace().step(static_cast<int>(n_ + 1), start_ns_, end - start_ns_);
  job_.stream_trace();  // before the wait below: a rank that never comes keeps this step's events
  if (has_loss_) {
    double sum = loss_;
    // In the flight record too, numbered by the step: a rank that skips it is then named as
    // the one that never reached the step's end (diagnose_hang).
    std::vector<int> everyone(static_cast<size_t>(job_.world_size()));
    for (size_t r = 0; r < everyone.size(); ++r) everyone[r] = static_cast<int>(r);
    FlightRecorder& flight = Watchdog::get().flight();
    const int64_t id = flight.issued(n_ + 1, kStepLossOp, "job", everyone, 1, "Double");
    MPI_Request request;
    MPI_Iallreduce(&loss_, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &request);
    Watchdog::get().wait(request, "the step's loss (an all-reduce of every rank's mean)");
    flight.done(id);
    loss_ = sum / job_.world_size();
    job_.losses_.push_back(loss_);
  }
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

json Job::other_data() const {
  return {{"chapter", info_.id},       {"strategy", strategy_},           {"device", std::string(device_->kind())},
          {"profile", device_->profile().name}, {"simulated", device_->simulated()}, {"compute", flags_.compute},
          {"world_size", world_size_}, {"config", config_}};
}

json Job::summary_base(const json& other) const {
  json summary = other;
  summary["title"] = info_.title;
  summary["run"] = fs::path(run_dir()).filename().string();
  summary["times"] = device_->simulated() ? "simulated" : "measured";
  summary["figures"] = figures_;
  if (!losses_.empty()) summary["loss"] = losses_;
  summary["ranks"] = json::array();
  return summary;
}

json Job::rank_report() const {
  Device& d = *device_;
  const RankTimeline& tl = d.trace().timeline();
  json mine = {{"rank", rank_}, {"placement", placement_}, {"steps", json::array()}, {"collectives", json::array()},
               {"races", d.race_reports()}, {"trace_events", d.trace().event_count()},
               {"peak_allocated_bytes", d.allocator().peak_allocated()},
               {"peak_reserved_bytes", d.allocator().peak_reserved()}};
  if (!rank_figures_.empty()) mine["figures"] = rank_figures_;
  for (const auto& m : step_metrics(tl)) mine["steps"].push_back(to_json(m));
  for (const auto& c : collective_metrics(tl)) mine["collectives"].push_back(to_json(c));
  return mine;
}

json Job::device_properties() const {
  Device& d = *device_;
  const Profile& p = d.profile();
  return json::array({{{"id", d.trace().device_pid()},
                       {"name", p.gpu_name},
                       {"totalGlobalMem", p.memory_bytes},
                       {"computeMajor", p.compute_major},
                       {"computeMinor", p.compute_minor},
                       {"numSms", p.sm_count},
                       {"simulated", d.simulated()}}});
}

std::string Job::trace_path() const { return (fs::path(run_dir()) / rank_trace_file(rank_)).string(); }

void Job::write_rank_trace(const json& other) const {
  device_->trace().write(trace_path(), flags_.comm, device_->base_time_ns(), device_properties(), other);
}

void Job::stream_trace() {
  TraceRecorder& trace = device_->trace();
  if (stream_failed_) return;
  try {
    if (trace.streaming()) {
      trace.flush_stream();
      return;
    }
    // Begun at the first step's end, when the chapter has named its strategy.
    json other = other_data();
    other["incomplete"] = true;
    other["failure"] = {{"kind", "killed"},
                        {"reason", "killed before the run's end wrote this file whole, or its node failed; it holds "
                                   "every step this rank finished"}};
    trace.begin_stream(trace_path(), flags_.comm, device_->base_time_ns(), device_properties(), other);
  } catch (const std::exception& e) {
    // The copy for a killed run is lost, not the run: the trace is still written at its end.
    stream_failed_ = true;
    print_error("rank " + std::to_string(rank_) + ": warning: " + e.what() +
                "; the trace is written at the end of the run only");
  }
}

int Job::finish() {
  Device& d = device();
  d.synchronize();

  // Per-rank results, computed by the one metrics library, gathered to rank 0.
  const std::vector<std::string> per_rank = gather_strings(rank_report().dump());

  // Traces: every rank writes its own into the directory rank 0 claimed before step 1 (an
  // earlier run's files that its manifest listed are gone already).
  const fs::path dir = run_dir();
  MPI_Request request;
  MPI_Ibarrier(MPI_COMM_WORLD, &request);
  Watchdog::get().wait(request, "the barrier before writing traces");
  const json other = other_data();
  write_rank_trace(other);

  if (is_root()) {
    json summary = summary_base(other);
    summary["results"] = results_;
    size_t races = 0;
    for (const auto& s : per_rank) {
      summary["ranks"].push_back(json::parse(s));
      races += summary["ranks"].back()["races"].size();
    }
    write_json(dir / kSummaryFile, summary);

    if (races > 0) {
      std::cout << "\nrace check: " << races << " report(s):\n";
      for (const auto& r : summary["ranks"])
        for (const auto& text : r["races"]) std::cout << "  rank " << r["rank"].get<int>() << ": " << text.get<std::string>() << "\n";
    }
    const fs::path abs = fs::absolute(dir);
    std::cout << "\ntraces: " << abs.string() << "/rank{0.." << world_size_ - 1 << "}.json, summary: "
              << (abs / kSummaryFile).string() << "\n";
#ifdef SHARDLAB_VIEWER_BIN
    std::cout << "open them: " SHARDLAB_VIEWER_BIN " " << abs.string() << "\n"
              << "       or drag a rank file into https://ui.perfetto.dev (or chrome://tracing)" << std::endl;
#else
    std::cout << "open them: drag a rank file into https://ui.perfetto.dev (or chrome://tracing)" << std::endl;
#endif
    if (races > 0 && !races_expected_) {
      print_error(info_.id + ": error: the race check found " + std::to_string(races) +
                  " race(s) (listed above): a missing wait or a use after free; exit status 3");
      return 3;
    }
  }
  return 0;
}

namespace {

// How long the failure wrap-up waits for the other ranks' reports, and they for rank 0's word.
constexpr double kWrapUpSeconds = 5;

std::string rank_list(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

// From the flight records of the ranks that reported (rank -> record): the operation some ranks
// issued and others never did, and who. A group's collectives are numbered alike on all its
// members (#1, #2, ...), so the highest number any member issued is the one the others have
// not reached; a step's closing loss all-reduce is numbered by the step. Send/recvs are
// numbered per rank, and the chapters issue them only in rings, where every member issues as
// many: a member with fewer than those held in one is the one they wait for. A collective that
// only ranks past such a holding point issued is its consequence and is left out. "" when
// nothing is stuck that way (every rank timed out somewhere else, say).
std::string diagnose_hang(const std::map<int, json>& records) {
  struct Stuck {
    std::string text;
    bool holds = false;  // its issuers cannot go on without the others: a step's end, a sendrecv
    std::vector<int> issued, never;
  };
  std::vector<Stuck> found;
  std::map<std::string, std::vector<int>> groups;
  std::map<std::pair<std::string, int>, json> last;  // (group, rank) -> its last collective there
  std::map<std::pair<std::string, int>, json> last_p2p;  // (group, rank) -> its last sendrecv there
  for (const auto& [rank, rec] : records) {
    for (const auto& [name, ranks] : rec["flight"]["groups"].items()) groups[name] = ranks.get<std::vector<int>>();
    for (const json& e : rec["flight"]["entries"])
      (e["op"] == "sendrecv" ? last_p2p : last)[{e["group"].get<std::string>(), rank}] = e;
  }
  const auto last_text = [&](const std::map<std::pair<std::string, int>, json>& lasts, const std::string& group, int r) {
    auto it = lasts.find({group, r});
    return "rank " + std::to_string(r) + "'s last on " + group + ": " +
           (it == lasts.end() ? std::string("none")
                              : it->second["op"].get<std::string>() + " #" + std::to_string(it->second["seq"].get<int64_t>()) +
                                    " (" + it->second["state"].get<std::string>() + ")") +
           "; it was waiting in " + records.at(r).value("waiting_in", std::string("nothing (busy elsewhere)"));
  };
  // Send/recv pairs, numbered per rank: in a ring every member issues as many. Ranks waiting in
  // their sendrecv #k while a member has issued fewer than k are waiting for that member.
  for (const auto& [group, members] : groups) {
    int64_t top = 0;
    for (int r : members)
      if (auto it = last_p2p.find({group, r}); it != last_p2p.end() && it->second["state"] != "done")
        top = std::max(top, it->second["seq"].get<int64_t>());
    if (top == 0) continue;
    std::vector<int> waiting, behind;
    for (int r : members) {
      if (!records.count(r)) continue;
      auto it = last_p2p.find({group, r});
      const int64_t seq = it == last_p2p.end() ? 0 : it->second["seq"].get<int64_t>();
      if (seq < top) behind.push_back(r);
      else if (it->second["state"] != "done") waiting.push_back(r);
    }
    if (behind.empty() || waiting.empty()) continue;
    std::string out = "sendrecv #" + std::to_string(top) + " on " + group + " was issued by " + rank_list(waiting) +
                      ", waiting for a peer, and never by " + rank_list(behind);
    for (int r : behind) out += "; " + last_text(last_p2p, group, r);
    found.push_back({out + "\n", true, waiting, behind});
  }
  for (const auto& [group, members] : groups) {
    int64_t top = 0;
    json stuck;
    for (int r : members)
      if (auto it = last.find({group, r}); it != last.end() && it->second["seq"].get<int64_t>() > top)
        top = it->second["seq"].get<int64_t>(), stuck = it->second;
    if (top == 0 || stuck["state"] == "done") continue;
    std::vector<int> issued, never, silent;
    for (int r : members) {
      if (!records.count(r)) silent.push_back(r);
      else if (auto it = last.find({group, r}); it != last.end() && it->second["seq"].get<int64_t>() >= top) issued.push_back(r);
      else never.push_back(r);
    }
    if (never.empty() && silent.empty()) continue;
    std::string out;
    if (stuck["op"] == kStepLossOp)
      out += "the end of step " + std::to_string(top) + " (its loss all-reduce, over every rank)";
    else
      out += stuck["op"].get<std::string>() + " #" + std::to_string(top) + " on " + group + " (" +
             std::to_string(stuck["count"].get<int64_t>()) + " " + stuck["dtype"].get<std::string>() + ")";
    out += " was issued by " + rank_list(issued);
    if (!never.empty()) {
      out += " and never by " + rank_list(never);
      for (int r : never) out += "; " + last_text(last, group, r);
    }
    if (!silent.empty()) out += "; " + rank_list(silent) + " did not report (busy outside a collective, or gone)";
    found.push_back({out + "\n", stuck["op"] == kStepLossOp, issued, never});
  }
  // Ranks held where they wait (at a step's end, in a sendrecv) never issue what comes after:
  // a collective that only the ranks past that point issued is a consequence, not the cause,
  // and is not reported.
  std::string out;
  for (const Stuck& s : found) {
    const bool consequence = !s.holds && !s.never.empty() && std::any_of(found.begin(), found.end(), [&](const Stuck& e) {
      return e.holds && std::all_of(s.never.begin(), s.never.end(), [&](int r) {
               return std::find(e.issued.begin(), e.issued.end(), r) != e.issued.end();
             });
    });
    if (!consequence) out += s.text;
  }
  return out;
}

// What a failed run left, from the ranks' reports ("wrote"): "summary.json, the traces (marked
// incomplete) of ranks 0-3, the flight records of ranks 0-3", and what was not, and why.
std::string written_after_failure(const std::string& summary, const std::map<int, json>& reports, int world_size) {
  std::vector<int> traces, records;
  std::string not_written;
  for (const auto& [r, rep] : reports) {
    if (!rep.is_object()) continue;
    for (const json& f : rep.value("wrote", json::array())) {
      if (f == rank_trace_file(r)) traces.push_back(r);
      if (f == flight_record_file(r)) records.push_back(r);
    }
    for (const json& e : rep.value("write_errors", json::array()))
      if (e.is_string()) not_written += (not_written.empty() ? ": rank " : "; rank ") + std::to_string(r) + ": " + e.get<std::string>();
  }
  const auto ranks = [&](const std::vector<int>& of) {
    return of.empty() ? std::string("no rank") : rank_list(of);
  };
  std::string text = "written: " + summary + "the traces (marked incomplete) of " + ranks(traces) +
                     ", the flight records of " + ranks(records);
  if (static_cast<int>(reports.size()) < world_size) text += " (the ranks that never reported may have written theirs)";
  return not_written.empty() ? text : text + "; not written" + not_written;
}

}  // namespace

void Job::fail(const Failure& failure, bool origin) {
  Watchdog& w = Watchdog::get();
  if (origin) {
    // A timeout is told once, by rank 0, with the other ranks' flight records; an error here.
    if (failure.kind != "timeout") print_error("rank " + std::to_string(rank_) + ": error: " + failure.reason);
    w.announce(failure);
  }
  const bool terminating = failure.kind == "terminated";  // mpirun's SIGKILL follows: no wrap-up

  // What this rank has: its flight record and its trace so far, marked incomplete.
  const fs::path dir = run_dir();
  const json seen = failure.to_json();
  json record = {{"rank", rank_}, {"failure", seen}, {"origin", origin}, {"waiting_in", w.last_wait()},
                 {"flight", w.flight().to_json()}};
  // Each write on its own: a flight record that cannot be written does not stop the trace. What
  // was written, and why the rest was not, goes to rank 0 with the report.
  json wrote = json::array(), write_errors = json::array();
  const auto attempt = [&](const std::string& file, const auto& write) {
    try {
      write();
      wrote.push_back(file);
    } catch (const std::exception& e) {
      write_errors.push_back(e.what());
      print_error("rank " + std::to_string(rank_) + ": " + e.what());
    }
  };
  attempt(flight_record_file(rank_), [&] { write_json(dir / flight_record_file(rank_), record); });
  attempt(rank_trace_file(rank_), [&] {
    json other = other_data();
    other["incomplete"] = true;
    other["failure"] = failure.to_json();
    write_rank_trace(other);
  });
  json report = rank_report();
  report["wrote"] = wrote;
  if (!write_errors.empty()) report["write_errors"] = write_errors;
  report["failure"] = seen;
  report["waiting_in"] = w.last_wait();
  report["flight"] = record["flight"];

  if (!is_root()) {
    if (!terminating && w.running()) {
      const std::string text = report.dump();
      MPI_Request send;
      MPI_Isend(text.data(), static_cast<int>(text.size()), MPI_CHAR, 0, kReportTag, w.control(), &send);
      if (w.wait_for(&send, 1, kWrapUpSeconds * 2)) {
        MPI_Request done;
        MPI_Irecv(nullptr, 0, MPI_CHAR, 0, kExitTag, w.control(), &done);
        w.wait_for(&done, 1, kWrapUpSeconds * 2);
      }
    }
    std::fflush(stdout);
    std::_Exit(1);
  }

  // Rank 0: the others' reports, as many as arrive in time.
  std::map<int, json> reports = {{0, report}};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(kWrapUpSeconds);
  while (!terminating && w.running() && static_cast<int>(reports.size()) < world_size_ &&
         std::chrono::steady_clock::now() < deadline) {
    if (const auto m = w.receive(kReportTag))
      reports[m->source] = json::parse(m->text, nullptr, false);
    else
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }

  bool timed_out = false;
  for (const auto& [r, rep] : reports) timed_out |= rep.is_object() && rep["failure"].value("kind", "") == "timeout";
  std::string diagnosis;
  if (timed_out) {
    diagnosis = diagnose_hang(reports);
    char limit[64];
    std::snprintf(limit, sizeof limit, "%g", flags_.collective_timeout_s);
    std::string text = info_.id + ": error: collective timeout (--collective-timeout " + limit + " s): " +
                       (diagnosis.empty() ? "no collective was issued by some ranks and not others; the ranks waited in:\n"
                                          : diagnosis);
    if (diagnosis.empty())
      for (const auto& [r, rep] : reports) text += "  rank " + std::to_string(r) + ": " + rep.value("waiting_in", "") + "\n";
    text += "flight records: " + fs::absolute(dir).string() + "/flight_record_rank<R>.json";
    print_error(text);
  }

  json summary = summary_base(other_data());
  summary["incomplete"] = true;
  summary["failure"] = failure.to_json();
  if (!diagnosis.empty()) summary["diagnosis"] = diagnosis;
  std::vector<int> missing;
  for (int r = 0; r < world_size_; ++r) {
    if (!reports.count(r)) {
      missing.push_back(r);
      continue;
    }
    json entry = reports[r];
    entry.erase("flight");  // in flight_record_rank<R>.json
    summary["ranks"].push_back(entry);
  }
  summary["unreported_ranks"] = missing;
  std::string summary_written = "summary.json, ";
  try {
    write_json(dir / kSummaryFile, summary);
  } catch (const std::exception& e) {
    print_error("rank 0: " + std::string(e.what()));
    summary_written.clear();
    reports[0]["write_errors"].push_back(e.what());
  }
  std::cout << "\nthe run failed; in " << fs::absolute(dir).string() << ", "
            << written_after_failure(summary_written, reports, world_size_) << std::endl;
  // Let the others go; those that never reported are ended by mpirun when this rank exits.
  std::vector<MPI_Request> exits;
  for (const auto& [r, rep] : reports) {
    if (r == 0) continue;
    exits.emplace_back();
    MPI_Isend(nullptr, 0, MPI_CHAR, r, kExitTag, w.control(), &exits.back());
  }
  if (!exits.empty()) w.wait_for(exits.data(), static_cast<int>(exits.size()), kWrapUpSeconds);
  std::fflush(stdout);
  std::_Exit(1);
}

namespace {

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
