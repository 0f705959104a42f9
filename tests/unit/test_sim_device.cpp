// The simulated GPU's timing semantics (README.md, "The simulated GPU"), one rule
// per test, on hand-computed numbers, plus the race check.
#include <catch2/catch.hpp>

#include <vector>

#include "device/sim_device.h"

using namespace shardlab;

namespace {

// A profile with round numbers so every expected time can be worked out by hand.
Profile round_profile() {
  Profile p = load_profile("h100-8");
  p.launch_us = 5;
  p.runtime_call_us = 1;
  p.malloc_us = 0;
  p.free_us = 0;
  p.kernel_overhead_us = 0;
  p.peak_tflops_f32 = 1;        // 1e6 FLOP per us ...
  p.elementwise_efficiency = 1; // ... at full efficiency
  p.hbm_GBps = 1e9;             // memory never the bound
  p.h2d_GBps = 1;               // 1000 bytes per us
  p.memcpy_latency_us = 0;
  return p;
}

// A kernel of `us` microseconds on the round profile, touching `acc`.
void work(SimDevice& d, Stream& s, double us, std::vector<Access> acc = {}) {
  d.launch(s, Kernel{"work", us * 1e6, 0, DType::f32, KernelClass::elementwise, std::move(acc)}, {});
}

std::vector<DeviceSlice> slices_on(const SimDevice& d, int stream) {
  std::vector<DeviceSlice> out;
  for (const auto& s : const_cast<SimDevice&>(d).trace().timeline().slices)
    if (s.stream == stream) out.push_back(s);
  return out;
}

}  // namespace

TEST_CASE("sim: a launch costs the CPU launch_us and the kernel starts once launched", "[sim]") {
  SimDevice d(round_profile(), ComputeMode::skip, 0, 1);
  work(d, d.compute_stream(), 100);
  CHECK(d.now_ns() == 5000);
  const auto s = slices_on(d, d.compute_stream().id());
  REQUIRE(s.size() == 1);
  CHECK(s[0].start_us == Approx(5.0));
  CHECK(s[0].end_us == Approx(105.0));
}

TEST_CASE("sim: one stream runs its ops in order, the CPU runs ahead", "[sim]") {
  SimDevice d(round_profile(), ComputeMode::skip, 0, 1);
  Stream& s = d.compute_stream();
  work(d, s, 100);
  work(d, s, 100);
  work(d, s, 100);
  CHECK(d.now_ns() == 15000);  // three launches: the CPU is far ahead of the GPU
  const auto sl = slices_on(d, s.id());
  REQUIRE(sl.size() == 3);
  CHECK(sl[1].start_us == Approx(105.0));  // waits for the first, not for its launch at 10 us
  CHECK(sl[2].start_us == Approx(205.0));
  CHECK(d.stream_ready_ns(s) == 305000);
}

TEST_CASE("sim: two streams overlap, an event and a wait order them", "[sim]") {
  SimDevice d(round_profile(), ComputeMode::skip, 0, 1);
  Stream& a = d.compute_stream();
  Stream& b = d.create_stream("side");
  work(d, a, 100);                 // a: [5, 105)
  work(d, b, 50);                  // b: [10, 60): overlaps a
  const Event e = d.record(a);     // at a's ready time, 105; CPU 11
  d.wait(b, e);                    // CPU 12
  work(d, b, 10);                  // launched at 17, must start at 105
  const auto sb = slices_on(d, b.id());
  REQUIRE(sb.size() == 2);
  CHECK(sb[0].start_us == Approx(10.0));
  CHECK(sb[1].start_us == Approx(105.0));
  CHECK(sb[1].end_us == Approx(115.0));
}

TEST_CASE("sim: synchronize moves the CPU clock to the event, stream or device", "[sim]") {
  SimDevice d(round_profile(), ComputeMode::skip, 0, 1);
  Stream& a = d.compute_stream();
  Stream& b = d.create_stream("side");
  work(d, a, 100);  // [5, 105)
  work(d, b, 300);  // [10, 310)
  const Event e = d.record(a);
  CHECK_FALSE(d.query(e));  // CPU at 12 us: not done
  d.synchronize(e);
  CHECK(d.now_ns() == 105000);
  CHECK(d.query(e));
  d.synchronize(b);
  CHECK(d.now_ns() == 310000);
  work(d, a, 10);  // launched at 310: starts at 315
  d.synchronize();
  CHECK(d.now_ns() == 325000);
}

