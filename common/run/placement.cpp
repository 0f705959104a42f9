#include "run/placement.h"

#include <mpi.h>

#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <iostream>

#include "cuda/cuda_probe.h"
#include "comm/mpi_comm.h"
#ifdef SHARDLAB_WITH_CUDA
#include "cuda/cuda_device.h"
#include "cuda/nccl_comm.h"
#endif

namespace shardlab {

NodePlacement node_placement(int rank) {
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  NodePlacement p;
  MPI_Comm_rank(node, &p.local_rank);
  MPI_Comm_size(node, &p.local_size);
  MPI_Comm_free(&node);
  char host[MPI_MAX_PROCESSOR_NAME];
  int len = 0;
  MPI_Get_processor_name(host, &len);
  p.host.assign(host, static_cast<size_t>(len));
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"}) {
    const char* v = std::getenv(var);
    if (!v) continue;
    // Only this rank may see a bad value, so it warns and goes on rather than leaving the
    // others waiting in the next collective.
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    if (end == v || *end != '\0' || n < 0 || n > INT32_MAX) {
      std::cerr << "rank " << rank << ": warning: " << var << "='" << v
                << "' is not a local rank (a whole number from 0); using the place MPI finds: " << p.local_rank
                << std::endl;
      break;
    }
    p.local_rank = static_cast<int>(n);
    p.local_rank_from = var;
    break;
  }
  return p;
}

std::string cuda_config_problem(const CommonFlags& f, int gpus, const NodePlacement& node) {
  if (gpus == 0) return "--device cuda: not available (" + cuda_unavailable_reason() + "); use --device sim";
  if (f.compute == "skip")
    return "--compute skip: only the sim can skip the math (a GPU always computes); use --compute real";
  if (f.comm == "nccl" && node.local_size > gpus)
    return std::to_string(node.local_size) + " ranks share this node but it has " + std::to_string(gpus) +
           " GPU(s): NCCL refuses two ranks on one GPU (\"Duplicate GPU detected\", NCCL before 2.30); run at most " +
           std::to_string(gpus) + " rank(s) per node, or add --comm mpi to share GPUs (host-staged, for correctness runs)";
  return "";
}

std::string auto_device(const CommonFlags& f, int gpus, const NodePlacement& node, int rank) {
  if (gpus == 0 || f.compute == "skip") return "sim";
  if (node.local_size <= gpus || f.comm == "mpi") return "cuda";
  if (rank == 0)
    std::cout << "note: " << node.local_size << " ranks share this node's " << gpus
              << " GPU(s), so --device auto runs the sim; --device cuda --comm mpi shares the GPUs instead\n";
  return "sim";
}

#ifdef SHARDLAB_WITH_CUDA
std::pair<std::unique_ptr<Device>, std::unique_ptr<Comm>> cuda_runtime(Profile profile, const CommonFlags& f, int rank,
                                                                       int size, int gpu, const ChapterInfo& info) {
  int64_t base = std::chrono::duration_cast<std::chrono::nanoseconds>(
                     std::chrono::system_clock::now().time_since_epoch())
                     .count();
  MPI_Bcast(&base, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
  auto dev = std::make_unique<CudaDevice>(std::move(profile), rank, size, gpu, base);
  if (rank == 0)
    std::cout << "shardlab " << info.id << ": " << info.title << "\n"
              << size << " rank(s), device cuda (" << dev->profile().gpu_name << ", times are MEASURED), comm "
              << f.comm << (f.comm == "mpi" ? " (host-staged)" : "") << "\n"
              << std::endl;
  std::unique_ptr<Comm> world;
  if (f.comm == "nccl")
    world = NcclComm::world(*dev, f.debug_collectives);
  else
    world = MpiComm::world(*dev, f.debug_collectives);
  return {std::move(dev), std::move(world)};
}
#endif

}  // namespace shardlab
