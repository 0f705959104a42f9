// lab_exercise.h: what a stubbed lab exercise calls in a student tree (tests/labs/README.md).
//
// tests/labs/make-lab copies this header to chapters/lab_exercise.h of the tree it writes and
// replaces each marked region of a chapter with a call to lab_exercise_missing. The call
// throws, so a run or a test that reaches the exercise fails at once with a message naming it
// and the README section that explains it; the chapter's job harness and Catch2 print the
// message, and tests/labs/grade finds it in the test's output. [[noreturn]] lets the stub
// stand for a body that returns a value. The solution tree never includes this header.
#pragma once

#include <stdexcept>
#include <string>

[[noreturn]] inline void lab_exercise_missing(const std::string& id, const std::string& readme_section) {
  throw std::logic_error("lab exercise " + id + " is not done yet: see " + readme_section);
}
