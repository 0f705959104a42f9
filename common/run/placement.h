// placement.h: where a rank runs. Its place on its node (which GPU it takes), whether --device
// cuda can run with the flags given, what --device auto picks, and the CUDA device with the world
// communicator. Internal to run/ (run_chapter.cpp).
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "run/job.h"

namespace shardlab {

// Where this rank sits on its node: its local rank as the launcher says (Open MPI:
// OMPI_COMM_WORLD_LOCAL_RANK, Slurm's srun: SLURM_LOCALID), else its place among the ranks MPI
// finds sharing the node's memory, and how many ranks share the node. Collective over
// MPI_COMM_WORLD. Each rank's summary.json entry records it ("placement").
struct NodePlacement {
  int local_rank = 0, local_size = 1;
  std::string local_rank_from = "MPI_COMM_TYPE_SHARED", host;
};
NodePlacement node_placement(int rank);

// Why --device cuda cannot run with these flags on a node with `gpus` GPUs, or "" when it can.
std::string cuda_config_problem(const CommonFlags& f, int gpus, const NodePlacement& node);

// --device auto: cuda where every rank of this node can have a GPU of its own (or --comm mpi
// lets them share), else the sim, saying why when GPUs exist but are too few. --compute skip
// always means the sim: only it can skip the math.
std::string auto_device(const CommonFlags& f, int gpus, const NodePlacement& node, int rank);

#ifdef SHARDLAB_WITH_CUDA
// The CUDA device on GPU `gpu` (the local rank, modulo the GPUs: shared under --comm mpi) and
// the world communicator. Every rank measures time from rank 0's clock, so lanes line up.
std::pair<std::unique_ptr<Device>, std::unique_ptr<Comm>> cuda_runtime(Profile profile, const CommonFlags& f, int rank,
                                                                       int size, int gpu, const ChapterInfo& info);
#endif

}  // namespace shardlab
