# Chapter 11: pipeline parallelism. The chapter checks itself against single-rank training: the
# stages' parameters put together, after M micro-batches a step through every stage.
shardlab_chapter_tests(ch11 shardlab_ch11)
# A schedule that deadlocks (a student's send order, the bug hunt's) ends at --collective-timeout:
# 20 s here, not the default 60, as a correct run takes a few seconds whole (under 8 s on a
# loaded CI machine).
set(_deadlock "--collective-timeout;20")
# Each schedule at P = 2-4 with M from 1 to 3P (M < P leaves 1F1B no steady state; M = 1 is one
# micro-batch crossing the stages alone); interleaving with M a multiple of P, V = 2 and 4.
foreach(schedule gpipe 1f1b zb-h1)
  foreach(case "2;1" "3;6" "4;3" "4;12")
    list(GET case 0 np)
    list(GET case 1 m)
    set(test "ch11: --schedule ${schedule}, ${np} stages, ${m} micro-batches a step, equals single-rank training")
    add_test(NAME "${test}" COMMAND ${MPIRUN} -np ${np} $<TARGET_FILE:shardlab_ch11> --schedule ${schedule} --micro-batches ${m} ${_deadlock} --trace-dir ${RUNS} --run-name ch11_${schedule}_np${np}_m${m})
    set_tests_properties("${test}" PROPERTIES TIMEOUT 300 PROCESSORS ${np})
  endforeach()
endforeach()
foreach(case "1;3;2" "2;2;2" "2;4;4" "3;6;2" "4;4;2" "4;12;2")
  list(GET case 0 np)
  list(GET case 1 m)
  list(GET case 2 v)
  set(test "ch11: --schedule interleaved, ${np} ranks x ${v} chunks, ${m} micro-batches a step, equals single-rank training")
  add_test(NAME "${test}" COMMAND ${MPIRUN} -np ${np} $<TARGET_FILE:shardlab_ch11> --schedule interleaved --virtual-stages ${v} --micro-batches ${m} ${_deadlock} --trace-dir ${RUNS} --run-name ch11_interleaved_np${np}_m${m}_v${v})
  set_tests_properties("${test}" PROPERTIES TIMEOUT 300 PROCESSORS ${np})
endforeach()
# Pipeline x data parallelism: D copies of the pipeline, their stages' gradients averaged (P = 1
# is plain DDP, every stage's output handed on in place).
foreach(case "4;2;gpipe;3" "4;2;1f1b;3" "6;2;interleaved;3" "3;3;1f1b;2" "6;3;1f1b;2" "6;2;zb-h1;3")
  list(GET case 0 np)
  list(GET case 1 dp)
  list(GET case 2 schedule)
  list(GET case 3 m)
  set(test "ch11: --dp ${dp} x --schedule ${schedule} over ${np} ranks equals single-rank training")
  add_test(NAME "${test}" COMMAND ${MPIRUN} -np ${np} $<TARGET_FILE:shardlab_ch11> --dp ${dp} --schedule ${schedule} --micro-batches ${m} ${_deadlock} --trace-dir ${RUNS} --run-name ch11_dp${dp}_${schedule}_np${np})
  set_tests_properties("${test}" PROPERTIES TIMEOUT 300 PROCESSORS ${np})
endforeach()
# The optimizer sharded over the replicas (ZeRO-1): 2 and 3 replicas, each schedule but GPipe's.
foreach(case "4;2;1f1b;3" "6;3;zb-h1;2" "6;2;interleaved;3" "3;3;1f1b;2")
  list(GET case 0 np)
  list(GET case 1 dp)
  list(GET case 2 schedule)
  list(GET case 3 m)
  set(test "ch11: --dp ${dp} --shard-optimizer x --schedule ${schedule} over ${np} ranks equals single-rank training")
  add_test(NAME "${test}" COMMAND ${MPIRUN} -np ${np} $<TARGET_FILE:shardlab_ch11> --dp ${dp} --shard-optimizer --schedule ${schedule} --micro-batches ${m} ${_deadlock} --trace-dir ${RUNS} --run-name ch11_shard_dp${dp}_${schedule}_np${np})
  set_tests_properties("${test}" PROPERTIES TIMEOUT 300 PROCESSORS ${np})
