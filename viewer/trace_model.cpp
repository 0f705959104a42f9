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

#include "run/run_directory.h"

#include <algorithm>
#include <atomic>
#include <cctype>
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
  explicit Pool(size_t max_name_bytes) : max_name_bytes_(max_name_bytes) {}
  // Parses the slot on the calling thread unless another thread has taken it.
  void run(Slot& s) {
    int expected = Slot::queued;
    if (!s.state.compare_exchange_strong(expected, Slot::running)) return;
    try {
      ChunkParser(s.chunk, s.part, max_name_bytes_).parse(thread_parser());
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
  const size_t max_name_bytes_;
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

// A file that is JSON but not a trace (summary.json beside the rank files): no traceEvents.
struct NotATrace : FileError {
  NotATrace() : FileError("not a trace file (it has no traceEvents array)") {}
};

// Parses one file; throws FileError (the caller names the file) or LoadCancelled.
FileResult parse_file(const std::string& path, size_t size, Shared& shared, Pool& pool, const LoadLimits& limits) {
  Reader reader(path, shared);
  Builder builder;
  FileChunks chunks(pool, builder);
  // A .gz file holds several times its size; a plain one its size.
  const size_t hint = path.ends_with(".gz") ? 8 * size : size;
  Splitter splitter([&](Chunk&& c) { chunks.submit(std::move(c)); }, [&] { return pool.buffer(); }, hint);
  splitter.set_max_events(limits.max_events);
  std::vector<char> block(kBlock);
  std::string stopped;  // a cap reached: why the reading stopped
  try {
    while (const size_t n = reader.read(block.data(), block.size())) {
      if (!splitter.feed(block.data(), n)) {
        stopped = "stopped at the cap of " + std::to_string(limits.max_events) + " events (--max-events)";
        break;
      }
      if (reader.bytes() >= limits.max_file_bytes) {
        stopped = "stopped at the cap of " + std::to_string(limits.max_file_bytes) +
                  " bytes (--max-file-bytes), read in blocks of " + std::to_string(kBlock);
        break;
      }
    }
    if (reader.bytes() == 0) throw FileError("empty file");
    splitter.finish();
  } catch (const IoError&) {
    throw;
  } catch (const FileError& e) {
    chunks.merge(true);  // an error in an earlier event is the one to report
    if (!stopped.empty()) throw FileError(stopped + ", where " + e.what());
    if (reader.truncated()) throw FileError(std::string(e.what()) + " (the gzip data ends early)");
    throw;
  }
  chunks.merge(true);
  const SkeletonInfo info = read_skeleton(splitter.skeleton());
  if (!splitter.saw_events()) throw NotATrace();
  FileResult result = builder.finish(info.rank);
  result.rank.incomplete = info.incomplete;
  const std::string read = "its first " + std::to_string(splitter.events_emitted()) + " trace events are read";
  if (!stopped.empty()) result.rank.stopped = stopped + ": " + read;
  else if (splitter.cut())
    result.rank.stopped = std::string(reader.truncated() ? "the gzip data ends" : "the file ends") +
                          " inside its traceEvents, at byte " + std::to_string(reader.bytes()) +
                          " (cut short: a run killed while writing it?): " + read + ", every whole one";
  return result;
}

// The name less its trace extensions: "host_12.1700000000.pt.trace.json.gz" -> "host_12.1700000000".
std::string_view stem_of(std::string_view name) {
  for (const std::string_view ext : {".gz", ".json", ".trace", ".pt"})
    if (name.ends_with(ext)) name.remove_suffix(ext.size());
  return name;
}

bool is_trace_name(std::string_view name) { return name.ends_with(".json") || name.ends_with(".json.gz"); }

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// The decimal number at the start of s (digits only; none if it does not fit an int).
std::optional<int> number_at(std::string_view s) {
  int r = 0;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), r);
  if (ec != std::errc() || p == s.data()) return std::nullopt;
  return r;
}

// The rank a file's name gives: the number after "rank" ("rank3", "rank-3", "Rank_3"), else the
// name's only number ("worker3.json"); none when it has several ("host_4711.1700000000123", Kineto's
// default: a pid and a time, not a rank) or none.
std::optional<int> rank_in_name(std::string_view filename) {
  const std::string_view stem = stem_of(filename);
  std::string lower(stem);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  for (size_t at = lower.find("rank"); at != std::string::npos; at = lower.find("rank", at + 1)) {
    size_t i = at + 4;
    if (i < lower.size() && (lower[i] == '-' || lower[i] == '_' || lower[i] == '.')) ++i;
    if (i < lower.size() && is_digit(lower[i])) return number_at(stem.substr(i));
  }
  std::optional<int> only;
  size_t runs = 0;
  for (size_t i = 0; i < stem.size(); ++i)
    if (is_digit(stem[i]) && (i == 0 || !is_digit(stem[i - 1]))) {
      ++runs;
      only = number_at(stem.substr(i));
    }
  return runs == 1 ? only : std::nullopt;
}

