# The repository stands alone: no file in it cites a file outside the repository
# (tests/check_no_outside_refs.py says what it looks for).
add_test(NAME "repository: cites no file outside the repository"
         COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/check_no_outside_refs.py ${PROJECT_SOURCE_DIR})
# Every relative link in the Markdown files (chapters to the glossary, to sources, to pictures)
# leads to a file that exists and, with a #fragment, to a heading or anchor in it.
add_test(NAME "repository: every relative Markdown link leads to a file and anchor that exist"
         COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/check_links.py ${PROJECT_SOURCE_DIR})
# common/'s parts include only the parts above them in common/README.md's table, and no chapter
# includes a later chapter's header (tests/check_include_order.py).
add_test(NAME "repository: common/ includes in its README's order, no chapter includes a later one"
         COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/check_include_order.py ${PROJECT_SOURCE_DIR})
