#!/usr/bin/env python3
"""Checks that a chapter README quotes what its runs write.

    python3 tests/repository/check_readme_figures.py README.md [SUMMARY.json] [--mpirun "mpirun ..." --bin DIR...]

1. Figures: table rows `| key | value | ...` whose key is one of the summary's "figures" must
   quote the summary's value, rounded as the README writes it. At least one must be quoted.
   Without SUMMARY.json (the top-level README: no run of its own) there are none to quote.
2. Program output (with --mpirun and --bin): a code block right after a comment
   `<!-- output: -np N PROGRAM FLAGS... -->` must be a copy of lines that command prints. The
   command is run as `MPIRUN -np N BIN/PROGRAM FLAGS --trace-dir <tmp>` (BIN: the first --bin
   directory that holds PROGRAM; --bin may be given more than once), and every non-empty
   line of the block must appear among its output lines (spacing aside). A run that must fail
   says so, `<!-- output (exit 1): ... -->`: it must exit with that status, and its lines are
   looked for in what it printed on stdout and stderr. A hidden block puts the lines inside the
   comment, after the command's line: `<!-- output: -np N PROGRAM FLAGS\nLINES -->`. It backs a
   number in the prose or a table without showing the reader a run.
3. Every other number (with --mpirun and --numbers): a number written with three or more decimals (21.233)
   or with thousands separators (12,118), in prose, tables and exercise answers alike, must be
   one the README's runs printed (the default run's figures included), rounded as the README
   writes it. Numbers a run cannot print, because they come from changed code (an exercise's
   answer), are listed, each with why, in `<!-- unchecked: 21.353 0.350 (why) -->`. A number
   worked out from printed ones says how: `<!-- derived: 1.009 = 160.066 / 158.586 -->` (several
   separated by `;`); the arithmetic is redone, and every operand of four or more digits must be
   a printed number (smaller whole numbers are the formula's constants). Inline code
   (a command, a flag's value, a screenshot's --range) is what a reader types and is not checked.
"""
import argparse
import json
import os
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


VISIBLE = re.compile(r"<!-- output(?: \(exit ([0-9]+)\))?: ([^\n]*?) -->\s*```[a-z]*\n(.*?)```", re.S)
HIDDEN = re.compile(r"<!-- output(?: \(exit ([0-9]+)\))?: ((?:(?!-->)[^\n])*)\n(.*?)-->", re.S)
UNCHECKED = re.compile(r"<!-- unchecked: (.*?) -->", re.S)
DERIVED = re.compile(r"<!-- derived: (.*?) -->", re.S)
ARITHMETIC = re.compile(r"^[0-9.+\-*/() ]+$")
LITERAL = re.compile(r"\d+(?:\.\d+)?")
QUOTED = re.compile(r"(?<![\w.,])(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+\.\d{3,})(?![\w]|\.\d|,\d)")
INLINE_CODE = re.compile(r"`(?:[^`\n]|\n(?![ \t]*\n))*`")  # a code span: no blank line inside
PRINTED = re.compile(r"-?\d+(?:\.\d+)?")


def check_outputs(text, mpirun, bindir, problems, printed_numbers):
    blocks = VISIBLE.findall(text) + HIDDEN.findall(text)
    ran = {}  # a command quoted in several blocks runs once: a run prints the same lines every time
    for status, command, block in blocks:
        args = shlex.split(command)
        np_flag, ranks, program, flags = args[0], args[1], args[2], args[3:]
        where = next((d for d in bindir if os.path.isfile(os.path.join(d, program))), None)
        if where is None:
            problems.append(f"`{command}`: no {program} in {', '.join(bindir)}")
            continue
        if command not in ran:
            with tempfile.TemporaryDirectory() as tmp:
                cmd = shlex.split(mpirun) + [np_flag, ranks, os.path.join(where, program), *flags, "--trace-dir", tmp]
                ran[command] = subprocess.run(cmd, capture_output=True, text=True)
        out = ran[command]
        expected = int(status or 0)
        if out.returncode != expected:
            problems.append(f"`{command}` exited {out.returncode}, not {expected}: {out.stderr[-500:]}")
            continue
        printed = {squash(l) for l in (out.stdout + (out.stderr if expected else "")).splitlines()}
        printed_numbers.update(float(x) for x in PRINTED.findall(out.stdout + out.stderr))
        for line in block.splitlines():
            if line.strip() and squash(line) not in printed:
                problems.append(f"`{command}` no longer prints: {line.strip()}")
    return len(blocks)


