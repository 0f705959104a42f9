// Catch2 entry point for multi-rank tests: every rank runs every test case, in the same order,
// so collective calls inside them line up. Run under mpirun at several world sizes.
//
// A test case that fails on some ranks only (an assertion, or an exception such as a
// communicator's error) would leave the others waiting in a collective for a rank that has
// moved on: ctest would kill the world at its timeout minutes later and report a timeout. So a
// listener ends the whole job as soon as a rank finishes a failed test case: it prints which
// case, flushes Catch2's report of the failure, and calls MPI_Abort, which takes every rank
// down within seconds with a non-zero status.
//
// Catch2 itself is compiled in catch_impl.cpp; this file needs its reporter interfaces (for the
// listener), which the header declares only on request.
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include <catch2/catch.hpp>
#include <mpi.h>

#include "catch_session.h"

#include <cstdio>

namespace {

struct AbortOnFailure : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;
  void testCaseEnded(const Catch::TestCaseStats& stats) override {
    if (stats.totals.assertions.failed == 0) return;
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    std::fflush(stdout);
    std::fprintf(stderr, "rank %d: test case '%s' failed; ending every rank (MPI_Abort)\n", rank,
                 stats.testInfo.name.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
};

}  // namespace

CATCH_REGISTER_LISTENER(AbortOnFailure)

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const int result = run_catch_session(argc, argv);
  // A rank that failed reports it through its exit code; mpirun then fails the test.
  MPI_Finalize();
  return result;
}