TEST_CASE("sim: an event recorded before any work completes at once, one recorded late includes later work", "[sim]") {
  SimDevice d(round_profile(), ComputeMode::skip, 0, 1);
  Stream& a = d.compute_stream();
  const Event early = d.record(a);  // nothing queued: complete at the CPU time (0)
  work(d, a, 100);                  // [6, 106)
  const Event late = d.record(a);
  d.synchronize(early);
  CHECK(d.now_ns() == 8000);  // the sync's own runtime call, no wait
  d.synchronize(late);
  CHECK(d.now_ns() == 106000);
}

TEST_CASE("sim: a memcpy is charged latency + bytes / bandwidth on its stream", "[sim]") {
  SimDevice d(round_profile(), ComputeMode::real, 0, 1);
  Tensor host = d.host_empty({250}, DType::f32, "h");
  Tensor dev = d.empty({250}, DType::f32, d.compute_stream(), "d");
  for (int i = 0; i < 250; ++i) host.f32()[i] = static_cast<float>(i);
  d.memcpy(d.compute_stream(), dev, host);  // 1000 bytes at 1000 B/us: 1 us
  Tensor back = d.host_empty({250}, DType::f32, "h2");
  d.memcpy(d.compute_stream(), back, dev);
  d.synchronize();
  CHECK(back.f32()[249] == 249.0f);
  const auto& tl = d.trace().timeline();
  REQUIRE(tl.slices.size() == 2);
  CHECK(tl.slices[0].kind == SliceKind::memcpy);
  CHECK(tl.slices[0].end_us - tl.slices[0].start_us == Approx(1.0));
  d.free(dev);
  d.host_free(host);
  d.host_free(back);
}

TEST_CASE("sim: the race check reports a missing wait, naming both ops, streams and the buffer", "[sim][race]") {
  for (const bool with_wait : {false, true}) {
    SimDevice d(round_profile(), ComputeMode::skip, 0, 1);
    Stream& compute = d.compute_stream();
    Stream& copy = d.create_stream("copy");
    Tensor buf = d.empty({1024}, DType::f32, copy, "activations");
    work(d, copy, 10, {writes(buf)});
    if (with_wait) d.wait(compute, d.record(copy));
    work(d, compute, 10, {reads(buf)});
    if (with_wait) {
      CHECK(d.race_reports().empty());
    } else {
      REQUIRE(d.race_reports().size() == 1);
      const std::string& r = d.race_reports()[0];
      CHECK_THAT(r, Catch::Contains("race on 'activations'"));
      CHECK_THAT(r, Catch::Contains("stream 7 (compute) reads"));
      CHECK_THAT(r, Catch::Contains("stream 8 (copy) wrote"));
      CHECK_THAT(r, Catch::Contains("work"));
    }
  }
}

TEST_CASE("sim: the race check: reads do not conflict with reads, disjoint views do not conflict", "[sim][race]") {
  SimDevice d(round_profile(), ComputeMode::skip, 0, 1);
  Stream& a = d.compute_stream();
  Stream& b = d.create_stream("b");
  Tensor flat = d.empty({1000}, DType::f32, a, "flat");
  work(d, a, 1, {writes(flat)});
  d.synchronize();
  work(d, a, 1, {reads(flat)});
  work(d, b, 1, {reads(flat)});                       // two readers: fine
  work(d, a, 1, {writes(flat.view(0, {500}))});       // conflicts with b's read of all of it
  REQUIRE(d.race_reports().size() == 1);
  d.synchronize();
  work(d, a, 1, {writes(flat.view(0, {500}))});
  work(d, b, 1, {writes(flat.view(500, {500}))});     // disjoint halves: fine
  CHECK(d.race_reports().size() == 1);
}

TEST_CASE("tensor: overlaps compares byte ranges, on the device with or without memory and on the host", "[sim]") {
  for (ComputeMode mode : {ComputeMode::real, ComputeMode::skip}) {
    SimDevice d(round_profile(), mode, 0, 1);
    Stream& s = d.compute_stream();
    Tensor flat = d.empty({1000}, DType::f32, s, "flat");
    Tensor other = d.empty({1000}, DType::f32, s, "other");
    CHECK(overlaps(flat, flat));
    CHECK(overlaps(flat, flat.view(999, {1})));
    CHECK(overlaps(flat.view(0, {500}), flat.view(499, {2})));
    CHECK_FALSE(overlaps(flat.view(0, {500}), flat.view(500, {500})));  // neighbours share no byte
    CHECK_FALSE(overlaps(flat, other));
    CHECK_FALSE(overlaps(flat.view(0, {0}), flat));                     // empty
    Tensor host = d.host_empty({1000}, DType::f32, "host");
    CHECK_FALSE(overlaps(host, flat));
    CHECK(overlaps(host, host.view(10, {10})) == (mode == ComputeMode::real));  // skip: no host memory to share
    CHECK_FALSE(overlaps(host.view(0, {10}), host.view(10, {10})));
    d.host_free(host);
  }
}

