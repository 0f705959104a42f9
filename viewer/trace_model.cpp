// trace_model.cpp: the trace loader.
//
// A file is read in 1 MiB blocks through zlib's gz* functions (plain files pass through), so
// .json and .json.gz take the same path. One pass of a small scanner (strings, brackets, nesting)
// cuts the top-level object into two: the traceEvents array, in chunks of whole events (~2 MiB
// each), and the rest (the "skeleton": distributedInfo, deviceProperties, ...). Each chunk is
// parsed with simdjson's On-Demand API into a Part: compact event records with the chunk's own
// interned names and args text. The skeleton is read (and checked all through) at the end. No DOM
// is ever built, and memory beyond the model stays a few chunks per file.
//
// Parts are parsed in parallel by the threads that no file needs (one file on two cores: both
// parse it), and each file's builder takes its parts in file order, so whatever depends on order
// (B/E pairs, a wait's collective, metadata, the numbering of string ids) comes out exactly as
// one sequential pass would make it. Then per rank: sort, nest, bind flows.
#include "trace_model.h"

#include <simdjson.h>
#include <zlib.h>

#if defined(__SSE2__) && !defined(SHARDLAB_SCAN_BYTEWISE)
#include <emmintrin.h>
#define SHARDLAB_SCAN_SSE2 1
#else
#define SHARDLAB_SCAN_SSE2 0
#endif

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <utility>

namespace shardlab::viewer {

namespace {

namespace fs = std::filesystem;
namespace od = simdjson::ondemand;

constexpr size_t kBlock = size_t{1} << 20;       // bytes per read; progress is reported per block
// Events per parse job (at least one whole event). The fuzzer builds with tiny chunks, so that
// every input goes through the merging of parts.
#ifndef SHARDLAB_TRACE_CHUNK_BYTES
#define SHARDLAB_TRACE_CHUNK_BYTES (size_t{2} << 20)
#endif
constexpr size_t kChunkBytes = SHARDLAB_TRACE_CHUNK_BYTES;
constexpr size_t kMaxPending = 4;  // a file's chunks cut but not merged before its own thread parses them
constexpr int kMaxEventDepth = 64;  // JSON nesting allowed inside one event (and outside the events)
// Times beyond ~3,000 years are not a trace's; keeping them would stretch the time axis to
// 1e308. (Microseconds since 1970, as PyTorch 1.8 wrote them, are about 1.6e15.)
constexpr double kMaxTimeUs = 1e17;
// Chrome JSON has at best nanosecond times (3 decimals of us), and ts + dur rounds: ends within
// this of a start count as touching, not overlapping, when nesting.
constexpr double kTouchUs = 1e-4;

// What is wrong with a file's content or reading; parse_file prefixes the file's path.
struct FileError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct IoError : FileError {
  using FileError::FileError;
};

bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

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
      // Z_BUF_ERROR: the input ended inside a gzip stream.
      if (got < 0 || code == Z_BUF_ERROR) throw IoError(code == Z_BUF_ERROR ? "gzip data truncated" : msg);
      report();
      return 0;
    }
    total_ += static_cast<size_t>(got);
    report();
    return static_cast<size_t>(got);
  }

  size_t bytes() const { return total_; }  // uncompressed bytes read

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
};

// ---------------------------------------------------------------------------------------------
// The scanner: the traceEvents array in chunks of whole events, the rest as the skeleton.

struct Chunk {
  std::vector<char> text;  // "[" whole events "]", then simdjson's padding
  size_t size = 0;         // of the JSON text, without the padding
  size_t first_event = 0;  // the index of its first event in traceEvents
  size_t events = 0;
};

// The first '"' or '\\' in [p, end), else end.
const char* find_quote_or_backslash(const char* p, const char* end) {
  if constexpr (std::endian::native == std::endian::little) {
    // Eight bytes at a time: the lowest byte flagged by the zero-byte test is always a real hit.
    constexpr uint64_t kOnes = 0x0101010101010101ull, kHigh = 0x8080808080808080ull;
    while (end - p >= 8) {
      uint64_t w;
      std::memcpy(&w, p, 8);
      const uint64_t q = w ^ (kOnes * '"'), b = w ^ (kOnes * '\\');
      const uint64_t hit = (((q - kOnes) & ~q) | ((b - kOnes) & ~b)) & kHigh;
      if (hit) return p + (std::countr_zero(hit) >> 3);
      p += 8;
    }
  }
  while (p < end && *p != '"' && *p != '\\') ++p;
  return p;
}

// Byte classes inside an event: what changes the scanner's state.
enum : uint8_t { kPlain = 0, kQuote, kOpen, kClose };
constexpr auto kClass = [] {
  std::array<uint8_t, 256> t{};
  t['"'] = kQuote;
  t['{'] = t['['] = kOpen;
  t['}'] = t[']'] = kClose;
  return t;
}();

// A JSON object key spelled with escapes, decoded as far as ASCII goes ("" if it is not ASCII
// or not well formed: then it cannot be a key the loader looks for).
std::string decode_ascii_key(std::string_view raw) {
  std::string out;
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] != '\\') {
      out += raw[i];
      continue;
    }
    if (++i == raw.size()) return "";
    switch (raw[i]) {
      case '"': case '\\': case '/': out += raw[i]; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'u': {
        unsigned v = 0;
        if (raw.size() - i < 5) return "";
        const auto [p, ec] = std::from_chars(raw.data() + i + 1, raw.data() + i + 5, v, 16);
        if (ec != std::errc() || p != raw.data() + i + 5 || v == 0 || v > 0x7f) return "";
        out += static_cast<char>(v);
        i += 4;
        break;
      }
      default: return "";
    }
  }
  return out;
}

[[noreturn]] void scalar_top(const std::string& text);

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

  // The next bytes of the file. Calls emit for each chunk of whole events; throws FileError.
  void feed(const char* data, size_t n);
  // At the end of the file: throws FileError if the JSON is cut short or is not an object.
  void finish();

  const std::string& skeleton() const { return skeleton_; }
  bool saw_events() const { return saw_events_; }

 private:
  static constexpr int kEventsDepth = 2;  // the events array's own level (the top object is 1)
  static constexpr int kMaxDepth = kEventsDepth + kMaxEventDepth;
  enum class Top : uint8_t { before, scalar, object, after };
  enum class Obj : uint8_t { key, colon, value, after };  // the top object's grammar: enough to find its keys
  enum class Arr : uint8_t { first, element, after };     // in the events array: what may come next

  [[noreturn]] void fail(const std::string& what);
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
  bool in_events_ = false, saw_events_ = false;
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

void Splitter::fail(const std::string& what) {
  if (in_events_) {  // the whole events before the error go first: an error in them is reported first
    flush(block_end_);
    emit_pending(last_end_);
  }
  throw FileError(what);
}

void Splitter::start_pending() {
  pending_ = buffer_();
  pending_.reserve(reserve_);
  pending_.push_back('[');
  pending_first_ = events_;
  pending_whole_ = 0;
  last_end_ = 1;
}

void Splitter::emit_pending(size_t keep) {
  if (pending_whole_ == 0) return;
  pending_.resize(keep);
  pending_.push_back(']');
  Chunk c;
  c.size = pending_.size();
  c.first_event = pending_first_;
  c.events = pending_whole_;
  pending_.resize(c.size + simdjson::SIMDJSON_PADDING, '\0');
  c.text = std::move(pending_);
  start_pending();
  emit_(std::move(c));
}

void Splitter::flush(const char* p) {
  if (p <= seg_) return;
  if (in_events_) pending_.insert(pending_.end(), seg_, p);
  else skeleton_.append(seg_, p);
  seg_ = p;
}

void Splitter::push(char c) {
  if (depth_ >= (in_events_ ? kMaxDepth : kMaxEventDepth)) {
    fail((in_events_ ? "event " + std::to_string(events_ - 1) + ": " : std::string()) + "JSON nested more than " +
         std::to_string(kMaxEventDepth) + " levels deep");
  }
  stack_[depth_++] = c;
}

