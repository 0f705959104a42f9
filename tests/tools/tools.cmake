# Tools: programs that make files rather than check them. validate_trace.py (a trace against the
# schema) and torch_gpt2_step.py (PyTorch's step, for the device kit) need no build.
if(SHARDLAB_HAVE_CUDA)
  # A sim profile measured from this machine's GPU (writes a profile JSON).
  add_executable(measure_profile ${TESTS}/tools/measure_profile.cpp)
  target_link_libraries(measure_profile PRIVATE shardlab_common shardlab_warnings)
endif()
