// event_splitter.h: the loader's first stage: a trace file's bytes, cut into chunks of whole events.
//
// A file is read in 1 MiB blocks through zlib's gz* functions (plain files pass through), so
// .json and .json.gz take the same path. One pass of a small scanner (strings, brackets, nesting)
// cuts the top-level object into two: the traceEvents array, in chunks of whole events (~2 MiB
// each), for chunk_parser.h, and the rest (the "skeleton": distributedInfo, deviceProperties,
// ...), read at the end by skeleton.h. Here too what every stage shares: FileError and is_ws.
#pragma once

#include <zlib.h>

#if defined(__SSE2__) && !defined(SHARDLAB_SCAN_BYTEWISE)
#define SHARDLAB_SCAN_SSE2 1
#else
#define SHARDLAB_SCAN_SSE2 0
#endif

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "trace_model.h"

namespace shardlab::viewer::loader {

constexpr size_t kBlock = size_t{1} << 20;       // bytes per read; progress is reported per block
// Events per parse job (at least one whole event). The fuzzer builds with tiny chunks, so that
// every input goes through the merging of parts.
#ifndef SHARDLAB_TRACE_CHUNK_BYTES
#define SHARDLAB_TRACE_CHUNK_BYTES (size_t{2} << 20)
#endif
constexpr size_t kChunkBytes = SHARDLAB_TRACE_CHUNK_BYTES;
constexpr int kMaxEventDepth = 64;  // JSON nesting allowed inside one event (and outside the events)
// The file outside its traceEvents (the skeleton) is a few kilobytes in any trace; past this it
// is not one (a gzip of zeros would otherwise be held whole: 8 GB from a 19 MB file).
constexpr size_t kMaxSkeletonBytes = size_t{64} << 20;

// What is wrong with a file's content or reading; parse_file prefixes the file's path.
struct FileError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct IoError : FileError {
  using FileError::FileError;
};

inline bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

// ---------------------------------------------------------------------------------------------
// Input: a file read in blocks.

struct Shared {  // what the loading threads share with the caller's thread
  std::atomic<size_t> done{0};
  std::atomic<bool> cancel{false};
  std::mutex mutex;
  std::condition_variable wake;
};

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};

class Reader {
 public:
  Reader(const std::string& path, Shared& shared) : shared_(shared) {
    errno = 0;
    file_.reset(gzopen(path.c_str(), "rb"));
    if (!file_) throw IoError(std::string("cannot open: ") + (errno ? std::strerror(errno) : "out of memory"));
    gzbuffer(file_.get(), static_cast<unsigned>(kBlock));
  }

  // Reads up to n (<= kBlock) bytes into dst: the count, 0 at the end of the file.
  size_t read(char* dst, size_t n) {
    if (shared_.cancel.load(std::memory_order_relaxed)) throw LoadCancelled();
    const int got = gzread(file_.get(), dst, static_cast<unsigned>(n));
    if (got <= 0) {
      int code = Z_OK;
      const char* msg = gzerror(file_.get(), &code);
      // Z_BUF_ERROR: the input ended inside a gzip stream, as a file cut short does: what was
      // read stands (the splitter keeps its whole events), and the end is remembered.
      if (code == Z_BUF_ERROR && total_ > 0) {
        truncated_ = true;
        report();
        return 0;
      }
      if (got < 0 || code == Z_BUF_ERROR) throw IoError(code == Z_BUF_ERROR ? "gzip data truncated" : msg);
      report();
      return 0;
    }
    total_ += static_cast<size_t>(got);
    report();
    return static_cast<size_t>(got);
  }

  size_t bytes() const { return total_; }  // uncompressed bytes read
  bool truncated() const { return truncated_; }  // the gzip data ended early

 private:
  // Adds the compressed bytes consumed since the last report to the shared count.
  void report() {
    const z_off_t off = gzoffset(file_.get());
    const size_t now = off > 0 ? static_cast<size_t>(off) : reported_;
    if (now > reported_) {
      shared_.done += now - reported_;
      reported_ = now;
      shared_.wake.notify_one();
    }
  }

  Shared& shared_;
  std::unique_ptr<gzFile_s, GzCloser> file_;
  size_t total_ = 0, reported_ = 0;
  bool truncated_ = false;
};

// ---------------------------------------------------------------------------------------------
// The scanner: the traceEvents array in chunks of whole events, the rest as the skeleton.

