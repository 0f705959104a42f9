# Chapter 08: context parallelism.
# Chapter 08: context parallelism. The chapter checks itself against single-rank training on
# the whole sequences (relative error 1e-5) at worlds 1-4 (every rank on one sequence, zigzag),
# then every ring of 2, 3 and 4 ranks alone and two rings of 2 side by side, both layouts.
shardlab_chapter_tests(ch08 shardlab_ch08)
foreach(layout zigzag contiguous)
  foreach(np_cp "2 2" "3 3" "4 4" "4 2")
    string(REPLACE " " ";" pair ${np_cp})
    list(GET pair 0 np)
    list(GET pair 1 cp)
    set(name "ch08: ${layout}, ${np} ranks in rings of ${cp}, equals single-rank training on the whole sequences")
    add_test(NAME "${name}" COMMAND ${MPIRUN} -np ${np} $<TARGET_FILE:shardlab_ch08> --cp ${cp} --cp-layout ${layout}
                                    --trace-dir ${RUNS} --run-name ch08_${layout}_${np}_${cp})
    set_tests_properties("${name}" PROPERTIES TIMEOUT 120 PROCESSORS ${np})
  endforeach()
endforeach()
add_test(NAME "ch08: a sequence that does not cut into 2N chunks exits 2 before step 1, naming --seq-len and the layout"
         COMMAND ${EXPECT_EXIT} 2 "error: --seq-len: got '36'; allowed: a multiple of 8 \\(--cp-layout zigzag cuts each sequence into 8 chunks\\)" --not "step 1/"
                 -- ${MPIRUN} -np 4 $<TARGET_FILE:shardlab_ch08> --seq-len 36)
add_test(NAME "ch08: contiguous needs N chunks only"
         COMMAND ${EXPECT_EXIT} 2 "error: --seq-len: got '42'; allowed: a multiple of 4 \\(--cp-layout contiguous" --not "step 1/"
                 -- ${MPIRUN} -np 4 $<TARGET_FILE:shardlab_ch08> --seq-len 42 --cp-layout contiguous)
add_test(NAME "ch08: --cp that does not divide the world exits 2 before step 1"
         COMMAND ${EXPECT_EXIT} 2 "error: --cp: got '3'; allowed: a divisor of the world size 4" --not "step 1/"
                 -- ${MPIRUN} -np 4 $<TARGET_FILE:shardlab_ch08> --cp 3)
add_test(NAME "ch08: the global batch divides among the data-parallel ranks only"
         COMMAND ${EXPECT_EXIT} 2 "error: --global-batch: got '3'; allowed: a multiple of 2 data-parallel ranks" --not "step 1/"
                 -- ${MPIRUN} -np 4 $<TARGET_FILE:shardlab_ch08> --cp 2 --global-batch 3)
set_tests_properties("ch08: a sequence that does not cut into 2N chunks exits 2 before step 1, naming --seq-len and the layout"
                     "ch08: contiguous needs N chunks only" "ch08: --cp that does not divide the world exits 2 before step 1"
                     "ch08: the global batch divides among the data-parallel ranks only" PROPERTIES PROCESSORS 4)
# The work per rank (the zigzag and contiguous layouts' counts, N = 8, c = 64), counted by the chapter as its attention launches.
foreach(layout zigzag contiguous)
  set(name "ch08: 8 ranks, S = 1024, ${layout}: every rank's score entries are the layout's formula")
  add_test(NAME "${name}"
           COMMAND sh -c "${MPIRUN_SH} -np 8 $<TARGET_FILE:shardlab_ch08> --model gpt2-small --global-batch 1 --seq-len 1024 --compute skip --steps 1 --cp-layout ${layout} --trace-dir '${RUNS}' --run-name ch08_entries_${layout} > /dev/null && ${Python3_EXECUTABLE} ${TESTS}/ch08/check_context_parallel.py '${RUNS}/ch08_entries_${layout}/summary.json'")
  set_tests_properties("${name}" PROPERTIES TIMEOUT 120 PROCESSORS 2)
endforeach()
# The lesson's timing on 8 simulated H100s, 32k tokens a sequence: zigzag balances the ranks'
# attention, contiguous leaves the last rank most of it; memory is the formula (memory.h).
foreach(layout zigzag contiguous)
  add_test(NAME "ch08: gpt2-small-128k, S = 32768 over 8 H100s, ${layout}"
           COMMAND ${MPIRUN} -np 8 $<TARGET_FILE:shardlab_ch08> --model gpt2-small-128k --global-batch 1 --seq-len 32768 --compute skip --steps 2
                   --cp-layout ${layout} --trace-dir ${RUNS} --run-name ch08_balance_${layout})
  set_tests_properties("ch08: gpt2-small-128k, S = 32768 over 8 H100s, ${layout}" PROPERTIES TIMEOUT 120 PROCESSORS 2 FIXTURES_SETUP ch08_balance_${layout})
