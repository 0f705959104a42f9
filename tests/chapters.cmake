# End-to-end tests of the chapter programs: each runs under mpirun at world sizes 1-4, its
# traces are checked against the schema, reruns are byte-identical, and error paths exit
# non-zero with a message instead of hanging.
find_package(Python3 REQUIRED COMPONENTS Interpreter)
set(RUNS ${CMAKE_BINARY_DIR}/test-runs)
set(MPIRUN ${SHARDLAB_MPIEXEC} ${SHARDLAB_MPI_FLAGS})
string(JOIN " " MPIRUN_SH ${MPIRUN})  # the same command inside sh -c strings
string(JOIN " " VALIDATE_SH ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/validate_trace.py)
set(EXPECT_EXIT ${CMAKE_CURRENT_SOURCE_DIR}/expect_exit.sh)
set(GPU_OR_SKIP ${CMAKE_CURRENT_SOURCE_DIR}/gpu_or_skip.sh)

# shardlab_chapter_tests(<short name> <target> <extra args...>)
function(shardlab_chapter_tests name target)
  string(JOIN " " args ${ARGN})
  foreach(np 1 2 3 4)
    set(run ${RUNS}/${name}_np${np})
    add_test(NAME "${name}: runs at world ${np}, traces valid"
             COMMAND sh -c "rm -rf '${run}' && ${MPIRUN_SH} -np ${np} $<TARGET_FILE:${target}> ${args} --trace-dir '${RUNS}' --run-name ${name}_np${np} && ${VALIDATE_SH} '${run}' --ranks ${np}")
    set_tests_properties("${name}: runs at world ${np}, traces valid" PROPERTIES TIMEOUT 300 PROCESSORS ${np})
  endforeach()
  # The same command twice (same run name), each result moved aside, then compared byte for byte.
  add_test(NAME "${name}: the same command writes the same bytes"
           COMMAND sh -c "cd '${RUNS}' 2>/dev/null || mkdir -p '${RUNS}' && cd '${RUNS}' && rm -rf ${name}_det ${name}_det1 ${name}_det2 && for i in 1 2; do ${MPIRUN_SH} -np 2 $<TARGET_FILE:${target}> ${args} --trace-dir . --run-name ${name}_det > /dev/null && mv ${name}_det ${name}_det$i || exit 1; done; for f in rank0.json rank1.json summary.json; do cmp ${name}_det1/$f ${name}_det2/$f || exit 1; done")
  set_tests_properties("${name}: the same command writes the same bytes" PROPERTIES TIMEOUT 300 PROCESSORS 2)
  add_test(NAME "${name}: a bad flag value exits 2 naming the flag"
           COMMAND ${EXPECT_EXIT} 2 "--steps: got 'many'; allowed: an integer from 1" -- ${MPIRUN} -np 2 $<TARGET_FILE:${target}> --steps many)
  add_test(NAME "${name}: an unknown flag exits 2 listing the flags"
           COMMAND ${EXPECT_EXIT} 2 "unknown flag --stpes; allowed flags: --device" -- ${MPIRUN} -np 1 $<TARGET_FILE:${target}> --stpes 3)
  add_test(NAME "${name}: an unknown profile exits 2 listing the profiles"
           COMMAND ${EXPECT_EXIT} 2 "--profile h200-9: no such profile; known profiles: a100-8, cpu-bound, h100-2x2, h100-2x8, h100-2x8-1nic, h100-8, h100-8x8, h200-measured, pcie-4" -- ${MPIRUN} -np 1 $<TARGET_FILE:${target}> --profile h200-9)
  add_test(NAME "${name}: --device cuda without a CUDA device exits 2"
           COMMAND ${EXPECT_EXIT} 2 "--device cuda: not available" -- ${MPIRUN} -np 1 $<TARGET_FILE:${target}> --device cuda)
  add_test(NAME "${name}: more ranks than the profile has GPUs exits 2"
           COMMAND ${EXPECT_EXIT} 2 "--profile pcie-4 has 4 GPUs, but the job has 5 ranks" -- ${MPIRUN} -np 5 $<TARGET_FILE:${target}> --profile pcie-4)
  set_tests_properties("${name}: more ranks than the profile has GPUs exits 2" PROPERTIES PROCESSORS 2)
  add_test(NAME "${name}: an unwritable --trace-dir exits 2 before step 1"
           COMMAND ${EXPECT_EXIT} 2 "error: --trace-dir: cannot create '/proc/shardlab-nope/" --not "step 1/" --not "MPI_ABORT"
                   -- ${MPIRUN} -np 2 $<TARGET_FILE:${target}> --trace-dir /proc/shardlab-nope)
  set_tests_properties("${name}: an unwritable --trace-dir exits 2 before step 1" PROPERTIES PROCESSORS 2)
  add_test(NAME "${name}: --comm nccl on the sim exits 2"
           COMMAND ${EXPECT_EXIT} 2 "--comm nccl: NCCL needs --device cuda" -- ${MPIRUN} -np 1 $<TARGET_FILE:${target}> --device sim --comm nccl)
  # On a real GPU: world 1 on NCCL, worlds 2-4 sharing the one GPU through the host-staged MPI
  # communicator; the chapter's own checks (training chapters: equal to single-rank training)
  # and the trace schema must hold. Skipped, with the reason, where no GPU is visible.
  foreach(np 1 2 3 4)
    if(np EQUAL 1)
      set(comm nccl)
    else()
      set(comm mpi)
    endif()
    set(test "${name}: on the GPU at world ${np} (--comm ${comm}), traces valid")
    set(run ${RUNS}/${name}_cuda_np${np})
    add_test(NAME "${test}"
             COMMAND sh -c "rm -rf '${run}' && ${GPU_OR_SKIP} ${MPIRUN_SH} -np ${np} $<TARGET_FILE:${target}> ${args} --device cuda --comm ${comm} --trace-dir '${RUNS}' --run-name ${name}_cuda_np${np} && ${VALIDATE_SH} '${run}' --ranks ${np}")
    set_tests_properties("${test}" PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300 PROCESSORS ${np})
  endforeach()
endfunction()

shardlab_chapter_tests(ch00 shardlab_ch00 --steps 2)
# The training chapters' configuration checks run before step 1: one message from rank 0, exit 2.
foreach(ch 02 03 04 05 06 07)
  add_test(NAME "ch${ch}: a global batch that does not divide among the ranks exits 2 before step 1"
           COMMAND ${EXPECT_EXIT} 2 "error: --global-batch: got '10'; allowed: a multiple of 4 ranks" --not "step 1/" --not "MPI_ABORT"
                   -- ${MPIRUN} -np 4 $<TARGET_FILE:shardlab_ch${ch}> --global-batch 10)
  set_tests_properties("ch${ch}: a global batch that does not divide among the ranks exits 2 before step 1" PROPERTIES PROCESSORS 4)
  add_test(NAME "ch${ch}: a sequence longer than the model's context exits 2 before step 1"
           COMMAND ${EXPECT_EXIT} 2 "error: --seq-len: got '2048'; allowed: 1 to 1024 \\(the context of --model gpt2-small\\)" --not "step 1/"
                   -- ${MPIRUN} -np 2 $<TARGET_FILE:shardlab_ch${ch}> --model gpt2-small --seq-len 2048 --global-batch 2 --compute skip)
  set_tests_properties("ch${ch}: a sequence longer than the model's context exits 2 before step 1" PROPERTIES PROCESSORS 2)
