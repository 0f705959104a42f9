#!/usr/bin/env python3
"""Checks what a failed run left behind (the harness's failure path, common/run/failure.cpp):

    python3 tests/harness/check_failed_run.py RUN_DIR --ranks N --failed-rank R --kind error|timeout --steps K

summary.json is marked incomplete and names the failed rank and the kind of failure; every rank
reported to rank 0 and has at least K finished steps; every rank wrote a flight record whose
entries carry seq, op, group, count, dtype and state; a timeout's summary holds a diagnosis.
(The trace schema itself is validate_trace.py --expect-incomplete's.)
"""
import argparse
import json
import os
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run")
    ap.add_argument("--ranks", type=int, required=True)
    ap.add_argument("--failed-rank", type=int, required=True)
    ap.add_argument("--kind", required=True)
    ap.add_argument("--steps", type=int, required=True)
    a = ap.parse_args()
    problems = []
    s = json.load(open(os.path.join(a.run, "summary.json")))
    if s.get("incomplete") is not True:
        problems.append("summary.json is not marked incomplete")
    failure = s.get("failure", {})
    if a.kind == "error" and failure.get("rank") != a.failed_rank:
        problems.append(f"summary.json names rank {failure.get('rank')} as failed, expected {a.failed_rank}")
    if failure.get("kind") != a.kind:
        problems.append(f"summary.json's failure kind is {failure.get('kind')}, expected {a.kind}")
    if s.get("unreported_ranks"):
        problems.append(f"ranks that did not report: {s['unreported_ranks']}")
    for r in s.get("ranks", []):
        if len(r["steps"]) < a.steps:
            problems.append(f"rank {r['rank']}: {len(r['steps'])} finished steps, expected at least {a.steps}")
    if a.kind == "timeout" and f"never by rank {a.failed_rank}" not in s.get("diagnosis", ""):
        problems.append(f"the diagnosis does not name rank {a.failed_rank}: {s.get('diagnosis')!r}")
    for rank in range(a.ranks):
        path = os.path.join(a.run, f"flight_record_rank{rank}.json")
        if not os.path.exists(path):
            problems.append(f"no {path}")
            continue
        entries = json.load(open(path))["flight"]["entries"]
        if not entries or any(set(e) < {"seq", "op", "group", "count", "dtype", "state"} for e in entries):
            problems.append(f"{path}: entries missing or without seq/op/group/count/dtype/state")
    for p in problems:
        print("check_failed_run:", p)
    print(f"{a.run}: failure {failure}, {len(s.get('ranks', []))} rank reports, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
