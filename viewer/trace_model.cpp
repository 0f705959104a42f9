// trace_model.cpp: the trace loader: the per-file pipeline, the threads that run it, load_traces.
//
// A file goes through Reader + Splitter (loader/event_splitter.h): its bytes, cut into chunks of
// whole events; ChunkParser (loader/chunk_parser.h): each chunk into a Part of records
// (loader/records.h); Builder (loader/trace_builder.h): the parts, in file order, into a Rank.
// The rest of the file is checked at the end (loader/skeleton.h). load_traces merges the ranks.
//
// Files load in parallel, one thread each; chunks are parsed by the threads that no file needs
// (one file on two cores: both parse it), and each file's builder takes its parts in file order,
// so the result is exactly what one sequential pass would make. Memory beyond the model stays a
// few chunks per file.
#include "trace_model.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "loader/chunk_parser.h"
#include "loader/event_splitter.h"
#include "loader/skeleton.h"
#include "loader/trace_builder.h"

namespace shardlab::viewer {

using namespace loader;  // the pipeline's stages: private to this library

namespace {

namespace fs = std::filesystem;

constexpr size_t kMaxPending = 4;  // a file's chunks cut but not merged before its own thread parses them

// ---------------------------------------------------------------------------------------------
// Threads: a file's thread reads, cuts chunks and merges their parts in order; a chunk is
// parsed by whichever thread gets to it first (a helper with no file of its own, or the file's
// thread when too many are waiting).

struct Slot {
  enum : int { queued, running, done, dropped };
  Chunk chunk;
  Part part;
  std::exception_ptr error;
  std::atomic<int> state{queued};
};

class Pool {
 public:
  // Parses the slot on the calling thread unless another thread has taken it.
  void run(Slot& s) {
    int expected = Slot::queued;
    if (!s.state.compare_exchange_strong(expected, Slot::running)) return;
    try {
      ChunkParser(s.chunk, s.part).parse(thread_parser());
    } catch (...) {
      s.error = std::current_exception();
    }
    {
      std::lock_guard lock(mutex_);
      if (spare_.size() < 16) spare_.push_back(std::move(s.chunk.text));
      s.state = Slot::done;
    }
    std::vector<char>().swap(s.chunk.text);
    done_.notify_all();
  }
  // An empty buffer for a chunk, with the capacity of one parsed before if there is one.
  std::vector<char> buffer() {
    std::lock_guard lock(mutex_);
    if (spare_.empty()) return {};
    std::vector<char> b = std::move(spare_.back());
    spare_.pop_back();
    b.clear();
    return b;
  }
  // Offers the slot to the helpers; false if there are none.
  bool offer(const std::shared_ptr<Slot>& s) {
    std::lock_guard lock(mutex_);
    if (helpers_ == 0) return false;
    queue_.push_back(s);
    jobs_.notify_one();
    return true;
  }
  void wait(const Slot& s) {
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return s.state.load() == Slot::done; });
  }
  // A helper: parses offered chunks until close().
  void help() {
    std::unique_lock lock(mutex_);
    ++helpers_;
    while (true) {
      jobs_.wait(lock, [&] { return !queue_.empty() || closed_; });
      if (queue_.empty()) break;
      std::shared_ptr<Slot> s = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      run(*s);
      s.reset();
      lock.lock();
    }
    --helpers_;
  }
  void close() {
    std::lock_guard lock(mutex_);
    closed_ = true;
    jobs_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable jobs_, done_;
  std::deque<std::shared_ptr<Slot>> queue_;
  std::vector<std::vector<char>> spare_;  // chunk buffers to reuse (their pages are mapped already)
  size_t helpers_ = 0;
  bool closed_ = false;
};

// One file's chunks in flight, merged into its builder in order.
class FileChunks {
 public:
  FileChunks(Pool& pool, Builder& builder) : pool_(pool), builder_(builder) {}
  ~FileChunks() {  // given up (an error): the helpers skip what they have not started
    for (const auto& s : slots_) {
      int expected = Slot::queued;
      s->state.compare_exchange_strong(expected, Slot::dropped);
    }
  }
  FileChunks(const FileChunks&) = delete;
  FileChunks& operator=(const FileChunks&) = delete;

