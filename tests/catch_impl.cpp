// Catch2's implementation, compiled once for every test binary (the single header is big: ~15 s
// even unoptimized), and the one call into it the entry points need, main_unit.cpp and
// main_mpi.cpp, which stay small files of their own (Catch2 declares its Session only here).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "catch_session.h"

int run_catch_session(int argc, char** argv) { return Catch::Session().run(argc, argv); }
