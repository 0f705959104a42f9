#!/usr/bin/env python3
"""Kills chapter runs at seeded random moments and checks that every trace file left behind opens.

    python3 tests/harness/check_killed_run.py --mpirun "mpirun --oversubscribe" --chapters build/chapters \\
        --viewer build/viewer/shardlab-view [--seed 1] [--cases 6] [--work DIR]

A rank's trace grows at every step's end (common/trace/trace.h), so whatever ends a run, each
rank that finished a step has a file holding its steps, perhaps cut inside its last event. Each
case starts a chapter (02, 05 or 08, picked by the seed) at a world of 2, 3 or 4 ranks (in turn),
waits until rank 0's trace exists, sleeps a seeded 0-1.5 s and ends the run in one of four ways:

  kill -9 of one rank       mpirun then ends the others (SIGTERM, then SIGKILL a second later)
  kill -9 of every rank     a node lost, or mpirun itself killed: nobody writes anything more
  SIGTERM to mpirun         a scheduler's cancel; mpirun passes it on to the ranks
  SIGINT to mpirun          Ctrl-C

Then, in the run's directory: every rank file opens in the viewer (shardlab-view --check: no file
"not opened") and passes tests/tools/validate_trace.py --expect-incomplete (read up to its last whole
event where it is cut), and no rank process is left running. What each case left is printed: the
kill, when, which files, which were cut short. Exits 1 if a case fails.
The moments are seeded, but a kill lands where the run happens to be on this machine: the cases
are the same kills each time, not the same bytes.
"""
import argparse
import glob
import os
import random
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CHAPTERS = ["02", "05", "08"]
KILLS = ["kill -9 of one rank", "kill -9 of every rank", "SIGTERM to mpirun", "SIGINT to mpirun"]


def rank_pids(run_name):
    """The pids of the rank processes of this run: a chapter binary whose arguments name it
    (mpirun's own command line names it too, and is left out)."""
    out = subprocess.run(["pgrep", "-a", "-f", "--", f"--run-name {run_name}( |$)"], capture_output=True, text=True).stdout
    pids = []
    for line in out.splitlines():
        pid, _, command = line.partition(" ")
        if os.path.basename(command.split(" ")[0]).startswith("shardlab_ch"):
            pids.append(int(pid))
    return pids


def run_case(i, rng, a, work):
    world = 2 + i % 3
    chapter = rng.choice(CHAPTERS)
    kill = KILLS[i % len(KILLS)] if i < len(KILLS) else rng.choice(KILLS)
    delay = round(rng.uniform(0, 1.5), 2)
    name = f"killed{i}_{os.getpid()}"
    binary = os.path.join(a.chapters, f"shardlab_ch{chapter}")
    cmd = shlex.split(a.mpirun) + ["-np", str(world), binary, "--steps", "100000", "--trace-dir", work,
                                   "--run-name", name]
    run_dir = os.path.join(work, name)
    problems = []
    log = open(os.path.join(work, name + ".log"), "w")
    mpirun = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.time() + 60
    while not os.path.exists(os.path.join(run_dir, "rank0.json")) and mpirun.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    if mpirun.poll() is not None:
        return [f"case {i}: the run ended by itself before the kill (exit {mpirun.returncode}); see {log.name}"]
    time.sleep(delay)
    pids = rank_pids(name)
    if kill == "kill -9 of one rank":
        victim = rng.choice(pids) if pids else None
        if victim:
            os.kill(victim, signal.SIGKILL)
    elif kill == "kill -9 of every rank":
        for p in pids:
            os.kill(p, signal.SIGKILL)
    elif kill == "SIGTERM to mpirun":
        mpirun.send_signal(signal.SIGTERM)
    else:
        mpirun.send_signal(signal.SIGINT)
    try:
        mpirun.wait(timeout=60)
    except subprocess.TimeoutExpired:
        problems.append(f"case {i}: mpirun still running 60 s after the kill ({kill})")
        os.killpg(mpirun.pid, signal.SIGKILL)
        mpirun.wait()
    time.sleep(0.2)
    left = rank_pids(name)
    if left:
        problems.append(f"case {i}: rank processes left running after the job ended: {left}")
        for p in left:
            os.kill(p, signal.SIGKILL)

    files = sorted(os.path.basename(f) for f in glob.glob(os.path.join(run_dir, "*")))
    rank_files = [f for f in files if f.startswith("rank") and f.endswith(".json")]
    if not rank_files:
        problems.append(f"case {i}: no rank file in {run_dir}, though rank 0's existed before the kill")
    check = subprocess.run([a.viewer, "--check", run_dir], capture_output=True, text=True)
    if check.returncode != 0:
        problems.append(f"case {i}: the viewer did not open every file:\n{check.stdout}{check.stderr}")
    cut = check.stdout.count("read in part:")
    valid = subprocess.run([sys.executable, os.path.join(HERE, "..", "tools", "validate_trace.py"), run_dir, "--expect-incomplete"],
                           capture_output=True, text=True)
    if valid.returncode != 0:
        problems.append(f"case {i}: validate_trace.py --expect-incomplete:\n{valid.stdout}{valid.stderr}")
    print(f"case {i}: ch{chapter} at {world} ranks, {kill} {delay} s after rank 0's trace appeared: "
          f"exit {mpirun.returncode}; left {', '.join(files)}; {len(rank_files)} rank file(s) open, "
          f"{cut} cut short" + ("" if not problems else " -- FAILED"))
    return problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mpirun", required=True)
    ap.add_argument("--chapters", required=True, help="the directory of the chapter binaries")
    ap.add_argument("--viewer", required=True, help="shardlab-view")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cases", type=int, default=6)
    ap.add_argument("--work", help="keep the runs here (default: a temporary directory, removed)")
    a = ap.parse_args()
    work = a.work or tempfile.mkdtemp(prefix="shardlab_killed_")
    os.makedirs(work, exist_ok=True)
    rng = random.Random(a.seed)
    problems = []
    try:
        for i in range(a.cases):
            problems += run_case(i, rng, a, work)
    finally:
        if not a.work:
            shutil.rmtree(work, ignore_errors=True)
    for p in problems:
        print("check_killed_run:", p)
    print(f"check_killed_run: {a.cases} case(s), seed {a.seed}, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
