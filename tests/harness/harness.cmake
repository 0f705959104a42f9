# The harness around every chapter (common/run/): placement, failure paths, the run directory,
# the numerics check's own power, and a rank failing in every way the job must survive.
# The local rank (on a GPU: which GPU a rank takes) comes from Open MPI's or Slurm's variable, else
# from MPI; Slurm's is set by hand under mpirun here (tests/harness/check_local_rank.py).
add_test(NAME "harness: each rank's local rank comes from OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID or MPI, and is recorded"
         COMMAND ${Python3_EXECUTABLE} ${TESTS}/harness/check_local_rank.py --mpirun "${MPIRUN_SH}"
                 --bin $<TARGET_FILE:shardlab_ch00> --out ${RUNS})
set_tests_properties("harness: each rank's local rank comes from OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID or MPI, and is recorded" PROPERTIES TIMEOUT 120 PROCESSORS 2)


# The numerics check catches a gradient reduced with the wrong divisor in 2 steps, at worlds 2
# and 3, which the parameters alone cannot (AdamW's step ignores a gradient's scale), and passes
# the right reduction (tests/harness/wrong_divisor.cpp).
add_executable(wrong_divisor ${TESTS}/harness/wrong_divisor.cpp)
target_link_libraries(wrong_divisor PRIVATE shardlab_common shardlab_warnings)
target_include_directories(wrong_divisor PRIVATE ${PROJECT_SOURCE_DIR}/chapters)
foreach(np 2 3)
  set(_inverse 0.5)  # 1 / np, as the message rounds it
  if(np EQUAL 3)
    set(_inverse 0.333)
  endif()
  foreach(case "sum|AdamW's first moment differs from single-rank training: .*wte.weight's ${np} times the reference's"
               "twice|AdamW's first moment differs from single-rank training: .*wte.weight's ${_inverse} times the reference's"
               "skip|parameters differ from single-rank training: relative error")
    string(REPLACE "|" ";" _parts "${case}")
    list(GET _parts 0 _bug)
    list(GET _parts 1 _message)
    set(_name "numerics: a gradient ${_bug} (wrong divisor) fails the single-rank check in 2 steps at world ${np}")
    add_test(NAME "${_name}" COMMAND ${EXPECT_EXIT} 1 "${_message}" -- ${MPIRUN} -np ${np} $<TARGET_FILE:wrong_divisor> --bug ${_bug} --trace-dir ${RUNS} --run-name wrong_divisor_${_bug}_${np})
    set_tests_properties("${_name}" PROPERTIES TIMEOUT 60 PROCESSORS ${np})
  endforeach()
  set(_name "numerics: the right divisor passes the single-rank check at world ${np}")
  add_test(NAME "${_name}" COMMAND ${EXPECT_EXIT} 0 "relative_error_vs_single_rank" --also "moment_scale_worst *1.000" -- ${MPIRUN} -np ${np} $<TARGET_FILE:wrong_divisor> --bug none --trace-dir ${RUNS} --run-name wrong_divisor_none_${np})
  set_tests_properties("${_name}" PROPERTIES TIMEOUT 60 PROCESSORS ${np})
endforeach()

add_executable(fail_one_rank ${TESTS}/harness/fail_one_rank.cpp)
target_link_libraries(fail_one_rank PRIVATE shardlab_common shardlab_warnings)
# A full disk: rank 1's trace and rank 0's summary.json cannot be written (their temporary files
# are links to /dev/full, whose every write fails with ENOSPC). The job says what it wrote, what
# it did not and why, and leaves no temporary file behind.
set(_dir ${RUNS}/disk_full)
set(_name "harness: on a full disk a failed run says which files it wrote, which not and why, and leaves no temporary file")
add_test(NAME "${_name}"
         COMMAND sh -c "rm -rf '${_dir}' && mkdir -p '${_dir}' && ln -s /dev/full '${_dir}/rank1.json.tmp' && ln -s /dev/full '${_dir}/summary.json.tmp' && ${EXPECT_EXIT} 1 'the run failed; in .*disk_full, written: the traces \\(marked incomplete\\) of ranks 0, 2, the flight records of ranks 0, 1, 2; not written: rank 0: cannot write .*summary.json: No space left on device; rank 1: cannot write .*rank1.json: No space left on device' -- ${MPIRUN_SH} -np 3 $<TARGET_FILE:fail_one_rank> --failing-step 1 --trace-dir '${RUNS}' --run-name disk_full && test ! -e '${_dir}/rank1.json.tmp' && test ! -e '${_dir}/summary.json.tmp' && test -s '${_dir}/rank0.json'")
