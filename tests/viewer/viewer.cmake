# The viewer's tests: its model (trace loading, metrics, what each panel shows) without a display;
# the window headless under Xvfb (Mesa's software OpenGL): screenshots, bad files, real input
# replayed (check_viewer_input.py), the READMEs' pictures rerun as their captions say; its trace
# loader fuzzed.
find_program(XVFB_RUN xvfb-run)

if(TARGET shardlab_viewer_model)
  find_package(ZLIB REQUIRED)  # the tests write .json.gz files
  file(GLOB VIEWER_TEST_SOURCES CONFIGURE_DEPENDS ${TESTS}/viewer/viewer_test_*.cpp)
  add_executable(shardlab_viewer_tests $<TARGET_OBJECTS:shardlab_catch_impl> $<TARGET_OBJECTS:shardlab_catch_main> ${VIEWER_TEST_SOURCES})
  target_link_libraries(shardlab_viewer_tests PRIVATE shardlab_viewer_model ZLIB::ZLIB Catch2::Catch2 shardlab_warnings)
  target_compile_definitions(shardlab_viewer_tests PRIVATE SHARDLAB_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  target_compile_options(shardlab_viewer_tests PRIVATE ${SHARDLAB_TEST_OPTIMIZATION})
  catch_discover_tests(shardlab_viewer_tests TEST_PREFIX "viewer: " EXTRA_ARGS --warn NoTests)

  # The loader's libFuzzer target: run_fuzz.sh builds fuzz_trace_loader.cpp with clang++ (ASan,
  # UBSan) and fuzzes for 45 s; skipped (exit 77) where clang++ with libFuzzer is not installed.
  add_test(NAME "viewer: fuzz the trace loader" COMMAND ${TESTS}/viewer/run_fuzz.sh)
  set_tests_properties("viewer: fuzz the trace loader" PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 900 LABELS fuzz)
endif()

# The viewer, headless under Xvfb (Mesa's software OpenGL): a real screenshot, and a bad file
# that must end in a message, not a crash or a hang.
if(TARGET shardlab-view AND XVFB_RUN)
  set(VIEWER_OUT ${CMAKE_BINARY_DIR}/test-viewer)
  add_test(NAME "viewer: a screenshot of a chapter trace under Xvfb is produced and shows the lane colours"
           COMMAND ${Python3_EXECUTABLE} ${TESTS}/viewer/check_screenshot.py $<TARGET_FILE:shardlab-view>
                   ${PROJECT_SOURCE_DIR}/traces/03_bucketed_ddp ${VIEWER_OUT}/03_bucketed_ddp.png)
  file(WRITE ${VIEWER_OUT}/malformed.json "{\"traceEvents\": [{\"ph\": \"X\", \"name\": \"truncated\", \"ts\": ")
  add_test(NAME "viewer: a malformed file with --screenshot exits non-zero with a message"
           COMMAND ${EXPECT_EXIT} 1 "shardlab-view: .*malformed\\.json" -- ${XVFB_RUN} -a $<TARGET_FILE:shardlab-view>
                   ${VIEWER_OUT}/malformed.json --screenshot ${VIEWER_OUT}/malformed.png)
  # A failed run (a rank threw in step 3 of 5) opens, and the window says it is incomplete.
  add_test(NAME "viewer: a failed run opens and says it is incomplete"
           COMMAND sh -c "rm -rf '${VIEWER_OUT}/failed'; ${MPIRUN_SH} -np 2 $<TARGET_FILE:fail_one_rank> --steps 5 --failing-step 3 --trace-dir '${VIEWER_OUT}' --run-name failed > /dev/null 2>&1; ${XVFB_RUN} -a $<TARGET_FILE:shardlab-view> '${VIEWER_OUT}/failed' --state-out '${VIEWER_OUT}/failed.json' && ${Python3_EXECUTABLE} -c \"import json,sys; r=json.load(open(sys.argv[1]))['runs'][0]; print(r['incomplete']); sys.exit(0 if r['ranks'] == 2 and r['incomplete'].startswith('the run failed (rank 1: deliberate failure on rank 1): 2 of 2 rank files') else 1)\" '${VIEWER_OUT}/failed.json'")
  # xvfb-run -a can race for a display number when two start at once.
  set_tests_properties("viewer: a screenshot of a chapter trace under Xvfb is produced and shows the lane colours"
                       "viewer: a malformed file with --screenshot exits non-zero with a message"
                       "viewer: a failed run opens and says it is incomplete"
                       PROPERTIES TIMEOUT 120 RESOURCE_LOCK xvfb)

  # Each chapter README shows a viewer screenshot of its reference trace with the command that
  # made it: the command is rerun as written (into the build tree) and its picture checked.
  foreach(chapter 00_streams_events 01_ring_allreduce 02_naive_ddp 03_bucketed_ddp 04_fsdp 05_prefetch 06_rate_limit 07_hsdp
                  08_context_parallel 09_fsdp2 10_tensor_parallel 11_pipeline_parallel)
    add_test(NAME "viewer: the README screenshot command of chapter ${chapter} works"
             COMMAND ${Python3_EXECUTABLE} ${TESTS}/viewer/check_readme_screenshot.py $<TARGET_FILE:shardlab-view>
                     ${PROJECT_SOURCE_DIR}/chapters/${chapter}/README.md ${VIEWER_OUT}/readme/${chapter}.png)
    set_tests_properties("viewer: the README screenshot command of chapter ${chapter} works"
                         PROPERTIES TIMEOUT 120 RESOURCE_LOCK xvfb)
  endforeach()

  # Chapter 11's second picture: 1F1B against ZB-H1.
  add_test(NAME "viewer: the README screenshot command of chapter 11's zero_bubble.png works"
           COMMAND ${Python3_EXECUTABLE} ${TESTS}/viewer/check_readme_screenshot.py $<TARGET_FILE:shardlab-view>
                   ${PROJECT_SOURCE_DIR}/chapters/11_pipeline_parallel/README.md ${VIEWER_OUT}/readme/11_zero_bubble.png
                   zero_bubble.png)
  set_tests_properties("viewer: the README screenshot command of chapter 11's zero_bubble.png works"
                       PROPERTIES TIMEOUT 120 RESOURCE_LOCK xvfb)

  # Real input, replayed: scripts of synthetic events (--replay) through ImGui's GLFW backend,
  # the resulting view state (--state-out) checked against numbers (check_viewer_input.py).
  foreach(scenario_and_name
          "wheel|wheel up at a point zooms in keeping that time under the pointer, down zooms out"
          "drag|dragging the tracks pans by the dragged time"
          "keys|W/S zoom and A/D pan by the held time, Home fits everything"
          "select|a click selects the slice under the pointer and F fits it"
          "range|shift-drag selects a range whose Range panel totals match the trace files"
          "drop|dropping a run directory onto the empty window loads it"
          "bad_path|a bad path in the path field shows an error and the app keeps running"
          "cancel|a load runs in the background with a progress bar and Cancel stops it"
          "collective|a click on a collective lists it on every rank at the trace files' times and links the ranks, and names the FSDP unit it is for"
          "compare|--compare aligns the runs at a step and its table averages equal the summaries"
          "search_filter|search counts the matching slices and unticking a category hides its slices")
    string(REPLACE "|" ";" _parts "${scenario_and_name}")
    list(GET _parts 0 _scenario)
    list(GET _parts 1 _name)
    add_test(NAME "viewer: input replay: ${_name}"
             COMMAND ${Python3_EXECUTABLE} ${TESTS}/viewer/check_viewer_input.py $<TARGET_FILE:shardlab-view>
                     ${PROJECT_SOURCE_DIR}/traces/03_bucketed_ddp ${PROJECT_SOURCE_DIR}/traces/02_naive_ddp
                     ${VIEWER_OUT}/input ${_scenario})
    set_tests_properties("viewer: input replay: ${_name}" PROPERTIES TIMEOUT 180 RESOURCE_LOCK xvfb)
  endforeach()
endif()


# One scenario of check_viewer_input.py, given RUN_DIR and OTHER_RUN_DIR.
function(viewer_input_test scenario name run_dir other_dir)
  add_test(NAME "viewer: input replay: ${name}"
           COMMAND ${Python3_EXECUTABLE} ${TESTS}/viewer/check_viewer_input.py $<TARGET_FILE:shardlab-view>
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

  # --streams-only: every rank of both runs open, and nothing but their GPU streams (the lanes a
  # pipeline's stages read on, chapter 11).
  set(_name "viewer: --streams-only shows every rank's streams of both runs and no CPU thread")
  add_test(NAME "${_name}"
           COMMAND sh -c "${XVFB_RUN} -a $<TARGET_FILE:shardlab-view> '${PROJECT_SOURCE_DIR}/traces/11_gpipe' --compare '${PROJECT_SOURCE_DIR}/traces/11_pipeline_parallel' --streams-only --size 1600x1200 --state-out '${VIEWER_OUT}/streams_only.json' > /dev/null && ${Python3_EXECUTABLE} -c \"import json,sys; s=json.load(open(sys.argv[1])); L=s['layout']['lanes']; seen={(l['run'], l['rank']) for l in L}; names={l['name'] for l in L}; print(sorted(seen), sorted(names)); sys.exit(0 if s['streams_only'] and seen == {(r, k) for r in (0, 1) for k in range(4)} and names == {'stream 7 compute', 'stream 8 p2p'} and all(l['device'] for l in L) else 1)\" '${VIEWER_OUT}/streams_only.json'")
  set_tests_properties("${_name}" PROPERTIES TIMEOUT 120 RESOURCE_LOCK xvfb)

  # The README's picture of PyTorch's DDP against FSDP: its caption's command, rerun as written.
  set(_name "viewer: the README screenshot command of PyTorch's DDP against FSDP works")
  add_test(NAME "${_name}"
           COMMAND ${Python3_EXECUTABLE} ${TESTS}/viewer/check_readme_screenshot.py $<TARGET_FILE:shardlab-view>
                   ${PROJECT_SOURCE_DIR}/README.md ${CMAKE_BINARY_DIR}/test-viewer/readme/pytorch_ddp_fsdp.png
                   viewer/pytorch_ddp_fsdp.png --cpu-trace)
  set_tests_properties("${_name}" PROPERTIES TIMEOUT 120 RESOURCE_LOCK xvfb)
endif()

if(TARGET shardlab-view)
  add_test(NAME "viewer: --help and -h print the usage and every flag, and exit 0"
           COMMAND sh -c "for h in --help -h; do ${EXPECT_EXIT} 0 '^usage: shardlab-view' --also '--compare PATH' --also '--range T0:T1' --also '--size WxH' --also '--screenshot FILE' --also '--state-out FILE' --also '--replay FILE' --also '--streams-only' --also '--check ' --also '--max-name-bytes N' --also '--max-file-bytes N' --also '--max-events N' --also '-h, --help' -- $<TARGET_FILE:shardlab-view> $h || exit 1; done")
endif()
