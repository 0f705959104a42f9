# Chapter 03: bucketed DDP.
# Chapter 03 checks itself against single-rank training as chapter 02 does.
shardlab_chapter_tests(ch03 shardlab_ch03 --bucket-cap-mb 0.01 --first-bucket-mb 0.002)
shardlab_batch_checks(03)
shardlab_same_loss_test(03 GRAD_ACCUM)
shardlab_one_step_test(03)
shardlab_readme_test(ch03 shardlab_ch03 03_bucketed_ddp)
shardlab_reference_trace_test(ch03 shardlab_ch03 03_bucketed_ddp 4)
shardlab_flag_fuzz_test(03)
# The chapter exits non-zero when its parameters differ from single-rank training: --grad-accum 2 --bucket-cap-mb 0.01 --first-bucket-mb 0.002 on
# 3 ranks must equal one big batch on one rank.
separate_arguments(arg_list UNIX_COMMAND "--grad-accum 2 --bucket-cap-mb 0.01 --first-bucket-mb 0.002")
add_test(NAME "ch03: --grad-accum 2 --bucket-cap-mb 0.01 --first-bucket-mb 0.002 on 3 ranks equals one big batch on one rank"
         COMMAND ${MPIRUN} -np 3 $<TARGET_FILE:shardlab_ch03> ${arg_list} --trace-dir ${RUNS} --run-name ch03_accum)
set_tests_properties("ch03: --grad-accum 2 --bucket-cap-mb 0.01 --first-bucket-mb 0.002 on 3 ranks equals one big batch on one rank" PROPERTIES TIMEOUT 300 PROCESSORS 3)
# The point of chapter 03, on gpt2-small over 8 simulated H100s: less than half of chapter 02's
# exposed communication, and a shorter step.
add_test(NAME "ch03: on gpt2-small, h100-8, 8 ranks, buckets overlap most communication with backward, halve exposed communication and shorten the step"
         COMMAND sh -c "for ch in 02 03; do ${MPIRUN_SH} -np 8 $<TARGET_FILE_DIR:shardlab_ch02>/shardlab_ch$ch --model gpt2-small --global-batch 8 --seq-len 1024 --compute skip --steps 2 --trace-dir '${RUNS}' --run-name overlap_ch$ch > /dev/null || exit 1; done; ${Python3_EXECUTABLE} ${TESTS}/ch03/check_overlap.py '${RUNS}/overlap_ch02/summary.json' '${RUNS}/overlap_ch03/summary.json'")
set_tests_properties("ch03: on gpt2-small, h100-8, 8 ranks, buckets overlap most communication with backward, halve exposed communication and shorten the step" PROPERTIES TIMEOUT 300 PROCESSORS 2)
# Debug mode on NCCL: the header exchange runs over NCCL's MPI twin before every NCCL call (a
# mismatch needs two GPUs; the mismatch messages themselves are tested on MpiComm).
add_test(NAME "ch03: --debug-collectives on the GPU with NCCL runs at world 1"
         COMMAND ${GPU_OR_SKIP} ${MPIRUN} -np 1 $<TARGET_FILE:shardlab_ch03> --device cuda --comm nccl --debug-collectives --steps 2 --trace-dir ${RUNS} --run-name ch03_debug_nccl)
set_tests_properties("ch03: --debug-collectives on the GPU with NCCL runs at world 1" PROPERTIES SKIP_RETURN_CODE 77)
