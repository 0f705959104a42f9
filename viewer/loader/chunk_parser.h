// chunk_parser.h: the loader's second stage: one chunk of events (event_splitter.h) parsed into a
// Part of records (records.h).
//
// A chunk is parsed with simdjson's On-Demand API: only the fields the viewer reads are looked at
// (the rest is skipped unread), and no DOM is ever built. Chunks are parsed in parallel, each
// into its own Part with its own tables, so the parsers share nothing. The number readers below
// also serve skeleton.cpp.
#pragma once

#include <simdjson.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "event_splitter.h"
#include "records.h"

namespace shardlab::viewer::loader {

namespace od = simdjson::ondemand;

// The fields of an event the loader reads; others are skipped unread.
enum class Field : uint8_t { none, ph, name, cat, pid, tid, ts, dur, id, bp, args };

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
Num read_number(od::value& v);

// The start of a token for a message: up to its first whitespace, 64 bytes at most.
std::string_view token_text(std::string_view raw);

// The message for a number simdjson refused: out of range, or not a number at all.
std::string bad_number(std::string_view raw);

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
  std::string_view collective, dtype, group, link, link_tier, arg_name;
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
    name = cat = args = collective = dtype = group = link = link_tier = arg_name = {};
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
  // Names longer than max_name_bytes are kept cut (LoadLimits).
  ChunkParser(const Chunk& chunk, Part& part, size_t max_name_bytes)
      : chunk_(chunk), part_(part), max_name_bytes_(max_name_bytes) {}
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
  size_t max_name_bytes_;
  Fields f_;
  std::string buf_;  // scratch: minified args, counter names
};

// This thread's parser: its buffers, sized by the first chunks, serve every chunk after.
od::parser& thread_parser();

}  // namespace shardlab::viewer::loader