endforeach()
# The loss printed and recorded is the global batch's mean: the same at world 1 and 3.
# Chapters 02, 03 and 07 also split each rank's share into micro-batches (--grad-accum): the
# loss is then the micro-batches' mean, not the last one's.
foreach(ch 02 03 04 05 06 07 08)
  set(check "${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/check_same_loss.py '${RUNS}/loss_ch${ch}_np1/summary.json'")
  set(run "${MPIRUN_SH} -np $1 $<TARGET_FILE:shardlab_ch${ch}> --trace-dir '${RUNS}' --run-name loss_ch${ch}_$2 $3 > /dev/null")
  set(name "ch${ch}: the loss is the global batch's, the same at world 1 and 3")
  set(runs "run 1 np1 && run 3 np3 && ${check} '${RUNS}/loss_ch${ch}_np3/summary.json'")
  if(ch STREQUAL "02" OR ch STREQUAL "03" OR ch STREQUAL "07")
    string(APPEND name " and under --grad-accum 3")
    string(APPEND runs " && run 2 accum3 '--grad-accum 3' && ${check} '${RUNS}/loss_ch${ch}_accum3/summary.json'")
  endif()
  add_test(NAME "${name}" COMMAND sh -c "run() { ${run}; } && ${runs}")
  set_tests_properties("${name}" PROPERTIES TIMEOUT 180 PROCESSORS 3)
endforeach()
# The chapters check the collectives of their last step: with --steps 1 that is step 1.
foreach(ch 02 03 04 05 06 07 08)
  add_test(NAME "ch${ch}: a one-step run passes its own checks"
           COMMAND ${MPIRUN} -np 2 $<TARGET_FILE:shardlab_ch${ch}> --steps 1 --trace-dir ${RUNS} --run-name one_step_ch${ch})
  set_tests_properties("ch${ch}: a one-step run passes its own checks" PROPERTIES TIMEOUT 60 PROCESSORS 2)
endforeach()
add_test(NAME "ch02: --grad-accum counts in the global batch's divisibility"
         COMMAND ${EXPECT_EXIT} 2 "error: --global-batch: got '12'; allowed: a multiple of 3 ranks x 3 micro-batch\\(es\\) = 9" --not "step 1/"
                 -- ${MPIRUN} -np 3 $<TARGET_FILE:shardlab_ch02> --grad-accum 3)
set_tests_properties("ch02: --grad-accum counts in the global batch's divisibility" PROPERTIES PROCESSORS 3)
shardlab_chapter_tests(ch01 shardlab_ch01 --max-bytes 65536)
# Chapters 02 and 03 check themselves against single-rank training on the global batch (the run
# fails when the relative error exceeds 1e-5) and count their all-reduces in the trace.
shardlab_chapter_tests(ch02 shardlab_ch02)
shardlab_chapter_tests(ch03 shardlab_ch03 --bucket-cap-mb 0.01 --first-bucket-mb 0.002)
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
           COMMAND sh -c "${MPIRUN_SH} -np 8 $<TARGET_FILE:shardlab_ch04> --model gpt2-small --global-batch 8 --seq-len 1024 --compute skip --steps 2 --sharding ${sharding} --trace-dir '${RUNS}' --run-name ch04_memory_${sharding} > /dev/null && ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/check_figures.py '${RUNS}/ch04_memory_${sharding}/summary.json' 'abs(peak_allocated_MiB / formula_MiB - 1) < 0.02'")
  set_tests_properties("ch04: gpt2-small at 8 ranks, ${sharding}: peak allocated memory equals the formula within 2%" PROPERTIES TIMEOUT 300 PROCESSORS 2)
endforeach()
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
# The timeline (tests/check_prefetch.py): where each mode issues its all-gathers, that compute
# never waits for the gather prefetched under it; then the shape of the results on gpt2-small,
# 8 simulated H100s (pre halves none's exposed backward communication for one block's memory).
foreach(mode pre post none)
  set(name "ch05: gpt2-small at 8 ranks, --backward-prefetch ${mode}: prefetches sit in their hooks and compute never waits for them")
  set(run "${MPIRUN_SH} -np 8 $<TARGET_FILE:shardlab_ch05> --model gpt2-small --global-batch 8 --seq-len 1024 --compute skip --steps 2 --backward-prefetch ${mode} --trace-dir '${RUNS}'")
  set(check "${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/check_prefetch.py trace --backward ${mode} --blocks 12")
  add_test(NAME "${name}"
           COMMAND sh -c "${run} --run-name ch05_${mode} > /dev/null && ${check} '${RUNS}/ch05_${mode}' && ${run} --forward-prefetch --run-name ch05_${mode}_fp > /dev/null && ${check} --forward '${RUNS}/ch05_${mode}_fp'")
  set_tests_properties("${name}" PROPERTIES TIMEOUT 300 PROCESSORS 2 FIXTURES_SETUP ch05_${mode})
endforeach()
add_test(NAME "ch05: on h100-8, BACKWARD_PRE halves none's exposed backward communication for one block's memory, and the formula holds within 2%"
         COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/check_prefetch.py shape ${RUNS}/ch05_none ${RUNS}/ch05_post ${RUNS}/ch05_pre)
set_tests_properties("ch05: on h100-8, BACKWARD_PRE halves none's exposed backward communication for one block's memory, and the formula holds within 2%"
                     PROPERTIES FIXTURES_REQUIRED "ch05_pre;ch05_post;ch05_none")
# Chapter 06: the rate limiter changes timing and memory only: on and off, at worlds 1 to 4,
# the parameters equal single-rank training and the race check finds nothing.
shardlab_chapter_tests(ch06 shardlab_ch06)
foreach(limit on off)
  set(name "ch06: --limit-all-gathers ${limit} equals single-rank training at worlds 1-4")
  add_test(NAME "${name}"
           COMMAND sh -c "for np in 1 2 3 4; do ${MPIRUN_SH} -np $np $<TARGET_FILE:shardlab_ch06> --limit-all-gathers ${limit} --trace-dir '${RUNS}' --run-name ch06_${limit}_np$np > /dev/null || { echo \"failed: world $np\"; exit 1; }; done")
  set_tests_properties("${name}" PROPERTIES TIMEOUT 300 PROCESSORS 4)
endforeach()
# On the timeline (tests/check_rate_limit.py): with the limiter, no forward all-gather is issued
# while more than 2 freed blocks still run on the GPU; without it, the CPU runs further ahead.
foreach(np 2 3 4)
  set(name "ch06: gpt2-small at world ${np}: with the limiter at most 2 freed blocks run when an all-gather is issued, without it more")
  set(run "${MPIRUN_SH} -np ${np} $<TARGET_FILE:shardlab_ch06> --model gpt2-small --global-batch ${np} --seq-len 1024 --compute skip --steps 2 --trace-dir '${RUNS}'")
  set(check "${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/check_rate_limit.py")
  add_test(NAME "${name}"
           COMMAND sh -c "${run} --run-name ch06_on_${np} > /dev/null && ${check} '${RUNS}/ch06_on_${np}' --limited && ${run} --limit-all-gathers off --run-name ch06_off_${np} > /dev/null && ${check} '${RUNS}/ch06_off_${np}' --unlimited")
  set_tests_properties("${name}" PROPERTIES TIMEOUT 300 PROCESSORS ${np})
