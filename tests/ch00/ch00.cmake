# Chapter 00: streams and events.
shardlab_chapter_tests(ch00 shardlab_ch00 --steps 2)
shardlab_readme_test(ch00 shardlab_ch00 00_streams_events)
shardlab_reference_trace_test(ch00 shardlab_ch00 00_streams_events 2)
shardlab_flag_fuzz_test(00)
add_test(NAME "ch00: --race reports the missing wait, naming both ops, streams and buffer"
         COMMAND ${EXPECT_EXIT} 0 "race on 'in\\[0\\]'.*polynomial on stream 7 \\(compute\\) reads it, but Memcpy HtoD \\(Pinned -> Device\\) on stream 8 \\(copy\\) wrote it"
                 -- ${MPIRUN} -np 1 $<TARGET_FILE:shardlab_ch00> --race --steps 2 --trace-dir ${RUNS} --run-name ch00_race)
# On a GPU the race is real: case (c) may compute on inputs still in flight. The run must go on
# to the end and count the wrong results instead of stopping at the first.
add_test(NAME "ch00: --race on the GPU runs to the end and counts case (c)'s wrong results"
         COMMAND sh -c "out=$(${GPU_OR_SKIP} ${MPIRUN_SH} -np 1 $<TARGET_FILE:shardlab_ch00> --device cuda --race --steps 2 --trace-dir '${RUNS}' --run-name ch00_race_cuda); rc=$?; echo \"$out\"; [ $rc -eq 0 ] || exit $rc; echo \"$out\" | grep -q race_wrong_outputs")
set_tests_properties("ch00: --race on the GPU runs to the end and counts case (c)'s wrong results" PROPERTIES SKIP_RETURN_CODE 77)
# The lesson's three pipelines, from the run's figures: (b) overlaps the copies with compute (1.66x
# faster than one stream), and (d)'s late event costs time (33 us). A pipeline that serializes, or
# a "late event" that is not late, fails here (the README's figures test pins the exact numbers).
add_test(NAME "ch00: the overlapped pipeline beats one stream by 1.5x and the late event costs time"
         COMMAND sh -c "${MPIRUN_SH} -np 1 $<TARGET_FILE:shardlab_ch00> --steps 2 --trace-dir '${RUNS}' --run-name ch00_cases > /dev/null && ${Python3_EXECUTABLE} ${TESTS}/harness/check_figures.py '${RUNS}/ch00_cases/summary.json' 'overlap_speedup > 1.5' 'false_dependency_cost_us > 0.1 * b_overlapped_us'")
set_tests_properties("ch00: the overlapped pipeline beats one stream by 1.5x and the late event costs time" PROPERTIES TIMEOUT 120 LABELS quick)
