#!/usr/bin/env python3
"""Start-up benchmark: the wall time of a whole chapter run at many ranks against one rank.

A --compute skip run simulates its steps in milliseconds, so its wall time is start-up: MPI
launching the processes, each loading its libraries and building the model, and writing the
traces. On a laptop the ranks share a few cores, so whatever each rank does alone is paid
once per rank. This prints the median of several runs of each command and the ratios the
runtime is held to (8 ranks within 2x of 1 rank; 16 ranks on h100-2x8 within 3x).

    python3 tests/benchmarks/bench_startup.py [--build build] [--repeats 5]
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

SHAPE = ["--model", "gpt2-small", "--seq-len", "1024", "--compute", "skip", "--steps", "1"]
CASES = [  # (label, ranks, profile): each pair is compared with its one-rank run
    ("h100-8", 8, "h100-8"),
    ("h100-2x8", 16, "h100-2x8"),
]
TARGETS = {"h100-8": 2.0, "h100-2x8": 3.0}


def mpirun():
    cmd = [shutil.which("mpirun") or "mpirun"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    return cmd + ["--oversubscribe"]


def time_run(binary, ranks, profile, global_batch, trace_dir, repeats):
    cmd = mpirun() + ["-np", str(ranks), binary] + SHAPE + [
        "--global-batch", str(global_batch), "--profile", profile, "--trace-dir", trace_dir]
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return statistics.median(times), min(times), max(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--chapter", default="04", help="chapter number (default 04, FSDP)")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    binary = os.path.join(args.build, "chapters", f"shardlab_ch{args.chapter}")
    if not os.path.exists(binary):
        sys.exit(f"bench_startup: {binary} not found: build first (cmake --build --preset default)")
    print(f"shardlab_ch{args.chapter} {' '.join(SHAPE)}, median of {args.repeats} runs "
          f"(min-max), {os.cpu_count()} cores")
    missed = []
    with tempfile.TemporaryDirectory() as trace_dir:
        for label, ranks, profile in CASES:
            one = time_run(binary, 1, profile, ranks, trace_dir, args.repeats)
            many = time_run(binary, ranks, profile, ranks, trace_dir, args.repeats)
            ratio = many[0] / one[0]
            print(f"  {profile:9s}  1 rank  {one[0]:.2f} s ({one[1]:.2f}-{one[2]:.2f})   "
                  f"{ranks:2d} ranks  {many[0]:.2f} s ({many[1]:.2f}-{many[2]:.2f})   "
                  f"ratio {ratio:.2f}x (target within {TARGETS[label]:.0f}x)")
            if ratio > TARGETS[label]:
                missed.append(label)
    print("targets met" if not missed else f"targets missed: {', '.join(missed)}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
