# The repository's own rules: it stands alone, its links lead somewhere, its code includes in
# the order it claims, every number its READMEs and notebooks quote comes out of a run, and every
# Catch2 case is one ctest entry.
# The repository stands alone: no file in it cites a file outside the repository
# (tests/repository/check_no_outside_refs.py says what it looks for).
add_test(NAME "repository: cites no file outside the repository"
         COMMAND ${Python3_EXECUTABLE} ${TESTS}/repository/check_no_outside_refs.py ${PROJECT_SOURCE_DIR})
# Every relative link in the Markdown files (chapters to the glossary, to sources, to pictures)
# leads to a file that exists and, with a #fragment, to a heading or anchor in it; every code
# block closes on a fence of its own.
add_test(NAME "repository: every relative Markdown link leads to a file and anchor that exist, every code block closes"
         COMMAND ${Python3_EXECUTABLE} ${TESTS}/repository/check_links.py ${PROJECT_SOURCE_DIR})
# common/'s parts include only the parts above them in common/README.md's table, and no chapter
# includes a later chapter's header (tests/repository/check_include_order.py).
add_test(NAME "repository: common/ includes in its README's order, no chapter includes a later one"
         COMMAND ${Python3_EXECUTABLE} ${TESTS}/repository/check_include_order.py ${PROJECT_SOURCE_DIR})

# The top-level README has no run of its own: its numbers come from the commands it quotes
# (chapters and tests/fail_one_rank), or say why no run here can print them (benchmarks, the H200).
add_test(NAME "README: every number the top-level README quotes is printed by a run, derived or marked unchecked"
         COMMAND ${Python3_EXECUTABLE} ${TESTS}/repository/check_readme_figures.py --numbers ${PROJECT_SOURCE_DIR}/README.md
                 --mpirun "${MPIRUN_SH}" --bin $<TARGET_FILE_DIR:shardlab_ch02> --bin $<TARGET_FILE_DIR:fail_one_rank>)
set_tests_properties("README: every number the top-level README quotes is printed by a run, derived or marked unchecked"
                     PROPERTIES TIMEOUT 120 PROCESSORS 3)

# Notebooks are executed (Debian's jupyter-nbconvert). Each runs its chapter into the build tree.
find_program(JUPYTER jupyter)
function(shardlab_notebook_test notebook)
  if(NOT JUPYTER)
    return()
  endif()
  # Each notebook makes its runs afresh, in a directory of its own: a notebook reuses a run whose
  # summary.json exists, and a run left by an older build would be checked against today's code.
  # Two slots, not one per rank: its runs come one at a time and keep about 1.2 cores busy, and
  # declared last, the notebooks are the suite's tail, where with four slots each ran alone.
  get_filename_component(stem ${notebook} NAME_WE)
  set(runs ${RUNS}/notebooks/${stem})
  add_test(NAME "notebook: ${notebook} executes and its prose quotes what its cells print"
           COMMAND sh -c "rm -rf '${runs}' && SHARDLAB_BUILD='${CMAKE_BINARY_DIR}' SHARDLAB_RUNS='${runs}' SHARDLAB_FIGURES='${CMAKE_BINARY_DIR}/test-figures' ${JUPYTER} nbconvert --to notebook --execute '${PROJECT_SOURCE_DIR}/notebooks/${notebook}' --output-dir '${CMAKE_BINARY_DIR}/test-notebooks' && ${Python3_EXECUTABLE} '${TESTS}/repository/check_notebook_numbers.py' '${CMAKE_BINARY_DIR}/test-notebooks/${notebook}'")
  set_tests_properties("notebook: ${notebook} executes and its prose quotes what its cells print" PROPERTIES TIMEOUT 900 PROCESSORS 2)
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
shardlab_notebook_test(09_fsdp2.ipynb)
shardlab_notebook_test(10_tensor_parallel.ipynb)
shardlab_notebook_test(11_pipeline_parallel.ipynb)

# Every Catch2 case defined in the sources is run by exactly one ctest entry, and every entry runs
# one case (a name CMake or Catch2 reads differently would give entries that run nothing).
add_test(NAME "tests: every Catch2 case is one ctest entry that runs it"
         COMMAND ${Python3_EXECUTABLE} ${TESTS}/repository/check_catch_discovery.py ${CMAKE_BINARY_DIR}
                 ${SHARDLAB_CATCH_SUITES}
                 --suite shardlab_viewer_tests ${VIEWER_TEST_SOURCES})
