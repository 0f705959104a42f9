// Metrics library: hand-built timelines with known answers.
#include <catch2/catch.hpp>

#include "trace/metrics.h"
#include "trace/metrics_json.h"

using namespace shardlab;

namespace {

DeviceSlice slice(double a, double b, SliceKind kind, int stream = 7) { return {a, b, stream, kind, -1}; }

}  // namespace

TEST_CASE("union_length: empty, nested, touching, clipped", "[metrics]") {
  CHECK(union_length({}, 0, 100) == 0);
  CHECK(union_length({{0, 10}, {2, 5}}, 0, 100) == 10);            // nested
  CHECK(union_length({{20, 30}, {0, 10}, {10, 15}}, 0, 100) == 25);  // touching, unsorted
  CHECK(union_length({{0, 10}, {5, 20}}, 0, 100) == 20);           // overlapping
  CHECK(union_length({{-5, 5}, {95, 120}}, 0, 100) == 10);         // clipped at both ends
  CHECK(union_length({{5, 5}, {9, 3}, {200, 300}}, 0, 100) == 0);   // empty, reversed, outside
}

TEST_CASE("range_metrics: compute, comm, overlap, exposed, idle", "[metrics]") {
  RankTimeline tl;
  tl.slices = {slice(0, 10, SliceKind::compute), slice(20, 30, SliceKind::compute),
               slice(5, 25, SliceKind::comm, 13)};
  const RangeMetrics m = range_metrics(tl, 0, 40);
  CHECK(m.window_us == 40);
  CHECK(m.compute_us == 20);
  CHECK(m.comm_us == 20);
  CHECK(m.overlap_us == 10);
  CHECK(m.exposed_comm_us == 10);
  CHECK(m.comm_wait_us == 0);
  CHECK(m.memcpy_us == 0);
  CHECK(m.idle_us == 10);

  // A window cutting through slices clips them.
  const RangeMetrics half = range_metrics(tl, 8, 22);
  CHECK(half.compute_us == 4);
  CHECK(half.comm_us == 14);
  CHECK(half.overlap_us == 4);
  CHECK(half.idle_us == 0);
}

TEST_CASE("range_metrics: waits count as comm, copies as memcpy, streams in parallel count once", "[metrics]") {
  RankTimeline tl;
  tl.slices = {slice(0, 10, SliceKind::comm_wait, 13), slice(10, 20, SliceKind::comm, 13),
               slice(15, 30, SliceKind::comm, 14),  // a second comm stream overlapping the first
               slice(5, 12, SliceKind::compute),    slice(6, 8, SliceKind::compute, 8),
               slice(40, 45, SliceKind::memcpy),    slice(44, 50, SliceKind::memset)};
  const RangeMetrics m = range_metrics(tl, 0, 60);
  CHECK(m.comm_us == 30);
  CHECK(m.comm_wait_us == 10);
  CHECK(m.compute_us == 7);
  CHECK(m.overlap_us == 7);  // compute ran during both the wait and the transfer
  CHECK(m.exposed_comm_us == 23);
  CHECK(m.memcpy_us == 10);
  CHECK(m.idle_us == 60 - 30 - 10);
}

TEST_CASE("range_metrics: peak memory includes the sample in effect at the window start", "[metrics]") {
  RankTimeline tl;
  tl.memory = {{0, 100, 1000}, {5, 900, 4000}, {12, 300, 2000}, {15, 200, 2000}, {30, 5000, 9000}};
  RangeMetrics m = range_metrics(tl, 10, 30);  // 900/4000 set at t=5 is still in effect at 10
  CHECK(m.peak_allocated == 900);
  CHECK(m.peak_reserved == 4000);
  m = range_metrics(tl, 12, 20);  // a sample exactly at the start is the one in effect
  CHECK(m.peak_allocated == 300);
  CHECK(m.peak_reserved == 2000);
  CHECK(range_metrics(RankTimeline{}, 0, 10).peak_allocated == 0);
}

