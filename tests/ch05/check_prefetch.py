#!/usr/bin/env python3
"""Checks chapter 05's prefetching on the timeline it writes, and the shape of its results.

    python3 tests/ch05/check_prefetch.py trace RUN_DIR --backward {pre,post,none} [--forward] --blocks L
    python3 tests/ch05/check_prefetch.py shape NONE_DIR POST_DIR PRE_DIR

trace: on every rank's CPU thread, in every step,
1. the backward prefetches (`_prefetch_handle (backward)` scopes) sit in the hook their mode
   names: BACKWARD_PRE in a pre-backward hook (L of them: the root's prefetches the last block,
   then each block the one before it), BACKWARD_POST in a post-backward hook after the unit's
   free and before its reduce-scatter (L - 1: the root's post-backward hook comes last, with
   nothing left to prefetch), none nowhere;
2. forward prefetches happen only with --forward and not in step 1 (the order is recorded
   there), then L per step, each in a pre-forward hook;
3. every prefetch issues exactly one all-gather, and the hook that issues it has already
   enqueued the compute stream's wait (a cudaStreamWaitEvent before the prefetch scope);
4. on the GPU, no compute kernel issued between a prefetch and the next hook starts at the
   instant the prefetched all-gather ends: the unit running while its successor is gathered
   never waits for that gather.

shape: the last-step figures of gpt2-small runs at 8 ranks on h100-8 (summary.json): BACKWARD_PRE's
backward exposed communication is under half of none's and its step is shorter; BACKWARD_POST's
step lies between them or equals pre's; pre's peak allocated exceeds none's by one block's
parameters (within 10%); every run's formula is within 2% of its measured peak.

Prints what it found; exits 1 on any problem.
"""
import argparse
import glob
import json
import os
import sys

HOOK = "FullyShardedDataParallel."


def load(path):
    with open(path) as f:
        return json.load(f)["traceEvents"]


def cpu_events(events):
    """Complete events of the CPU thread (scopes and runtime calls), sorted by start."""
    host = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "cuda_runtime", "user_annotation")]
    return sorted(host, key=lambda e: (e["ts"], -e["dur"]))


def inside(e, scope):
    return scope["ts"] <= e["ts"] and e["ts"] + e["dur"] <= scope["ts"] + scope["dur"] + 1e-6


def check_trace(args, problems):
    files = sorted(glob.glob(os.path.join(args.run_dir, "rank*.json")))
    if not files:
        problems.append(f"{args.run_dir}: no rank files")
    L = args.blocks
    want_backward = {"pre": L, "post": L - 1, "none": 0}[args.backward]
    for path in files:
        events = load(path)
        cpu = cpu_events(events)
        kernels = {e["args"]["correlation"]: e for e in events
                   if e.get("ph") == "X" and e.get("cat") == "kernel" and "correlation" in e.get("args", {})}
        compute_lanes = {(e["pid"], e["tid"]) for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"
                         and e["args"]["name"].endswith(" compute")}
        compute_kernels = [e for e in kernels.values() if (e["pid"], e["tid"]) in compute_lanes]
        steps = [e for e in cpu if e["name"].startswith("ProfilerStep#")]
        for step in steps:
            n = int(step["name"].split("#")[1])
            in_step = [e for e in cpu if inside(e, step)]
            hooks = [e for e in in_step if e["name"].startswith(HOOK + "_p") and "prefetch" not in e["name"]]
            prefetches = [e for e in in_step if e["name"].startswith(HOOK + "_prefetch_handle")]
            where = f"{os.path.basename(path)} step {n}"
            backward = [p for p in prefetches if p["name"].endswith("(backward)")]
            forward = [p for p in prefetches if p["name"].endswith("(forward)")]
            if len(backward) != want_backward:
                problems.append(f"{where}: {len(backward)} backward prefetches, expected {want_backward}")
            want_forward = L if args.forward and n > 1 else 0
            if len(forward) != want_forward:
                problems.append(f"{where}: {len(forward)} forward prefetches, expected {want_forward}")
            for p in prefetches:
                hook = [h for h in hooks if inside(p, h)]
                expected_hook = {"(forward)": "_pre_forward", "pre": "_pre_backward_hook",
                                 "post": "_post_backward_hook"}["(forward)" if p in forward else args.backward]
                if len(hook) != 1 or hook[0]["name"] != HOOK + expected_hook:
                    problems.append(f"{where}: a prefetch at {p['ts']} us is not inside a {expected_hook} hook")
                    continue
                calls = [e for e in in_step if inside(e, hook[0]) and e["cat"] == "cuda_runtime"]
                gathers = [c for c in calls if inside(c, p) and c["name"] == "ncclAllGather"]
                if len(gathers) != 1:
                    problems.append(f"{where}: the prefetch at {p['ts']} us issues {len(gathers)} all-gathers, expected 1")
                    continue
                if p in forward or args.backward == "pre":
                    if not any(c["name"] == "cudaStreamWaitEvent" and c["ts"] < p["ts"] for c in calls):
                        problems.append(f"{where}: the hook at {hook[0]['ts']} us prefetches before compute waits")
                if p in backward and args.backward == "post":
                    rs = [c for c in calls if c["name"] == "ncclReduceScatter"]
                    if not rs or rs[0]["ts"] < p["ts"]:
                        problems.append(f"{where}: the post-backward prefetch at {p['ts']} us is not before the reduce-scatter")
                # 4. The kernels issued from here to the next hook run while the gather may still
                # be in flight; none of them may have been held until it ended.
                gather = kernels.get(gathers[0]["args"]["correlation"])
                if gather is None:
                    problems.append(f"{where}: no GPU kernel for the all-gather at {gathers[0]['ts']} us")
                    continue
                later_hooks = [h for h in hooks if h["ts"] > p["ts"] + p["dur"]]
                until = later_hooks[0]["ts"] if later_hooks else step["ts"] + step["dur"]
                launched = {c["args"]["correlation"] for c in in_step
                            if c["name"] == "cudaLaunchKernel" and p["ts"] < c["ts"] < until}
                end = gather["ts"] + gather["dur"]
                for k in compute_kernels:
                    if k["args"]["correlation"] in launched and abs(k["ts"] - end) < 1e-3:
                        problems.append(f"{where}: {k['name']} starts when the prefetched all-gather ends ({end} us): it waited for it")
    print(f"checked {len(files)} rank file(s) of {args.run_dir}: backward {args.backward}, forward prefetch {args.forward}")