set_tests_properties("${_name}" PROPERTIES TIMEOUT 60 PROCESSORS 3)
# The trace a rank streams as it runs (trace.h) meeting a full disk: a warning naming the file
# and the reason, once, and the run goes on; its end writes the whole file (here the disk has
# room again: the link to /dev/full is gone with the failed temporary).
set(_dir "${RUNS}/stream_full")
set(_name "harness: a trace that cannot be streamed warns once with the reason and the run goes on")
add_test(NAME "${_name}"
         COMMAND sh -c "rm -rf '${_dir}' && mkdir -p '${_dir}' && ln -s /dev/full '${_dir}/rank1.json.tmp' && ${MPIRUN_SH} -np 2 $<TARGET_FILE:shardlab_ch02> --steps 3 --trace-dir '${RUNS}' --run-name stream_full > '${_dir}.log' 2>&1; s=$?; cat '${_dir}.log'; test $s -eq 0 && test $(grep -c 'rank 1: warning: cannot write .*stream_full/rank1.json: No space left on device; the trace is written at the end of the run only' '${_dir}.log') -eq 1 && ${VALIDATE_SH} '${_dir}' --ranks 2")
set_tests_properties("${_name}" PROPERTIES TIMEOUT 60 PROCESSORS 2)
# A run killed at any moment keeps its steps: each rank's trace grows at every step's end
# (common/trace/trace.h). Seeded kills (kill -9 of a rank or of all, SIGTERM or SIGINT to mpirun)
# at worlds 2, 3 and 4 of chapters 02, 05 and 08; every file left opens in the viewer and passes
# validate_trace.py --expect-incomplete.
if(TARGET shardlab-view)
  set(_name "harness: a run killed at seeded random moments (6 kills at worlds 2-4) leaves every trace file readable")
  add_test(NAME "${_name}"
           COMMAND ${Python3_EXECUTABLE} ${TESTS}/harness/check_killed_run.py --mpirun "${MPIRUN_SH}"
                   --chapters $<TARGET_FILE_DIR:shardlab_ch05> --viewer $<TARGET_FILE:shardlab-view> --seed 1 --cases 6)
  set_tests_properties("${_name}" PROPERTIES TIMEOUT 600 PROCESSORS 4)
endif()
add_test(NAME "harness: a rank that throws brings the whole job down with its message"
         COMMAND ${EXPECT_EXIT} 1 "rank 1: error: deliberate failure on rank 1" -- ${MPIRUN} -np 3 $<TARGET_FILE:fail_one_rank> --trace-dir ${RUNS})
set_tests_properties("harness: a rank that throws brings the whole job down with its message" PROPERTIES TIMEOUT 60 PROCESSORS 3)
add_test(NAME "harness: a step that throws prints no progress line"
         COMMAND ${EXPECT_EXIT} 1 "rank 0: error: deliberate failure on rank 0" --also "step 1/2" --not "step 2/2"
                 -- ${MPIRUN} -np 2 $<TARGET_FILE:fail_one_rank> --failing-rank 0 --trace-dir ${RUNS})
set_tests_properties("harness: a step that throws prints no progress line" PROPERTIES TIMEOUT 60 PROCESSORS 2)
# A race the program did not expect fails the run (exit 3) after its traces are written; chapter
# 00's --race shows one on purpose and exits 0.
add_test(NAME "harness: a run with a race the program did not expect exits 3 after writing its traces"
         COMMAND ${EXPECT_EXIT} 3 "fail_one_rank: error: the race check found 2 race\\(s\\)" --also "race check: 2 report\\(s\\)" --also "traces: "
                 -- ${MPIRUN} -np 2 $<TARGET_FILE:fail_one_rank> --mode race --trace-dir ${RUNS} --run-name race_unexpected)