// Names in the order a person reads them: "rank2" before "rank10".
bool natural_less(std::string_view a, std::string_view b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (is_digit(a[i]) && is_digit(b[j])) {
      const size_t i0 = i, j0 = j;
      while (i < a.size() && is_digit(a[i])) ++i;
      while (j < b.size() && is_digit(b[j])) ++j;
      std::string_view x = a.substr(i0, i - i0), y = b.substr(j0, j - j0);
      while (x.size() > 1 && x[0] == '0') x.remove_prefix(1);
      while (y.size() > 1 && y[0] == '0') y.remove_prefix(1);
      if (x.size() != y.size()) return x.size() < y.size();
      if (x != y) return x < y;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i, ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

struct Input {
  std::string path;
  size_t size = 0;
};

// Why `path` is not a file to read ("" when it is): what it is instead. A FIFO would block the
// loader until something writes into it, a device such as /dev/zero never ends, and a link to
// nothing has nothing to read; each is named and skipped, and the rest of a directory opens.
std::string not_a_regular_file(const std::string& path) {
  std::error_code ec;
  const fs::file_status target = fs::status(path, ec);  // through links
  switch (target.type()) {
    case fs::file_type::regular: return "";
    case fs::file_type::not_found:
      return fs::is_symlink(fs::symlink_status(path, ec)) ? "a link to nothing (its target does not exist)"
                                                          : "no such file or directory";
    case fs::file_type::directory: return "a directory";
    case fs::file_type::fifo: return "a FIFO (named pipe), not a file: it would block the loader";
    case fs::file_type::character:
    case fs::file_type::block: return "a device, not a file";
    case fs::file_type::socket: return "a socket, not a file";
    default: return ec ? "cannot read it: " + ec.message() : "not a regular file";
  }
}

// The files to open, in order: a directory's trace files by name, files as given. What is
// missing or unreadable goes to not_opened.
std::vector<Input> expand(const std::vector<std::string>& paths, std::vector<NotOpened>& not_opened) {
  std::vector<Input> inputs;
  for (const std::string& p : paths) {
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      // A run's directory lists its run's files (run/run_directory.h); the others there, an
      // earlier run's of another size or anyone's, are left out with a word, not merged in.
      const std::vector<std::string> listed = manifest_files(p);
      const auto is_listed = [&](std::string name) {
        if (name.ends_with(".gz")) name.resize(name.size() - 3);  // a listed file, compressed later
        return listed.empty() || std::find(listed.begin(), listed.end(), name) != listed.end();
      };
      std::vector<std::string> found;
      for (const fs::directory_entry& entry : fs::directory_iterator(p, ec)) {
        const std::string name = entry.path().filename().string();
        if (!is_trace_name(name)) continue;
        if (const std::string why = not_a_regular_file(entry.path().string()); !why.empty())
          not_opened.push_back({entry.path().string(), why});
        else if (is_listed(name))
          found.push_back(entry.path().string());
        else
          not_opened.push_back({entry.path().string(), std::string("not this run's file: the directory's ") +
                                                           kRunManifest + " lists the files of the run written last"});
      }
      if (ec) {
        not_opened.push_back({p, "cannot list the directory: " + ec.message()});
        continue;
      }
      if (found.empty()) not_opened.push_back({p, "no trace files in it (*.json, *.json.gz)"});
      std::sort(found.begin(), found.end(), natural_less);
      for (std::string& f : found) inputs.push_back({std::move(f)});
    } else if (const std::string why = not_a_regular_file(p); !why.empty()) {
      not_opened.push_back({p, why});
    } else {
      inputs.push_back({p});
    }
  }
  for (Input& in : inputs) {
    std::error_code ec;
    const auto size = fs::file_size(in.path, ec);
    in.size = ec ? 0 : static_cast<size_t>(size);
  }
  return inputs;
}

// Every file's rank (RankSource's order). The files that say their rank claim it first, then
// those whose names give one, then the rest take the free ranks, each kind in input order; a
// file whose rank an earlier claim took goes to not_opened. Returns the input indices of the
// files that open.
std::vector<size_t> assign_ranks(const std::vector<Input>& inputs, std::vector<std::optional<FileResult>>& results,
                                 std::vector<NotOpened>& not_opened) {
  std::vector<size_t> claiming;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!results[i]) continue;
    Rank& r = results[i]->rank;
    if (const auto declared = results[i]->declared_rank) {
      r.rank = *declared;
      r.rank_from = RankSource::distributed_info;
    } else if (const auto named = rank_in_name(fs::path(inputs[i].path).filename().string())) {
      r.rank = *named;
      r.rank_from = RankSource::file_name;
    } else {
      r.rank_from = RankSource::file_order;
    }
    claiming.push_back(i);
  }
  std::stable_sort(claiming.begin(), claiming.end(),
                   [&](size_t a, size_t b) { return results[a]->rank.rank_from < results[b]->rank.rank_from; });
  std::map<int, size_t> claimed;  // rank -> input
  std::vector<size_t> opened;
  int next_free = 0;
  for (const size_t i : claiming) {
    Rank& r = results[i]->rank;
    if (r.rank_from == RankSource::file_order) {
      while (claimed.count(next_free)) ++next_free;
      r.rank = next_free;
    }
    const auto [it, fresh] = claimed.emplace(r.rank, i);
    if (!fresh) {
      not_opened.push_back({inputs[i].path, "its rank " + std::to_string(r.rank) + " (from its " +
                                                rank_source_name(r.rank_from) + ") is already taken by " +
                                                inputs[it->second].path});
      results[i].reset();
      continue;
    }
    opened.push_back(i);
  }
  std::sort(opened.begin(), opened.end());
  return opened;
}

}  // namespace

