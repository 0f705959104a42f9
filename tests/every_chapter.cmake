# Tests every chapter program gets, as functions each chapter's file (chNN/chNN.cmake) calls for
# itself, so that file lists all of the chapter's tests: runs at worlds 1-4 with valid traces,
# byte-identical reruns, the shared flags' errors, on the GPU where one is visible; the training
# chapters' batch checks, loss and one-step runs; the README's figures; the reference traces;
# the flags, fuzzed.

# shardlab_chapter_tests(<short name> <target> <extra args...>)
function(shardlab_chapter_tests name target)
  string(JOIN " " args ${ARGN})
  foreach(np 1 2 3 4)
    set(run ${RUNS}/${name}_np${np})
    add_test(NAME "${name}: runs at world ${np}, traces valid"
             COMMAND sh -c "rm -rf '${run}' && ${MPIRUN_SH} -np ${np} $<TARGET_FILE:${target}> ${args} --trace-dir '${RUNS}' --run-name ${name}_np${np} && ${VALIDATE_SH} '${run}' --ranks ${np}")
    set_tests_properties("${name}: runs at world ${np}, traces valid" PROPERTIES TIMEOUT 300 PROCESSORS ${np})
    if(np LESS 4)  # ctest --preset quick: every chapter at worlds 1-3, for the edit loop
      set_tests_properties("${name}: runs at world ${np}, traces valid" PROPERTIES LABELS quick)
    endif()
  endforeach()
  # The same command twice (same run name), each result moved aside, then compared byte for byte.
  add_test(NAME "${name}: the same command writes the same bytes"
           COMMAND sh -c "cd '${RUNS}' 2>/dev/null || mkdir -p '${RUNS}' && cd '${RUNS}' && rm -rf ${name}_det ${name}_det1 ${name}_det2 && for i in 1 2; do ${MPIRUN_SH} -np 2 $<TARGET_FILE:${target}> ${args} --trace-dir . --run-name ${name}_det > /dev/null && mv ${name}_det ${name}_det$i || exit 1; done; for f in rank0.json rank1.json summary.json; do cmp ${name}_det1/$f ${name}_det2/$f || exit 1; done")
  set_tests_properties("${name}: the same command writes the same bytes" PROPERTIES TIMEOUT 300 PROCESSORS 2)
  add_test(NAME "${name}: a bad flag value exits 2 naming the flag"
           COMMAND ${EXPECT_EXIT} 2 "--steps: got 'many'; allowed: an integer from 1" -- ${MPIRUN} -np 2 $<TARGET_FILE:${target}> --steps many)
  add_test(NAME "${name}: an unknown flag exits 2 listing the flags"
           COMMAND ${EXPECT_EXIT} 2 "unknown flag --stpes; allowed flags: --device" -- ${MPIRUN} -np 1 $<TARGET_FILE:${target}> --stpes 3)
  add_test(NAME "${name}: an unknown profile exits 2 listing the profiles"
           COMMAND ${EXPECT_EXIT} 2 "--profile h200-9: no such profile; known profiles: a100-8, cpu-bound, h100-2x2, h100-2x8, h100-2x8-1nic, h100-8, h100-8x8, h200-measured, pcie-4" -- ${MPIRUN} -np 1 $<TARGET_FILE:${target}> --profile h200-9)
  add_test(NAME "${name}: --device cuda without a CUDA device exits 2"
           COMMAND ${EXPECT_EXIT} 2 "--device cuda: not available" -- ${MPIRUN} -np 1 $<TARGET_FILE:${target}> --device cuda)
  add_test(NAME "${name}: more ranks than the profile has GPUs exits 2"
           COMMAND ${EXPECT_EXIT} 2 "--profile pcie-4 has 4 GPUs, but the job has 5 ranks" -- ${MPIRUN} -np 5 $<TARGET_FILE:${target}> --profile pcie-4)
  set_tests_properties("${name}: more ranks than the profile has GPUs exits 2" PROPERTIES PROCESSORS 2)
  add_test(NAME "${name}: an unwritable --trace-dir exits 2 before step 1"
           COMMAND ${EXPECT_EXIT} 2 "error: --trace-dir: cannot create '/proc/shardlab-nope/" --not "step 1/" --not "MPI_ABORT"
                   -- ${MPIRUN} -np 2 $<TARGET_FILE:${target}> --trace-dir /proc/shardlab-nope)
  set_tests_properties("${name}: an unwritable --trace-dir exits 2 before step 1" PROPERTIES PROCESSORS 2)
  add_test(NAME "${name}: --comm nccl on the sim exits 2"
           COMMAND ${EXPECT_EXIT} 2 "--comm nccl: NCCL needs --device cuda" -- ${MPIRUN} -np 1 $<TARGET_FILE:${target}> --device sim --comm nccl)
  # On a real GPU: world 1 on NCCL, worlds 2-4 sharing the one GPU through the host-staged MPI
  # communicator; the chapter's own checks (training chapters: equal to single-rank training)
  # and the trace schema must hold. Skipped, with the reason, where no GPU is visible.
  foreach(np 1 2 3 4)
    if(np EQUAL 1)
      set(comm nccl)
    else()
      set(comm mpi)
    endif()
    set(test "${name}: on the GPU at world ${np} (--comm ${comm}), traces valid")
    set(run ${RUNS}/${name}_cuda_np${np})
    add_test(NAME "${test}"
             COMMAND sh -c "rm -rf '${run}' && ${GPU_OR_SKIP} ${MPIRUN_SH} -np ${np} $<TARGET_FILE:${target}> ${args} --device cuda --comm ${comm} --trace-dir '${RUNS}' --run-name ${name}_cuda_np${np} && ${VALIDATE_SH} '${run}' --ranks ${np}")
    set_tests_properties("${test}" PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300 PROCESSORS ${np})
  endforeach()
