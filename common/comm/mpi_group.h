// mpi_group.h: the MPI communicator under every shardlab communicator, split and freed.
//
// MpiComm moves its data over its MPI communicator; NcclComm keeps an MPI twin of its NCCL
// communicator for split's bookkeeping, barriers and debug mode. Both split and free that MPI
// communicator the same way, here.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

#include "comm/mismatch_check.h"

namespace shardlab {

struct MpiGroup {
  MPI_Comm comm = MPI_COMM_NULL;  // MPI_COMM_NULL for a rank in no group
  std::vector<int> world_ranks;   // the members' world ranks, in the group's rank order
};

// MPI_Comm_split of `parent` (collective over it): the members of `color` ordered by key, then
// by rank in the parent (as ncclCommSplit orders them); color < 0 joins no group. `world_rank`:
// this rank's world rank, gathered into the group's world_ranks.
MpiGroup split_mpi_group(MPI_Comm parent, int color, int key, int world_rank);

// "<parent>.split(<color>)": a split communicator's name.
std::string split_name(const std::string& parent, int color);

// Frees a communicator's MPI side, unless MPI has finalized or a mismatch broke the
// communicator: headers nobody received may then still be in flight to it, and freeing it would
// let MPI hand its context id to a new communicator, where they would be received by mistake.
// A broken communicator is deliberately kept until MPI_Finalize.
void free_mpi_group(MPI_Comm& comm, const MismatchCheck* check);

}  // namespace shardlab
