#include "comm/comm.h"

#include <algorithm>
#include <climits>
#include <map>
#include <numeric>

namespace shardlab {

namespace {

// "8", "1/8", "3/2": a / b in lowest terms.
std::string format_ratio(int a, int b) {
  const int d = std::gcd(a, b);
  std::string s = std::to_string(a / d);
  if (b / d != 1) s.append("/").append(std::to_string(b / d));
  return s;
}

}  // namespace

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::avg: return "avg";
    case ReduceOp::max: return "max";
  }
  return "?";
}

std::invalid_argument invalid_call(const Comm& c, std::string_view op, const std::string& what) {
  return std::invalid_argument("Comm::" + std::string(op) + " on " + c.name() + ": " + what);
}

namespace {

void check_same_dtype(const Comm& c, std::string_view op, const Tensor& send, const Tensor& recv) {
  if (send.dtype != recv.dtype)
    throw invalid_call(c, op,
                       "send is " + std::string(dtype_name(send.dtype)) + ", recv is " + std::string(dtype_name(recv.dtype)));
}

}  // namespace

void check_reduce_scatter(const Comm& c, const Tensor& send, const Tensor& recv) {
  check_same_dtype(c, "reduce_scatter", send, recv);
  if (send.numel() != recv.numel() * c.size())
    throw invalid_call(c, "reduce_scatter",
                       "send has " + std::to_string(send.numel()) + " elements, expected size() x recv = " +
                           std::to_string(c.size()) + " x " + std::to_string(recv.numel()) + " = " +
                           std::to_string(recv.numel() * c.size()));
}

void check_all_gather(const Comm& c, const Tensor& send, const Tensor& recv) {
  check_same_dtype(c, "all_gather", send, recv);
  if (recv.numel() != send.numel() * c.size())
    throw invalid_call(c, "all_gather",
                       "recv has " + std::to_string(recv.numel()) + " elements, expected size() x send = " +
                           std::to_string(c.size()) + " x " + std::to_string(send.numel()) + " = " +
                           std::to_string(send.numel() * c.size()));
}

void check_broadcast(const Comm& c, int root) {
  if (root < 0 || root >= c.size())
    throw invalid_call(c, "broadcast",
                       "root " + std::to_string(root) + " is not a rank of a group of " + std::to_string(c.size()));
}

void check_sendrecv(const Comm& c, const Tensor& send, int to, const Tensor& recv, int from) {
  for (const auto& [what, peer] : {std::pair{"to", to}, std::pair{"from", from}})
    if (peer < -1 || peer >= c.size())
      throw invalid_call(c, "sendrecv", std::string(what) + " = " + std::to_string(peer) +
                                            " is neither -1 nor a rank of a group of " + std::to_string(c.size()));
  if (to < 0 && from < 0) throw invalid_call(c, "sendrecv", "to and from are both -1: nothing to send or receive");
  if (to >= 0 && from >= 0) check_same_dtype(c, "sendrecv", send, recv);
  // Neither NCCL nor MPI orders a rank's own send before its receive: what arrives could
  // overwrite what has not been sent yet.
  if (to >= 0 && from >= 0 && overlaps(send, recv))
    throw invalid_call(c, "sendrecv", "send and recv overlap; the receive could overwrite data not yet sent (use two buffers)");
}

std::string_view nccl_api_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::all_reduce: return "ncclAllReduce";
    case CollectiveKind::reduce_scatter: return "ncclReduceScatter";
    case CollectiveKind::all_gather: return "ncclAllGather";
    case CollectiveKind::broadcast: return "ncclBroadcast";
  }
  throw std::logic_error("nccl_api_name: unknown collective");
}

// NCCL calls max "MinMax"; avg premultiplies floats by 1/n ("PreMulSum") and divides integers
// after the sum ("SumPostDiv").
std::string nccl_kernel_name(CollectiveKind kind, ReduceOp op, DType dtype, std::string_view protocol) {
  std::string name = "ncclDevKernel_";
  switch (kind) {
    case CollectiveKind::all_reduce: name += "AllReduce"; break;
    case CollectiveKind::reduce_scatter: name += "ReduceScatter"; break;
    case CollectiveKind::all_gather: name += "AllGather"; break;
    case CollectiveKind::broadcast: name += "Broadcast"; break;
  }
  if (kind == CollectiveKind::all_reduce || kind == CollectiveKind::reduce_scatter) {
    const bool floating = dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16;
    switch (op) {
      case ReduceOp::sum: name += "_Sum"; break;
      case ReduceOp::max: name += "_MinMax"; break;
      case ReduceOp::avg: name += floating ? "_PreMulSum" : "_SumPostDiv"; break;
    }
    name += "_";
    name += dtype_name(dtype);
  }
  name += "_RING_";
  name += protocol;
  return name;
}

LinkTierKind link_tier_of(const Profile& profile, const std::vector<int>& world_ranks) {
  const bool one_node = std::all_of(world_ranks.begin(), world_ranks.end(), [&](int r) {
    return profile.node_of(r) == profile.node_of(world_ranks.front());
  });
  return one_node ? LinkTierKind::intra_node : LinkTierKind::network;
}

