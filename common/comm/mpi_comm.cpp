#include "comm/mpi_comm.h"

#include "comm/watchdog.h"

#include <algorithm>
#include <climits>
#include <cstddef>
#include <limits>
#include <numeric>
#include <optional>
#include <span>
#include <stdexcept>
#include <utility>

#include "device/sim_device.h"

namespace shardlab {
namespace {

// Point-to-point tags on a communicator's own MPI_Comm (collective calls never match them; tag 1
// is debug mode's, MismatchCheck's).
constexpr int kReadyToReceiverTag = 2;  // sendrecv: a sender's ready time, to its receiver
constexpr int kReadyToSenderTag = 3;    // sendrecv: a receiver's ready time, to its sender
constexpr int kDataTag = 4;             // sendrecv: the payload

// MPI reduces these; 16-bit floats would need a user-defined MPI_Op (they are moved as bits).
void require_reducible(const Comm& c, std::string_view op, DType t) {
  if (t != DType::f32 && t != DType::i32 && t != DType::i64)
    throw invalid_call(c, op, "cannot reduce " + std::string(dtype_name(t)) + " over MPI (f32, i32 and i64 can be reduced)");
}

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::f32: return MPI_FLOAT;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
    case DType::u8: return MPI_UINT8_T;
    case DType::bf16:
    case DType::f16: return MPI_UINT16_T;  // moved, never reduced (require_reducible)
  }
  throw std::logic_error("mpi_type: unknown dtype");
}

// avg is the sum divided by the group size afterwards (MPI has no average).
MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::max ? MPI_MAX : MPI_SUM; }

template <class T>
void divide_each(const Tensor& t, T n) {
  for (T& x : std::span(static_cast<T*>(t.data), static_cast<size_t>(t.numel()))) x /= n;
}

void divide(const Tensor& t, int n) {
  switch (t.dtype) {
    case DType::f32: return divide_each<float>(t, static_cast<float>(n));
    case DType::i32: return divide_each<int32_t>(t, n);
    case DType::i64: return divide_each<int64_t>(t, n);
    default: throw std::logic_error("divide: " + std::string(dtype_name(t.dtype)) + " is not reducible");
  }
}

// Element `elem` of t's data.
void* at(const Tensor& t, int64_t elem) {
  return static_cast<std::byte*>(t.data) + static_cast<size_t>(elem) * dtype_size(t.dtype);
}

}  // namespace

// One operation as the single path (run) sees it.
struct MpiComm::Call {
  std::optional<CollectiveKind> kind = std::nullopt;  // nullopt: sendrecv
  ReduceOp op = ReduceOp::sum;
  DType dtype = DType::f32;
  // As Kineto counts them: all-reduce and broadcast the buffer twice, reduce-scatter and
  // all-gather the send and the receive tensors, sendrecv what it sends and what it receives.
  int64_t in_nelems = 0, out_nelems = 0;
  int root = -1;           // broadcast
  int to = -1, from = -1;  // sendrecv
  std::vector<Access> accesses = {};
  Tensor a = {}, b = {};  // the buffer (or send) and the receive tensor, as the caller gave them
  // The MPI data movement on a and b, or on host copies of them (skipped under --compute skip).
  std::function<void(const Tensor& a, const Tensor& b)> move = {};

  // The bytes the ring model charges: the buffer, or the gathered / scattered total.
  double bytes() const { return static_cast<double>(std::max(in_nelems, out_nelems)) * static_cast<double>(dtype_size(dtype)); }
};

std::unique_ptr<MpiComm> MpiComm::world(Device& dev, bool debug) {
  auto* sim = dynamic_cast<SimDevice*>(&dev);  // nullptr on a real GPU: data goes through host memory
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) throw std::runtime_error("MpiComm::world: MPI is not initialized (MPI_Init comes first)");
  int world_rank = 0, world_size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  if (dev.trace().rank() != world_rank)
    throw std::runtime_error("MpiComm::world: the device was made for rank " + std::to_string(dev.trace().rank()) +
                             " but this is MPI rank " + std::to_string(world_rank));
  // Our own copy of the world, so our tags never meet anyone else's messages.
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  std::vector<int> ranks(static_cast<size_t>(world_size));
  std::iota(ranks.begin(), ranks.end(), 0);
  return std::unique_ptr<MpiComm>(new MpiComm(dev, sim, comm, "world", std::move(ranks), debug));
}

