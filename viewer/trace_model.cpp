// trace_model.cpp: the trace loader. One pass over each file with nlohmann::json's SAX parser
// (no DOM: a DOM of a 1 GB trace would need several GB), building lanes, slices, counters,
// flows and the RankTimeline as events stream by; then per rank: sort, nest, bind flows.
//
// Files are read in 1 MiB chunks through zlib's gz* functions, which read plain files
// transparently, so .json and .json.gz take the same path. Ranks are parsed in parallel.
#include "trace_model.h"

#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <filesystem>
#include <iterator>
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

#include <nlohmann/json.hpp>

namespace shardlab::viewer {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr size_t kChunk = size_t{1} << 20;  // bytes per read; progress is reported per chunk
constexpr int kMaxEventDepth = 64;          // JSON nesting allowed inside one event
// Times beyond ~31 years are not a trace's; keeping them would stretch the time axis to 1e308.
constexpr double kMaxTimeUs = 1e15;
// Chrome JSON has at best nanosecond times (3 decimals of us), and ts + dur rounds: ends within
// this of a start count as touching, not overlapping, when nesting.
constexpr double kTouchUs = 1e-4;

// ---------------------------------------------------------------------------------------------
// Input: a file read in chunks, as the character iterator nlohmann's parser pulls from.

struct Shared {  // what the loading threads share with the caller's thread
  std::atomic<size_t> done{0};
  std::atomic<bool> cancel{false};
  std::mutex mutex;
  std::condition_variable wake;
};

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};

class Source {
 public:
  Source(const std::string& path, Shared& shared) : shared_(shared), buf_(kChunk) {
    errno = 0;
    file_.reset(gzopen(path.c_str(), "rb"));
    if (!file_) throw std::runtime_error(path + ": cannot open: " + (errno ? std::strerror(errno) : "out of memory"));
    gzbuffer(file_.get(), static_cast<unsigned>(kChunk));
  }

  // The parser's view: p_ walks the chunk; at its end, refill() reads the next one.
  const char* p_ = nullptr;
  const char* lim_ = nullptr;

  bool refill() {
    if (eof_) return false;
    if (shared_.cancel.load(std::memory_order_relaxed)) {
      cancelled_ = true;
      return stop();
    }
    const int n = gzread(file_.get(), buf_.data(), static_cast<unsigned>(buf_.size()));
    if (n <= 0) {
      int code = Z_OK;
      const char* msg = gzerror(file_.get(), &code);
      // Z_BUF_ERROR: the input ended inside a gzip stream.
      if (n < 0 || code == Z_BUF_ERROR) error_ = code == Z_BUF_ERROR ? "gzip data truncated" : msg;
      return stop();
    }
    total_ += static_cast<size_t>(n);
    p_ = buf_.data();
    lim_ = p_ + n;
    report();
    return true;
  }

  size_t bytes() const { return total_; }           // uncompressed bytes read
  const std::string& error() const { return error_; }  // an I/O error, "" if none
  bool cancelled() const { return cancelled_; }  // stopped early by a cancellation

 private:
  bool stop() {
    eof_ = true;
    p_ = lim_ = nullptr;
    report();
    return false;
  }
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
  std::vector<char> buf_;
  size_t total_ = 0, reported_ = 0;
  bool eof_ = false, cancelled_ = false;
  std::string error_;
};

// An input iterator over a Source. Copies share the Source, so comparing against any "end"
// copy asks the Source whether more input exists.
struct SourceIterator {
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  Source* src;
  const char& operator*() const { return *src->p_; }
  SourceIterator& operator++() {
    ++src->p_;
    return *this;
  }
  SourceIterator operator++(int) {
    SourceIterator old = *this;
    ++src->p_;
    return old;
  }
  bool operator!=(const SourceIterator&) const { return src->p_ != src->lim_ || src->refill(); }
  bool operator==(const SourceIterator& o) const { return !(*this != o); }
};

// ---------------------------------------------------------------------------------------------
// Small helpers.

