#!/usr/bin/env python3
"""A seeded flag fuzz of one chapter: random flags and values, hostile ones among them, each run
checked for what must never happen.

    python3 tests/fuzz_flags.py --mpirun "mpirun --oversubscribe" --bin build/chapters/shardlab_ch05 \
        --out /tmp/fz --cases 8 --seed 5

The flags come from the chapter's --help (`--name {a, b}` a choice, `N` an integer, `X` a
number, `S` a string, none a switch). Each case picks 1 to 3 of them with values from pools of
valid, boundary and hostile values ("", "--debug-collectives", 2**63, nan, "..", /dev/null),
runs on 1 to 3 ranks inside a sandbox directory (so relative paths stay in it) that holds files
no run may touch, and passes when:
  - the job ends within --timeout seconds (no hang);
  - it exits 0, 1 (a failure with its message: "error:"), 2 (bad flags, the flag named) or 3 (a
    race reported): never a signal, std::terminate or a sanitizer's abort;
  - exit 0 wrote summary.json where it said it would;
  - every file of the sandbox that a run did not write is still there, unchanged.
Exit status: 0 when every case passed, 1 otherwise (each failure printed with its command).
"""
import argparse
import os
import random
import re
import shlex
import shutil
import subprocess
import sys

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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mpirun", required=True)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--cases", type=int, default=8)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=90)
    a = ap.parse_args()
    binary = os.path.abspath(a.bin)
    help_text = subprocess.run([binary, "--help"], capture_output=True, text=True).stdout
    flags = flags_of(help_text)
    if not flags:
        sys.exit(f"no flags found in {a.bin} --help")
    rng = random.Random(a.seed)
    failures = 0
    for case in range(a.cases):
        sandbox = os.path.join(os.path.abspath(a.out), f"case{case}")
        shutil.rmtree(sandbox, ignore_errors=True)
        for rel, text in CANARIES.items():
            os.makedirs(os.path.dirname(os.path.join(sandbox, rel)) or sandbox, exist_ok=True)
            open(os.path.join(sandbox, rel), "w").write(text)
        before = snapshot(sandbox)
        args = []
        for name, kind, choices in rng.sample(flags, rng.randint(1, min(3, len(flags)))):
            args += [f"--{name}"] if kind == "switch" else [f"--{name}", value_for(rng, name, kind, choices)]
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
            problems.append(f"no end within {a.timeout:.0f} s (a hang)")
        if rc is not None:
            if rc not in (0, 1, 2, 3):
                problems.append(f"exit status {rc} (a crash or a signal)")
            for bad in ("terminate called", "Segmentation fault", "AddressSanitizer", "core dumped", "Aborted"):
                if bad in out:
                    problems.append(f"the output says '{bad}'")
            if rc == 2 and not re.search(r"--[a-z]", out):
                problems.append("exit 2 without naming a flag")
            if rc == 1 and "error:" not in out:
                problems.append("exit 1 without an error message")
            if rc == 0:
                m = re.search(r"summary: (\S+summary\.json)", out)
                if not m or not os.path.isfile(os.path.join(sandbox, m.group(1))):
                    problems.append("exit 0 without the summary.json it names")
        after = snapshot(sandbox)
        for rel, data in before.items():
            if after.get(rel) != data:
                problems.append(f"{rel} was {'changed' if rel in after else 'deleted'}")
        verdict = "ok  " if not problems else "FAIL"
        print(f"{verdict} exit {rc}: {shown}")
        for p in problems:
            print(f"        {p}")
        if problems:
            failures += 1
            print("        output: " + out.strip()[-600:].replace("\n", "\n                "))
    print(f"{a.bin}: {a.cases - failures} of {a.cases} case(s) passed (seed {a.seed})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
