// nccl_comm.cpp: Comm on NCCL. See nccl_comm.h.
//   build: cmake --preset default && cmake --build --preset default   (whenever nvcc is found)
#include "cuda/nccl_comm.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

#include "cuda/check.h"

#define NCCL_CHECK(call)                                                                        \
  do {                                                                                          \
    const ncclResult_t res_ = (call);                                                           \
    if (res_ != ncclSuccess) shardlab::cuda::fail(#call, __FILE__, __LINE__, ncclGetErrorString(res_)); \
  } while (0)

namespace shardlab {
namespace {

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::f32: return ncclFloat32;
    case DType::bf16: return ncclBfloat16;
    case DType::f16: return ncclFloat16;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
    case DType::u8: return ncclUint8;
  }
  throw std::logic_error("nccl_type: unknown dtype");
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::avg: return ncclAvg;  // NCCL divides by the group size itself
    case ReduceOp::max: return ncclMax;
  }
  throw std::logic_error("nccl_op: unknown reduce op");
}

cudaStream_t stream_of(Stream& s) { return CudaDevice::handle(s); }

}  // namespace

std::unique_ptr<NcclComm> NcclComm::world(CudaDevice& dev, bool debug) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  // Rank 0 makes the id (it names a socket rank 0 listens on); everyone else learns it over MPI.
  ncclUniqueId id{};
  if (rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm = nullptr;
  // Collective: returns once every rank has joined, on the GPU cudaSetDevice chose (CudaDevice).
  NCCL_CHECK(ncclCommInitRank(&comm, size, id, rank));
  MPI_Comm mpi = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &mpi);
  std::vector<int> ranks(static_cast<size_t>(size));
  std::iota(ranks.begin(), ranks.end(), 0);
  return std::unique_ptr<NcclComm>(new NcclComm(dev, comm, mpi, "world", std::move(ranks), debug));
}

NcclComm::NcclComm(CudaDevice& dev, ncclComm_t comm, MPI_Comm mpi, std::string name, std::vector<int> world_ranks,
                   bool debug)
    : dev_(dev), comm_(comm), mpi_(mpi), name_(std::move(name)), world_ranks_(std::move(world_ranks)) {
  MPI_Comm_rank(mpi_, &rank_);
  if (debug) check_ = std::make_unique<MismatchCheck>(mpi_, name_, world_ranks_);
  CUDA_CHECK(cudaEventCreateWithFlags(&last_op_, cudaEventDisableTiming));
}

NcclComm::~NcclComm() {
  // Not in an unwinding error path: ncclCommDestroy waits for the communicator's queued work.
  ncclCommDestroy(comm_);
  cudaEventDestroy(last_op_);
  free_mpi_group(mpi_, check_.get());
}

std::unique_ptr<Comm> NcclComm::split(int color, int key) {
  // Both libraries order the new group's members by key, then by rank in the parent, so the
  // MPI twin and the NCCL communicator agree on who is rank i.
  MpiGroup g = split_mpi_group(mpi_, color, key, world_ranks_[rank_]);
  ncclComm_t child = nullptr;
  NCCL_CHECK(ncclCommSplit(comm_, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &child, nullptr));
  if (g.comm == MPI_COMM_NULL) return nullptr;
  return std::unique_ptr<NcclComm>(
      new NcclComm(dev_, child, g.comm, split_name(name_, color), std::move(g.world_ranks), check_ != nullptr));
}

Device::CollectiveMark NcclComm::begin(Stream& s) {
  // The previous operation of this communicator may have run on another stream: this one
  // starts after it (a no-op wait when it ran on s, or has finished).
  CUDA_CHECK(cudaStreamWaitEvent(stream_of(s), last_op_, 0));
  return dev_.begin_collective(s);
}

void NcclComm::end(Stream& s, const Device::CollectiveMark& m, std::string_view api, CollectiveArgs a) {
  CUDA_CHECK(cudaEventRecord(last_op_, stream_of(s)));
  dev_.end_collective(s, m, api, a);
}

CollectiveArgs NcclComm::args(OperationArgs op) {
  op.seq = ++seq_;
  return collective_args(*this, op);
}

namespace {

// The kernel name NCCL would likely show: the protocol is the cost model's prediction for the
// profile's link (NCCL's tuner decides for real).
std::string predicted_kernel(const Device& dev, const std::vector<int>& ranks, CollectiveKind kind, ReduceOp op,
                             DType dtype, double bytes) {
  return nccl_kernel_name(kind, op, dtype, collective_protocol(ring_path(dev.profile(), ranks), kind, bytes));
}

}  // namespace

