#!/usr/bin/env python3
"""A seeded flag fuzz of one chapter: random flags and values, hostile ones among them, each run
checked for what must never happen.

    python3 tests/harness/fuzz_flags.py --mpirun "mpirun --oversubscribe" --bin build/chapters/shardlab_ch05 \
        --out /tmp/fz --cases 8 --seed 5
    python3 tests/harness/fuzz_flags.py ... --bin build/chapters/shardlab_ch05 --bin build/chapters/shardlab_ch06 \
        --cases 40 --seed 5 --quiet      several chapters, each with its own cases; a tally only

The flags come from the chapter's --help (`--name {a, b}` a choice, `N` an integer, `X` a
number, `S` a string, none a switch). Each case picks 1 to 3 of them with values from pools of
valid, boundary and hostile values ("", "--debug-collectives", 2**63, nan, "..", /dev/null),
runs on 1 to 3 ranks inside a sandbox directory (so relative paths stay in it) that holds files
no run may touch, and passes when:
  - the job ends within --timeout seconds (no hang);
  - it exits 0, 1 (a failure with its message: "error:"), 2 (bad flags, the flag named) or 3 (a
    race reported): never a signal, std::terminate or a sanitizer's abort;
  - exit 0 wrote summary.json where it said it would;
  - every file of the sandbox that a run did not write is still there, unchanged;
  - no run exits 0 with a value no flag of its kind accepts (INVALID: "x" for a number, nan, a
    flag's name as a value, ...): a silent run on nonsense.
Each chapter ends with its tally: cases tried, exit 2 naming a flag, exit 1 with its error, exit
0, exit 3 (a race reported), and the failures: crash, hang, silent, touched file, unexplained
exit. Exit status: 0 when every case passed, 1 otherwise (each failure printed with its command).
"""
import argparse
import os
import random
import re
import shlex
import shutil
import subprocess
import sys
from collections import Counter

INT_VALUES = ["-1", "0", "1", "2", "3", "9223372036854775808", "x", "", "1.5", "--steps"]
FLOAT_VALUES = ["0", "-1", "1e-9", "1e300", "nan", "inf", "x", "", "0.5", "2"]
STRING_VALUES = {
    "profile": ["", "nonexistent", "/dev/null", "/tmp", "h100-2x8", "h100-8"],
    "trace-dir": ["", "--debug-collectives", "sub/dir", "/dev/null", "runs"],
    "run-name": ["", ".", "..", "a/b", "x", "rank0.json"],
}
OTHER_STRINGS = ["", "--debug-collectives", "..", "x" * 300, "é"]
CANARIES = {"rankings.xlsx": "a user's spreadsheet\n", "rank_important.txt": "keep me\n",
            "runs/notes.txt": "a user's notes beside the runs\n", "rank_backup/rank0.json": "{}\n"}
# Values no flag of the kind accepts, whatever its range: a run that exits 0 with one is silent.
INVALID = {"int": {"x", "", "1.5", "9223372036854775808", "--steps"},
           "float": {"nan", "inf", "x", "", "1e300"},
           "choice": {"bogus", ""},
           "string": {"", "--debug-collectives"}}
# Flags whose random values would make a valid run long or huge rather than wrong: left at
# their defaults (the tests of each chapter cover their ranges).
SIZE_FLAGS = {"steps", "global-batch", "seq-len", "grad-accum", "min-bytes", "max-bytes", "cp", "shard",
              "replicate", "inflight-all-gathers", "bucket-cap-mb", "first-bucket-mb"}


def flags_of(help_text):
    """[(name, kind, choices)] from a chapter's --help."""
    out = []
    for m in re.finditer(r"^  --([a-z0-9-]+)(?: (\{[^}]*\}|N|X|S))?\s", help_text, re.M):
        name, arg = m.group(1), m.group(2)
        if name == "help":
            continue
        if arg is None:
            out.append((name, "switch", None))
        elif arg.startswith("{"):
            out.append((name, "choice", [c.strip() for c in arg[1:-1].split(",")]))
        else:
            out.append((name, {"N": "int", "X": "float", "S": "string"}[arg], None))
    return out


def value_for(rng, name, kind, choices):
    if kind == "choice":
        if name == "model":  # the larger models train for minutes with real math: a size, as above
            choices = ["tiny"]
        return rng.choice(choices + ["bogus", ""])
    if kind == "int":
        return rng.choice(["1", "2"] if name in SIZE_FLAGS and rng.random() < 0.5 else INT_VALUES)
    if kind == "float":
        return rng.choice(FLOAT_VALUES)
    return rng.choice(STRING_VALUES.get(name, OTHER_STRINGS))


def snapshot(root):
    files = {}
    for d, _, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            if os.path.isfile(p) and not os.path.islink(p):
                files[os.path.relpath(p, root)] = open(p, "rb").read()
    return files


