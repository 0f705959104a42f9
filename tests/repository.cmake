# The repository stands alone: no file in it cites a file outside the repository
# (tests/check_no_outside_refs.py says what it looks for).
add_test(NAME "repository: cites no file outside the repository"
         COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/check_no_outside_refs.py ${PROJECT_SOURCE_DIR})
