// Viewer model: the loader reads the committed reference traces into lanes, nested slices, flows
// and counters, and its RankTimeline gives exactly the run summary's figures (the viewer and
// summary.json agree). Hostile files load leniently or fail with the file named, never crash.
#include <catch2/catch.hpp>

#include "../unit/test_files.h"
#include "viewer_files.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <string>


#include <nlohmann/json.hpp>

#include "trace/metrics.h"
#include "trace/trace.h"
#include "trace_model.h"

using namespace shardlab;
using namespace shardlab::viewer;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const fs::path kTraces = fs::path(SHARDLAB_SOURCE_DIR) / "traces";
const char* const kRuns[] = {"00_streams_events", "01_ring_allreduce", "02_naive_ddp", "03_bucketed_ddp", "04_fsdp"};

// "r3.json.gz": appended piecewise, since GCC 12 warns (-Wrestrict, a false positive) on
// "r" + std::string.
std::string gz_name(int rank) {
  std::string name = "r";
  name += std::to_string(rank);
  name += ".json.gz";
  return name;
}

// Every lane's slices: sorted by start, and no two at the same depth overlap.
void check_nesting(const Rank& r) {
  for (const Lane& l : r.lanes) {
    INFO("rank " << r.rank << " lane " << l.name);
    std::map<uint16_t, double> last_end;  // depth -> end of the last slice seen there
    for (size_t i = 0; i < l.slices.size(); ++i) {
      const Slice& s = l.slices[i];
      if (i > 0) REQUIRE(l.slices[i - 1].start_us <= s.start_us);
      REQUIRE(s.depth <= l.max_depth);
      const auto it = last_end.find(s.depth);
      if (it != last_end.end()) REQUIRE(it->second <= s.start_us + 1e-4);
      last_end[s.depth] = s.end_us;
    }
  }
}

// The summary's figures for one run, from the loaded timelines.
void check_against_summary(const TraceModel& m, const json& summary) {
  REQUIRE(m.ranks.size() == summary["ranks"].size());
  for (size_t r = 0; r < m.ranks.size(); ++r) {
    const Rank& rank = m.ranks[r];
    const json& want = summary["ranks"][r];
    INFO("rank " << r);
    REQUIRE(rank.rank == want["rank"].get<int>());
    const auto steps = step_metrics(rank.timeline);
    REQUIRE(steps.size() == want["steps"].size());
    for (size_t k = 0; k < steps.size(); ++k) {
      const json& w = want["steps"][k];
      INFO("step " << k);
      CHECK(steps[k].step == w["step"].get<int>());
      CHECK(steps[k].step_us == Approx(w["step_us"].get<double>()).margin(1e-3));
      CHECK(steps[k].compute_us == Approx(w["compute_us"].get<double>()).margin(1e-3));
      CHECK(steps[k].comm_us == Approx(w["comm_us"].get<double>()).margin(1e-3));
      CHECK(steps[k].overlap_us == Approx(w["overlap_us"].get<double>()).margin(1e-3));
      CHECK(steps[k].exposed_comm_us == Approx(w["exposed_comm_us"].get<double>()).margin(1e-3));
      CHECK(steps[k].comm_wait_us == Approx(w["comm_wait_us"].get<double>()).margin(1e-3));
      CHECK(steps[k].memcpy_us == Approx(w["memcpy_us"].get<double>()).margin(1e-3));
      CHECK(steps[k].idle_us == Approx(w["idle_us"].get<double>()).margin(1e-3));
      CHECK(steps[k].peak_allocated == w["peak_allocated_bytes"].get<int64_t>());
      CHECK(steps[k].peak_reserved == w["peak_reserved_bytes"].get<int64_t>());
      CHECK(steps[k].segment_mallocs == w["segment_mallocs"].get<int64_t>());
      CHECK(steps[k].segment_frees == w["segment_frees"].get<int64_t>());
      CHECK(steps[k].alloc_retries == w["alloc_retries"].get<int64_t>());
      CHECK(steps[k].ooms == w["ooms"].get<int64_t>());
      CHECK(steps[k].intra_node_bytes == w["intra_node_bytes"].get<int64_t>());
      CHECK(steps[k].network_bytes == w["network_bytes"].get<int64_t>());
    }
    const auto colls = collective_metrics(rank.timeline);
    REQUIRE(colls.size() == want["collectives"].size());
    for (size_t c = 0; c < colls.size(); ++c) {
      const json& w = want["collectives"][c];
      INFO("collective " << c);
      CHECK(colls[c].name == w["name"].get<std::string>());
      CHECK(colls[c].bytes == w["bytes"].get<int64_t>());
      CHECK(colls[c].group_size == w["group_size"].get<int>());
      CHECK(colls[c].step == w["step"].get<int>());
      CHECK(colls[c].time_us == Approx(w["time_us"].get<double>()).margin(1e-3));
      CHECK(link_tier_name(colls[c].link_tier) == w["link_tier"].get<std::string>());
      CHECK(colls[c].link_bytes == w["link_bytes"].get<int64_t>());
    }
  }
}

// The same content, whatever the container: counts and figures.
void check_same(const TraceModel& a, const TraceModel& b) {
  REQUIRE(a.ranks.size() == b.ranks.size());
  CHECK(a.events == b.events);
  CHECK(a.start_us == b.start_us);
  CHECK(a.end_us == b.end_us);
  for (size_t r = 0; r < a.ranks.size(); ++r) {
    REQUIRE(a.ranks[r].lanes.size() == b.ranks[r].lanes.size());
    for (size_t l = 0; l < a.ranks[r].lanes.size(); ++l) {
      const Lane& x = a.ranks[r].lanes[l];
      const Lane& y = b.ranks[r].lanes[l];
      CHECK(x.name == y.name);
      REQUIRE(x.slices.size() == y.slices.size());
      for (size_t i = 0; i < x.slices.size(); ++i) {
        CHECK(a.names[x.slices[i].name] == b.names[y.slices[i].name]);
        CHECK(a.args_json[x.slices[i].args] == b.args_json[y.slices[i].args]);
        CHECK(x.slices[i].depth == y.slices[i].depth);
      }
    }
    CHECK(a.ranks[r].flows.size() == b.ranks[r].flows.size());
    CHECK(a.ranks[r].counters.size() == b.ranks[r].counters.size());
  }
}

// Loads one file: the error message if it throws, "" if it loads.
std::string load_error(const fs::path& p) {
  try {
    load_traces({p.string()});
    return "";
  } catch (const std::runtime_error& e) {
    return e.what();
  }
}

