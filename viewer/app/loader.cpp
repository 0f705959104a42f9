// loader.cpp: one background thread per load; the UI thread polls it once a frame.
#include "loader.h"

#include <exception>
#include <new>
#include <utility>

namespace shardlab::viewer::app {

std::string label_of(const std::vector<std::string>& paths) {
  std::string label;
  for (const std::string& p : paths) label += (label.empty() ? "" : " ") + p;
  return label;
}

namespace {

LoadResult load(const LoadRequest& request, const LoadProgress& progress) {
  LoadResult result;
  result.request = request;
  // Whatever a file does, the app gets a message: the loader's own errors name the file; a
  // trace too big for memory or a filesystem error are caught here too.
  try {
    if (request.paths.empty()) throw std::runtime_error("no run directory or trace files given");
    result.runs.push_back(
        make_run(label_of(request.paths), load_traces(request.paths, progress, request.limits),
                                      request.as_compare ? 1 : 0));
    if (!request.as_compare && !request.compare.empty())
      result.runs.push_back(make_run(label_of(request.compare), load_traces(request.compare, progress, request.limits), 1));
  } catch (const LoadCancelled&) {
    result.runs.clear();
    result.cancelled = true;
  } catch (const std::bad_alloc&) {
    result.runs.clear();
    result.error = label_of(request.paths) + ": out of memory while loading";
  } catch (const std::exception& e) {
    result.runs.clear();
    result.error = e.what();
  }
  return result;
}

}  // namespace

LoadResult Loader::load_now(const LoadRequest& request) { return load(request, {}); }

void Loader::start(LoadRequest request) {
  if (busy()) {
    cancel_ = true;
    join();
  }
  request_ = std::move(request);
  done_ = total_ = 0;
  finished_ = cancel_ = false;
  thread_ = std::thread([this] {
    result_ = load(request_, [this](size_t d, size_t t) {
      done_ = d;
      total_ = t;
      return !cancel_;
    });
    finished_ = true;
  });
}

std::optional<LoadResult> Loader::poll() {
  if (!busy() || !finished_) return std::nullopt;
  join();
  return std::move(result_);
}

void Loader::join() {
  if (thread_.joinable()) thread_.join();
}

Loader::~Loader() {
  cancel_ = true;
  join();
}

}  // namespace shardlab::viewer::app