def matches(quoted, value):
    plain = quoted.replace(",", "")
    decimals = len(plain.split(".")[1]) if "." in plain else 0
    return f"{value:.{decimals}f}" == plain


def check_derived(text, printed_numbers, problems):
    """The numbers a `derived:` comment works out; each is checked and then counts as backed."""
    derived = set()
    for block in DERIVED.findall(text):
        for item in (x.strip() for x in block.split(";") if x.strip()):
            quoted, _, expression = (x.strip() for x in item.partition("="))
            if not expression or not ARITHMETIC.match(expression):
                problems.append(f"derived: `{item}` is not `NUMBER = arithmetic`")
                continue
            for literal in LITERAL.findall(expression):
                digits = len(literal.replace(".", "").lstrip("0"))
                if digits >= 4 and float(literal) not in printed_numbers:
                    problems.append(f"derived: {literal} in `{item}` is not a number any of the README's runs printed")
            value = eval(expression, {"__builtins__": {}})  # digits and + - * / ( ) only (ARITHMETIC)
            if not matches(quoted, value):
                problems.append(f"derived: {expression} = {value:.6g}, not {quoted}")
            derived.add(quoted)
    return derived


def check_numbers(text, printed_numbers, problems):
    """Every number quoted at the precision of a program's output is one a run printed."""
    # A difference printed with its sign ("compute -0.722") is quoted as a size ("0.722 ms below").
    printed_numbers = printed_numbers | {abs(p) for p in printed_numbers}
    unchecked = check_derived(text, printed_numbers, problems)
    for listed in UNCHECKED.findall(text):
        unchecked.update(QUOTED.findall(listed))
    prose = VISIBLE.sub("", text)
    prose = HIDDEN.sub("", prose)
    prose = UNCHECKED.sub("", prose)
    prose = DERIVED.sub("", prose)
    prose = INLINE_CODE.sub("", prose)  # commands and names: what a reader types, not what a run printed
    checked = 0
    for quoted in QUOTED.findall(prose):
        if quoted in unchecked:
            continue
        checked += 1
        if not any(matches(quoted, p) for p in printed_numbers):
            problems.append(f"{quoted} is not a number any of the README's runs printed (as the README rounds it): "
                            "back it with an output block, hidden if need be, or say how it is derived")
    return checked


def main():
    p = argparse.ArgumentParser()
    p.add_argument("readme")
    p.add_argument("summary", nargs="?")
    p.add_argument("--mpirun")
    p.add_argument("--bin", action="append", default=[])
    p.add_argument("--numbers", action="store_true", help="check every other number (3. above)")
    a = p.parse_args()
    text = open(a.readme, encoding="utf-8").read()
    problems = []
    summary_figures = json.load(open(a.summary))["figures"] if a.summary else {}
    figures = check_figures(text, summary_figures, problems)
    printed_numbers = {float(f["value"]) for f in summary_figures.values() if isinstance(f.get("value"), (int, float))}
    outputs = check_outputs(text, a.mpirun, a.bin, problems, printed_numbers) if a.mpirun else 0
    numbers = check_numbers(text, printed_numbers, problems) if a.mpirun and a.numbers else 0
    for x in problems:
        print("README:", x)
    print(f"{a.readme}: {figures} figure(s), {outputs} output block(s) and {numbers} other number(s) checked, "
          f"{len(problems)} problem(s)")
    return 1 if problems or (a.summary and figures == 0) else 0


if __name__ == "__main__":
    sys.exit(main())
