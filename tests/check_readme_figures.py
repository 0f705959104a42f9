#!/usr/bin/env python3
"""Checks that a chapter README quotes what its runs write.

    python3 tests/check_readme_figures.py README.md SUMMARY.json [--mpirun "mpirun ..." --bin DIR]

1. Figures: table rows `| key | value | ...` whose key is one of the summary's "figures" must
   quote the summary's value, rounded as the README writes it. At least one must be quoted.
2. Program output (with --mpirun and --bin): a code block right after a comment
   `<!-- output: -np N PROGRAM FLAGS... -->` must be a copy of lines that command prints. The
   command is run as `MPIRUN -np N BIN/PROGRAM FLAGS --trace-dir <tmp>`, and every non-empty
   line of the block must appear among its output lines (spacing aside). A run that must fail
   says so, `<!-- output (exit 1): ... -->`: it must exit with that status, and its lines are
   looked for in what it printed on stdout and stderr.
"""
import argparse
import json
import re
import shlex
import subprocess
import sys
import tempfile


def check_figures(text, figures, problems):
    checked = 0
    for line in text.splitlines():
        m = re.match(r"\|\s*`?([A-Za-z0-9_]+)`?\s*\|\s*(-?[0-9]+(?:\.[0-9]+)?(?:e[-+][0-9]+)?)\s*\|", line)
        if not m or m.group(1) not in figures:
            continue
        key, quoted = m.group(1), m.group(2)
        mantissa = quoted.split("e")[0]
        decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
        style = "e" if "e" in quoted else "f"  # as the README writes it: 5.593e-07 or 164.740
        actual = f"{figures[key]['value']:.{decimals}{style}}"
        checked += 1
        if actual != quoted:
            problems.append(f"figure {key}: README says {quoted}, the run gives {actual}")
    return checked


def squash(line):
    return " ".join(line.split())


def check_outputs(text, mpirun, bindir, problems):
    blocks = re.findall(r"<!-- output(?: \(exit ([0-9]+)\))?: (.*?) -->\s*```[a-z]*\n(.*?)```", text, re.S)
    for status, command, block in blocks:
        args = shlex.split(command)
        np_flag, ranks, program, flags = args[0], args[1], args[2], args[3:]
        with tempfile.TemporaryDirectory() as tmp:
            cmd = shlex.split(mpirun) + [np_flag, ranks, f"{bindir}/{program}", *flags, "--trace-dir", tmp]
            out = subprocess.run(cmd, capture_output=True, text=True)
        expected = int(status or 0)
        if out.returncode != expected:
            problems.append(f"`{command}` exited {out.returncode}, not {expected}: {out.stderr[-500:]}")
            continue
        printed = {squash(l) for l in (out.stdout + (out.stderr if expected else "")).splitlines()}
        for line in block.splitlines():
            if line.strip() and squash(line) not in printed:
                problems.append(f"`{command}` no longer prints: {line.strip()}")
    return len(blocks)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("readme")
    p.add_argument("summary")
    p.add_argument("--mpirun")
    p.add_argument("--bin")
    a = p.parse_args()
    text = open(a.readme, encoding="utf-8").read()
    problems = []
    figures = check_figures(text, json.load(open(a.summary))["figures"], problems)
    outputs = check_outputs(text, a.mpirun, a.bin, problems) if a.mpirun else 0
    for x in problems:
        print("README:", x)
    print(f"{a.readme}: {figures} figure(s) and {outputs} output block(s) checked, {len(problems)} problem(s)")
    return 1 if problems or figures == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