const std::string kHeader = "{\"distributedInfo\": {\"rank\": 0, \"world_size\": 1}, \"traceEvents\": [";
const std::string kGoodEvent =
    "{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"gemm\", \"pid\": 0, \"tid\": 7, \"ts\": 1.0, \"dur\": 2.0}";

}  // namespace

TEST_CASE("model: loads the reference traces and agrees with their summaries", "[viewer]") {
  for (const char* run : kRuns) {
    INFO("run " << run);
    const fs::path dir = kTraces / run;
    const json summary = json::parse(read_text(dir / "summary.json"));
    size_t calls = 0;
    const TraceModel m = load_traces({dir.string()}, [&](size_t done, size_t total) {
      ++calls;
      CHECK(done <= total);
      return true;
    });
    CHECK(calls >= 1);
    REQUIRE(m.ranks.size() == summary["world_size"].get<size_t>());
    CHECK(m.start_us < m.end_us);
    CHECK(m.args_json.at(0).empty());
    CHECK(m.skipped == 0);

    size_t slices = 0;
    for (const Rank& r : m.ranks) {
      INFO("rank " << r.rank);
      CHECK(r.file == (dir / ("rank" + std::to_string(r.rank) + ".json")).string());
      const json file = json::parse(read_text(r.file));
      size_t x_events = 0, flow_starts = 0, counters = 0, device_events = 0, allocator_marks = 0;
      std::map<int, std::string> stream_names;
      for (const json& e : file["traceEvents"]) {
        const std::string ph = e["ph"];
        if (ph == "X") {
          ++x_events;
          const std::string cat = e["cat"];
          if (cat == "kernel" || cat == "gpu_memcpy" || cat == "gpu_memset") ++device_events;
        }
        if (ph == "i" && e.value("cat", "") == "allocator") ++allocator_marks;  // marks of the memory lane
        else if (ph == "i") ++x_events;                                        // kept as zero-length slices
        if (ph == "s") ++flow_starts;
        if (ph == "C") ++counters;
        if (ph == "M" && e["name"] == "thread_name" && e["pid"].get<int>() < 100000)
          stream_names[e["tid"].get<int>()] = e["args"]["name"];
      }
      size_t lane_slices = 0;
      for (const Lane& l : r.lanes) lane_slices += l.slices.size();
      CHECK(lane_slices == x_events);
      CHECK(r.timeline.slices.size() == device_events);
      CHECK(r.timeline.allocator.size() == allocator_marks);
      // ... and the same marks for the memory lane, each with its args for the tooltip.
      REQUIRE(r.allocator.size() == allocator_marks);
      for (const AllocatorMarker& a : r.allocator) CHECK(m.args_json[a.args].find("\"bytes\"") != std::string::npos);
      slices += lane_slices;

      // Lanes: the CPU thread first, then the device's streams in sort order, named by metadata.
      REQUIRE(r.lanes.size() >= 2);
      CHECK(r.lanes[0].name == "CPU thread");
      CHECK(r.lanes[0].process == "rank " + std::to_string(r.rank) + " CPU");
      CHECK(!r.lanes[0].device);
      CHECK(r.lanes[0].pid == 100000 + r.rank);
      for (size_t l = 1; l < r.lanes.size(); ++l) {
        const Lane& lane = r.lanes[l];
        CHECK(lane.device);
        CHECK(lane.pid < 100000);
        CHECK(lane.name == stream_names[lane.tid]);
        CHECK(lane.process.starts_with("rank " + std::to_string(r.rank) + " GPU"));
        if (l > 1) CHECK(r.lanes[l - 1].sort_index < lane.sort_index);
      }
      check_nesting(r);

      // Flows: every launch reaches its kernel, bound to slices with that correlation.
      CHECK(r.flows.size() == flow_starts);
      for (const Flow& f : r.flows) {
        REQUIRE(f.from_lane == 0);
        REQUIRE(f.to_lane > 0);
        REQUIRE(f.from_slice >= 0);
        REQUIRE(f.to_slice >= 0);
        const Slice& launch = r.lanes[0].slices[static_cast<size_t>(f.from_slice)];
        const Slice& kernel = r.lanes[static_cast<size_t>(f.to_lane)].slices[static_cast<size_t>(f.to_slice)];
        CHECK(launch.category == Category::runtime);
        CHECK(launch.correlation == f.id);
        // A collective that waited: the arrow lands on its wait, the correlation is the kernel's.
        if (kernel.category != Category::comm_wait) CHECK(kernel.correlation == f.id);
        CHECK(kernel.start_us == f.to_us);
      }

      // Counters: "GPU memory" as two series, one sample per C event each.
      REQUIRE(r.counters.size() == 2);
      CHECK(r.counters[0].name == "GPU memory allocated");
      CHECK(r.counters[1].name == "GPU memory reserved");
      CHECK(r.counters[0].samples.size() == counters);
      CHECK(r.timeline.memory.size() == counters);

      // Waits belong to the collective that follows them on their stream.
      for (const DeviceSlice& s : r.timeline.slices) {
        if (s.kind == SliceKind::comm || s.kind == SliceKind::comm_wait) {
          REQUIRE(s.collective >= 0);
          CHECK(r.timeline.collectives[static_cast<size_t>(s.collective)].start_us >= s.start_us);
        }
      }
    }
    CHECK(m.events == slices);
    check_against_summary(m, summary);
  }
}

namespace {

using Intervals = std::vector<std::pair<double, double>>;

// Time in [t0, t1) inside some interval of `a` and some interval of `b`: the window cut at every
// interval end, each piece tested against both lists. Quadratic, and unlike metrics.cpp's merge
// and sweep on purpose: an independent count.
double covered_by_both(const Intervals& a, const Intervals& b, double t0, double t1) {
  std::vector<double> cuts{t0, t1};
  for (const Intervals* list : {&a, &b})
    for (const auto& [start, end] : *list) {
      cuts.push_back(std::clamp(start, t0, t1));
      cuts.push_back(std::clamp(end, t0, t1));
    }
  std::sort(cuts.begin(), cuts.end());
  auto covers = [](const Intervals& list, double t) {
    return std::any_of(list.begin(), list.end(), [&](const auto& i) { return i.first <= t && t < i.second; });
  };
  double sum = 0;
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    const double mid = (cuts[i] + cuts[i + 1]) / 2;
    if (cuts[i] < cuts[i + 1] && covers(a, mid) && covers(b, mid)) sum += cuts[i + 1] - cuts[i];
  }
  return sum;
}

}  // namespace

