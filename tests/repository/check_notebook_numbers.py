#!/usr/bin/env python3
"""Checks that a notebook's prose quotes what its cells printed.

    python3 tests/repository/check_notebook_numbers.py EXECUTED.ipynb

Run on a notebook nbconvert has just executed. Every number its markdown cells write with three
or more decimals (1.910) or with thousands separators (2,036) must be one its code cells
printed (their text outputs: what print() wrote, a cell's value, an error's text), rounded as
the markdown writes it, or be worked out from printed ones in a `<!-- derived: X = arithmetic
-->` comment, or be listed with why no cell prints it in `<!-- unchecked: X (why) -->`:
check_readme_figures.py's rules for a README, with the cells' outputs in place of the runs.
Inline code (a flag, a command) is what a reader types and is not checked.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_readme_figures import PRINTED, check_numbers  # noqa: E402


def text_of(output):
    if output.get("output_type") == "stream":
        return "".join(output.get("text", ""))
    if output.get("output_type") == "error":
        return "\n".join(output.get("traceback", []))
    return "".join(output.get("data", {}).get("text/plain", ""))


def main():
    path = sys.argv[1]
    cells = json.load(open(path, encoding="utf-8"))["cells"]
    printed = set()
    for cell in cells:
        for output in cell.get("outputs", []):
            printed.update(float(x) for x in PRINTED.findall(text_of(output)))
    prose = "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    problems = []
    checked = check_numbers(prose, printed, problems)
    for p in problems:
        print(f"{os.path.basename(path)}:", p.replace("README's runs", "notebook's cells").replace("the README rounds", "the notebook rounds").replace("back it with an output block, hidden if need be", "print it in a cell"))
    print(f"{path}: {checked} number(s) checked against {len(printed)} printed, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
