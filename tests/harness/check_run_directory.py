#!/usr/bin/env python3
"""A run deletes nothing it did not write, and never mixes an earlier run's files into its own.

    python3 tests/harness/check_run_directory.py --mpirun "mpirun --oversubscribe" --bin build/chapters/shardlab_ch02

In a directory that holds a user's files (rankings.xlsx, rank_important.txt, a non-empty
rank_backup/), a 4-rank run, then a 3-rank run, then a 3-rank run killed by SIGKILL mid-run:
the user's files survive each, the 3-rank runs leave no file of the 4-rank run behind (the killed
one included: the directory is claimed before step 1), and run names that would leave the
trace directory ('.', '..', 'a/b') exit 2 before touching anything.
"""
import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time

USER_FILES = ["rankings.xlsx", "rank_important.txt", os.path.join("rank_backup", "rank0.json")]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mpirun", required=True)
    p.add_argument("--bin", required=True)
    a = p.parse_args()
    mpirun = shlex.split(a.mpirun)
    problems = []

    def run(np, *flags, expect=0):
        cmd = mpirun + ["-np", str(np), a.bin, "--steps", "1", *flags]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if r.returncode != expect:
            problems.append(f"{' '.join(cmd)}: exit {r.returncode}, expected {expect}\n{r.stdout}{r.stderr}")
        return r.stdout + r.stderr

    with tempfile.TemporaryDirectory() as tmp:
        run_dir = os.path.join(tmp, "r")
        os.makedirs(os.path.join(run_dir, "rank_backup"))
        for f in USER_FILES:
            with open(os.path.join(run_dir, f), "w") as out:
                out.write("the user's\n")

        def check_user_files(when):
            for f in USER_FILES:
                if not os.path.exists(os.path.join(run_dir, f)):
                    problems.append(f"{when}: the user's {f} was deleted")

        def rank_files():
            return sorted(f for f in os.listdir(run_dir) if f.startswith("rank") and f.endswith(".json"))

        run(4, "--trace-dir", tmp, "--run-name", "r")
        check_user_files("after the 4-rank run")
        if rank_files() != [f"rank{r}.json" for r in range(4)]:
            problems.append(f"after the 4-rank run: rank files {rank_files()}")

        run(3, "--trace-dir", tmp, "--run-name", "r")
        check_user_files("after the 3-rank run")
        if rank_files() != [f"rank{r}.json" for r in range(3)]:
            problems.append(f"after the 3-rank run: rank files {rank_files()} (rank3.json is the 4-rank run's)")

        # Put the 4-rank run back, then kill a 3-rank run once it has claimed the directory.
        run(4, "--trace-dir", tmp, "--run-name", "r")
        long_run = mpirun + ["-np", "3", a.bin, "--model", "gpt2-small", "--compute", "skip", "--steps", "100000",
                             "--trace-dir", tmp, "--run-name", "r"]
        proc = subprocess.Popen(long_run, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        manifest = os.path.join(run_dir, ".shardlab-run")
        deadline = time.time() + 60
        claimed = False
        while time.time() < deadline and not claimed:
            try:
                claimed = json.load(open(manifest)).get("world_size") == 3
            except (OSError, ValueError):
                pass
            time.sleep(0.1)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        if not claimed:
            problems.append("the killed run never claimed the directory within 60 s")
        check_user_files("after the killed run")
        if "rank3.json" in rank_files() or "summary.json" in os.listdir(run_dir):
            problems.append(f"after the killed 3-rank run: {sorted(os.listdir(run_dir))} still holds the 4-rank run's files")

        for name in (".", "..", "a/b"):
            out = run(2, "--trace-dir", run_dir, "--run-name", name, expect=2)
            if f"--run-name: got '{name}'" not in out:
                problems.append(f"--run-name {name}: the message does not name the flag and value:\n{out}")
        check_user_files("after the refused run names")

    for pr in problems:
        print("FAIL:", pr)
    print("run directory:", "ok" if not problems else f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
