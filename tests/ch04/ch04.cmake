# Chapter 04: FSDP.
# Chapter 04 checks itself the same way, and its all-gather and reduce-scatter counts, under
# both sharding strategies.
shardlab_chapter_tests(ch04 shardlab_ch04)
foreach(np 1 2 3 4)
  add_test(NAME "ch04: SHARD_GRAD_OP at world ${np} equals single-rank training"
           COMMAND ${MPIRUN} -np ${np} $<TARGET_FILE:shardlab_ch04> --sharding grad-op --trace-dir ${RUNS} --run-name ch04_grad_op_np${np})
  set_tests_properties("ch04: SHARD_GRAD_OP at world ${np} equals single-rank training" PROPERTIES TIMEOUT 300 PROCESSORS ${np})
endforeach()
# The memory formula (chapters/04_fsdp/memory.h) against the caching allocator's peak: gpt2-small,
# 8 simulated H100s, both strategies, within 2%.
foreach(sharding full grad-op)
  add_test(NAME "ch04: gpt2-small at 8 ranks, ${sharding}: peak allocated memory equals the formula within 2%"
           COMMAND sh -c "${MPIRUN_SH} -np 8 $<TARGET_FILE:shardlab_ch04> --model gpt2-small --global-batch 8 --seq-len 1024 --compute skip --steps 2 --sharding ${sharding} --trace-dir '${RUNS}' --run-name ch04_memory_${sharding} > /dev/null && ${Python3_EXECUTABLE} ${TESTS}/harness/check_figures.py '${RUNS}/ch04_memory_${sharding}/summary.json' 'abs(peak_allocated_MiB / formula_MiB - 1) < 0.02'")
  set_tests_properties("ch04: gpt2-small at 8 ranks, ${sharding}: peak allocated memory equals the formula within 2%" PROPERTIES TIMEOUT 300 PROCESSORS 2)
endforeach()
shardlab_batch_checks(04)
shardlab_same_loss_test(04)
shardlab_one_step_test(04)
shardlab_readme_test(ch04 shardlab_ch04 04_fsdp)
shardlab_reference_trace_test(ch04 shardlab_ch04 04_fsdp 4)
shardlab_flag_fuzz_test(04)
# Bytes per link tier (common/trace/metrics.h, tests/harness/check_link_bytes.py): on h100-2x8 (two nodes
# of 8 GPUs) 4 ranks all sit on node 0, so every byte they send is intra-node; 16 span both
# nodes, so every byte of the world's collectives crosses the network. Each step's counts in
# summary.json must equal what the rank files' collective args give.
set(tiers "--profile h100-2x8 --model tiny --compute skip --steps 2 --global-batch 16")
set(check "${Python3_EXECUTABLE} ${TESTS}/harness/check_link_bytes.py")
add_test(NAME "ch04: on h100-2x8, 4 ranks send every byte intra-node and 16 over the network, as summary.json counts them"
         COMMAND sh -c "${MPIRUN_SH} -np 4 $<TARGET_FILE:shardlab_ch04> ${tiers} --trace-dir '${RUNS}' --run-name link_tiers_np4 > /dev/null && ${check} '${RUNS}/link_tiers_np4' --tier intra-node && ${MPIRUN_SH} -np 16 $<TARGET_FILE:shardlab_ch04> ${tiers} --trace-dir '${RUNS}' --run-name link_tiers_np16 > /dev/null && ${check} '${RUNS}/link_tiers_np16' --tier network")
set_tests_properties("ch04: on h100-2x8, 4 ranks send every byte intra-node and 16 over the network, as summary.json counts them"
                     PROPERTIES TIMEOUT 300 PROCESSORS 2)
