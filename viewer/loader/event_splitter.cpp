// event_splitter.cpp: the Splitter's scanner (the Reader is whole in event_splitter.h). It keeps
// a little state per byte (in a string, nesting, where in the top object's grammar it is) and
// skips the inside of events 64 bytes at a time with SSE2 where it can.
#include "event_splitter.h"

#if SHARDLAB_SCAN_SSE2
#include <emmintrin.h>
#endif

#include <simdjson.h>

#include <array>
#include <bit>
#include <charconv>
#include <string_view>
#include <system_error>

#include "skeleton.h"

namespace shardlab::viewer::loader {

namespace {

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

}  // namespace

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
  emitted_ += pending_whole_;
  pending_.resize(c.size + simdjson::SIMDJSON_PADDING, '\0');
  c.text = std::move(pending_);
  start_pending();
  emit_(std::move(c));
}

void Splitter::flush(const char* p) {
  if (p <= seg_) return;
  if (in_events_) {
    pending_.insert(pending_.end(), seg_, p);
  } else {
    skeleton_.append(seg_, p);
    if (skeleton_.size() > kMaxSkeletonBytes)
      throw FileError(top_ == Top::scalar ? "not a trace: the file does not begin with a JSON object"
                                          : "not a trace the viewer reads: more than " +
                                                std::to_string(kMaxSkeletonBytes >> 20) +
                                                " MiB of it lies outside the traceEvents array");
  }
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
          event_ended(p);
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
        event_ended(b + 1);
        gap = b + 1;
      }
    }
  }
  if (gap)
    for (const char* q = gap; q < p + 64;) q = events_byte(q);
  return p + 64;
}
#endif

bool Splitter::feed(const char* data, size_t n) {
  block_ = seg_ = data;
  block_end_ = data + n;
  const char* p = data;
  const char* const end = data + n;
  try {
    scan(p, end);
  } catch (const EventCap&) {  // the last event wanted has ended: the file stops there
    flush(end);
    offset_ += n;
    close_events();
    return false;
  }
  flush(end);
  offset_ += n;
  return true;
}

void Splitter::event_ended(const char* after) {
  ++pending_whole_;
  last_end_ = pending_size(after);
  if (emitted_ + pending_whole_ >= max_events_) throw EventCap{};
}

void Splitter::close_events() {
  emit_pending(last_end_);
  skeleton_ += "]}";  // what the file would have said after its last event, had it ended
  in_events_ = false;
  top_ = Top::after;
}

void Splitter::scan(const char* p, const char* const end) {
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
}

void Splitter::finish() {
  switch (top_) {
    case Top::before: throw FileError("truncated JSON: the file holds no JSON value");
    case Top::scalar: scalar_top(skeleton_);
    case Top::object:
      if (in_events_ && emitted_ + pending_whole_ == 0)
        throw FileError("truncated JSON: the file ends inside its traceEvents, before any whole event");
      if (in_events_) {
        close_events();
        cut_ = true;
        return;
      }
      throw FileError("truncated JSON: the file ends inside the top-level object");
    case Top::after: return;
  }
}

}  // namespace shardlab::viewer::loader
