#!/usr/bin/env python3
"""Checks conditions on a run's figures (summary.json's "figures", rank 0's values).

    python3 tests/harness/check_figures.py runs/x/summary.json "abs(peak_allocated_GiB / formula_GiB - 1) < 0.02"
    python3 tests/harness/check_figures.py runs/on/summary.json --as off runs/off/summary.json "step_ms < 1.05 * off_step_ms"

Each condition is a Python expression over the figure names; `--as NAME PATH` adds another run's
figures as NAME_<figure>. Prints the figures it uses and exits 1 when a condition is false.
"""
import json
import re
import sys


def main():
    figures = {k: v["value"] for k, v in json.load(open(sys.argv[1]))["figures"].items()}
    args = sys.argv[2:]
    while args[:1] == ["--as"]:
        name, path = args[1], args[2]
        figures.update({f"{name}_{k}": v["value"] for k, v in json.load(open(path))["figures"].items()})
        args = args[3:]
    failed = 0
    for condition in args:
        names = sorted(set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", condition)) & set(figures))
        ok = bool(eval(condition, {"abs": abs, "__builtins__": {}}, figures))
        print(("ok:   " if ok else "FAIL: ") + condition + "   (" + ", ".join(f"{n} = {figures[n]:.6g}" for n in names) + ")")
        failed += not ok
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