MpiComm::MpiComm(Device& dev, SimDevice* sim, MPI_Comm comm, std::string name, std::vector<int> world_ranks,
                 bool debug)
    : dev_(dev),
      sim_(sim),
      comm_(comm),
      name_(std::move(name)),
      world_ranks_(std::move(world_ranks)),
      check_(debug ? std::make_unique<MismatchCheck>(comm, name_, world_ranks_) : nullptr),
      path_(ring_path(dev.profile(), world_ranks_)),
      message_limit_(INT_MAX) {
  MPI_Comm_rank(comm_, &rank_);
}

MpiComm::~MpiComm() { free_mpi_group(comm_, check_.get()); }

std::unique_ptr<Comm> MpiComm::split(int color, int key) {
  MpiGroup g = split_mpi_group(comm_, color, key, world_ranks_[rank_]);
  if (g.comm == MPI_COMM_NULL) return nullptr;
  auto c = std::unique_ptr<MpiComm>(
      new MpiComm(dev_, sim_, g.comm, split_name(name_, color), std::move(g.world_ranks), check_ != nullptr));
  c->message_limit_ = message_limit_;
  return c;
}

void MpiComm::set_message_limit(int64_t elements) {
  if (elements < 1 || elements > INT_MAX)
    throw std::invalid_argument("MpiComm::set_message_limit: " + std::to_string(elements) +
                                " elements is outside [1, INT_MAX]");
  message_limit_ = elements;
}

// --- The operations: validate, then describe the call for run().

void MpiComm::all_reduce(const Tensor& buf, ReduceOp op, Stream& s) {
  require_reducible(*this, "all_reduce", buf.dtype);
  run({.kind = CollectiveKind::all_reduce,
       .op = op,
       .dtype = buf.dtype,
       .in_nelems = buf.numel(),
       .out_nelems = buf.numel(),
       .accesses = {writes(buf)},
       .a = buf,
       .move = [&](const Tensor& a, const Tensor&) { move_all_reduce(a, op); }},
      s);
}

void MpiComm::reduce_scatter(const Tensor& send, const Tensor& recv, ReduceOp op, Stream& s) {
  check_reduce_scatter(*this, send, recv);
  require_reducible(*this, "reduce_scatter", send.dtype);
  run({.kind = CollectiveKind::reduce_scatter,
       .op = op,
       .dtype = send.dtype,
       .in_nelems = send.numel(),
       .out_nelems = recv.numel(),
       .accesses = {reads(send), writes(recv)},
       .a = send,
       .b = recv,
       .move = [&](const Tensor& a, const Tensor& b) { move_reduce_scatter(a, b, op); }},
      s);
}

void MpiComm::all_gather(const Tensor& send, const Tensor& recv, Stream& s) {
  check_all_gather(*this, send, recv);
  run({.kind = CollectiveKind::all_gather,
       .dtype = send.dtype,
       .in_nelems = send.numel(),
       .out_nelems = recv.numel(),
       .accesses = {reads(send), writes(recv)},
       .a = send,
       .b = recv,
       .move = [&](const Tensor& a, const Tensor& b) { move_all_gather(a, b); }},
      s);
}

void MpiComm::broadcast(const Tensor& buf, int root, Stream& s) {
  check_broadcast(*this, root);
  run({.kind = CollectiveKind::broadcast,
       .dtype = buf.dtype,
       .in_nelems = buf.numel(),
       .out_nelems = buf.numel(),
       .root = root,
       .accesses = {root == rank_ ? reads(buf) : writes(buf)},
       .a = buf,
       .move = [&](const Tensor& a, const Tensor&) { move_broadcast(a, root); }},
      s);
}

