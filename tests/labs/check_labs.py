#!/usr/bin/env python3
"""CI's check of lab mode: student trees build with warnings as errors and fail exactly the
tests of the exercises they leave to do, with the stub's message; bug hunts fail their test and
their tool reports them.

    python3 tests/labs/check_labs.py WORK_DIR [--jobs 2]

One student tree, one build, rewritten in place round after round (make-lab rewrites only the
files that change, so each round recompiles only the chapter files it touches):

- Round 1 is the tree students get: every exercise of every chapter stubbed, and every build
  target of labs.json built with -Werror. Each stub replaces one function's statements and
  marks the names it needed used, so this build compiles every stub as any other tree would.
- A chapter is checked once the chapters it `needs` (labs.json: those whose lessons its runs go
  through, as chapter 05 runs chapter 04's FlatParam) are done. In its k-th round it has its
  exercises from the k-th on stubbed; only its targets are rebuilt and its tests graded. Its
  first round runs all its tests: they must fail exactly where an exercise's tests are listed,
  each with a stub's message, those of the first exercise naming it (a run reaches it first),
  and the chapter's other tests pass. Later rounds run its exercises' tests (the other tests
  reached no stub in the first round, so they reach none now): the stubbed exercises' tests
  fail with a stub's message, the k-th's naming it, and the tests of exercises done since pass.
- Then each bug hunt, on the solution with its patch: its test fails with no stub message, and
  its tool reports the bug (the run exits non-zero and prints what `reports` matches; for a bug
  that only the traces show, the run's `check` command on its trace directory does).
- Then a course's hand-in: make-lab writes a chapter 01 tree and its instructor's kit; the tree
  holds none of the instructor's files; a student who finished the ring but "fixed" the tests and
  the points in their tree submits (tests/labs/submit), and so does one who did nothing; the
  kit's grade --submission, in this check's tree and build (put back afterwards), takes a file
  the instructor added to the kit's tests/ into its grading copy, and gives the first full marks
  out of the kit's points and the second none.

Prints what it checked and exits 1 naming every problem.
"""
import argparse
import importlib.machinery
import importlib.util
import json
import os
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


# Open MPI's mpirun waits a second or two before it ends a job one of whose ranks exited with a
# failure (it gives the others time to die after SIGTERM). Every run of a stubbed tree fails,
# every rank printing its message first, so the check lets mpirun end them at once: outcomes
# are the same, the check shorter. Students' grading keeps Open MPI's default.
os.environ["OMPI_MCA_odls_base_sigkill_timeout"] = "0"