  void submit(Chunk&& c) {
    auto s = std::make_shared<Slot>();
    s->chunk = std::move(c);
    slots_.push_back(s);
    helped_ = pool_.offer(s) || helped_;
    merge(false);
  }
  // Merges the parts that are ready; with all, every one (parsing here what nobody took).
  void merge(bool all) {
    while (!slots_.empty()) {
      Slot& s = *slots_.front();
      const bool must = all || !helped_ || slots_.size() > kMaxPending;
      if (s.state.load() == Slot::queued) {
        if (!must) return;
        pool_.run(s);
      }
      if (s.state.load() != Slot::done) {
        if (!must) return;
        pool_.wait(s);
      }
      if (s.error) std::rethrow_exception(s.error);
      builder_.add(s.part);
      slots_.pop_front();
    }
  }

 private:
  Pool& pool_;
  Builder& builder_;
  std::deque<std::shared_ptr<Slot>> slots_;
  bool helped_ = false;
};

// Parses one file.
FileResult parse_file(const std::string& path, size_t size, Shared& shared, Pool& pool) {
  try {
    Reader reader(path, shared);
    Builder builder;
    FileChunks chunks(pool, builder);
    // A .gz file holds several times its size; a plain one its size.
    const size_t hint = path.ends_with(".gz") ? 8 * size : size;
    Splitter splitter([&](Chunk&& c) { chunks.submit(std::move(c)); }, [&] { return pool.buffer(); }, hint);
    std::vector<char> block(kBlock);
    try {
      while (const size_t n = reader.read(block.data(), block.size())) splitter.feed(block.data(), n);
      if (reader.bytes() == 0) throw FileError("empty file");
      splitter.finish();
    } catch (const IoError&) {
      throw;
    } catch (const FileError&) {
      chunks.merge(true);  // an error in an earlier event is the one to report
      throw;
    }
    chunks.merge(true);
    const SkeletonInfo info = read_skeleton(splitter.skeleton());
    if (!splitter.saw_events()) throw FileError("no traceEvents array");
    FileResult result = builder.finish(info.rank);
    result.rank.incomplete = info.incomplete;
    return result;
  } catch (const FileError& e) {
    throw std::runtime_error(path + ": " + e.what());
  }
}

// "rank12.json" / "rank12.json.gz" -> 12.
std::optional<int> rank_of_name(const std::string& filename) {
  std::string_view n = filename;
  if (!n.starts_with("rank")) return std::nullopt;
  n.remove_prefix(4);
  int r = 0;
  const auto [p, ec] = std::from_chars(n.data(), n.data() + n.size(), r);
  const std::string_view rest(p, static_cast<size_t>(n.data() + n.size() - p));
  if (ec != std::errc() || p == n.data() || r < 0 || (rest != ".json" && rest != ".json.gz")) return std::nullopt;
  return r;
}

struct Input {
  std::string path;
  std::optional<int> rank;  // from the file name (directories)
  size_t index = 0;         // position among the inputs (the fallback rank)
  size_t size = 0;
};

std::vector<Input> expand(const std::vector<std::string>& paths) {
  std::vector<Input> inputs;
  for (const std::string& p : paths) {
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      std::vector<Input> found;
      for (const fs::directory_entry& entry : fs::directory_iterator(p, ec)) {
        const auto r = rank_of_name(entry.path().filename().string());
        if (r && entry.is_regular_file(ec)) found.push_back({entry.path().string(), r});
      }
      if (ec) throw std::runtime_error(p + ": cannot list: " + ec.message());
      if (found.empty()) throw std::runtime_error(p + ": no rank<R>.json or rank<R>.json.gz files");
      std::sort(found.begin(), found.end(), [](const Input& a, const Input& b) { return a.rank < b.rank; });
      inputs.insert(inputs.end(), found.begin(), found.end());
    } else if (fs::exists(p, ec)) {
      inputs.push_back({p, std::nullopt});
    } else {
      throw std::runtime_error(p + ": no such file or directory");
    }
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    inputs[i].index = i;
    std::error_code ec;
    const auto size = fs::file_size(inputs[i].path, ec);
    inputs[i].size = ec ? 0 : static_cast<size_t>(size);
  }
  return inputs;
}

}  // namespace