void Splitter::pop(const char* p) {
  const char open = *p == '}' ? '{' : '[';
  if (depth_ == 0 || stack_[depth_ - 1] != open)
    fail(std::string("not valid JSON: unexpected '") + *p + "'" + where(p));
  --depth_;
}

const char* Splitter::skip_string(const char* p, const char* end) {
  const char* start = p;
  if (escape_) {  // the block ended right after a backslash
    escape_ = false;
    if (p < end) ++p;
  }
  while (true) {
    p = find_quote_or_backslash(p, end);
    if (p == end) break;
    if (*p == '\\') {
      if (p + 1 == end) {
        escape_ = true;
        p = end;
        break;
      }
      p += 2;
      continue;
    }
    in_string_ = false;
    if (capture_) {
      if (key_.size() < 256) key_.append(start, p);
      capture_ = false;
      events_key_ = key_ == "traceEvents" ||
                    (key_.find('\\') != std::string::npos && decode_ascii_key(key_) == "traceEvents");
      obj_ = Obj::colon;
    }
    return p + 1;
  }
  if (capture_ && key_.size() < 256) key_.append(start, end);
  return end;
}

// Inside an event: strings and brackets only, until the event closes or the block ends.
const char* Splitter::scan_event(const char* p, const char* end) {
  while (p < end) {
    switch (kClass[static_cast<uint8_t>(*p)]) {
      case kPlain: ++p; break;
      case kQuote:
        in_string_ = true;
        p = skip_string(p + 1, end);
        if (in_string_) return p;
        break;
      case kOpen: push(*p++); break;
      default:  // kClose
        pop(p++);
        if (depth_ == kEventsDepth) {
          ++pending_whole_;
          last_end_ = pending_size(p);
          return p;
        }
        break;
    }
  }
  return p;
}

// Directly in the events array: between events.
const char* Splitter::events_byte(const char* p) {
  const char c = *p;
  if (is_ws(c)) return p + 1;
  const auto after_event = [&] {
    return "not valid JSON: expected ',' or ']' after event " + std::to_string(events_ - 1) + where(p);
  };
  switch (c) {
    case ',':
      if (arr_ != Arr::after) fail("not valid JSON: unexpected ',' in traceEvents" + where(p));
      arr_ = Arr::element;
      if (pending_size(p) >= kChunkBytes) {
        flush(p);
        emit_pending(pending_.size());
        seg_ = p + 1;
      }
      return p + 1;
    case ']':
      if (arr_ == Arr::element) fail("not valid JSON: ',' before ']' in traceEvents" + where(p));
      flush(p);
      emit_pending(pending_.size());
      pop(p);
      in_events_ = false;
      seg_ = p;  // the ']' is the skeleton's
      return p + 1;
    case '{':
      if (arr_ == Arr::after) fail(after_event());
      arr_ = Arr::after;
      ++events_;
      push('{');
      return p + 1;
    default:
      if (arr_ == Arr::after) fail(after_event());
      fail("event " + std::to_string(events_) + (c == '[' ? " is an array, not an object" : " is not an object"));
  }
}

// In the top-level object, outside the events array.
const char* Splitter::object_byte(const char* p) {
  const char c = *p;
  if (is_ws(c)) return p + 1;
  const bool top = depth_ == 1;
  if (top && obj_ == Obj::value) {  // the first byte of a top-level value
    obj_ = Obj::after;
    if (events_key_) {
      events_key_ = false;
      if (c == '[') {
        push('[');
        flush(p + 1);  // the skeleton keeps "[" and "]": an empty array
        in_events_ = saw_events_ = true;
        arr_ = Arr::first;
        pending_first_ = events_;
        return p + 1;
      }
      fail(c == '{' ? "traceEvents is an object, not an array" : "traceEvents is not an array");
    }
  }
  switch (c) {
    case '"':
      in_string_ = true;
      if (top && obj_ == Obj::key) {
        capture_ = true;
        key_.clear();
      }
      break;
    case '{':
    case '[': push(c); break;
    case '}':
    case ']':
      pop(p);
      if (depth_ == 0) top_ = Top::after;
      break;
    case ':':
      if (top && obj_ == Obj::colon) obj_ = Obj::value;
      break;
    case ',':
      if (top) obj_ = Obj::key;
      break;
    default: break;
  }
  return p + 1;
}

// One step of the byte-wise scanner from p (not beyond end): the position after it.
const char* Splitter::step(const char* p, const char* end) {
  if (in_string_) return skip_string(p, end);
  if (in_events_) return depth_ > kEventsDepth ? scan_event(p, end) : events_byte(p);
  switch (top_) {
    case Top::object: return object_byte(p);
    case Top::before:
      if (is_ws(*p)) return p + 1;
      if (*p == '[') fail("the top level is an array, not an object with traceEvents");
      if (*p != '{') {
        top_ = Top::scalar;  // judged whole at the end
        return end;
      }
      top_ = Top::object;
      push('{');
      return p + 1;
    case Top::scalar: return end;
    case Top::after:
      if (!is_ws(*p)) fail("not valid JSON: unexpected content after the top-level object" + where(p));
      return p + 1;
  }
  return end;
}

#if SHARDLAB_SCAN_SSE2
// 64 bytes inside the events array at once: bit masks of quotes, backslashes and brackets, the
// bytes inside strings by a prefix XOR of the quotes, then only the brackets outside strings are
// visited (a few per event). Bytes between events (',' and whitespace) go through events_byte.
// nullptr, having changed nothing, if the block holds a backslash: the caller scans it bytewise.
const char* Splitter::block64(const char* p) {
  uint64_t quote = 0, open = 0, close = 0;
  for (int k = 0; k < 4; ++k) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * k));
    const auto eq = [&](char c) {
      return static_cast<uint64_t>(static_cast<uint32_t>(_mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8(c)))))
             << (16 * k);
    };
    if (eq('\\')) return nullptr;
    quote |= eq('"');
    open |= eq('{') | eq('[');
    close |= eq('}') | eq(']');
  }
  uint64_t in = quote;  // prefix XOR: 1 from an opening quote up to (not including) its closing one
  in ^= in << 1;
  in ^= in << 2;
  in ^= in << 4;
  in ^= in << 8;
  in ^= in << 16;
  in ^= in << 32;
  if (in_string_) in = ~in;
  in_string_ = (in >> 63) != 0;
  const char* gap = depth_ == kEventsDepth ? p : nullptr;  // between events, not yet checked
  for (uint64_t brackets = (open | close) & ~in; brackets; brackets &= brackets - 1) {
    const int i = std::countr_zero(brackets);
    const char* b = p + i;
    if (depth_ == kEventsDepth) {  // an event begins, or the array ends
      for (const char* q = gap; q < b;) q = events_byte(q);
      const char* next = events_byte(b);
      if (!in_events_) {  // the rest of the block is the top object's
        in_string_ = false;
        return next;
      }
      gap = nullptr;
    } else if ((open >> i) & 1) {
      push(*b);
    } else {
      pop(b);
      if (depth_ == kEventsDepth) {
        ++pending_whole_;
        last_end_ = pending_size(b + 1);
        gap = b + 1;
      }
    }
  }
  if (gap)
    for (const char* q = gap; q < p + 64;) q = events_byte(q);
  return p + 64;
}
#endif

void Splitter::feed(const char* data, size_t n) {
  block_ = seg_ = data;
  block_end_ = data + n;
  const char* p = data;
  const char* const end = data + n;
  while (p < end) {
#if SHARDLAB_SCAN_SSE2
    if (in_events_ && !escape_ && end - p >= 64) {
      if (const char* next = block64(p)) {
        p = next;
      } else {
        for (const char* stop = p + 64; p < stop;) p = step(p, stop);
      }
      continue;
    }
#endif
    p = step(p, end);
  }
  flush(end);
  offset_ += n;
}

void Splitter::finish() {
  switch (top_) {
    case Top::before: throw FileError("truncated JSON: the file holds no JSON value");
    case Top::scalar: scalar_top(skeleton_);
    case Top::object:
      if (in_events_) {
        emit_pending(last_end_);
        throw FileError("truncated JSON: the file ends inside the traceEvents array (" + std::to_string(events_) +
                        " events begun)");
      }
      throw FileError("truncated JSON: the file ends inside the top-level object");
    case Top::after: return;
  }
}