def figures(run_dir):
    with open(os.path.join(run_dir, "summary.json")) as f:
        return {k: v["value"] for k, v in json.load(f)["figures"].items()}


def check_shape(args, problems):
    none, post, pre = (figures(d) for d in (args.none_dir, args.post_dir, args.pre_dir))
    for name, f in (("none", none), ("post", post), ("pre", pre)):
        print(f"{name}: step {f['step_ms']:.3f} ms, backward exposed {f['backward_exposed_comm_ms']:.3f} ms, "
              f"peak {f['peak_allocated_MiB']:.3f} MiB (formula {f['formula_MiB']:.3f})")
        if abs(f["formula_MiB"] - f["peak_allocated_MiB"]) > 0.02 * f["peak_allocated_MiB"]:
            problems.append(f"{name}: formula {f['formula_MiB']:.3f} MiB is not within 2% of the peak {f['peak_allocated_MiB']:.3f}")
    if not pre["backward_exposed_comm_ms"] < 0.5 * none["backward_exposed_comm_ms"]:
        problems.append("BACKWARD_PRE's backward exposed communication is not under half of none's")
    if not pre["step_ms"] < none["step_ms"]:
        problems.append("BACKWARD_PRE's step is not shorter than none's")
    if not pre["step_ms"] - 1e-6 <= post["step_ms"] <= none["step_ms"] + 1e-6:
        problems.append("BACKWARD_POST's step is not between pre's and none's")
    extra = pre["peak_allocated_MiB"] - none["peak_allocated_MiB"]
    block = pre["formula_unsharded_MiB"] - none["formula_unsharded_MiB"]
    print(f"pre holds {extra:.3f} MiB more at the peak; one block's parameters: {block:.3f} MiB")
    if not abs(extra - block) <= 0.1 * block:
        problems.append(f"pre's peak exceeds none's by {extra:.3f} MiB, not one block's parameters ({block:.3f})")


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="what", required=True)
    t = sub.add_parser("trace")
    t.add_argument("run_dir")
    t.add_argument("--backward", choices=["pre", "post", "none"], required=True)
    t.add_argument("--forward", action="store_true")
    t.add_argument("--blocks", type=int, required=True)
    s = sub.add_parser("shape")
    s.add_argument("none_dir")
    s.add_argument("post_dir")
    s.add_argument("pre_dir")
    args = ap.parse_args()
    problems = []
    (check_trace if args.what == "trace" else check_shape)(args, problems)
    for p in problems:
        print("check_prefetch:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