// Appends s as a JSON string literal.
void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  size_t run = 0;  // start of the pending run of characters that need no escape
  for (size_t i = 0; i < s.size(); ++i) {
    const auto u = static_cast<unsigned char>(s[i]);
    if (u >= 0x20 && u != '"' && u != '\\') continue;
    out.append(s.data() + run, i - run);
    run = i + 1;
    if (u == '"' || u == '\\') {
      out += '\\';
      out += static_cast<char>(u);
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      const char esc[] = {'\\', 'u', '0', '0', kHex[u >> 4], kHex[u & 0xf]};
      out.append(esc, sizeof esc);
    }
  }
  out.append(s.data() + run, s.size() - run);
  out += '"';
}

template <typename T>
void append_number(std::string& out, T v) {
  char buf[32];
  out.append(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
}

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

Category category_of(std::string_view cat, std::string_view name) {
  if (cat == "kernel") {
    if (name.starts_with("nccl:wait")) return Category::comm_wait;
    return name.starts_with("nccl") ? Category::comm : Category::compute;
  }
  if (cat == "gpu_memcpy" || cat == "gpu_memset") return Category::memcpy;
  if (cat == "cuda_runtime" || cat == "cuda_driver") return Category::runtime;
  if (cat == "cpu_op" || cat == "python_function") return Category::cpu_op;
  if (cat == "user_annotation") return Category::annotation;
  return Category::other;
}

bool device_cat(std::string_view cat) { return cat == "kernel" || cat == "gpu_memcpy" || cat == "gpu_memset"; }

// ---------------------------------------------------------------------------------------------
// One file's parse: the SAX handler and what it builds.

// The fields of an event the loader reads; others are skipped.
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

// A JSON scalar as the handler sees it.
struct Scalar {
  enum Type : uint8_t { null, boolean, integer, unsigned_integer, floating, string };
  explicit Scalar(Type t) : type(t) {}

  Type type;
  bool b = false;
  int64_t i = 0;
  uint64_t u = 0;
  double d = 0;
  std::string* s = nullptr;

  bool number() const { return type == integer || type == unsigned_integer || type == floating; }
  double as_double() const {
    return type == integer ? static_cast<double>(i) : type == unsigned_integer ? static_cast<double>(u) : d;
  }
  // The value as an int64 if it is a whole number that fits.
  std::optional<int64_t> as_int() const {
    if (type == integer) return i;
    if (type == unsigned_integer && u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return static_cast<int64_t>(u);
    if (type == floating && std::isfinite(d) && d == std::floor(d) && std::abs(d) < 9.2e18)
      return static_cast<int64_t>(d);
    return std::nullopt;
  }
};

// A pid or tid: numbers that fit an int as themselves, anything else (strings, big numbers)
// as a negative id per distinct spelling.
struct IdValue {
  bool set = false, bad = false;
  int value = 0;
  std::string label;  // the spelling, for ids given as strings or too big for an int
};

struct Event {
  size_t index = 0;  // in traceEvents
  char ph = 0;
  bool has_ph = false, has_ts = false, has_dur = false, has_id = false, bp_enclosing = false, bad = false;
  std::string name, cat;
  IdValue pid, tid;
  double ts = 0, dur = 0;
  uint64_t id = 0;
  // args
  bool has_args = false;
  std::string args;  // the args object as compact JSON text
  uint64_t correlation = 0;
  bool has_collective = false;
  std::string collective, dtype, group, arg_name;
  int64_t in_nelems = 0, out_nelems = 0, group_size = 1, seq = 0, sort_index = 0, device_type = -1;
  bool has_sort_index = false;
  std::optional<double> total_allocated, total_reserved;
  struct Numeric {
    size_t key_at, key_len;  // the key's text within `args` (escaped as written there)
    double value;
  };
  std::vector<Numeric> numbers;  // every numeric direct child of args, for counters

  void reset(size_t i) {
    index = i;
    ph = 0;
    has_ph = has_ts = has_dur = has_id = bp_enclosing = bad = has_args = has_collective = has_sort_index = false;
    name.clear();
    cat.clear();
    pid = {};
    tid = {};
    ts = dur = 0;
    id = correlation = 0;
    args.clear();
    collective.clear();
    dtype.clear();
    group.clear();
    arg_name.clear();
    in_nelems = out_nelems = seq = sort_index = 0;
    group_size = 1;
    device_type = -1;
    total_allocated.reset();
    total_reserved.reset();
    numbers.clear();
  }
};

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

class Handler {
 public:
  using number_integer_t = json::number_integer_t;
  using number_unsigned_t = json::number_unsigned_t;
  using number_float_t = json::number_float_t;
  using string_t = json::string_t;
  using binary_t = json::binary_t;

  // expected_events sizes the args table up front (rehashing a million strings is not free).
  explicit Handler(size_t expected_events) : args_(true, expected_events) {}

  // ---- SAX interface
  bool null() { return value(Scalar(Scalar::null)); }
  bool boolean(bool v) {
    Scalar s(Scalar::boolean);
    s.b = v;
    return value(s);
  }
  bool number_integer(number_integer_t v) {
    Scalar s(Scalar::integer);
    s.i = v;
    return value(s);
  }
  bool number_unsigned(number_unsigned_t v) {
    Scalar s(Scalar::unsigned_integer);
    s.u = v;
    return value(s);
  }
  bool number_float(number_float_t v, const string_t& raw) {
    Scalar s(Scalar::floating);
    s.d = v;
    raw_ = &raw;
    return value(s);
  }
  bool string(string_t& v) {
    Scalar s(Scalar::string);
    s.s = &v;
    return value(s);
  }
  bool binary(binary_t&) { return value(Scalar(Scalar::null)); }  // JSON text has no binary values
  bool start_object(std::size_t) { return open(true); }
  bool start_array(std::size_t) { return open(false); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(string_t& k);
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) {
    parse_position_ = position;
    parse_message_ = e.what();
    return false;
  }

  // ---- after the parse
  const std::string& error() const { return error_; }
  bool syntax_error() const { return !parse_message_.empty(); }
  size_t parse_position() const { return parse_position_; }
  const std::string& parse_message() const { return parse_message_; }
  bool saw_events() const { return saw_events_; }
  FileResult finish();

 private:
  enum class Ctx : uint8_t { top, info, events, event, args, skip };
  struct Frame {
    Ctx ctx;
    bool array;
    bool first = true;  // no element written yet (args text: no comma needed)
  };
  // What the next value is, as set by the key before it.
  enum class Pending : uint8_t { none, trace_events, info, info_rank };

  bool fail(std::string what) {
    error_ = std::move(what);
    return false;
  }
  std::string at_event() const { return "event " + std::to_string(ev_.index) + ": "; }
  bool value(const Scalar& v);
  bool open(bool object);
  bool close();
  bool event_field(const Scalar& v);
  void arg_value(const Scalar& v);
  void append_scalar(const Scalar& v);
  void args_separator();
  void set_id(IdValue& id, const Scalar& v);
  int resolve(const IdValue& id);

  void finish_event();
  LaneBuild& lane(int pid, int tid);
  void add_slice(LaneBuild& lb, int tid, double start, double end, uint32_t name, uint32_t args, Category cat,
                 uint64_t correlation, bool device, std::string_view cat_text);
  uint32_t intern_args() { return ev_.has_args ? args_.add(ev_.args) : 0; }

  std::vector<Frame> stack_;
  Pending pending_ = Pending::none;
  Field field_ = Field::none;
  Arg arg_ = Arg::none;
  const string_t* raw_ = nullptr;  // the text of the last floating-point number
  size_t arg_key_at_ = 0, arg_key_len_ = 0;  // the current arg's key within ev_.args
  size_t event_depth_ = 0;         // stack size when the current event opened
  size_t events_seen_ = 0;
  bool saw_events_ = false;
  Event ev_;

  std::string error_, parse_message_;
  size_t parse_position_ = 0;

  // What the file builds.
  std::optional<int> declared_rank_;
  Interner names_{false}, args_;
  std::vector<LaneBuild> lanes_;
  std::unordered_map<uint64_t, int> lane_index_;
  std::unordered_map<std::string, int> labels_;  // string pids/tids -> negative ids
  std::unordered_map<int, std::string> label_names_;
  std::map<int, std::string> process_names_;
  std::map<int, int> process_sort_;
  std::map<std::pair<int, int>, std::string> thread_names_;
  std::map<std::pair<int, int>, int> thread_sort_;
  std::map<std::string, std::vector<std::pair<double, double>>> counters_;
  std::vector<FlowEnd> flow_ends_;
  std::vector<StepCandidate> steps_;
  RankTimeline timeline_;
  size_t skipped_ = 0;
};

bool Handler::key(string_t& k) {
  const Frame& f = stack_.back();
  switch (f.ctx) {
    case Ctx::top:
      pending_ = k == "traceEvents" ? Pending::trace_events : k == "distributedInfo" ? Pending::info : Pending::none;
      break;
    case Ctx::info: pending_ = k == "rank" ? Pending::info_rank : Pending::none; break;
    case Ctx::event: field_ = field_of(k); break;
    case Ctx::args:
      args_separator();
      arg_key_at_ = ev_.args.size() + 1;  // after the opening quote
      append_json_string(ev_.args, k);
      arg_key_len_ = ev_.args.size() - 1 - arg_key_at_;
      ev_.args += ':';
      // Only the args object's own keys mean something to the loader.
      if (stack_.size() == event_depth_ + 1) arg_ = arg_of(k);
      break;
    default: break;
  }
  return true;
}

void Handler::args_separator() {
  Frame& f = stack_.back();
  if (!f.first) ev_.args += ',';
  f.first = false;
}

bool Handler::open(bool object) {
  if (stack_.empty()) {
    if (!object) return fail("the top level is an array, not an object with traceEvents");
    stack_.push_back({Ctx::top, false});
    return true;
  }
  // The level the new container would be at: inside an event counting the event as 1, else
  // from the top. The limit bounds the handler's stack; nlohmann's parser does not recurse.
  const size_t level = event_depth_ != 0 ? stack_.size() + 2 - event_depth_ : stack_.size() + 1;
  if (level > static_cast<size_t>(kMaxEventDepth)) {
    return fail((event_depth_ != 0 ? at_event() : std::string()) + "JSON nested more than " +
                std::to_string(kMaxEventDepth) + " levels deep");
  }
  const Frame parent = stack_.back();
  Ctx ctx = Ctx::skip;
  switch (parent.ctx) {
    case Ctx::top:
      if (pending_ == Pending::trace_events) {
        if (!object) {
          ctx = Ctx::events;
          saw_events_ = true;
        } else {
          return fail("traceEvents is an object, not an array");
        }
      } else if (pending_ == Pending::info && object) {
        ctx = Ctx::info;
      }
      pending_ = Pending::none;
      break;
    case Ctx::events:
      if (!object) return fail("event " + std::to_string(events_seen_) + " is an array, not an object");
      ctx = Ctx::event;
      ev_.reset(events_seen_++);
      event_depth_ = stack_.size() + 1;
      break;
    case Ctx::event:
      switch (field_) {
        case Field::args:
          if (object) {
            ctx = Ctx::args;
            ev_.has_args = true;  // a repeated "args" replaces the first
            ev_.args = "{";
            ev_.numbers.clear();
          }
          break;
        case Field::ph: return fail(at_event() + "ph is not a string");
        case Field::ts: return fail(at_event() + "ts is not a number");
        case Field::dur: return fail(at_event() + "dur is not a number");
        case Field::pid: ev_.pid.bad = true; break;
        case Field::tid: ev_.tid.bad = true; break;
        default: break;
      }
      field_ = Field::none;
      break;
    case Ctx::args:
      if (parent.array) args_separator();  // in an object, key() wrote the separator
      ev_.args += object ? '{' : '[';
      ctx = Ctx::args;
      arg_ = Arg::none;
      break;
    default: break;
  }
  stack_.push_back({ctx, !object});
  return true;
}

bool Handler::close() {
  const Frame f = stack_.back();
  stack_.pop_back();
  switch (f.ctx) {
    case Ctx::args: ev_.args += f.array ? ']' : '}'; break;
    case Ctx::event:
      finish_event();
      event_depth_ = 0;
      break;
    default: break;
  }
  return true;
}

bool Handler::value(const Scalar& v) {
  if (stack_.empty()) return fail("the top level is not an object");
  switch (stack_.back().ctx) {
    case Ctx::top:
      if (pending_ == Pending::trace_events) return fail("traceEvents is not an array");
      pending_ = Pending::none;
      return true;
    case Ctx::info:
      if (pending_ == Pending::info_rank) {
        const auto r = v.as_int();
        if (r && *r >= 0 && *r <= std::numeric_limits<int>::max()) declared_rank_ = static_cast<int>(*r);
      }
      pending_ = Pending::none;
      return true;
    case Ctx::events:
      return fail("event " + std::to_string(events_seen_) + " is not an object");
    case Ctx::event: return event_field(v);
    case Ctx::args: arg_value(v); return true;
    default: return true;
  }
}

void Handler::set_id(IdValue& id, const Scalar& v) {
  id.set = true;
  if (v.type == Scalar::string) {
    id.label = *v.s;
    return;
  }
  if (!v.number()) {
    id.bad = true;
    return;
  }
  const auto n = v.as_int();
  if (n && *n >= 0 && *n <= std::numeric_limits<int>::max()) {
    id.value = static_cast<int>(*n);
  } else if (n) {
    id.label = std::to_string(*n);  // kept apart from small numbers via a negative id
  } else {
    id.bad = true;  // fractions, non-finite
  }
}

bool Handler::event_field(const Scalar& v) {
  switch (field_) {
    case Field::ph:
      if (v.type != Scalar::string) return fail(at_event() + "ph is not a string");
      ev_.has_ph = !v.s->empty();
      ev_.ph = ev_.has_ph ? (*v.s)[0] : '\0';
      break;
    case Field::name:
      if (v.type == Scalar::string) ev_.name.swap(*v.s);
      break;
    case Field::cat:
      if (v.type == Scalar::string) ev_.cat.swap(*v.s);
      break;
    case Field::pid: set_id(ev_.pid, v); break;
    case Field::tid: set_id(ev_.tid, v); break;
    case Field::ts:
    case Field::dur: {
      if (!v.number()) {
        if (v.type == Scalar::null) break;  // as if absent
        return fail(at_event() + (field_ == Field::ts ? "ts" : "dur") + " is not a number");
      }
      const double d = v.as_double();
      if (!std::isfinite(d) || std::abs(d) > kMaxTimeUs) ev_.bad = true;
      (field_ == Field::ts ? ev_.ts : ev_.dur) = d;
      (field_ == Field::ts ? ev_.has_ts : ev_.has_dur) = true;
      break;
    }
    case Field::id:
      if (v.type == Scalar::string) {
        ev_.id = std::hash<std::string_view>{}(*v.s);
        ev_.has_id = true;
      } else if (const auto n = v.as_int()) {
        ev_.id = static_cast<uint64_t>(*n);
        ev_.has_id = true;
      } else if (v.type == Scalar::unsigned_integer) {
        ev_.id = v.u;
        ev_.has_id = true;
      }
      break;
    case Field::bp: ev_.bp_enclosing = v.type == Scalar::string && *v.s == "e"; break;
    default: break;
  }
  field_ = Field::none;
  return true;
}

void Handler::append_scalar(const Scalar& v) {
  std::string& out = ev_.args;
  switch (v.type) {
    case Scalar::null: out += "null"; break;
    case Scalar::boolean: out += v.b ? "true" : "false"; break;
    case Scalar::integer: append_number(out, v.i); break;
    case Scalar::unsigned_integer: append_number(out, v.u); break;
    case Scalar::floating:
      if (std::isfinite(v.d))
        out += *raw_;  // as written in the file
      else
        out += "null";  // 1e999: JSON has no infinity
      break;
    case Scalar::string: append_json_string(out, *v.s); break;
  }
}

void Handler::arg_value(const Scalar& v) {
  if (stack_.back().array) args_separator();
  append_scalar(v);
  if (stack_.size() != event_depth_ + 1) return;  // nested deeper than args' own keys
  const Arg a = arg_;
  arg_ = Arg::none;
  if (v.number()) {
    const double d = v.as_double();
    if (std::isfinite(d)) ev_.numbers.push_back({arg_key_at_, arg_key_len_, d});
  }
  const auto n = v.as_int();
  switch (a) {
    case Arg::correlation:
      if (v.type == Scalar::unsigned_integer) ev_.correlation = v.u;
      else if (n && *n > 0) ev_.correlation = static_cast<uint64_t>(*n);
      break;
    case Arg::collective:
      if (v.type == Scalar::string) {
        ev_.collective = *v.s;
        ev_.has_collective = true;
      }
      break;
    case Arg::dtype:
      if (v.type == Scalar::string) ev_.dtype = *v.s;
      break;
    case Arg::group:
      if (v.type == Scalar::string) ev_.group = *v.s;
      break;
    case Arg::name:
      if (v.type == Scalar::string) ev_.arg_name = *v.s;
      break;
    case Arg::in_nelems: ev_.in_nelems = n.value_or(0); break;
    case Arg::out_nelems: ev_.out_nelems = n.value_or(0); break;
    case Arg::group_size: ev_.group_size = n.value_or(1); break;
    case Arg::seq: ev_.seq = n.value_or(0); break;
    case Arg::device_type: ev_.device_type = n.value_or(-1); break;
    case Arg::sort_index:
      if (n && std::abs(*n) <= std::numeric_limits<int>::max()) {
        ev_.sort_index = *n;
        ev_.has_sort_index = true;
      }
      break;
    case Arg::total_allocated:
      if (v.number()) ev_.total_allocated = v.as_double();
      break;
    case Arg::total_reserved:
      if (v.number()) ev_.total_reserved = v.as_double();
      break;
    case Arg::none: break;
  }
}

int Handler::resolve(const IdValue& id) {
  if (id.label.empty() && id.set) return id.value;
  if (!id.set) return 0;  // Chrome's default
  const auto [it, inserted] = labels_.try_emplace(id.label, -static_cast<int>(labels_.size()) - 1);
  if (inserted) label_names_.emplace(it->second, id.label);
  return it->second;
}

LaneBuild& Handler::lane(int pid, int tid) {
  const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(pid)) << 32) | static_cast<uint32_t>(tid);
  const auto [it, inserted] = lane_index_.try_emplace(key, static_cast<int>(lanes_.size()));
  if (inserted) {
    lanes_.emplace_back();
    lanes_.back().lane.pid = pid;
    lanes_.back().lane.tid = tid;
  }
  return lanes_[static_cast<size_t>(it->second)];
}