class Checker:
    def __init__(self, work, jobs):
        self.tree, self.build, self.jobs = work / "tree", work / "build", jobs
        self.problems = []

    def problem(self, text):
        print("  PROBLEM:", text)
        self.problems.append(text)

    def write_tree(self, make_lab_args, targets):
        started = time.monotonic()
        made = run([LABS / "make-lab", self.tree, "--no-kit", *make_lab_args])
        if made.returncode != 0:
            raise SystemExit(f"check_labs: make-lab {' '.join(make_lab_args)} failed:\n{made.stdout}")
        if not (self.build / "CMakeCache.txt").is_file():
            configure = run(["cmake", "-S", self.tree, "--preset", "lab", "-B", self.build, "-DSHARDLAB_WERROR=ON"])
            if configure.returncode != 0:
                raise SystemExit(f"check_labs: configuring the student tree failed:\n{configure.stdout[-3000:]}")
        try:  # grade's build: a work directory configured before the tree gained a target regenerates
            grade.build_targets(self.build, sorted(targets))
        except grade.BuildFailed as failed:
            self.problem(f"the tree of make-lab {' '.join(make_lab_args)} does not build: {failed}")
            return False
        print(f"  built with -Werror in {time.monotonic() - started:.0f} s")
        return True

    def grade(self, stubbed, first_round):
        """{chapter: grade's report} for the chapters of `stubbed`: all their tests in round one,
        afterwards only their exercises' tests; no performance target (the solution's are
        checked by `grade --list`)."""
        started, specs, reports = time.monotonic(), {}, {}
        for chapter in stubbed:
            specs[chapter] = dict(MANIFEST["chapters"][chapter], performance=[])
            if chapter not in first_round:
                patterns = {p for tests in specs[chapter]["exercises"].values() for p in tests}
                specs[chapter]["tests"] = "^(" + "|".join(sorted(p[1:] for p in patterns)) + ")"  # each starts with ^ (grade)
        # One ctest for the round: the chapters' tests share its slots, none waits for another chapter's last test.
        names = {chapter: grade.list_tests(self.build, spec["tests"]) for chapter, spec in specs.items()}
        results = grade.run_named_tests(self.build, set().union(*names.values()), self.jobs)
        for chapter, spec in specs.items():
            mine = {name: results[name] for name in names[chapter] if name in results}
            reports[chapter] = grade.grade_chapter(chapter, spec, self.build, self.jobs, run=True, results=mine)
            grade.print_report(chapter, reports[chapter], ran=True)
        print(f"  graded chapters {', '.join(stubbed)} in {time.monotonic() - started:.0f} s")
        return reports

    def check_round(self, tree, checked, first, build_all):
        """tree: every exercise stubbed in the tree; checked: {chapter: its exercises stubbed, in
        the order a run reaches them} for the chapters this round grades; first: those of them
        in their first round; build_all: build every chapter's targets (the students' tree),
        not only those of the chapters graded."""
        print(f"round: {', '.join(e for es in checked.values() for e in es)} left to do, chapters {', '.join(checked)} graded")
        built = MANIFEST["chapters"] if build_all else checked
        if not self.write_tree(["--exercises", ",".join(sorted(tree))], {t for c in built for t in MANIFEST["chapters"][c]["targets"]}):
            return
        reports = self.grade(checked, first)
        for chapter, chapter_exercises in checked.items():
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
        if not self.write_tree(["--bug", name], set(MANIFEST["chapters"][bug["chapter"]]["targets"])):
            return
        results = grade.run_tests(self.build, f"^{re.escape(bug['fails'])}$", self.jobs)
        status, output = results.get(bug["fails"], ("missing", ""))
        print(f"  '{bug['fails']}': {status}" + (f": {grade.failure_message(output)}" if status == "failed" else ""))
        if status != "failed":
            self.problem(f"bug {name}: '{bug['fails']}' is {status}, not failed")
        elif grade.STUB_MESSAGE.search(output):
            self.problem(f"bug {name}: '{bug['fails']}' fails with a stub's message")
        command = grade.mpirun(self.build) + ["-np", str(bug["ranks"]), self.build / "chapters" / bug["program"], *bug["args"],
                                              "--trace-dir", self.build / "lab-runs", "--run-name", name]
        try:
            tool = run(command, timeout=120)
        except subprocess.TimeoutExpired:
            self.problem(f"bug {name}: {bug['tool']} hangs (no end in 120 s)")
            return
        if "check" in bug:  # a bug the run's traces show, not the run itself: the check reads them
            run_dir = self.build / "lab-runs" / name
            tool = run([part.replace("{run}", str(run_dir)) for part in bug["check"]], cwd=self.tree)
        reported = re.search(bug["reports"], tool.stdout)
        print(f"  {bug['tool']}: exit {tool.returncode}, " + (f"reports: {reported[0]}" if reported else "reports nothing expected"))
        if tool.returncode == 0 or not reported:
            self.problem(f"bug {name}: {bug['tool']} does not report it (exit {tool.returncode}):\n{tool.stdout[-2000:]}")


    def check_submissions(self, work):
        print("hand-in: a chapter 01 lab, its kit, two submissions")
        lab, kit = work / "handin" / "student", work / "handin" / "kit"
        subprocess.run(["rm", "-rf", str(work / "handin")], check=True)
        made = run([LABS / "make-lab", lab, "--chapters", "01", "--kit", kit])
        if made.returncode != 0:
            return self.problem(f"make-lab --kit failed:\n{made.stdout}")
        for path in ("tests/labs/README.md", "tests/labs/labs.json", "tests/labs/grade", "tests/labs/submit"):
            if not (lab / path).is_file():
                self.problem(f"the student tree lacks {path}")
        for path in ("tests/labs/check_labs.py", "tests/labs/make-lab", "tests/labs/bugs"):
            if (lab / path).exists():
                self.problem(f"the student tree holds the instructor's {path}")
        if "bugs" in json.loads((lab / "tests/labs/labs.json").read_text()):
            self.problem("the student tree's labs.json holds the bug hunts")
        guide = (lab / "tests/labs/README.md").read_text()
        for exercise in MANIFEST["chapters"]["01"]["exercises"]:
            if MANIFEST["chapters"]["01"]["statements"][exercise]["contract"] not in guide:
                self.problem(f"the student's guide does not state {exercise}'s contract")
        if not (kit / ".kit.json").is_file() or not (kit / "tests/labs/bugs").is_dir():
            self.problem("the kit lacks its .kit.json or the bug patches")
        # The first student: the ring written (the solution's file), a test that checks nothing and
        # points of their own in their tree. The second submits the tree as make-lab wrote it.
        ring = "chapters/01_ring_allreduce/ring_allreduce.h"
        untouched = run([lab / "tests/labs/submit", "--name", "Bob Untouched", "--out", work / "handin" / "bob.tar.gz"], cwd=lab)
        (lab / ring).write_bytes((LABS.parents[1] / ring).read_bytes())
        (lab / "tests/ch01/mpi_test_ring.cpp").write_text('#include <catch2/catch.hpp>\nTEST_CASE("ring: ok", "[ring]") {}\n')
        labs_json = json.loads((lab / "tests/labs/labs.json").read_text())
        labs_json["chapters"]["01"]["points"] = {e: 100 for e in labs_json["chapters"]["01"]["points"]}
        (lab / "tests/labs/labs.json").write_text(json.dumps(labs_json))
        finished = run([lab / "tests/labs/submit", "--name", "Ada Finished", "--out", work / "handin" / "ada.tar.gz"], cwd=lab)
        for submitted in (untouched, finished):
            print("  " + submitted.stdout.strip())
            if submitted.returncode != 0:
                return self.problem(f"submit failed:\n{submitted.stdout}")
        # A hidden test the instructor adds to the kit, in a file of its own: the grading copy must
        # take it (here a file nothing builds, so the grades stay what they are).
        hidden = "tests/ch01/hidden_by_the_instructor.txt"
        (kit / hidden).write_text("a file the kit has and the student tree never had\n")
        started = time.monotonic()
        # The grading copy is this check's tree and build (a copy of its own would build common/
        # again): the kit's files and the submission's over the last round's, rebuilt where they
        # differ; then the tree is put back as make-lab wrote it.
        graded = run([kit / "tests/labs/grade", "--submission", work / "handin" / "ada.tar.gz", work / "handin" / "bob.tar.gz",
                      "--work", work, "--jobs", self.jobs])
        if not (self.tree / hidden).is_file():
            self.problem(f"grade --submission's grading copy lacks {hidden}, a file added to the kit's tests/")
        for restore in (["checkout", "--", "."], ["clean", "-fdq"]):
            subprocess.run(["git", "-C", str(self.tree), *restore], check=True)
        lines = graded.stdout.splitlines()
        book = lines[lines.index("grade: gradebook, one line per submission:") + 1:] if graded.returncode == 0 and \
            "grade: gradebook, one line per submission:" in lines else []
        print(f"  graded both in {time.monotonic() - started:.0f} s:")
        print("  " + "\n  ".join(book))
        worth = sum(MANIFEST["chapters"]["01"]["points"].values())
        points = MANIFEST["chapters"]["01"]["points"]
        want = [",".join(["Ada Finished"] + [f"{e}={p:g}" for e, p in points.items()] + [f"total={worth:g}/{worth:g}"]),
                ",".join(["Bob Untouched"] + [f"{e}=0" for e in points] + [f"total=0/{worth:g}"])]
        if book != want:
            self.problem(f"grade --submission's gradebook is {book}, not {want}:\n{graded.stdout[-3000:]}")


