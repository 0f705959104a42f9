# Chapter 01: the ring all-reduce.
shardlab_chapter_tests(ch01 shardlab_ch01 --max-bytes 65536)
shardlab_readme_test(ch01 shardlab_ch01 01_ring_allreduce)
shardlab_reference_trace_test(ch01 shardlab_ch01 01_ring_allreduce 4 --min-bytes 1024 --max-bytes 4194304)
shardlab_flag_fuzz_test(01)
# The ring itself (mpi_test_ring.cpp) against MPI's all-reduce: world sizes 1 to 8 (3, 5 and 7
# find uneven chunks); its timing at 8 ranks, and at 4 on PCIe.
shardlab_mpi_test(shardlab_ch01_mpi_tests "ch01: the ring (MPI test)" ring 1 2 3 4 5 6 7 8)
add_test(NAME "ch01: the ring's timing at 8 ranks, 256 MiB (MPI test)"
         COMMAND ${MPIRUN} -np 8 $<TARGET_FILE:shardlab_ch01_mpi_tests> "[ring8]" --warn NoTests)
set_tests_properties("ch01: the ring's timing at 8 ranks, 256 MiB (MPI test)" PROPERTIES TIMEOUT 240 PROCESSORS 2)
add_test(NAME "ch01: the ring's timing at 4 ranks on pcie-4, 256 MiB (MPI test)"
         COMMAND ${MPIRUN} -np 4 $<TARGET_FILE:shardlab_ch01_mpi_tests> "[ring4]" --warn NoTests)
set_tests_properties("ch01: the ring's timing at 4 ranks on pcie-4, 256 MiB (MPI test)" PROPERTIES TIMEOUT 240 PROCESSORS 2)
