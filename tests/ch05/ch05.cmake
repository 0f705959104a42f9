# Chapter 05: prefetching.
# Chapter 05: the FSDP runtime's hooks. Every backward mode, with and without forward prefetch,
# under both sharding strategies, equals single-rank training at worlds 1 to 4 (prefetching
# changes when, never what).
shardlab_chapter_tests(ch05 shardlab_ch05)
foreach(sharding full grad-op)
  foreach(mode pre post none)
    set(name "ch05: ${sharding}, --backward-prefetch ${mode}, with and without --forward-prefetch, equals single-rank training at worlds 1-4")
    add_test(NAME "${name}"
             COMMAND sh -c "for np in 1 2 3 4; do for fp in '' --forward-prefetch; do ${MPIRUN_SH} -np $np $<TARGET_FILE:shardlab_ch05> --sharding ${sharding} --backward-prefetch ${mode} $fp --trace-dir '${RUNS}' --run-name ch05_${sharding}_${mode}_np$np > /dev/null || { echo \"failed: world $np, ${mode} $fp\"; exit 1; }; done; done")
    set_tests_properties("${name}" PROPERTIES TIMEOUT 300 PROCESSORS 4)
  endforeach()
endforeach()
# The timeline (tests/ch05/check_prefetch.py): where each mode issues its all-gathers, that compute
# never waits for the gather prefetched under it; then the shape of the results on gpt2-small,
# 8 simulated H100s (pre halves none's exposed backward communication for one block's memory).
foreach(mode pre post none)
  set(name "ch05: gpt2-small at 8 ranks, --backward-prefetch ${mode}: prefetches sit in their hooks and compute never waits for them")
  set(run "${MPIRUN_SH} -np 8 $<TARGET_FILE:shardlab_ch05> --model gpt2-small --global-batch 8 --seq-len 1024 --compute skip --steps 2 --backward-prefetch ${mode} --trace-dir '${RUNS}'")
  set(check "${Python3_EXECUTABLE} ${TESTS}/ch05/check_prefetch.py trace --backward ${mode} --blocks 12")
  add_test(NAME "${name}"
           COMMAND sh -c "${run} --run-name ch05_${mode} > /dev/null && ${check} '${RUNS}/ch05_${mode}' && ${run} --forward-prefetch --run-name ch05_${mode}_fp > /dev/null && ${check} --forward '${RUNS}/ch05_${mode}_fp'")
  set_tests_properties("${name}" PROPERTIES TIMEOUT 300 PROCESSORS 2 FIXTURES_SETUP ch05_${mode})
endforeach()
add_test(NAME "ch05: on h100-8, BACKWARD_PRE halves none's exposed backward communication for one block's memory, and the formula holds within 2%"
         COMMAND ${Python3_EXECUTABLE} ${TESTS}/ch05/check_prefetch.py shape ${RUNS}/ch05_none ${RUNS}/ch05_post ${RUNS}/ch05_pre)
set_tests_properties("ch05: on h100-8, BACKWARD_PRE halves none's exposed backward communication for one block's memory, and the formula holds within 2%"
                     PROPERTIES FIXTURES_REQUIRED "ch05_pre;ch05_post;ch05_none")
shardlab_batch_checks(05)
shardlab_same_loss_test(05)
shardlab_one_step_test(05)
shardlab_readme_test(ch05 shardlab_ch05 05_prefetch)
shardlab_reference_trace_test(ch05 shardlab_ch05 05_prefetch 2 --model gpt2-small --global-batch 2 --seq-len 1024 --compute skip --steps 2)
shardlab_flag_fuzz_test(05)
shardlab_reference_trace_test("ch05 (none)" shardlab_ch05 05_prefetch_none 2 --model gpt2-small --global-batch 2 --seq-len 1024 --compute skip --steps 2 --backward-prefetch none)
shardlab_contradicting_flags_test(05 "--sweep --backward-prefetch post" "--backward-prefetch: got 'post'; allowed: not with --sweep")
# The runtime's hooks one by one (mpi_test_fsdp_runtime.cpp): which unit each hook gathers under
# every prefetch mode, and SHARD_GRAD_OP keeping parameters from forward to backward.
shardlab_mpi_test(shardlab_ch05_mpi_tests "ch05: FsdpRuntime's hooks (MPI test)" fsdp-hooks 1 2 3 4)
