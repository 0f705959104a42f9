// bench_sim: how fast is the simulator itself? Prints wall time per simulated op, per
// collective and for a synthetic training step of a few thousand ops. A benchmark, not a test.
//
//   cmake --build --preset default --target bench_sim
//   mpirun -np 4 build/tests/bench_sim        (add --oversubscribe on a 2-core machine)
#include <mpi.h>

#include <chrono>
#include <cstdio>

#include "comm/mpi_comm.h"
#include "device/sim_device.h"

using namespace shardlab;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  {
    SimDevice dev(load_profile("h100-8"), ComputeMode::skip, rank, size);
    auto world = MpiComm::world(dev, false);
    Stream& compute = dev.compute_stream();
    Stream& comm = dev.create_stream("comm");
    Tensor a = dev.empty({1 << 20}, DType::f32, compute, "a");
    Tensor b = dev.empty({1 << 20}, DType::f32, compute, "b");
    const Kernel k{"matmul", 1e9, 1e7, DType::f32, KernelClass::matmul, {reads(a), writes(b)}};

    constexpr int kOps = 200000;
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kOps; ++i) dev.launch(compute, k, {});
    const double launch_us = seconds_since(t0) / kOps * 1e6;

    t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kOps; ++i) dev.wait(comm, dev.record(compute));
    const double event_us = seconds_since(t0) / kOps * 1e6 / 2;

    t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kOps; ++i) {
      Tensor t = dev.empty({4096}, DType::f32, compute, "act");
      dev.free(t);
    }
    const double alloc_us = seconds_since(t0) / kOps * 1e6;

    constexpr int kColls = 2000;
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kColls; ++i) world->all_reduce(b, ReduceOp::sum, comm);
    const double coll_us = seconds_since(t0) / kColls * 1e6;

    // A synthetic step: 12 blocks x (forward 20 ops + backward 40 ops + 4 events), a bucketed
    // all-reduce every block, an allocation per block: about 770 ops.
    constexpr int kSteps = 20;
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = std::chrono::steady_clock::now();
    int ops = 0;
    for (int s = 0; s < kSteps; ++s) {
      for (int blk = 0; blk < 12; ++blk) {
        Tensor act = dev.empty({1 << 16}, DType::f32, compute, "activation");
        for (int i = 0; i < 60; ++i, ++ops) dev.launch(compute, k, {});
        dev.wait(comm, dev.record(compute));
        world->all_reduce(b, ReduceOp::sum, comm);
        dev.free(act);
        ops += 4;
      }
      dev.wait(compute, dev.record(comm));
      dev.synchronize();
    }
    const double step_ms = seconds_since(t0) / kSteps * 1e3;

    if (rank == 0) {
      std::printf("bench_sim: %d rank(s), wall time of the simulator itself (compute skip)\n", size);
      std::printf("  kernel launch               %8.3f us per op\n", launch_us);
      std::printf("  event record + wait         %8.3f us per call\n", event_us);
      std::printf("  allocate + free (cached)    %8.3f us per pair\n", alloc_us);
      std::printf("  all-reduce (time agreement) %8.3f us per collective\n", coll_us);
      std::printf("  synthetic step (%d ops, 12 collectives) %8.3f ms per step\n", ops / kSteps, step_ms);
      std::printf("  trace events recorded       %zu\n", dev.trace().event_count());
    }
  }
  MPI_Finalize();
  return 0;
}
