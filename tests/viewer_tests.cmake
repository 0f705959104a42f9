# More of the viewer's tests under Xvfb, beside the ones in chapters.cmake: input replays
# (check_viewer_input.py) that need a run other than chapter 03's or files of their own, the
# README's PyTorch picture, and --help.
find_package(Python3 REQUIRED COMPONENTS Interpreter)
find_program(XVFB_RUN xvfb-run)

# One scenario of check_viewer_input.py, given RUN_DIR and OTHER_RUN_DIR.
function(viewer_input_test scenario name run_dir other_dir)
  add_test(NAME "viewer: input replay: ${name}"
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/check_viewer_input.py $<TARGET_FILE:shardlab-view>
                   ${run_dir} ${other_dir} ${CMAKE_BINARY_DIR}/test-viewer/input ${scenario})
  set_tests_properties("viewer: input replay: ${name}" PROPERTIES TIMEOUT 180 RESOURCE_LOCK xvfb)
endfunction()

if(TARGET shardlab-view AND XVFB_RUN)
  set(_traces ${PROJECT_SOURCE_DIR}/traces)
  viewer_input_test(streams "chapter 00's Steps rows give memcpy and copy overlap as its files do, syncs are red and filter as a category"
                    ${_traces}/00_streams_events ${_traces}/02_naive_ddp)
  # What PyTorch users have. Directories of trace files under any names, ranks from
  # distributedInfo, the name or the order, files that do not open reported while the rest
  # opens; a PyTorch trace's ruler in time since its first event.
  viewer_input_test(open_files "a directory of rank-R.json.gz, summary.json and broken files opens what it can and reports the rest, and a Kineto ruler starts at 0"
                    ${_traces}/03_bucketed_ddp ${_traces}/02_naive_ddp)
  # The Compare tab's operations: chapter 02 against 03 (the rows add up to the summaries' comm
  # and exposed comm), a click outlines an operation and fits it, PyTorch's DDP against FSDP.
  viewer_input_test(compare_ops "the Compare tab's operations add up to the summaries, a click outlines one and fits it, DDP against FSDP"
                    ${_traces}/03_bucketed_ddp ${_traces}/02_naive_ddp)
  # Kineto 2.x's GPU spellings (tests/data/kineto_gpu_synthetic, synthetic).
  viewer_input_test(kineto_gpu "a Kineto 2.x ncclDevKernel links across ranks by group and Seq with its bytes"
                    ${_traces}/03_bucketed_ddp ${_traces}/02_naive_ddp)

  # A learner's own runs are 8 or 16 ranks, not the reference traces' rank 0: comparing two
  # 16-rank runs must keep both runs' rank 0 on the screen (the other ranks fold under one header).
  set(_name "viewer: --compare of two 16-rank runs shows both runs' rank 0 on one screen, the other ranks folded")
  set(_dir ${CMAKE_BINARY_DIR}/test-viewer/compare16)
  set(_ch07 "${MPIRUN_SH} -np 16 $<TARGET_FILE:shardlab_ch07> --profile h100-2x8-1nic --model gpt2-small --global-batch 16 --seq-len 1024 --compute skip --steps 2 --trace-dir '${_dir}'")
  add_test(NAME "${_name}"
           COMMAND sh -c "rm -rf '${_dir}' && ${_ch07} --sharding full --run-name full > /dev/null && ${_ch07} --run-name hybrid > /dev/null && ${XVFB_RUN} -a $<TARGET_FILE:shardlab-view> '${_dir}/full' --compare '${_dir}/hybrid' --size 1600x900 --state-out '${_dir}/state.json' > /dev/null && ${Python3_EXECUTABLE} -c \"import json,sys; s=json.load(open(sys.argv[1]))['layout']; L=s['lanes']; seen={(l['run'], l['rank']) for l in L}; print(sorted(seen)); whole=[l['name'] for l in L if l['run'] == 1 and l['y'] + l['height'] <= s['tracks_bottom']]; print(whole); sys.exit(0 if seen == {(0, 0), (1, 0)} and len(whole) >= 2 else 1)\" '${_dir}/state.json'")
  set_tests_properties("${_name}" PROPERTIES TIMEOUT 180 RESOURCE_LOCK xvfb PROCESSORS 2)

  # The README's picture of PyTorch's DDP against FSDP: its caption's command, rerun as written.
  set(_name "viewer: the README screenshot command of PyTorch's DDP against FSDP works")
  add_test(NAME "${_name}"
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/check_readme_screenshot.py $<TARGET_FILE:shardlab-view>
                   ${PROJECT_SOURCE_DIR}/README.md ${CMAKE_BINARY_DIR}/test-viewer/readme/pytorch_ddp_fsdp.png
                   viewer/pytorch_ddp_fsdp.png --cpu-trace)
  set_tests_properties("${_name}" PROPERTIES TIMEOUT 120 RESOURCE_LOCK xvfb)
endif()

if(TARGET shardlab-view)
  add_test(NAME "viewer: --help and -h print the usage and every flag, and exit 0"
           COMMAND sh -c "for h in --help -h; do ${EXPECT_EXIT} 0 '^usage: shardlab-view' --also '--compare PATH' --also '--range T0:T1' --also '--size WxH' --also '--screenshot FILE' --also '--state-out FILE' --also '--replay FILE' --also '--check ' --also '--max-name-bytes N' --also '--max-file-bytes N' --also '--max-events N' --also '-h, --help' -- $<TARGET_FILE:shardlab-view> $h || exit 1; done")
endif()
