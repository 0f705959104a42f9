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