TEST_CASE("compute_union and uncovered_length: a comm slice's share of exposed comm", "[metrics]") {
  RankTimeline tl;
  tl.slices = {slice(0, 10, SliceKind::compute), slice(8, 12, SliceKind::compute, 9), slice(20, 30, SliceKind::compute),
               slice(5, 25, SliceKind::comm, 13), slice(40, 45, SliceKind::memcpy)};
  const auto hiding = compute_union(tl);
  CHECK(hiding == std::vector<std::pair<double, double>>{{0, 12}, {20, 30}});
  CHECK(uncovered_length(5, 25, 0, 40, hiding) == 8);    // [12, 20) is exposed
  CHECK(uncovered_length(5, 25, 15, 40, hiding) == 5);   // clipped to the window: [15, 20)
  CHECK(uncovered_length(30, 35, 0, 40, hiding) == 5);   // after every compute kernel
  CHECK(uncovered_length(2, 9, 0, 40, hiding) == 0);     // wholly under compute
  CHECK(uncovered_length(50, 60, 0, 40, hiding) == 0);   // outside the window
  // One comm slice: its uncovered length is range_metrics' exposed comm.
  CHECK(uncovered_length(5, 25, 0, 40, hiding) == range_metrics(tl, 0, 40).exposed_comm_us);
}

TEST_CASE("step_metrics: one per step window", "[metrics]") {
  RankTimeline tl;
  tl.rank = 3;
  tl.slices = {slice(0, 10, SliceKind::compute), slice(50, 80, SliceKind::compute), slice(70, 90, SliceKind::comm)};
  tl.steps = {{1, 0, 40}, {2, 40, 100}};
  const auto steps = step_metrics(tl);
  REQUIRE(steps.size() == 2);
  CHECK(steps[0].rank == 3);
  CHECK(steps[0].step == 1);
  CHECK(steps[0].step_us == 40);
  CHECK(steps[0].idle_us == 30);
  CHECK(steps[1].step == 2);
  CHECK(steps[1].step_us == 60);
  CHECK(steps[1].compute_us == 30);
  CHECK(steps[1].overlap_us == 10);
  CHECK(steps[1].exposed_comm_us == 10);
}

TEST_CASE("bus_factor follows nccl-tests", "[metrics]") {
  CHECK(bus_factor("allreduce", 4) == Approx(1.5));
  CHECK(bus_factor("all_reduce", 8) == Approx(1.75));
  CHECK(bus_factor("allgather", 4) == Approx(0.75));
  CHECK(bus_factor("_allgather_base", 4) == Approx(0.75));
  CHECK(bus_factor("reduce_scatter", 2) == Approx(0.5));
  CHECK(bus_factor("reducescatter", 2) == Approx(0.5));
  CHECK(bus_factor("broadcast", 4) == 1);
  CHECK(bus_factor("sendrecv", 2) == 1);
  CHECK(bus_factor("reduce", 4) == 1);
  CHECK(bus_factor("something_new", 4) == 1);
  CHECK(bus_factor("allreduce", 1) == 0);  // one rank moves nothing over a bus
}