void MpiComm::sendrecv(const Tensor& send, int to, const Tensor& recv, int from, Stream& s) {
  check_sendrecv(*this, send, to, recv, from);
  Call call{.dtype = to >= 0 ? send.dtype : recv.dtype,
            .in_nelems = to >= 0 ? send.numel() : 0,
            .out_nelems = from >= 0 ? recv.numel() : 0,
            .to = to,
            .from = from,
            .a = send,
            .b = recv,
            .move = [&](const Tensor& a, const Tensor& b) { move_sendrecv(a, to, b, from); }};
  if (to >= 0) call.accesses.push_back(reads(send));
  if (from >= 0) call.accesses.push_back(writes(recv));
  run(call, s);
}

void MpiComm::barrier() {
  const int64_t arrived = dev_.now_ns();
  int64_t last = 0;
  waiting_for_ = "barrier on " + name_;
  MPI_Request request;
  if (sim_ == nullptr) {
    MPI_Ibarrier(comm_, &request);
    wait(&request, 1);
    dev_.trace().cpu_op("barrier", arrived, dev_.now_ns() - arrived);
    return;
  }
  MPI_Iallreduce(&arrived, &last, 1, MPI_INT64_T, MPI_MAX, comm_, &request);
  wait(&request, 1);
  sim_->host_wait_until(last, "barrier");
}

// --- The one path.

void MpiComm::run(const Call& call, Stream& s) {
  if (sim_ == nullptr) return run_staged(call, s);
  // The CPU launches (a grouped send/recv launches at ncclGroupEnd); the stream could begin at
  // `ready`: after its queue, its waits, and this communicator's previous operation, whatever
  // stream that ran on (NCCL runs one communicator's operations in order).
  const auto issue = sim_->comm_issue(s, call.kind ? nccl_api_name(*call.kind) : "ncclGroupEnd", last_end_ns_);
  const int64_t seq = call.kind ? ++seq_ : ++p2p_seq_;
  const int64_t flight = record_issued(call, seq);
  check(call);
  const auto [start, end] = call.kind ? agree_collective(call, issue.ready_ns) : agree_p2p(call, issue.ready_ns);
  Watchdog::get().flight().started(flight);
  // Under --compute skip the tensors have no memory: time passes, nothing moves.
  if (dev_.computes()) call.move(call.a, call.b);
  Watchdog::get().flight().done(flight);
  sim_->comm_complete(s, trace_args(call, seq), issue, start, end, call.accesses);
  last_end_ns_ = end;
}

// The flight recorder's entry for this operation, and the name the watchdog gives its waits.
int64_t MpiComm::record_issued(const Call& call, int64_t seq) {
  const std::string op = call.kind ? std::string(collective_name(*call.kind)) : "sendrecv";
  const int64_t count = std::max(call.in_nelems, call.out_nelems);
  // A sendrecv's peers as ranks in the job: who it waits for (failure.cpp tells a deadlock by them).
  const int to = call.to >= 0 ? world_ranks_[call.to] : -1, from = call.from >= 0 ? world_ranks_[call.from] : -1;
  std::string peers;
  if (to >= 0) peers += "; to rank " + std::to_string(to);
  if (from >= 0) peers += "; from rank " + std::to_string(from);
  waiting_for_ = op + " #" + std::to_string(seq) + " on " + name_ + " (" + std::to_string(count) + " " +
                 std::string(kineto_dtype(call.dtype)) + peers + ")";
  return Watchdog::get().flight().issued(seq, op, name_, world_ranks_, count, std::string(kineto_dtype(call.dtype)), to,
                                         from);
}

void MpiComm::wait(MPI_Request* requests, int n) const { Watchdog::get().wait(requests, n, waiting_for_); }

void MpiComm::check(const Call& call) {
  // Debug mode: compare before anything can block, so a mismatch throws instead of hanging.
  if (!check_) return;
  if (call.kind)
    check_->collective(*call.kind, call.op, call.dtype, std::min(call.in_nelems, call.out_nelems), call.root);
  else
    check_->sendrecv(call.dtype, call.to, call.in_nelems, call.from, call.out_nelems);
}

