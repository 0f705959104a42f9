// nccl_comm.h: the communicator on NCCL, for the CUDA device (--device cuda, --comm nccl).
//
// Bootstrap (as karpathy/llm.c's zero.cuh does it): rank 0 asks NCCL for a unique id, MPI
// broadcasts it, and every rank joins with ncclCommInitRank on the GPU its CudaDevice bound
// (its local rank). split is ncclCommSplit. A sendrecv is ncclGroupStart, ncclSend, ncclRecv,
// ncclGroupEnd: grouped, NCCL posts both at once, so a ring where everyone sends first cannot
// deadlock. Every call runs on the stream it is given and returns at once: the CPU only queues.
//
// Issue order: one communicator runs its operations in the order they were issued, whatever
// stream each was issued on (comm.h). NCCL needs that order to be the same on every rank; this
// class also makes it explicit on the GPU by having each operation's stream wait for the
// previous operation's end (an event), so two streams never run one communicator's kernels at
// once, exactly as the sim models it.
//
// Each operation is bracketed by timing events on its stream (Device::begin_collective /
// end_collective), so it appears in the trace as an nccl... kernel with Kineto's collective
// args; its kernel name uses the protocol the cost model predicts (NCCL picks its own).
//
// Debug mode (--debug-collectives): before each NCCL call the members compare what they are
// about to issue over the MPI twin (MismatchCheck, as MpiComm does), so a mismatch throws,
// naming the ranks, where NCCL would hang. NCCL_DEBUG=WARN is NCCL's own aid.
#pragma once

#include <mpi.h>
#include <nccl.h>

#include <memory>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "cuda/cuda_device.h"
#include "comm/mismatch_check.h"
#include "comm/mpi_group.h"

namespace shardlab {

class NcclComm final : public Comm {
 public:
  // Every rank of the job, named "world". Collective over MPI_COMM_WORLD. `debug`: check every
  // operation against the other members first. Children of split inherit it.
  static std::unique_ptr<NcclComm> world(CudaDevice& dev, bool debug);
  ~NcclComm() override;
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(world_ranks_.size()); }
  const std::vector<int>& world_ranks() const override { return world_ranks_; }
  const std::string& name() const override { return name_; }
  Device& device() const override { return dev_; }

  std::unique_ptr<Comm> split(int color, int key) override;

  void all_reduce(const Tensor& buf, ReduceOp op, Stream& s) override;
  void reduce_scatter(const Tensor& send, const Tensor& recv, ReduceOp op, Stream& s) override;
  void all_gather(const Tensor& send, const Tensor& recv, Stream& s) override;
  void broadcast(const Tensor& buf, int root, Stream& s) override;
  void sendrecv(const Tensor& send, int to, const Tensor& recv, int from, Stream& s) override;
  void barrier() override;

 private:
  NcclComm(CudaDevice& dev, ncclComm_t comm, MPI_Comm mpi, std::string name, std::vector<int> world_ranks,
           bool debug);

  // Around every operation: order after this communicator's previous one, time it, trace it.
  Device::CollectiveMark begin(Stream& s);
  void end(Stream& s, const Device::CollectiveMark& m, std::string_view api, CollectiveArgs args);
  CollectiveArgs args(OperationArgs op);  // numbers it (Seq), then comm.h's collective_args

  CudaDevice& dev_;
  ncclComm_t comm_;
  MPI_Comm mpi_;  // the same members over MPI: for split's bookkeeping, barrier and debug mode
  std::string name_;
  std::vector<int> world_ranks_;
  int rank_ = 0;
  std::unique_ptr<MismatchCheck> check_;  // debug mode only
  cudaEvent_t last_op_ = nullptr;  // end of the previous operation, on whatever stream it ran
  int64_t seq_ = 0;
};

}  // namespace shardlab
