# Chapter 10: tensor parallelism (Megatron's f and g), sequence parallelism, TP x DP.
# The chapter checks itself against single-rank training and counts its group's collectives
# against the formula. By default the world is one tensor-parallel group (worlds 1-4 below).
shardlab_chapter_tests(ch10 shardlab_ch10)
shardlab_reference_trace_test(ch10 shardlab_ch10 10_tensor_parallel 4 --model gpt2-small --global-batch 4 --seq-len 1024 --compute skip --steps 2)
shardlab_reference_trace_test(ch10_sp shardlab_ch10 10_sequence_parallel 4 --model gpt2-small --global-batch 4 --seq-len 1024 --compute skip --steps 2 --sequence-parallel)
shardlab_reference_trace_test(ch10_async shardlab_ch10 10_async_tp 4 --model gpt2-small --global-batch 4 --seq-len 1024 --compute skip --steps 2 --sequence-parallel --async-tp)
foreach(np 2 3 4)
  set(test "ch10: --sequence-parallel at world ${np} equals single-rank training, f and g as all-gathers and reduce-scatters")
  add_test(NAME "${test}" COMMAND ${MPIRUN} -np ${np} $<TARGET_FILE:shardlab_ch10> --sequence-parallel --trace-dir ${RUNS} --run-name ch10_sp_np${np})
  set_tests_properties("${test}" PROPERTIES TIMEOUT 300 PROCESSORS ${np})
endforeach()
# Async TP: forward's all-gathers and matmuls in pieces around a ring, the same result.
foreach(np 2 3 4)
  set(test "ch10: --async-tp at world ${np} equals single-rank training, its exchanges counted")
  add_test(NAME "${test}" COMMAND sh -c "${MPIRUN_SH} -np ${np} $<TARGET_FILE:shardlab_ch10> --sequence-parallel --async-tp --trace-dir '${RUNS}' --run-name ch10_async_np${np} && ${VALIDATE_SH} '${RUNS}/ch10_async_np${np}' --ranks ${np}")
  set_tests_properties("${test}" PROPERTIES TIMEOUT 300 PROCESSORS ${np})
endforeach()
add_test(NAME "ch10: --async-tp without --sequence-parallel exits 2 naming the flag"
         COMMAND ${EXPECT_EXIT} 2 "--async-tp: got 'on'; allowed: off, or on with --sequence-parallel" --not "step 1/"
                 -- ${MPIRUN} -np 2 $<TARGET_FILE:shardlab_ch10> --async-tp)
set_tests_properties("ch10: --async-tp without --sequence-parallel exits 2 naming the flag" PROPERTIES PROCESSORS 2)
# The 2-D mesh of 4 ranks: 2-way TP inside, 2-way data parallel across, with and without SP.
foreach(case "tp;" "sp;--sequence-parallel" "async;--sequence-parallel;--async-tp")
  list(GET case 0 label)
  list(SUBLIST case 1 -1 flags)
  string(JOIN " " shown --tp 2 ${flags})
  set(test "ch10: ${shown} at world 4 (TP 2 x FSDP2 over 2) equals single-rank training")
  add_test(NAME "${test}" COMMAND ${MPIRUN} -np 4 $<TARGET_FILE:shardlab_ch10> --tp 2 ${flags} --trace-dir ${RUNS} --run-name ch10_2d_${label})
  set_tests_properties("${test}" PROPERTIES TIMEOUT 300 PROCESSORS 4)
endforeach()
add_test(NAME "ch10: --tp that does not divide the world exits 2 naming the flag"
         COMMAND ${EXPECT_EXIT} 2 "--tp: got '3'; allowed: a divisor of the world size 4" --not "step 1/"
                 -- ${MPIRUN} -np 4 $<TARGET_FILE:shardlab_ch10> --tp 3)
set_tests_properties("ch10: --tp that does not divide the world exits 2 naming the flag" PROPERTIES PROCESSORS 4)
add_test(NAME "ch10: --tp over more ranks than the model's heads divide into exits 2 naming the heads"
         COMMAND ${EXPECT_EXIT} 2 "--tp: got '4'; allowed: a number of ranks the model can be cut over: tiny's 2 heads do not divide over 4 ranks" --not "step 1/"
                 -- ${MPIRUN} -np 4 $<TARGET_FILE:shardlab_ch10> --model tiny --tp 4)
set_tests_properties("ch10: --tp over more ranks than the model's heads divide into exits 2 naming the heads" PROPERTIES PROCESSORS 4)
add_test(NAME "ch10: --sequence-parallel with tokens that do not divide over the group exits 2"
         COMMAND ${EXPECT_EXIT} 2 "--sequence-parallel: got 'on'; allowed: off, or a group's 64 tokens a step divisible by --tp 3" --not "step 1/"
                 -- ${MPIRUN} -np 3 $<TARGET_FILE:shardlab_ch10> --sequence-parallel --global-batch 1)
set_tests_properties("ch10: --sequence-parallel with tokens that do not divide over the group exits 2" PROPERTIES PROCESSORS 3)
add_test(NAME "ch10: a global batch that does not divide among the data-parallel groups exits 2 before step 1"
         COMMAND ${EXPECT_EXIT} 2 "error: --global-batch: got '5'; allowed: a multiple of 2 data-parallel ranks" --not "step 1/" --not "MPI_ABORT"
                 -- ${MPIRUN} -np 4 $<TARGET_FILE:shardlab_ch10> --tp 2 --global-batch 5)
set_tests_properties("ch10: a global batch that does not divide among the data-parallel groups exits 2 before step 1" PROPERTIES PROCESSORS 4)
shardlab_same_loss_test(10)
shardlab_one_step_test(10)
shardlab_flag_fuzz_test(10)
shardlab_readme_test(ch10 shardlab_ch10 10_tensor_parallel)
# Holistic Trace Analysis on the reference traces, where it is installed (skipped, saying why, where not).
set(test "ch10: HTA reads the reference traces: no overlap under TP and SP, some under async TP")
add_test(NAME "${test}" COMMAND ${Python3_EXECUTABLE} ${TESTS}/ch10/check_hta.py ${PROJECT_SOURCE_DIR}/traces)
set_tests_properties("${test}" PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300)