void Handler::add_slice(LaneBuild& lb, int tid, double start, double end, uint32_t name, uint32_t args,
                        Category cat, uint64_t correlation, bool device, std::string_view cat_text) {
  lb.lane.slices.push_back({start, end, name, args, 0, cat, correlation});
  if (!device) return;
  lb.lane.device = true;
  SliceKind kind = SliceKind::compute;
  switch (cat) {
    case Category::comm: kind = SliceKind::comm; break;
    case Category::comm_wait: kind = SliceKind::comm_wait; break;
    case Category::memcpy: kind = cat_text == "gpu_memset" ? SliceKind::memset : SliceKind::memcpy; break;
    default: break;
  }
  int32_t collective = -1;
  if (kind == SliceKind::comm && ev_.has_collective) {
    collective = static_cast<int32_t>(timeline_.collectives.size());
    timeline_.collectives.push_back({ev_.collective, ev_.in_nelems, ev_.out_nelems, dtype_bytes(ev_.dtype),
                                     static_cast<int>(std::clamp<int64_t>(ev_.group_size, 1, 1 << 30)), ev_.group,
                                     ev_.seq, start, end});
    // A wait belongs to the collective that follows it on its stream.
    for (const uint32_t w : lb.pending_waits) timeline_.slices[w].collective = collective;
    lb.pending_waits.clear();
  }
  if (kind == SliceKind::comm_wait) lb.pending_waits.push_back(static_cast<uint32_t>(timeline_.slices.size()));
  timeline_.slices.push_back({start, end, tid, kind, collective});
}

