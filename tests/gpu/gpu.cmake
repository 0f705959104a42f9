# CUDA builds only: the kernels against the CPU ops, on a GPU (one executable; without a visible
# GPU it prints why and exits 77, which ctest counts as skipped). The chapters' own GPU runs are
# every_chapter.cmake's "on the GPU" tests.
if(SHARDLAB_HAVE_CUDA)
  # Its own main (it skips before Catch2 starts), Catch2's implementation compiled once for all
  # (tests/CMakeLists.txt).
  add_executable(shardlab_cuda_tests $<TARGET_OBJECTS:shardlab_catch_impl> ${TESTS}/gpu/cuda_test_ops.cpp
                                     ${TESTS}/gpu/cuda_spin.cu ${PROJECT_SOURCE_DIR}/chapters/00_streams_events/polynomial.cu)
  target_link_libraries(shardlab_cuda_tests PRIVATE shardlab_common Catch2::Catch2 shardlab_warnings)
  target_include_directories(shardlab_cuda_tests PRIVATE ${PROJECT_SOURCE_DIR}/chapters ${TESTS})
  set_source_files_properties(${TESTS}/gpu/cuda_test_ops.cpp PROPERTIES COMPILE_OPTIONS "${SHARDLAB_TEST_OPTIMIZATION}")
  add_test(NAME "cuda: kernels against the CPU ops" COMMAND shardlab_cuda_tests)
  set_tests_properties("cuda: kernels against the CPU ops" PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600)
endif()