// The Steps tab's memcpy and copy overlap columns (StepMetrics::memcpy_us, copy_overlap_us) on
// chapter 00, where a copy stream runs under the compute stream: recounted from the rank files.
TEST_CASE("model: chapter 00's copy overlap is its copies' time under compute kernels, as the files give it",
          "[viewer]") {
  const TraceModel m = load_traces({(kTraces / "00_streams_events").string()});
  REQUIRE(m.ranks.size() == 2);
  for (const Rank& r : m.ranks) {
    INFO("rank " << r.rank);
    Intervals kernels, copies;
    std::map<int, std::pair<double, double>> steps;
    const json file = json::parse(read_text(r.file));
    for (const json& e : file["traceEvents"]) {
      if (e["ph"] != "X") continue;
      const std::string cat = e["cat"], name = e["name"];
      const double ts = e["ts"], end = ts + e["dur"].get<double>();
      if (cat == "kernel" && !name.starts_with("nccl")) kernels.emplace_back(ts, end);
      if (cat == "gpu_memcpy" || cat == "gpu_memset") copies.emplace_back(ts, end);
      if (name.starts_with("ProfilerStep#")) steps[std::stoi(name.substr(13))] = {ts, end};
    }
    const auto metrics = step_metrics(r.timeline);
    REQUIRE(metrics.size() == steps.size());
    for (const StepMetrics& s : metrics) {
      INFO("step " << s.step);
      const auto [t0, t1] = steps.at(s.step);
      CHECK(s.memcpy_us == Approx(covered_by_both(copies, copies, t0, t1)).margin(1e-6));
      CHECK(s.copy_overlap_us == Approx(covered_by_both(kernels, copies, t0, t1)).margin(1e-6));
      CHECK(s.copy_overlap_us > 10);  // (b) copies on stream 8 under stream 7's kernels
      CHECK(s.copy_overlap_us < s.memcpy_us);  // (a) and (d) copy with the kernels waiting
    }
  }
}

// Copies under compute count, copies under communication do not, and a memset is a copy.
TEST_CASE("model: copy overlap counts copies and memsets under compute kernels only", "[viewer]") {
  TempDir tmp("shardlab_test_viewer");
  auto event = [](const char* cat, const char* name, int tid, double ts, double dur) {
    return "{\"ph\": \"X\", \"cat\": \"" + std::string(cat) + "\", \"name\": \"" + name +
           "\", \"pid\": 0, \"tid\": " + std::to_string(tid) + ", \"ts\": " + std::to_string(ts) +
           ", \"dur\": " + std::to_string(dur) + "}";
  };
  write_text(tmp.path / "t.json", kHeader + event("kernel", "gemm", 7, 0, 10) + ", " +
                                      event("kernel", "ncclDevKernel_AllReduce", 9, 20, 10) + ", " +
                                      event("gpu_memcpy", "Memcpy HtoD", 8, 6, 18) + ", " +
                                      event("gpu_memset", "Memset", 10, 2, 2) + "]}");
  const TraceModel m = load_traces({(tmp.path / "t.json").string()});
  const RangeMetrics r = range_metrics(m.ranks.at(0).timeline, 0, 40);
  CHECK(r.memcpy_us == Approx(20));       // [2, 4) and [6, 24)
  CHECK(r.copy_overlap_us == Approx(6));  // [2, 4) and [6, 10) under gemm; [20, 24) is under the all-reduce
  CHECK(r.overlap_us == Approx(0));
}

TEST_CASE("model: loads .json.gz and explicit files like the directory", "[viewer]") {
  TempDir tmp("shardlab_test_viewer");
  const fs::path dir = kTraces / "03_bucketed_ddp";
  std::vector<std::string> files;
  for (int r = 3; r >= 0; --r) {  // given out of order: ranks come from distributedInfo
    const fs::path gz = tmp.path / gz_name(r);
    write_gz(gz, read_text(dir / ("rank" + std::to_string(r) + ".json")));
    files.push_back(gz.string());
  }
  const TraceModel plain = load_traces({dir.string()});
  const TraceModel gz = load_traces(files);
  check_same(plain, gz);
  check_against_summary(gz, json::parse(read_text(dir / "summary.json")));

  // A directory of rank<R>.json.gz files.
  const fs::path gzdir = tmp.path / "run";
  fs::create_directories(gzdir);
  for (int r = 0; r < 4; ++r)
    fs::copy_file(tmp.path / gz_name(r), gzdir / ("rank" + std::to_string(r) + ".json.gz"));
  write_text(gzdir / "notes.txt", "not a trace");
  check_same(plain, load_traces({gzdir.string()}));

  // The same rank twice: the second file is not opened, and says which file has that rank.
  const std::string f0 = (dir / "rank0.json").string();
  const TraceModel twice = load_traces({f0, f0});
  CHECK(twice.ranks.size() == 1);
  REQUIRE(twice.not_opened.size() == 1);
  CHECK_THAT(twice.not_opened[0].why, Catch::Contains("rank 0") && Catch::Contains("rank0.json"));
}

TEST_CASE("model: progress reports and cancels", "[viewer]") {
  const fs::path dir = kTraces / "01_ring_allreduce";
  size_t last_done = 0, last_total = 0;
  load_traces({dir.string()}, [&](size_t done, size_t total) {
    CHECK(done >= last_done);
    last_done = done;
    last_total = total;
    return true;
  });
  size_t size = 0;  // every .json file in it is read: the rank files and summary.json (not a trace)
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().extension() == ".json") size += fs::file_size(entry.path());
  CHECK(last_total == size);
  CHECK(last_done == size);
  CHECK_THROWS_AS(load_traces({dir.string()}, [](size_t, size_t) { return false; }), LoadCancelled);
}