void NcclComm::all_reduce(const Tensor& buf, ReduceOp op, Stream& s) {
  const double bytes = static_cast<double>(buf.bytes());
  if (check_) check_->collective(CollectiveKind::all_reduce, op, buf.dtype, buf.numel(), -1);
  const auto m = begin(s);
  // In place: send and receive buffers are the same pointer.
  NCCL_CHECK(ncclAllReduce(buf.data, buf.data, static_cast<size_t>(buf.numel()), nccl_type(buf.dtype), nccl_op(op),
                           comm_, stream_of(s)));
  end(s, m, "ncclAllReduce",
      args({.name = "allreduce",
            .kernel_name = predicted_kernel(dev_, world_ranks_, CollectiveKind::all_reduce, op, buf.dtype, bytes),
            .in_nelems = buf.numel(),
            .out_nelems = buf.numel(),
            .dtype = buf.dtype}));
}

void NcclComm::reduce_scatter(const Tensor& send, const Tensor& recv, ReduceOp op, Stream& s) {
  check_reduce_scatter(*this, send, recv);
  if (check_) check_->collective(CollectiveKind::reduce_scatter, op, send.dtype, recv.numel(), -1);
  const auto m = begin(s);
  // recvcount is per rank; rank r gets block r of the sum (in place when recv is that block).
  NCCL_CHECK(ncclReduceScatter(send.data, recv.data, static_cast<size_t>(recv.numel()), nccl_type(send.dtype),
                               nccl_op(op), comm_, stream_of(s)));
  end(s, m, "ncclReduceScatter",
      args({.name = "reduce_scatter",
            .kernel_name = predicted_kernel(dev_, world_ranks_, CollectiveKind::reduce_scatter, op, send.dtype,
                                            static_cast<double>(send.bytes())),
            .in_nelems = send.numel(),
            .out_nelems = recv.numel(),
            .dtype = send.dtype}));
}

void NcclComm::all_gather(const Tensor& send, const Tensor& recv, Stream& s) {
  check_all_gather(*this, send, recv);
  if (check_) check_->collective(CollectiveKind::all_gather, ReduceOp::sum, send.dtype, send.numel(), -1);
  const auto m = begin(s);
  // sendcount is per rank; block r of recv comes from rank r (in place when send is this rank's block).
  NCCL_CHECK(ncclAllGather(send.data, recv.data, static_cast<size_t>(send.numel()), nccl_type(send.dtype), comm_,
                           stream_of(s)));
  end(s, m, "ncclAllGather",
      args({.name = "allgather",
            .kernel_name = predicted_kernel(dev_, world_ranks_, CollectiveKind::all_gather, ReduceOp::sum, send.dtype,
                                            static_cast<double>(recv.bytes())),
            .in_nelems = send.numel(),
            .out_nelems = recv.numel(),
            .dtype = send.dtype}));
}

void NcclComm::broadcast(const Tensor& buf, int root, Stream& s) {
  check_broadcast(*this, root);
  if (check_) check_->collective(CollectiveKind::broadcast, ReduceOp::sum, buf.dtype, buf.numel(), root);
  const auto m = begin(s);
  NCCL_CHECK(ncclBroadcast(buf.data, buf.data, static_cast<size_t>(buf.numel()), nccl_type(buf.dtype), root, comm_,
                           stream_of(s)));
  end(s, m, "ncclBroadcast",
      args({.name = "broadcast",
            .kernel_name = predicted_kernel(dev_, world_ranks_, CollectiveKind::broadcast, ReduceOp::sum, buf.dtype,
                                            static_cast<double>(buf.bytes())),
            .in_nelems = buf.numel(),
            .out_nelems = buf.numel(),
            .dtype = buf.dtype}));
}

void NcclComm::sendrecv(const Tensor& send, int to, const Tensor& recv, int from, Stream& s) {
  check_sendrecv(*this, send, to, recv, from);
  if (check_)
    check_->sendrecv(to >= 0 ? send.dtype : recv.dtype, to, to >= 0 ? send.numel() : 0, from,
                     from >= 0 ? recv.numel() : 0);
  const auto m = begin(s);
  // Grouped: NCCL launches the send and the receive as one operation at ncclGroupEnd.
  NCCL_CHECK(ncclGroupStart());
  if (to >= 0)
    NCCL_CHECK(ncclSend(send.data, static_cast<size_t>(send.numel()), nccl_type(send.dtype), to, comm_, stream_of(s)));
  if (from >= 0)
    NCCL_CHECK(ncclRecv(recv.data, static_cast<size_t>(recv.numel()), nccl_type(recv.dtype), from, comm_, stream_of(s)));
  NCCL_CHECK(ncclGroupEnd());
  end(s, m, "ncclGroupEnd",
      args({.name = "sendrecv",
            .kernel_name = "ncclDevKernel_SendRecv",
            .in_nelems = to >= 0 ? send.numel() : 0,
            .out_nelems = from >= 0 ? recv.numel() : 0,
            .dtype = to >= 0 ? send.dtype : recv.dtype,
            .to = to,
            .from = from}));
}

void NcclComm::barrier() {
  const int64_t t0 = dev_.now_ns();
  MPI_Barrier(mpi_);
  dev_.trace().cpu_op("barrier", t0, dev_.now_ns() - t0);
}

}  // namespace shardlab
