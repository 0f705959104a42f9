# Chapter 06: all-gather rate limiting.
# Chapter 06: the rate limiter changes timing and memory only: on and off, at worlds 1 to 4,
# the parameters equal single-rank training and the race check finds nothing.
shardlab_chapter_tests(ch06 shardlab_ch06)
foreach(limit on off)
  set(name "ch06: --limit-all-gathers ${limit} equals single-rank training at worlds 1-4")
  add_test(NAME "${name}"
           COMMAND sh -c "for np in 1 2 3 4; do ${MPIRUN_SH} -np $np $<TARGET_FILE:shardlab_ch06> --limit-all-gathers ${limit} --trace-dir '${RUNS}' --run-name ch06_${limit}_np$np > /dev/null || { echo \"failed: world $np\"; exit 1; }; done")
  set_tests_properties("${name}" PROPERTIES TIMEOUT 300 PROCESSORS 4)
endforeach()
# On the timeline (tests/ch06/check_rate_limit.py): with the limiter, no forward all-gather is issued
# while more than 2 freed blocks still run on the GPU; without it, the CPU runs further ahead.
foreach(np 2 3 4)
  set(name "ch06: gpt2-small at world ${np}: with the limiter at most 2 freed blocks run when an all-gather is issued, without it more")
  set(run "${MPIRUN_SH} -np ${np} $<TARGET_FILE:shardlab_ch06> --model gpt2-small --global-batch ${np} --seq-len 1024 --compute skip --steps 2 --trace-dir '${RUNS}'")
  set(check "${Python3_EXECUTABLE} ${TESTS}/ch06/check_rate_limit.py")
  add_test(NAME "${name}"
           COMMAND sh -c "${run} --run-name ch06_on_${np} > /dev/null && ${check} '${RUNS}/ch06_on_${np}' --limited && ${run} --limit-all-gathers off --run-name ch06_off_${np} > /dev/null && ${check} '${RUNS}/ch06_off_${np}' --unlimited")
  set_tests_properties("${name}" PROPERTIES TIMEOUT 300 PROCESSORS ${np})
endforeach()
# The thrash (gpt-15b, 8 simulated H100s): alloc retries without the limiter (which then records
# no free event, as PyTorch), none with it, and
# summary.json's allocator counts equal the trace's marks (tests/ch06/check_allocator_marks.py); where
# memory is plentiful (gpt2-small) the limiter costs under 5% of the step.
set(wide "--model gpt-15b --global-batch 8 --seq-len 1024 --compute skip --steps 3")
add_test(NAME "ch06: gpt-15b at 8 ranks: alloc retries without the limiter, none with it"
         COMMAND sh -c "${MPIRUN_SH} -np 8 $<TARGET_FILE:shardlab_ch06> ${wide} --limit-all-gathers off --trace-dir '${RUNS}' --run-name ch06_thrash_off > /dev/null && ${MPIRUN_SH} -np 8 $<TARGET_FILE:shardlab_ch06> ${wide} --trace-dir '${RUNS}' --run-name ch06_thrash_on > /dev/null && ${Python3_EXECUTABLE} ${TESTS}/harness/check_figures.py '${RUNS}/ch06_thrash_off/summary.json' 'alloc_retries > 0' 'free_events_most_queued == 0' && ${Python3_EXECUTABLE} ${TESTS}/harness/check_figures.py '${RUNS}/ch06_thrash_on/summary.json' 'alloc_retries_total == 0' && for r in off on; do ${Python3_EXECUTABLE} ${TESTS}/ch06/check_allocator_marks.py '${RUNS}'/ch06_thrash_$r || exit 1; done")
set_tests_properties("ch06: gpt-15b at 8 ranks: alloc retries without the limiter, none with it" PROPERTIES TIMEOUT 300 PROCESSORS 2)
set(small "--model gpt2-small --global-batch 8 --seq-len 1024 --compute skip --steps 2")
add_test(NAME "ch06: gpt2-small at 8 ranks: the limiter changes the step by under 5%"
         COMMAND sh -c "${MPIRUN_SH} -np 8 $<TARGET_FILE:shardlab_ch06> ${small} --limit-all-gathers off --trace-dir '${RUNS}' --run-name ch06_small_off > /dev/null && ${MPIRUN_SH} -np 8 $<TARGET_FILE:shardlab_ch06> ${small} --trace-dir '${RUNS}' --run-name ch06_small_on > /dev/null && ${Python3_EXECUTABLE} ${TESTS}/harness/check_figures.py '${RUNS}/ch06_small_on/summary.json' --as off '${RUNS}/ch06_small_off/summary.json' 'abs(step_ms / off_step_ms - 1) < 0.05' 'alloc_retries_total == 0 and off_alloc_retries_total == 0'")
set_tests_properties("ch06: gpt2-small at 8 ranks: the limiter changes the step by under 5%" PROPERTIES TIMEOUT 300 PROCESSORS 2)
shardlab_batch_checks(06)
shardlab_same_loss_test(06)
shardlab_one_step_test(06)
shardlab_readme_test(ch06 shardlab_ch06 06_rate_limit)
shardlab_reference_trace_test(ch06 shardlab_ch06 06_rate_limit 2 --model gpt2-small --global-batch 2 --seq-len 1024 --compute skip --steps 2)
shardlab_flag_fuzz_test(06)
# Chapter 06's picture needs the thrash, which needs 8 ranks of gpt-15b: too many bytes to keep
# whole, so its two runs keep rank 0 only, gzipped; the test compares what the code writes.
foreach(limit off on)
  set(dir ${RUNS}/reference_ch06_thrash_${limit})
  add_test(NAME "ch06: the reference trace in traces/06_thrash_${limit} (rank 0, gzipped) is what the code writes"
           COMMAND sh -c "rm -rf '${dir}' && mkdir -p '${dir}' && cd '${dir}' && ${MPIRUN_SH} -np 8 $<TARGET_FILE:shardlab_ch06> --model gpt-15b --global-batch 8 --seq-len 1024 --compute skip --steps 3 --limit-all-gathers ${limit} --trace-dir traces --run-name 06_thrash_${limit} > /dev/null && gzip -dc '${PROJECT_SOURCE_DIR}/traces/06_thrash_${limit}/rank0.json.gz' | cmp - traces/06_thrash_${limit}/rank0.json || { echo 'traces/06_thrash_${limit} differs: regenerate it (traces/README.md)'; exit 1; }")
  set_tests_properties("ch06: the reference trace in traces/06_thrash_${limit} (rank 0, gzipped) is what the code writes" PROPERTIES TIMEOUT 300 PROCESSORS 2)
endforeach()
shardlab_contradicting_flags_test(06 "--limit-all-gathers off --inflight-all-gathers 3" "--inflight-all-gathers: got '3'; allowed: only with --limit-all-gathers on")