struct Chunk {
  std::vector<char> text;  // "[" whole events "]", then simdjson's padding
  size_t size = 0;         // of the JSON text, without the padding
  size_t first_event = 0;  // the index of its first event in traceEvents
  size_t events = 0;
};

class Splitter {
 public:
  // emit takes each chunk; buffer gives an empty vector for the next one (recycled capacity).
  // size_hint: about how many bytes the file holds (sizes the first buffer of a small file).
  Splitter(std::function<void(Chunk&&)> emit, std::function<std::vector<char>()> buffer, size_t size_hint)
      : emit_(std::move(emit)),
        buffer_(std::move(buffer)),
        reserve_(std::min(kChunkBytes + (size_t{64} << 10), size_hint + 1024)) {
    start_pending();
  }

  // Stop once this many events have been emitted (LoadLimits::max_events).
  void set_max_events(size_t n) { max_events_ = n; }
  // The next bytes of the file. Calls emit for each chunk of whole events; throws FileError.
  // False when the last event allowed has ended: the events are closed there, read no further.
  bool feed(const char* data, size_t n);
  // At the end of the file (or where the reading stops early): throws FileError if the JSON is
  // cut short or is not an object. A file that ends inside its traceEvents array after a whole
  // event (a run killed while writing it, a download cut short) is not an error: the events
  // before the cut are emitted, the skeleton is closed after them, and cut() says so.
  void finish();

  const std::string& skeleton() const { return skeleton_; }
  bool saw_events() const { return saw_events_; }
  bool cut() const { return cut_; }
  size_t events_emitted() const { return emitted_; }  // whole events handed to emit so far

 private:
  static constexpr int kEventsDepth = 2;  // the events array's own level (the top object is 1)
  static constexpr int kMaxDepth = kEventsDepth + kMaxEventDepth;
  enum class Top : uint8_t { before, scalar, object, after };
  enum class Obj : uint8_t { key, colon, value, after };  // the top object's grammar: enough to find its keys
  enum class Arr : uint8_t { first, element, after };     // in the events array: what may come next

  struct EventCap {};  // thrown where the max_events-th event ends
  [[noreturn]] void fail(const std::string& what);
  void scan(const char* p, const char* end);
  void close_events();  // the events end here: the whole ones emitted, the skeleton closed after them
  void event_ended(const char* after);  // an event closed just before `after`; throws EventCap at the cap
  const char* step(const char* p, const char* end);
#if SHARDLAB_SCAN_SSE2
  const char* block64(const char* p);
#endif
  const char* skip_string(const char* p, const char* end);
  const char* scan_event(const char* p, const char* end);
  const char* events_byte(const char* p);
  const char* object_byte(const char* p);
  void push(char c);
  void pop(const char* p);
  void flush(const char* p);
  void start_pending();
  void emit_pending(size_t keep);
  size_t pending_size(const char* p) const { return pending_.size() + static_cast<size_t>(p - seg_); }
  size_t byte_at(const char* p) const { return offset_ + static_cast<size_t>(p - block_); }
  std::string where(const char* p) const { return " (byte " + std::to_string(byte_at(p)) + ")"; }

  std::function<void(Chunk&&)> emit_;
  std::function<std::vector<char>()> buffer_;
  size_t reserve_;
  Top top_ = Top::before;
  Obj obj_ = Obj::key;
  Arr arr_ = Arr::first;
  int depth_ = 0;
  char stack_[kMaxDepth + 1] = {};  // '{' or '[' per open level
  bool in_string_ = false, escape_ = false;
  bool capture_ = false, events_key_ = false;  // reading a top-level key; the last one was traceEvents
  bool in_events_ = false, saw_events_ = false, cut_ = false;
  size_t emitted_ = 0, max_events_ = SIZE_MAX;
  std::string key_;
  size_t events_ = 0;  // events begun so far
  // The current block: bytes from seg_ on are not copied yet (to pending_ or skeleton_).
  const char* block_ = nullptr;
  const char* block_end_ = nullptr;
  const char* seg_ = nullptr;
  size_t offset_ = 0;  // bytes before the block
  std::vector<char> pending_;  // "[" and the events of the next chunk
  size_t pending_first_ = 0, pending_whole_ = 0;
  size_t last_end_ = 1;  // pending_'s size after its last whole event
  std::string skeleton_;
};

}  // namespace shardlab::viewer::loader