TEST_CASE("device: copies to and from the host share one staging block, grown when a copy needs more", "[sim]") {
  SimDevice d(round_profile(), ComputeMode::real, 0, 1);
  Stream& s = d.compute_stream();
  const Tensor small = d.staging({10}, DType::f32);
  REQUIRE(small.data != nullptr);
  CHECK(small.on_host());
  CHECK(d.staging({3}, DType::i32).data == small.data);  // fits: the same block
  const Tensor big = d.staging({1000}, DType::f32);
  CHECK(d.staging({250, 4}, DType::f32).data == big.data);

  // Round trips of several sizes through the one block, the largest in the middle.
  for (int64_t n : {int64_t{7}, int64_t{4096}, int64_t{5}}) {
    std::vector<float> in(static_cast<size_t>(n)), out(static_cast<size_t>(n), -1.0f);
    for (int64_t i = 0; i < n; ++i) in[static_cast<size_t>(i)] = static_cast<float>(i) * 0.5f;
    Tensor t = d.empty({n}, DType::f32, s, "t");
    copy_to_device(d, s, t, in.data());
    copy_to_host(d, s, out.data(), t);
    CHECK(out == in);
    d.free(t);
  }
  CHECK(d.staging({4096}, DType::f32).data != nullptr);

  SimDevice skip(round_profile(), ComputeMode::skip, 0, 1);
  CHECK(skip.staging({10}, DType::f32).data == nullptr);  // --compute skip: no memory anywhere
}

TEST_CASE("sim: a host sync orders later launches after the work it waited for", "[sim][race]") {
  SimDevice d(round_profile(), ComputeMode::skip, 0, 1);
  Stream& a = d.compute_stream();
  Stream& b = d.create_stream("b");
  Tensor t = d.empty({16}, DType::f32, a, "t");
  work(d, b, 10, {writes(t)});
  d.synchronize(b);
  work(d, a, 10, {reads(t)});
  CHECK(d.race_reports().empty());
}

TEST_CASE("sim: use after free is reported", "[sim][race]") {
  SimDevice d(round_profile(), ComputeMode::skip, 0, 1);
  Stream& a = d.compute_stream();
  Tensor t = d.empty({16}, DType::f32, a, "weights");
  Tensor stale = t;
  d.free(t);
  work(d, a, 1, {reads(stale)});
  REQUIRE(d.race_reports().size() == 1);
  CHECK_THAT(d.race_reports()[0], Catch::Contains("use after free"));
  CHECK_THAT(d.race_reports()[0], Catch::Contains("'weights'"));
}

TEST_CASE("sim: freeing without record_stream lets another stream's pending read race the next owner", "[sim][race]") {
  for (const bool record : {false, true}) {
    SimDevice d(round_profile(), ComputeMode::skip, 0, 1);
    Stream& a = d.compute_stream();
    Stream& b = d.create_stream("comm");
    Tensor t = d.empty({256}, DType::f32, a, "gathered");
    work(d, a, 1, {writes(t)});
    d.wait(b, d.record(a));
    work(d, b, 1000, {reads(t)});  // long read on b
    if (record) d.record_stream(t, b);
    const uint64_t old_segment = t.segment, old_offset = t.offset;
    d.free(t);
    Tensor u = d.empty({256}, DType::f32, a, "next");
    work(d, a, 1, {writes(u)});
    if (record) {
      CHECK(d.race_reports().empty());  // held back until b's read completed: a new block
      CHECK_FALSE((u.segment == old_segment && u.offset == old_offset));
    } else {
      CHECK((u.segment == old_segment && u.offset == old_offset));  // same-stream reuse at once
      REQUIRE(d.race_reports().size() == 1);
      CHECK_THAT(d.race_reports()[0], Catch::Contains("use after free (memory reused)"));
      CHECK_THAT(d.race_reports()[0], Catch::Contains("'gathered'"));
      CHECK_THAT(d.race_reports()[0], Catch::Contains("record_stream"));
    }
  }
}

TEST_CASE("sim: memory counters go into the trace timeline", "[sim]") {
  SimDevice d(round_profile(), ComputeMode::skip, 0, 1);
  Tensor t = d.empty({1 << 20}, DType::f32, d.compute_stream(), "big");  // 4 MiB: a 20 MiB segment
  const auto& mem = d.trace().timeline().memory;
  REQUIRE_FALSE(mem.empty());
  CHECK(mem.back().allocated == 4 << 20);
  CHECK(mem.back().reserved == 20 << 20);
  CHECK(t.data == nullptr);  // --compute skip: no real memory
  d.free(t);
  CHECK(d.trace().timeline().memory.back().allocated == 0);
}
