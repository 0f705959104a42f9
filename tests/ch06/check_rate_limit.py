#!/usr/bin/env python3
"""Checks chapter 06's rate limiter on the timeline it writes.

    python3 tests/ch06/check_rate_limit.py RUN_DIR (--limited | --unlimited) [--inflight N]

In forward, block k's parameters are freed (post-forward) after its kernels are issued, and
before each all-gather the limiter makes the CPU wait for the oldest free event once N of them
are queued (N = --inflight, 2 in PyTorch). So when the all-gather of block k is issued, at most N
of the blocks freed before it may still be running on the GPU: their memory is freed on the CPU
but still in use (record_stream holds it). (Not "block k waits for block k-2": the queue starts a
step with the frees left from the end of backward, the first block's and the root's, and is
drained one event per all-gather, so after step 1 it lags one unit: PyTorch's rule, and PR
#86165's "dequeue one".) On every rank file and step this takes, for each all-gather issued in
a `forward block k` scope, the blocks j < k whose forward kernels end after that moment, and
checks:

  --limited    never more than N;
  --unlimited  more than N at least once (the CPU ran ahead; otherwise the run shows nothing
               the limiter could change).

Prints what it found; exits 1 on a problem.
"""
import argparse
import glob
import json
import os
import sys


def inside(e, scope):
    return scope["ts"] <= e["ts"] and e["ts"] + e["dur"] <= scope["ts"] + scope["dur"] + 1e-6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir")
    ap.add_argument("--inflight", type=int, default=2)
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--limited", action="store_true")
    mode.add_argument("--unlimited", action="store_true")
    args = ap.parse_args()
    files = sorted(glob.glob(os.path.join(args.run_dir, "rank*.json")))
    problems = [f"{args.run_dir}: no rank files"] if not files else []
    checked = ahead = most = 0
    for path in files:
        with open(path) as f:
            events = json.load(f)["traceEvents"]
        cpu = sorted((e for e in events if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "cuda_runtime", "user_annotation")),
                     key=lambda e: (e["ts"], -e["dur"]))
        kernel_end = {e["args"]["correlation"]: e["ts"] + e["dur"] for e in events
                      if e.get("ph") == "X" and e.get("cat") == "kernel" and "correlation" in e.get("args", {})}
        for step in (e for e in cpu if e["name"].startswith("ProfilerStep#")):
            blocks = {}
            for scope in (e for e in cpu if e["name"].startswith("forward block ") and inside(e, step)):
                k = int(scope["name"].split()[-1])
                calls = [e for e in cpu if inside(e, scope) and e is not scope]
                gathers = [c for c in calls if c["name"] == "ncclAllGather"]
                launches = [kernel_end[c["args"]["correlation"]] for c in calls
                            if c["name"] == "cudaLaunchKernel" and c["args"].get("correlation") in kernel_end]
                blocks[k] = (gathers, max(launches) if launches else None)
            for k in sorted(blocks):
                gathers = blocks[k][0]
                where = f"{os.path.basename(path)} {step['name']} block {k}"
                if len(gathers) != 1:
                    problems.append(f"{where}: {len(gathers)} all-gathers in its forward scope")
                    continue
                issued = gathers[0]["ts"]
                running = [j for j in blocks if j < k and blocks[j][1] is not None and blocks[j][1] > issued + 1e-3]
                checked += 1
                most = max(most, len(running))
                if len(running) > args.inflight:
                    ahead += 1
                    if args.limited:
                        problems.append(f"{where}: issued at {issued} us while blocks {running} still run")
    print(f"{args.run_dir}: {checked} forward all-gathers checked; at most {most} freed blocks still running at one, "
          f"{ahead} all-gather(s) with more than {args.inflight}")
    if args.unlimited and checked and ahead == 0:
        problems.append("without the limiter no all-gather ran ahead: nothing for the limiter to change")
    if not checked:
        problems.append("no forward all-gather found")
    for p in problems:
        print("check_rate_limit:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
