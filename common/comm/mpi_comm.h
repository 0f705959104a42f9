// mpi_comm.h: the communicator over MPI: the simulated GPU's, and a host-staged one for CUDA.
//
// Every rank is one MPI process, so a collective moves real data between processes with the
// matching MPI call. On the sim its *time* is virtual: the members agree on a start (the latest
// member's ready time, README.md, "The simulated GPU") and add the cost model's
// ring time for the group's link tier. One MpiComm owns one MPI communicator, so its messages
// never mix with another communicator's.
//
// Each operation takes one path (MpiComm::run): issue on the stream, check the members agree
// (debug mode), agree on the start, move the data, record it on the stream. On a real GPU
// (--device cuda --comm mpi) the path is run_staged instead: copy the buffers to host memory on
// the stream, run MPI, copy the results back; slow, but several ranks can share one GPU, which
// NCCL refuses, so correctness runs need only one GPU.
//
// Debug mode: before each operation the members compare headers (operation, call number, count,
// dtype, root) point to point, on this communicator's MPI_Comm (MismatchCheck, shared with
// NcclComm). After a mismatch the communicator refuses every further operation.
//
// Counts: MPI counts are `int`. Messages longer than INT_MAX elements are split into several
// MPI calls (all-gather uses a resized datatype per chunk), so counts up to 2^31 elements and
// beyond work; set_message_limit() lowers the split point so tests reach that path cheaply.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/comm.h"
#include "device/cost_model.h"
#include "comm/mismatch_check.h"
#include "comm/mpi_group.h"

namespace shardlab {

class SimDevice;

class MpiComm final : public Comm {
 public:
  // All ranks of the job (a duplicate of MPI_COMM_WORLD), named "world". Collective: every
  // rank calls it. `debug`: check every operation against the other members first (comm.h).
  static std::unique_ptr<MpiComm> world(Device& dev, bool debug);
  ~MpiComm() override;
  MpiComm(const MpiComm&) = delete;
  MpiComm& operator=(const MpiComm&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(world_ranks_.size()); }
  const std::vector<int>& world_ranks() const override { return world_ranks_; }
  const std::string& name() const override { return name_; }
  Device& device() const override { return dev_; }
  const LinkTier& link() const { return path_.link; }

  // Children are named "<parent>.split(<color>)" and inherit debug mode.
  std::unique_ptr<Comm> split(int color, int key) override;

  void all_reduce(const Tensor& buf, ReduceOp op, Stream& s) override;
  void reduce_scatter(const Tensor& send, const Tensor& recv, ReduceOp op, Stream& s) override;
  void all_gather(const Tensor& send, const Tensor& recv, Stream& s) override;
  void broadcast(const Tensor& buf, int root, Stream& s) override;
  void sendrecv(const Tensor& send, int to, const Tensor& recv, int from, Stream& s) override;
  void barrier() override;

  // The most elements one MPI call carries (default INT_MAX, MPI's limit). Every member must
  // set the same value.
  void set_message_limit(int64_t elements);

 private:
  struct Call;  // one operation, described the same way whatever its kind (mpi_comm.cpp)

  MpiComm(Device& dev, SimDevice* sim, MPI_Comm comm, std::string name, std::vector<int> world_ranks, bool debug);

  // The one path every operation takes.
  void run(const Call& call, Stream& s);
  void run_staged(const Call& call, Stream& s);  // a real GPU: through host memory
  void check(const Call& call);                  // debug mode
  // The flight recorder's entry (comm/watchdog.h) for the operation; names its waits.
  int64_t record_issued(const Call& call, int64_t seq);
  // Every wait on the other ranks: the watchdog's (a timeout, or another rank's failure, throws).
  void wait(MPI_Request* requests, int n) const;
  // The latest member's ready time; throws CollectiveMismatch when the members' calls differ.
  int64_t agree_alike(const Call& call, int64_t ready_ns);
  // [start, end) of the operation on this rank, from this rank's ready time.
  std::pair<int64_t, int64_t> agree_collective(const Call& call, int64_t ready_ns);
  std::pair<int64_t, int64_t> agree_p2p(const Call& call, int64_t ready_ns);
  CollectiveArgs trace_args(const Call& call, int64_t seq) const;

  // Data movement, one MPI call per chunk of at most message_limit_ elements.
  void for_each_chunk(int64_t n, const std::function<void(int64_t offset, int count)>& f) const;
  void move_all_reduce(const Tensor& buf, ReduceOp op) const;
  void move_reduce_scatter(const Tensor& send, const Tensor& recv, ReduceOp op) const;
  void move_all_gather(const Tensor& send, const Tensor& recv) const;
  void move_broadcast(const Tensor& buf, int root) const;
  void move_sendrecv(const Tensor& send, int to, const Tensor& recv, int from) const;

  Device& dev_;
  SimDevice* sim_;  // nullptr on a real GPU
  MPI_Comm comm_;
  std::string name_;
  std::vector<int> world_ranks_;
  std::string waiting_for_;  // the operation under way, as a timeout names it
  int rank_ = 0;
  std::unique_ptr<MismatchCheck> check_;  // debug mode only
  RingPath path_;  // what the cost model charges this group's collectives
  int64_t message_limit_;
  int64_t last_end_ns_ = 0;  // the previous operation's end (identical on all members after a collective)
  int64_t seq_ = 0;          // collectives issued on this communicator (the same on every member)
  int64_t p2p_seq_ = 0;      // sendrecvs this rank issued: they involve only some members, so they count apart
};

}  // namespace shardlab
