// Trace recorder: the file it writes must satisfy the schema (README.md, "Traces"), Perfetto's strict
// nesting, HTA's rank regex and flow pairing, and be byte-identical for identical calls.
#include <catch2/catch.hpp>

#include "test_files.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "device/in_flight.h"
#include "trace/trace.h"

using namespace shardlab;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {


constexpr int kCompute = 7, kComm = 13;

// One rank's two steps, with launches, copies, a waiting and a non-waiting collective, memory
// counters and an instant: every kind of event the recorder writes.
TraceRecorder make_trace(int rank) {
  TraceRecorder t(rank, 4, /*device_index=*/rank % 2);
  t.name_host("rank " + std::to_string(rank) + " CPU");
  t.name_device("rank " + std::to_string(rank) + " GPU (sim H100)");
  t.name_stream(kCompute, "stream 7 compute");
  t.name_stream(kComm, "stream 13 nccl");
  t.memory(0, 1000, 2048);

  // Step 1: forward kernel and a host-to-device copy, then an all-reduce that waits for peers.
  uint64_t c = t.runtime_call("cudaMemcpyAsync", 1'000, 500, true);
  t.memcpy(kCompute, "Memcpy HtoD", 2'000, 1'000, c, 4096);
  c = t.runtime_call("cudaLaunchKernel", 3'000, 400, true);
  t.cpu_op("aten::linear", 2'500, 2'000, TraceArgs().add("Input Dims", "[[8, 16]]"));
  t.kernel(kCompute, "gemm \"fwd\"", 5'000, 10'000, c, 2.5e9, 1.0e6);
  t.memset(kCompute, "Memset (Device)", 15'000, 1'000, 0, 256);
  t.memory(16'000, 5000, 8192);

  CollectiveArgs ar;
  ar.name = "allreduce";
  ar.kernel_name = "ncclDevKernel_AllReduce_Sum_f32_RING_LL";
  ar.in_nelems = ar.out_nelems = 1000;
  ar.dtype = "Float";
  ar.group_size = 4;
  ar.group_name = "0";
  ar.group_ranks = {0, 1, 2, 3};
  ar.seq = 1;
  ar.link = "InfiniBand NDR 400 Gb/s";
  ar.link_tier = LinkTierKind::network;
  c = t.runtime_call("cudaLaunchKernel", 17'000, 300, true);
  t.collective(kComm, ar, 20'000, 30'000, 50'000, c);
  t.step(1, 0, 60'000);

  // Step 2: a collective that found its peers waiting (no wait slice), and an nccl kernel
  // launched directly.
  ar.seq = 2;
  c = t.runtime_call("cudaLaunchKernel", 61'000, 300, true);
  t.collective(kComm, ar, 62'000, 62'000, 70'000, c);
  c = t.runtime_call("cudaLaunchKernel", 71'000, 300, true);
  t.kernel(kComm, "ncclDevKernel_SendRecv", 72'000, 3'000, c, 0, 512);
  t.instant("race \"maybe\"", 75'000, TraceArgs().add("stream", kCompute).add("detail", "line1\nline2"));
  t.step(2, 60'000, 20'000);
  return t;
}

json write_and_parse(TraceRecorder& t, const fs::path& file, std::string* text = nullptr) {
  t.write(file.string(), "mpi", 1'700'000'000'000'000'000, json::array({{{"name", "sim H100"}}}),
          {{"chapter", "ch01"}, {"rank", 99}});
  std::string s = read_text(file);
  if (text) *text = s;
  return json::parse(s);
}

int64_t to_ns(const json& us) { return std::llround(us.get<double>() * 1000.0); }

}  // namespace

TEST_CASE("format_us writes microseconds with three decimals", "[trace]") {
  CHECK(format_us(0) == "0.000");
  CHECK(format_us(12'345) == "12.345");
  CHECK(format_us(999) == "0.999");
  CHECK(format_us(1'000) == "1.000");
  CHECK(format_us(-1'500) == "-1.500");
  CHECK(format_us(-1) == "-0.001");
  CHECK(format_us(std::numeric_limits<int64_t>::min()) == "-9223372036854775.808");
  CHECK(format_us(std::numeric_limits<int64_t>::max()) == "9223372036854775.807");
}

TEST_CASE("json_string escapes quotes, backslashes and control characters", "[trace]") {
  CHECK(json_string("plain") == "\"plain\"");
  CHECK(json_string("a\"b\\c") == R"("a\"b\\c")");
  CHECK(json_string("t\tn\n\x01") == R"("t\u0009n\u000a\u0001")");
  CHECK(json_string("h\xc3\xa9llo") == "\"h\xc3\xa9llo\"");  // UTF-8 passes through
  const std::string nasty = std::string("q\"\\\x1f\x7f end\0x", 11);
  CHECK(json::parse(json_string(nasty)).get<std::string>() == nasty);
}

TEST_CASE("TraceArgs serializes in insertion order as valid JSON", "[trace]") {
  TraceArgs a;
  CHECK(a.empty());
  a.add("n", 3).add("big", uint64_t{3'000'000'001}).add("x", 1.5).add("m", 1.0e6).add("s", "q\"")
      .add("nan", std::nan("")).add("inf", std::numeric_limits<double>::infinity()).add("l", std::vector<int>{0, 1})
      .add("k\"ey", -2);
  CHECK(a.json() == R"("n": 3, "big": 3000000001, "x": 1.5, "m": 1000000, "s": "q\"", "nan": null, )"
                    R"("inf": null, "l": [0, 1], "k\"ey": -2)");
  CHECK(json::parse("{" + a.json() + "}")["l"] == json::array({0, 1}));
  CHECK(TraceArgs().add("third", 1.0 / 3).json() == R"("third": 0.333333)");
  CHECK(TraceArgs().add("flops", 1.5e15).json() == R"("flops": 1500000000000000)");  // whole numbers exactly
  CHECK(TraceArgs().add("none", std::vector<int>{}).json() == R"("none": [])");
  CHECK_THROWS_AS(TraceArgs().add("rank", 0), std::invalid_argument);
}

TEST_CASE("json_string makes any bytes a valid JSON string", "[trace]") {
  // Not UTF-8: a lone continuation byte, a cut sequence, an overlong '/', a surrogate, a code
  // point past U+10FFFF, Latin-1. Each bad byte becomes U+FFFD; good sequences stay.
  const std::string bad = "\x80|\xe2\x82|\xc0\xaf|\xed\xa0\x80|\xf4\x90\x80\x80|caf\xe9|\xe2\x82\xac\xf0\x9f\x98\x80";
  const json parsed = json::parse(json_string(bad));  // nlohmann rejects invalid UTF-8
  const std::string r = "\xef\xbf\xbd";                // U+FFFD in UTF-8
  CHECK(parsed.get<std::string>() == r + "|" + r + r + "|" + r + r + "|" + r + r + r + "|" + r + r + r + r +
                                         "|caf" + r + "|\xe2\x82\xac\xf0\x9f\x98\x80");
  std::string every_byte;
  for (int b = 0; b < 256; ++b) every_byte += static_cast<char>(b);
  CHECK_NOTHROW(json::parse(json_string(every_byte)));
  CHECK(json_string("") == "\"\"");
}

// Whatever a device hands the recorder (empty strings and lists, hostile names, non-finite
// numbers, a header with bytes that are not UTF-8), the file parses as strict JSON.
TEST_CASE("trace file stays valid JSON on hostile input", "[trace]") {
  TempDir dir("shardlab_test_trace");
  TraceRecorder t(0, 1, 0);
  t.name_host("");
  t.name_device("GPU \"0\"\n\xff");
  t.name_stream(kCompute, std::string("s\0t", 3));
  CollectiveArgs empty;  // every string empty, no ranks: what the first H200 run's broken slices held
  t.collective(kComm, empty, 0, 0, 10, 0);
  CollectiveArgs odd;
  odd.name = "\x01\"all\\reduce\xc3";
  odd.kernel_name = "nccl\t\xe2";
  odd.group_ranks = {0};
  t.collective(kComm, odd, 5, 10, 20, t.runtime_call("\x7f", 0, 1, true));
  t.kernel(kCompute, "k\xfe", 30, 5, 0, std::nan(""), std::numeric_limits<double>::infinity());
  t.cpu_op("", 0, 40, TraceArgs().add("", -std::numeric_limits<double>::infinity()).add("e", ""));
  t.instant("\\", 1, TraceArgs().add("l", std::vector<int>{}));
  t.step(1, 0, 50);
  const json other = {{"name", "\xff\xfe"}, {"x", std::nan("")}};
  t.write((dir.path / "rank0.json").string(), "m\"pi", 0, json::array({{{"name", "\xc0"}}}), other);
  const json j = json::parse(read_text(dir.path / "rank0.json"));  // throws on anything not JSON
  int collectives = 0;
  for (const json& e : j["traceEvents"]) {
    if (!e.contains("args") || !e["args"].contains("Process Group Ranks")) continue;
    CHECK(e["args"]["Process Group Ranks"].is_array());
    ++collectives;
  }
  CHECK(collectives == 2);
  CHECK(j["otherData"]["x"].is_null());
  CHECK(j["distributedInfo"]["backend"] == "m\"pi");
}

// The first H200 run's empty collective strings: the slices kept for later lost their strings
// when the hand-written compaction moved one onto itself. Kept and written slices alike must
// come out as they went in, whatever order their work completes in.
TEST_CASE("in-flight slices keep their strings whatever completes first", "[trace]") {
  const auto make = [](int i) {
    InFlight<int>::Entry e;
    e.slice.kind = MeasuredSlice::Kind::collective;
    e.slice.name = "ncclDevKernel_AllGather_RING_LL, a name too long to be stored inline " + std::to_string(i);
    e.slice.collective.name = "allgather";
    e.slice.collective.group_name = "process group with a long name, number " + std::to_string(i);
    e.slice.collective.group_ranks = {0, 1, 2};
    e.start = i;
    e.end = i;
    return e;
  };
  // done[i]: whether slice i has completed at each of three flushes; a slice once done stays done.
  const std::vector<std::vector<bool>> rounds = {
      {false, true, false, true, true, false},  // the first slice still running: the case that broke
      {false, true, true, true, true, true},
      {true, true, true, true, true, true}};
  InFlight<int> q;
  for (int i = 0; i < 6; ++i) q.push(make(i));
  std::vector<int> written;
  for (const auto& done : rounds) {
    q.flush([&](const InFlight<int>::Entry& e) { return static_cast<bool>(done[static_cast<size_t>(e.end)]); },
            [&](const InFlight<int>::Entry& e) {
              const InFlight<int>::Entry want = make(e.end);
              CHECK(e.slice.name == want.slice.name);
              CHECK(e.slice.collective.group_name == want.slice.collective.group_name);
              CHECK(e.slice.collective.group_ranks == want.slice.collective.group_ranks);
              written.push_back(e.end);
            });
    for (const auto& e : q.entries()) {  // the ones kept, in issue order, intact
      CHECK(e.slice.name == make(e.end).slice.name);
      CHECK(e.slice.collective.name == "allgather");
    }
  }
  CHECK(written == std::vector<int>{1, 3, 4, 2, 5, 0});
  CHECK(q.size() == 0);
}

TEST_CASE("trace file header: field order and HTA's rank regex", "[trace]") {
  TempDir dir("shardlab_test_trace");
  TraceRecorder t = make_trace(3);
  std::string text;
  const fs::path file = dir.path / "run" / "rank3.json";  // parent directories are created
  write_and_parse(t, file, &text);

  CHECK(text.rfind("{\"distributedInfo\": ", 0) == 0);
  const auto ordered = nlohmann::ordered_json::parse(text);
  std::vector<std::string> keys;
  for (const auto& [k, v] : ordered.items()) keys.push_back(k);
  CHECK(keys == std::vector<std::string>{"distributedInfo", "schemaVersion", "displayTimeUnit",
                                         "baseTimeNanoseconds", "deviceProperties", "otherData", "traceEvents"});
  CHECK(ordered["distributedInfo"] == json{{"backend", "mpi"}, {"rank", 3}, {"world_size", 4}});
  CHECK(ordered["schemaVersion"] == 1);
  CHECK(ordered["displayTimeUnit"] == "ns");
  CHECK(ordered["baseTimeNanoseconds"] == 1'700'000'000'000'000'000);
  CHECK(ordered["deviceProperties"][0]["name"] == "sim H100");
  CHECK(ordered["otherData"]["chapter"] == "ch01");

  // HTA: re.search(r'"rank":\s+(\d+)', text). otherData's compact "rank":99 does not match.
  std::smatch m;
  REQUIRE(std::regex_search(text, m, std::regex(R"("rank":\s+(\d+))")));
  CHECK(m[1] == "3");
}

TEST_CASE("trace events: times, nesting, flows, args, counters, steps, metadata", "[trace]") {
  TempDir dir("shardlab_test_trace");
  TraceRecorder t = make_trace(2);
  std::string text;
  const json doc = write_and_parse(t, dir.path / "rank2.json", &text);
  const json& events = doc["traceEvents"];
  REQUIRE(events.size() == t.event_count() + 10);  // metadata: 4 host, 2 device, 2 per stream
  const int host = TraceRecorder::host_pid(2), device = t.device_pid();

  SECTION("every complete event has ts and dur with exactly three decimals, one event per line") {
    const std::regex times(R"re("ts": -?\d+\.\d{3}, "dur": \d+\.\d{3}[,}])re");
    int complete_lines = 0;
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
      if (line.find("\"ph\": \"X\"") == std::string::npos) continue;
      ++complete_lines;
      CHECK(std::regex_search(line, times));
    }
    CHECK(complete_lines == std::count_if(events.begin(), events.end(), [](const json& e) { return e["ph"] == "X"; }));
  }

  // Complete events per lane, as [start, end) in ns.
  std::map<std::pair<int, int>, std::vector<std::pair<int64_t, int64_t>>> lanes;
  for (const json& e : events)
    if (e["ph"] == "X") lanes[{e["pid"], e["tid"]}].push_back({to_ns(e["ts"]), to_ns(e["ts"]) + to_ns(e["dur"])});

  SECTION("complete events on a lane nest strictly") {
    for (auto& [lane, slices] : lanes) {
      // Outer first when starts tie; then a stack of open slices must contain each new one.
      std::sort(slices.begin(), slices.end(),
                [](const auto& a, const auto& b) { return a.first != b.first ? a.first < b.first : a.second > b.second; });
      std::vector<std::pair<int64_t, int64_t>> open;
      for (const auto& s : slices) {
        while (!open.empty() && open.back().second <= s.first) open.pop_back();
        INFO("lane " << lane.first << "/" << lane.second << " slice at " << s.first);
        if (!open.empty()) CHECK(s.second <= open.back().second);
        open.push_back(s);
      }
    }
  }

  SECTION("each flow start has exactly one end, each lands on a slice start") {
    std::map<uint64_t, int> starts, ends;
    for (const json& e : events) {
      if (e["ph"] != "s" && e["ph"] != "f") continue;
      CHECK(e["cat"] == "ac2g");
      const auto id = e["id"].get<uint64_t>();
      (e["ph"] == "s" ? starts : ends)[id]++;
      const auto& lane = lanes[{e["pid"], e["tid"]}];
      CHECK(std::any_of(lane.begin(), lane.end(), [&](const auto& s) { return s.first == to_ns(e["ts"]); }));
      if (e["ph"] == "f") {
        CHECK(e["bp"] == "e");
        CHECK(e["pid"] == device);
      } else {
        CHECK(e["pid"] == host);
      }
    }
    // The waited all-reduce's arrow lands on its wait slice, where the stream became busy.
    std::set<int64_t> end_times;
    for (const json& e : events)
      if (e["ph"] == "f") end_times.insert(to_ns(e["ts"]));
    CHECK(end_times.count(20'000) == 1);
    CHECK(end_times.count(30'000) == 0);
    CHECK(starts.size() == 5);
    CHECK(starts.size() == ends.size());
    for (const auto& [id, n] : starts) {
      CHECK(n == 1);
      CHECK(ends[id] == 1);
    }
  }

  SECTION("device events carry Kineto's args; correlations match their launches") {
    std::set<uint64_t> launches;
    for (const json& e : events)
      if (e.value("cat", "") == "cuda_runtime") launches.insert(e["args"]["correlation"].get<uint64_t>());
    int kernels = 0, collectives = 0, waits = 0;
    for (const json& e : events) {
      const std::string cat = e.value("cat", "");
      if (cat != "kernel" && cat != "gpu_memcpy" && cat != "gpu_memset") continue;
      const json& a = e["args"];
      CHECK(e["pid"] == device);
      CHECK(a["device"] == device);
      CHECK(a["stream"] == e["tid"]);
      CHECK(a.contains("bytes") == (cat != "kernel" || !a.contains("Collective name")));
      if (a.contains("correlation")) CHECK(launches.count(a["correlation"].get<uint64_t>()) == 1);
      if (cat == "kernel") ++kernels;
      const std::string name = e["name"];
      if (!a.contains("Collective name")) continue;
      CHECK(name.rfind("nccl", 0) == 0);  // HTA's test for a communication kernel
      if (name.rfind("nccl:wait ", 0) == 0) {
        ++waits;
        CHECK_FALSE(a.contains("correlation"));
        continue;
      }
      ++collectives;
      CHECK(a["Collective name"] == "allreduce");
      CHECK(a["In msg nelems"] == 1000);
      CHECK(a["Out msg nelems"] == 1000);
      CHECK(a["Group size"] == 4);
      CHECK(a["dtype"] == "Float");
      CHECK(a["Process Group Name"] == "0");
      CHECK(a["Process Group Ranks"] == json::array({0, 1, 2, 3}));
      CHECK(a["Link"] == "InfiniBand NDR 400 Gb/s");
      CHECK(a["Link tier"] == "network");
      CHECK(a.contains("correlation"));
    }
    CHECK(kernels == 5);
    CHECK(collectives == 2);
    CHECK(waits == 1);
  }

  SECTION("no args key is named rank") {
    for (const json& e : events)
      if (e.contains("args")) CHECK_FALSE(e["args"].contains("rank"));
  }

  SECTION("memory counters, steps, instants") {
    int counters = 0;
    std::set<std::string> steps;
    for (const json& e : events) {
      if (e["ph"] == "C") {
        ++counters;
        CHECK(e["name"] == "GPU memory");
        CHECK(e["pid"] == device);
        CHECK(e["args"].contains("allocated"));
        CHECK(e["args"].contains("reserved"));
      }
      if (e.value("cat", "") == "user_annotation") {
        steps.insert(e["name"].get<std::string>());
        CHECK(e["pid"] == host);
        CHECK(e["tid"] == TraceRecorder::kHostTid);
      }
      if (e["ph"] == "i") {
        CHECK(e["name"] == "race \"maybe\"");
        CHECK(e["args"]["detail"] == "line1\nline2");
      }
    }
    CHECK(counters == 2);
    CHECK(steps == std::set<std::string>{"ProfilerStep#1", "ProfilerStep#2"});
  }

  SECTION("metadata comes first and names and orders every lane") {
    std::map<std::tuple<std::string, int, int>, json> meta;
    size_t i = 0;
    for (; i < events.size() && events[i]["ph"] == "M"; ++i)
      meta[{events[i]["name"], events[i]["pid"], events[i]["tid"]}] = events[i]["args"];
    for (; i < events.size(); ++i) CHECK(events[i]["ph"] != "M");
    CHECK(meta[{"process_name", host, 0}]["name"] == "rank 2 CPU");
    CHECK(meta[{"process_sort_index", host, 0}]["sort_index"] == 4);
    CHECK(meta[{"thread_name", host, 1}]["name"] == "CPU thread");
    CHECK(meta[{"process_name", device, 0}]["name"] == "rank 2 GPU (sim H100)");
    CHECK(meta[{"process_sort_index", device, 0}]["sort_index"] == 5);
    CHECK(meta[{"thread_name", device, kComm}]["name"] == "stream 13 nccl");
    CHECK(meta[{"thread_sort_index", device, kCompute}]["sort_index"] == kCompute);
  }
}

TEST_CASE("trace timeline mirrors the device events", "[trace]") {
  const TraceRecorder t = make_trace(0);
  const RankTimeline& tl = t.timeline();
  CHECK(tl.rank == 0);
  REQUIRE(tl.steps.size() == 2);
  CHECK(tl.steps[1].step == 2);
  CHECK(tl.steps[1].start_us == 60.0);
  CHECK(tl.steps[1].end_us == 80.0);
  REQUIRE(tl.memory.size() == 2);
  CHECK(tl.memory[1].t_us == 16.0);
  CHECK(tl.memory[1].reserved == 8192);

  REQUIRE(tl.collectives.size() == 2);
  CHECK(tl.collectives[0].start_us == 30.0);  // the data movement, the wait excluded
  CHECK(tl.collectives[0].end_us == 50.0);
  CHECK(tl.collectives[0].group_size == 4);
  CHECK(tl.collectives[0].link == "InfiniBand NDR 400 Gb/s");
  CHECK(tl.collectives[0].link_tier == LinkTierKind::network);
  CHECK(tl.collectives[1].seq == 2);

  std::map<SliceKind, int> kinds;
  for (const DeviceSlice& s : tl.slices) {
    kinds[s.kind]++;
    if (s.kind == SliceKind::comm_wait) {
      CHECK(s.start_us == 20.0);
      CHECK(s.end_us == 30.0);
      CHECK(s.collective == 0);
    }
  }
  CHECK(kinds[SliceKind::compute] == 1);
  CHECK(kinds[SliceKind::comm] == 3);  // two collectives and the directly launched nccl kernel
  CHECK(kinds[SliceKind::comm_wait] == 1);
  CHECK(kinds[SliceKind::memcpy] == 1);
  CHECK(kinds[SliceKind::memset] == 1);
}

TEST_CASE("flow ids are unique across ranks and files are deterministic", "[trace]") {
  TempDir dir("shardlab_test_trace");
  auto flow_ids = [](const json& doc) {
    std::set<uint64_t> ids;
    for (const json& e : doc["traceEvents"])
      if (e["ph"] == "s") ids.insert(e["id"].get<uint64_t>());
    return ids;
  };
  TraceRecorder t0 = make_trace(0), t1 = make_trace(1), t1_again = make_trace(1);
  const auto r0 = flow_ids(write_and_parse(t0, dir.path / "rank0.json"));
  const auto r1 = flow_ids(write_and_parse(t1, dir.path / "rank1.json"));
  REQUIRE(!r0.empty());
  std::vector<uint64_t> common;
  std::set_intersection(r0.begin(), r0.end(), r1.begin(), r1.end(), std::back_inserter(common));
  CHECK(common.empty());

  std::string again;
  write_and_parse(t1_again, dir.path / "again" / "rank1.json", &again);
  CHECK(again == read_text(dir.path / "rank1.json"));
}

TEST_CASE("trace write failure names the path", "[trace]") {
  TempDir dir("shardlab_test_trace");
  fs::create_directories(dir.path);
  std::ofstream(dir.path / "file") << "x";
  const std::string bad = (dir.path / "file" / "rank0.json").string();  // a file as a directory
  try {
    TraceRecorder(0, 1, 0).write(bad, "mpi", 0, json::array(), json::object());
    FAIL("write did not throw");
  } catch (const std::runtime_error& e) {
    CHECK(std::string(e.what()).find(bad) != std::string::npos);
  }
}

TEST_CASE("a streamed trace holds every step flushed so far, and write() replaces it with the whole file",
          "[trace]") {
  TempDir dir("shardlab_test_trace");
  const fs::path streamed = dir.path / "streamed" / "rank1.json", plain = dir.path / "plain" / "rank1.json";
  const json devices = json::array({{{"name", "sim H100"}}});
  const json marked = {{"chapter", "ch01"}, {"incomplete", true}};
  // Step 3 on top of make_trace's two steps, on either recorder.
  const auto step3 = [](TraceRecorder& t) {
    t.name_stream(21, "stream 21 late");  // metadata recorded mid-run goes to the stream too
    const uint64_t c = t.runtime_call("cudaLaunchKernel", 81'000, 300, true);
    t.kernel(kCompute, "gemm", 82'000, 5'000, c, 1e9, 1e6);
    t.step(3, 80'000, 10'000);
  };

  TraceRecorder t = make_trace(1);
  t.begin_stream(streamed.string(), "mpi", 5, devices, marked);  // the parent directory is created
  REQUIRE(t.streaming());
  // The file is the header and every line so far, cut after the last one: closing the array
  // and the object gives JSON that holds them all.
  const auto read_closed = [&] { return json::parse(read_text(streamed) + "\n]}\n"); };
  json doc = read_closed();
  CHECK(doc["otherData"] == marked);
  CHECK(doc["distributedInfo"]["rank"] == 1);
  CHECK(doc["traceEvents"].size() == t.event_count() + 10);  // make_trace's 10 metadata events

  step3(t);
  t.flush_stream();
  doc = read_closed();
  REQUIRE(doc["traceEvents"].size() == t.event_count() + 12);
  CHECK(doc["traceEvents"].back()["name"] == "ProfilerStep#3");
  t.flush_stream();  // nothing new: nothing appended
  CHECK(read_closed().size() == doc.size());

  // write() ends the stream and puts the whole file in its place: the bytes a recorder that
  // never streamed writes, so a finished run's traces stay deterministic.
  TraceRecorder u = make_trace(1);
  step3(u);
  const json done = {{"chapter", "ch01"}};
  t.write(streamed.string(), "mpi", 5, devices, done);
  u.write(plain.string(), "mpi", 5, devices, done);
  CHECK(!t.streaming());
  CHECK(read_text(streamed) == read_text(plain));
  CHECK(!fs::exists(streamed.string() + ".tmp"));
}

TEST_CASE("a stream that cannot be written throws naming the file and stops", "[trace]") {
  TempDir dir("shardlab_test_trace");
  fs::create_directories(dir.path);
  std::ofstream(dir.path / "file") << "x";
  TraceRecorder t(0, 1, 0);
  const std::string bad = (dir.path / "file" / "rank0.json").string();
  CHECK_THROWS_WITH(t.begin_stream(bad, "mpi", 0, json::array(), json::object()),
                    Catch::Contains("rank0.json"));
  CHECK(!t.streaming());
  t.flush_stream();  // no stream: nothing to do, no error
  if (fs::exists("/dev/full")) {
    // A full disk: the file's temporary is a link to /dev/full, so the header's write fails with
    // errno's words, and nothing named rank0.json is left.
    const fs::path full = dir.path / "full";
    fs::create_directories(full);
    fs::create_symlink("/dev/full", full / "rank0.json.tmp");
    CHECK_THROWS_WITH(t.begin_stream((full / "rank0.json").string(), "mpi", 0, json::array(), json::object()),
                      Catch::Contains("No space left on device"));
    CHECK(!t.streaming());
    CHECK(!fs::exists(full / "rank0.json"));
  }
}

TEST_CASE("a gpu range spans the slices launched onto its stream while it was open, whenever they land", "[trace]") {
  TempDir dir("shardlab_test_trace_ranges");
  TraceRecorder t(0, 1, 0);
  t.name_stream(kCompute, "stream 7 compute");
  t.name_stream(kComm, "stream 13 p2p");
  const uint64_t before = t.runtime_call("cudaLaunchKernel", 0, 100, true);
  t.kernel(kCompute, "earlier", 100, 900, before, 0, 0);  // launched before the range: outside it

  // A simulated device records slices as it launches them, inside the range.
  const uint64_t forward = t.open_gpu_range(kCompute, "forward mb 0");
  uint64_t c = t.runtime_call("cudaLaunchKernel", 1'000, 100, true);
  t.kernel(kCompute, "matmul", 2'000, 3'000, c, 0, 0);
  c = t.runtime_call("cudaLaunchKernel", 1'200, 100, true);
  t.kernel(kComm, "ncclDevKernel_SendRecv", 1'500, 9'000, c, 0, 0);  // another stream: not in it
  c = t.runtime_call("cudaLaunchKernel", 1'400, 100, true);
  t.kernel(kCompute, "gelu", 6'000, 1'000, c, 0, 0);
  t.close_gpu_range(forward);

  // A real GPU records them after the range closed; the range waits for a later launch on its
  // stream to be written.
  const uint64_t backward = t.open_gpu_range(kCompute, "backward mb 0");
  const uint64_t b1 = t.runtime_call("cudaLaunchKernel", 8'000, 100, true);
  const uint64_t b2 = t.runtime_call("cudaLaunchKernel", 8'200, 100, true);
  t.close_gpu_range(backward);
  const uint64_t empty = t.open_gpu_range(kCompute, "nothing launched");
  t.close_gpu_range(empty);
  const uint64_t after = t.runtime_call("cudaLaunchKernel", 9'000, 100, true);
  t.kernel(kCompute, "matmul_backward", 9'000, 2'000, b1, 0, 0);
  t.kernel(kCompute, "gelu_backward", 11'000, 500, b2, 0, 0);
  const size_t events_before_last = t.event_count();
  t.kernel(kCompute, "adamw", 12'000, 1'000, after, 0, 0);
  CHECK(t.event_count() == events_before_last + 3);  // the kernel, its flow end, and the backward range

  const json doc = write_and_parse(t, dir.path / "rank0.json");
  std::map<std::string, std::pair<int64_t, int64_t>> ranges;
  for (const json& e : doc["traceEvents"])
    if (e.value("cat", "") == "gpu_user_annotation") {
      CHECK(e["pid"] == 0);
      CHECK(e["tid"] == kCompute);
      CHECK(e["args"]["stream"] == kCompute);
      ranges[e["name"]] = {to_ns(e["ts"]), to_ns(e["ts"]) + to_ns(e["dur"])};
    }
  CHECK(ranges.size() == 2);  // the range with nothing launched in it is not written
  CHECK(ranges["forward mb 0"] == std::pair<int64_t, int64_t>{2'000, 7'000});
  CHECK(ranges["backward mb 0"] == std::pair<int64_t, int64_t>{9'000, 11'500});
  // The metrics see kernels only: a range is no work of its own.
  CHECK(std::none_of(t.timeline().slices.begin(), t.timeline().slices.end(),
                     [](const DeviceSlice& s) { return s.start_us == 2.0 && s.end_us == 7.0; }));
}