namespace {

// node -> how many of the group's ranks sit on it.
std::map<int, int> members_per_node(const Profile& profile, const std::vector<int>& world_ranks) {
  std::map<int, int> members;
  for (int r : world_ranks) ++members[profile.node_of(r)];
  return members;
}

}  // namespace

// A group inside one node pays the node's link. A group that spans nodes pays the network, whose
// tier in a profile is one NIC. A ring that crosses from one node to the next carries, at that
// boundary, what one rank sends, and NCCL spreads the ring's channels over the NICs near the
// group's GPUs: with a NIC per GPU (HGX/DGX), as many NICs as the group has members on the node.
// Every GPU of a node is taken to be in some group that crosses at the same time (FSDP's and
// HSDP's collectives all are), so a group with m of a node's g GPUs gets m/g of the node's NICs:
// the ring's bus bandwidth is one NIC's times that share, on the node where the group has the
// fewest members, and at most the node's own link, which every byte crosses too. (Two nodes of 8
// A100s over 4 HDR NICs each measure ~96 GB/s of busbw, 4 x 25 GB/s: nccl-tests#119.) The model
// ignores NCCL's tree algorithm and PXN; a pair (sendrecv) is one member a node.
LinkTier link_for(const Profile& profile, const std::vector<int>& world_ranks) {
  if (link_tier_of(profile, world_ranks) == LinkTierKind::intra_node) return profile.intra;
  const std::map<int, int> members = members_per_node(profile, world_ranks);
  int fewest = INT_MAX;
  for (const auto& [node, n] : members) fewest = std::min(fewest, n);
  const int nics = fewest * profile.nics_per_node, gpus = profile.gpus_per_node;  // NICs = nics / gpus
  LinkTier link = profile.inter;
  link.busbw_GBps = std::min(profile.intra.busbw_GBps, profile.inter.busbw_GBps * nics / gpus);
  if (nics > gpus) link.name.append(" (x").append(format_ratio(nics, gpus)).append(" NICs)");
  if (nics < gpus) link.name.append(" (").append(format_ratio(nics, gpus)).append(" of a NIC)");
  return link;
}

// NCCL's tuner (src/graph/tuning.cc, tag v2.23.4-1) charges a ring on one node the node's hop for
// every step. On a ring that spans nodes, a step inside a node still has to wait for the proxy
// thread that posts the network transfers, so it costs at least the network's post overhead
// (tripled for Simple); a step across the network costs the network's ring hop, or its Tree hop
// when every node holds one rank ("with ppn=1 latencies are fully exposed"). A broadcast is
// charged one hop of the slowest tier.
RingPath ring_path(const Profile& profile, const std::vector<int>& world_ranks) {
  RingPath path;
  path.link = link_for(profile, world_ranks);
  path.ranks = static_cast<int>(world_ranks.size());
  path.nodes = std::max<int>(1, static_cast<int>(members_per_node(profile, world_ranks).size()));
  const StepLatency node_hop{profile.intra.simple_hop_us, profile.intra.ll_hop_us};
  if (path.nodes == 1) {
    path.intra_step = path.broadcast_hop = node_hop;
    return path;
  }
  const NetworkTier& net = profile.inter;
  path.intra_step = {std::max(node_hop.simple_us, 3 * net.net_overhead_us), std::max(node_hop.ll_us, net.net_overhead_us)};
  const bool one_rank_a_node = path.ranks == path.nodes;
  path.inter_step = one_rank_a_node ? StepLatency{net.simple_hop_exposed_us, net.ll_hop_exposed_us}
                                    : StepLatency{net.simple_hop_us, net.ll_hop_us};
  path.broadcast_hop = {net.simple_hop_us, net.ll_hop_us};
  return path;
}

std::string group_ranks_text(const std::vector<int>& world_ranks) {
  std::string s = "[";
  for (size_t i = 0; i < world_ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(world_ranks[i]);
  return s + "]";
}

CollectiveArgs collective_args(const Comm& c, const OperationArgs& op) {
  const std::vector<int>& ranks = c.world_ranks();
  const int peer = op.to >= 0 ? op.to : op.from;
  const std::vector<int> link_ranks = peer >= 0 ? std::vector<int>{ranks[c.rank()], ranks[peer]} : ranks;
  const Profile& profile = c.device().profile();
  const LinkTierKind tier = link_tier_of(profile, link_ranks);
  CollectiveArgs a;
  a.name = op.name;
  a.kernel_name = op.kernel_name;
  a.in_nelems = op.in_nelems;
  a.out_nelems = op.out_nelems;
  a.dtype = std::string(kineto_dtype(op.dtype));
  a.dtype_bytes = static_cast<int>(dtype_size(op.dtype));
  a.group_size = c.size();
  a.group_name = c.name();
  a.group_ranks = ranks;
  a.seq = op.seq;
  a.link = link_for(profile, link_ranks).name;
  a.link_tier = tier;
  return a;
}

}  // namespace shardlab
