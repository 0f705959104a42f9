// Catch2 entry point for the single-process unit tests (Catch2 itself: catch_impl.cpp).
#include "catch_session.h"

int main(int argc, char** argv) { return run_catch_session(argc, argv); }