endforeach()
add_test(NAME "ch08: at cp 8 the slowest rank's attention is within 5% of the mean under zigzag and above 1.5x under contiguous, memory the formula within 2%"
         COMMAND ${Python3_EXECUTABLE} ${TESTS}/harness/check_figures.py ${RUNS}/ch08_balance_zigzag/summary.json --as contiguous ${RUNS}/ch08_balance_contiguous/summary.json
                 "attention_imbalance < 1.05" "contiguous_attention_imbalance > 1.5" "step_ms < contiguous_step_ms"
                 "abs(peak_allocated_MiB / memory_formula_MiB - 1) < 0.02" "abs(contiguous_peak_allocated_MiB / contiguous_memory_formula_MiB - 1) < 0.02")
set_tests_properties("ch08: at cp 8 the slowest rank's attention is within 5% of the mean under zigzag and above 1.5x under contiguous, memory the formula within 2%"
                     PROPERTIES FIXTURES_REQUIRED "ch08_balance_zigzag;ch08_balance_contiguous")

# When the KV exchange hides (chapter 08's README: s >= 4 F / B tokens per rank here): below the formula's
# crossover it is exposed well above the one hop per layer nothing can hide, above it it is
# that hop; on NVLink (cp 8, crossover 253 tokens) and across two nodes (cp 16, 2,036 tokens).
foreach(case "8;h100-8;1024;8192" "16;h100-2x8;16384;65536")
  list(GET case 0 np)
  list(GET case 1 profile)
  list(GET case 2 short)
  list(GET case 3 long)
  set(name "ch08: cp ${np} on ${profile}: the KV exchange is exposed at S = ${short} and down to its floor at S = ${long}, as the formula's crossover says")
  set(run "${MPIRUN_SH} -np ${np} $<TARGET_FILE:shardlab_ch08> --profile ${profile} --model gpt2-small-128k --global-batch 1 --compute skip --steps 2 --trace-dir '${RUNS}'")
  add_test(NAME "${name}"
           COMMAND sh -c "${run} --seq-len ${short} --run-name ch08_hide_${np}_short > /dev/null && ${run} --seq-len ${long} --run-name ch08_hide_${np}_long > /dev/null && ${Python3_EXECUTABLE} ${TESTS}/harness/check_figures.py '${RUNS}/ch08_hide_${np}_short/summary.json' --as long '${RUNS}/ch08_hide_${np}_long/summary.json' '${short} / ${np} < kv_hidden_from_tokens' '${long} / ${np} >= long_kv_hidden_from_tokens * 2' 'exposed_kv_ms > 5 * kv_exposed_floor_ms' 'long_exposed_kv_ms < 1.5 * long_kv_exposed_floor_ms'")
  set_tests_properties("${name}" PROPERTIES TIMEOUT 300 PROCESSORS 2)
endforeach()
# Chapter 08's reference traces: the lesson's timing run on 4 ranks, zigzag and contiguous (its
# picture compares them), every rank gzipped (a ring attention step is many small events).
shardlab_reference_trace_gz_test(ch08 shardlab_ch08 08_context_parallel 4 --model gpt2-small-128k --global-batch 1 --seq-len 16384 --compute skip --steps 2 --cp-layout zigzag)
shardlab_reference_trace_gz_test(ch08_contiguous shardlab_ch08 08_contiguous 4 --model gpt2-small-128k --global-batch 1 --seq-len 16384 --compute skip --steps 2 --cp-layout contiguous)
shardlab_same_loss_test(08)
shardlab_one_step_test(08)
shardlab_readme_test(ch08 shardlab_ch08 08_context_parallel)
shardlab_flag_fuzz_test(08)
# Ring attention (mpi_test_ring_attention.cpp) against exact attention: rings of 1 to 5 ranks
# (3 and 5 prime).
shardlab_mpi_test(shardlab_ch08_mpi_tests "ch08: ring attention against exact attention (MPI test)" ring-attention 1 2 3 4 5)
# Which tokens each rank of a group binds to the model (mpi_test_sequence_share.cpp): worlds 1 to 4.
shardlab_mpi_test(shardlab_ch08_mpi_tests "ch08: SequenceShare binds each rank's positions (MPI test)" sequence-share 1 2 3 4)
