#!/usr/bin/env python3
"""CI's check of lab mode: student trees build with warnings as errors and fail exactly the
tests of the exercises they leave to do, with the stub's message; bug hunts fail their test and
their tool reports them.

    python3 tests/labs/check_labs.py WORK_DIR [--jobs 2]

One student tree, one build, rewritten in place round after round (make-lab rewrites only the
files that change, so each round recompiles only the chapter files it touches):

- Round k stubs, in every chapter of tests/labs/labs.json, its exercises from the k-th on (round
  1: all of them, the tree students get). Grading it must fail exactly the tests of the stubbed
  exercises, each with a stub's message, and every test of the k-th exercise must name it (it is
  the first a run reaches); every other test of the chapter passes.
- Then each bug hunt: grading its chapter fails the test labs.json names, with no stub message,
  and its tool reports the bug.

Prints what it checked and exits 1 naming every problem.
"""
import argparse
import importlib.machinery
import importlib.util
import json
import re
import subprocess
import sys
import time
from pathlib import Path

LABS = Path(__file__).resolve().parent
MANIFEST = json.loads((LABS / "labs.json").read_text())

def load_grade():
    """tests/labs/grade as a module (its mpirun command line)."""
    loader = importlib.machinery.SourceFileLoader("grade", str(LABS / "grade"))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader("grade", loader))
    loader.exec_module(module)
    return module


grade = load_grade()


def run(command, **kwargs):
    return subprocess.run([str(c) for c in command], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kwargs)


class Checker:
    def __init__(self, work, jobs):
        self.tree, self.build, self.jobs = work / "tree", work / "build", jobs
        self.problems = []

    def problem(self, text):
        print("  PROBLEM:", text)
        self.problems.append(text)

    def write_tree(self, make_lab_args):
        started = time.monotonic()
        made = run([LABS / "make-lab", self.tree, *make_lab_args])
        if made.returncode != 0:
            raise SystemExit(f"check_labs: make-lab {' '.join(make_lab_args)} failed:\n{made.stdout}")
        if not (self.build / "CMakeCache.txt").is_file():
            configure = run(["cmake", "-S", self.tree, "-B", self.build, "-DCMAKE_BUILD_TYPE=Release", "-DSHARDLAB_CUDA=OFF",
                             "-DSHARDLAB_VIEWER=OFF", "-DSHARDLAB_WERROR=ON"])
            if configure.returncode != 0:
                raise SystemExit(f"check_labs: configuring the student tree failed:\n{configure.stdout[-3000:]}")
        targets = sorted({t for spec in MANIFEST["chapters"].values() for t in spec["targets"]})
        built = run(["cmake", "--build", self.build, "-j", self.jobs, "--target", *targets])
        print(f"  make-lab {' '.join(make_lab_args)}: built {', '.join(targets)} with -Werror in {time.monotonic() - started:.0f} s")
        if built.returncode != 0:
            self.problem(f"the tree of make-lab {' '.join(make_lab_args)} does not build:\n{built.stdout[-4000:]}")
            return False
        return True

    def grade(self, chapters):
        started = time.monotonic()
        report_file = self.build / "lab-grade.json"
        graded = run([LABS / "grade", "--chapter", ",".join(chapters), "--build", self.build, "--json", report_file, "-j", self.jobs])
        print(f"  grade --chapter {','.join(chapters)} ({time.monotonic() - started:.0f} s):")
        print("    " + graded.stdout.rstrip().replace("\n", "\n    "))
        if graded.returncode not in (0, 1):
            raise SystemExit(f"check_labs: grade failed to run:\n{graded.stdout}")
        return json.loads(report_file.read_text())

    def check_round(self, stubbed):
        """stubbed: {chapter: the exercises stubbed in it, in the order a run reaches them}."""
        exercises = [e for chapter_exercises in stubbed.values() for e in chapter_exercises]
        print(f"round: {', '.join(exercises)} left to do")
        if not self.write_tree(["--exercises", ",".join(exercises)]):
            return
        reports = self.grade(sorted(stubbed))
        for chapter, chapter_exercises in stubbed.items():
            report = reports[chapter]
            entries = {**report["exercises"], "other": report["other"]}
            failures = {f["test"]: f for entry in entries.values() for f in entry["failures"]}
            expected = {t for e in chapter_exercises for t in entries[e]["tests"]}
            for test in sorted(expected - set(failures)):
                self.problem(f"chapter {chapter}: '{test}' passes with {', '.join(chapter_exercises)} left to do")
            for test in sorted(set(failures) - expected):
                self.problem(f"chapter {chapter}: '{test}' belongs to no stubbed exercise and fails: {failures[test]['message']}")
            for test, failure in sorted(failures.items()):
                if not failure["exercises"] or not set(failure["exercises"]) <= set(chapter_exercises):
                    self.problem(f"chapter {chapter}: '{test}' fails without a stub's message: {failure['message']}")
            first = chapter_exercises[0]
            for test in entries[first]["tests"]:
                if test in failures and failures[test]["exercises"] != [first]:
                    self.problem(f"chapter {chapter}: '{test}' does not name {first}: {failures[test]['message']}")
            if not entries[first]["tests"]:
                self.problem(f"chapter {chapter}: exercise {first} has no test in this build")

    def check_bug(self, name, bug):
        print(f"bug hunt {name}")
        if not self.write_tree(["--bug", name]):
            return
        report = self.grade([bug["chapter"]])[bug["chapter"]]
        entries = list(report["exercises"].values()) + [report["other"]]
        failures = {f["test"]: f for entry in entries for f in entry["failures"]}
        if bug["fails"] not in failures:
            self.problem(f"bug {name}: '{bug['fails']}' passes")
        elif failures[bug["fails"]]["exercises"]:
            self.problem(f"bug {name}: '{bug['fails']}' fails with a stub's message")
        command = grade.mpirun(self.build) + ["-np", str(bug["ranks"]), self.build / "chapters" / bug["program"], *bug["args"],
                                              "--trace-dir", self.build / "lab-runs", "--run-name", name]
        try:
            tool = run(command, timeout=120)
        except subprocess.TimeoutExpired:
            self.problem(f"bug {name}: {bug['tool']} hangs (no end in 120 s)")
            return
        reported = re.search(bug["reports"], tool.stdout)
        print(f"  {bug['tool']}: exit {tool.returncode}, " + (f"reports: {reported[0]}" if reported else "reports nothing expected"))
        if tool.returncode == 0 or not reported:
            self.problem(f"bug {name}: {bug['tool']} does not report it (exit {tool.returncode}):\n{tool.stdout[-2000:]}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("work", type=Path, help="a directory for the student tree and its build (reused: builds are incremental)")
    parser.add_argument("--jobs", default="2")
    args = parser.parse_args()
    checker = Checker(args.work.resolve(), args.jobs)
    chapters = MANIFEST["chapters"]
    rounds = max(len(spec["exercises"]) for spec in chapters.values())
    for k in range(rounds):
        checker.check_round({c: list(spec["exercises"])[k:] for c, spec in chapters.items() if len(spec["exercises"]) > k})
    for name, bug in MANIFEST["bugs"].items():
        checker.check_bug(name, bug)
    print(f"check_labs: {len(checker.problems)} problem(s)" if checker.problems else "check_labs: every lab checks out")
    return 1 if checker.problems else 0


if __name__ == "__main__":
    sys.exit(main())