const char* rank_source_name(RankSource source) {
  switch (source) {
    case RankSource::distributed_info: return "distributedInfo";
    case RankSource::file_name: return "file name";
    case RankSource::file_order: break;
  }
  return "file order";
}

TraceModel load_traces(const std::vector<std::string>& paths, const LoadProgress& progress,
                       const LoadLimits& limits) {
  TraceModel model;
  model.limits = limits;
  const std::vector<Input> inputs = expand(paths, model.not_opened);
  size_t total = 0;
  for (const Input& in : inputs) total += in.size;

  // One thread per file up to the hardware's; the threads no file needs parse chunks, and so does
  // a file's thread once no file is left. The caller's thread reports progress.
  Shared shared;
  Pool pool(limits.max_name_bytes);
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
          results[i] = parse_file(inputs[i].path, inputs[i].size, shared, pool, limits);
        } catch (...) {
          errors[i] = std::current_exception();
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
  if (progress && shared.cancel) throw LoadCancelled();
  // A file that did not parse is one not opened; anything else (out of memory) ends the load.
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!errors[i]) continue;
    try {
      std::rethrow_exception(errors[i]);
    } catch (const NotATrace& e) {
      model.not_opened.push_back({inputs[i].path, e.what(), true});
    } catch (const FileError& e) {
      model.not_opened.push_back({inputs[i].path, e.what()});
    }
  }
  const std::vector<size_t> opened = assign_ranks(inputs, results, model.not_opened);
  if (opened.empty()) {
    if (model.not_opened.empty()) throw std::runtime_error("no trace files given");
    std::string why;
    for (const NotOpened& n : model.not_opened) {
      if (!why.empty()) why += "; ";
      why += n.file;
      why += ": ";
      why += n.why;
    }
    throw std::runtime_error(why);
  }

  // Merge: ranks in order, names deduplicated across files, args appended.
  size_t args = 1;
  for (const size_t i : opened) args += results[i]->args.size();
  model.args_json.reserve(args);
  model.args_json.emplace_back();
  Interner names(false);
  bool any_time = false;
  model.start_us = std::numeric_limits<double>::max();
  model.end_us = std::numeric_limits<double>::lowest();
  for (const size_t i : opened) {
    FileResult& fr = *results[i];
    Rank& r = fr.rank;
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
    model.names_cut += r.names_cut;
    model.ranks.push_back(std::move(r));
  }
  if (!any_time) model.start_us = model.end_us = 0;
  model.names = names.take();
  std::sort(model.ranks.begin(), model.ranks.end(), [](const Rank& a, const Rank& b) { return a.rank < b.rank; });
  if (progress) progress(total, total);
  return model;
}

}  // namespace shardlab::viewer
