// Catch2 entry point for multi-rank tests: every rank runs every test case, in the same order,
// so collective calls inside them line up. Run under mpirun at several world sizes.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <mpi.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const int result = Catch::Session().run(argc, argv);
  // A rank that failed reports it through its exit code; mpirun then fails the test.
  MPI_Finalize();
  return result;
}
