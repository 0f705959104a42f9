# Chapter 02: naive DDP.
# Chapter 02 checks itself against single-rank training on the global batch (the run
# fails when the relative error exceeds 1e-5) and counts its all-reduces in the trace.
shardlab_chapter_tests(ch02 shardlab_ch02)
shardlab_batch_checks(02)
shardlab_same_loss_test(02 GRAD_ACCUM)
shardlab_one_step_test(02)
shardlab_readme_test(ch02 shardlab_ch02 02_naive_ddp)
shardlab_reference_trace_test(ch02 shardlab_ch02 02_naive_ddp 4)
shardlab_flag_fuzz_test(02)
add_test(NAME "ch02: --grad-accum counts in the global batch's divisibility"
         COMMAND ${EXPECT_EXIT} 2 "error: --global-batch: got '12'; allowed: a multiple of 3 ranks x 3 micro-batch\\(es\\) = 9" --not "step 1/"
                 -- ${MPIRUN} -np 3 $<TARGET_FILE:shardlab_ch02> --grad-accum 3)
set_tests_properties("ch02: --grad-accum counts in the global batch's divisibility" PROPERTIES PROCESSORS 3)
# The chapter exits non-zero when its parameters differ from single-rank training: --grad-accum 3 on
# 4 ranks must equal one big batch on one rank.
separate_arguments(arg_list UNIX_COMMAND "--grad-accum 3")
add_test(NAME "ch02: --grad-accum 3 on 4 ranks equals one big batch on one rank"
         COMMAND ${MPIRUN} -np 4 $<TARGET_FILE:shardlab_ch02> ${arg_list} --trace-dir ${RUNS} --run-name ch02_accum)
set_tests_properties("ch02: --grad-accum 3 on 4 ranks equals one big batch on one rank" PROPERTIES TIMEOUT 300 PROCESSORS 4)
shardlab_contradicting_flags_test(02 "--collective-timeout 1e-9" "--collective-timeout: got '1e-09'; allowed: 0 \\(wait forever\\) or 0.1 to 86400 seconds")
# Which rows each rank binds to the model, micro-batch by micro-batch (mpi_test_batch_share.cpp,
# with chapter 08's share along the sequence): worlds 1 to 4.
shardlab_mpi_test(shardlab_ch02_mpi_tests "ch02: BatchShare binds each rank's rows (MPI test)" batch-share 1 2 3 4)
