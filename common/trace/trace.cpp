#include "trace/trace.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "trace/file_output.h"

namespace shardlab {

namespace {

// Correlation ids are rank * this + a per-rank counter, so flow ids never collide when the
// ranks' files are viewed together.
constexpr uint64_t kCorrelationsPerRank = 1000000000;

double to_us(int64_t ns) { return static_cast<double>(ns) / 1000.0; }

void append_int(std::string& out, int64_t v) {
  char buf[24];
  out.append(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
}

}  // namespace

std::string format_us(int64_t ns) {
  // Unsigned magnitude: -INT64_MIN does not fit in int64_t.
  const uint64_t mag = ns < 0 ? 0 - static_cast<uint64_t>(ns) : static_cast<uint64_t>(ns);
  char buf[32];
  const int n = std::snprintf(buf, sizeof buf, "%s%llu.%03llu", ns < 0 ? "-" : "",
                              static_cast<unsigned long long>(mag / 1000),
                              static_cast<unsigned long long>(mag % 1000));
  return std::string(buf, static_cast<size_t>(n));
}

namespace {

// The length of the well-formed UTF-8 sequence at the start of `s` (RFC 3629: no overlong
// forms, no surrogates, nothing above U+10FFFF), or 0 when it is not one.
size_t utf8_sequence(std::string_view s) {
  const auto b = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const auto cont = [&](size_t i) { return i < s.size() && (b(i) & 0xC0) == 0x80; };
  const unsigned char c = b(0);
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if (!cont(1) || !cont(2)) return 0;
    if (c == 0xE0 && b(1) < 0xA0) return 0;   // overlong
    if (c == 0xED && b(1) >= 0xA0) return 0;  // a UTF-16 surrogate
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (!cont(1) || !cont(2) || !cont(3)) return 0;
    if (c == 0xF0 && b(1) < 0x90) return 0;   // overlong
    if (c == 0xF4 && b(1) >= 0x90) return 0;  // above U+10FFFF
    return 4;
  }
  return 0;
}

}  // namespace

std::string json_string(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out += '"';
  for (size_t i = 0; i < s.size();) {
    const char ch = s[i];
    const auto u = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (u < 0x20) {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\u00";
      out += kHex[u >> 4];
      out += kHex[u & 0xf];
    } else if (u >= 0x80) {
      // Well-formed UTF-8 passes through unchanged; any other byte (a name cut mid-character,
      // Latin-1 from a file) would make the file unreadable to a strict parser, so it becomes
      // U+FFFD, the replacement character, as a decoder shows it.
      const size_t n = utf8_sequence(s.substr(i));
      if (n == 0) {
        out += "\\ufffd";
        ++i;
        continue;
      }
      out.append(s.substr(i, n));
      i += n;
      continue;
    } else {
      out += ch;
    }
    ++i;
  }
  out += '"';
  return out;
}

// ---- TraceArgs ----

void TraceArgs::append_key(std::string_view key) {
  // HTA takes the first "rank": N in the file as the file's rank; an args key could shadow it
  // in a file without distributedInfo, and would confuse anyone grepping ours.
  if (key == "rank") throw std::invalid_argument("trace args must not use the key \"rank\"");
  if (!body_.empty()) body_ += ", ";
  body_ += json_string(key);
  body_ += ": ";
}

TraceArgs& TraceArgs::add(std::string_view key, int64_t v) {
  append_key(key);
  append_int(body_, v);
  return *this;
}

TraceArgs& TraceArgs::add(std::string_view key, double v) {
  // Whole numbers (bytes, FLOPs) are written exactly, as integers, up to 2^53.
  if (std::abs(v) < 9007199254740992.0 && v == std::floor(v)) return add(key, static_cast<int64_t>(v));
  append_key(key);
  if (!std::isfinite(v)) {
    body_ += "null";  // JSON has no nan or inf
    return *this;
  }
  // to_chars is locale-independent (printf's %g is not) and gives %.6g's digits.
  char buf[32];
  body_.append(buf, std::to_chars(buf, buf + sizeof buf, v, std::chars_format::general, 6).ptr);
  return *this;
}

TraceArgs& TraceArgs::add(std::string_view key, std::string_view v) {
  append_key(key);
  body_ += json_string(v);
  return *this;
}

TraceArgs& TraceArgs::add(std::string_view key, std::span<const int> list) {
  append_key(key);
  body_ += '[';
  for (size_t i = 0; i < list.size(); ++i) {
    if (i) body_ += ", ";
    append_int(body_, list[i]);
  }
  body_ += ']';
  return *this;
}

// ---- TraceRecorder ----

TraceRecorder::TraceRecorder(int rank, int world_size, int device_index)
    : rank_(rank), world_size_(world_size), device_index_(device_index) {
  timeline_.rank = rank;
}

void TraceRecorder::emit(std::string line) { events_.push_back(std::move(line)); }

std::string TraceRecorder::complete(int pid, int tid, std::string_view cat, std::string_view name, int64_t ts,
                                    int64_t dur, const std::string& args) const {
  std::string line = "{\"ph\": \"X\", \"cat\": " + json_string(cat) + ", \"name\": " + json_string(name) +
                     ", \"pid\": ";
  append_int(line, pid);
  line += ", \"tid\": ";
  append_int(line, tid);
  line += ", \"ts\": " + format_us(ts) + ", \"dur\": " + format_us(dur);
  if (!args.empty()) line += ", \"args\": {" + args + "}";
  line += '}';
  return line;
}

void TraceRecorder::metadata(std::string_view what, int pid, int tid, const TraceArgs& args) {
  std::string line = "{\"ph\": \"M\", \"name\": " + json_string(what) + ", \"pid\": ";
  append_int(line, pid);
  line += ", \"tid\": ";
  append_int(line, tid);
  line += ", \"ts\": 0.000, \"args\": {" + args.json() + "}}";
  meta_.push_back(std::move(line));
}

void TraceRecorder::name_host(std::string_view process_name) {
  const int pid = host_pid(rank_);
  // Sort indices interleave the ranks' lanes: rank 0 CPU, rank 0 GPU, rank 1 CPU, ...
  metadata("process_name", pid, 0, TraceArgs().add("name", process_name));
  metadata("process_sort_index", pid, 0, TraceArgs().add("sort_index", rank_ * 2));
  metadata("thread_name", pid, kHostTid, TraceArgs().add("name", "CPU thread"));
  metadata("thread_sort_index", pid, kHostTid, TraceArgs().add("sort_index", kHostTid));
}

void TraceRecorder::name_device(std::string_view process_name) {
  metadata("process_name", device_index_, 0, TraceArgs().add("name", process_name));
  metadata("process_sort_index", device_index_, 0, TraceArgs().add("sort_index", rank_ * 2 + 1));
}

void TraceRecorder::name_stream(int stream_id, std::string_view name) {
  metadata("thread_name", device_index_, stream_id, TraceArgs().add("name", name));
  metadata("thread_sort_index", device_index_, stream_id, TraceArgs().add("sort_index", stream_id));
}

void TraceRecorder::cpu_op(std::string_view name, int64_t ts_ns, int64_t dur_ns, const TraceArgs& args) {
  emit(complete(host_pid(rank_), kHostTid, "cpu_op", name, ts_ns, dur_ns, args.json()));
}

void TraceRecorder::annotation(std::string_view name, int64_t ts_ns, int64_t dur_ns) {
  emit(complete(host_pid(rank_), kHostTid, "user_annotation", name, ts_ns, dur_ns, {}));
}

void TraceRecorder::step(int step, int64_t ts_ns, int64_t dur_ns) {
  annotation("ProfilerStep#" + std::to_string(step), ts_ns, dur_ns);
  timeline_.steps.push_back({step, to_us(ts_ns), to_us(ts_ns + dur_ns)});
}

uint64_t TraceRecorder::runtime_call(std::string_view name, int64_t ts_ns, int64_t dur_ns, bool flow) {
  if (next_correlation_ >= kCorrelationsPerRank)
    throw std::overflow_error("trace: rank " + std::to_string(rank_) + " ran out of correlation ids");
  const uint64_t correlation = static_cast<uint64_t>(rank_) * kCorrelationsPerRank + next_correlation_++;
  const int pid = host_pid(rank_);
  emit(complete(pid, kHostTid, "cuda_runtime", name, ts_ns, dur_ns,
                TraceArgs().add("correlation", correlation).json()));
  if (flow) emit(flow_event('s', pid, kHostTid, correlation, ts_ns));
  return correlation;
}

std::string TraceRecorder::flow_event(char ph, int pid, int tid, uint64_t id, int64_t ts_ns) {
  std::string line = "{\"ph\": \"";
  line += ph;
  line += "\", \"id\": " + std::to_string(id) + ", \"pid\": ";
  append_int(line, pid);
  line += ", \"tid\": ";
  append_int(line, tid);
  line += ", \"ts\": " + format_us(ts_ns) + ", \"cat\": \"ac2g\", \"name\": \"ac2g\"";
  // "bp": "e" binds the end to the slice enclosing ts, so ts must be a slice's start.
  line += ph == 'f' ? ", \"bp\": \"e\"}" : "}";
  return line;
}

void TraceRecorder::flow_end(int stream, uint64_t correlation, int64_t ts_ns) {
  emit(flow_event('f', device_index_, stream, correlation, ts_ns));
}

TraceArgs TraceRecorder::device_args(int stream, uint64_t correlation) const {
  TraceArgs args;
  args.add("device", device_index_).add("stream", stream);
  if (correlation != 0) args.add("correlation", correlation);
  return args;
}

void TraceRecorder::device_slice(int stream, std::string_view cat, std::string_view name, int64_t ts_ns,
                                 int64_t dur_ns, const TraceArgs& args, SliceKind kind, int32_t collective) {
  emit(complete(device_index_, stream, cat, name, ts_ns, dur_ns, args.json()));
  timeline_.slices.push_back({to_us(ts_ns), to_us(ts_ns + dur_ns), stream, kind, collective});
}

void TraceRecorder::kernel(int stream, std::string_view name, int64_t ts_ns, int64_t dur_ns, uint64_t correlation,
                           double flops, double bytes) {
  // HTA, and our metrics, tell communication kernels by their nccl prefix.
  const SliceKind kind = name.starts_with("nccl") ? SliceKind::comm : SliceKind::compute;
  total_flops_ += flops;
  device_slice(stream, "kernel", name, ts_ns, dur_ns,
               device_args(stream, correlation).add("bytes", bytes).add("flops", flops), kind);
  extend_gpu_ranges(stream, correlation, ts_ns, ts_ns + dur_ns);
  if (correlation != 0) flow_end(stream, correlation, ts_ns);
}

void TraceRecorder::memcpy(int stream, std::string_view name, int64_t ts_ns, int64_t dur_ns, uint64_t correlation,
                           double bytes) {
  device_slice(stream, "gpu_memcpy", name, ts_ns, dur_ns, device_args(stream, correlation).add("bytes", bytes),
               SliceKind::memcpy);
  extend_gpu_ranges(stream, correlation, ts_ns, ts_ns + dur_ns);
  if (correlation != 0) flow_end(stream, correlation, ts_ns);
}

void TraceRecorder::memset(int stream, std::string_view name, int64_t ts_ns, int64_t dur_ns, uint64_t correlation,
                           double bytes) {
  device_slice(stream, "gpu_memset", name, ts_ns, dur_ns, device_args(stream, correlation).add("bytes", bytes),
               SliceKind::memset);
  extend_gpu_ranges(stream, correlation, ts_ns, ts_ns + dur_ns);
  if (correlation != 0) flow_end(stream, correlation, ts_ns);
}

void TraceRecorder::collective(int stream, const CollectiveArgs& c, int64_t wait_start_ns, int64_t start_ns,
                               int64_t end_ns, uint64_t correlation) {
  const auto index = static_cast<int32_t>(timeline_.collectives.size());
  timeline_.collectives.push_back({c.name, c.in_nelems, c.out_nelems, c.dtype_bytes, c.group_size, c.group_name,
                                   c.seq, to_us(start_ns), to_us(end_ns), c.link, c.link_tier});
  const bool waits = wait_start_ns < start_ns;
  if (waits) {
    // Named nccl... too: on a real GPU the wait happens inside the NCCL kernel. The correlation
    // stays on the data kernel alone, since HTA expects one kernel per correlation.
    device_slice(stream, "kernel", "nccl:wait " + c.name, wait_start_ns, start_ns - wait_start_ns,
                 device_args(stream, 0).add("Collective name", c.name).add("Seq", c.seq), SliceKind::comm_wait,
                 index);
  }
  TraceArgs args = device_args(stream, correlation);
  args.add("Collective name", c.name)
      .add("In msg nelems", c.in_nelems)
      .add("Out msg nelems", c.out_nelems)
      .add("Group size", c.group_size)
      .add("dtype", c.dtype)
      .add("Process Group Name", c.group_name)
      .add("Process Group Ranks", std::span<const int>(c.group_ranks))
      .add("Seq", c.seq)
      .add("Link", c.link)
      .add("Link tier", link_tier_name(c.link_tier));
  device_slice(stream, "kernel", c.kernel_name, start_ns, end_ns - start_ns, args, SliceKind::comm, index);
  extend_gpu_ranges(stream, correlation, waits ? wait_start_ns : start_ns, end_ns);
  // The launch's arrow lands where the stream first became busy with it.
  if (correlation != 0) flow_end(stream, correlation, waits ? wait_start_ns : start_ns);
}

uint64_t TraceRecorder::open_gpu_range(int stream, std::string_view name) {
  // The launches to come: correlations after the last one handed out, with no end yet.
  const uint64_t last = static_cast<uint64_t>(rank_) * kCorrelationsPerRank + next_correlation_ - 1;
  gpu_ranges_.push_back({next_gpu_range_, stream, std::string(name), last, UINT64_MAX});
  return next_gpu_range_++;
}

void TraceRecorder::close_gpu_range(uint64_t id) {
  for (GpuRange& r : gpu_ranges_)
    if (r.id == id) {
      r.through = static_cast<uint64_t>(rank_) * kCorrelationsPerRank + next_correlation_ - 1;
      r.closed = true;
    }
}

void TraceRecorder::extend_gpu_ranges(int stream, uint64_t correlation, int64_t ts_ns, int64_t end_ns) {
  if (correlation == 0) return;
  std::erase_if(gpu_ranges_, [&](GpuRange& r) {
    if (r.stream != stream || correlation <= r.after) return false;
    if (correlation <= r.through) {
      r.start_ns = std::min(r.start_ns, ts_ns);
      r.end_ns = std::max(r.end_ns, end_ns);
      return false;
    }
    // A later launch on the same stream: every slice of the range has landed (streams run in order).
    if (!r.closed) return false;
    write_gpu_range(r);
    return true;
  });
}

void TraceRecorder::write_gpu_ranges() {
  std::erase_if(gpu_ranges_, [&](const GpuRange& r) {
    if (!r.closed) return false;
    write_gpu_range(r);
    return true;
  });
}

void TraceRecorder::write_gpu_range(const GpuRange& r) {
  if (r.end_ns < r.start_ns) return;  // no slice landed in it
  emit(complete(device_index_, r.stream, "gpu_user_annotation", r.name, r.start_ns, r.end_ns - r.start_ns,
                device_args(r.stream, 0).json()));
  timeline_.stream_ranges.push_back({r.name, r.stream, to_us(r.start_ns), to_us(r.end_ns)});
}

void TraceRecorder::memory(int64_t ts_ns, int64_t allocated, int64_t reserved) {
  std::string line = "{\"ph\": \"C\", \"name\": \"GPU memory\", \"pid\": ";
  append_int(line, device_index_);
  line += ", \"ts\": " + format_us(ts_ns) + ", \"args\": {" +
          TraceArgs().add("allocated", allocated).add("reserved", reserved).json() + "}}";
  emit(std::move(line));
  timeline_.memory.push_back({to_us(ts_ns), allocated, reserved});
}

void TraceRecorder::allocator_event(AllocatorEventKind kind, int64_t ts_ns, const TraceArgs& args) {
  std::string line = "{\"ph\": \"i\", \"s\": \"p\", \"cat\": \"allocator\", \"name\": " +
                     json_string(allocator_event_name(kind)) + ", \"pid\": ";
  append_int(line, device_index_);
  line += ", \"ts\": " + format_us(ts_ns);
  if (!args.empty()) line += ", \"args\": {" + args.json() + "}";
  line += '}';
  emit(std::move(line));
  timeline_.allocator.push_back({to_us(ts_ns), kind});
}

void TraceRecorder::instant(std::string_view name, int64_t ts_ns, const TraceArgs& args) {
  std::string line = "{\"ph\": \"i\", \"s\": \"t\", \"cat\": \"shardlab\", \"name\": " + json_string(name) +
                     ", \"pid\": ";
  append_int(line, host_pid(rank_));
  line += ", \"tid\": ";
  append_int(line, kHostTid);
  line += ", \"ts\": " + format_us(ts_ns);
  if (!args.empty()) line += ", \"args\": {" + args.json() + "}";
  line += '}';
  emit(std::move(line));
}

std::string TraceRecorder::header(std::string_view backend, int64_t base_time_ns,
                                  const nlohmann::json& device_properties, const nlohmann::json& other_data) const {
  std::string out = "{\"distributedInfo\": {\"backend\": " + json_string(backend) + ", \"rank\": ";
  append_int(out, rank_);
  out += ", \"world_size\": ";
  append_int(out, world_size_);
  out += "},\n \"schemaVersion\": 1,\n \"displayTimeUnit\": \"ns\",\n \"baseTimeNanoseconds\": ";
  append_int(out, base_time_ns);
  // Strings in the header come from configuration (a profile's GPU name, a run name): a byte
  // that is not UTF-8 becomes U+FFFD, as json_string does, instead of failing the whole write.
  constexpr auto kReplace = nlohmann::json::error_handler_t::replace;
  out += ",\n \"deviceProperties\": " + device_properties.dump(-1, ' ', false, kReplace) +
         ",\n \"otherData\": " + other_data.dump(-1, ' ', false, kReplace) + ",\n \"traceEvents\": [\n";
  return out;
}

namespace {

void create_parent(const std::filesystem::path& file) {
  if (!file.has_parent_path()) return;
  std::error_code ec;
  std::filesystem::create_directories(file.parent_path(), ec);
  if (ec) throw std::runtime_error("trace: cannot create the directory for " + file.string() + ": " + ec.message());
}

}  // namespace

void TraceRecorder::write(const std::string& path, std::string_view backend, int64_t base_time_ns,
                          const nlohmann::json& device_properties, const nlohmann::json& other_data) {
  stream_.reset();  // the stream's file stays as it is until the rename below replaces it
  write_gpu_ranges();
  std::string out = header(backend, base_time_ns, device_properties, other_data);
  size_t body = 0;
  for (const auto* lines : {&meta_, &events_})
    for (const std::string& line : *lines) body += line.size() + 2;
  out.reserve(out.size() + body + 4);
  bool first = true;
  for (const auto* lines : {&meta_, &events_}) {
    for (const std::string& line : *lines) {
      if (!first) out += ",\n";
      out += line;
      first = false;
    }
  }
  out += "\n]}\n";
  create_parent(path);
  write_whole_file(path, out);
}

void TraceRecorder::begin_stream(const std::string& path, std::string_view backend, int64_t base_time_ns,
                                 const nlohmann::json& device_properties, const nlohmann::json& other_data) {
  create_parent(path);
  stream_.reset();
  stream_ = std::make_unique<GrowingFile>(path, header(backend, base_time_ns, device_properties, other_data));
  streamed_meta_ = streamed_events_ = 0;
  flush_stream();
}

void TraceRecorder::flush_stream() {
  if (!stream_) return;
  write_gpu_ranges();
  // Metadata and events interleave here in the order they were recorded; readers do not mind
  // (write() puts the metadata first). Each event is preceded by its separator, so the file
  // ends after a whole event whenever an append finished.
  std::string out;
  const auto take = [&](const std::vector<std::string>& lines, size_t& done) {
    for (; done < lines.size(); ++done) {
      if (streamed_meta_ + streamed_events_ > 0) out += ",\n";  // none before the file's first event
      out += lines[done];
    }
  };
  take(meta_, streamed_meta_);
  take(events_, streamed_events_);
  if (out.empty()) return;
  try {
    stream_->append(out);
  } catch (...) {
    stream_.reset();
    throw;
  }
}

}  // namespace shardlab
