// job.h: the harness around every chapter: MPI, flags, the device, the world communicator,
// steps, figures, traces and the run summary. A chapter's main.cpp is the lesson; this is the
// plumbing it stands on.
//
//   int main(int argc, char** argv) {
//     const shardlab::ChapterInfo chapter{.id = "00_streams_events", .title = "Streams and events",
//                                         .default_steps = 3};
//     return shardlab::run_chapter(argc, argv, chapter, add_flags, lesson);
//   }
//
// run_chapter: initializes MPI; parses the shared flags (below) and the chapter's own; builds
// the device (--device sim|cuda; default cuda where a GPU is visible and the CUDA device is
// built, unless --compute skip, else sim) and the world communicator (--comm mpi|nccl;
// default nccl on cuda, mpi on the sim; mpi on cuda stages through host memory so several
// ranks can share one GPU); on cuda each rank takes the GPU of its local rank on the node;
// runs the lesson; writes <trace-dir>/<run-name>/rank<R>.json and summary.json; prints where
// they are. Each rank's file grows at every step's end, so a run killed at any moment keeps
// the steps it finished (trace/trace.h); the end of the run writes it whole.
// Errors: a bad flag, or a configuration check (Flags::add_check), exits 2 on every rank
// before step 1 with the message once. An exception in any rank prints "rank R: error: ..."
// and ends the whole job with status 1, every rank first writing its trace so far (marked
// incomplete); a collective that outlasts --collective-timeout ends it the same way, with the
// ranks that never issued it named (comm/watchdog.h).
//
// Shared flags: --device sim|cuda, --comm mpi|nccl, --profile NAME|PATH, --compute real|skip, --steps N,
// --seed N, --trace-dir DIR, --run-name NAME, --debug-collectives, --collective-timeout SECONDS.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json_fwd.hpp>  // declarations only: every chapter includes this header, json.hpp costs ~2 s a TU

#include "comm/comm.h"
#include "comm/watchdog.h"
#include "device/device.h"
#include "run/flags.h"
#include "trace/metrics.h"  // human_bytes, for the chapters' messages

namespace shardlab {

struct ChapterInfo {
  std::string id;      // "00_streams_events": the default run name
  std::string title;   // "Streams and events"
  int64_t default_steps = 3;
};

struct CommonFlags {
  std::string device = "auto";
  std::string comm = "auto";
  std::string profile = "h100-8";
  std::string compute = "real";
  int64_t steps = 3;
  int64_t seed = 1234;
  std::string trace_dir = "runs";
  std::string run_name;  // default: the chapter id
  bool debug_collectives = false;
  double collective_timeout_s = 60;  // 0: wait forever
};

class Job {
 public:
  // `world` runs on `device`; the Job owns both (the communicator goes first). `placement`: where
  // this rank runs (its local rank on the node and who said so; on a GPU also the host and GPU),
  // recorded in its summary.json entry.
  Job(const ChapterInfo& info, const CommonFlags& flags, nlohmann::json config, nlohmann::json placement,
      std::unique_ptr<Device> device, std::unique_ptr<Comm> world);
  ~Job();

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  bool is_root() const { return rank_ == 0; }
  Device& device() { return *device_; }
  Comm& world() { return *world_; }
  const CommonFlags& flags() const { return flags_; }
  int64_t steps() const { return flags_.steps; }

  // One training step: a ProfilerStep#N annotation on the CPU lane. It ends with a device
  // synchronize (as reading the loss with .item() does), so each step's device work lies
  // inside its window; rank 0 then prints a progress line.
  // Steps count from 1 wherever a user reads them: `n` is the loop's index from 0, and step
  // n + 1 is what the progress line ("step 1/5"), the trace (ProfilerStep#1), summary.json and
  // the viewer call it.
  class Step {
   public:
    // `total` (default: --steps) is only for the progress line: "step n+1/total". A chapter
    // that prints its own line per step (a table row) passes progress = false.
    Step(Job& job, int64_t n, int64_t total = -1, bool progress = true);
    // The step's end waits on the other ranks (its loss is averaged over MPI), and that wait can
    // fail: a rank that never joins it times out, another rank's failure or a signal arrives.
    // The failure must reach the harness as the JobFailure it is, so this destructor may throw
    // (noexcept(false)); it never does while another exception is unwinding (it then skips the
    // step's end altogether), which would end the process in std::terminate.
    ~Step() noexcept(false);
    Step(const Step&) = delete;
    Step& operator=(const Step&) = delete;

    // Training chapters add the step's loss and token count to its progress line, which then
    // also shows tokens/s and the step's exposed communication (from the metrics library).
    // `local_mean`: this rank's mean loss over its share of the batch. Every rank passes its
    // own; the step prints and records (summary.json, "loss") their mean, which is the global
    // batch's mean loss (every rank has as many tokens), the same at every world size. It is
    // averaged over MPI on the host after the step's window, so the trace does not show it.
    void set_loss(double local_mean) { loss_ = local_mean, has_loss_ = true; }
    void set_tokens(int64_t tokens) { tokens_ = tokens; }