endforeach()
# The thrash (gpt-15b, 8 simulated H100s): alloc retries without the limiter (which then records
# no free event, as PyTorch), none with it, and
# summary.json's allocator counts equal the trace's marks (tests/check_allocator_marks.py); where
# memory is plentiful (gpt2-small) the limiter costs under 5% of the step.
set(wide "--model gpt-15b --global-batch 8 --seq-len 1024 --compute skip --steps 3")
add_test(NAME "ch06: gpt-15b at 8 ranks: alloc retries without the limiter, none with it"
         COMMAND sh -c "${MPIRUN_SH} -np 8 $<TARGET_FILE:shardlab_ch06> ${wide} --limit-all-gathers off --trace-dir '${RUNS}' --run-name ch06_thrash_off > /dev/null && ${MPIRUN_SH} -np 8 $<TARGET_FILE:shardlab_ch06> ${wide} --trace-dir '${RUNS}' --run-name ch06_thrash_on > /dev/null && ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/check_figures.py '${RUNS}/ch06_thrash_off/summary.json' 'alloc_retries > 0' 'free_events_most_queued == 0' && ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/check_figures.py '${RUNS}/ch06_thrash_on/summary.json' 'alloc_retries_total == 0' && for r in off on; do ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/check_allocator_marks.py '${RUNS}'/ch06_thrash_$r || exit 1; done")
set_tests_properties("ch06: gpt-15b at 8 ranks: alloc retries without the limiter, none with it" PROPERTIES TIMEOUT 300 PROCESSORS 2)
set(small "--model gpt2-small --global-batch 8 --seq-len 1024 --compute skip --steps 2")
add_test(NAME "ch06: gpt2-small at 8 ranks: the limiter changes the step by under 5%"
         COMMAND sh -c "${MPIRUN_SH} -np 8 $<TARGET_FILE:shardlab_ch06> ${small} --limit-all-gathers off --trace-dir '${RUNS}' --run-name ch06_small_off > /dev/null && ${MPIRUN_SH} -np 8 $<TARGET_FILE:shardlab_ch06> ${small} --trace-dir '${RUNS}' --run-name ch06_small_on > /dev/null && ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/check_figures.py '${RUNS}/ch06_small_on/summary.json' --as off '${RUNS}/ch06_small_off/summary.json' 'abs(step_ms / off_step_ms - 1) < 0.05' 'alloc_retries_total == 0 and off_alloc_retries_total == 0'")
set_tests_properties("ch06: gpt2-small at 8 ranks: the limiter changes the step by under 5%" PROPERTIES TIMEOUT 300 PROCESSORS 2)
# Chapter 07: HSDP. The chapter's own checks (single-rank numerics; all-gathers and reduce-scatters
# inside the shard group, one all-reduce per unit) at worlds 1-4 on h100-8 (one node: mesh 1 x W).
shardlab_chapter_tests(ch07 shardlab_ch07)
# Every mesh of 4 and of 3 ranks, both hybrid strategies, on h100-2x2 (two nodes of 2 GPUs), with
# two micro-batches a step; the trace shows the groups, streams and order of tests/check_hsdp.py.
# Mesh R x 1 shards nothing and must still all-reduce across replicas (pytorch/pytorch#154888).
foreach(mesh 2x2 1x4 4x1 3x1 1x3)
  string(REPLACE "x" ";" rs ${mesh})
  list(GET rs 0 r)
  list(GET rs 1 s)
  math(EXPR np "${r} * ${s}")
  set(name "ch07: mesh ${mesh} (replicate x shard), hybrid and hybrid-zero2, equals single-rank training, with the groups, streams and order it must have on the trace")
  set(run "${MPIRUN_SH} -np ${np} $<TARGET_FILE:shardlab_ch07> --profile h100-2x2 --replicate ${r} --shard ${s} --grad-accum 2 --global-batch 24 --trace-dir '${RUNS}'")
  set(check "${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/check_hsdp.py --gpus-per-node 2 --replicate ${r} --shard ${s} --units 3 --grad-accum 2")
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
           COMMAND sh -c "${MPIRUN_SH} -np 16 $<TARGET_FILE:shardlab_ch07> ${big} --sharding ${sharding} --trace-dir '${RUNS}' --run-name ch07_big_${sharding} > /dev/null && ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/check_figures.py '${RUNS}/ch07_big_${sharding}/summary.json' 'abs(network_MB - network_formula_MB) <= 0.01 * network_formula_MB' 'abs(intra_node_MB - intra_node_formula_MB) <= 0.01 * intra_node_formula_MB'")
  set_tests_properties("ch07: gpt-1b on 2 x 8 H100s with one NIC a node, ${sharding}: bytes per link equal the ring model within 1%"
                       PROPERTIES TIMEOUT 300 PROCESSORS 2 FIXTURES_SETUP ch07_big_${sharding})
endforeach()
add_test(NAME "ch07: gpt-1b on 2 x 8 H100s with one NIC a node: HYBRID_SHARD's step is shorter than FULL_SHARD's with fewer network bytes, FULL_SHARD's memory lower, HSDP's memory the formula within 2%"
         COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/check_figures.py ${RUNS}/ch07_big_hybrid/summary.json --as full ${RUNS}/ch07_big_full/summary.json
                 "step_ms < full_step_ms" "network_MB < full_network_MB" "full_peak_allocated_MiB < peak_allocated_MiB"
                 "abs(peak_allocated_MiB / memory_formula_MiB - 1) < 0.02")
set_tests_properties("ch07: gpt-1b on 2 x 8 H100s with one NIC a node: HYBRID_SHARD's step is shorter than FULL_SHARD's with fewer network bytes, FULL_SHARD's memory lower, HSDP's memory the formula within 2%"
                     PROPERTIES FIXTURES_REQUIRED "ch07_big_full;ch07_big_hybrid")
foreach(t "ch02;shardlab_ch02;4;--grad-accum 3" "ch03;shardlab_ch03;3;--grad-accum 2 --bucket-cap-mb 0.01 --first-bucket-mb 0.002")
  list(GET t 0 name)
  list(GET t 1 target)
  list(GET t 2 np)
  list(GET t 3 args)
  separate_arguments(arg_list UNIX_COMMAND "${args}")
  # The chapter exits non-zero when its parameters differ from single-rank training.
  add_test(NAME "${name}: ${args} on ${np} ranks equals one big batch on one rank"
           COMMAND ${MPIRUN} -np ${np} $<TARGET_FILE:${target}> ${arg_list} --trace-dir ${RUNS} --run-name ${name}_accum)
  set_tests_properties("${name}: ${args} on ${np} ranks equals one big batch on one rank" PROPERTIES TIMEOUT 300 PROCESSORS ${np})
endforeach()
# The point of chapter 03, on gpt2-small over 8 simulated H100s: less than half of chapter 02's
# exposed communication, and a shorter step.
add_test(NAME "ch03: on gpt2-small, h100-8, 8 ranks, buckets overlap most communication with backward, halve exposed communication and shorten the step"
         COMMAND sh -c "for ch in 02 03; do ${MPIRUN_SH} -np 8 $<TARGET_FILE_DIR:shardlab_ch02>/shardlab_ch$ch --model gpt2-small --global-batch 8 --seq-len 1024 --compute skip --steps 2 --trace-dir '${RUNS}' --run-name overlap_ch$ch > /dev/null || exit 1; done; ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/check_overlap.py '${RUNS}/overlap_ch02/summary.json' '${RUNS}/overlap_ch03/summary.json'")