def schedule(chapters):
    """The rounds: (every exercise stubbed in the tree, {chapter: its exercises stubbed} for the
    chapters graded, the chapters in their first round). A chapter is graded once every chapter
    it needs is done; until then all its exercises stay stubbed, as in the students' tree."""
    done, started, rounds = set(), {}, []
    while len(done) < len(chapters):
        for c, spec in chapters.items():
            if c not in done and c not in started and set(spec.get("needs", [])) <= done:
                started[c] = len(rounds)
        if not started:
            raise SystemExit(f"check_labs: the chapters' needs in labs.json form a cycle: {', '.join(sorted(set(chapters) - done))}")
        checked = {c: list(chapters[c]["exercises"])[len(rounds) - k:] for c, k in started.items()}
        tree = {e for c, spec in chapters.items() if c not in done and c not in started for e in spec["exercises"]}
        tree |= {e for exercises in checked.values() for e in exercises}
        rounds.append((tree, checked, {c for c, k in started.items() if k == len(rounds)}))
        for c in [c for c, k in started.items() if len(rounds) - k == len(chapters[c]["exercises"])]:
            done.add(c)
            del started[c]
    return rounds


def main():
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("work", type=Path, help="a directory for the student tree and its build (reused: builds are incremental)")
    parser.add_argument("--jobs", default="2")
    args = parser.parse_args()
    checker = Checker(args.work.resolve(), args.jobs)
    for number, (tree, checked, first) in enumerate(schedule(MANIFEST["chapters"])):
        checker.check_round(tree, checked, first, build_all=number == 0)
    for name, bug in MANIFEST["bugs"].items():
        checker.check_bug(name, bug)
    checker.check_submissions(args.work.resolve())
    print(f"check_labs: {len(checker.problems)} problem(s)" if checker.problems else "check_labs: every lab checks out")
    return 1 if checker.problems else 0


if __name__ == "__main__":
    sys.exit(main())
