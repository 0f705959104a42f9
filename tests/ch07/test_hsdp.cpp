// Chapter 07's pieces that need no MPI: the mesh's two splits (make_mesh, against a communicator
// that only records what it is asked), the ring model of the bytes each sharding puts on each
// link (traffic.h: the formula the gpt-1b runs are checked against within 1%, here against bytes
// derived by hand on `tiny`), and R x S from the flags (mesh_shape: the defaults and the errors
// the runs show only through exit 2 of a 4-rank job).
//
// Names avoid "ch07: mesh" at the start: tests/labs/labs.json grades chapter 07 with "^ch07: mesh"
// (the mesh runs), and a test that passes with the lab's stubs in place must not match it.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "07_hsdp/hsdp.h"
#include "07_hsdp/traffic.h"

using namespace shardlab;

namespace {

// A communicator of `size` ranks seen from `rank`, which does nothing but note each split's
// (color, key). The members' notes together are what MPI_Comm_split would build groups from.
class SplitRecorder final : public Comm {
 public:
  SplitRecorder(int rank, int size, std::vector<std::pair<int, int>>& splits)
      : rank_(rank), size_(size), splits_(splits), name_("recorder") {
    for (int r = 0; r < size; ++r) ranks_.push_back(r);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::vector<int>& world_ranks() const override { return ranks_; }
  const std::string& name() const override { return name_; }
  Device& device() const override { throw std::logic_error("make_mesh needs no device"); }
  std::unique_ptr<Comm> split(int color, int key) override {
    splits_.emplace_back(color, key);
    return std::make_unique<SplitRecorder>(-1, 0, splits_);
  }
  void all_reduce(const Tensor&, ReduceOp, Stream&) override { unexpected(); }
  void reduce_scatter(const Tensor&, const Tensor&, ReduceOp, Stream&) override { unexpected(); }
  void all_gather(const Tensor&, const Tensor&, Stream&) override { unexpected(); }
  void broadcast(const Tensor&, int, Stream&) override { unexpected(); }
  void sendrecv(const Tensor&, int, const Tensor&, int, Stream&) override { unexpected(); }
  void barrier() override { unexpected(); }

 private:
  [[noreturn]] static void unexpected() { throw std::logic_error("make_mesh issues no collective"); }
  int rank_, size_;
  std::vector<std::pair<int, int>>& splits_;
  std::vector<int> ranks_;
  std::string name_;
};

// The groups split number `which` (0: the first every rank makes) forms over a world of R x S:
// the members of each color, ordered by key as MPI_Comm_split orders them (then by rank).
std::vector<std::vector<int>> groups_of_split(int replicas, int shards, size_t which) {
  std::map<int, std::vector<std::pair<int, int>>> by_color;  // color -> (key, rank)
  for (int r = 0; r < replicas * shards; ++r) {
    std::vector<std::pair<int, int>> splits;
    SplitRecorder world(r, replicas * shards, splits);
    const ch07::Mesh mesh = ch07::make_mesh(world, replicas, shards);
    REQUIRE(splits.size() == 2);  // both groups, on every rank, so the collective splits pair up
    CHECK(mesh.replicas == replicas);
    CHECK(mesh.shards == shards);
    CHECK(mesh.shard_group != nullptr);
    CHECK(mesh.replicate_group != nullptr);
    by_color[splits[which].first].emplace_back(splits[which].second, r);
  }
  std::vector<std::vector<int>> groups;
  for (auto& [color, members] : by_color) {
    std::sort(members.begin(), members.end());
    groups.emplace_back();
    for (const auto& [key, rank] : members) groups.back().push_back(rank);
  }
  return groups;
}

using Groups = std::vector<std::vector<int>>;

// The message of the FlagError mesh_shape throws, or "" when it accepts.
std::string mesh_error(int world, int gpus_per_node, int64_t replicate, int64_t shard) {
  try {
    ch07::mesh_shape(world, gpus_per_node, replicate, shard);
  } catch (const FlagError& e) {
    return e.what();
  }
  return "";
}

// mesh_shape's R x S as "2 x 4", so that a failure prints it.
std::string shape(int world, int gpus_per_node, int64_t replicate, int64_t shard) {
  const auto [r, s] = ch07::mesh_shape(world, gpus_per_node, replicate, shard);
  return std::to_string(r) + " x " + std::to_string(s);
}

}  // namespace

TEST_CASE("ch07: make_mesh: 2 x 4 gives a shard group per node and a replicate group per local rank", "[hsdp]") {
  CHECK(groups_of_split(2, 4, 0) == Groups{{0, 1, 2, 3}, {4, 5, 6, 7}});
  CHECK(groups_of_split(2, 4, 1) == Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}});
}