set_tests_properties("ch03: on gpt2-small, h100-8, 8 ranks, buckets overlap most communication with backward, halve exposed communication and shorten the step" PROPERTIES TIMEOUT 300 PROCESSORS 2)
add_test(NAME "ch00: --race reports the missing wait, naming both ops, streams and buffer"
         COMMAND ${EXPECT_EXIT} 0 "race on 'in\\[0\\]'.*polynomial on stream 7 \\(compute\\) reads it, but Memcpy HtoD \\(Pinned -> Device\\) on stream 8 \\(copy\\) wrote it"
                 -- ${MPIRUN} -np 1 $<TARGET_FILE:shardlab_ch00> --race --steps 2 --trace-dir ${RUNS} --run-name ch00_race)
# Debug mode on NCCL: the header exchange runs over NCCL's MPI twin before every NCCL call (a
# mismatch needs two GPUs; the mismatch messages themselves are tested on MpiComm).
add_test(NAME "ch03: --debug-collectives on the GPU with NCCL runs at world 1"
         COMMAND ${GPU_OR_SKIP} ${MPIRUN} -np 1 $<TARGET_FILE:shardlab_ch03> --device cuda --comm nccl --debug-collectives --steps 2 --trace-dir ${RUNS} --run-name ch03_debug_nccl)
set_tests_properties("ch03: --debug-collectives on the GPU with NCCL runs at world 1" PROPERTIES SKIP_RETURN_CODE 77)
# On a GPU the race is real: case (c) may compute on inputs still in flight. The run must go on
# to the end and count the wrong results instead of stopping at the first.
add_test(NAME "ch00: --race on the GPU runs to the end and counts case (c)'s wrong results"
         COMMAND sh -c "out=$(${GPU_OR_SKIP} ${MPIRUN_SH} -np 1 $<TARGET_FILE:shardlab_ch00> --device cuda --race --steps 2 --trace-dir '${RUNS}' --run-name ch00_race_cuda); rc=$?; echo \"$out\"; [ $rc -eq 0 ] || exit $rc; echo \"$out\" | grep -q race_wrong_outputs")
set_tests_properties("ch00: --race on the GPU runs to the end and counts case (c)'s wrong results" PROPERTIES SKIP_RETURN_CODE 77)
# A chapter's README quotes the figures of its default 4-rank run and, in marked blocks (some
# hidden in comments), the output of other commands: both are re-run and compared
# (tests/check_readme_figures.py).
# shardlab_readme_test(<name> <target> <chapter dir> [flags of the 4-rank run whose figures the
# README's tables quote])
# Every other number a README quotes at a run's precision must be one its runs printed, or say
# how it is derived, or why it cannot be re-run (check_readme_figures.py --numbers).
function(shardlab_readme_test name target dir)
  string(JOIN " " flags ${ARGN})
  set(check "${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/check_readme_figures.py --numbers")
  add_test(NAME "${name}: the README quotes what the chapter prints"
           COMMAND sh -c "${MPIRUN_SH} -np 4 $<TARGET_FILE:${target}> ${flags} --trace-dir '${RUNS}' --run-name ${name}_readme > /dev/null && ${check} ${PROJECT_SOURCE_DIR}/chapters/${dir}/README.md '${RUNS}/${name}_readme/summary.json' --mpirun '${MPIRUN_SH}' --bin $<TARGET_FILE_DIR:${target}>")
  set_tests_properties("${name}: the README quotes what the chapter prints" PROPERTIES TIMEOUT 300 PROCESSORS 4)
endfunction()
shardlab_readme_test(ch00 shardlab_ch00 00_streams_events)
shardlab_readme_test(ch01 shardlab_ch01 01_ring_allreduce)
shardlab_readme_test(ch02 shardlab_ch02 02_naive_ddp)
shardlab_readme_test(ch03 shardlab_ch03 03_bucketed_ddp)
shardlab_readme_test(ch04 shardlab_ch04 04_fsdp)
shardlab_readme_test(ch05 shardlab_ch05 05_prefetch)
shardlab_readme_test(ch06 shardlab_ch06 06_rate_limit)
shardlab_readme_test(ch07 shardlab_ch07 07_hsdp --profile h100-2x2)
shardlab_readme_test(ch08 shardlab_ch08 08_context_parallel)
# The top-level README has no run of its own: its numbers come from the commands it quotes
# (chapters and tests/fail_one_rank), or say why no run here can print them (benchmarks, the H200).
add_test(NAME "README: every number the top-level README quotes is printed by a run, derived or marked unchecked"
         COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/check_readme_figures.py --numbers ${PROJECT_SOURCE_DIR}/README.md
                 --mpirun "${MPIRUN_SH}" --bin $<TARGET_FILE_DIR:shardlab_ch02> --bin $<TARGET_FILE_DIR:fail_one_rank>)
set_tests_properties("README: every number the top-level README quotes is printed by a run, derived or marked unchecked"
                     PROPERTIES TIMEOUT 120 PROCESSORS 3)

# The local rank (on a GPU: which GPU a rank takes) comes from Open MPI's or Slurm's variable, else
# from MPI; Slurm's is set by hand under mpirun here (tests/check_local_rank.py).
add_test(NAME "harness: each rank's local rank comes from OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID or MPI, and is recorded"
         COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/check_local_rank.py --mpirun "${MPIRUN_SH}"
                 --bin $<TARGET_FILE:shardlab_ch00> --out ${RUNS})
set_tests_properties("harness: each rank's local rank comes from OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID or MPI, and is recorded" PROPERTIES TIMEOUT 120 PROCESSORS 2)

# Each chapter's flags, fuzzed: 8 seeded cases of 1 to 3 random flags with valid, boundary and
# hostile values on 1 to 3 ranks, in a sandbox holding files no run may touch. Never a crash, a
# hang, a deleted or changed file, an exit 2 that names no flag, an exit 1 without its error or
# an exit 0 on a value no flag of its kind accepts (tests/fuzz_flags.py).
foreach(ch 00 01 02 03 04 05 06 07 08)
  set(_name "ch${ch}: flag fuzz (8 seeded cases): no crash, hang, touched file, silent run or unexplained exit")
  add_test(NAME "${_name}"
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/fuzz_flags.py --mpirun "${MPIRUN_SH}"
                   --bin $<TARGET_FILE:shardlab_ch${ch}> --out ${CMAKE_BINARY_DIR}/test-fuzz-flags/ch${ch} --cases 8 --seed 1${ch})
  set_tests_properties("${_name}" PROPERTIES TIMEOUT 600 PROCESSORS 3)
endforeach()