// ---------------------------------------------------------------------------------------------
// Small helpers.

// Kineto's dtype spellings (c10::ScalarType names) to element sizes.
int dtype_bytes(std::string_view d) {
  static const std::unordered_map<std::string_view, int> kSizes = {
      {"Float", 4},         {"Double", 8},       {"Half", 2},          {"BFloat16", 2},    {"Int", 4},
      {"Long", 8},          {"Short", 2},        {"Char", 1},          {"Byte", 1},        {"Bool", 1},
      {"ComplexHalf", 4},   {"ComplexFloat", 8}, {"ComplexDouble", 16}, {"Float8_e4m3fn", 1},
      {"Float8_e5m2", 1},   {"Float8_e4m3fnuz", 1}, {"Float8_e5m2fnuz", 1}, {"UInt16", 2},
      {"UInt32", 4},        {"UInt64", 8},       {"float32", 4},       {"float16", 2},     {"bfloat16", 2},
      {"float64", 8},       {"int32", 4},        {"int64", 8},         {"int8", 1},        {"uint8", 1}};
  const auto it = kSizes.find(d);
  return it == kSizes.end() ? 4 : it->second;
}

// Interns strings: each distinct string once, its index handed out. Open addressing over a
// flat table of (hash, index) slots: a million mostly distinct args objects would otherwise cost
// a node allocation and a pointer chase each in std::unordered_map.
class Interner {
 public:
  Interner() : Interner(false) {}
  explicit Interner(bool reserve_empty, size_t expected = 0) {
    strings_.reserve(expected);
    slots_.resize(std::bit_ceil(std::max<size_t>(64, expected * 2)));
    if (reserve_empty) add("");
  }
  uint32_t add(std::string_view s) {
    const uint64_t h = std::hash<std::string_view>{}(s);
    const auto tag = static_cast<uint32_t>(h >> 32);
    size_t mask = slots_.size() - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
      Slot& slot = slots_[i];
      if (slot.index == kEmpty) break;
      if (slot.tag == tag && strings_[slot.index] == s) return slot.index;
    }
    const auto id = static_cast<uint32_t>(strings_.size());
    strings_.emplace_back(s);
    if (strings_.size() * 2 > slots_.size()) {  // keep the load under 1/2: short probes
      grow();
      mask = slots_.size() - 1;
    }
    size_t i = h & mask;
    while (slots_[i].index != kEmpty) i = (i + 1) & mask;
    slots_[i] = {tag, id};
    return id;
  }
  std::vector<std::string> take() {
    slots_.clear();
    return std::move(strings_);
  }

 private:
  static constexpr uint32_t kEmpty = std::numeric_limits<uint32_t>::max();
  struct Slot {
    uint32_t tag = 0;  // the hash's high bits: most mismatches fail without a string compare
    uint32_t index = kEmpty;
  };
  void grow() {
    std::vector<Slot> old(slots_.size() * 2);
    old.swap(slots_);
    const size_t mask = slots_.size() - 1;
    for (const Slot& o : old) {
      if (o.index == kEmpty) continue;
      size_t i = std::hash<std::string_view>{}(strings_[o.index]) & mask;
      while (slots_[i].index != kEmpty) i = (i + 1) & mask;
      slots_[i] = o;
    }
  }

  std::vector<std::string> strings_;
  std::vector<Slot> slots_;
};

// Categories as Kineto writes them today, and as PyTorch 1.8/1.9 did (Kernel, Memcpy, Runtime,
// Operator, ...).
Category category_of(std::string_view cat, std::string_view name) {
  if (cat == "kernel" || cat == "Kernel") {
    if (name.starts_with("nccl:wait")) return Category::comm_wait;
    return name.starts_with("nccl") ? Category::comm : Category::compute;
  }
  if (cat == "gpu_memcpy" || cat == "gpu_memset" || cat == "Memcpy" || cat == "Memset") return Category::memcpy;
  if (cat == "cuda_runtime" || cat == "cuda_driver" || cat == "Runtime") return Category::runtime;
  if (cat == "cpu_op" || cat == "python_function" || cat == "Operator" || cat == "python") return Category::cpu_op;
  if (cat == "user_annotation") return Category::annotation;
  return Category::other;
}

bool device_cat(std::string_view cat) {
  return cat == "kernel" || cat == "gpu_memcpy" || cat == "gpu_memset" || cat == "Kernel" || cat == "Memcpy" ||
         cat == "Memset";
}
bool memset_cat(std::string_view cat) { return cat == "gpu_memset" || cat == "Memset"; }

// Copies JSON text without the whitespace between tokens.
void minify(std::string_view in, std::string& out) {
  out.resize(in.size());
  char* o = out.data();
  const char* p = in.data();
  const char* const end = p + in.size();
  while (p < end) {
    const char c = *p++;
    if (c == '"') {  // a string, escapes and all
      *o++ = c;
      while (p < end) {
        const char s = *p++;
        *o++ = s;
        if (s == '"') break;
        if (s == '\\' && p < end) *o++ = *p++;
      }
    } else if (!is_ws(c)) {
      *o++ = c;
    }
  }
  out.resize(static_cast<size_t>(o - out.data()));
}

// A byte count from a double: saturated, as a file may hold any number (1e300 bytes allocated).
int64_t to_bytes(double v) {
  if (!(v > -9.2e18)) return v < 0 ? std::numeric_limits<int64_t>::min() : 0;  // also NaN
  if (v >= 9.2e18) return std::numeric_limits<int64_t>::max();
  return static_cast<int64_t>(v);
}

// A string that spells a pid or tid in decimal: PyTorch 1.8 wrote thread ids so ("24572"), and
// streams as "stream 7".
std::optional<int> decimal_id(std::string_view s) {
  if (s.starts_with("stream ")) s.remove_prefix(7);
  if (s.empty() || s.size() > 10 || (s.size() > 1 && s[0] == '0')) return std::nullopt;
  int64_t v = 0;
  for (const char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  if (v > std::numeric_limits<int>::max()) return std::nullopt;
  return static_cast<int>(v);
}

// JSON's number grammar: tells an out-of-range number from a malformed one.
bool json_number_syntax(std::string_view s) {
  size_t i = 0;
  const auto digits = [&] {
    const size_t from = i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
    return i > from;
  };
  if (i < s.size() && s[i] == '-') ++i;
  if (i < s.size() && s[i] == '0') ++i;
  else if (!digits()) return false;
  if (i < s.size() && s[i] == '.') {
    ++i;
    if (!digits()) return false;
  }
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    if (!digits()) return false;
  }
  return i == s.size();
}

// ---------------------------------------------------------------------------------------------
// A chunk's parse: its events as records, with the chunk's own tables.

// One event kept for the builder (which lays out lanes, pairs B/E, ... in file order).
struct Rec {
  double ts = 0, dur = 0;
  uint64_t id = 0;     // flows: the id; slices: the correlation (0: none)
  uint32_t name = 0;   // Part::names
  uint32_t args = 0;   // Part::args (0: none)
  int32_t pid = 0, tid = 0;  // < 0: Part::labels[-1 - id]
  uint32_t extra = 0;  // 1 + index into Part::collectives (slices) or Part::metas ("M"); 0: none
  int32_t step = 0;    // N of a ProfilerStep#N (flags & kStep)
  char ph = 0;
  uint8_t flags = 0;
  Category category = Category::other;
};
enum : uint8_t { kDevice = 1, kMemset = 2, kStep = 4, kEnclosing = 8, kNameEmpty = 16 };

struct CollectiveArgs {
  std::string name, dtype, group;
  int64_t in_nelems = 0, out_nelems = 0, group_size = 1, seq = 0;
};

struct Meta {
  enum Kind : uint8_t { process_name, thread_name, process_sort, thread_sort } kind = process_name;
  std::string name;
  int sort_index = 0;
};