TEST_CASE("model: refuses broken files with the file named, never crashes", "[viewer]") {
  TempDir tmp("shardlab_test_viewer");
  const std::string full = kHeader + kGoodEvent + "]}";
  struct Case {
    const char* name;
    std::string text;
    const char* error;  // a fragment of the message; nullptr: loads
  };
  const std::string deep = [] {
    std::string args;
    for (int i = 0; i < 200; ++i) args += "{\"a\": ";
    args += "1";
    for (int i = 0; i < 200; ++i) args += "}";
    return kHeader + "{\"ph\": \"X\", \"name\": \"n\", \"pid\": 0, \"tid\": 0, \"ts\": 1, \"dur\": 1, \"args\": " +
           args + "}]}";
  }();
  const Case cases[] = {
      {"empty", "", "empty file"},
      {"array", "[]", "not an object"},
      {"object", "{}", "no traceEvents"},
      {"truncated", full.substr(0, kHeader.size() - 20), "truncated"},  // cut before its events: no trace
      {"not_json", "this is not JSON", "not valid JSON"},
      {"trailing", full + " garbage", "not valid JSON"},
      {"events_string", "{\"traceEvents\": \"oops\"}", "traceEvents is not an array"},
      {"events_object", "{\"traceEvents\": {}}", "traceEvents is an object"},
      {"event_number", kHeader + "5]}", "event 0 is not an object"},
      {"event_array", kHeader + kGoodEvent + ", []]}", "event 1 is an array"},
      {"ts_string", kHeader + "{\"ph\": \"X\", \"name\": \"n\", \"pid\": 0, \"tid\": 0, \"ts\": \"1\", \"dur\": 1}]}",
       "event 0: ts is not a number"},
      {"ph_number", kHeader + "{\"ph\": 88, \"name\": \"n\", \"pid\": 0, \"tid\": 0, \"ts\": 1, \"dur\": 1}]}",
       "ph is not a string"},
      {"dur_object", kHeader + "{\"ph\": \"X\", \"name\": \"n\", \"pid\": 0, \"tid\": 0, \"ts\": 1, \"dur\": {}}]}",
       "dur is not a number"},
      {"deep_args", deep, "nested more than 64 levels"},
      {"ts_overflow", kHeader + "{\"ph\": \"X\", \"name\": \"n\", \"pid\": 0, \"tid\": 0, \"ts\": 1e999}]}",
       "number overflow"},
      {"bad_utf8", kHeader + "{\"ph\": \"X\", \"name\": \"\xff\xfe\", \"pid\": 0, \"tid\": 0, \"ts\": 1}]}",
       "not valid JSON"},
      // Lenient: the bad event is skipped (counted), the rest loads.
      {"pid_object", kHeader + kGoodEvent + ", {\"ph\": \"X\", \"name\": \"n\", \"pid\": {}, \"tid\": 0, \"ts\": 1}]}",
       nullptr},
      {"tid_bool", kHeader + kGoodEvent + ", {\"ph\": \"X\", \"name\": \"n\", \"pid\": 0, \"tid\": true, \"ts\": 1}]}",
       nullptr},
      {"dur_negative", kHeader + kGoodEvent + ", {\"ph\": \"X\", \"name\": \"n\", \"pid\": 0, \"tid\": 0, \"ts\": 1, \"dur\": -5}]}",
       nullptr},
      {"ts_huge", kHeader + kGoodEvent + ", {\"ph\": \"X\", \"name\": \"n\", \"pid\": 0, \"tid\": 0, \"ts\": 1e308, \"dur\": 1e308}]}",
       nullptr},

      {"no_ts", kHeader + kGoodEvent + ", {\"ph\": \"X\", \"name\": \"n\", \"pid\": 0, \"tid\": 0}]}", nullptr},
      {"unmatched_e", kHeader + kGoodEvent + ", {\"ph\": \"E\", \"pid\": 0, \"tid\": 0, \"ts\": 5}]}", nullptr},
  };
  for (const Case& c : cases) {
    INFO("case " << c.name);
    const fs::path p = tmp.path / (std::string(c.name) + ".json");
    write_text(p, c.text);
    const std::string err = load_error(p);
    if (c.error) {
      CHECK_THAT(err, Catch::Contains(p.string()) && Catch::Contains(c.error));
    } else {
      REQUIRE(err.empty());
      const TraceModel m = load_traces({p.string()});
      REQUIRE(m.ranks.size() == 1);
      CHECK(m.events == 1);  // the good kernel alone
      CHECK(m.skipped == 1);
      CHECK(m.start_us == 1.0);
      CHECK(m.end_us == 3.0);
    }
  }

  // Unreadable: missing, a directory without trace files, a gzip cut before its JSON begins.
  CHECK_THROWS_WITH(load_traces({(tmp.path / "missing.json").string()}), Catch::Contains("missing.json"));
  const fs::path empty_dir = tmp.path / "empty";
  fs::create_directories(empty_dir);
  CHECK_THROWS_WITH(load_traces({empty_dir.string()}), Catch::Contains("empty") && Catch::Contains("no trace files"));
  const fs::path gz = tmp.path / "cut.json.gz";
  write_gz(gz, read_text(kTraces / "02_naive_ddp" / "rank0.json"));
  const std::string bytes = read_text(gz);
  write_text(gz, bytes.substr(0, 12));
  CHECK_THAT(load_error(gz), Catch::Contains("cut.json.gz") && Catch::Contains("truncated"));

  // Not files: a directory holding a trace, a link to nothing, a FIFO and a link to /dev/zero
  // (in any listing order) opens the trace and names the others; given alone, each is refused
  // at once (a FIFO would block a reader, /dev/zero never ends).
  const fs::path odd = tmp.path / "odd";
  fs::create_directories(odd);
  write_text(odd / "rank0.json", full);
  fs::create_symlink(odd / "gone.json", odd / "rank1.json");
  REQUIRE(mkfifo((odd / "rank2.json").c_str(), 0600) == 0);
  fs::create_symlink("/dev/zero", odd / "rank3.json");
  const TraceModel opened = load_traces({odd.string()});
  CHECK(opened.ranks.size() == 1);
  REQUIRE(opened.not_opened.size() == 3);
  for (const NotOpened& n : opened.not_opened) {
    INFO(n.file << ": " << n.why);
    if (n.file.ends_with("rank1.json")) CHECK_THAT(n.why, Catch::Contains("a link to nothing"));
    else if (n.file.ends_with("rank2.json")) CHECK_THAT(n.why, Catch::Contains("a FIFO"));
    else CHECK_THAT(n.why, Catch::Contains("a device"));
  }
  CHECK_THAT(load_error(odd / "rank2.json"), Catch::Contains("rank2.json") && Catch::Contains("a FIFO"));
  CHECK_THAT(load_error("/dev/zero"), Catch::Contains("/dev/zero") && Catch::Contains("a device"));

  // A 10 MB name loads, cut to the cap with its length after it, and counted; the cap is the
  // load's (--max-name-bytes).
  const fs::path big = tmp.path / "big_name.json";
  write_text(big, kHeader + "{\"ph\": \"X\", \"name\": \"" + std::string(10 << 20, 'x') +
                      "\", \"pid\": 0, \"tid\": 0, \"ts\": 1, \"dur\": 1}]}");
  const TraceModel m = load_traces({big.string()});
  REQUIRE(m.events == 1);
  CHECK(m.names[m.ranks[0].lanes[0].slices[0].name] ==
        std::string(LoadLimits{}.max_name_bytes, 'x') + "... (10485760 bytes)");
  CHECK(m.names_cut == 1);
  LoadLimits small;
  small.max_name_bytes = 100;
  const TraceModel capped = load_traces({big.string()}, {}, small);
  CHECK(capped.names[capped.ranks[0].lanes[0].slices[0].name] == std::string(100, 'x') + "... (10485760 bytes)");
  CHECK(capped.limits.max_name_bytes == 100);
}