# The numerics check catches a gradient reduced with the wrong divisor in 2 steps, at worlds 2
# and 3, which the parameters alone cannot (AdamW's step ignores a gradient's scale), and passes
# the right reduction (tests/wrong_divisor.cpp).
add_executable(wrong_divisor wrong_divisor.cpp)
target_link_libraries(wrong_divisor PRIVATE shardlab_common shardlab_warnings)
target_include_directories(wrong_divisor PRIVATE ${PROJECT_SOURCE_DIR}/chapters)
foreach(np 2 3)
  set(_inverse 0.5)  # 1 / np, as the message rounds it
  if(np EQUAL 3)
    set(_inverse 0.333)
  endif()
  foreach(case "sum|AdamW's first moment differs from single-rank training: .*wte.weight's ${np} times the reference's"
               "twice|AdamW's first moment differs from single-rank training: .*wte.weight's ${_inverse} times the reference's"
               "skip|parameters differ from single-rank training: relative error")
    string(REPLACE "|" ";" _parts "${case}")
    list(GET _parts 0 _bug)
    list(GET _parts 1 _message)
    set(_name "numerics: a gradient ${_bug} (wrong divisor) fails the single-rank check in 2 steps at world ${np}")
    add_test(NAME "${_name}" COMMAND ${EXPECT_EXIT} 1 "${_message}" -- ${MPIRUN} -np ${np} $<TARGET_FILE:wrong_divisor> --bug ${_bug} --trace-dir ${RUNS} --run-name wrong_divisor_${_bug}_${np})
    set_tests_properties("${_name}" PROPERTIES TIMEOUT 60 PROCESSORS ${np})
  endforeach()
  set(_name "numerics: the right divisor passes the single-rank check at world ${np}")
  add_test(NAME "${_name}" COMMAND ${EXPECT_EXIT} 0 "relative_error_vs_single_rank" --also "moment_scale_worst *1.000" -- ${MPIRUN} -np ${np} $<TARGET_FILE:wrong_divisor> --bug none --trace-dir ${RUNS} --run-name wrong_divisor_none_${np})
  set_tests_properties("${_name}" PROPERTIES TIMEOUT 60 PROCESSORS ${np})
endforeach()

add_executable(fail_one_rank fail_one_rank.cpp)
target_link_libraries(fail_one_rank PRIVATE shardlab_common shardlab_warnings)
# A full disk: rank 1's trace and rank 0's summary.json cannot be written (their temporary files
# are links to /dev/full, whose every write fails with ENOSPC). The job says what it wrote, what
# it did not and why, and leaves no temporary file behind.
set(_dir ${RUNS}/disk_full)
set(_name "harness: on a full disk a failed run says which files it wrote, which not and why, and leaves no temporary file")
add_test(NAME "${_name}"
         COMMAND sh -c "rm -rf '${_dir}' && mkdir -p '${_dir}' && ln -s /dev/full '${_dir}/rank1.json.tmp' && ln -s /dev/full '${_dir}/summary.json.tmp' && ${EXPECT_EXIT} 1 'the run failed; in .*disk_full, written: the traces \\(marked incomplete\\) of ranks 0, 2, the flight records of ranks 0, 1, 2; not written: rank 0: cannot write .*summary.json: No space left on device; rank 1: cannot write .*rank1.json: No space left on device' -- ${MPIRUN_SH} -np 3 $<TARGET_FILE:fail_one_rank> --failing-step 1 --trace-dir '${RUNS}' --run-name disk_full && test ! -e '${_dir}/rank1.json.tmp' && test ! -e '${_dir}/summary.json.tmp' && test -s '${_dir}/rank0.json'")
set_tests_properties("${_name}" PROPERTIES TIMEOUT 60 PROCESSORS 3)
# The trace a rank streams as it runs (trace.h) meeting a full disk: a warning naming the file
# and the reason, once, and the run goes on; its end writes the whole file (here the disk has
# room again: the link to /dev/full is gone with the failed temporary).
set(_dir "${RUNS}/stream_full")
set(_name "harness: a trace that cannot be streamed warns once with the reason and the run goes on")
add_test(NAME "${_name}"
         COMMAND sh -c "rm -rf '${_dir}' && mkdir -p '${_dir}' && ln -s /dev/full '${_dir}/rank1.json.tmp' && ${MPIRUN_SH} -np 2 $<TARGET_FILE:shardlab_ch02> --steps 3 --trace-dir '${RUNS}' --run-name stream_full > '${_dir}.log' 2>&1; s=$?; cat '${_dir}.log'; test $s -eq 0 && test $(grep -c 'rank 1: warning: cannot write .*stream_full/rank1.json: No space left on device; the trace is written at the end of the run only' '${_dir}.log') -eq 1 && ${VALIDATE_SH} '${_dir}' --ranks 2")
set_tests_properties("${_name}" PROPERTIES TIMEOUT 60 PROCESSORS 2)
# A run killed at any moment keeps its steps: each rank's trace grows at every step's end
# (common/trace/trace.h). Seeded kills (kill -9 of a rank or of all, SIGTERM or SIGINT to mpirun)
# at worlds 2, 3 and 4 of chapters 02, 05 and 08; every file left opens in the viewer and passes
# validate_trace.py --expect-incomplete.
if(TARGET shardlab-view)
  set(_name "harness: a run killed at seeded random moments (6 kills at worlds 2-4) leaves every trace file readable")
  add_test(NAME "${_name}"
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/check_killed_run.py --mpirun "${MPIRUN_SH}"
                   --chapters $<TARGET_FILE_DIR:shardlab_ch05> --viewer $<TARGET_FILE:shardlab-view> --seed 1 --cases 6)
  set_tests_properties("${_name}" PROPERTIES TIMEOUT 600 PROCESSORS 4)
endif()
add_test(NAME "harness: a rank that throws brings the whole job down with its message"
         COMMAND ${EXPECT_EXIT} 1 "rank 1: error: deliberate failure on rank 1" -- ${MPIRUN} -np 3 $<TARGET_FILE:fail_one_rank> --trace-dir ${RUNS})
set_tests_properties("harness: a rank that throws brings the whole job down with its message" PROPERTIES TIMEOUT 60 PROCESSORS 3)
add_test(NAME "harness: a step that throws prints no progress line"
         COMMAND ${EXPECT_EXIT} 1 "rank 0: error: deliberate failure on rank 0" --also "step 1/2" --not "step 2/2"
                 -- ${MPIRUN} -np 2 $<TARGET_FILE:fail_one_rank> --failing-rank 0 --trace-dir ${RUNS})
set_tests_properties("harness: a step that throws prints no progress line" PROPERTIES TIMEOUT 60 PROCESSORS 2)
# A race the program did not expect fails the run (exit 3) after its traces are written; chapter
# 00's --race shows one on purpose and exits 0.
add_test(NAME "harness: a run with a race the program did not expect exits 3 after writing its traces"
         COMMAND ${EXPECT_EXIT} 3 "fail_one_rank: error: the race check found 2 race\\(s\\)" --also "race check: 2 report\\(s\\)" --also "traces: "
                 -- ${MPIRUN} -np 2 $<TARGET_FILE:fail_one_rank> --mode race --trace-dir ${RUNS} --run-name race_unexpected)
set_tests_properties("harness: a run with a race the program did not expect exits 3 after writing its traces" PROPERTIES TIMEOUT 60 PROCESSORS 2)
# The run directory: a user's files beside runs survive, runs of other sizes (finished or killed
# mid-run) leave no file of an earlier run behind, and run names that leave --trace-dir exit 2.
add_test(NAME "harness: a run removes only what the last run in its directory listed, and never mixes runs"
         COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/check_run_directory.py
                 --mpirun "${MPIRUN_SH}" --bin $<TARGET_FILE:shardlab_ch02>)
