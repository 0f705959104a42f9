# Chapter 11: pipeline parallelism. The chapter checks itself against single-rank training: the
# stages' parameters put together, after M micro-batches a step through every stage.
shardlab_chapter_tests(ch11 shardlab_ch11)
# Each schedule at P = 2-4 with M from 1 to 3P (M < P leaves 1F1B no steady state; M = 1 is one
# micro-batch crossing the stages alone).
foreach(schedule gpipe 1f1b)
  foreach(case "2;1" "3;6" "4;3" "4;12")
    list(GET case 0 np)
    list(GET case 1 m)
    set(test "ch11: --schedule ${schedule}, ${np} stages, ${m} micro-batches a step, equals single-rank training")
    add_test(NAME "${test}" COMMAND ${MPIRUN} -np ${np} $<TARGET_FILE:shardlab_ch11> --schedule ${schedule} --micro-batches ${m} --trace-dir ${RUNS} --run-name ch11_${schedule}_np${np}_m${m})
    set_tests_properties("${test}" PROPERTIES TIMEOUT 300 PROCESSORS ${np})
  endforeach()
endforeach()
add_test(NAME "ch11: more stages than the model has units exits 2 naming the model"
         COMMAND ${EXPECT_EXIT} 2 "--model: got 'tiny'; allowed: a model with at least as many units \\(4: embeddings, blocks, head\\) as stages \\(5\\)" --not "step 1/"
                 -- ${MPIRUN} -np 5 $<TARGET_FILE:shardlab_ch11>)
set_tests_properties("ch11: more stages than the model has units exits 2 naming the model" PROPERTIES PROCESSORS 5)
add_test(NAME "ch11: --micro-batches that does not divide the global batch exits 2 naming the flag"
         COMMAND ${EXPECT_EXIT} 2 "--micro-batches: got '5'; allowed: a divisor of the global batch 12" --not "step 1/"
                 -- ${MPIRUN} -np 2 $<TARGET_FILE:shardlab_ch11> --micro-batches 5)
set_tests_properties("ch11: --micro-batches that does not divide the global batch exits 2 naming the flag" PROPERTIES PROCESSORS 2)
shardlab_same_loss_test(11)
shardlab_one_step_test(11)
shardlab_flag_fuzz_test(11)
