# Lab mode (tests/labs/README.md). The suite runs every chapter test on the solution; here the
# grader checks what the suite does not: the markers and labs.json agree, each exercise has tests
# and a README section, and the solution meets every performance target. Then student trees and
# bug hunts are built and graded in their own build (check_labs.py): 8 to 15 minutes on a quiet
# 2-core machine, 13 to 26 beside the other tests (the machines differ), a quarter of it the
# students' tree's first build (`ctest -LE labs` leaves it out).
# The solution grades 100%: the grading tests of every chapter (labs.json's `tests`) are this
# test's fixture setups, so ctest runs it only once every one of them has passed (a failed setup
# leaves it "Not Run", a failure); then `grade --list` checks the exercises' tests, their README
# sections and the performance targets. No test runs twice. The unit tests are discovered after
# the build, so a file ctest reads after their list marks theirs.
set(_solution "labs: the solution grades 100%: every grading test passed, every performance target met")
file(READ ${CMAKE_CURRENT_SOURCE_DIR}/labs/labs.json _labs)
string(JSON _chapters GET "${_labs}" chapters)
string(JSON _count LENGTH "${_chapters}")
math(EXPR _last "${_count} - 1")
get_property(_all_tests DIRECTORY PROPERTY TESTS)
string(JOIN " " _lists ${SHARDLAB_TEST_LISTS})
set(_unit_setups "foreach(_test IN LISTS ${_lists})\n")
foreach(_i RANGE ${_last})
  string(JSON _chapter MEMBER "${_chapters}" ${_i})
  string(JSON _regex GET "${_chapters}" ${_chapter} tests)
  foreach(_test IN LISTS _all_tests)
    if(_test MATCHES "${_regex}")
      set_property(TEST "${_test}" APPEND PROPERTY FIXTURES_SETUP lab_solution)
    endif()
  endforeach()
  string(APPEND _unit_setups "  if(_test MATCHES [=[${_regex}]=])\n    set_tests_properties(\"\${_test}\" PROPERTIES FIXTURES_SETUP lab_solution)\n  endif()\n")
endforeach()
string(APPEND _unit_setups "endforeach()\n")
file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/lab_solution_unit_tests.cmake "${_unit_setups}")
set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${CMAKE_CURRENT_BINARY_DIR}/lab_solution_unit_tests.cmake)
add_test(NAME "${_solution}" COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/labs/grade --list --build ${CMAKE_BINARY_DIR})
set_tests_properties("${_solution}" PROPERTIES TIMEOUT 120 PROCESSORS 2 FIXTURES_REQUIRED lab_solution)
# The instructor's checks: a student tree (make-lab) has neither them nor the files they read.
if(NOT EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/labs/check_labs.py)
  return()
endif()
# The longest test by far: it should start first, and the other tests fill the slots beside it.
# ctest starts the tests others wait for before the rest (then the costliest first: COST where it
# has no times of its own yet), so the solution's grade, which runs last anyway, waits for it too.
set(_check "labs: student trees build with -Werror and fail exactly their exercises' tests, bug hunts their test, found by their tool, submissions graded against the kit")
add_test(NAME "${_check}" COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/labs/check_labs.py ${CMAKE_BINARY_DIR}/labs --jobs 6)
set_tests_properties("${_check}" PROPERTIES TIMEOUT 2400 PROCESSORS 2 LABELS labs COST 100000)
set_tests_properties("${_solution}" PROPERTIES DEPENDS "${_check}")
# What grade tells a student of a failed test: Catch2's assertion with its values and the case,
# without colour codes; the race check's error rather than a line that mentions traces. And the
# points it gives, and its gradebook line.
add_test(NAME "labs: grade shows a failed assertion with its values and case without colour codes, counts points, names no exercise in a bug hunt"
         COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/labs/check_grade_messages.py --mpirun "${MPIRUN_SH}"
                 --bin $<TARGET_FILE:shardlab_mpi_tests>)
set_tests_properties("labs: grade shows a failed assertion with its values and case without colour codes, counts points, names no exercise in a bug hunt" PROPERTIES TIMEOUT 60 PROCESSORS 3)
