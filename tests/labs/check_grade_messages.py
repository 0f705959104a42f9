#!/usr/bin/env python3
"""Checks what grade tells a student of a failed test: Catch2's failed assertion with its values
and the case, never the colour codes Catch2 writes when Open MPI hands it a terminal; the race
check's error, not a line that merely contains "trace". And its points: each exercise its
points times the share of its tests that pass, a target its points when met, one gradebook line. And a bug hunt's report, which names no exercise.

    python3 tests/labs/check_grade_messages.py --mpirun "MPIRUN" --bin SHARDLAB_MPI_TESTS

It runs the MPI test binary's deliberately failing case ("[fails-on-rank-1]", rank 1's CHECK
fails) under mpirun, as ctest runs a grading test, and hands its output to grade's
failure_message, also spelt as ctest's JUnit file spells the escape character.
"""
import argparse
import contextlib
import io
import shlex
import subprocess
import sys

from check_labs import grade  # tests/labs/grade, as the labs check loads it


def main():
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--mpirun", required=True)
    parser.add_argument("--bin", required=True)
    args = parser.parse_args()
    run = subprocess.run([*shlex.split(args.mpirun), "-np", "3", args.bin, "[fails-on-rank-1]"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    problems = []
    if "FAILED:" not in run.stdout:
        problems.append(f"the failing case printed no Catch2 failure:\n{run.stdout[-2000:]}")
    junit = run.stdout.replace("\x1b", "[NON-XML-CHAR-0x1B]")
    for name, output in (("the output", run.stdout), ("the JUnit file's text", junit)):
        message = grade.failure_message(output)
        print(f"{name}: {message}")
        for want in ("mpi harness: a test case that fails on one rank ends the job", "mpi_test_collectives.cpp:",
                     "CHECK( world_rank() != 1 )", "with expansion: 1 != 1"):
            if want not in message:
                problems.append(f"{name}: the message lacks '{want}'")
        if "\x1b" in message or "NON-XML-CHAR" in message or "[0m" in message:
            problems.append(f"{name}: the message keeps colour codes")
    # A failed run whose lines mention traces: the line that says what went wrong is the race
    # check's, not a metrics row that happens to contain "trace".
    race = ("step_ms  12.000  traces written\n"
            "07_hsdp: error: the race check found 48 race(s) (listed above): a missing wait or a use after free\n")
    message = grade.failure_message(race)
    print(f"a race: {message}")
    if not message.startswith("07_hsdp: error: the race check found 48 race(s)"):
        problems.append(f"a race: the message is not the race check's error: {message}")
    # Points: 2 for an exercise with 3 of its 4 tests passing, 1 for a target met, 1 not met.
    report = {"exercises": {"04.unshard": {"passed": 3, "total": 4, "max_points": 2,
                                           "points": round(2 * 3 / 4, 2)}},
              "performance": [{"id": "04.fast", "points": 1, "max_points": 1},
                              {"id": "04.small", "points": 0, "max_points": 1}]}
    line = grade.gradebook_line("alice", {"04": report})
    print(f"gradebook: {line}")
    if grade.points(report) != (2.5, 4) or line != "alice,04.unshard=1.5,04.fast=1,04.small=0,total=2.5/4":
        problems.append(f"points {grade.points(report)}, gradebook line '{line}': expected (2.5, 4) and "
                        "'alice,04.unshard=1.5,04.fast=1,04.small=0,total=2.5/4'")
    # A bug hunt's report lists the chapter's failures without the exercise whose tests they are
    # (the bug is not in "07.mesh" because a mesh test fails), and the chapter's targets: a fix
    # that passes the tests can still miss one.
    failure = {"test": "ch07: mesh 2x2", "message": "07_hsdp: error: the race check found 48 race(s)", "exercises": []}
    hunt = {"exercises": {"07.mesh": {"label": "07.mesh the mesh", "tests": ["ch07: mesh 2x2", "ch07: runs"],
                                      "failures": [failure]}},
            "other": {"label": "other tests", "tests": [], "failures": []},
            "performance": [{"label": "07.exposed-comm exposed communication", "passed": False,
                             "message": "exposed_comm_ms 13.57 ms (target: under 10 ms)"}]}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        grade.print_hunt_report("07", hunt, "07.hunt")
    print(printed.getvalue(), end="")
    if "07.mesh" in printed.getvalue() or "FAILED ch07: mesh 2x2: 07_hsdp: error: the race check" not in printed.getvalue() \
            or "1/2 grading tests pass, 0/1 performance targets met" not in printed.getvalue() \
            or "NOT met 07.exposed-comm exposed communication: exposed_comm_ms 13.57 ms" not in printed.getvalue():
        problems.append("a bug hunt's report names an exercise, or misses its failure, its target or its counts")
    for p in problems:
        print("check_grade_messages:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
