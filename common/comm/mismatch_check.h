// mismatch_check.h: debug mode (--debug-collectives) for any communicator, over MPI.
//
// A collective that some member issues differently (another operation, count, dtype, root, or
// the same one as a different call) does not fail in NCCL: it hangs, or silently gives wrong
// sums. So before each operation the members exchange a small header point to point, on an MPI
// communicator with the same members (MpiComm's own; NcclComm's MPI twin), and compare:
// - a collective's members all hear from each other, so every member sees every difference
//   and every one of them throws (none is left waiting for data);
// - a sendrecv tells its receiver what it sends and its sender what it expects, so both ends of
//   a mismatched transfer throw. Ranks further along a mismatched ring cannot know: they may
//   still wait.
// The message names the communicator, the call number, and what each rank issued. After a
// mismatch the communicator is unusable, as an errored NCCL communicator is: every further
// operation throws.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "device/cost_model.h"
#include "device/tensor.h"

namespace shardlab {

class MismatchCheck {
 public:
  // `mpi` has the communicator's members in its order (not owned); `world_ranks` names them.
  MismatchCheck(MPI_Comm mpi, std::string comm_name, std::vector<int> world_ranks);

  // Before a collective: `count` is per rank (NCCL's count), `root` only for broadcast. Each
  // throws CollectiveMismatch on a difference, and once one was found, at every later call.
  void collective(CollectiveKind kind, ReduceOp op, DType dtype, int64_t count, int root);
  // Before a sendrecv: `to` / `from` as in Comm::sendrecv (-1: no send / no receive).
  void sendrecv(DType dtype, int to, int64_t send_count, int from, int64_t recv_count);

  bool broken() const { return !broken_.empty(); }

 private:
  void require_usable() const;
  std::string who(int comm_rank) const;  // "rank 2", or "rank 1 (world rank 3)" in a sub-group
  [[noreturn]] void mismatch(const std::string& message);

  MPI_Comm mpi_;
  std::string name_;
  std::vector<int> world_ranks_;
  int rank_ = 0;
  int64_t collectives_ = 0;  // collectives checked (the same count on every member)
  int64_t sendrecvs_ = 0;    // sendrecvs this rank issued: they involve only some members, so they count apart
  std::string broken_;       // the mismatch that made the communicator unusable, if any
};

}  // namespace shardlab
