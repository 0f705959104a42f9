# Chapter 07: HSDP.
# Chapter 07: HSDP. The chapter's own checks (single-rank numerics; all-gathers and reduce-scatters
# inside the shard group, one all-reduce per unit) at worlds 1-4 on h100-8 (one node: mesh 1 x W).
shardlab_chapter_tests(ch07 shardlab_ch07)
# Every mesh of 4 and of 3 ranks, both hybrid strategies, on h100-2x2 (two nodes of 2 GPUs), with
# two micro-batches a step; the trace shows the groups, streams and order of tests/ch07/check_hsdp.py.
# Mesh R x 1 shards nothing and must still all-reduce across replicas (pytorch/pytorch#154888).
foreach(mesh 2x2 1x4 4x1 3x1 1x3)
  string(REPLACE "x" ";" rs ${mesh})
  list(GET rs 0 r)
  list(GET rs 1 s)
  math(EXPR np "${r} * ${s}")
  set(name "ch07: mesh ${mesh} (replicate x shard), hybrid and hybrid-zero2, equals single-rank training, with the groups, streams and order it must have on the trace")
  set(run "${MPIRUN_SH} -np ${np} $<TARGET_FILE:shardlab_ch07> --profile h100-2x2 --replicate ${r} --shard ${s} --grad-accum 2 --global-batch 24 --trace-dir '${RUNS}'")
  set(check "${Python3_EXECUTABLE} ${TESTS}/ch07/check_hsdp.py --gpus-per-node 2 --replicate ${r} --shard ${s} --units 3 --grad-accum 2")
  add_test(NAME "${name}"
           COMMAND sh -c "for sharding in hybrid hybrid-zero2; do ${run} --sharding $sharding --run-name ch07_${mesh}_$sharding > /dev/null && ${check} '${RUNS}'/ch07_${mesh}_$sharding || { echo failed: $sharding; exit 1; }; done")
  set_tests_properties("${name}" PROPERTIES TIMEOUT 300 PROCESSORS ${np})
endforeach()
add_test(NAME "ch07: a replica count that does not divide the world exits 2 before step 1"
         COMMAND ${EXPECT_EXIT} 2 "error: --replicate: got '3'; allowed: a divisor of the world size 4" --not "step 1/"
                 -- ${MPIRUN} -np 4 $<TARGET_FILE:shardlab_ch07> --replicate 3)
add_test(NAME "ch07: a mesh R x S other than the world exits 2 before step 1"
         COMMAND ${EXPECT_EXIT} 2 "error: --replicate: got '2'; allowed: 4: R x S must equal the world size 4 \\(S = 1\\)" --not "step 1/"
                 -- ${MPIRUN} -np 4 $<TARGET_FILE:shardlab_ch07> --replicate 2 --shard 1)
set_tests_properties("ch07: a replica count that does not divide the world exits 2 before step 1"
                     "ch07: a mesh R x S other than the world exits 2 before step 1" PROPERTIES PROCESSORS 4)
# The lesson's shape on gpt-1b over two nodes of 8 H100s sharing one NIC a node (16 ranks,
# --compute skip): HYBRID_SHARD 2 x 8 against FULL_SHARD over 16: a shorter step with fewer
# network bytes, FULL_SHARD's peak memory lower; every strategy's bytes per link equal the ring
# model within 1%, HSDP's memory chapter 05's formula with S = 8 within 2%.
set(big "--profile h100-2x8-1nic --model gpt-1b --global-batch 16 --seq-len 1024 --compute skip --steps 2")
foreach(sharding full hybrid hybrid-zero2 grad-op)
  add_test(NAME "ch07: gpt-1b on 2 x 8 H100s with one NIC a node, ${sharding}: bytes per link equal the ring model within 1%"
           COMMAND sh -c "${MPIRUN_SH} -np 16 $<TARGET_FILE:shardlab_ch07> ${big} --sharding ${sharding} --trace-dir '${RUNS}' --run-name ch07_big_${sharding} > /dev/null && ${Python3_EXECUTABLE} ${TESTS}/harness/check_figures.py '${RUNS}/ch07_big_${sharding}/summary.json' 'abs(network_MB - network_formula_MB) <= 0.01 * network_formula_MB' 'abs(intra_node_MB - intra_node_formula_MB) <= 0.01 * intra_node_formula_MB'")
  set_tests_properties("ch07: gpt-1b on 2 x 8 H100s with one NIC a node, ${sharding}: bytes per link equal the ring model within 1%"
                       PROPERTIES TIMEOUT 300 PROCESSORS 2 FIXTURES_SETUP ch07_big_${sharding})
endforeach()
add_test(NAME "ch07: gpt-1b on 2 x 8 H100s with one NIC a node: HYBRID_SHARD's step is shorter than FULL_SHARD's with fewer network bytes, FULL_SHARD's memory lower, HSDP's memory the formula within 2%"
         COMMAND ${Python3_EXECUTABLE} ${TESTS}/harness/check_figures.py ${RUNS}/ch07_big_hybrid/summary.json --as full ${RUNS}/ch07_big_full/summary.json
                 "step_ms < full_step_ms" "network_MB < full_network_MB" "full_peak_allocated_MiB < peak_allocated_MiB"
                 "abs(peak_allocated_MiB / memory_formula_MiB - 1) < 0.02")
set_tests_properties("ch07: gpt-1b on 2 x 8 H100s with one NIC a node: HYBRID_SHARD's step is shorter than FULL_SHARD's with fewer network bytes, FULL_SHARD's memory lower, HSDP's memory the formula within 2%"
                     PROPERTIES FIXTURES_REQUIRED "ch07_big_full;ch07_big_hybrid")
shardlab_batch_checks(07)
shardlab_same_loss_test(07 GRAD_ACCUM)
shardlab_one_step_test(07)
shardlab_readme_test(ch07 shardlab_ch07 07_hsdp --profile h100-2x2)
shardlab_flag_fuzz_test(07)
shardlab_reference_trace_test(ch07 shardlab_ch07 07_hsdp 4 --profile h100-2x2 --model gpt2-small --global-batch 4 --seq-len 1024 --compute skip --steps 2)
# Chapter 07's picture: FULL_SHARD against HYBRID_SHARD on 16 ranks sharing one NIC a node, rank 0
# of each, gzipped as chapter 06's.
foreach(sharding full hybrid)
  set(dir ${RUNS}/reference_ch07_${sharding}_1nic)
  add_test(NAME "ch07: the reference trace in traces/07_${sharding}_1nic (rank 0, gzipped) is what the code writes"
           COMMAND sh -c "rm -rf '${dir}' && mkdir -p '${dir}' && cd '${dir}' && ${MPIRUN_SH} -np 16 $<TARGET_FILE:shardlab_ch07> --profile h100-2x8-1nic --model gpt2-small --global-batch 16 --seq-len 1024 --compute skip --steps 3 --sharding ${sharding} --trace-dir traces --run-name 07_${sharding}_1nic > /dev/null && gzip -dc '${PROJECT_SOURCE_DIR}/traces/07_${sharding}_1nic/rank0.json.gz' | cmp - traces/07_${sharding}_1nic/rank0.json || { echo 'traces/07_${sharding}_1nic differs: regenerate it (traces/README.md)'; exit 1; }")
  set_tests_properties("ch07: the reference trace in traces/07_${sharding}_1nic (rank 0, gzipped) is what the code writes" PROPERTIES TIMEOUT 300 PROCESSORS 2)
endforeach()
shardlab_contradicting_flags_test(07 "--sharding full --shard 2" "--shard: got '2'; allowed: only with --sharding hybrid or hybrid-zero2")
