# Lab mode (tests/labs/README.md). The suite runs every chapter test on the solution; here the
# grader checks what the suite does not: the markers and labs.json agree, each exercise has tests
# and a README section, and the solution meets every performance target. Then student trees and
# bug hunts are built and graded in their own build (check_labs.py): both cores for about 6
# minutes on a quiet 2-core machine, half of it the students' tree's first build
# (`ctest -LE labs` leaves it out).
add_test(NAME "labs: the solution meets every lab's performance target, and each exercise has tests"
         COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/labs/grade --list --build ${CMAKE_BINARY_DIR})
set_tests_properties("labs: the solution meets every lab's performance target, and each exercise has tests" PROPERTIES TIMEOUT 120 PROCESSORS 2)
add_test(NAME "labs: student trees build with -Werror and fail exactly their exercises' tests, bug hunts their test, found by their tool"
         COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/labs/check_labs.py ${CMAKE_BINARY_DIR}/labs --jobs 2)
set_tests_properties("labs: student trees build with -Werror and fail exactly their exercises' tests, bug hunts their test, found by their tool"
                     PROPERTIES TIMEOUT 1500 PROCESSORS 2 LABELS labs)