TEST_CASE("model: a file cut short at any byte opens with every whole event before the cut", "[viewer]") {
  // As a run killed while writing leaves it (common/trace/trace.h): the header, then events.
  // Cut at every byte: before its first whole event it is no trace (an error naming the file);
  // from there on it opens with the events wholly before the cut, and says where it ended.
  TempDir tmp("shardlab_test_viewer");
  std::string text = kHeader + "\n";
  std::vector<size_t> ends;  // where each event ends
  for (int i = 0; i < 6; ++i) {
    if (i) text += ",\n";
    text += "{\"ph\": \"X\", \"name\": \"k" + std::to_string(i) + "\", \"pid\": 0, \"tid\": 0, \"ts\": " +
            std::to_string(10 * i) + ", \"dur\": 5, \"args\": {\"s\": \"a \\\"quoted\\\" [x] {y}\"}}";
    ends.push_back(text.size());
  }
  const fs::path p = tmp.path / "rank0.json";
  for (size_t cut = 1; cut < text.size(); ++cut) {
    INFO("cut at byte " << cut);
    write_text(p, text.substr(0, cut));
    const size_t whole = static_cast<size_t>(std::count_if(ends.begin(), ends.end(), [&](size_t e) { return e <= cut; }));
    if (whole == 0) {  // nothing to show: not opened, and why
      CHECK_THAT(load_error(p), Catch::Contains("rank0.json") && Catch::Contains("truncated"));
      continue;
    }
    const TraceModel m = load_traces({p.string()});
    REQUIRE(m.ranks.size() == 1);
    CHECK(m.events == whole);
    CHECK_THAT(m.ranks[0].stopped, Catch::Contains("ends inside its traceEvents, at byte " + std::to_string(cut)) &&
                                       Catch::Contains("its first " + std::to_string(whole) + " trace events"));
  }
  // Whole, it says nothing of the kind.
  write_text(p, text + "\n]}\n");
  CHECK(load_traces({p.string()}).ranks[0].stopped.empty());

  // A gzip cut short: the events in the data that made it.
  const fs::path gz = tmp.path / "cut.json.gz";
  write_gz(gz, read_text(kTraces / "02_naive_ddp" / "rank0.json"));
  const std::string bytes = read_text(gz);
  write_text(gz, bytes.substr(0, bytes.size() / 2));
  const TraceModel half = load_traces({gz.string()});
  const TraceModel all = load_traces({(kTraces / "02_naive_ddp" / "rank0.json").string()});
  REQUIRE(half.ranks.size() == 1);
  CHECK(half.events > 0);
  CHECK(half.events < all.events);
  CHECK_THAT(half.ranks[0].stopped, Catch::Contains("the gzip data ends inside its traceEvents"));
}

TEST_CASE("model: the caps on events, bytes and nesting hold, and say so", "[viewer]") {
  TempDir tmp("shardlab_test_viewer");
  // 300,000 events on one lane, one after another.
  std::string text = kHeader;
  for (int i = 0; i < 300000; ++i)
    text += (i ? ",\n" : "") + std::string("{\"ph\": \"X\", \"name\": \"k\", \"pid\": 0, \"tid\": 0, \"ts\": ") +
            std::to_string(2 * i) + ", \"dur\": 1}";
  text += "]}";
  const fs::path p = tmp.path / "many.json";
  write_text(p, text);

  LoadLimits events;
  events.max_events = 1000;
  const TraceModel e = load_traces({p.string()}, {}, events);
  REQUIRE(e.ranks.size() == 1);
  CHECK(e.events == 1000);
  CHECK_THAT(e.ranks[0].stopped, Catch::Contains("cap of 1000 events (--max-events)") &&
                                     Catch::Contains("its first 1000 trace events are read"));

  LoadLimits bytes;
  bytes.max_file_bytes = 4 << 20;
  const TraceModel b = load_traces({p.string()}, {}, bytes);
  CHECK(b.events < 300000);
  CHECK_THAT(b.ranks[0].stopped, Catch::Contains("cap of 4194304 bytes (--max-file-bytes)"));
  CHECK(load_traces({p.string()}).ranks[0].stopped.empty());

  // Nesting: 1,500 slices each inside the one before. kMaxDepth + 1 rows are kept (depths 0 to
  // kMaxDepth), the rest dropped and counted.
  std::string nested = kHeader;
  for (int i = 0; i < 1500; ++i)
    nested += (i ? ",\n" : "") + std::string("{\"ph\": \"X\", \"name\": \"n\", \"pid\": 0, \"tid\": 0, \"ts\": ") +
              std::to_string(i) + ", \"dur\": " + std::to_string(4000 - 2 * i) + "}";
  nested += "]}";
  const fs::path deep = tmp.path / "deep.json";
  write_text(deep, nested);
  const TraceModel d = load_traces({deep.string()});
  REQUIRE(d.ranks.size() == 1);
  CHECK(d.events == size_t{kMaxDepth} + 1);
  CHECK(d.skipped == 1500 - (size_t{kMaxDepth} + 1));
  CHECK(d.ranks[0].lanes[0].max_depth == kMaxDepth);

  // A gzip of 100 MiB of zeros: refused once 64 MiB sits outside any traceEvents, not held whole.
  const fs::path zeros = tmp.path / "zeros.json.gz";
  write_gz(zeros, std::string(100 << 20, '\0'));
  CHECK_THAT(load_error(zeros), Catch::Contains("zeros.json.gz") && Catch::Contains("not a trace"));
}