TraceModel load_traces(const std::vector<std::string>& paths, const LoadProgress& progress) {
  const std::vector<Input> inputs = expand(paths);
  if (inputs.empty()) throw std::runtime_error("no trace files given");
  size_t total = 0;
  for (const Input& in : inputs) total += in.size;

  // One thread per file up to the hardware's; the threads no file needs parse chunks, and so does
  // a file's thread once no file is left. The caller's thread reports progress.
  Shared shared;
  Pool pool;
  std::vector<std::optional<FileResult>> results(inputs.size());
  std::vector<std::exception_ptr> errors(inputs.size());
  std::atomic<size_t> next{0}, finished{0};
  const size_t hardware = std::max<size_t>(std::thread::hardware_concurrency(), 1);
  const size_t file_threads = std::min(hardware, inputs.size());
  std::vector<std::thread> threads;
  for (size_t w = 0; w < hardware; ++w) {
    threads.emplace_back([&, w] {
      if (w >= file_threads) return pool.help();
      for (size_t i; (i = next++) < inputs.size();) {
        try {
          results[i] = parse_file(inputs[i].path, inputs[i].size, shared, pool);
        } catch (...) {
          errors[i] = std::current_exception();
          shared.cancel = true;  // the load fails anyway: stop the others early
        }
        ++finished;
        std::lock_guard lock(shared.mutex);
        shared.wake.notify_one();
      }
      pool.help();
    });
  }
  {
    std::unique_lock lock(shared.mutex);
    while (finished < inputs.size()) {
      shared.wake.wait_for(lock, std::chrono::milliseconds(100));
      if (progress && !shared.cancel) {
        lock.unlock();
        if (!progress(std::min(shared.done.load(), total), total)) shared.cancel = true;
        lock.lock();
      }
    }
  }
  pool.close();
  for (std::thread& t : threads) t.join();
  // The first real error in input order; a cancellation only if nothing else went wrong.
  std::exception_ptr cancelled;
  for (const std::exception_ptr& e : errors) {
    if (!e) continue;
    try {
      std::rethrow_exception(e);
    } catch (const LoadCancelled&) {
      cancelled = e;
    } catch (...) {
      throw;
    }
  }
  if (cancelled || (progress && shared.cancel)) throw LoadCancelled();

  // Merge: ranks in order, names deduplicated across files, args appended.
  TraceModel model;
  size_t args = 1;
  for (const auto& fr : results) args += fr->args.size();
  model.args_json.reserve(args);
  model.args_json.emplace_back();
  Interner names(false);
  std::map<int, size_t> seen;  // rank -> input
  bool any_time = false;
  model.start_us = std::numeric_limits<double>::max();
  model.end_us = std::numeric_limits<double>::lowest();
  for (size_t i = 0; i < inputs.size(); ++i) {
    FileResult& fr = *results[i];
    Rank& r = fr.rank;
    r.rank = inputs[i].rank ? *inputs[i].rank : fr.declared_rank.value_or(static_cast<int>(inputs[i].index));
    const auto [it, inserted] = seen.emplace(r.rank, i);
    if (!inserted)
      throw std::runtime_error(inputs[i].path + ": rank " + std::to_string(r.rank) + " is also " +
                               inputs[it->second].path);
    r.file = inputs[i].path;
    r.timeline.rank = r.rank;
    std::vector<uint32_t> name_map(fr.names.size());
    for (size_t n = 0; n < fr.names.size(); ++n) name_map[n] = names.add(fr.names[n]);
    const auto args_base = static_cast<uint32_t>(model.args_json.size() - 1);
    for (std::string& a : fr.args) model.args_json.push_back(std::move(a));
    for (Lane& l : r.lanes) {
      for (Slice& s : l.slices) {
        s.name = name_map[s.name];
        if (s.args) s.args += args_base;
        model.start_us = std::min(model.start_us, s.start_us);
        model.end_us = std::max(model.end_us, s.end_us);
        any_time = true;
      }
      model.events += l.slices.size();
    }
    for (AllocatorMarker& a : r.allocator)
      if (a.args) a.args += args_base;
    for (const Counter& c : r.counters) {
      for (const auto& [t, v] : c.samples) {
        model.start_us = std::min(model.start_us, t);
        model.end_us = std::max(model.end_us, t);
        any_time = true;
      }
    }
    model.skipped += r.skipped;
    model.ranks.push_back(std::move(r));
  }
  if (!any_time) model.start_us = model.end_us = 0;
  model.names = names.take();
  std::sort(model.ranks.begin(), model.ranks.end(), [](const Rank& a, const Rank& b) { return a.rank < b.rank; });
  if (progress) progress(total, total);
  return model;
}

}  // namespace shardlab::viewer
