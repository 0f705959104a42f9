// catch_session.h: runs Catch2 on the command line's test specs (catch_impl.cpp), for the entry
// points main_unit.cpp, main_mpi.cpp and gpu/cuda_test_ops.cpp.
#pragma once

int run_catch_session(int argc, char** argv);