endfunction()

# The training chapters' configuration checks run before step 1: one message from rank 0, exit 2.
function(shardlab_batch_checks ch)
  add_test(NAME "ch${ch}: a global batch that does not divide among the ranks exits 2 before step 1"
           COMMAND ${EXPECT_EXIT} 2 "error: --global-batch: got '10'; allowed: a multiple of 4 ranks" --not "step 1/" --not "MPI_ABORT"
                   -- ${MPIRUN} -np 4 $<TARGET_FILE:shardlab_ch${ch}> --global-batch 10)
  set_tests_properties("ch${ch}: a global batch that does not divide among the ranks exits 2 before step 1" PROPERTIES PROCESSORS 4)
  add_test(NAME "ch${ch}: a sequence longer than the model's context exits 2 before step 1"
           COMMAND ${EXPECT_EXIT} 2 "error: --seq-len: got '2048'; allowed: 1 to 1024 \\(the context of --model gpt2-small\\)" --not "step 1/"
                   -- ${MPIRUN} -np 2 $<TARGET_FILE:shardlab_ch${ch}> --model gpt2-small --seq-len 2048 --global-batch 2 --compute skip)
  set_tests_properties("ch${ch}: a sequence longer than the model's context exits 2 before step 1" PROPERTIES PROCESSORS 2)
endfunction()

# The loss printed and recorded is the global batch's mean: the same at world 1 and 3. With
# GRAD_ACCUM (chapters 02, 03 and 07, which split each rank's share into micro-batches), also
# under --grad-accum 3: the loss is then the micro-batches' mean, not the last one's.
function(shardlab_same_loss_test ch)
  cmake_parse_arguments(arg "GRAD_ACCUM" "" "" ${ARGN})
  set(check "${Python3_EXECUTABLE} ${TESTS}/harness/check_same_loss.py '${RUNS}/loss_ch${ch}_np1/summary.json'")
  set(run "${MPIRUN_SH} -np $1 $<TARGET_FILE:shardlab_ch${ch}> --trace-dir '${RUNS}' --run-name loss_ch${ch}_$2 $3 > /dev/null")
  set(name "ch${ch}: the loss is the global batch's, the same at world 1 and 3")
  set(runs "run 1 np1 && run 3 np3 && ${check} '${RUNS}/loss_ch${ch}_np3/summary.json'")
  if(arg_GRAD_ACCUM)
    string(APPEND name " and under --grad-accum 3")
    string(APPEND runs " && run 2 accum3 '--grad-accum 3' && ${check} '${RUNS}/loss_ch${ch}_accum3/summary.json'")
  endif()
  add_test(NAME "${name}" COMMAND sh -c "run() { ${run}; } && ${runs}")
  set_tests_properties("${name}" PROPERTIES TIMEOUT 180 PROCESSORS 3)
endfunction()

# The chapters check the collectives of their last step: with --steps 1 that is step 1.
function(shardlab_one_step_test ch)
  add_test(NAME "ch${ch}: a one-step run passes its own checks"
           COMMAND ${MPIRUN} -np 2 $<TARGET_FILE:shardlab_ch${ch}> --steps 1 --trace-dir ${RUNS} --run-name one_step_ch${ch})
  set_tests_properties("ch${ch}: a one-step run passes its own checks" PROPERTIES TIMEOUT 60 PROCESSORS 2)
endfunction()

# Flags that contradict each other exit 2 before step 1, naming the flag, instead of one being ignored.
function(shardlab_contradicting_flags_test ch flags_text message)
  separate_arguments(flags UNIX_COMMAND "${flags_text}")
  add_test(NAME "ch${ch}: flags that contradict exit 2 naming the flag: ${flags_text}"
           COMMAND ${EXPECT_EXIT} 2 "${message}" --not "step 1/" -- ${MPIRUN} -np 2 $<TARGET_FILE:shardlab_ch${ch}> ${flags})
  set_tests_properties("ch${ch}: flags that contradict exit 2 naming the flag: ${flags_text}" PROPERTIES PROCESSORS 2)
endfunction()