void Handler::finish_event() {
  Event& e = ev_;
  if (!e.has_ph) return;  // not an event anyone draws
  if (e.bad || e.pid.bad || e.tid.bad) {
    ++skipped_;
    return;
  }
  const int pid = resolve(e.pid), tid = resolve(e.tid);
  switch (e.ph) {
    case 'X':
    case 'B':
    case 'E':
    case 'i':
    case 'I': {
      if (!e.has_ts || (e.ph == 'X' && e.dur < 0)) {
        ++skipped_;
        return;
      }
      if ((e.ph == 'i' || e.ph == 'I') && e.name == "[memory]") {  // Kineto's memory events
        if (e.device_type == 0 || !e.total_allocated) return;       // host memory
        const double allocated = *e.total_allocated, reserved = e.total_reserved.value_or(0);
        timeline_.memory.push_back({e.ts, static_cast<int64_t>(allocated), static_cast<int64_t>(reserved)});
        counters_["GPU memory allocated"].emplace_back(e.ts, allocated);
        counters_["GPU memory reserved"].emplace_back(e.ts, reserved);
        return;
      }
      LaneBuild& lb = lane(pid, tid);
      const bool device = device_cat(e.cat);
      if (e.ph == 'B') {
        lb.open.push_back({e.ts, names_.add(e.name), intern_args(), category_of(e.cat, e.name), e.correlation});
        return;
      }
      double start = e.ts, end = e.ts + (e.ph == 'X' ? e.dur : 0);
      uint32_t name = 0, args = 0;
      Category cat = Category::other;
      uint64_t correlation = e.correlation;
      if (e.ph == 'E') {
        if (lb.open.empty() || lb.open.back().ts > e.ts) {
          ++skipped_;
          return;
        }
        const LaneBuild::Open b = lb.open.back();
        lb.open.pop_back();
        start = b.ts;
        name = e.name.empty() ? b.name : names_.add(e.name);
        args = b.args ? b.args : intern_args();
        cat = b.category;
        correlation = b.correlation ? b.correlation : correlation;
      } else {
        name = names_.add(e.name);
        args = intern_args();
        cat = category_of(e.cat, e.name);
      }
      add_slice(lb, tid, start, end, name, args, cat, correlation, device, e.cat);
      if (e.ph != 'i' && e.ph != 'I' && !device && e.name.starts_with("ProfilerStep#")) {
        int step = 0;
        const char* first = e.name.data() + 13;
        const char* last = e.name.data() + e.name.size();
        const auto [p, ec] = std::from_chars(first, last, step);
        if (ec == std::errc() && p == last) steps_.push_back({static_cast<int>(&lb - lanes_.data()), step, start, end});
      }
      return;
    }
    case 'C': {
      if (!e.has_ts) {
        ++skipped_;
        return;
      }
      for (const Event::Numeric& n : e.numbers)
        counters_[e.name + ' ' + e.args.substr(n.key_at, n.key_len)].emplace_back(e.ts, n.value);
      if (e.name == "GPU memory") {
        int64_t allocated = 0, reserved = 0;
        bool any = false;
        for (const Event::Numeric& n : e.numbers) {
          const std::string_view k(e.args.data() + n.key_at, n.key_len);
          if (k == "allocated") allocated = static_cast<int64_t>(n.value), any = true;
          if (k == "reserved") reserved = static_cast<int64_t>(n.value), any = true;
        }
        if (any) timeline_.memory.push_back({e.ts, allocated, reserved});
      }
      return;
    }
    case 's':
    case 'f':
      if (!e.has_ts || !e.has_id) {
        ++skipped_;
        return;
      }
      flow_ends_.push_back({e.id, static_cast<int>(&lane(pid, tid) - lanes_.data()), e.ts, e.ph == 'f',
                            e.ph == 's' || e.bp_enclosing});
      return;
    case 'M': {
      if (e.name == "process_name") process_names_[pid] = e.arg_name;
      else if (e.name == "thread_name") thread_names_[{pid, tid}] = e.arg_name;
      else if (e.name == "process_sort_index" && e.has_sort_index) process_sort_[pid] = static_cast<int>(e.sort_index);
      else if (e.name == "thread_sort_index" && e.has_sort_index) thread_sort_[{pid, tid}] = static_cast<int>(e.sort_index);
      return;
    }
    default: return;  // phases the viewer does not draw (async b/e/n, t, O, ...)
  }
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

FileResult Handler::finish() {
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
    std::stable_sort(l.slices.begin(), l.slices.end(), [](const Slice& a, const Slice& b) {
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
  std::stable_sort(flow_ends_.begin(), flow_ends_.end(), [](const FlowEnd& a, const FlowEnd& b) {
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
  std::stable_sort(r.flows.begin(), r.flows.end(), [](const Flow& a, const Flow& b) { return a.from_us < b.from_us; });

  for (auto& [name, samples] : counters_) {
    std::stable_sort(samples.begin(), samples.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    r.counters.push_back({name, std::move(samples)});
  }

  // Steps: ProfilerStep#N on CPU lanes (Kineto repeats them as gpu_user_annotation on streams).
  for (const StepCandidate& s : steps_)
    if (!lanes_[static_cast<size_t>(s.lane)].lane.device) timeline_.steps.push_back({s.step, s.start, s.end});
  std::stable_sort(timeline_.steps.begin(), timeline_.steps.end(),
                   [](const StepWindow& a, const StepWindow& b) { return a.step < b.step; });
  std::stable_sort(timeline_.memory.begin(), timeline_.memory.end(),
                   [](const MemorySample& a, const MemorySample& b) { return a.t_us < b.t_us; });
  r.timeline = std::move(timeline_);

  out.declared_rank = declared_rank_;
  out.names = names_.take();
  out.args = args_.take();
  out.args.erase(out.args.begin());  // the "" that index 0 stands for
  return out;
}

// Parses one file.
FileResult parse_file(const std::string& path, size_t size, Shared& shared) {
  Source src(path, shared);
  // A shardlab or Kineto event takes 100 to 250 bytes of JSON.
  Handler h(std::min<size_t>(size, size_t{1} << 26) / 200);
  SourceIterator it{&src};
  const bool ok = json::sax_parse(it, it, &h, json::input_format_t::json, /*strict=*/true);
  if (!src.error().empty()) throw std::runtime_error(path + ": " + src.error());
  if (!ok) {
    if (src.cancelled()) throw LoadCancelled();
    if (!h.error().empty()) throw std::runtime_error(path + ": " + h.error());
    if (src.bytes() == 0) throw std::runtime_error(path + ": empty file");
    if (h.syntax_error()) {
      const bool truncated = h.parse_position() >= src.bytes() && h.parse_message().find("end of input") != std::string::npos;
      throw std::runtime_error(path + ": " + (truncated ? "truncated JSON: " : "not valid JSON: ") + h.parse_message());
    }
    throw std::runtime_error(path + ": not valid JSON");
  }
  if (!h.saw_events()) throw std::runtime_error(path + ": no traceEvents array");
  return h.finish();
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

  // One thread per file, up to the hardware's; the caller's thread reports progress.
  Shared shared;
  std::vector<std::optional<FileResult>> results(inputs.size());
  std::vector<std::exception_ptr> errors(inputs.size());
  std::atomic<size_t> next{0}, finished{0};
  const size_t workers = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, inputs.size());
  std::vector<std::thread> threads;
  for (size_t w = 0; w < workers; ++w) {
    threads.emplace_back([&] {
      for (size_t i; (i = next++) < inputs.size();) {
        try {
          results[i] = parse_file(inputs[i].path, inputs[i].size, shared);
        } catch (...) {
          errors[i] = std::current_exception();
          shared.cancel = true;  // the load fails anyway: stop the others early
        }
        ++finished;
        std::lock_guard lock(shared.mutex);
        shared.wake.notify_one();
      }
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
