#include "comm/mpi_group.h"

namespace shardlab {

MpiGroup split_mpi_group(MPI_Comm parent, int color, int key, int world_rank) {
  MpiGroup g;
  MPI_Comm_split(parent, color < 0 ? MPI_UNDEFINED : color, key, &g.comm);
  if (g.comm == MPI_COMM_NULL) return g;
  int n = 0;
  MPI_Comm_size(g.comm, &n);
  g.world_ranks.resize(static_cast<size_t>(n));
  MPI_Allgather(&world_rank, 1, MPI_INT, g.world_ranks.data(), 1, MPI_INT, g.comm);
  return g;
}

std::string split_name(const std::string& parent, int color) { return parent + ".split(" + std::to_string(color) + ")"; }

void free_mpi_group(MPI_Comm& comm, const MismatchCheck* check) {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && !(check && check->broken())) MPI_Comm_free(&comm);
}

}  // namespace shardlab
