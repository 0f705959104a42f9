// loader.h: loading runs off the UI thread, so a big trace shows a progress bar (and can be
// cancelled) instead of a frozen window, and a bad one shows its error instead of ending the app.
#pragma once

#include <atomic>
#include <cstddef>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "app.h"

namespace shardlab::viewer::app {

struct LoadRequest {
  std::vector<std::string> paths;    // a run directory or trace files: one run
  std::vector<std::string> compare;  // and the run to compare it with (empty: none)
  bool as_compare = false;           // `paths` is the compared run: the current run stays
  LoadLimits limits;                 // what each file may hold (trace_model.h)
};

struct LoadResult {
  LoadRequest request;
  std::vector<Run> runs;  // [0] the run, [1] the compared one; as_compare: only the compared one
  std::string error;      // what went wrong ("" on success)
  bool cancelled = false;
};

// "a b c" for paths a, b, c: a run's label and the window title.
std::string label_of(const std::vector<std::string>& paths);

class Loader {
 public:
  Loader() = default;
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;
  ~Loader();

  // Starts loading in the background; a load still running is cancelled first.
  void start(LoadRequest request);
  // Loads on the calling thread (the headless screenshot does, to fail before opening a window).
  static LoadResult load_now(const LoadRequest& request);
  void cancel() { cancel_ = true; }
  // Busy from start() until poll() has handed the result over.
  bool busy() const { return thread_.joinable(); }
  // The result once the load has finished (then no longer busy), else nothing.
  std::optional<LoadResult> poll();
  // Bytes read so far and the total (0 before the sizes are known).
  size_t done() const { return done_; }
  size_t total() const { return total_; }
  const LoadRequest& request() const { return request_; }

 private:
  void join();

  std::thread thread_;
  LoadRequest request_;
  std::atomic<size_t> done_{0}, total_{0};
  std::atomic<bool> finished_{false}, cancel_{false};
  LoadResult result_;  // written by the thread before `finished_`
};

}  // namespace shardlab::viewer::app