endforeach()
add_test(NAME "ch11: --shard-optimizer without replicas exits 2 naming the flag"
         COMMAND ${EXPECT_EXIT} 2 "--shard-optimizer: got 'true'; allowed: only with --dp 2 or more \\(the replicas to shard over\\)" --not "step 1/"
                 -- ${MPIRUN} -np 2 $<TARGET_FILE:shardlab_ch11> --shard-optimizer)
set_tests_properties("ch11: --shard-optimizer without replicas exits 2 naming the flag" PROPERTIES PROCESSORS 2)
add_test(NAME "ch11: --dp that does not divide the world exits 2 naming the flag"
         COMMAND ${EXPECT_EXIT} 2 "--dp: got '3'; allowed: a divisor of the 4 ranks \\(the world is D x P\\)" --not "step 1/"
                 -- ${MPIRUN} -np 4 $<TARGET_FILE:shardlab_ch11> --dp 3)
set_tests_properties("ch11: --dp that does not divide the world exits 2 naming the flag" PROPERTIES PROCESSORS 4)
add_test(NAME "ch11: --micro-batches that does not divide a replica's share exits 2 naming the flag"
         COMMAND ${EXPECT_EXIT} 2 "--micro-batches: got '4'; allowed: a divisor of a replica's 6 sequences \\(the global batch 12 over --dp 2\\)" --not "step 1/"
                 -- ${MPIRUN} -np 4 $<TARGET_FILE:shardlab_ch11> --dp 2)
set_tests_properties("ch11: --micro-batches that does not divide a replica's share exits 2 naming the flag" PROPERTIES PROCESSORS 4)
add_test(NAME "ch11: more stages than the model has units exits 2 naming the model"
         COMMAND ${EXPECT_EXIT} 2 "--model: got 'tiny'; allowed: a model with at least as many units \\(4: embeddings, blocks, head\\) as stages \\(3 ranks x 2 chunks\\)" --not "step 1/"
                 -- ${MPIRUN} -np 3 $<TARGET_FILE:shardlab_ch11> --model tiny --schedule interleaved --micro-batches 3)
set_tests_properties("ch11: more stages than the model has units exits 2 naming the model" PROPERTIES PROCESSORS 3)
add_test(NAME "ch11: --virtual-stages without interleaving exits 2 naming the flag"
         COMMAND ${EXPECT_EXIT} 2 "--virtual-stages: got '2'; allowed: 1 \\(or 0\\) unless --schedule interleaved" --not "step 1/"
                 -- ${MPIRUN} -np 2 $<TARGET_FILE:shardlab_ch11> --virtual-stages 2)
set_tests_properties("ch11: --virtual-stages without interleaving exits 2 naming the flag" PROPERTIES PROCESSORS 2)
add_test(NAME "ch11: interleaving with micro-batches not a multiple of the ranks exits 2 naming the flag"
         COMMAND ${EXPECT_EXIT} 2 "--micro-batches: got '6'; allowed: a multiple of the 4 pipeline ranks under --schedule interleaved" --not "step 1/"
                 -- ${MPIRUN} -np 4 $<TARGET_FILE:shardlab_ch11> --schedule interleaved --micro-batches 6)
set_tests_properties("ch11: interleaving with micro-batches not a multiple of the ranks exits 2 naming the flag" PROPERTIES PROCESSORS 4)
add_test(NAME "ch11: --micro-batches that does not divide the global batch exits 2 naming the flag"
         COMMAND ${EXPECT_EXIT} 2 "--micro-batches: got '5'; allowed: a divisor of the global batch 12" --not "step 1/"
                 -- ${MPIRUN} -np 2 $<TARGET_FILE:shardlab_ch11> --micro-batches 5)