TEST_CASE("collective_metrics: bytes, bandwidths and step assignment", "[metrics]") {
  RankTimeline tl;
  tl.rank = 1;
  tl.steps = {{1, 0, 100}, {2, 100, 200}};
  // 1e6 floats all-reduced in 1000 us: 4 MB / 1 ms = 4 GB/s.
  tl.collectives = {{"allreduce", 1'000'000, 1'000'000, 4, 4, "0", 1, 10, 1010, "NVLink", LinkTierKind::intra_node},
                    {"allgather", 250'000, 1'000'000, 4, 4, "0", 2, 150, 1150, "IB", LinkTierKind::network},
                    {"reduce_scatter", 1'000'000, 250'000, 2, 4, "0", 3, 250, 1250, "", LinkTierKind::unknown}};
  const auto cm = collective_metrics(tl);
  REQUIRE(cm.size() == 3);

  CHECK(cm[0].rank == 1);
  CHECK(cm[0].step == 1);
  CHECK(cm[0].name == "allreduce");
  CHECK(cm[0].group_size == 4);
  CHECK(cm[0].bytes == 4'000'000);
  CHECK(cm[0].time_us == 1000);
  CHECK(cm[0].algbw_GBps == Approx(4.0));
  CHECK(cm[0].busbw_GBps == Approx(6.0));  // x 2(n-1)/n = 1.5
  CHECK(cm[0].link == "NVLink");
  CHECK(cm[0].link_tier == LinkTierKind::intra_node);
  CHECK(cm[0].link_bytes == 6'000'000);  // busbw's bytes: 4 MB x 1.5

  CHECK(cm[1].step == 2);
  CHECK(cm[1].bytes == 4'000'000);  // the gathered output
  CHECK(cm[1].busbw_GBps == Approx(3.0));
  CHECK(cm[1].link_tier == LinkTierKind::network);
  CHECK(cm[1].link_bytes == 3'000'000);

  CHECK(cm[2].step == -1);          // starts after the last step
  CHECK(cm[2].bytes == 2'000'000);  // the full input
  CHECK(cm[2].algbw_GBps == Approx(2.0));
  CHECK(cm[2].busbw_GBps == Approx(1.5));
  CHECK(cm[2].link_tier == LinkTierKind::unknown);
  CHECK(cm[2].link_bytes == 1'500'000);  // a rank sends it whatever the trace says of the link

  const CollectiveRecord send{"send", 10, 0, 8, 2, "pp", 1, 0, 0, "", LinkTierKind::unknown};
  CHECK(collective_bytes(send) == 80);
  CHECK(collective_metrics(RankTimeline{.rank = 0, .slices = {}, .collectives = {send}, .steps = {}, .memory = {}, .allocator = {}, .stream_ranges = {}})
            .front()
            .algbw_GBps == 0);  // zero duration: no bandwidth rather than inf
}

TEST_CASE("collective_size_text: a collective's bytes, a sendrecv's two sides", "[metrics]") {
  const auto record = [](const char* name, int64_t in, int64_t out) {
    return CollectiveRecord{name, in, out, 4, 4, "0", 1, 0, 1, "", LinkTierKind::unknown};
  };
  CHECK(collective_size_text(record("allreduce", 786'432, 786'432)) == "3.00 MiB");
  CHECK(collective_size_text(record("allgather", 196'608, 786'432)) == "3.00 MiB");  // the gathered output
  CHECK(collective_size_text(record("sendrecv", 786'432, 786'432)) == "sends 3.00 MiB, receives 3.00 MiB");
  CHECK(collective_size_text(record("sendrecv", 0, 786'432)) == "receives 3.00 MiB");  // a first stage's gradient
  CHECK(collective_size_text(record("sendrecv", 786'432, 0)) == "sends 3.00 MiB");     // a first stage's activation
  CHECK(collective_size_text(record("sendrecv", 0, 0)) == "0 B");
}

TEST_CASE("range_metrics: link bytes by tier, as the ring model sends them, at group sizes 1 to 4", "[metrics]") {
  RankTimeline tl;
  tl.steps = {{1, 0, 100}, {2, 100, 200}};
  auto record = [](std::string name, int64_t in, int64_t out, int dtype_bytes, int n, double start,
                   LinkTierKind tier) {
    return CollectiveRecord{std::move(name), in, out, dtype_bytes, n, "g", 1, start, start + 50,
                            tier == LinkTierKind::unknown ? "" : "a link", tier};
  };
  tl.collectives = {
      // Step 1.
      // All-gather of 250,000 floats per rank into 1,000,000 over 4 ranks on one node:
      // S = 4,000,000 bytes gathered, each rank sends (n-1)/n of it = 3,000,000.
      record("allgather", 250'000, 1'000'000, 4, 4, 10, LinkTierKind::intra_node),
      // All-reduce of 1,000,000 floats over 3 ranks across nodes: 2(n-1)/n x 4,000,000 =
      // 5,333,333.33... bytes, 5,333,333 to the nearest byte. It ends after step 1 does, but
      // counts where it starts.
      record("allreduce", 1'000'000, 1'000'000, 4, 3, 80, LinkTierKind::network),
      // Step 2.
      // Reduce-scatter of 1,000,000 bf16 (2,000,000 bytes) over 2 ranks across nodes:
      // (n-1)/n x 2,000,000 = 1,000,000.
      record("reduce_scatter", 1'000'000, 500'000, 2, 2, 100, LinkTierKind::network),
      // An all-reduce over 1 rank sends nothing: the factor 2(n-1)/n is 0.
      record("allreduce", 4096, 4096, 4, 1, 120, LinkTierKind::network),
      // A record that names no tier (a PyTorch trace) counts in neither.
      record("allreduce", 1'000'000, 1'000'000, 4, 4, 130, LinkTierKind::unknown),
      // Before the first step: in no step's window.
      record("broadcast", 1000, 1000, 4, 4, -50, LinkTierKind::intra_node),
  };
  const auto steps = step_metrics(tl);
  REQUIRE(steps.size() == 2);
  CHECK(steps[0].intra_node_bytes == 3'000'000);
  CHECK(steps[0].network_bytes == 5'333'333);
  CHECK(steps[1].intra_node_bytes == 0);
  CHECK(steps[1].network_bytes == 1'000'000 + 0);

  // Any window: by start time, [t0, t1).
  const RangeMetrics early = range_metrics(tl, -100, 80);  // the broadcast (4,000 B x 1) and the all-gather
  CHECK(early.intra_node_bytes == 4'000 + 3'000'000);
  CHECK(early.network_bytes == 0);
  CHECK(range_metrics(tl, 80, 101).network_bytes == 5'333'333 + 1'000'000);
  CHECK(range_metrics(tl, 200, 300).network_bytes == 0);
}

TEST_CASE("range_metrics scales to a million slices", "[metrics]") {
  RankTimeline tl;
  for (int i = 0; i < 500'000; ++i) {
    const double t = i * 10.0;
    tl.slices.push_back(slice(t, t + 6, SliceKind::compute));
    tl.slices.push_back(slice(t + 4, t + 8, SliceKind::comm, 13));
  }
  const RangeMetrics m = range_metrics(tl, 0, 5'000'000);
  CHECK(m.compute_us == Approx(3'000'000));
  CHECK(m.comm_us == Approx(2'000'000));
  CHECK(m.overlap_us == Approx(1'000'000));
  CHECK(m.idle_us == Approx(1'000'000));
}

TEST_CASE("metrics JSON: every figure under its name and unit, steps and windows alike", "[metrics]") {
  StepMetrics s;
  s.step = 2;
  s.window_us = s.step_us = 100;
  s.compute_us = 60;
  s.copy_overlap_us = 3;
  s.peak_allocated = 1 << 20;
  s.segment_mallocs = 4;
  s.intra_node_bytes = 3'000'000;
  s.network_bytes = 5'333'333;
  const nlohmann::json step = to_json(s), window = to_json(static_cast<const RangeMetrics&>(s));
  const std::vector<std::string> figures = {
      "compute_us",       "comm_us",        "overlap_us",      "exposed_comm_us", "comm_wait_us",
      "memcpy_us",        "copy_overlap_us", "idle_us",        "peak_allocated_bytes", "peak_reserved_bytes",
      "segment_mallocs",  "segment_frees",  "alloc_retries",   "ooms",            "intra_node_bytes",
      "network_bytes"};
  for (const std::string& key : figures) {
    INFO(key);
    CHECK(step.contains(key));
    CHECK(step.at(key) == window.at(key));
  }
  CHECK(step.size() == figures.size() + 2);  // and "step", "step_us"
  CHECK(step["step"] == 2);
  CHECK(step["step_us"] == 100.0);
  CHECK(window.size() == figures.size() + 1);  // and "window_us"
  CHECK(window["window_us"] == 100.0);
  CHECK(step["network_bytes"] == 5'333'333);
  CHECK(step["copy_overlap_us"] == 3.0);

  const CollectiveRecord ar{"allreduce", 1000, 1000, 4, 4, "0", 1, 0, 10, "NVLink4", LinkTierKind::intra_node};
  const nlohmann::json c = to_json(collective_metrics(ar));
  CHECK(c["link_tier"] == "intra-node");
  CHECK(c["link_bytes"] == 6000);  // 4,000 bytes x 2(n-1)/n = 1.5
  CHECK(c["bytes"] == 4000);
}
