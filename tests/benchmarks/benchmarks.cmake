# Benchmarks: built with the project, run by hand (they print figures; they are not tests).
# The binaries land in build/tests/ (bench_sim, ...), as the READMEs' commands name them.
add_executable(bench_sim ${TESTS}/benchmarks/bench_sim.cpp)
target_link_libraries(bench_sim PRIVATE shardlab_common shardlab_warnings)
add_executable(bench_ops ${TESTS}/benchmarks/bench_ops.cpp)
target_link_libraries(bench_ops PRIVATE shardlab_common shardlab_warnings)
add_executable(bench_train ${TESTS}/benchmarks/bench_train.cpp)
target_link_libraries(bench_train PRIVATE shardlab_common shardlab_warnings)

if(TARGET shardlab_viewer_model)  # the viewer's trace loading, no display needed
  add_executable(bench_viewer_load ${TESTS}/benchmarks/bench_viewer_load.cpp)
  target_link_libraries(bench_viewer_load PRIVATE shardlab_viewer_model shardlab_warnings)
endif()
if(TARGET shardlab_viewer_app)  # the viewer's frame time: needs a display (run under xvfb-run)
  add_executable(bench_viewer_frame ${TESTS}/benchmarks/bench_viewer_frame.cpp)
  target_link_libraries(bench_viewer_frame PRIVATE shardlab_viewer_app shardlab_warnings)
endif()

if(SHARDLAB_HAVE_CUDA)
  # cuBLAS SGEMM throughput at gpt2-small shapes.
  add_executable(bench_cuda_matmul ${TESTS}/benchmarks/bench_cuda_matmul.cpp)
  target_link_libraries(bench_cuda_matmul PRIVATE shardlab_common shardlab_warnings)
  # Every op of a GPT-2-small step on the GPU against the sim's prediction for a profile.
  add_executable(bench_cuda_ops ${TESTS}/benchmarks/bench_cuda_ops.cpp)
  target_link_libraries(bench_cuda_ops PRIVATE shardlab_common shardlab_warnings)
endif()
