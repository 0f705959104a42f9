// fuzz_trace_loader: a libFuzzer target for the viewer's trace loader (viewer/trace_model.h).
//
// Each input is written to a scratch file (the loader reads files: a .json path, or .json.gz when
// the input starts with gzip's magic bytes) and loaded twice: with the default LoadLimits, and
// with caps small enough for the fuzzer to reach (16-byte names, 3 events, 1 KiB: the cut-short
// paths). The input must either load into a model
// that holds together (every index in range, slices sorted and nested) or throw
// std::runtime_error naming the file; anything else (a crash, a sanitizer report, another
// exception, a broken model) is a finding.
//
// Built and run by tests/viewer/run_fuzz.sh (clang++ -fsanitize=fuzzer,address,undefined), which ctest
// runs as "viewer: fuzz the trace loader"; crashing inputs found so far are regression cases in
// tests/viewer/viewer_test_model.cpp.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include "trace/metrics.h"
#include "trace_model.h"

namespace {

using namespace shardlab::viewer;

[[noreturn]] void broken(const char* what) {
  std::fprintf(stderr, "fuzz_trace_loader: broken model: %s\n", what);
  std::abort();
}

#define EXPECT(cond) \
  do {               \
    if (!(cond)) broken(#cond); \
  } while (0)

// Whatever the input, a loaded model must be safe to draw.
void check(const TraceModel& m) {
  EXPECT(!m.args_json.empty() && m.args_json[0].empty());
  size_t events = 0, skipped = 0;
  for (const Rank& r : m.ranks) {
    skipped += r.skipped;
    for (const Lane& l : r.lanes) {
      events += l.slices.size();
      for (size_t i = 0; i < l.slices.size(); ++i) {
        const Slice& s = l.slices[i];
        EXPECT(s.name < m.names.size());
        EXPECT(s.args < m.args_json.size());
        EXPECT(s.depth <= l.max_depth);
        EXPECT(s.depth <= kMaxDepth);
        EXPECT(m.names[s.name].size() <= m.limits.max_name_bytes + 32);  // cut, with "... (N bytes)"
        EXPECT(s.start_us <= s.end_us);
        EXPECT(s.start_us >= m.start_us && s.end_us <= m.end_us);
        if (i > 0) EXPECT(l.slices[i - 1].start_us <= s.start_us);
      }
    }
    for (const Flow& f : r.flows) {
      EXPECT(f.from_lane >= 0 && static_cast<size_t>(f.from_lane) < r.lanes.size());
      EXPECT(f.to_lane >= 0 && static_cast<size_t>(f.to_lane) < r.lanes.size());
      EXPECT(f.from_slice < static_cast<int64_t>(r.lanes[static_cast<size_t>(f.from_lane)].slices.size()));
      EXPECT(f.to_slice < static_cast<int64_t>(r.lanes[static_cast<size_t>(f.to_lane)].slices.size()));
    }
    for (const Counter& c : r.counters)
      for (size_t i = 1; i < c.samples.size(); ++i) EXPECT(c.samples[i - 1].first <= c.samples[i].first);
    for (const shardlab::DeviceSlice& s : r.timeline.slices)
      EXPECT(s.collective < static_cast<int32_t>(r.timeline.collectives.size()));
    for (size_t i = 1; i < r.timeline.steps.size(); ++i)
      EXPECT(r.timeline.steps[i - 1].step <= r.timeline.steps[i].step);
    // What the viewer computes from a timeline (the sanitizers watch it too).
    for (const shardlab::StepMetrics& s : shardlab::step_metrics(r.timeline)) EXPECT(s.step_us >= 0);
    for (const shardlab::CollectiveMetrics& c : shardlab::collective_metrics(r.timeline)) EXPECT(c.bytes >= 0);
  }
  EXPECT(events == m.events);
  EXPECT(skipped == m.skipped);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::filesystem::path dir = [] {
    const auto d = std::filesystem::temp_directory_path() / ("shardlab_fuzz_" + std::to_string(getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  const bool gz = size >= 2 && data[0] == 0x1f && data[1] == 0x8b;
  const std::string path = (dir / (gz ? "input.json.gz" : "input.json")).string();
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  LoadLimits tight;
  tight.max_name_bytes = 16;
  tight.max_events = 3;
  tight.max_file_bytes = 1024;
  for (const LoadLimits& limits : {LoadLimits{}, tight}) {
    try {
      const TraceModel m = load_traces({path}, {}, limits);
      check(m);
      EXPECT(m.events <= limits.max_events);
    } catch (const LoadCancelled&) {
      broken("cancelled without a progress callback");
    } catch (const std::runtime_error& e) {
      // A clear message naming the file.
      if (std::string(e.what()).find(path) == std::string::npos) {
        std::fprintf(stderr, "fuzz_trace_loader: error without the file's name: %s\n", e.what());
        std::abort();
      }
    }
  }
  std::filesystem::remove(path);
  return 0;
}