// What the recorder writes, the loader reads back: each collective's link and tier (and none for
// a collective whose args name none), and so the same bytes per tier.
TEST_CASE("model: a written trace loads with each collective's link and tier, and the same bytes per tier",
          "[viewer]") {
  TempDir tmp("shardlab_test_viewer");
  TraceRecorder t(0, 4, 0);
  t.name_device("rank 0 GPU 0 (sim H100)");
  t.name_stream(13, "stream 13 nccl");
  struct Op {
    const char* name;
    int64_t in, out;
    const char* dtype;
    int dtype_bytes, group_size;
    LinkTierKind tier;
    int64_t start_ns;
  };
  const Op ops[] = {
      {"allgather", 250'000, 1'000'000, "Float", 4, 4, LinkTierKind::intra_node, 10'000},      // step 1
      {"allreduce", 1'000'000, 1'000'000, "Float", 4, 3, LinkTierKind::network, 30'000},       // step 1
      {"reduce_scatter", 1'000'000, 500'000, "BFloat16", 2, 2, LinkTierKind::network, 110'000},  // step 2
      {"allreduce", 1'000'000, 1'000'000, "Float", 4, 4, LinkTierKind::unknown, 130'000},      // step 2
  };
  int64_t seq = 0;
  for (const Op& op : ops) {
    // Initialized whole: GCC 12 warns (-Wrestrict, a false positive) on some of these fields'
    // assignments from literals.
    const CollectiveArgs a{.name = op.name,
                           .kernel_name = "ncclDevKernel_RING_SIMPLE",  // the name tells a communication kernel
                           .in_nelems = op.in,
                           .out_nelems = op.out,
                           .dtype = op.dtype,
                           .dtype_bytes = op.dtype_bytes,
                           .group_size = op.group_size,
                           .group_name = "g",
                           .group_ranks = {0, 1, 2, 3},
                           .seq = ++seq,
                           .link = op.tier == LinkTierKind::intra_node ? "NVLink4"
                                   : op.tier == LinkTierKind::network  ? "InfiniBand"
                                                                       : "",
                           .link_tier = op.tier};
    t.collective(13, a, op.start_ns, op.start_ns, op.start_ns + 5'000, 0);
  }
  t.step(1, 0, 100'000);
  t.step(2, 100'000, 100'000);
  const fs::path file = tmp.path / "rank0.json";
  t.write(file.string(), "mpi", 0, json::array(), json::object());

  const TraceModel m = load_traces({file.string()});
  REQUIRE(m.ranks.size() == 1);
  const RankTimeline& loaded = m.ranks[0].timeline;
  const RankTimeline& written = t.timeline();
  REQUIRE(loaded.collectives.size() == written.collectives.size());
  for (size_t i = 0; i < loaded.collectives.size(); ++i) {
    INFO("collective " << i);
    CHECK(loaded.collectives[i].link == written.collectives[i].link);
    CHECK(loaded.collectives[i].link_tier == ops[i].tier);
    CHECK(link_bytes(loaded.collectives[i]) == link_bytes(written.collectives[i]));
  }
  const auto steps = step_metrics(loaded);
  REQUIRE(steps.size() == 2);
  // By hand: 4,000,000 bytes gathered x 3/4; 4,000,000 all-reduced x 2(3-1)/3 = 5,333,333.3 to the
  // nearest byte; 2,000,000 bf16 bytes scattered x 1/2; the all-reduce naming no tier, nowhere.
  CHECK(steps[0].intra_node_bytes == 3'000'000);
  CHECK(steps[0].network_bytes == 5'333'333);
  CHECK(steps[1].intra_node_bytes == 0);
  CHECK(steps[1].network_bytes == 1'000'000);
  const auto recorded = step_metrics(written);
  for (size_t k = 0; k < steps.size(); ++k) {
    CHECK(steps[k].intra_node_bytes == recorded[k].intra_node_bytes);
    CHECK(steps[k].network_bytes == recorded[k].network_bytes);
  }
}

TEST_CASE("model: loads a Kineto-style trace", "[viewer]") {
  TempDir tmp("shardlab_test_viewer");
  // PyTorch profiler output: string pids/tids, memory as [memory] instants, B/E, runtime and
  // kernel linked by correlation and an ac2g flow, a ProfilerStep on the CPU and on the GPU.
  const std::string text = R"({
    "schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100"}],
    "traceEvents": [
      {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "pid": 4242, "tid": 4242, "ts": 100, "dur": 100},
      {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 4242, "tid": 4242, "ts": 110, "dur": 20,
       "args": {"External id": 7, "Input Dims": [[4, 4], [4, 4]], "Input type": ["float", "float"]}},
      {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 4242, "tid": 4242, "ts": 115, "dur": 5,
       "args": {"correlation": 99, "cbid": 211}},
      {"ph": "s", "id": 99, "pid": 4242, "tid": 4242, "ts": 115, "cat": "ac2g", "name": "ac2g"},
      {"ph": "X", "cat": "kernel", "name": "volta_sgemm_128x64_nn", "pid": 0, "tid": 7, "ts": 125, "dur": 30,
       "args": {"device": 0, "stream": 7, "correlation": 99, "registers per thread": 126}},
      {"ph": "f", "id": 99, "pid": 0, "tid": 7, "ts": 125, "cat": "ac2g", "name": "ac2g", "bp": "e"},
      {"ph": "X", "cat": "gpu_user_annotation", "name": "ProfilerStep#3", "pid": 0, "tid": 7, "ts": 120, "dur": 50},
      {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "pid": 0, "tid": 20,
       "ts": 130, "dur": 40, "args": {"Collective name": "allreduce", "In msg nelems": 1024, "Out msg nelems": 1024,
       "Group size": 2, "dtype": "BFloat16", "Process Group Name": "0", "Seq": 4}},
      {"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": 4242, "tid": 4242, "ts": 112,
       "args": {"Device Type": 1, "Device Id": 0, "Bytes": 4096, "Total Allocated": 8192, "Total Reserved": 2097152}},
      {"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": 4242, "tid": 4242, "ts": 113,
       "args": {"Device Type": 0, "Device Id": -1, "Bytes": 64, "Total Allocated": 64, "Total Reserved": 0}},
      {"ph": "B", "cat": "python_function", "name": "train.py(12): step", "pid": "Spans", "tid": "PyTorch Profiler", "ts": 101},
      {"ph": "E", "pid": "Spans", "tid": "PyTorch Profiler", "ts": 190},
      {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "GPU 0"}},
      {"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "args": {"name": "stream 7"}},
      {"ph": "M", "name": "process_sort_index", "pid": 0, "tid": 0, "args": {"sort_index": 5000000}}
    ],
    "traceName": "worker0.pt.trace.json"
  })";
  const fs::path p = tmp.path / "worker0.pt.trace.json";
  write_text(p, text);
  const TraceModel m = load_traces({p.string()});
  REQUIRE(m.ranks.size() == 1);
  const Rank& r = m.ranks[0];
  CHECK(r.rank == 0);  // no distributedInfo: its position
  CHECK(m.skipped == 0);

  // Lanes: CPU ones (the host thread, the "Spans" lane) first, then streams 7 and 20.
  REQUIRE(r.lanes.size() == 4);
  CHECK(!r.lanes[0].device);
  CHECK(!r.lanes[1].device);
  const Lane* spans = r.lanes[0].pid < 0 ? &r.lanes[0] : &r.lanes[1];
  const Lane* host = r.lanes[0].pid < 0 ? &r.lanes[1] : &r.lanes[0];
  CHECK(spans->name == "PyTorch Profiler");
  CHECK(spans->process == "Spans");
  REQUIRE(spans->slices.size() == 1);
  CHECK(spans->slices[0].category == Category::cpu_op);
  CHECK(spans->slices[0].end_us == 190);
  CHECK(host->name == "thread 4242");
  REQUIRE(host->slices.size() == 3);
  CHECK(host->slices[0].category == Category::annotation);
  CHECK(host->slices[1].depth == 1);
  CHECK(host->slices[2].depth == 2);
  CHECK(host->slices[2].category == Category::runtime);
  CHECK(r.lanes[2].device);
  CHECK(r.lanes[2].name == "stream 7");
  CHECK(r.lanes[2].process == "GPU 0");
  CHECK(r.lanes[2].process_sort_index == 5000000);
  CHECK(r.lanes[3].name == "stream 20");
  CHECK(r.lanes[3].slices[0].category == Category::comm);
  CHECK(json::parse(m.args_json[host->slices[1].args])["Input Dims"] == json::parse("[[4, 4], [4, 4]]"));

  // The flow links the launch to its kernel.
  REQUIRE(r.flows.size() == 1);
  const Flow& f = r.flows[0];
  CHECK(f.id == 99);
  CHECK(&r.lanes[static_cast<size_t>(f.from_lane)] == host);
  CHECK(f.to_lane == 2);
  CHECK(host->slices[static_cast<size_t>(f.from_slice)].correlation == 99);
  CHECK(m.names[r.lanes[2].slices[static_cast<size_t>(f.to_slice)].name] == "volta_sgemm_128x64_nn");

  // Timeline: the CPU step only, kernels and the collective, GPU memory only.
  REQUIRE(r.timeline.steps.size() == 1);
  CHECK(r.timeline.steps[0].step == 3);
  CHECK(r.timeline.slices.size() == 2);
  REQUIRE(r.timeline.collectives.size() == 1);
  CHECK(collective_bytes(r.timeline.collectives[0]) == 2048);
  CHECK(r.timeline.collectives[0].group_size == 2);
  CHECK(r.timeline.collectives[0].link.empty());  // PyTorch names no link: no tier, no bytes on one
  CHECK(r.timeline.collectives[0].link_tier == LinkTierKind::unknown);
  REQUIRE(r.timeline.memory.size() == 1);
  CHECK(r.timeline.memory[0].allocated == 8192);
  CHECK(r.timeline.memory[0].reserved == 2097152);
  const auto steps = step_metrics(r.timeline);
  REQUIRE(steps.size() == 1);
  CHECK(steps[0].compute_us == 30);
  CHECK(steps[0].comm_us == 40);
  CHECK(steps[0].overlap_us == 25);
  CHECK(steps[0].peak_allocated == 8192);
  CHECK(steps[0].intra_node_bytes == 0);
  CHECK(steps[0].network_bytes == 0);
}