// On a real GPU the data goes through host memory. The buffers are ready only once the work
// queued before them on stream s has run, so the CPU copies them down on s (each copy ends in a
// stream synchronize), runs the MPI operation, and copies the result back on s, where the work
// queued after the collective will find it. Correct and slow (the CPU waits, nothing
// overlaps): it lets several ranks share one GPU for correctness runs; NCCL is the fast path.
// The whole operation, copies included, is bracketed on stream s as one collective slice, as an
// NCCL call would be: the metrics, and the chapters that count their collectives in the trace,
// see it on either communicator.
void MpiComm::run_staged(const Call& call, Stream& s) {
  const int64_t seq = call.kind ? ++seq_ : ++p2p_seq_;
  const int64_t flight = record_issued(call, seq);
  check(call);
  const Device::CollectiveMark mark = dev_.begin_collective(s);
  struct HostCopy {
    std::vector<std::byte> bytes;
    Tensor t;
  };
  auto copy_down = [&](const Tensor& t) {
    HostCopy h;
    h.t.shape = t.shape;
    h.t.dtype = t.dtype;
    if (t.defined() && t.bytes() > 0) {
      h.bytes.resize(t.bytes());
      h.t.data = h.bytes.data();
      copy_to_host(dev_, s, h.bytes.data(), t);
    }
    return h;
  };
  const HostCopy a = copy_down(call.a), b = copy_down(call.b);
  if (call.kind) agree_alike(call, 0);  // the same check as the sim's (see agree_alike)
  const int64_t t0 = dev_.now_ns();
  Watchdog::get().flight().started(flight);
  call.move(a.t, b.t);
  Watchdog::get().flight().done(flight);
  const std::string api(call.kind ? nccl_api_name(*call.kind) : "ncclGroupEnd");
  dev_.trace().cpu_op("MPI for " + api + " (host-staged)", t0, dev_.now_ns() - t0,
                      TraceArgs().add("bytes", call.bytes()).add("Seq", seq));
  // Copy back what the operation wrote: the receive tensor b, or the buffer a of an in-place
  // all-reduce or broadcast (which have no b). Even where a and b alias (in place at world 1),
  // b's host copy holds the result.
  const HostCopy& result = call.b.defined() ? b : a;
  for (const Access& access : call.accesses)
    if (access.write && access.tensor.bytes() > 0) copy_to_device(dev_, s, access.tensor, result.bytes.data());
  dev_.end_collective(s, mark, api, trace_args(call, seq));
}

// What every member of a collective must issue alike: the operation, reduction, dtype and root
// in one number, and the element count. Members that differ would hand MPI buffers of other
// sizes: anything from wrong sums to a corrupted heap. So every collective first agrees on
// these (with its ready time, in the same small all-reduce): the maximum and the minimum of
// each, which differ exactly when some member issued something else. --debug-collectives does
// more (it names the ranks that differ); this costs nothing and is always on.
int64_t MpiComm::agree_alike(const Call& call, int64_t ready_ns) {
  const int64_t shape = (((static_cast<int64_t>(*call.kind) * 16 + static_cast<int64_t>(call.op)) * 16 +
                          static_cast<int64_t>(call.dtype)) << 32) + call.root + 1;
  const int64_t count = std::min(call.in_nelems, call.out_nelems);
  int64_t mine[5] = {ready_ns, shape, -shape, count, -count}, agreed[5] = {};
  MPI_Request request;
  MPI_Iallreduce(mine, agreed, 5, MPI_INT64_T, MPI_MAX, comm_, &request);
  wait(&request, 1);
  if (agreed[1] != -agreed[2] || agreed[3] != -agreed[4]) {
    std::string what = waiting_for_ + ": the members issued different collectives";
    if (agreed[3] != -agreed[4])
      what = waiting_for_ + ": the members issued counts from " + std::to_string(-agreed[4]) + " to " +
             std::to_string(agreed[3]) + " elements";
    else if (agreed[1] != -agreed[2])
      what += " (operation, reduction, dtype or root)";
    throw CollectiveMismatch("collective mismatch on communicator " + name_ + ", " + what +
                             "; every member must issue the same collectives in the same order (--debug-collectives names "
                             "the ranks that differ)");
  }
  return agreed[0];
}

std::pair<int64_t, int64_t> MpiComm::agree_collective(const Call& call, int64_t ready_ns) {
  // A collective starts when its last member arrives; the others wait (their comm_wait slice).
  const int64_t start = agree_alike(call, ready_ns);
  return {start, start + collective_ns(path_, *call.kind, call.bytes())};
}