set_tests_properties("harness: a run removes only what the last run in its directory listed, and never mixes runs" PROPERTIES TIMEOUT 180 PROCESSORS 4)
# Flags that contradict each other exit 2 before step 1, naming the flag, instead of one being ignored.
foreach(case "05|--sweep --backward-prefetch post|--backward-prefetch: got 'post'; allowed: not with --sweep"
             "06|--limit-all-gathers off --inflight-all-gathers 3|--inflight-all-gathers: got '3'; allowed: only with --limit-all-gathers on"
             "07|--sharding full --shard 2|--shard: got '2'; allowed: only with --sharding hybrid or hybrid-zero2"
             "02|--collective-timeout 1e-9|--collective-timeout: got '1e-09'; allowed: 0 \\(wait forever\\) or 0.1 to 86400 seconds")
  string(REPLACE "|" ";" parts "${case}")
  list(GET parts 0 ch)
  list(GET parts 1 flags_text)
  list(GET parts 2 message)
  separate_arguments(flags UNIX_COMMAND "${flags_text}")
  add_test(NAME "ch${ch}: flags that contradict exit 2 naming the flag: ${flags_text}"
           COMMAND ${EXPECT_EXIT} 2 "${message}" --not "step 1/" -- ${MPIRUN} -np 2 $<TARGET_FILE:shardlab_ch${ch}> ${flags})
  set_tests_properties("ch${ch}: flags that contradict exit 2 naming the flag: ${flags_text}" PROPERTIES PROCESSORS 2)
endforeach()
add_test(NAME "harness: a string flag given another flag as its value exits 2 naming both"
         COMMAND ${EXPECT_EXIT} 2 "--trace-dir: got '--debug-collectives'; allowed: a non-empty string that does not start with --" --not "step 1/"
                 -- ${MPIRUN} -np 1 $<TARGET_FILE:shardlab_ch02> --trace-dir --debug-collectives)
# The failure paths, each a fail_one_rank run into ${RUNS}/<run> that must exit 1 with the
# expected words (`expect`: expect_exit's arguments, shell-quoted), leave traces the validator
# accepts as incomplete and, with `check` (check_failed_run.py's flags), the summary and flight
# records a failed run owes.
string(JOIN " " CHECK_FAILED_SH ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/check_failed_run.py)
function(shardlab_failed_run_test name run ranks timeout expect args check)
  set(dir "'${RUNS}/${run}'")
  set(cmd "rm -rf ${dir}; ${EXPECT_EXIT} 1 ${expect} -- ${MPIRUN_SH} -np ${ranks} $<TARGET_FILE:fail_one_rank> ${args} --trace-dir '${RUNS}' --run-name ${run} && ${VALIDATE_SH} ${dir} --ranks ${ranks} --expect-incomplete")
  if(check)
    string(APPEND cmd " && ${CHECK_FAILED_SH} ${dir} --ranks ${ranks} ${check}")
  endif()
  add_test(NAME "harness: ${name}" COMMAND sh -c "${cmd}")
  set_tests_properties("harness: ${name}" PROPERTIES TIMEOUT ${timeout} PROCESSORS ${ranks})
endfunction()
# A rank that throws in step 3 of 5: every rank writes its trace so far (marked incomplete), its
# flight record and a report; summary.json names the failure.
shardlab_failed_run_test("a rank that throws in step 3 of 5 leaves every rank's steps 1-2, marked incomplete" failed_throw 3 60
  "'rank 1: error: deliberate failure on rank 1'" "--steps 5 --failing-step 3" "--failed-rank 1 --kind error --steps 2")
# A rank that skips one all-reduce (no --debug-collectives): the others wait in it, and after
# --collective-timeout 5 the job ends naming the rank that never issued it (ctest's own limit:
# the timeout + 10 s, and a few seconds for mpirun).
shardlab_failed_run_test("a rank that skips a collective ends after --collective-timeout naming itself" failed_skip 3 18
  "'collective timeout \\(--collective-timeout 5 s\\): allreduce #3 on world \\(16 Float\\) was issued by ranks 0, 2 and never by rank 1' --also 'flight records: '"
  "--mode skip --steps 3 --failing-step 3 --collective-timeout 5" "--failed-rank 1 --kind timeout --steps 2")
# A rank that skips the step's last collective, the loss all-reduce in Job::Step's destructor:
# the others' wait there times out inside a destructor, which must reach the harness (not
# std::terminate), and the diagnosis names the rank that never reached the step's end.
shardlab_failed_run_test("a rank that skips the step's closing loss all-reduce is named, every trace written" failed_skip_loss 3 18
  "'collective timeout \\(--collective-timeout 5 s\\): the end of step 2 \\(its loss all-reduce, over every rank\\) was issued by ranks 0, 2 and never by rank 1' --also 'flight records: ' --not 'terminate called'"
  "--mode skip-loss --steps 3 --failing-step 2 --collective-timeout 5" "--failed-rank 1 --kind timeout --steps 1")
# A rank that skips a ring sendrecv (chapter 08's KV exchange): the rank after it waits for it;
# the others go on to the next collective. The diagnosis names the rank that skipped, not the
# ranks held in the sendrecv.
shardlab_failed_run_test("a rank that skips a ring sendrecv is named, not the ranks waiting for it" failed_skip_sendrecv 3 18
  "'collective timeout \\(--collective-timeout 5 s\\): sendrecv #3 on world was issued by ranks 0, 2, waiting for a peer, and never by rank 1' --not 'never by ranks? [02]'"
  "--mode skip-sendrecv --steps 4 --failing-step 3 --collective-timeout 5" "--failed-rank 1 --kind timeout --steps 2")
shardlab_failed_run_test("a rank out of host memory says so and what to change, every trace written" failed_host_oom 2 60
  "'rank 1: error: out of host memory \\(std::bad_alloc\\)' --also 'use --compute skip' --not 'terminate called'"
  "--mode host-oom --steps 4 --failing-step 3" "")

# Reference traces in traces/ must be what the code writes now: regenerate with the command in
# traces/README.md and compare byte for byte.
function(shardlab_reference_trace_test name target run ranks)
  string(JOIN " " args ${ARGN})
  set(dir ${RUNS}/reference_${name})
  add_test(NAME "${name}: the reference trace in traces/${run} is what the code writes"
           COMMAND sh -c "rm -rf '${dir}' && mkdir -p '${dir}' && cd '${dir}' && ${MPIRUN_SH} -np ${ranks} $<TARGET_FILE:${target}> ${args} --trace-dir traces --run-name ${run} > /dev/null && for f in traces/${run}/*; do cmp $f '${PROJECT_SOURCE_DIR}/'$f || { echo \"$f differs: regenerate it (traces/README.md)\"; exit 1; }; done")
  set_tests_properties("${name}: the reference trace in traces/${run} is what the code writes" PROPERTIES TIMEOUT 300 PROCESSORS ${ranks})