set_tests_properties("harness: a run with a race the program did not expect exits 3 after writing its traces" PROPERTIES TIMEOUT 60 PROCESSORS 2)
# The run directory: a user's files beside runs survive, runs of other sizes (finished or killed
# mid-run) leave no file of an earlier run behind, and run names that leave --trace-dir exit 2.
add_test(NAME "harness: a run removes only what the last run in its directory listed, and never mixes runs"
         COMMAND ${Python3_EXECUTABLE} ${TESTS}/harness/check_run_directory.py
                 --mpirun "${MPIRUN_SH}" --bin $<TARGET_FILE:shardlab_ch02>)
set_tests_properties("harness: a run removes only what the last run in its directory listed, and never mixes runs" PROPERTIES TIMEOUT 180 PROCESSORS 4)
add_test(NAME "harness: a string flag given another flag as its value exits 2 naming both"
         COMMAND ${EXPECT_EXIT} 2 "--trace-dir: got '--debug-collectives'; allowed: a non-empty string that does not start with --" --not "step 1/"
                 -- ${MPIRUN} -np 1 $<TARGET_FILE:shardlab_ch02> --trace-dir --debug-collectives)
# The failure paths, each a fail_one_rank run into ${RUNS}/<run> that must exit 1 with the
# expected words (`expect`: expect_exit's arguments, shell-quoted), leave traces the validator
# accepts as incomplete and, with `check` (check_failed_run.py's flags), the summary and flight
# records a failed run owes.
string(JOIN " " CHECK_FAILED_SH ${Python3_EXECUTABLE} ${TESTS}/harness/check_failed_run.py)
function(shardlab_failed_run_test name run ranks timeout expect args check)
  set(dir "'${RUNS}/${run}'")
  set(cmd "rm -rf ${dir}; ${EXPECT_EXIT} 1 ${expect} -- ${MPIRUN_SH} -np ${ranks} $<TARGET_FILE:fail_one_rank> ${args} --trace-dir '${RUNS}' --run-name ${run} && ${VALIDATE_SH} ${dir} --ranks ${ranks} --expect-incomplete")
  if(check)
    string(APPEND cmd " && ${CHECK_FAILED_SH} ${dir} --ranks ${ranks} ${check}")
  endif()
  add_test(NAME "harness: ${name}" COMMAND sh -c "${cmd}")
  set_tests_properties("harness: ${name}" PROPERTIES TIMEOUT ${timeout} PROCESSORS ${ranks})
endfunction()
# A rank that throws in step 3 of 5: every rank writes its trace so far (marked incomplete), its
# flight record and a report; summary.json names the failure.
shardlab_failed_run_test("a rank that throws in step 3 of 5 leaves every rank's steps 1-2, marked incomplete" failed_throw 3 60
  "'rank 1: error: deliberate failure on rank 1'" "--steps 5 --failing-step 3" "--failed-rank 1 --kind error --steps 2")
# A rank that skips one all-reduce (no --debug-collectives): the others wait in it, and after
# --collective-timeout 5 the job ends naming the rank that never issued it (ctest's own limit:
# the timeout + 10 s, and a few seconds for mpirun).
shardlab_failed_run_test("a rank that skips a collective ends after --collective-timeout naming itself" failed_skip 3 18
  "'collective timeout \\(--collective-timeout 5 s\\): allreduce #3 on world \\(16 Float\\) was issued by ranks 0, 2 and never by rank 1' --also 'flight records: '"
  "--mode skip --steps 3 --failing-step 3 --collective-timeout 5" "--failed-rank 1 --kind timeout --steps 2")
