# More of the viewer's input replays under Xvfb (check_viewer_input.py), beside the ones in
# chapters.cmake: scenarios that need a run other than chapter 03's.
find_package(Python3 REQUIRED COMPONENTS Interpreter)
find_program(XVFB_RUN xvfb-run)
if(TARGET shardlab-view AND XVFB_RUN)
  set(_name "viewer: input replay: chapter 00's Steps rows give memcpy and copy overlap as its files do, syncs are red and filter as a category")
  add_test(NAME "${_name}"
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/check_viewer_input.py $<TARGET_FILE:shardlab-view>
                   ${PROJECT_SOURCE_DIR}/traces/00_streams_events ${PROJECT_SOURCE_DIR}/traces/02_naive_ddp
                   ${CMAKE_BINARY_DIR}/test-viewer/input streams)
  set_tests_properties("${_name}" PROPERTIES TIMEOUT 180 RESOURCE_LOCK xvfb)
endif()

# Opening what users have (issue 19): directories of trace files under any names, ranks from
# distributedInfo, the name or the order, files that do not open reported while the rest opens;
# a PyTorch profiler trace's ruler in time since its first event.
if(TARGET shardlab-view AND XVFB_RUN)
  set(_name "viewer: input replay: a directory of rank-R.json.gz, summary.json and broken files opens what it can and reports the rest, and a Kineto ruler starts at 0")
  add_test(NAME "${_name}"
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/check_viewer_input.py $<TARGET_FILE:shardlab-view>
                   ${PROJECT_SOURCE_DIR}/traces/03_bucketed_ddp ${PROJECT_SOURCE_DIR}/traces/02_naive_ddp
                   ${CMAKE_BINARY_DIR}/test-viewer/input open_files)
  set_tests_properties("${_name}" PROPERTIES TIMEOUT 180 RESOURCE_LOCK xvfb)
endif()
if(TARGET shardlab-view)
  add_test(NAME "viewer: --help and -h print the usage and every flag, and exit 0"
           COMMAND sh -c "for h in --help -h; do ${EXPECT_EXIT} 0 '^usage: shardlab-view' --also '--compare PATH' --also '--range T0:T1' --also '--size WxH' --also '--screenshot FILE' --also '--state-out FILE' --also '--replay FILE' --also '-h, --help' -- $<TARGET_FILE:shardlab-view> $h || exit 1; done")
endif()

# The Compare tab's operations (issue 19): chapter 02 against 03 (the rows add up to the
# summaries' comm and exposed comm), a click outlines an operation and fits it, and PyTorch's
# DDP against FSDP recordings (tests/data/torch_gloo).
if(TARGET shardlab-view AND XVFB_RUN)
  set(_name "viewer: input replay: the Compare tab's operations add up to the summaries, a click outlines one and fits it, DDP against FSDP")
  add_test(NAME "${_name}"
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/check_viewer_input.py $<TARGET_FILE:shardlab-view>
                   ${PROJECT_SOURCE_DIR}/traces/03_bucketed_ddp ${PROJECT_SOURCE_DIR}/traces/02_naive_ddp
                   ${CMAKE_BINARY_DIR}/test-viewer/input compare_ops)
  set_tests_properties("${_name}" PROPERTIES TIMEOUT 180 RESOURCE_LOCK xvfb)
endif()

# The README's picture of PyTorch's DDP against FSDP: its caption's command, rerun as written.
if(TARGET shardlab-view AND XVFB_RUN)
  set(_name "viewer: the README screenshot command of PyTorch's DDP against FSDP works")
  add_test(NAME "${_name}"
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/check_readme_screenshot.py $<TARGET_FILE:shardlab-view>
                   ${PROJECT_SOURCE_DIR}/README.md ${CMAKE_BINARY_DIR}/test-viewer/readme/pytorch_ddp_fsdp.png
                   viewer/pytorch_ddp_fsdp.png --cpu-trace)
  set_tests_properties("${_name}" PROPERTIES TIMEOUT 120 RESOURCE_LOCK xvfb)
endif()

# Kineto 2.x's GPU spellings (tests/data/kineto_gpu_synthetic, synthetic): an NCCL kernel linked
# across ranks by its process group and Seq, its bytes from its args.
if(TARGET shardlab-view AND XVFB_RUN)
  set(_name "viewer: input replay: a Kineto 2.x ncclDevKernel links across ranks by group and Seq with its bytes")
  add_test(NAME "${_name}"
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/check_viewer_input.py $<TARGET_FILE:shardlab-view>
                   ${PROJECT_SOURCE_DIR}/traces/03_bucketed_ddp ${PROJECT_SOURCE_DIR}/traces/02_naive_ddp
                   ${CMAKE_BINARY_DIR}/test-viewer/input kineto_gpu)
  set_tests_properties("${_name}" PROPERTIES TIMEOUT 180 RESOURCE_LOCK xvfb)
endif()