set_tests_properties("ch11: --micro-batches that does not divide the global batch exits 2 naming the flag" PROPERTIES PROCESSORS 2)
shardlab_same_loss_test(11)
shardlab_one_step_test(11)
shardlab_flag_fuzz_test(11)
# The reference traces of the lesson's pictures: GPT-2 small timing on 4 ranks, 1F1B (the chapter's
# default schedule), GPipe and ZB-H1.
shardlab_reference_trace_gz_test(ch11 shardlab_ch11 11_pipeline_parallel 4 --model gpt2-small --global-batch 8 --seq-len 1024 --micro-batches 8 --compute skip --steps 2 --schedule 1f1b)
shardlab_reference_trace_gz_test(ch11_gpipe shardlab_ch11 11_gpipe 4 --model gpt2-small --global-batch 8 --seq-len 1024 --micro-batches 8 --compute skip --steps 2 --schedule gpipe)
shardlab_reference_trace_gz_test(ch11_zb shardlab_ch11 11_zb_h1 4 --model gpt2-small --global-batch 8 --seq-len 1024 --micro-batches 8 --compute skip --steps 2 --schedule zb-h1)
shardlab_readme_test(ch11 shardlab_ch11 11_pipeline_parallel)
set(test "ch11: HTA reads the reference traces: every pass named on every rank, a backward twice its forward")
add_test(NAME "${test}" COMMAND ${Python3_EXECUTABLE} ${TESTS}/ch11/check_hta.py ${PROJECT_SOURCE_DIR}/traces)
set_tests_properties("${test}" PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300)
# The lesson's claims on GPT-2 small (4 stages, 8 micro-batches, --compute skip), from the runs'
# figures: GPipe and 1F1B take the same step; rank 0 keeps 8 micro-batches' activations under
# GPipe, 4 under 1F1B, and the allocator sees the same working tensors above both; balanced by
# FLOPs the bubble is within 0.02 of (P - 1) / (M + P - 1), cut evenly it is far above it.
set(_small "--model gpt2-small --global-batch 8 --seq-len 1024 --micro-batches 8 --compute skip --steps 2")
set(_runs "")
foreach(run "gpipe;--schedule gpipe" "1f1b;--schedule 1f1b" "even;--split even")
  list(GET run 0 name)
  list(GET run 1 flags)
  string(APPEND _runs "${MPIRUN_SH} -np 4 $<TARGET_FILE:shardlab_ch11> ${_small} ${flags} --trace-dir '${RUNS}' --run-name ch11_claims_${name} > /dev/null && ")
endforeach()
set(test "ch11: GPipe and 1F1B take the same step, keep M and P micro-batches' activations as measured, and balanced stages meet the bubble formula")
add_test(NAME "${test}"
         COMMAND sh -c "${_runs}${Python3_EXECUTABLE} ${TESTS}/harness/check_figures.py '${RUNS}/ch11_claims_1f1b/summary.json' --as gpipe '${RUNS}/ch11_claims_gpipe/summary.json' --as even '${RUNS}/ch11_claims_even/summary.json' 'abs(step_ms / gpipe_step_ms - 1) < 0.001' 'abs(gpipe_activations_schedule_MiB / activations_schedule_MiB - 2) < 1e-9' 'abs((activations_MiB - activations_schedule_MiB) - (gpipe_activations_MiB - gpipe_activations_schedule_MiB)) < 0.01' '0 < activations_MiB - activations_schedule_MiB < 0.1 * activations_schedule_MiB' '0 < bubble_mean - bubble_formula < 0.02' 'even_bubble_mean > 1.5 * even_bubble_formula'")
set_tests_properties("${test}" PROPERTIES TIMEOUT 300 PROCESSORS 4)
# ZB-H1 against 1F1B on the same runs' shape: the step shorter, the bubble within 0.02 of
# (P - 1)(T_F + T_B - T_W) / (M (T_F + T_B + T_W) + (P - 1)(T_F + T_B - T_W)) from its own
# measured passes, B + W within 2 % of 1F1B's backward (the same kernels, and the copies of the
# residual stream's gradient W keeps), rank 0 keeping the same micro-batches by the schedule,
# and the largest peak over the ranks still rank 0's, a few MiB above 1F1B's.
set(_runs "")
foreach(schedule 1f1b zb-h1)
  string(APPEND _runs "${MPIRUN_SH} -np 4 $<TARGET_FILE:shardlab_ch11> ${_small} --schedule ${schedule} --trace-dir '${RUNS}' --run-name ch11_zb_${schedule} > /dev/null && ")