TEST_CASE("ch07: make_mesh: 3 x 2, 1 x 4 and 4 x 1 order every group's members as the ranks are numbered", "[hsdp]") {
  CHECK(groups_of_split(3, 2, 0) == Groups{{0, 1}, {2, 3}, {4, 5}});
  CHECK(groups_of_split(3, 2, 1) == Groups{{0, 2, 4}, {1, 3, 5}});
  // One replica: the node is the whole world, and each rank replicates with itself alone.
  CHECK(groups_of_split(1, 4, 0) == Groups{{0, 1, 2, 3}});
  CHECK(groups_of_split(1, 4, 1) == Groups{{0}, {1}, {2}, {3}});
  // S = 1: nothing sharded, every rank a replica of all the others.
  CHECK(groups_of_split(4, 1, 0) == Groups{{0}, {1}, {2}, {3}});
  CHECK(groups_of_split(4, 1, 1) == Groups{{0, 1, 2, 3}});
}

// tiny: vocab 32, context 64, 2 blocks, 32 channels. Root: wte 32 x 32 + wpe 64 x 32 + ln_f 2 x 32
// = 3,136 elements = 12,544 B; a block: 12 C^2 + 13 C = 12,704 elements = 50,816 B.
namespace {
const GPTConfig kTiny = GPTConfig::preset("tiny");
constexpr double kRootBytes = 12544, kBlockBytes = 50816;
}  // namespace

TEST_CASE("ch07: traffic: FULL_SHARD over 2 ranks of a node: the root's 2 passes and each block's 3, half of each on NVLink", "[hsdp]") {
  // Root: one all-gather + one reduce-scatter, each 1/2 x 12,544 B; a block: two all-gathers + one.
  const ch07::LinkBytes b = ch07::expected_link_bytes(kTiny, 2, 0, true, false, false, 1);
  CHECK(b.intra_node == Approx(2 * 0.5 * kRootBytes + 2 * 3 * 0.5 * kBlockBytes));  // 164,992
  CHECK(b.intra_node == Approx(164992));
  CHECK(b.network == 0);
}

TEST_CASE("ch07: traffic: SHARD_GRAD_OP gathers each block once, and a shard group across nodes pays the network", "[hsdp]") {
  const ch07::LinkBytes local = ch07::expected_link_bytes(kTiny, 2, 0, false, false, false, 1);
  CHECK(local.intra_node == Approx(2 * 0.5 * kRootBytes + 2 * 2 * 0.5 * kBlockBytes));  // 114,176
  CHECK(local.network == 0);
  const ch07::LinkBytes spread = ch07::expected_link_bytes(kTiny, 2, 0, false, true, false, 1);
  CHECK(spread.intra_node == 0);
  CHECK(spread.network == Approx(114176));
}

TEST_CASE("ch07: traffic: 3 shards move the padded unit: 3,138 root and 12,705 block elements", "[hsdp]") {
  // 3,136 and 12,704 are not multiples of 3: each pads to the next one, and every rank sends 2/3.
  const ch07::LinkBytes b = ch07::expected_link_bytes(kTiny, 3, 0, true, false, false, 1);
  CHECK(b.intra_node == Approx(2 * (2.0 / 3) * 4 * 3138 + 2 * 3 * (2.0 / 3) * 4 * 12705));  // 220,016
  CHECK(b.intra_node == Approx(220016));
}

TEST_CASE("ch07: traffic: HYBRID_SHARD adds one all-reduce of each shard over the replicas, on the replicate group's link", "[hsdp]") {
  // 2 x 2: each rank's shard is half the unit; the all-reduce over 2 replicas sends 2 x 1/2 of it.
  const ch07::LinkBytes b = ch07::expected_link_bytes(kTiny, 2, 2, true, false, true, 1);
  CHECK(b.intra_node == Approx(164992));  // the shard group's traffic, as FULL_SHARD over 2
  CHECK(b.network == Approx(kRootBytes / 2 + 2 * kBlockBytes / 2));  // 57,088
  // 3 replicas: 2 x 2/3 of each half-unit shard.
  const ch07::LinkBytes r3 = ch07::expected_link_bytes(kTiny, 2, 3, true, false, true, 1);
  CHECK(r3.network == Approx(2 * (2.0 / 3) * (kRootBytes + 2 * kBlockBytes) / 2));  // 76,117.3
  // Both groups on one node: everything on NVLink.
  const ch07::LinkBytes one_node = ch07::expected_link_bytes(kTiny, 2, 2, true, false, false, 1);
  CHECK(one_node.network == 0);
  CHECK(one_node.intra_node == Approx(164992 + 57088));
}