std::pair<int64_t, int64_t> MpiComm::agree_p2p(const Call& call, int64_t ready_ns) {
  // A transfer starts when both its sender and its receiver are ready, so every rank tells
  // both its peers when it is ready. The op spans from its first transfer's start to its last
  // transfer's end.
  // With the ready time go the count and dtype of that direction, so a receiver expecting
  // another size than its sender sends ends in a clear error, not in MPI's truncation abort.
  const int64_t dtype = static_cast<int64_t>(call.dtype);
  const int64_t to_mine[3] = {ready_ns, call.in_nelems, dtype}, from_mine[3] = {ready_ns, call.out_nelems, dtype};
  int64_t to_theirs[3] = {}, from_theirs[3] = {};
  std::vector<MPI_Request> requests;
  auto exchange = [&](int peer, int send_tag, const int64_t* mine, int64_t* theirs, int recv_tag) {
    requests.resize(requests.size() + 2);
    MPI_Isend(mine, 3, MPI_INT64_T, peer, send_tag, comm_, &requests[requests.size() - 2]);
    MPI_Irecv(theirs, 3, MPI_INT64_T, peer, recv_tag, comm_, &requests.back());
  };
  if (call.to >= 0) exchange(call.to, kReadyToReceiverTag, to_mine, to_theirs, kReadyToSenderTag);
  if (call.from >= 0) exchange(call.from, kReadyToSenderTag, from_mine, from_theirs, kReadyToReceiverTag);
  wait(requests.data(), static_cast<int>(requests.size()));
  auto require_match = [&](int peer, const int64_t* mine, const int64_t* theirs, const char* direction) {
    if (mine[1] == theirs[1] && mine[2] == theirs[2]) return;
    throw CollectiveMismatch("collective mismatch on communicator " + name_ + ", " + waiting_for_ + ": " + direction +
                             " rank " + std::to_string(world_ranks_[peer]) + " " + std::to_string(mine[1]) + " " +
                             std::string(dtype_name(static_cast<DType>(mine[2]))) + ", which " +
                             (direction[0] == 's' ? "expects " : "sends ") + std::to_string(theirs[1]) + " " +
                             std::string(dtype_name(static_cast<DType>(theirs[2]))) +
                             " (--debug-collectives checks every call before it moves data)");
  };
  if (call.to >= 0) require_match(call.to, to_mine, to_theirs, "sending to");
  if (call.from >= 0) require_match(call.from, from_mine, from_theirs, "receiving from");
  const int64_t to_ready = to_theirs[0], from_ready = from_theirs[0];

  int64_t start = std::numeric_limits<int64_t>::max(), end = 0;
  auto transfer = [&](int peer, int64_t peer_ready, int64_t nelems) {
    // A pair on one node talks over the intra-node link even inside a group that spans nodes.
    const RingPath pair = ring_path(dev_.profile(), {world_ranks_[rank_], world_ranks_[peer]});
    const int64_t t = std::max(ready_ns, peer_ready);
    start = std::min(start, t);
    end = std::max(end, t + p2p_ns(pair, static_cast<double>(nelems) * static_cast<double>(dtype_size(call.dtype))));
  };
  if (call.to >= 0) transfer(call.to, to_ready, call.in_nelems);
  if (call.from >= 0) transfer(call.from, from_ready, call.out_nelems);
  return {start, end};
}

CollectiveArgs MpiComm::trace_args(const Call& call, int64_t seq) const {
  OperationArgs op{.name = "sendrecv",
                   .kernel_name = "ncclDevKernel_SendRecv",
                   .in_nelems = call.in_nelems,
                   .out_nelems = call.out_nelems,
                   .dtype = call.dtype,
                   .seq = seq,
                   .to = call.to,
                   .from = call.from};
  if (call.kind) {
    op.name = std::string(collective_name(*call.kind));
    op.kernel_name = nccl_kernel_name(*call.kind, call.op, call.dtype,
                                      collective_protocol(path_, *call.kind, call.bytes()));
  }
  return collective_args(*this, op);
}

// --- Data movement. Each MPI call carries at most message_limit_ elements (MPI counts are int).