endfunction()
shardlab_reference_trace_test(ch00 shardlab_ch00 00_streams_events 2)
shardlab_reference_trace_test(ch01 shardlab_ch01 01_ring_allreduce 4 --min-bytes 1024 --max-bytes 4194304)
shardlab_reference_trace_test(ch02 shardlab_ch02 02_naive_ddp 4)
shardlab_reference_trace_test(ch03 shardlab_ch03 03_bucketed_ddp 4)
shardlab_reference_trace_test(ch04 shardlab_ch04 04_fsdp 4)
shardlab_reference_trace_test(ch05 shardlab_ch05 05_prefetch 2 --model gpt2-small --global-batch 2 --seq-len 1024 --compute skip --steps 2)
shardlab_reference_trace_test(ch06 shardlab_ch06 06_rate_limit 2 --model gpt2-small --global-batch 2 --seq-len 1024 --compute skip --steps 2)
# Chapter 06's picture needs the thrash, which needs 8 ranks of gpt-15b: too many bytes to keep
# whole, so its two runs keep rank 0 only, gzipped; the test compares what the code writes.
foreach(limit off on)
  set(dir ${RUNS}/reference_ch06_thrash_${limit})
  add_test(NAME "ch06: the reference trace in traces/06_thrash_${limit} (rank 0, gzipped) is what the code writes"
           COMMAND sh -c "rm -rf '${dir}' && mkdir -p '${dir}' && cd '${dir}' && ${MPIRUN_SH} -np 8 $<TARGET_FILE:shardlab_ch06> --model gpt-15b --global-batch 8 --seq-len 1024 --compute skip --steps 3 --limit-all-gathers ${limit} --trace-dir traces --run-name 06_thrash_${limit} > /dev/null && gzip -dc '${PROJECT_SOURCE_DIR}/traces/06_thrash_${limit}/rank0.json.gz' | cmp - traces/06_thrash_${limit}/rank0.json || { echo 'traces/06_thrash_${limit} differs: regenerate it (traces/README.md)'; exit 1; }")
  set_tests_properties("ch06: the reference trace in traces/06_thrash_${limit} (rank 0, gzipped) is what the code writes" PROPERTIES TIMEOUT 300 PROCESSORS 2)
endforeach()
shardlab_reference_trace_test("ch05 (none)" shardlab_ch05 05_prefetch_none 2 --model gpt2-small --global-batch 2 --seq-len 1024 --compute skip --steps 2 --backward-prefetch none)
shardlab_reference_trace_test(ch07 shardlab_ch07 07_hsdp 4 --profile h100-2x2 --model gpt2-small --global-batch 4 --seq-len 1024 --compute skip --steps 2)
# Chapter 07's picture: FULL_SHARD against HYBRID_SHARD on 16 ranks sharing one NIC a node, rank 0
# of each, gzipped as chapter 06's.
foreach(sharding full hybrid)
  set(dir ${RUNS}/reference_ch07_${sharding}_1nic)
  add_test(NAME "ch07: the reference trace in traces/07_${sharding}_1nic (rank 0, gzipped) is what the code writes"
           COMMAND sh -c "rm -rf '${dir}' && mkdir -p '${dir}' && cd '${dir}' && ${MPIRUN_SH} -np 16 $<TARGET_FILE:shardlab_ch07> --profile h100-2x8-1nic --model gpt2-small --global-batch 16 --seq-len 1024 --compute skip --steps 3 --sharding ${sharding} --trace-dir traces --run-name 07_${sharding}_1nic > /dev/null && gzip -dc '${PROJECT_SOURCE_DIR}/traces/07_${sharding}_1nic/rank0.json.gz' | cmp - traces/07_${sharding}_1nic/rank0.json || { echo 'traces/07_${sharding}_1nic differs: regenerate it (traces/README.md)'; exit 1; }")
  set_tests_properties("ch07: the reference trace in traces/07_${sharding}_1nic (rank 0, gzipped) is what the code writes" PROPERTIES TIMEOUT 300 PROCESSORS 2)
endforeach()

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
           COMMAND sh -c "${MPIRUN_SH} -np 8 $<TARGET_FILE:shardlab_ch08> --model gpt2-small --global-batch 1 --seq-len 1024 --compute skip --steps 1 --cp-layout ${layout} --trace-dir '${RUNS}' --run-name ch08_entries_${layout} > /dev/null && ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/check_context_parallel.py '${RUNS}/ch08_entries_${layout}/summary.json'")
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
         COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/check_figures.py ${RUNS}/ch08_balance_zigzag/summary.json --as contiguous ${RUNS}/ch08_balance_contiguous/summary.json
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
           COMMAND sh -c "${run} --seq-len ${short} --run-name ch08_hide_${np}_short > /dev/null && ${run} --seq-len ${long} --run-name ch08_hide_${np}_long > /dev/null && ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/check_figures.py '${RUNS}/ch08_hide_${np}_short/summary.json' --as long '${RUNS}/ch08_hide_${np}_long/summary.json' '${short} / ${np} < kv_hidden_from_tokens' '${long} / ${np} >= long_kv_hidden_from_tokens * 2' 'exposed_kv_ms > 5 * kv_exposed_floor_ms' 'long_exposed_kv_ms < 1.5 * long_kv_exposed_floor_ms'")
  set_tests_properties("${name}" PROPERTIES TIMEOUT 300 PROCESSORS 2)
endforeach()
# Chapter 08's reference traces: the lesson's timing run on 4 ranks, zigzag and contiguous (its
# picture compares them), every rank gzipped (a ring attention step is many small events).
foreach(layout zigzag contiguous)
  if(layout STREQUAL "zigzag")
    set(run 08_context_parallel)
  else()
    set(run 08_contiguous)
  endif()
  set(dir ${RUNS}/reference_ch08_${layout})
  add_test(NAME "ch08: the reference trace in traces/${run} (gzipped) is what the code writes"
           COMMAND sh -c "rm -rf '${dir}' && mkdir -p '${dir}' && cd '${dir}' && ${MPIRUN_SH} -np 4 $<TARGET_FILE:shardlab_ch08> --model gpt2-small-128k --global-batch 1 --seq-len 16384 --compute skip --steps 2 --cp-layout ${layout} --trace-dir traces --run-name ${run} > /dev/null && cmp traces/${run}/summary.json '${PROJECT_SOURCE_DIR}/traces/${run}/summary.json' && for r in 0 1 2 3; do gzip -dc '${PROJECT_SOURCE_DIR}/traces/${run}/rank'$r'.json.gz' | cmp - traces/${run}/rank$r.json || exit 1; done || { echo 'traces/${run} differs: regenerate it (traces/README.md)'; exit 1; }")
  set_tests_properties("ch08: the reference trace in traces/${run} (gzipped) is what the code writes" PROPERTIES TIMEOUT 300 PROCESSORS 4)
endforeach()

# Notebooks are executed (Debian's jupyter-nbconvert). Each runs its chapter into the build tree.
find_program(JUPYTER jupyter)
function(shardlab_notebook_test notebook)
  if(NOT JUPYTER)
    return()
  endif()
  # Each notebook makes its runs afresh, in a directory of its own: a notebook reuses a run whose
  # summary.json exists, and a run left by an older build would be checked against today's code.
  get_filename_component(stem ${notebook} NAME_WE)
  set(runs ${RUNS}/notebooks/${stem})
  add_test(NAME "notebook: ${notebook} executes and its prose quotes what its cells print"
           COMMAND sh -c "rm -rf '${runs}' && SHARDLAB_BUILD='${CMAKE_BINARY_DIR}' SHARDLAB_RUNS='${runs}' SHARDLAB_FIGURES='${CMAKE_BINARY_DIR}/test-figures' ${JUPYTER} nbconvert --to notebook --execute '${PROJECT_SOURCE_DIR}/notebooks/${notebook}' --output-dir '${CMAKE_BINARY_DIR}/test-notebooks' && ${Python3_EXECUTABLE} '${CMAKE_CURRENT_SOURCE_DIR}/check_notebook_numbers.py' '${CMAKE_BINARY_DIR}/test-notebooks/${notebook}'")
  set_tests_properties("notebook: ${notebook} executes and its prose quotes what its cells print" PROPERTIES TIMEOUT 900 PROCESSORS 4)