TEST_CASE("ch07: traffic: replicas 0 and 1 all-reduce nothing, and one rank moves nothing at all", "[hsdp]") {
  for (int replicas : {0, 1}) {
    INFO("replicas " << replicas);
    const ch07::LinkBytes b = ch07::expected_link_bytes(kTiny, 2, replicas, true, false, true, 1);
    CHECK(b.network == 0);
    CHECK(b.intra_node == Approx(164992));
  }
  const ch07::LinkBytes alone = ch07::expected_link_bytes(kTiny, 1, 0, true, false, false, 1);
  CHECK(alone.intra_node == 0);
  CHECK(alone.network == 0);
}

TEST_CASE("ch07: traffic: R x 1 shards nothing and still all-reduces every whole unit", "[hsdp]") {
  // S = 1: no all-gather, no reduce-scatter; the all-reduce over 2 replicas sends 2 x 1/2 of the
  // whole unit (pytorch/pytorch#154888 is HSDP skipping it there).
  const ch07::LinkBytes b = ch07::expected_link_bytes(kTiny, 1, 2, true, false, true, 1);
  CHECK(b.intra_node == 0);
  CHECK(b.network == Approx(kRootBytes + 2 * kBlockBytes));  // 114,176
}

TEST_CASE("ch07: traffic: every micro-batch repeats the step's collectives", "[hsdp]") {
  const ch07::LinkBytes one = ch07::expected_link_bytes(kTiny, 2, 2, true, false, true, 1);
  const ch07::LinkBytes three = ch07::expected_link_bytes(kTiny, 2, 2, true, false, true, 3);
  CHECK(three.intra_node == Approx(3 * one.intra_node));
  CHECK(three.network == Approx(3 * one.network));
}

TEST_CASE("ch07: R x S from the flags: neither given, S is a node's GPUs or the largest divisor of the world below", "[hsdp]") {
  CHECK(shape(16, 8, 0, 0) == "2 x 8");
  CHECK(shape(8, 8, 0, 0) == "1 x 8");
  CHECK(shape(4, 8, 0, 0) == "1 x 4");  // less than a node
  CHECK(shape(6, 4, 0, 0) == "2 x 3");  // 4 does not divide 6: 3 does
  CHECK(shape(3, 2, 0, 0) == "3 x 1");  // nor 2 divide 3: 1 does
  CHECK(shape(7, 8, 0, 0) == "1 x 7");
  CHECK(shape(1, 8, 0, 0) == "1 x 1");
}

TEST_CASE("ch07: R x S from the flags: one of them given, the other is the world over it", "[hsdp]") {
  CHECK(shape(8, 8, 0, 4) == "2 x 4");  // S alone: not the node's 8
  CHECK(shape(8, 8, 0, 1) == "8 x 1");
  CHECK(shape(8, 8, 2, 0) == "2 x 4");  // R alone
  CHECK(shape(8, 8, 8, 0) == "8 x 1");
  CHECK(shape(8, 8, 2, 4) == "2 x 4");  // both, agreeing
}

TEST_CASE("ch07: R x S from the flags: a mesh that does not fit the world names the flag and what it allows", "[hsdp]") {
  // The messages the runs print after "error: " (tests/ch07/ch07.cmake checks the first and last).
  CHECK(mesh_error(4, 8, 3, 0) == "--replicate: got '3'; allowed: a divisor of the world size 4");
  CHECK(mesh_error(8, 8, 0, 3) == "--shard: got '3'; allowed: a divisor of the world size 8");
  CHECK(mesh_error(8, 8, 0, 16) == "--shard: got '16'; allowed: a divisor of the world size 8");
  CHECK(mesh_error(4, 8, 2, 1) == "--replicate: got '2'; allowed: 4: R x S must equal the world size 4 (S = 1)");
  CHECK(mesh_error(8, 8, 4, 4) == "--replicate: got '4'; allowed: 2: R x S must equal the world size 8 (S = 4)");
}