# A rank that skips the step's last collective, the loss all-reduce in Job::Step's destructor:
# the others' wait there times out inside a destructor, which must reach the harness (not
# std::terminate), and the diagnosis names the rank that never reached the step's end.
shardlab_failed_run_test("a rank that skips the step's closing loss all-reduce is named, every trace written" failed_skip_loss 3 18
  "'collective timeout \\(--collective-timeout 5 s\\): the end of step 2 \\(its loss all-reduce, over every rank\\) was issued by ranks 0, 2 and never by rank 1' --also 'flight records: ' --not 'terminate called'"
  "--mode skip-loss --steps 3 --failing-step 2 --collective-timeout 5" "--failed-rank 1 --kind timeout --steps 1")
# A rank that skips a ring sendrecv (chapter 08's KV exchange): the rank after it waits for it;
# the others go on to the next collective. The diagnosis names the rank that skipped, not the
# ranks held in the sendrecv.
shardlab_failed_run_test("a rank that skips a ring sendrecv is named, not the ranks waiting for it" failed_skip_sendrecv 3 18
  "'collective timeout \\(--collective-timeout 5 s\\): sendrecv #3 on world was issued by ranks 0, 2, waiting for a peer, and never by rank 1' --not 'never by ranks? [02]'"
  "--mode skip-sendrecv --steps 4 --failing-step 3 --collective-timeout 5" "--failed-rank 1 --kind timeout --steps 2")
# Every rank sends before it receives, in two calls: a ring of sends, each waiting for a receive
# its peer never issues (a pipeline schedule's send order that deadlocks, chapter 11). The
# diagnosis names every rank with its peers, not a rank left behind. Whichever rank times out
# first reports: no --failed-rank to check.
shardlab_failed_run_test("sendrecvs that wait for each other are named as a deadlock with their peers" failed_deadlock_sendrecv 3 18
  "'collective timeout \\(--collective-timeout 5 s\\): sendrecvs on world wait for each other: rank 0 in #1 \\(sending to rank 1\\); rank 1 in #1 \\(sending to rank 2\\); rank 2 in #1 \\(sending to rank 0\\)' --not 'never by'"
  "--mode deadlock-sendrecv --steps 3 --failing-step 2 --collective-timeout 5" "")
# Values the ranks compute once for all (Job::solved_once_each: chapters' single-rank reference
# runs, each on its own rank): the others wait past --collective-timeout for a slow one, and a
# solve that throws still ends the job with its message.
add_test(NAME "harness: ranks wait past --collective-timeout for a value another rank computes for all"
         COMMAND ${EXPECT_EXIT} 0 "step 2/2" -- ${MPIRUN} -np 3 $<TARGET_FILE:fail_one_rank> --mode slow-solve --collective-timeout 1 --trace-dir ${RUNS} --run-name slow_solve)
set_tests_properties("harness: ranks wait past --collective-timeout for a value another rank computes for all" PROPERTIES TIMEOUT 60 PROCESSORS 3)
shardlab_failed_run_test("a solve for all that throws ends the job with its message, the others waiting without a timeout" failed_solve_throws 3 60
  "'rank 1: error: deliberate failure in rank 1.s solve' --not 'collective timeout'"
  "--mode solve-throws --steps 3 --failing-step 2" "--failed-rank 1 --kind error --steps 1")
# AddressSanitizer (the debug preset) aborts the rank on a request this large instead of throwing
# std::bad_alloc, so there the test says it is skipped and why.
set(_oom "a rank out of host memory says so and what to change, every trace written")
if(CMAKE_CXX_FLAGS MATCHES "sanitize=address")
  add_test(NAME "harness: ${_oom}" COMMAND sh -c "echo 'skipped: under AddressSanitizer a request of 4 EiB aborts the rank instead of throwing std::bad_alloc'; exit 77")
  set_tests_properties("harness: ${_oom}" PROPERTIES SKIP_RETURN_CODE 77)
else()
  shardlab_failed_run_test("${_oom}" failed_host_oom 2 60
    "'rank 1: error: out of host memory \\(std::bad_alloc\\)' --also 'use --compute skip' --not 'terminate called'"
    "--mode host-oom --steps 4 --failing-step 3" "")
endif()