# The chapter's flags, fuzzed: 8 seeded cases of 1 to 3 random flags with valid, boundary and
# hostile values on 1 to 3 ranks, in a sandbox holding files no run may touch. Never a crash, a
# hang, a deleted or changed file, an exit 2 that names no flag, an exit 1 without its error or
# an exit 0 on a value no flag of its kind accepts (tests/harness/fuzz_flags.py).
function(shardlab_flag_fuzz_test ch)
  set(_name "ch${ch}: flag fuzz (8 seeded cases): no crash, hang, touched file, silent run or unexplained exit")
  add_test(NAME "${_name}"
           COMMAND ${Python3_EXECUTABLE} ${TESTS}/harness/fuzz_flags.py --mpirun "${MPIRUN_SH}"
                   --bin $<TARGET_FILE:shardlab_ch${ch}> --out ${CMAKE_BINARY_DIR}/test-fuzz-flags/ch${ch} --cases 8 --seed 1${ch})
  set_tests_properties("${_name}" PROPERTIES TIMEOUT 600 PROCESSORS 3)
endfunction()

# A chapter's README quotes the figures of its default 4-rank run and, in marked blocks (some
# hidden in comments), the output of other commands: both are re-run and compared
# (tests/repository/check_readme_figures.py).
# shardlab_readme_test(<name> <target> <chapter dir> [flags of the 4-rank run whose figures the
# README's tables quote])
# Every other number a README quotes at a run's precision must be one its runs printed, or say
# how it is derived, or why it cannot be re-run (check_readme_figures.py --numbers).
function(shardlab_readme_test name target dir)
  string(JOIN " " flags ${ARGN})
  set(check "${Python3_EXECUTABLE} ${TESTS}/repository/check_readme_figures.py --numbers")
  add_test(NAME "${name}: the README quotes what the chapter prints"
           COMMAND sh -c "${MPIRUN_SH} -np 4 $<TARGET_FILE:${target}> ${flags} --trace-dir '${RUNS}' --run-name ${name}_readme > /dev/null && ${check} ${PROJECT_SOURCE_DIR}/chapters/${dir}/README.md '${RUNS}/${name}_readme/summary.json' --mpirun '${MPIRUN_SH}' --bin $<TARGET_FILE_DIR:${target}>")
  set_tests_properties("${name}: the README quotes what the chapter prints" PROPERTIES TIMEOUT 300 PROCESSORS 4)
endfunction()

# Reference traces in traces/ must be what the code writes now: regenerate with the command in
# traces/README.md and compare byte for byte.
function(shardlab_reference_trace_test name target run ranks)
  string(JOIN " " args ${ARGN})
  set(dir ${RUNS}/reference_${name})
  add_test(NAME "${name}: the reference trace in traces/${run} is what the code writes"
           COMMAND sh -c "rm -rf '${dir}' && mkdir -p '${dir}' && cd '${dir}' && ${MPIRUN_SH} -np ${ranks} $<TARGET_FILE:${target}> ${args} --trace-dir traces --run-name ${run} > /dev/null && for f in traces/${run}/*; do cmp $f '${PROJECT_SOURCE_DIR}/'$f || { echo \"$f differs: regenerate it (traces/README.md)\"; exit 1; }; done")
  set_tests_properties("${name}: the reference trace in traces/${run} is what the code writes" PROPERTIES TIMEOUT 300 PROCESSORS ${ranks})
endfunction()

# The same for a run committed gzipped (every rank<R>.json.gz, summary.json as it is): the run is
# regenerated and each rank's file compared with the committed one, decompressed.
function(shardlab_reference_trace_gz_test name target run ranks)
  string(JOIN " " args ${ARGN})
  set(dir ${RUNS}/reference_${name})
  math(EXPR last "${ranks} - 1")
  set(title "${name}: the reference trace in traces/${run} (gzipped) is what the code writes")
  add_test(NAME "${title}"
           COMMAND sh -c "rm -rf '${dir}' && mkdir -p '${dir}' && cd '${dir}' && ${MPIRUN_SH} -np ${ranks} $<TARGET_FILE:${target}> ${args} --trace-dir traces --run-name ${run} > /dev/null && cmp traces/${run}/summary.json '${PROJECT_SOURCE_DIR}/traces/${run}/summary.json' && for r in $(seq 0 ${last}); do gzip -dc '${PROJECT_SOURCE_DIR}/traces/${run}/rank'$r'.json.gz' | cmp - traces/${run}/rank$r.json || exit 1; done || { echo 'traces/${run} differs: regenerate it (traces/README.md)'; exit 1; }")
  set_tests_properties("${title}" PROPERTIES TIMEOUT 300 PROCESSORS ${ranks})
endfunction()

# A chapter's Catch2 cases in its MPI test binary (chNN/mpi_test_*.cpp, shardlab_chNN_mpi_tests,
# tagged [tag]): one ctest entry a world size, "<name>, world N". Two processors each: the ranks
# oversubscribe the cores.
function(shardlab_mpi_test binary name tag)
  foreach(np ${ARGN})
    add_test(NAME "${name}, world ${np}" COMMAND ${MPIRUN} -np ${np} $<TARGET_FILE:${binary}> "[${tag}]" --warn NoTests)
    set_tests_properties("${name}, world ${np}" PROPERTIES TIMEOUT 240 PROCESSORS 2)
  endforeach()
endfunction()
