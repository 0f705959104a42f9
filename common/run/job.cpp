#include "run/job.h"

#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "run/harness.h"
#include "run/run_directory.h"
#include "trace/file_output.h"
#include "trace/metrics.h"
#include "trace/metrics_json.h"

namespace shardlab {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

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

}  // namespace

struct Job::Records {
  json config, placement;
  json figures = json::object();
  json rank_figures = json::object();
  json results = json::object();
};

Job::Job(const ChapterInfo& info, const CommonFlags& flags, json config, json placement, std::unique_ptr<Device> device,
         std::unique_ptr<Comm> world)
    : info_(info),
      flags_(flags),
      records_(std::make_unique<Records>(Records{std::move(config), std::move(placement)})),
      device_(std::move(device)),
      world_(std::move(world)) {
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
}

// The communicator may still reference the device's streams and memory: it goes first.
Job::~Job() { world_.reset(); }

std::string Job::run_dir() const { return shardlab::run_dir(flags_, info_); }

namespace {
// `root`'s value on every rank. The watchdog's waits sleep between polls: the others leave the
// root the cores.
template <class T>
void share(int root, std::vector<T>& value, MPI_Datatype type, const std::string& what, bool timed) {
  uint64_t n = value.size();
  broadcast(root, &n, 1, MPI_UINT64_T, what, timed);
  value.resize(n);
  constexpr uint64_t kPiece = uint64_t{1} << 28;  // MPI counts are ints: a large model's values go in pieces
  for (uint64_t at = 0; at < n; at += kPiece)
    broadcast(root, value.data() + at, static_cast<int>(std::min(kPiece, n - at)), type, what, timed);
}
}  // namespace

std::vector<double> Job::solved_once(const std::function<std::vector<double>()>& solve) {
  std::vector<double> value;
  if (is_root()) value = solve();
  if (world_size_ > 1) share(0, value, MPI_DOUBLE, "a value rank 0 computes for all", true);
  return value;
}

std::vector<std::vector<float>> Job::solved_once_each(const std::vector<std::function<std::vector<float>()>>& solves) {
  std::vector<std::vector<float>> values(solves.size());
  for (size_t i = 0; i < solves.size(); ++i)
    if (static_cast<int>(i) % world_size_ == rank_) values[i] = solves[i]();
  if (world_size_ > 1)
    for (size_t i = 0; i < solves.size(); ++i)
      share(static_cast<int>(i) % world_size_, values[i], MPI_FLOAT,
            "value " + std::to_string(i) + " of those the ranks compute for all (no timeout)", false);
  return values;
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

json& Job::results() { return records_->results; }

void Job::result_row(const std::string& table, const std::vector<std::pair<std::string, ResultValue>>& row) {
  json& out = records_->results[table].emplace_back(json::object());
  for (const auto& [key, value] : row) std::visit([&](const auto& v) { out[key] = v; }, value);
}

void Job::figure(const std::string& key, double value, const std::string& unit, const std::string& what) {
  records_->figures[key] = {{"value", value}, {"unit", unit}, {"what", what}};
  if (!is_root()) return;
  std::string left = "  " + key;
  if (left.size() < 34) left.resize(34, ' ');
  std::string num = format_figure(value, unit) + " " + unit;
  if (num.size() < 16) num.insert(0, 16 - num.size(), ' ');
  std::cout << left << num << "   " << what << std::endl;
}

void Job::rank_figure(const std::string& key, double value, const std::string& unit, const std::string& what) {
  records_->rank_figures[key] = {{"value", value}, {"unit", unit}, {"what", what}};
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
          {"world_size", world_size_}, {"config", records_->config}};
}

json Job::summary_base(const json& other) const {
  json summary = other;
  summary["title"] = info_.title;
  summary["run"] = fs::path(run_dir()).filename().string();
  summary["times"] = device_->simulated() ? "simulated" : "measured";
  summary["figures"] = records_->figures;
  if (!losses_.empty()) summary["loss"] = losses_;
  summary["ranks"] = json::array();
  return summary;
}

json Job::rank_report() const {
  Device& d = *device_;
  const RankTimeline& tl = d.trace().timeline();
  json mine = {{"rank", rank_}, {"placement", records_->placement}, {"steps", json::array()}, {"collectives", json::array()},
               {"races", d.race_reports()}, {"trace_events", d.trace().event_count()},
               {"peak_allocated_bytes", d.allocator().peak_allocated()},
               {"peak_reserved_bytes", d.allocator().peak_reserved()}};
  if (!records_->rank_figures.empty()) mine["figures"] = records_->rank_figures;
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
    summary["results"] = records_->results;
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

}  // namespace shardlab
