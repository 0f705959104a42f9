#!/usr/bin/env python3
"""Checks that a chapter README quotes the figures its run writes.

    python3 tests/check_readme_figures.py chapters/NN_x/README.md runs/NN_x/summary.json

The README's figure table has rows `| key | value | unit | ... |` with keys from the summary's
"figures". Each quoted value must equal the summary's value rounded the way the README
writes it (as many decimals as the README shows). At least one figure must be quoted.
"""
import json
import re
import sys


def main():
    readme, summary = sys.argv[1], sys.argv[2]
    figures = json.load(open(summary))["figures"]
    checked, problems = 0, []
    for line in open(readme, encoding="utf-8"):
        m = re.match(r"\|\s*`?([a-z0-9_]+)`?\s*\|\s*(-?[0-9]+(?:\.[0-9]+)?)\s*\|", line)
        if not m or m.group(1) not in figures:
            continue
        key, quoted = m.group(1), m.group(2)
        decimals = len(quoted.split(".")[1]) if "." in quoted else 0
        actual = f"{figures[key]['value']:.{decimals}f}"
        checked += 1
        if actual != quoted:
            problems.append(f"{key}: README says {quoted}, the run gives {actual}")
    for p in problems:
        print("README figure:", p)
    print(f"{readme}: {checked} figure(s) checked, {len(problems)} differ")
    return 1 if problems or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