using Samples = std::vector<std::pair<double, double>>;

struct Part {
  std::vector<Rec> recs;
  Interner names, args{true};
  std::vector<std::string> labels;  // string pids/tids in order of first use
  std::map<std::string, int, std::less<>> label_ids;
  std::vector<CollectiveArgs> collectives;
  std::vector<Meta> metas;
  std::map<std::string, Samples, std::less<>> counters;  // in file order within each
  std::vector<MemorySample> memory;                     // in file order
  size_t skipped = 0;
};

// The fields of an event the loader reads; others are skipped unread.
enum class Field : uint8_t { none, ph, name, cat, pid, tid, ts, dur, id, bp, args };
// The args the loader reads (direct children of "args").
enum class Arg : uint8_t {
  none, correlation, collective, in_nelems, out_nelems, group_size, dtype, group, seq,
  name, sort_index, device_type, total_allocated, total_reserved
};

Arg arg_of(std::string_view k) {
  switch (k.size()) {
    case 3: return k == "Seq" ? Arg::seq : Arg::none;
    case 4: return k == "name" ? Arg::name : Arg::none;
    case 5: return k == "dtype" ? Arg::dtype : Arg::none;
    case 10: return k == "Group size" ? Arg::group_size : k == "sort_index" ? Arg::sort_index : Arg::none;
    case 11: return k == "correlation" ? Arg::correlation : k == "Device Type" ? Arg::device_type : Arg::none;
    case 13: return k == "In msg nelems" ? Arg::in_nelems : Arg::none;
    case 14: return k == "Out msg nelems" ? Arg::out_nelems : k == "Total Reserved" ? Arg::total_reserved : Arg::none;
    case 15: return k == "Collective name" ? Arg::collective : k == "Total Allocated" ? Arg::total_allocated : Arg::none;
    case 18: return k == "Process Group Name" ? Arg::group : Arg::none;
    default: return Arg::none;
  }
}

Field field_of(std::string_view k) {
  switch (k.size()) {
    case 2:
      if (k == "ph") return Field::ph;
      if (k == "ts") return Field::ts;
      if (k == "id") return Field::id;
      if (k == "bp") return Field::bp;
      return Field::none;
    case 3:
      if (k == "cat") return Field::cat;
      if (k == "pid") return Field::pid;
      if (k == "tid") return Field::tid;
      if (k == "dur") return Field::dur;
      return Field::none;
    case 4:
      if (k == "name") return Field::name;
      if (k == "args") return Field::args;
      return Field::none;
    default: return Field::none;
  }
}

// A JSON number as nlohmann would have typed it.
struct Num {
  enum Kind : uint8_t { none, integer, unsigned_integer, floating };
  Kind kind = none;
  int64_t i = 0;
  uint64_t u = 0;
  double d = 0;

  double as_double() const {
    return kind == integer ? static_cast<double>(i) : kind == unsigned_integer ? static_cast<double>(u) : d;
  }
  // The value as an int64 if it is a whole number that fits.
  std::optional<int64_t> as_int() const {
    if (kind == integer) return i;
    if (kind == unsigned_integer && u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return static_cast<int64_t>(u);
    if (kind == floating && std::isfinite(d) && d == std::floor(d) && std::abs(d) < 9.2e18)
      return static_cast<int64_t>(d);
    return std::nullopt;
  }
};

// Reads a number as nlohmann would have typed it; Num::none if v is not a valid number.
Num read_number(od::value& v) {
  Num n;
  od::number num;
  if (!v.get_number().get(num)) {
    switch (num.get_number_type()) {
      case od::number_type::signed_integer:
        n.kind = Num::integer;
        n.i = num.get_int64();
        break;
      case od::number_type::unsigned_integer:
        n.kind = Num::unsigned_integer;
        n.u = num.get_uint64();
        break;
      default:
        n.kind = Num::floating;
        n.d = num.get_double() + 0.0;  // -0 as 0
        break;
    }
  } else if (double d; !v.get_double().get(d)) {  // an integer beyond 64 bits
    n.kind = Num::floating;
    n.d = d;
  }
  return n;
}

// The start of a token for a message: up to its first whitespace, 64 bytes at most.
std::string_view token_text(std::string_view raw) {
  return raw.substr(0, std::min<size_t>(raw.find_first_of(" \t\r\n,]}"), 64));
}

// The message for a number simdjson refused: out of range, or not a number at all.
std::string bad_number(std::string_view raw) {
  raw = token_text(raw);
  return (json_number_syntax(raw) ? "number overflow parsing '" : "invalid number '") + std::string(raw) + "'";
}

// A pid or tid: numbers that fit an int as themselves, anything else (strings, big numbers)
// as a label, numbered per file.
struct IdValue {
  bool set = false, bad = false, is_label = false;
  int value = 0;
  std::string label;
};

struct Fields {
  size_t index = 0;  // in traceEvents
  char ph = 0;
  bool has_ph = false, has_ts = false, has_dur = false, has_id = false, bp_enclosing = false, bad = false;
  std::string_view name, cat;  // views into the parser's buffers, valid for the chunk
  IdValue pid, tid;
  double ts = 0, dur = 0;
  uint64_t id = 0;
  // args
  bool has_args = false;
  std::string_view args;  // the args object's text as written
  uint64_t correlation = 0;
  bool has_collective = false;
  std::string_view collective, dtype, group, arg_name;
  int64_t in_nelems = 0, out_nelems = 0, group_size = 1, seq = 0, sort_index = 0, device_type = -1;
  bool has_sort_index = false;
  std::optional<double> total_allocated, total_reserved;
  struct Numeric {
    std::string_view key;
    double value;
  };
  std::vector<Numeric> numbers;  // every numeric direct child of args, for counters

  void reset(size_t i) {
    index = i;
    ph = 0;
    has_ph = has_ts = has_dur = has_id = bp_enclosing = bad = has_args = has_collective = has_sort_index = false;
    name = cat = args = collective = dtype = group = arg_name = {};
    pid.set = pid.bad = pid.is_label = tid.set = tid.bad = tid.is_label = false;
    pid.value = tid.value = 0;
    ts = dur = 0;
    id = correlation = 0;
    in_nelems = out_nelems = seq = sort_index = 0;
    group_size = 1;
    device_type = -1;
    total_allocated.reset();
    total_reserved.reset();
    numbers.clear();
  }
};

class ChunkParser {
 public:
  ChunkParser(const Chunk& chunk, Part& part) : chunk_(chunk), part_(part) {}
  void parse(od::parser& parser);

 private:
  [[noreturn]] void syntax(simdjson::error_code err) const {
    throw FileError("not valid JSON: event " + std::to_string(f_.index) + ": " + simdjson::error_message(err));
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw FileError("event " + std::to_string(f_.index) + ": " + what);
  }
  template <typename T>
  T get(simdjson::simdjson_result<T>&& r) const {
    T v{};
    if (const auto err = std::move(r).get(v)) syntax(err);
    return v;
  }
  std::string_view key(od::field& field) const;
  od::json_type type(od::value& v) const { return get(v.type()); }
  void read_event(od::object& obj);
  void read_id(od::value& v, IdValue& id) const;
  void read_time(od::value& v, Field which);
  void read_args(od::value& v);
  void finish_event();
  int resolve(const IdValue& id);
  uint32_t intern_args();

