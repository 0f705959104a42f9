#!/usr/bin/env python3
"""Checks that summary.json's allocator counts are the trace's allocator marks.

    python3 tests/ch06/check_allocator_marks.py RUN_DIR

For every rank file and every step (ProfilerStep#N on the CPU thread), the instants of cat
"allocator" inside the step, by name ("segment malloc", "segment free", "alloc retry", "out of
memory"), must equal that rank's step entry in summary.json (segment_mallocs, segment_frees,
alloc_retries, ooms); and rank 0's alloc retries over the whole file must equal the figure
alloc_retries_total where the run has it (chapter 06). Prints the counts; exits 1 on a mismatch.
"""
import collections
import glob
import json
import os
import sys

KEYS = {"segment malloc": "segment_mallocs", "segment free": "segment_frees",
        "alloc retry": "alloc_retries", "out of memory": "ooms"}


def main():
    run = sys.argv[1]
    with open(os.path.join(run, "summary.json")) as f:
        summary = json.load(f)
    problems = []
    ranks = {r["rank"]: r for r in summary["ranks"]}
    for path in sorted(glob.glob(os.path.join(run, "rank*.json"))):
        rank = int(os.path.basename(path)[4:-5])
        with open(path) as f:
            events = json.load(f)["traceEvents"]
        marks = [e for e in events if e.get("ph") == "i" and e.get("cat") == "allocator"]
        steps = [e for e in events if e.get("ph") == "X" and e.get("name", "").startswith("ProfilerStep#")]
        want = {s["step"]: s for s in ranks[rank]["steps"]}
        for step in steps:
            n = int(step["name"].split("#")[1])
            counted = collections.Counter(KEYS[m["name"]] for m in marks
                                          if step["ts"] <= m["ts"] < step["ts"] + step["dur"])
            for key in KEYS.values():
                if counted[key] != want[n][key]:
                    problems.append(f"rank {rank} step {n}: {counted[key]} {key} in the trace, {want[n][key]} in summary.json")
        retries = sum(m["name"] == "alloc retry" for m in marks)
        print(f"rank {rank}: {len(marks)} allocator marks, {retries} alloc retries")
        figure = summary.get("figures", {}).get("alloc_retries_total")
        if rank == 0 and figure is not None and retries != figure["value"]:
            problems.append(f"rank 0: {retries} alloc retries in the trace, alloc_retries_total {figure['value']}")
    for p in problems:
        print("check_allocator_marks:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