TEST_CASE("model: a large file, parsed in chunks on several threads, loads as one pass would", "[viewer]") {
  // ~12 MB: the loader cuts it into chunks of ~2 MiB that parse in parallel and merge in order.
  // What spans chunks must come out as one sequential pass makes it: B/E pairs, waits and the
  // collective after them, flows, string ids numbered in order of first use, metadata at the end.
  TempDir tmp("shardlab_test_viewer");
  constexpr int kN = 20000;
  std::string text = "{\"traceEvents\": [\n";
  char buf[512];
  bool first = true;
  const auto add = [&](int n) {
    if (!first) text += ",\n";
    first = false;
    text.append(buf, static_cast<size_t>(n));
  };
  for (int i = 0; i < kN; ++i) {
    const double t = 100.0 * i;
    if (i % 5000 == 0 && i > 0) add(std::snprintf(buf, sizeof buf, R"({"ph": "E", "pid": 1, "tid": "phases", "ts": %.1f})", t));
    if (i % 5000 == 0)
      add(std::snprintf(buf, sizeof buf, R"({"ph": "B", "name": "phase %d", "pid": 1, "tid": "phases", "ts": %.1f})", i / 5000, t + 0.5));
    if (i % 10000 == 0)
      add(std::snprintf(buf, sizeof buf,
                        R"({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#%d", "pid": 1, "tid": 1, "ts": %.1f, "dur": 999999})",
                        i / 10000, t));
    add(std::snprintf(buf, sizeof buf, R"({"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "ts": %.1f, "dur": 50, "args": {"i": %d}})", t, i));
    add(std::snprintf(buf, sizeof buf,
                      R"({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": %.1f, "dur": 5, "args": {"correlation": %d}})",
                      t + 10, i + 1));
    add(std::snprintf(buf, sizeof buf, R"({"ph": "s", "id": %d, "pid": 1, "tid": 1, "ts": %.1f, "cat": "ac2g"})", i + 1, t + 10));
    add(std::snprintf(buf, sizeof buf,
                      R"({"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": %.1f, "dur": 30, "args": {"correlation": %d}})",
                      t + 20, i + 1));
    add(std::snprintf(buf, sizeof buf, R"({"ph": "f", "bp": "e", "id": %d, "pid": 0, "tid": 7, "ts": %.1f, "cat": "ac2g"})", i + 1, t + 20));
    if (i % 1000 == 500)
      add(std::snprintf(buf, sizeof buf, R"({"ph": "X", "cat": "kernel", "name": "nccl:wait", "pid": 0, "tid": 20, "ts": %.1f, "dur": 10})", t));
    if (i % 1000 == 999)
      add(std::snprintf(buf, sizeof buf,
                        R"({"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce", "pid": 0, "tid": 20, "ts": %.1f, "dur": 20, )"
                        R"("args": {"Collective name": "allreduce", "In msg nelems": %d, "Group size": 2, "dtype": "Float"}})",
                        t, i));
    if (i == 15000)
      add(std::snprintf(buf, sizeof buf, R"({"ph": "X", "cat": "cpu_op", "name": "late", "pid": "Late", "tid": "late thread", "ts": %.1f, "dur": 1})", t));
  }
  add(std::snprintf(buf, sizeof buf, R"({"ph": "E", "pid": 1, "tid": "phases", "ts": %.1f})", 100.0 * kN));
  add(std::snprintf(buf, sizeof buf, R"({"ph": "M", "name": "thread_name", "pid": 1, "tid": "phases", "args": {"name": "Phases"}})"));
  text += "\n]}\n";
  REQUIRE(text.size() > 8 * (size_t{1} << 20));
  const fs::path plain = tmp.path / "big.json", gz = tmp.path / "big.json.gz";
  write_text(plain, text);
  write_gz(gz, text);

  const TraceModel m = load_traces({plain.string()});
  REQUIRE(m.ranks.size() == 1);
  const Rank& r = m.ranks[0];
  CHECK(m.skipped == 0);
  CHECK(m.events == 3 * kN + 4 + 2 + 40 + 1);
  check_nesting(r);

  // Lanes: CPU ones by pid ("Late" is -2), then streams 7 and 20. String ids are numbered in
  // order of first use: "phases" (event 0), then "Late" and "late thread" (event ~75000).
  REQUIRE(r.lanes.size() == 5);
  const Lane& phases = r.lanes[1];
  CHECK(phases.name == "Phases");
  CHECK(phases.pid == 1);
  CHECK(phases.tid == -1);
  const Lane& late = r.lanes[0];
  CHECK(late.process == "Late");
  CHECK(late.name == "late thread");
  CHECK(late.pid == -2);
  CHECK(late.tid == -3);
  const Lane& host = r.lanes[2];
  CHECK(host.pid == 1);
  CHECK(host.tid == 1);
  CHECK(host.slices.size() == 2 * kN + 2);
  CHECK(r.lanes[3].tid == 7);
  CHECK(r.lanes[3].slices.size() == kN);
  CHECK(r.lanes[4].tid == 20);
  CHECK(r.lanes[4].slices.size() == 40);

  // B/E pairs a megabyte or more apart.
  REQUIRE(phases.slices.size() == 4);
  for (int k = 0; k < 4; ++k) {
    const Slice& s = phases.slices[static_cast<size_t>(k)];
    CHECK(m.names[s.name] == "phase " + std::to_string(k));
    CHECK(s.start_us == 5000.0 * 100 * k + 0.5);
    CHECK(s.end_us == 5000.0 * 100 * (k + 1));
  }

  // Every flow joins its launch and its kernel.
  REQUIRE(r.flows.size() == static_cast<size_t>(kN));
  for (const Flow& f : r.flows) {
    REQUIRE(f.from_slice >= 0);
    REQUIRE(f.to_slice >= 0);
    CHECK(host.slices[static_cast<size_t>(f.from_slice)].correlation == f.id);
    CHECK(r.lanes[3].slices[static_cast<size_t>(f.to_slice)].correlation == f.id);
  }

  // Each wait belongs to the collective 499 iterations later on its stream.
  REQUIRE(r.timeline.collectives.size() == 20);
  size_t waits = 0;
  for (const DeviceSlice& s : r.timeline.slices) {
    if (s.kind != SliceKind::comm_wait) continue;
    ++waits;
    REQUIRE(s.collective >= 0);
    CHECK(r.timeline.collectives[static_cast<size_t>(s.collective)].start_us - s.start_us == Approx(49900));
  }
  CHECK(waits == 20);
  REQUIRE(r.timeline.steps.size() == 2);
  CHECK(r.timeline.steps[1].step == 1);

  // The same bytes gzipped: the same model.
  check_same(m, load_traces({gz.string()}));
}