endfunction()
shardlab_notebook_test(00_streams_events.ipynb)
shardlab_notebook_test(01_ring_allreduce.ipynb)
shardlab_notebook_test(02_03_ddp_timelines.ipynb)
shardlab_notebook_test(03_bucket_size.ipynb)
shardlab_notebook_test(04_fsdp_memory.ipynb)
shardlab_notebook_test(05_prefetch.ipynb)
shardlab_notebook_test(06_rate_limit.ipynb)
shardlab_notebook_test(07_hsdp.ipynb)
shardlab_notebook_test(08_context_parallel.ipynb)

# The viewer, headless under Xvfb (Mesa's software OpenGL): a real screenshot, and a bad file
# that must end in a message, not a crash or a hang.
find_program(XVFB_RUN xvfb-run)
if(TARGET shardlab-view AND XVFB_RUN)
  set(VIEWER_OUT ${CMAKE_BINARY_DIR}/test-viewer)
  add_test(NAME "viewer: a screenshot of a chapter trace under Xvfb is produced and shows the lane colours"
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/check_screenshot.py $<TARGET_FILE:shardlab-view>
                   ${PROJECT_SOURCE_DIR}/traces/03_bucketed_ddp ${VIEWER_OUT}/03_bucketed_ddp.png)
  file(WRITE ${VIEWER_OUT}/malformed.json "{\"traceEvents\": [{\"ph\": \"X\", \"name\": \"truncated\", \"ts\": ")
  add_test(NAME "viewer: a malformed file with --screenshot exits non-zero with a message"
           COMMAND ${EXPECT_EXIT} 1 "shardlab-view: .*malformed\\.json" -- ${XVFB_RUN} -a $<TARGET_FILE:shardlab-view>
                   ${VIEWER_OUT}/malformed.json --screenshot ${VIEWER_OUT}/malformed.png)
  # A failed run (a rank threw in step 3 of 5) opens, and the window says it is incomplete.
  add_test(NAME "viewer: a failed run opens and says it is incomplete"
           COMMAND sh -c "rm -rf '${VIEWER_OUT}/failed'; ${MPIRUN_SH} -np 2 $<TARGET_FILE:fail_one_rank> --steps 5 --failing-step 3 --trace-dir '${VIEWER_OUT}' --run-name failed > /dev/null 2>&1; ${XVFB_RUN} -a $<TARGET_FILE:shardlab-view> '${VIEWER_OUT}/failed' --state-out '${VIEWER_OUT}/failed.json' && ${Python3_EXECUTABLE} -c \"import json,sys; r=json.load(open(sys.argv[1]))['runs'][0]; print(r['incomplete']); sys.exit(0 if r['ranks'] == 2 and r['incomplete'].startswith('the run failed (rank 1: deliberate failure on rank 1): 2 of 2 rank files') else 1)\" '${VIEWER_OUT}/failed.json'")
  # xvfb-run -a can race for a display number when two start at once.
  set_tests_properties("viewer: a screenshot of a chapter trace under Xvfb is produced and shows the lane colours"
                       "viewer: a malformed file with --screenshot exits non-zero with a message"
                       "viewer: a failed run opens and says it is incomplete"
                       PROPERTIES TIMEOUT 120 RESOURCE_LOCK xvfb)

  # Each chapter README shows a viewer screenshot of its reference trace with the command that
  # made it: the command is rerun as written (into the build tree) and its picture checked.
  foreach(chapter 00_streams_events 01_ring_allreduce 02_naive_ddp 03_bucketed_ddp 04_fsdp 05_prefetch 06_rate_limit 07_hsdp
                  08_context_parallel)
    add_test(NAME "viewer: the README screenshot command of chapter ${chapter} works"
             COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/check_readme_screenshot.py $<TARGET_FILE:shardlab-view>
                     ${PROJECT_SOURCE_DIR}/chapters/${chapter}/README.md ${VIEWER_OUT}/readme/${chapter}.png)
    set_tests_properties("viewer: the README screenshot command of chapter ${chapter} works"
                         PROPERTIES TIMEOUT 120 RESOURCE_LOCK xvfb)
  endforeach()

  # Real input, replayed: scripts of synthetic events (--replay) through ImGui's GLFW backend,
  # the resulting view state (--state-out) checked against numbers (check_viewer_input.py).
  foreach(scenario_and_name
          "wheel|wheel up at a point zooms in keeping that time under the pointer, down zooms out"
          "drag|dragging the tracks pans by the dragged time"
          "keys|W/S zoom and A/D pan by the held time, Home fits everything"
          "select|a click selects the slice under the pointer and F fits it"
          "range|shift-drag selects a range whose Range panel totals match the trace files"
          "drop|dropping a run directory onto the empty window loads it"
          "bad_path|a bad path in the path field shows an error and the app keeps running"
          "cancel|a load runs in the background with a progress bar and Cancel stops it"
          "collective|a click on a collective lists it on every rank at the trace files' times and links the ranks, and names the FSDP unit it is for"
          "compare|--compare aligns the runs at a step and its table averages equal the summaries"
          "search_filter|search counts the matching slices and unticking a category hides its slices")
    string(REPLACE "|" ";" _parts "${scenario_and_name}")
    list(GET _parts 0 _scenario)
    list(GET _parts 1 _name)
    add_test(NAME "viewer: input replay: ${_name}"
             COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/check_viewer_input.py $<TARGET_FILE:shardlab-view>
                     ${PROJECT_SOURCE_DIR}/traces/03_bucketed_ddp ${PROJECT_SOURCE_DIR}/traces/02_naive_ddp
                     ${VIEWER_OUT}/input ${_scenario})
    set_tests_properties("viewer: input replay: ${_name}" PROPERTIES TIMEOUT 180 RESOURCE_LOCK xvfb)
  endforeach()
endif()

# Bytes per link tier (common/trace/metrics.h, tests/check_link_bytes.py): on h100-2x8 (two nodes
# of 8 GPUs) 4 ranks all sit on node 0, so every byte they send is intra-node; 16 span both
# nodes, so every byte of the world's collectives crosses the network. Each step's counts in
# summary.json must equal what the rank files' collective args give.
set(tiers "--profile h100-2x8 --model tiny --compute skip --steps 2 --global-batch 16")
set(check "${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/check_link_bytes.py")
add_test(NAME "ch04: on h100-2x8, 4 ranks send every byte intra-node and 16 over the network, as summary.json counts them"
         COMMAND sh -c "${MPIRUN_SH} -np 4 $<TARGET_FILE:shardlab_ch04> ${tiers} --trace-dir '${RUNS}' --run-name link_tiers_np4 > /dev/null && ${check} '${RUNS}/link_tiers_np4' --tier intra-node && ${MPIRUN_SH} -np 16 $<TARGET_FILE:shardlab_ch04> ${tiers} --trace-dir '${RUNS}' --run-name link_tiers_np16 > /dev/null && ${check} '${RUNS}/link_tiers_np16' --tier network")
set_tests_properties("ch04: on h100-2x8, 4 ranks send every byte intra-node and 16 over the network, as summary.json counts them"
                     PROPERTIES TIMEOUT 300 PROCESSORS 2)