  const Chunk& chunk_;
  Part& part_;
  Fields f_;
  std::string buf_;  // scratch: minified args, counter names
};

// The field's key: as written when it has no escapes (the common case), else unescaped.
std::string_view ChunkParser::key(od::field& field) const {
  const char* raw = field.key().raw();  // just after the opening quote
  const char* p = raw;
  while (*p != '"') {
    if (*p == '\\') return get(field.unescaped_key());
    ++p;
  }
  return {raw, static_cast<size_t>(p - raw)};
}

void ChunkParser::read_id(od::value& v, IdValue& id) const {
  switch (type(v)) {
    case od::json_type::string: {
      id.set = true;
      const std::string_view s = get(v.get_string());
      if (const auto n = decimal_id(s)) {
        id.is_label = false;
        id.value = *n;
      } else if (s.empty()) {  // as 0, Chrome's default
        id.is_label = false;
        id.value = 0;
      } else {
        id.is_label = true;
        id.label.assign(s);
      }
      return;
    }
    case od::json_type::number: {
      id.set = true;
      const auto n = read_number(v).as_int();
      if (n && *n >= 0 && *n <= std::numeric_limits<int>::max()) {
        id.is_label = false;
        id.value = static_cast<int>(*n);
      } else if (n) {  // kept apart from small numbers via a label
        id.is_label = true;
        id.label = std::to_string(*n);
      } else {
        id.bad = true;  // fractions, out of range
      }
      return;
    }
    case od::json_type::boolean:
    case od::json_type::null: id.set = true; [[fallthrough]];
    default: id.bad = true;
  }
}

void ChunkParser::read_time(od::value& v, Field which) {
  const char* what = which == Field::ts ? "ts" : "dur";
  const od::json_type t = type(v);
  if (t == od::json_type::null) return;  // as if absent
  if (t != od::json_type::number) fail(std::string(what) + " is not a number");
  double d = 0;
  if (v.get_double().get(d)) {
    throw FileError("not valid JSON: event " + std::to_string(f_.index) + ": " + bad_number(v.raw_json_token()) +
                    " (" + what + ")");
  }
  d += 0.0;  // -0 as 0
  if (!std::isfinite(d) || std::abs(d) > kMaxTimeUs) f_.bad = true;
  (which == Field::ts ? f_.ts : f_.dur) = d;
  (which == Field::ts ? f_.has_ts : f_.has_dur) = true;
}

void ChunkParser::read_args(od::value& v) {
  od::object args = get(v.get_object());
  f_.has_args = true;  // a repeated "args" replaces the first
  f_.numbers.clear();
  for (auto fr : args) {
    od::field field;
    if (const auto err = std::move(fr).get(field)) syntax(err);
    const std::string_view k = key(field);
    od::value& a = field.value();
    const Arg kind = arg_of(k);
    // Counters ("C") keep every numeric arg; the ph may come after the args.
    const bool want_numbers = !f_.has_ph || f_.ph == 'C';
    if (kind == Arg::none && !want_numbers) continue;
    const od::json_type t = type(a);
    Num n;
    if (t == od::json_type::number) n = read_number(a);
    if (want_numbers && n.kind != Num::none && std::isfinite(n.as_double())) f_.numbers.push_back({k, n.as_double()});
    const auto i = n.as_int();
    const bool str = t == od::json_type::string;
    switch (kind) {
      case Arg::correlation:
        if (n.kind == Num::unsigned_integer) f_.correlation = n.u;
        else if (i && *i > 0) f_.correlation = static_cast<uint64_t>(*i);
        break;
      case Arg::collective:
        if (str) {
          f_.collective = get(a.get_string());
          f_.has_collective = true;
        }
        break;
      case Arg::dtype:
        if (str) f_.dtype = get(a.get_string());
        break;
      case Arg::group:
        if (str) f_.group = get(a.get_string());
        break;
      case Arg::name:
        if (str) f_.arg_name = get(a.get_string());
        break;
      case Arg::in_nelems: f_.in_nelems = i.value_or(0); break;
      case Arg::out_nelems: f_.out_nelems = i.value_or(0); break;
      case Arg::group_size: f_.group_size = i.value_or(1); break;
      case Arg::seq: f_.seq = i.value_or(0); break;
      case Arg::device_type: f_.device_type = i.value_or(-1); break;
      case Arg::sort_index:
        if (i && std::abs(*i) <= std::numeric_limits<int>::max()) {
          f_.sort_index = *i;
          f_.has_sort_index = true;
        }
        break;
      case Arg::total_allocated:
        if (n.kind != Num::none) f_.total_allocated = n.as_double();
        break;
      case Arg::total_reserved:
        if (n.kind != Num::none) f_.total_reserved = n.as_double();
        break;
      case Arg::none: break;
    }
  }
  f_.args = get(args.raw_json());
}

void ChunkParser::read_event(od::object& obj) {
  for (auto fr : obj) {
    od::field field;
    if (const auto err = std::move(fr).get(field)) syntax(err);
    const Field which = field_of(key(field));
    if (which == Field::none) continue;
    od::value& v = field.value();
    switch (which) {
      case Field::ph: {
        // The usual one-letter phase read in place; anything else the long way.
        if (const std::string_view raw = v.raw_json_token();
            raw.size() >= 3 && raw[0] == '"' && raw[2] == '"' && raw[1] != '\\') {
          f_.has_ph = true;
          f_.ph = raw[1];
          break;
        }
        if (type(v) != od::json_type::string) fail("ph is not a string");
        const std::string_view s = get(v.get_string());
        f_.has_ph = !s.empty();
        f_.ph = f_.has_ph ? s[0] : '\0';
        break;
      }
      case Field::name:
        if (type(v) == od::json_type::string) f_.name = get(v.get_string());
        break;
      case Field::cat:
        if (type(v) == od::json_type::string) f_.cat = get(v.get_string());
        break;
      case Field::pid: read_id(v, f_.pid); break;
      case Field::tid: read_id(v, f_.tid); break;
      case Field::ts:
      case Field::dur: read_time(v, which); break;
      case Field::id: {
        const od::json_type t = type(v);
        if (t == od::json_type::string) {
          f_.id = std::hash<std::string_view>{}(get(v.get_string()));
          f_.has_id = true;
        } else if (t == od::json_type::number) {
          const Num n = read_number(v);
          if (const auto i = n.as_int()) {
            f_.id = static_cast<uint64_t>(*i);
            f_.has_id = true;
          } else if (n.kind == Num::unsigned_integer) {
            f_.id = n.u;
            f_.has_id = true;
          }
        }
        break;
      }
      case Field::bp: f_.bp_enclosing = type(v) == od::json_type::string && get(v.get_string()) == "e"; break;
      case Field::args:
        if (type(v) == od::json_type::object) read_args(v);
        break;
      case Field::none: break;
    }
  }
}

int ChunkParser::resolve(const IdValue& id) {
  if (!id.set) return 0;  // Chrome's default
  if (!id.is_label) return id.value;
  auto it = part_.label_ids.find(id.label);
  if (it == part_.label_ids.end()) {
    it = part_.label_ids.emplace(id.label, -static_cast<int>(part_.labels.size()) - 1).first;
    part_.labels.push_back(id.label);
  }
  return it->second;
}

uint32_t ChunkParser::intern_args() {
  if (!f_.has_args) return 0;
  minify(f_.args, buf_);
  return part_.args.add(buf_);
}

void ChunkParser::finish_event() {
  Fields& e = f_;
  if (!e.has_ph) return;  // not an event anyone draws
  if (e.bad || e.pid.bad || e.tid.bad) {
    ++part_.skipped;
    return;
  }
  Rec r;
  r.ph = e.ph;
  r.pid = resolve(e.pid);
  r.tid = resolve(e.tid);
  switch (e.ph) {
    case 'X':
    case 'B':
    case 'E':
    case 'i':
    case 'I': {
      if (!e.has_ts || (e.ph == 'X' && e.dur < 0)) {
        ++part_.skipped;
        return;
      }
      if ((e.ph == 'i' || e.ph == 'I') && e.name == "[memory]") {  // Kineto's memory events
        if (e.device_type == 0 || !e.total_allocated) return;       // host memory
        const double allocated = *e.total_allocated, reserved = e.total_reserved.value_or(0);
        part_.memory.push_back({e.ts, to_bytes(allocated), to_bytes(reserved)});
        part_.counters["GPU memory allocated"].emplace_back(e.ts, allocated);
        part_.counters["GPU memory reserved"].emplace_back(e.ts, reserved);
        return;
      }
      r.ts = e.ts;
      r.dur = e.ph == 'X' ? e.dur : 0;
      r.id = e.correlation;
      r.name = part_.names.add(e.name);
      r.args = intern_args();
      r.category = category_of(e.cat, e.name);
      const bool device = device_cat(e.cat);
      if (device) r.flags |= kDevice;
      if (memset_cat(e.cat)) r.flags |= kMemset;
      if (e.name.empty()) r.flags |= kNameEmpty;
      if (e.has_collective) {
        part_.collectives.push_back({std::string(e.collective), std::string(e.dtype), std::string(e.group), e.in_nelems,
                                     e.out_nelems, e.group_size, e.seq});
        r.extra = static_cast<uint32_t>(part_.collectives.size());
      }
      if (e.ph != 'i' && e.ph != 'I' && !device && e.name.starts_with("ProfilerStep#")) {
        const char* first = e.name.data() + 13;
        const char* last = e.name.data() + e.name.size();
        const auto [p, ec] = std::from_chars(first, last, r.step);
        if (ec == std::errc() && p == last) r.flags |= kStep;
      }
      part_.recs.push_back(r);
      return;
    }
    case 'C': {
      if (!e.has_ts) {
        ++part_.skipped;
        return;
      }
      for (const Fields::Numeric& n : e.numbers) {
        buf_.assign(e.name);
        buf_ += ' ';
        buf_ += n.key;
        auto it = part_.counters.find(buf_);
        if (it == part_.counters.end()) it = part_.counters.emplace(buf_, Samples{}).first;
        it->second.emplace_back(e.ts, n.value);
      }
      if (e.name == "GPU memory") {
        int64_t allocated = 0, reserved = 0;
        bool any = false;
        for (const Fields::Numeric& n : e.numbers) {
          if (n.key == "allocated") allocated = to_bytes(n.value), any = true;
          if (n.key == "reserved") reserved = to_bytes(n.value), any = true;
        }
        if (any) part_.memory.push_back({e.ts, allocated, reserved});
      }
      return;
    }
    case 's':
    case 'f':
      if (!e.has_ts || !e.has_id) {
        ++part_.skipped;
        return;
      }
      r.ts = e.ts;
      r.id = e.id;
      if (e.ph == 's' || e.bp_enclosing) r.flags |= kEnclosing;
      part_.recs.push_back(r);
      return;
    case 'M': {
      Meta m;
      if (e.name == "process_name") m.kind = Meta::process_name;
      else if (e.name == "thread_name") m.kind = Meta::thread_name;
      else if (e.name == "process_sort_index" && e.has_sort_index) m.kind = Meta::process_sort;
      else if (e.name == "thread_sort_index" && e.has_sort_index) m.kind = Meta::thread_sort;
      else return;
      m.name = e.arg_name;
      m.sort_index = static_cast<int>(e.sort_index);
      part_.metas.push_back(std::move(m));
      r.extra = static_cast<uint32_t>(part_.metas.size());
      part_.recs.push_back(r);
      return;
    }
    default: return;  // phases the viewer does not draw (async b/e/n, t, O, ...)
  }
}

void ChunkParser::parse(od::parser& parser) {
  part_.args = Interner(true, chunk_.size / 128);
  part_.recs.reserve(chunk_.events);
  f_.index = chunk_.first_event;
  od::document doc;
  auto err = parser.iterate(chunk_.text.data(), chunk_.size, chunk_.text.size()).get(doc);
  od::array events;
  if (!err) err = doc.get_array().get(events);
  if (err) {  // the whole chunk's text (UTF-8, ...)
    throw FileError("not valid JSON: in events " + std::to_string(chunk_.first_event) + " to " +
                    std::to_string(chunk_.first_event + chunk_.events - 1) + ": " + simdjson::error_message(err));
  }
  size_t index = chunk_.first_event;
  for (auto er : events) {
    f_.reset(index++);
    od::value ev;
    if (const auto e = std::move(er).get(ev)) syntax(e);
    od::object obj = get(ev.get_object());
    read_event(obj);
    finish_event();
  }
}

od::parser& thread_parser() {
  thread_local od::parser parser;
  return parser;
}

// ---------------------------------------------------------------------------------------------
// The builder: a file's parts in file order, into lanes, flows, counters and the timeline.

struct LaneBuild {
  Lane lane;
  std::vector<uint32_t> pending_waits;  // timeline slices of nccl:wait not yet tied to a collective
  struct Open {  // a B event awaiting its E
    double ts;
    uint32_t name, args;
    Category category;
    uint64_t correlation;
  };
  std::vector<Open> open;
};

struct FlowEnd {
  uint64_t id;
  int lane;
  double t;
  bool finish, enclosing;  // an "f"; bound to the enclosing slice ("bp": "e")
};

struct StepCandidate {
  int lane, step;
  double start, end;
};

struct FileResult {
  Rank rank;
  std::optional<int> declared_rank;  // distributedInfo.rank
  std::vector<std::string> names, args;  // this file's interned tables (args without the "")
};

class Builder {
 public:
  void add(Part& part);
  FileResult finish(std::optional<int> declared_rank);

