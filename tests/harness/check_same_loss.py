#!/usr/bin/env python3
"""The loss a training chapter prints and records (summary.json "loss", one per step) is the
global batch's mean, so runs at different world sizes on the same global batch agree:

    python3 tests/harness/check_same_loss.py RUN_A/summary.json RUN_B/summary.json [--rtol 1e-5]

Exits 1 when a step's losses differ by more than rtol (relative), or a run has no losses.
"""
import json
import sys


def main():
    a, b = (json.load(open(p)) for p in sys.argv[1:3])
    rtol = float(sys.argv[sys.argv.index("--rtol") + 1]) if "--rtol" in sys.argv else 1e-5
    la, lb = a.get("loss", []), b.get("loss", [])
    problems = []
    if not la or len(la) != len(lb):
        problems.append(f"losses per step: {len(la)} against {len(lb)}")
    for i, (x, y) in enumerate(zip(la, lb)):
        print(f"step {i + 1}: {x:.6f} (world {a['world_size']}) {y:.6f} (world {b['world_size']})")
        if abs(x - y) > rtol * abs(x):
            problems.append(f"step {i + 1}: {x} against {y}")
    for p in problems:
        print("check_same_loss:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