void MpiComm::for_each_chunk(int64_t n, const std::function<void(int64_t offset, int count)>& f) const {
  for (int64_t offset = 0; offset < n; offset += message_limit_)
    f(offset, static_cast<int>(std::min(message_limit_, n - offset)));
}

void MpiComm::move_all_reduce(const Tensor& buf, ReduceOp op) const {
  for_each_chunk(buf.numel(), [&](int64_t offset, int count) {
    MPI_Request request;
    MPI_Iallreduce(MPI_IN_PLACE, at(buf, offset), count, mpi_type(buf.dtype), mpi_op(op), comm_, &request);
    wait(&request, 1);
  });
  if (op == ReduceOp::avg) divide(buf, size());
}

void MpiComm::move_reduce_scatter(const Tensor& send, const Tensor& recv, ReduceOp op) const {
  const int64_t n = recv.numel();
  const MPI_Datatype type = mpi_type(send.dtype);
  // NCCL's in-place reduce-scatter keeps rank r's result where its block was (recv = send +
  // r x n), but MPI_IN_PLACE here would put it at the front: in place, and past one message,
  // reduce each rank's block to that rank instead.
  const bool in_place = recv.data == at(send, rank_ * n);
  if (n <= message_limit_ && !in_place) {
    MPI_Request request;
    MPI_Ireduce_scatter_block(send.data, recv.data, static_cast<int>(n), type, mpi_op(op), comm_, &request);
    wait(&request, 1);
  } else {
    for_each_chunk(n, [&](int64_t offset, int count) {
      for (int root = 0; root < size(); ++root) {
        const bool mine = root == rank_;
        MPI_Request request;
        MPI_Ireduce(mine && in_place ? MPI_IN_PLACE : at(send, root * n + offset), mine ? at(recv, offset) : nullptr,
                    count, type, mpi_op(op), root, comm_, &request);
        wait(&request, 1);
      }
    });
  }
  if (op == ReduceOp::avg) divide(recv, size());
}

void MpiComm::move_all_gather(const Tensor& send, const Tensor& recv) const {
  const int64_t n = send.numel();
  const MPI_Datatype type = mpi_type(send.dtype);
  // NCCL's in-place all-gather: send is this rank's block of recv.
  const bool in_place = send.data == at(recv, rank_ * n);
  for_each_chunk(n, [&](int64_t offset, int count) {
    // Rank r's piece of this chunk lands at recv[r x n + offset]: receive one `block` per rank,
    // `count` elements whose extent is a whole rank's block.
    MPI_Datatype piece, block;
    MPI_Type_contiguous(count, type, &piece);
    MPI_Type_create_resized(piece, 0, static_cast<MPI_Aint>(static_cast<size_t>(n) * dtype_size(send.dtype)), &block);
    MPI_Type_commit(&block);
    MPI_Request request;
    MPI_Iallgather(in_place ? MPI_IN_PLACE : at(send, offset), count, type, at(recv, offset), 1, block, comm_, &request);
    wait(&request, 1);
    MPI_Type_free(&block);
    MPI_Type_free(&piece);
  });
}

void MpiComm::move_broadcast(const Tensor& buf, int root) const {
  for_each_chunk(buf.numel(), [&](int64_t offset, int count) {
    MPI_Request request;
    MPI_Ibcast(at(buf, offset), count, mpi_type(buf.dtype), root, comm_, &request);
    wait(&request, 1);
  });
}

void MpiComm::move_sendrecv(const Tensor& send, int to, const Tensor& recv, int from) const {
  // Nonblocking both ways, then wait: a ring where everyone sends first cannot deadlock.
  std::vector<MPI_Request> requests;
  if (to >= 0)
    for_each_chunk(send.numel(), [&](int64_t offset, int count) {
      requests.emplace_back();
      MPI_Isend(at(send, offset), count, mpi_type(send.dtype), to, kDataTag, comm_, &requests.back());
    });
  if (from >= 0)
    for_each_chunk(recv.numel(), [&](int64_t offset, int count) {
      requests.emplace_back();
      MPI_Irecv(at(recv, offset), count, mpi_type(recv.dtype), from, kDataTag, comm_, &requests.back());
    });
  wait(requests.data(), static_cast<int>(requests.size()));
}

}  // namespace shardlab