TEST_CASE("model: inputs the fuzzer found load or fail cleanly", "[viewer]") {
  // tests/viewer/run_fuzz.sh (libFuzzer, ASan, UBSan) found these; each was undefined behaviour.
  TempDir tmp("shardlab_test_viewer");
  const auto write = [&](const char* name, const std::string& text) {
    const fs::path p = tmp.path / name;
    write_text(p, text);
    return p;
  };

  // A counter's bytes beyond int64 (4.4e19, as minimized, in a file cut short after it): the
  // conversion to bytes overflowed. The counter is read, saturated, and the file says it was cut.
  const fs::path cut = write("counter_overflow_cut.json",
                             R"({ "traceEvents": [{"no": {0}}, {"ph": "C", "name": "GPU memory", "tid": 0, "ts":0.0, )"
                             R"("args": {"reserved":44444444444444447152}})");
  const TraceModel read_cut = load_traces({cut.string()});
  REQUIRE(read_cut.ranks.size() == 1);
  REQUIRE(read_cut.ranks[0].timeline.memory.size() == 1);
  CHECK(read_cut.ranks[0].timeline.memory[0].reserved == std::numeric_limits<int64_t>::max());
  CHECK_THAT(read_cut.ranks[0].stopped, Catch::Contains("ends inside its traceEvents"));

  // Whole, such numbers saturate: counters and memory samples, and a collective's element count.
  const fs::path whole = write("bytes_overflow.json", R"({"traceEvents": [
    {"ph": "C", "name": "GPU memory", "ts": 0, "args": {"reserved": 44444444444444447152, "allocated": -1e300}},
    {"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 1, "args": {"Device Type": 1, "Total Allocated": 1e300,
     "Total Reserved": 4.4e89}},
    {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce", "pid": 0, "tid": 7, "ts": 2, "dur": 1,
     "args": {"Collective name": "allreduce", "In msg nelems": 9000000000000000000, "dtype": "Double", "Group size": 8}}
  ]})");
  const TraceModel m = load_traces({whole.string()});
  REQUIRE(m.ranks.size() == 1);
  const RankTimeline& tl = m.ranks[0].timeline;
  REQUIRE(tl.memory.size() == 2);
  CHECK(tl.memory[0].reserved == std::numeric_limits<int64_t>::max());
  CHECK(tl.memory[0].allocated == std::numeric_limits<int64_t>::min());
  CHECK(tl.memory[1].allocated == std::numeric_limits<int64_t>::max());
  CHECK(tl.memory[1].reserved == std::numeric_limits<int64_t>::max());
  const auto colls = collective_metrics(tl);
  REQUIRE(colls.size() == 1);
  CHECK(colls[0].bytes == (int64_t{1} << 50) * 8);  // the count is bounded, the bytes fit
  CHECK(colls[0].busbw_GBps > 0);
}
