// Flags (parsing and error messages), hardware profiles (every shipped profile loads, every
// constant has a source) and the cost model's formulas.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <numeric>

#include <nlohmann/json.hpp>

#include "comm/comm.h"
#include "device/cost_model.h"
#include "run/flags.h"
#include "run/run_directory.h"
#include "device/profile.h"

using namespace shardlab;

namespace {

struct Parsed {
  int64_t steps = 3;
  double lr = 0.1;
  bool race = false;
  std::string device = "sim";
  Flags flags{"prog"};
  Parsed() {
    flags.add_int("steps", &steps, 1, 100, "steps");
    flags.add_double("lr", &lr, 0.0, 1.0, "learning rate");
    flags.add_bool("race", &race, "race");
    flags.add_choice("device", &device, {"sim", "cuda"}, "device");
  }
  bool parse(std::vector<const char*> args) {
    args.insert(args.begin(), "prog");
    return flags.parse(static_cast<int>(args.size()), args.data());
  }
};

std::string error_of(std::vector<const char*> args) {
  Parsed p;
  try {
    p.parse(std::move(args));
  } catch (const FlagError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("flags: values in both spellings, booleans alone, defaults kept", "[flags]") {
  Parsed p;
  REQUIRE(p.parse({"--steps", "7", "--lr=0.5", "--race", "--device=cuda"}));
  CHECK(p.steps == 7);
  CHECK(p.lr == 0.5);
  CHECK(p.race);
  CHECK(p.device == "cuda");
  Parsed q;
  REQUIRE(q.parse({}));
  CHECK(q.steps == 3);
  CHECK_FALSE(q.race);
  CHECK(q.flags.values()["steps"] == 3);
}

TEST_CASE("flags: --help returns false and usage lists every flag with its default", "[flags]") {
  Parsed p;
  CHECK_FALSE(p.parse({"--help"}));
  const std::string u = p.flags.usage();
  CHECK_THAT(u, Catch::Contains("--steps N"));
  CHECK_THAT(u, Catch::Contains("(default: 3)"));
  CHECK_THAT(u, Catch::Contains("--device {sim, cuda}"));
}

TEST_CASE("flags: errors name the flag and what is allowed", "[flags]") {
  CHECK(error_of({"--steps", "0"}) == "--steps: got '0'; allowed: an integer from 1 to 100");
  CHECK(error_of({"--steps", "3x"}) == "--steps: got '3x'; allowed: an integer from 1 to 100");
  CHECK(error_of({"--steps", "99999999999999999999"}) ==
        "--steps: got '99999999999999999999'; allowed: an integer from 1 to 100");
  CHECK(error_of({"--lr", "nan"}) == "--lr: got 'nan'; allowed: a number from 0 to 1");
  CHECK(error_of({"--device", "tpu"}) == "--device: got 'tpu'; allowed: sim, cuda");
  CHECK(error_of({"--race=maybe"}) == "--race: got 'maybe'; allowed: true or false (or the flag alone)");
  CHECK(error_of({"--steps"}) == "--steps: missing value; allowed: an integer from 1 to 100");
  CHECK(error_of({"--stpes", "3"}) == "unknown flag --stpes; allowed flags: --steps, --lr, --race, --device, --help");
  CHECK(error_of({"steps"}) == "unexpected argument 'steps'; flags look like --name value (see --help)");
}

TEST_CASE("flags: a string value may not be empty, look like a flag, or fail its own check", "[flags]") {
  std::string dir = "runs", name;
  bool debug = false;
  Flags f("prog");
  f.add_string("trace-dir", &dir, "traces");
  f.add_string("run-name", &name, "run (default: the chapter id)", run_name_problem);
  f.add_bool("debug-collectives", &debug, "debug");
  const auto error = [&](std::vector<const char*> args) -> std::string {
    args.insert(args.begin(), "prog");
    try {
      f.parse(static_cast<int>(args.size()), args.data());
    } catch (const FlagError& e) {
      return e.what();
    }
    return "";
  };
  // A forgotten value: the next flag would have become a directory named "--debug-collectives".
  CHECK(error({"--trace-dir", "--debug-collectives"}) ==
        "--trace-dir: got '--debug-collectives'; allowed: a non-empty string that does not start with --");
  CHECK(error({"--run-name", ""}) == "--run-name: got ''; allowed: a non-empty string that does not start with --");
  CHECK(error({"--run-name", "."}) == "--run-name: got '.'; allowed: one directory name, not empty, '.' or '..'");
  CHECK(error({"--run-name=.."}) == "--run-name: got '..'; allowed: one directory name, not empty, '.' or '..'");
  CHECK(error({"--run-name", "a/b"}) ==
        "--run-name: got 'a/b'; allowed: one directory name, without '/' (use --trace-dir for the parent)");
  CHECK(error({"--run-name", "/"}) ==
        "--run-name: got '/'; allowed: one directory name, without '/' (use --trace-dir for the parent)");
  CHECK(error({"--run-name", "ch04 two nodes", "--trace-dir", "../elsewhere"}).empty());
  CHECK(name == "ch04 two nodes");
  CHECK(dir == "../elsewhere");
}

TEST_CASE("flags: checks see the parsed values and the run's shape, in the order added", "[flags]") {
  Parsed p;
  std::vector<std::string> ran;
  p.flags.add_check([&](const RunShape& run) {
    ran.push_back("divides");
    require(p.steps % run.world_size == 0, "--steps", p.steps, "a multiple of " + std::to_string(run.world_size));
  });
  p.flags.add_check([&](const RunShape&) { ran.push_back("second"); });
  REQUIRE(p.parse({"--steps", "6"}));
  CHECK_NOTHROW(p.flags.check(RunShape{3, 8}));
  CHECK(ran == std::vector<std::string>{"divides", "second"});
  // The first failing check stops the others, with a flag error's own form.
  ran.clear();
  CHECK_THROWS_WITH(p.flags.check(RunShape{4, 8}), "--steps: got '6'; allowed: a multiple of 4");
  CHECK(ran == std::vector<std::string>{"divides"});
  CHECK_THROWS_AS(p.flags.check(RunShape{4, 8}), FlagError);
}

TEST_CASE("profiles: every shipped profile loads with sane numbers", "[profile]") {
  const auto names = profile_names();
  CHECK(names == std::vector<std::string>{"a100-8", "cpu-bound", "h100-2x2", "h100-2x8", "h100-2x8-1nic", "h100-8", "h100-8x8", "h200-measured", "pcie-4"});
  for (const auto& n : names) {
    const Profile p = load_profile(n);
    INFO(n);
    CHECK(p.name == n);
    CHECK(p.memory_bytes > (16LL << 30));
    CHECK(p.peak_tflops_bf16 > p.peak_tflops_f32);
    CHECK(p.intra.busbw_GBps > p.inter.busbw_GBps);
    CHECK(p.max_ranks() >= 4);
    CHECK(p.nics_per_node >= 1);
    // A fused attention kernel does not beat a large GEMM on the same GPU.
    CHECK(p.attention_efficiency > 0);
    CHECK(p.attention_efficiency <= p.matmul_efficiency);
  }
  CHECK(load_profile("h100-2x8").max_ranks() == 16);
  CHECK(load_profile("cpu-bound").launch_us == Approx(10 * load_profile("h100-8").launch_us));
}

TEST_CASE("profiles: an unknown name lists the profiles, a constant without a source is refused", "[profile]") {
  CHECK_THROWS_WITH(load_profile("h200-9"), Catch::Contains("known profiles: a100-8, cpu-bound, h100-2x2, h100-2x8, h100-2x8-1nic, h100-8, h100-8x8, h200-measured, pcie-4"));
  const std::string path = "/tmp/shardlab_bad_profile.json";
  {
    std::ifstream in(std::string(SHARDLAB_SOURCE_DIR) + "/common/device/profiles/h100-8.json");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto at = text.find("\"hbm_GBps\"");
    const auto src = text.find("\"source\"", at);
    text.replace(src, 8, "\"sauce\"");
    std::ofstream(path) << text;
  }
  CHECK_THROWS_WITH(load_profile(path), Catch::Contains("field 'gpu.hbm_GBps' must be {\"value\""));
  std::remove(path.c_str());
}

// What the attack on every flag found loading with exit 0: numbers no machine has. Each is
// refused with the constant's name, the value, its unit and the range allowed.
TEST_CASE("profiles: every number is range-checked, naming the constant and its unit", "[profile]") {
  std::ifstream in(std::string(SHARDLAB_SOURCE_DIR) + "/common/device/profiles/h100-2x8.json");
  const nlohmann::json good = nlohmann::json::parse(in);
  const std::string path = "/tmp/shardlab_hostile_profile.json";
  const auto load_with = [&](const std::string& pointer, const nlohmann::json& value) -> std::string {
    nlohmann::json p = good;
    p[nlohmann::json::json_pointer(pointer)] = value;
    std::ofstream(path) << p.dump();
    try {
      load_profile(path);
    } catch (const std::exception& e) {
      return e.what();
    }
    return "";
  };
  CHECK_THAT(load_with("/links/inter/busbw_GBps/value", 1e-300),
             Catch::Contains("'links.inter.busbw_GBps' is 1e-300 GB/s; allowed: a number from 0.01 to 100000 GB/s"));
  CHECK_THAT(load_with("/host/launch_us/value", 1e300), Catch::Contains("'host.launch_us' is 1e+300 us; allowed"));
  CHECK_THAT(load_with("/host/launch_us/value", -5), Catch::Contains("'host.launch_us' is -5 us; allowed: a number from 0 to 10000 us"));
  CHECK_THAT(load_with("/gpu/matmul_efficiency/value", 1.5), Catch::Contains("'gpu.matmul_efficiency' is 1.5"));
  CHECK_THAT(load_with("/gpu/attention_efficiency/value", 0), Catch::Contains("from 0 (exclusive) to 1"));
  CHECK_THAT(load_with("/topology/nodes/value", 2.5), Catch::Contains("'topology.nodes' is 2.5 ; allowed: a whole number"));
  CHECK_THAT(load_with("/gpu/hbm_GBps/value", "fast"), Catch::Contains("'gpu.hbm_GBps' is \"fast\"; allowed: a number"));
  CHECK_THAT(load_with("/gpu/name", 3), Catch::Contains("profile /tmp/shardlab_hostile_profile.json: "));
  CHECK(load_with("/host/launch_us/value", 0).empty());  // a free launch is a thought experiment, not an error
  std::remove(path.c_str());
  // A directory (or a FIFO) given as --profile is refused at once, not read or waited on.
  CHECK_THROWS_WITH(load_profile("/tmp/"), Catch::Contains("is not a regular file"));
}

TEST_CASE("profiles: a profile without gpu.attention_efficiency is refused, naming the field", "[profile]") {
  const std::string path = "/tmp/shardlab_no_attention_profile.json";
  {
    std::ifstream in(std::string(SHARDLAB_SOURCE_DIR) + "/common/device/profiles/h100-8.json");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto at = text.find("\"attention_efficiency\"");
    REQUIRE(at != std::string::npos);
    text.replace(at, 22, "\"attention_eficiency\"");  // a misspelt key is a missing field
    std::ofstream(path) << text;
  }
  CHECK_THROWS_WITH(load_profile(path), Catch::Contains("missing field 'gpu.attention_efficiency'"));
  std::remove(path.c_str());
}

TEST_CASE("cost model: kernels are bound by math or memory, whichever is slower", "[cost]") {
  Profile p = load_profile("h100-8");
  // 1 GFLOP of fp32 matmul: 1e9 / (66.9e12 x 0.75) s = 19.93 us, + 2 us overhead.
  CHECK(kernel_ns(p, 1e9, 0, DType::f32, KernelClass::matmul) == 21931);
  // The same in bf16 runs on tensor cores.
  CHECK(kernel_ns(p, 1e9, 0, DType::bf16, KernelClass::matmul) < 4000);
  // The same GFLOP as a fused attention kernel runs at the attention efficiency:
  // 1e9 / (66.9e12 x 0.35) s = 42.71 us, + 2 us overhead.
  CHECK(kernel_ns(p, 1e9, 0, DType::f32, KernelClass::attention) == 44708);
  // 335 MB of traffic at 3350 GB/s: 100 us, whatever the (small) FLOP count.
  CHECK(kernel_ns(p, 1e3, 335e6, DType::f32, KernelClass::elementwise) == 102000);
}

TEST_CASE("cost model: memcpy is latency plus bytes over the link", "[cost]") {
  Profile p = load_profile("h100-8");
  CHECK(memcpy_ns(p, 55e3, CopyKind::host_to_device) == 3000);  // 2 us + 1 us
  CHECK(memcpy_ns(p, 0, CopyKind::device_to_host) == 2000);
}

TEST_CASE("cost model: NCCL ring all-reduce, steps and bandwidth", "[cost]") {
  const Profile h100 = load_profile("h100-8");
  const RingPath nv = ring_path(h100, {0, 1, 2, 3, 4, 5, 6, 7});
  const double S = 256.0 * (1 << 20);
  // Simple: 8.4 + 14 x 3.4 us + 2(n-1)/n x S / 370 GB/s at n = 8.
  const double expect_us = 8.4 + 14 * 3.4 + 2.0 * 7 / 8 * S / 370e3;
  CHECK(collective_ns(nv, CollectiveKind::all_reduce, S) == static_cast<int64_t>(std::ceil(expect_us * 1000)));
  CHECK(collective_protocol(nv, CollectiveKind::all_reduce, S) == "SIMPLE");
  // Tiny messages take LL: lower latency.
  CHECK(collective_protocol(nv, CollectiveKind::all_reduce, 1024) == "LL");
  CHECK(collective_ns(nv, CollectiveKind::all_reduce, 1024) < collective_ns(nv, CollectiveKind::all_reduce, 1 << 24));
  // all-gather moves half the bytes of an all-reduce of the gathered size, in half the steps.
  const double ag = static_cast<double>(collective_ns(nv, CollectiveKind::all_gather, S));
  const double ar = static_cast<double>(collective_ns(nv, CollectiveKind::all_reduce, S));
  CHECK(ag / ar == Approx(0.5).epsilon(0.02));
  // A network of one NIC a node is far slower than NVLink.
  const Profile two = load_profile("h100-2x8-1nic");
  std::vector<int> all(16);
  std::iota(all.begin(), all.end(), 0);
  CHECK(collective_ns(ring_path(two, all), CollectiveKind::all_reduce, S) > 5 * collective_ns(nv, CollectiveKind::all_reduce, S));
}

// Hand-computed from NVIDIA/nccl src/graph/tuning.cc at tag v2.23.4-1 (ncclTopoTuneModel, Ring):
//   latency = baseLat + (nsteps - nInterSteps) x intraLat + nInterSteps x interLat
//   nsteps: all-reduce 2(n-1), all-gather and reduce-scatter n-1
//   nInterSteps: 0 on one node, else all-reduce 2(nNodes-1), the others nNodes-1
//   intraLat: NVLink Ring hop (Simple 3.4, LL 0.6), on several nodes at least the net overhead
//             (1 us on Intel CPUs) x3 for Simple
//   interLat: NET Ring hop (Simple 14, LL 2.7); NET Tree hop (Simple 14, LL 5.0) when ppn == 1
//   baseLat[Ring]: Simple 8.4, LL 6.6; broadcast: base + one hop (sameChannels)
TEST_CASE("cost model: ring latency is NCCL's, inside a node and across 2 and 8 nodes", "[cost]") {
  struct Case {
    const char* profile;
    int ranks_per_node, nodes;
    CollectiveKind kind;
    double simple_us, ll_us;
  };
  const CollectiveKind AR = CollectiveKind::all_reduce, AG = CollectiveKind::all_gather,
                       RS = CollectiveKind::reduce_scatter, BC = CollectiveKind::broadcast;
  const Case cases[] = {
      // One node of 8: every step an NVLink hop.
      {"h100-8", 8, 1, AR, 8.4 + 14 * 3.4, 6.6 + 14 * 0.6},
      {"h100-8", 8, 1, AG, 8.4 + 7 * 3.4, 6.6 + 7 * 0.6},
      {"h100-8", 8, 1, RS, 8.4 + 7 * 3.4, 6.6 + 7 * 0.6},
      {"h100-8", 8, 1, BC, 8.4 + 3.4, 6.6 + 0.6},
      // Two nodes of 8: 2 of an all-reduce's 30 steps cross the network, 1 of an all-gather's 15.
      // (The old model charged all 15 at 14 us: 218.4 us against NCCL's 70.0.)
      {"h100-2x8", 8, 2, AR, 8.4 + 28 * 3.4 + 2 * 14, 6.6 + 28 * 1.0 + 2 * 2.7},
      {"h100-2x8", 8, 2, AG, 8.4 + 14 * 3.4 + 1 * 14, 6.6 + 14 * 1.0 + 1 * 2.7},
      {"h100-2x8", 8, 2, RS, 8.4 + 14 * 3.4 + 1 * 14, 6.6 + 14 * 1.0 + 1 * 2.7},
      {"h100-2x8", 8, 2, BC, 8.4 + 14, 6.6 + 2.7},
      // One rank a node (HSDP's replica groups): every step crosses, at the Tree's network hop.
      {"h100-2x8", 1, 2, AR, 8.4 + 2 * 14, 6.6 + 2 * 5.0},
      {"h100-2x8", 1, 2, AG, 8.4 + 1 * 14, 6.6 + 1 * 5.0},
      // Eight nodes of 8.
      {"h100-8x8", 8, 8, AR, 8.4 + 112 * 3.4 + 14 * 14, 6.6 + 112 * 1.0 + 14 * 2.7},
      {"h100-8x8", 8, 8, AG, 8.4 + 56 * 3.4 + 7 * 14, 6.6 + 56 * 1.0 + 7 * 2.7},
      {"h100-8x8", 8, 8, RS, 8.4 + 56 * 3.4 + 7 * 14, 6.6 + 56 * 1.0 + 7 * 2.7},
      {"h100-8x8", 1, 8, AR, 8.4 + 14 * 14, 6.6 + 14 * 5.0},
      {"h100-8x8", 1, 8, RS, 8.4 + 7 * 14, 6.6 + 7 * 5.0},
      {"h100-8x8", 2, 8, AG, 8.4 + 8 * 3.4 + 7 * 14, 6.6 + 8 * 1.0 + 7 * 2.7},
  };
  for (const Case& c : cases) {
    const Profile p = load_profile(c.profile);
    std::vector<int> ranks;
    for (int node = 0; node < c.nodes; ++node)
      for (int g = 0; g < c.ranks_per_node; ++g) ranks.push_back(node * p.gpus_per_node + g);
    const RingPath path = ring_path(p, ranks);
    INFO(c.profile << ": " << collective_name(c.kind) << " over " << c.nodes << " node(s) x " << c.ranks_per_node);
    CHECK(path.nodes == c.nodes);
    CHECK(collective_latency_us(path, c.kind, false) == Approx(c.simple_us));
    CHECK(collective_latency_us(path, c.kind, true) == Approx(c.ll_us));
  }
  // A CPU with a costlier network post (AMD: 2 us) floors every intra-node step of a ring that
  // spans nodes: Simple 6 us > NVLink's 3.4.
  Profile amd = load_profile("h100-2x8");
  amd.inter.net_overhead_us = 2.0;
  std::vector<int> all(16);
  std::iota(all.begin(), all.end(), 0);
  CHECK(collective_latency_us(ring_path(amd, all), AG, false) == Approx(8.4 + 14 * 6.0 + 14));
  CHECK(collective_latency_us(ring_path(amd, all), AG, true) == Approx(6.6 + 14 * 2.0 + 2.7));
}

TEST_CASE("cost model: a send/recv pays one launch, one hop and the bytes", "[cost]") {
  const Profile one = load_profile("h100-8");
  CHECK(p2p_ns(ring_path(one, {0, 1}), 370e3) == 12800);  // 8.4 + 3.4 + 1 us
  // Across nodes: the network's hop (14 us) and one NIC's 46 GB/s.
  const Profile two = load_profile("h100-2x8");
  CHECK(p2p_ns(ring_path(two, {0, 8}), 46e3) == 23400);  // 8.4 + 14 + 1 us
  CHECK(p2p_ns(ring_path(two, {7, 6}), 370e3) == 12800);  // a pair on one node of a two-node job
}
