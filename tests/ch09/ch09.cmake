# Chapter 09: FSDP2.
# Chapter 09 checks itself against single-rank training, at worlds 1-4 (3 finds padding bugs:
# the tiny model's dims divide by neither 3 nor 4 everywhere), with FSDP1's collective counts.
shardlab_chapter_tests(ch09 shardlab_ch09)
foreach(np 2 3)
  add_test(NAME "ch09: reshard_after_forward=False at world ${np} equals single-rank training, one all-gather a block"
           COMMAND ${MPIRUN} -np ${np} $<TARGET_FILE:shardlab_ch09> --reshard-after-forward=false --trace-dir ${RUNS} --run-name ch09_zero2_np${np})
  set_tests_properties("ch09: reshard_after_forward=False at world ${np} equals single-rank training, one all-gather a block" PROPERTIES TIMEOUT 300 PROCESSORS ${np})
  add_test(NAME "ch09: explicit prefetch (2 forward, 2 backward) at world ${np} equals single-rank training"
           COMMAND ${MPIRUN} -np ${np} $<TARGET_FILE:shardlab_ch09> --forward-prefetch 2 --backward-prefetch 2 --trace-dir ${RUNS} --run-name ch09_explicit_np${np})
  set_tests_properties("ch09: explicit prefetch (2 forward, 2 backward) at world ${np} equals single-rank training" PROPERTIES TIMEOUT 300 PROCESSORS ${np})
endforeach()
shardlab_batch_checks(09)
shardlab_same_loss_test(09)
shardlab_one_step_test(09)
shardlab_flag_fuzz_test(09)