 private:
  void add_record(const Rec& r, const Part& part, int pid, int tid, uint32_t name, uint32_t args);
  LaneBuild& lane(int pid, int tid);
  void add_slice(LaneBuild& lb, int tid, double start, double end, uint32_t name, uint32_t args, Category cat,
                 uint64_t correlation, bool device, bool memset, const CollectiveArgs* collective);
  int label_id(const std::string& label);

  Interner names_;
  std::vector<std::string> args_;  // slice args index i is args_[i - 1]
  std::vector<LaneBuild> lanes_;
  std::unordered_map<uint64_t, int> lane_index_;
  std::unordered_map<std::string, int> labels_;  // string pids/tids -> negative ids
  std::unordered_map<int, std::string> label_names_;
  std::map<int, std::string> process_names_;
  std::map<int, int> process_sort_;
  std::map<std::pair<int, int>, std::string> thread_names_;
  std::map<std::pair<int, int>, int> thread_sort_;
  std::map<std::string, Samples> counters_;
  std::vector<FlowEnd> flow_ends_;
  std::vector<StepCandidate> steps_;
  RankTimeline timeline_;
  size_t skipped_ = 0;
  std::vector<int> label_map_;
  std::vector<uint32_t> name_map_;
};

int Builder::label_id(const std::string& label) {
  const auto [it, inserted] = labels_.try_emplace(label, -static_cast<int>(labels_.size()) - 1);
  if (inserted) label_names_.emplace(it->second, label);
  return it->second;
}

LaneBuild& Builder::lane(int pid, int tid) {
  const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(pid)) << 32) | static_cast<uint32_t>(tid);
  const auto [it, inserted] = lane_index_.try_emplace(key, static_cast<int>(lanes_.size()));
  if (inserted) {
    lanes_.emplace_back();
    lanes_.back().lane.pid = pid;
    lanes_.back().lane.tid = tid;
  }
  return lanes_[static_cast<size_t>(it->second)];
}

void Builder::add_slice(LaneBuild& lb, int tid, double start, double end, uint32_t name, uint32_t args, Category cat,
                        uint64_t correlation, bool device, bool memset, const CollectiveArgs* coll) {
  lb.lane.slices.push_back({start, end, name, args, 0, cat, correlation});
  if (!device) return;
  lb.lane.device = true;
  SliceKind kind = SliceKind::compute;
  switch (cat) {
    case Category::comm: kind = SliceKind::comm; break;
    case Category::comm_wait: kind = SliceKind::comm_wait; break;
    case Category::memcpy: kind = memset ? SliceKind::memset : SliceKind::memcpy; break;
    default: break;
  }
  int32_t collective = -1;
  if (kind == SliceKind::comm && coll) {
    collective = static_cast<int32_t>(timeline_.collectives.size());
    // Counts bounded so that bytes (count x element size) stay far from overflowing int64.
    const auto nelems = [](int64_t n) { return std::clamp<int64_t>(n, 0, int64_t{1} << 50); };
    timeline_.collectives.push_back({coll->name, nelems(coll->in_nelems), nelems(coll->out_nelems),
                                     dtype_bytes(coll->dtype),
                                     static_cast<int>(std::clamp<int64_t>(coll->group_size, 1, 1 << 30)), coll->group,
                                     coll->seq, start, end});
    // A wait belongs to the collective that follows it on its stream.
    for (const uint32_t w : lb.pending_waits) timeline_.slices[w].collective = collective;
    lb.pending_waits.clear();
  }
  if (kind == SliceKind::comm_wait) lb.pending_waits.push_back(static_cast<uint32_t>(timeline_.slices.size()));
  timeline_.slices.push_back({start, end, tid, kind, collective});
}