def fuzz(a, binary, tally):
    """a.cases seeded cases of one chapter; adds each outcome to tally; returns the failures."""
    help_text = subprocess.run([binary, "--help"], capture_output=True, text=True).stdout
    flags = flags_of(help_text)
    if not flags:
        sys.exit(f"no flags found in {binary} --help")
    rng = random.Random(a.seed)
    failures = 0
    chapter = os.path.basename(binary)
    for case in range(a.cases):
        sandbox = os.path.join(os.path.abspath(a.out), chapter if len(a.bin) > 1 else "", f"case{case}")
        shutil.rmtree(sandbox, ignore_errors=True)
        for rel, text in CANARIES.items():
            os.makedirs(os.path.dirname(os.path.join(sandbox, rel)) or sandbox, exist_ok=True)
            open(os.path.join(sandbox, rel), "w").write(text)
        before = snapshot(sandbox)
        args, invalid = [], []
        for name, kind, choices in rng.sample(flags, rng.randint(1, min(3, len(flags)))):
            if kind == "switch":
                args += [f"--{name}"]
                continue
            value = value_for(rng, name, kind, choices)
            args += [f"--{name}", value]
            if value in INVALID[kind]:
                invalid.append(f"--{name} {value!r}")
        names = [x for x in args if x.startswith("--")]
        if "--trace-dir" not in names:
            args += ["--trace-dir", "runs"]
        if "--collective-timeout" not in names:
            args += ["--collective-timeout", "30"]
        ranks = str(rng.randint(1, 3))
        cmd = shlex.split(a.mpirun) + ["-np", ranks, binary] + args
        shown = " ".join(shlex.quote(x) for x in cmd)
        problems = []
        try:
            r = subprocess.run(cmd, cwd=sandbox, capture_output=True, text=True, timeout=a.timeout)
            out, rc = r.stdout + r.stderr, r.returncode
        except subprocess.TimeoutExpired as e:
            out, rc = (e.stdout or b"").decode(errors="replace") + (e.stderr or b"").decode(errors="replace"), None
            problems.append(("hang", f"no end within {a.timeout:.0f} s (a hang)"))
        if rc is not None:
            if rc not in (0, 1, 2, 3):
                problems.append(("crash", f"exit status {rc} (a crash or a signal)"))
            for bad in ("terminate called", "Segmentation fault", "AddressSanitizer", "core dumped", "Aborted"):
                if bad in out:
                    problems.append(("crash", f"the output says '{bad}'"))
            if rc == 2 and not re.search(r"--[a-z]", out):
                problems.append(("unexplained exit", "exit 2 without naming a flag"))
            if rc == 1 and "error:" not in out:
                problems.append(("unexplained exit", "exit 1 without an error message"))
            if rc == 0:
                m = re.search(r"summary: (\S+summary\.json)", out)
                if not m or not os.path.isfile(os.path.join(sandbox, m.group(1))):
                    problems.append(("unexplained exit", "exit 0 without the summary.json it names"))
                if invalid:
                    problems.append(("silent", f"exit 0 with {', '.join(invalid)}: a value no such flag accepts"))
        after = snapshot(sandbox)
        for rel, data in before.items():
            if after.get(rel) != data:
                problems.append(("touched file", f"{rel} was {'changed' if rel in after else 'deleted'}"))
        tally["tried"] += 1
        if problems:
            for kind in {k for k, _ in problems}:
                tally[kind] += 1
        else:
            tally[{0: "exit 0", 1: "exit 1 with its error", 2: "exit 2 naming a flag", 3: "exit 3 (race)"}[rc]] += 1
        if not a.quiet or problems:
            print(f"{'ok  ' if not problems else 'FAIL'} exit {rc}: {shown}")
        for _, p in problems:
            print(f"        {p}")
        if problems:
            failures += 1
            print("        output: " + out.strip()[-600:].replace("\n", "\n                "))
    return failures


OUTCOMES = ["exit 2 naming a flag", "exit 1 with its error", "exit 0", "exit 3 (race)"]
FAILURES = ["crash", "hang", "silent", "touched file", "unexplained exit"]


def tally_line(label, t):
    return (f"{label}: {t['tried']} tried: " + ", ".join(f"{t[k]} {k}" for k in OUTCOMES) + "; " +
            ", ".join(f"{t[k]} {k}" for k in FAILURES))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mpirun", required=True)
    ap.add_argument("--bin", required=True, action="append", help="a chapter binary (several: each fuzzed in turn)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--cases", type=int, default=8, help="cases per chapter")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=90)
    ap.add_argument("--quiet", action="store_true", help="print failed cases and the tallies only")
    a = ap.parse_args()
    total = Counter()
    failures = 0
    for b in a.bin:
        tally = Counter()
        failures += fuzz(a, os.path.abspath(b), tally)
        print(tally_line(os.path.basename(b), tally))
        total += tally
    if len(a.bin) > 1:
        print(tally_line(f"all {len(a.bin)} chapters", total))
    print(f"{a.cases * len(a.bin) - failures} of {a.cases * len(a.bin)} case(s) passed (seed {a.seed})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
