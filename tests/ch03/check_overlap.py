#!/usr/bin/env python3
"""Compares two data-parallel runs step by step, on every rank, from their summary.json:
the second (bucketed) must have less than half the first's exposed communication and a
shorter step, and at least half of its own communication must run under compute. The last
condition is what makes the lesson true: fewer, larger collectives alone also cut exposed
communication (buckets filled in forward order, which overlap nothing, take it from 6.5 to
3.1 ms), but only buckets that are ready while backward still runs hide it. Uses each rank's
last step (the first includes warm-up). Given one run, checks only that last condition.

    python3 tests/ch03/check_overlap.py runs/naive/summary.json runs/bucketed/summary.json
    python3 tests/ch03/check_overlap.py runs/bucketed/summary.json
"""
import json
import sys


def last_steps(path):
    return {r["rank"]: r["steps"][-1] for r in json.load(open(path))["ranks"]}


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    bucketed = last_steps(sys.argv[-1])
    naive = last_steps(sys.argv[1]) if len(sys.argv) == 3 else None
    problems = []
    for rank in sorted(bucketed):
        b = bucketed[rank]
        overlap = f"bucketed comm under compute {b['overlap_us'] / 1e3:.3f} of {b['comm_us'] / 1e3:.3f} ms"
        if naive is None:
            print(f"rank {rank}: step {b['step_us'] / 1e3:.3f} ms, exposed comm {b['exposed_comm_us'] / 1e3:.3f} ms, {overlap}")
        else:
            a = naive[rank]
            print(f"rank {rank}: step {a['step_us'] / 1e3:.3f} -> {b['step_us'] / 1e3:.3f} ms, "
                  f"exposed comm {a['exposed_comm_us'] / 1e3:.3f} -> {b['exposed_comm_us'] / 1e3:.3f} ms, {overlap}")
            if not b["exposed_comm_us"] < 0.5 * a["exposed_comm_us"]:
                problems.append((rank, f"exposed communication not below half ({b['exposed_comm_us'] / 1e3:.3f} of {a['exposed_comm_us'] / 1e3:.3f} ms)"))
            if not b["step_us"] < a["step_us"]:
                problems.append((rank, "step not shorter"))
        if not b["overlap_us"] >= 0.5 * b["comm_us"]:
            problems.append((rank, f"less than half of the bucketed communication overlaps compute ({b['overlap_us'] / 1e3:.3f} of {b['comm_us'] / 1e3:.3f} ms)"))
    # One line per problem, naming every rank that has it: a message cut short still says which.
    ranks_of = {}
    for rank, what in problems:
        ranks_of.setdefault(what, []).append(rank)
    for what, ranks in ranks_of.items():
        print(f"check_overlap: rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}: {what}")
    return 1 if problems or not bucketed else 0


if __name__ == "__main__":
    sys.exit(main())