void Builder::add_record(const Rec& r, const Part& part, int pid, int tid, uint32_t name, uint32_t args) {
  switch (r.ph) {
    case 'X':
    case 'B':
    case 'E':
    case 'i':
    case 'I': {
      LaneBuild& lb = lane(pid, tid);
      const bool device = r.flags & kDevice;
      if (r.ph == 'B') {
        lb.open.push_back({r.ts, name, args, r.category, r.id});
        return;
      }
      double start = r.ts;
      const double end = r.ts + r.dur;
      Category cat = r.category;
      uint64_t correlation = r.id;
      if (r.ph == 'E') {
        if (lb.open.empty() || lb.open.back().ts > r.ts) {
          ++skipped_;
          return;
        }
        const LaneBuild::Open b = lb.open.back();
        lb.open.pop_back();
        start = b.ts;
        if (r.flags & kNameEmpty) name = b.name;
        if (b.args) args = b.args;
        cat = b.category;
        correlation = b.correlation ? b.correlation : correlation;
      }
      add_slice(lb, tid, start, end, name, args, cat, correlation, device, r.flags & kMemset,
                r.extra ? &part.collectives[r.extra - 1] : nullptr);
      if (r.ph != 'i' && r.ph != 'I' && (r.flags & kStep))
        steps_.push_back({static_cast<int>(&lb - lanes_.data()), r.step, start, end});
      return;
    }
    case 's':
    case 'f':
      flow_ends_.push_back({r.id, static_cast<int>(&lane(pid, tid) - lanes_.data()), r.ts, r.ph == 'f',
                            (r.flags & kEnclosing) != 0});
      return;
    case 'M': {
      const Meta& m = part.metas[r.extra - 1];
      switch (m.kind) {
        case Meta::process_name: process_names_[pid] = m.name; break;
        case Meta::thread_name: thread_names_[{pid, tid}] = m.name; break;
        case Meta::process_sort: process_sort_[pid] = m.sort_index; break;
        case Meta::thread_sort: thread_sort_[{pid, tid}] = m.sort_index; break;
      }
      return;
    }
    default: return;
  }
}

void Builder::add(Part& part) {
  label_map_.resize(part.labels.size());
  for (size_t k = 0; k < part.labels.size(); ++k) label_map_[k] = label_id(part.labels[k]);
  const std::vector<std::string> names = part.names.take();
  name_map_.resize(names.size());
  for (size_t k = 0; k < names.size(); ++k) name_map_[k] = names_.add(names[k]);
  std::vector<std::string> args = part.args.take();
  const auto args_base = static_cast<uint32_t>(args_.size());  // part index k > 0 -> args_base + k
  for (size_t k = 1; k < args.size(); ++k) args_.push_back(std::move(args[k]));

  for (const Rec& r : part.recs) {
    const int pid = r.pid < 0 ? label_map_[static_cast<size_t>(-1 - r.pid)] : r.pid;
    const int tid = r.tid < 0 ? label_map_[static_cast<size_t>(-1 - r.tid)] : r.tid;
    const bool slice = r.ph != 's' && r.ph != 'f' && r.ph != 'M';
    add_record(r, part, pid, tid, slice ? name_map_[r.name] : 0, slice && r.args ? args_base + r.args : 0);
  }
  for (auto& [name, samples] : part.counters) {
    Samples& to = counters_[name];
    to.insert(to.end(), samples.begin(), samples.end());
  }
  timeline_.memory.insert(timeline_.memory.end(), part.memory.begin(), part.memory.end());
  skipped_ += part.skipped;
  part = Part{};  // its memory goes now
}

// For slices with identical times: annotations enclose ops, ops enclose runtime calls (files
// record an op when it ends, after the calls inside it).
int nesting_rank(Category c) {
  switch (c) {
    case Category::annotation: return 0;
    case Category::cpu_op: return 1;
    case Category::runtime: return 2;
    default: return 3;
  }
}

// The deepest slice of a lane (sorted, nested) enclosing t, or -1.
int64_t enclosing_slice(const Lane& lane, double t) {
  const auto& s = lane.slices;
  // The last slice starting at or before t; then up its ancestors until one contains t.
  auto it = std::upper_bound(s.begin(), s.end(), t, [](double x, const Slice& sl) { return x < sl.start_us; });
  if (it == s.begin()) return -1;
  size_t i = static_cast<size_t>(it - s.begin()) - 1;
  int depth = s[i].depth + 1;
  while (true) {
    if (s[i].depth < depth) {
      if (s[i].end_us >= t) return static_cast<int64_t>(i);
      depth = s[i].depth;
      if (depth == 0) return -1;
    }
    if (i == 0) return -1;
    --i;
  }
}

// std::stable_sort, skipped when the range is in order already (the usual case: files are
// written in time order).
template <typename It, typename Less>
void sort_stable(It first, It last, Less less) {
  if (!std::is_sorted(first, last, less)) std::stable_sort(first, last, less);
}

