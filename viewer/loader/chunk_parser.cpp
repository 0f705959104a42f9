// chunk_parser.cpp: ChunkParser (a chunk's events, field by field, into records) and the helpers it
// reads them with: categories from cat and name, pids/tids spelled as strings, args minified for
// interning, numbers typed as nlohmann would have typed them.
#include "chunk_parser.h"

#include <algorithm>
#include <charconv>
#include <functional>
#include <system_error>
#include <utility>

namespace shardlab::viewer::loader {

namespace {

// Times beyond ~3,000 years are not a trace's; keeping them would stretch the time axis to
// 1e308. (Microseconds since 1970, as PyTorch 1.8 wrote them, are about 1.6e15.)
constexpr double kMaxTimeUs = 1e17;

// Categories as Kineto writes them today (2.x: gpu_user_annotation for record_function ranges
// repeated on the streams, python_function for with_stack's Python frames), and as PyTorch
// 1.8/1.9 did (Kernel, Memcpy, Runtime, Operator, ...). Communication kernels are named nccl...:
// ncclDevKernel_AllReduce_Sum_f32_RING_LL (NCCL 2.19 on), ncclKernel_AllReduce_RING_LL_Sum_float
// (before), shardlab's ncclAllReduce.
Category category_of(std::string_view cat, std::string_view name) {
  if (cat == "kernel" || cat == "Kernel") {
    if (name.starts_with("nccl:wait")) return Category::comm_wait;
    return name.starts_with("nccl") ? Category::comm : Category::compute;
  }
  if (cat == "gpu_memcpy" || cat == "gpu_memset" || cat == "Memcpy" || cat == "Memset") return Category::memcpy;
  if (cat == "cuda_runtime" || cat == "cuda_driver" || cat == "Runtime") return Category::runtime;
  if (cat == "cpu_op" || cat == "python_function" || cat == "Operator" || cat == "python") return Category::cpu_op;
  if (cat == "user_annotation" || cat == "gpu_user_annotation") return Category::annotation;
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

// The args the loader reads (direct children of "args").
enum class Arg : uint8_t {
  none, correlation, collective, in_nelems, out_nelems, group_size, dtype, group, seq, link, link_tier,
  name, sort_index, device_type, total_allocated, total_reserved
};

Arg arg_of(std::string_view k) {
  switch (k.size()) {
    case 3: return k == "Seq" ? Arg::seq : Arg::none;
    case 4: return k == "name" ? Arg::name : k == "Link" ? Arg::link : Arg::none;
    case 5: return k == "dtype" ? Arg::dtype : Arg::none;
    case 9: return k == "Link tier" ? Arg::link_tier : Arg::none;
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

}  // namespace

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

// A name past `max` bytes: its start, cut on a UTF-8 character boundary, and its length.
std::string cut_name(std::string_view name, size_t max) {
  size_t end = max;
  while (end > 0 && (static_cast<unsigned char>(name[end]) & 0xC0) == 0x80) --end;  // not inside a character
  return std::string(name.substr(0, end)) + "... (" + std::to_string(name.size()) + " bytes)";
}

std::string_view token_text(std::string_view raw) {
  return raw.substr(0, std::min<size_t>(raw.find_first_of(" \t\r\n,]}"), 64));
}

std::string bad_number(std::string_view raw) {
  raw = token_text(raw);
  return (json_number_syntax(raw) ? "number overflow parsing '" : "invalid number '") + std::string(raw) + "'";
}

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
      case Arg::link:
        if (str) f_.link = get(a.get_string());
        break;
      case Arg::link_tier:
        if (str) f_.link_tier = get(a.get_string());
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
      if ((e.ph == 'i' || e.ph == 'I') && e.cat == "allocator") {  // shardlab's allocator instants
        for (auto kind : {AllocatorEventKind::segment_malloc, AllocatorEventKind::segment_free,
                          AllocatorEventKind::alloc_retry, AllocatorEventKind::out_of_memory})
          if (e.name == allocator_event_name(kind)) {
            part_.allocator.push_back({e.ts, kind});
            part_.allocator_args.push_back(intern_args());
          }
        return;
      }
      if ((e.ph == 'i' || e.ph == 'I') && e.name == "[memory]") {  // Kineto's memory events
        if (!e.total_allocated) return;
        const double allocated = *e.total_allocated, reserved = e.total_reserved.value_or(0);
        if (e.device_type == 0) {  // host memory (Device Type 0, CPU): drawn, not a GPU metric
          part_.counters["CPU memory allocated"].emplace_back(e.ts, allocated);
          return;
        }
        part_.memory.push_back({e.ts, to_bytes(allocated), to_bytes(reserved)});
        part_.counters["GPU memory allocated"].emplace_back(e.ts, allocated);
        part_.counters["GPU memory reserved"].emplace_back(e.ts, reserved);
        return;
      }
      r.ts = e.ts;
      r.dur = e.ph == 'X' ? e.dur : 0;
      r.id = e.correlation;
      std::string cut;
      if (e.name.size() > max_name_bytes_) {
        cut = cut_name(e.name, max_name_bytes_);
        ++part_.names_cut;
      }
      r.name = part_.names.add(cut.empty() ? e.name : std::string_view(cut));
      r.args = intern_args();
      r.category = category_of(e.cat, e.name);
      const bool device = device_cat(e.cat);
      if (device) r.flags |= kDevice;
      if (memset_cat(e.cat)) r.flags |= kMemset;
      if (e.name.empty()) r.flags |= kNameEmpty;
      if (e.has_collective) {
        part_.collectives.push_back({std::string(e.collective), std::string(e.dtype), std::string(e.group),
                                     std::string(e.link), link_tier_from_name(e.link_tier), e.in_nelems,
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

}  // namespace shardlab::viewer::loader