   private:
    Job& job_;
    int64_t n_, total_;
    bool progress_;
    int64_t start_ns_;
    double loss_ = 0;
    bool has_loss_ = false;
    int64_t tokens_ = 0;
    int uncaught_at_start_;  // an exception leaving the step: it did not finish, nothing to report
  };

  // A figure the chapter reports: printed by rank 0 and stored in summary.json under
  // "figures" (rank 0's values). Every number a chapter prints goes through here.
  void figure(const std::string& key, double value, const std::string& unit, const std::string& what);
  // A figure of this rank's own (each rank's differs: the work its attention did), stored in
  // this rank's entry of summary.json under "figures"; not printed.
  void rank_figure(const std::string& key, double value, const std::string& unit, const std::string& what);
  // Free-form text from rank 0.
  void say(const std::string& text) const;

  // `solve` runs on rank 0 only and every rank gets its result: for an expensive value every
  // rank needs (the data chain's stationary distribution), computed once rather than once per
  // rank on the same cores. Over MPI in host memory, not traced; the other ranks wait without
  // spinning (they sleep between polls), so rank 0 has the cores to itself.
  std::vector<double> solved_once(const std::function<std::vector<double>()>& solve);
  // The same for several values, each computed once on its own rank and side by side: the i-th
  // solve runs on rank i mod the world size, and every rank gets every result. For the two
  // single-rank reference runs every rank compares itself with: on a laptop the ranks share its
  // cores, and W ranks each training both would take W times as long. These waits have no
  // timeout (a reference on a large model takes minutes) but end when another rank fails.
  std::vector<std::vector<float>> solved_once_each(const std::vector<std::function<std::vector<float>()>>& solves);

  // Every rank's `mine`, in rank order, on every rank: for a figure that compares the ranks (the
  // slowest over the mean). Over MPI in host memory, not traced.
  std::vector<double> every_rank(double mine);

  // Strategy label for traces and summaries ("overlapped", "bucketed", ...).
  void set_strategy(std::string s) { strategy_ = std::move(s); }
  nlohmann::json& results();  // extra machine-readable results (include <nlohmann/json.hpp> to fill them)
  // One row of a table under "results" in summary.json (a sweep's configurations), without
  // json.hpp in the chapter: {{"step_ms", 12.5}, {"forward_prefetch", true}, {"mode", "PRE"}}.
  using ResultValue = std::variant<double, bool, std::string>;
  void result_row(const std::string& table, const std::vector<std::pair<std::string, ResultValue>>& row);

  // The race check's reports fail the run (exit status 3, after the traces are written),
  // unless the chapter shows a race on purpose and says so here (chapter 00's --race).
  void expect_races(bool on) { races_expected_ = on; }

  // Writes traces and summary.json (run_chapter calls it). Returns the run's exit status: 0,
  // or 3 on rank 0 when the race check found races nobody expected.
  int finish();
  // The job is failing (this rank threw or timed out, or another rank announced it): write
  // what this rank has (its trace so far, marked incomplete, and its flight record), send rank
  // 0 a report, and end the process with status 1. Rank 0 gathers the reports (for a few
  // seconds at most), names the ranks that never issued a stuck collective, and writes
  // summary.json marked incomplete. run_chapter calls it.
  [[noreturn]] void fail(const Failure& failure, bool origin);
  std::string run_dir() const;

 private:
  nlohmann::json other_data() const;   // the traces' otherData, summary.json's header
  // What summary.json holds for a finished and a failed run alike: `other` (other_data()), the
  // title, the run's name, measured or simulated times, the figures, the losses, and "ranks"
  // empty for the caller to fill.
  nlohmann::json summary_base(const nlohmann::json& other) const;
  nlohmann::json rank_report() const;  // this rank's entry in summary.json
  nlohmann::json device_properties() const;  // the traces' deviceProperties
  std::string trace_path() const;             // <run dir>/rank<R>.json
  void write_rank_trace(const nlohmann::json& other) const;
  // Appends the steps so far to this rank's trace file (trace.h: a run killed at any moment
  // keeps them), beginning the file at the first step's end; a failed write warns once.
  void stream_trace();
  ChapterInfo info_;
  CommonFlags flags_;
  // What the job records for summary.json and the traces, as JSON: behind a pointer so that
  // this header needs only json's declaration.
  struct Records;
  std::unique_ptr<Records> records_;
  int rank_ = 0, world_size_ = 1;
  std::unique_ptr<Device> device_;
  std::unique_ptr<Comm> world_;
  std::string strategy_ = "default";
  std::vector<double> losses_;  // the global mean loss of each step that reported one
  bool races_expected_ = false;
  bool stream_failed_ = false;
};

using AddFlags = std::function<void(Flags&)>;
using Lesson = std::function<void(Job&)>;

int run_chapter(int argc, char** argv, const ChapterInfo& info, const AddFlags& add_flags, const Lesson& lesson);

}  // namespace shardlab