FileResult Builder::finish(std::optional<int> declared_rank) {
  FileResult out;
  Rank& r = out.rank;
  r.skipped = skipped_;
  for (LaneBuild& lb : lanes_) r.skipped += lb.open.size();  // B without E

  // Lane names and order: CPU threads, then streams; by process then thread sort index.
  std::vector<int> order(lanes_.size());
  for (size_t i = 0; i < lanes_.size(); ++i) {
    Lane& l = lanes_[i].lane;
    order[i] = static_cast<int>(i);
    const auto pn = process_names_.find(l.pid);
    l.process = pn != process_names_.end() ? pn->second : label_names_.count(l.pid) ? label_names_[l.pid] : "";
    const auto tn = thread_names_.find({l.pid, l.tid});
    if (tn != thread_names_.end()) l.name = tn->second;
    else if (label_names_.count(l.tid)) l.name = label_names_[l.tid];
    else l.name = (l.device ? "stream " : "thread ") + std::to_string(l.tid);
    const auto ps = process_sort_.find(l.pid);
    l.process_sort_index = ps != process_sort_.end() ? ps->second : l.pid;
    const auto ts = thread_sort_.find({l.pid, l.tid});
    l.sort_index = ts != thread_sort_.end() ? ts->second : l.tid;
  }
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    const Lane& x = lanes_[static_cast<size_t>(a)].lane;
    const Lane& y = lanes_[static_cast<size_t>(b)].lane;
    return std::tie(x.device, x.process_sort_index, x.pid, x.sort_index, x.tid) <
           std::tie(y.device, y.process_sort_index, y.pid, y.sort_index, y.tid);
  });
  std::vector<int> new_index(lanes_.size());
  for (size_t i = 0; i < order.size(); ++i) new_index[static_cast<size_t>(order[i])] = static_cast<int>(i);

  // Each lane: time order, longer first at equal starts (parents before children), then depth.
  for (const int i : order) {
    Lane& l = lanes_[static_cast<size_t>(i)].lane;
    sort_stable(l.slices.begin(), l.slices.end(), [](const Slice& a, const Slice& b) {
      if (a.start_us != b.start_us) return a.start_us < b.start_us;
      if (a.end_us != b.end_us) return a.end_us > b.end_us;
      return nesting_rank(a.category) < nesting_rank(b.category);
    });
    std::vector<double> ends;  // the open ancestors' ends
    for (Slice& s : l.slices) {
      while (!ends.empty() && ends.back() <= s.start_us + kTouchUs) ends.pop_back();
      // A slice crossing its would-be parent's end goes one deeper anyway: drawn, not dropped.
      s.depth = static_cast<uint16_t>(std::min<size_t>(ends.size(), std::numeric_limits<uint16_t>::max()));
      l.max_depth = std::max(l.max_depth, s.depth);
      ends.push_back(s.end_us);
    }
    r.lanes.push_back(std::move(l));
  }

  // Flows: pair each id's first "s" with its first "f".
  sort_stable(flow_ends_.begin(), flow_ends_.end(), [](const FlowEnd& a, const FlowEnd& b) {
    return a.id < b.id || (a.id == b.id && a.finish < b.finish);
  });
  for (size_t i = 0; i < flow_ends_.size();) {
    size_t j = i;
    while (j < flow_ends_.size() && flow_ends_[j].id == flow_ends_[i].id) ++j;
    const FlowEnd& s = flow_ends_[i];
    const auto f = std::find_if(flow_ends_.begin() + static_cast<std::ptrdiff_t>(i),
                                flow_ends_.begin() + static_cast<std::ptrdiff_t>(j), [](const FlowEnd& x) { return x.finish; });
    if (!s.finish && f != flow_ends_.begin() + static_cast<std::ptrdiff_t>(j)) {
      Flow flow;
      flow.id = s.id;
      flow.from_lane = new_index[static_cast<size_t>(s.lane)];
      flow.to_lane = new_index[static_cast<size_t>(f->lane)];
      flow.from_us = s.t;
      flow.to_us = f->t;
      const Lane& from = r.lanes[static_cast<size_t>(flow.from_lane)];
      const Lane& to = r.lanes[static_cast<size_t>(flow.to_lane)];
      flow.from_slice = enclosing_slice(from, s.t);
      if (f->enclosing) {
        flow.to_slice = enclosing_slice(to, f->t);
      } else {  // Chrome binds a plain "f" to the next slice to begin
        const auto it = std::lower_bound(to.slices.begin(), to.slices.end(), f->t,
                                         [](const Slice& sl, double x) { return sl.start_us < x; });
        flow.to_slice = it == to.slices.end() ? -1 : it - to.slices.begin();
      }
      r.flows.push_back(flow);
    }
    i = j;
  }
  sort_stable(r.flows.begin(), r.flows.end(), [](const Flow& a, const Flow& b) { return a.from_us < b.from_us; });

  for (auto& [name, samples] : counters_) {
    sort_stable(samples.begin(), samples.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    r.counters.push_back({name, std::move(samples)});
  }

  // Steps: ProfilerStep#N on CPU lanes (Kineto repeats them as gpu_user_annotation on streams).
  for (const StepCandidate& s : steps_)
    if (!lanes_[static_cast<size_t>(s.lane)].lane.device) timeline_.steps.push_back({s.step, s.start, s.end});
  sort_stable(timeline_.steps.begin(), timeline_.steps.end(),
              [](const StepWindow& a, const StepWindow& b) { return a.step < b.step; });
  sort_stable(timeline_.memory.begin(), timeline_.memory.end(),
              [](const MemorySample& a, const MemorySample& b) { return a.t_us < b.t_us; });
  r.timeline = std::move(timeline_);

  out.declared_rank = declared_rank;
  out.names = names_.take();
  out.args = std::move(args_);
  return out;
}

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

[[noreturn]] void not_json(simdjson::error_code err) {
  throw FileError(std::string("not valid JSON: ") + simdjson::error_message(err));
}

// Reads a JSON value all through (the parts of a file outside the events are small), as
// nlohmann would have: big integers are numbers, 1e999 is not. Throws FileError.
void check_value(od::value v) {
  od::json_type t{};
  if (const auto err = v.type().get(t)) not_json(err);
  simdjson::error_code err = simdjson::SUCCESS;
  switch (t) {
    case od::json_type::object: {
      od::object o;
      if ((err = v.get_object().get(o))) break;
      for (auto fr : o) {
        od::field f;
        std::string_view k;
        if ((err = std::move(fr).get(f)) || (err = f.unescaped_key().get(k))) break;
        check_value(f.value());
      }
      break;
    }
    case od::json_type::array: {
      od::array a;
      if ((err = v.get_array().get(a))) break;
      for (auto er : a) {
        od::value e;
        if ((err = std::move(er).get(e))) break;
        check_value(e);
      }
      break;
    }
    case od::json_type::number:
      if (read_number(v).kind == Num::none) throw FileError("not valid JSON: " + bad_number(v.raw_json_token()));
      break;
    case od::json_type::string: {
      std::string_view s;
      err = v.get_string().get(s);
      break;
    }
    case od::json_type::boolean:
    case od::json_type::null: {
      bool b = false;
      const bool bad = t == od::json_type::boolean ? v.get_bool().get(b) != simdjson::SUCCESS
                                                   : (v.is_null().get(b) != simdjson::SUCCESS || !b);
      if (bad)
        throw FileError("not valid JSON: invalid literal '" + std::string(token_text(v.raw_json_token())) + "'");
      break;
    }
  }
  if (err) not_json(err);
}

// A file whose top level is not an object: not JSON at all, or JSON but not a trace.
void scalar_top(const std::string& text) {
  const simdjson::padded_string padded(text);
  od::parser parser;
  od::document doc;
  od::json_type t{};
  simdjson::error_code err = parser.iterate(padded).get(doc);
  if (!err) err = doc.type().get(t);
  if (!err) {
    switch (t) {
      case od::json_type::number: {
        double d = 0;
        if ((err = doc.get_double().get(d)) == simdjson::NUMBER_ERROR) {
          std::string_view raw;
          if (doc.raw_json_token().get(raw)) raw = text;
          throw FileError("not valid JSON: " + bad_number(raw));
        }
        break;
      }
      case od::json_type::string: {
        std::string_view str;
        err = doc.get_string().get(str);
        break;
      }
      case od::json_type::boolean:
      case od::json_type::null: {
        bool b = false;
        err = t == od::json_type::boolean ? doc.get_bool().get(b) : doc.is_null().get(b);
        if (err == simdjson::INCORRECT_TYPE || (!err && t == od::json_type::null && !b)) {
          std::string_view raw;
          if (doc.raw_json_token().get(raw)) raw = text;
          throw FileError("not valid JSON: invalid literal '" + std::string(token_text(raw)) + "'");
        }
        break;
      }
      default: break;  // objects and arrays are told apart by their first byte
    }
  }
  if (err) not_json(err);  // trailing content after a scalar is one (TRAILING_CONTENT)
  throw FileError("the top level is not an object");
}

// The skeleton (the file less its events), which this validates: distributedInfo.rank.
std::optional<int> skeleton_rank(const std::string& skeleton) {
  const simdjson::padded_string text(skeleton);
  od::parser parser;
  od::document doc;
  od::object top;
  if (const auto err = parser.iterate(text).get(doc)) not_json(err);
  if (const auto err = doc.get_object().get(top)) not_json(err);
  std::optional<int> rank;
  for (auto fr : top) {
    od::field f;
    std::string_view k;
    if (const auto err = std::move(fr).get(f)) not_json(err);
    if (const auto err = f.unescaped_key().get(k)) not_json(err);
    od::value v = f.value();
    od::json_type t{};
    if (k != "distributedInfo" || v.type().get(t) || t != od::json_type::object) {
      check_value(v);
      continue;
    }
    od::object info;
    if (const auto err = v.get_object().get(info)) not_json(err);
    for (auto ir : info) {
      od::field g;
      if (const auto err = std::move(ir).get(g)) not_json(err);
      if (const auto err = g.unescaped_key().get(k)) not_json(err);
      od::value r = g.value();
      if (k != "rank" || r.type().get(t) || t != od::json_type::number) {
        check_value(r);
        continue;
      }
      const Num n = read_number(r);
      if (n.kind == Num::none) throw FileError("not valid JSON: " + bad_number(r.raw_json_token()));
      const auto i = n.as_int();
      if (i && *i >= 0 && *i <= std::numeric_limits<int>::max()) rank = static_cast<int>(*i);
    }
  }
  return rank;  // (the scanner has seen that nothing follows the object)
}

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
    const std::optional<int> rank = skeleton_rank(splitter.skeleton());
    if (!splitter.saw_events()) throw FileError("no traceEvents array");
    return builder.finish(rank);
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