endforeach()
set(test "ch11: ZB-H1 shortens 1F1B's step, its bubble meets its formula, and B + W is 1F1B's backward")
add_test(NAME "${test}"
         COMMAND sh -c "${_runs}${Python3_EXECUTABLE} ${TESTS}/harness/check_figures.py '${RUNS}/ch11_zb_zb-h1/summary.json' --as f1b '${RUNS}/ch11_zb_1f1b/summary.json' 'step_ms < 0.9 * f1b_step_ms' '0 < bubble_mean - bubble_formula < 0.02' 'bubble_mean < 0.7 * f1b_bubble_mean' 'abs((pass_B_ms + pass_W_ms) / f1b_pass_B_ms - 1) < 0.02' 'abs(pass_F_ms / f1b_pass_F_ms - 1) < 1e-6' 'activations_schedule_MiB == f1b_activations_schedule_MiB' 'peak_allocated_max_MiB == peak_allocated_MiB' '0 < peak_allocated_max_MiB - f1b_peak_allocated_max_MiB < 10'")
set_tests_properties("${test}" PROPERTIES TIMEOUT 300 PROCESSORS 4)
# The optimizer sharded over 2 replicas of GPT-2 small's 4 stages against replicated: rank 0's
# AdamW state halved (to the padding), the largest peak over the ranks lower by what rank 0
# no longer holds (to the allocator's rounding: a large block takes whole 2 MiB pages, up to 2
# MiB more each for m and v), and the step no longer (the reduce-scatters move half an all-reduce's bytes,
# and each replica updates half the parameters).
set(_runs "")
foreach(run "replicated;" "sharded;--shard-optimizer")
  list(GET run 0 name)
  list(GET run 1 flags)
  string(APPEND _runs "${MPIRUN_SH} -np 8 $<TARGET_FILE:shardlab_ch11> --dp 2 --model gpt2-small --global-batch 16 --seq-len 1024 --micro-batches 8 --compute skip --steps 2 ${flags} --trace-dir '${RUNS}' --run-name ch11_zero_${name} > /dev/null && ")
endforeach()
set(test "ch11: --shard-optimizer halves rank 0's AdamW state, lowers the largest peak by as much, and keeps the step")
add_test(NAME "${test}"
         COMMAND sh -c "${_runs}${Python3_EXECUTABLE} ${TESTS}/harness/check_figures.py '${RUNS}/ch11_zero_sharded/summary.json' --as rep '${RUNS}/ch11_zero_replicated/summary.json' 'abs(adam_state_MiB / rep_adam_state_MiB - 0.5) < 1e-4' 'abs((rep_peak_allocated_MiB - peak_allocated_MiB) - (rep_adam_state_MiB - adam_state_MiB)) < 4' 'peak_allocated_max_MiB == peak_allocated_MiB' 'step_ms <= rep_step_ms'")
set_tests_properties("${test}" PROPERTIES TIMEOUT 300 PROCESSORS 8)
# On the GPU (skipped without one): ZB-H1's split backward and the sharded optimizer's
# reduce-scatters and in-place all-gathers on CUDA and NCCL-shaped streams, each checking itself
# against single-rank training.
foreach(case "2;zb-h1;--schedule zb-h1" "4;shard;--dp 2 --shard-optimizer --micro-batches 3")
  list(GET case 0 np)
  list(GET case 1 name)
  list(GET case 2 flags)
  separate_arguments(flags)
  set(test "ch11: on the GPU at world ${np} (--comm mpi), ${name} equals single-rank training")
  set(run ${RUNS}/ch11_cuda_${name})
  string(JOIN " " flags_sh ${flags})
  add_test(NAME "${test}"
           COMMAND sh -c "rm -rf '${run}' && ${GPU_OR_SKIP} ${MPIRUN_SH} -np ${np} $<TARGET_FILE:shardlab_ch11> ${flags_sh} --device cuda --comm mpi --trace-dir '${RUNS}' --run-name ch11_cuda_${name} && ${VALIDATE_SH} '${run}' --ranks ${np}")
  set_tests_properties("${test}" PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300 PROCESSORS ${np})
endforeach()
