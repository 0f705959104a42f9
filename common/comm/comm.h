// comm.h: the communicator interface, NCCL's shape.
//
// A Comm is a group of ranks (a process group). Collectives are issued by every member, in
// the same order, each on a stream the caller names: they are device work like kernels, so the
// CPU returns at once and the stream runs them in order. Two implementations stand behind it:
// MpiComm (mpi_comm.h) moves real data between the MPI processes and, on the sim, agrees a
// virtual start time; NcclComm runs NCCL on CUDA streams.
//
// Semantics shared by both (and checked by the tests):
// - all_reduce is in place. reduce_scatter: send holds size() x recv.numel() elements, rank r
//   receives the r-th chunk of the sum. all_gather: recv holds size() x send.numel() elements,
//   chunk r from rank r. broadcast: in place from `root`.
// - sendrecv sends `send` to rank `to` and receives `recv` from rank `from` (ranks of this
//   comm), issued together as ncclGroupStart/Send/Recv/GroupEnd so a ring cannot deadlock.
//   `to` or `from` may be -1 (then the other tensor is ignored): a lone send or receive.
// - One communicator runs its operations in issue order, whatever stream each is issued on,
//   as one NCCL communicator does.
// - avg divides the sum by size() (ncclAvg).
// - Debug mode (--debug-collectives): before each operation the members compare what they are
//   about to do (operation, sequence number, count, dtype, root or peers); any difference
//   throws CollectiveMismatch naming the ranks and what each issued, instead of hanging.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "device/cost_model.h"
#include "device/device.h"

namespace shardlab {

enum class ReduceOp : uint8_t { sum, avg, max };
std::string_view reduce_op_name(ReduceOp op);

class CollectiveMismatch : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Comm {
 public:
  virtual ~Comm() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const std::vector<int>& world_ranks() const = 0;  // member i's rank in the job
  virtual const std::string& name() const = 0;              // "world", "world.split(1)", ...
  virtual Device& device() const = 0;

  // Collective over this comm: members with the same color form a new comm, ordered by key
  // (then by rank). A negative color gives nullptr (the rank joins no new comm).
  virtual std::unique_ptr<Comm> split(int color, int key) = 0;

  virtual void all_reduce(const Tensor& buf, ReduceOp op, Stream& s) = 0;
  virtual void reduce_scatter(const Tensor& send, const Tensor& recv, ReduceOp op, Stream& s) = 0;
  virtual void all_gather(const Tensor& send, const Tensor& recv, Stream& s) = 0;
  virtual void broadcast(const Tensor& buf, int root, Stream& s) = 0;
  virtual void sendrecv(const Tensor& send, int to, const Tensor& recv, int from, Stream& s) = 0;
  // Host-side: every member's CPU continues once the last has arrived.
  virtual void barrier() = 0;
};

// Argument checks every communicator applies before it issues anything; each throws
// std::invalid_argument naming the operation, the communicator and what is wrong.
void check_reduce_scatter(const Comm& c, const Tensor& send, const Tensor& recv);
void check_all_gather(const Comm& c, const Tensor& send, const Tensor& recv);
void check_broadcast(const Comm& c, int root);
void check_sendrecv(const Comm& c, const Tensor& send, int to, const Tensor& recv, int from);
std::invalid_argument invalid_call(const Comm& c, std::string_view op, const std::string& what);

// NCCL's names, for traces: the API a collective is launched with ("ncclAllReduce") and its
// kernel (src/device/generate.py: ncclDevKernel_<Coll>[_<RedOp>_<type>]_RING_<PROTO>).
std::string_view nccl_api_name(CollectiveKind kind);
std::string nccl_kernel_name(CollectiveKind kind, ReduceOp op, DType dtype, std::string_view protocol);
// The tier a group of ranks (ranks in the job) communicates over: intra-node when every member
// sits on one node, network as soon as the group spans nodes.
LinkTierKind link_tier_of(const Profile& profile, const std::vector<int>& world_ranks);
// The link whose constants the cost model charges the group: the profile's intra tier, or its
// inter tier with the bandwidth of the NICs the group's ring uses (comm.cpp).
LinkTier link_for(const Profile& profile, const std::vector<int>& world_ranks);
// The group's ring as the cost model charges it: link_for's link, the nodes it spans and the
// latency of its steps inside a node and across the network (comm.cpp).
RingPath ring_path(const Profile& profile, const std::vector<int>& world_ranks);
// "[0, 1, 2, 3]": a group's ranks in the job, as Kineto's "Process Group Ranks" writes them.
std::string group_ranks_text(const std::vector<int>& world_ranks);

// The trace args of one operation on communicator c (`name` "allreduce", ..., "sendrecv";
// `kernel_name` as nccl_kernel_name gives it), filled here for every communicator so the sim's
// and the GPU's traces say the same. The link is the group's; for a sendrecv it is the pair's
// that this rank sends over (to `to`), or receives over when it only receives (from `from`):
// the bytes the metrics charge to a link are the ones this rank sends (metrics.h).
struct OperationArgs {
  std::string name, kernel_name;
  int64_t in_nelems = 0, out_nelems = 0;
  DType dtype = DType::f32;
  int64_t seq = 0;
  int to = -1, from = -1;  // sendrecv's peers (ranks of c); -1 for a collective
};
CollectiveArgs collective_args(const Comm& c, const OperationArgs& op);

}  // namespace shardlab
