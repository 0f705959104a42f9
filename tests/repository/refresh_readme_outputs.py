#!/usr/bin/env python3
"""After a change that moves a chapter's numbers: brings a README's quoted output up to date.

    python3 tests/repository/refresh_readme_outputs.py README.md --mpirun "mpirun ..." --bin DIR... [--write]

What check_readme_figures.py checks, this rewrites, and only where the change is mechanical:

1. Every line of an output block (`<!-- output: -np N PROGRAM FLAGS -->`, visible or hidden) that
   the command no longer prints is replaced by the printed line of the same shape (the same text
   with the numbers left out; among several, the one sharing the most numbers, so `step 2/2`
   stays step 2).
2. Each number that changed (old -> new, as printed) is replaced wherever prose, a table or a
   `derived:` comment quotes it at the printed precision (21.233, or 12,118 with separators);
   each `derived:` line's left side is then worked out again from its right side.
3. Everything a person must redo is listed, never rewritten: a quote of a changed number at a
   lower precision (1.63 GiB for 1665.012 MiB, 51665 for 51665.273), a number whose old value
   changed to two different new ones, a line no printed line matches. And the conclusions: a
   sentence that compares two numbers is not rewritten here when they move.

Without --write it prints what it would change. Run check_readme_figures.py after it.
"""
import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_readme_figures import DERIVED, HIDDEN, INLINE_CODE, PRINTED, QUOTED, VISIBLE, squash  # noqa: E402


def run(command, status, mpirun, bindir):
    args = shlex.split(command)
    program = args[2]
    where = next((d for d in bindir if os.path.isfile(os.path.join(d, program))), None)
    if where is None:
        sys.exit(f"no {program} in {', '.join(bindir)}")
    with tempfile.TemporaryDirectory() as tmp:
        cmd = shlex.split(mpirun) + [args[0], args[1], os.path.join(where, program), *args[3:], "--trace-dir", tmp]
        out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != int(status or 0):
        sys.exit(f"`{command}` exited {out.returncode}, not {status or 0}:\n{out.stderr[-800:]}")
    return (out.stdout + (out.stderr if status else "")).splitlines()


def shape(line):
    return PRINTED.sub("#", squash(line))


def closest(old, candidates):
    old_numbers = PRINTED.findall(old)
    return max(candidates, key=lambda c: sum(a == b for a, b in zip(old_numbers, PRINTED.findall(c))))


def refresh_blocks(text, mpirun, bindir, changes, todo):
    """Rewrites the output blocks; records each changed number in `changes` (old -> set of new)."""
    outputs = {}
    pieces, last = [], 0
    spans = sorted([(m.start(3), m.end(3), m.group(1), m.group(2)) for m in VISIBLE.finditer(text)] +
                   [(m.start(3), m.end(3), m.group(1), m.group(2)) for m in HIDDEN.finditer(text)])
    for start, end, status, command in spans:
        if command not in outputs:
            outputs[command] = run(command, status, mpirun, bindir)
        printed = outputs[command]
        squashed = {squash(l) for l in printed}
        lines = []
        for line in text[start:end].split("\n"):
            if not line.strip() or squash(line) in squashed:
                lines.append(line)
                continue
            candidates = [p for p in printed if shape(p) == shape(line)]
            if not candidates:
                todo.append(f"`{command}` prints no line like: {line.strip()}")
                lines.append(line)
                continue
            new = closest(line, candidates)
            for a, b in zip(PRINTED.findall(line), PRINTED.findall(new)):
                if a != b:
                    changes.setdefault(a.lstrip("-"), set()).add(b.lstrip("-"))
            indent = line[:len(line) - len(line.lstrip())]
            lines.append(indent + new.lstrip())
        pieces += [text[last:start], "\n".join(lines)]
        last = end
    pieces.append(text[last:])
    return "".join(pieces)


def with_separators(plain, like):
    if "," not in like:
        return plain
    whole, _, fraction = plain.partition(".")
    return f"{int(whole):,}" + (f".{fraction}" if fraction else "")


def refresh_derived(block, mapping, todo):
    items = []
    for item in block.split(";"):
        quoted, eq, expression = item.partition("=")
        if not eq:
            items.append(item)
            continue
        expression = re.sub(r"\d+(?:\.\d+)?", lambda m: mapping.get(m.group(0), m.group(0)), expression)
        try:
            value = eval(expression, {"__builtins__": {}})
        except Exception:  # not arithmetic: check_readme_figures.py says so
            items.append(item)
            continue
        q = quoted.strip()
        plain = q.replace(",", "")
        decimals = len(plain.split(".")[1]) if "." in plain else 0
        new = with_separators(f"{value:.{decimals}f}", q)
        items.append(quoted.replace(q, new) + eq + expression)
        if new != q:
            mapping.setdefault(plain, new.replace(",", ""))
    return ";".join(items)


def refresh_prose(text, mapping, todo):
    # Derived comments first: their results join the mapping for the prose that quotes them.
    text = DERIVED.sub(lambda m: m.group(0).replace(m.group(1), refresh_derived(m.group(1), mapping, todo)), text)
    protected = [(m.start(), m.end()) for r in (VISIBLE, HIDDEN, INLINE_CODE, DERIVED) for m in r.finditer(text)]

    def inside(pos):
        return any(a <= pos < b for a, b in protected)

    def replace(m):
        plain = m.group(0).replace(",", "")
        if inside(m.start()) or plain not in mapping:
            return m.group(0)
        return with_separators(mapping[plain], m.group(0))

    text = QUOTED.sub(replace, text)
    # Lower-precision quotes of changed numbers: for a person.
    for lineno, line in enumerate(text.splitlines(), 1):
        for m in re.finditer(r"(?<![\w.])\d[\d,]*(?:\.\d+)?(?![\w])", line):
            plain = m.group(0).replace(",", "")
            digits = len(plain.replace(".", "").lstrip("0"))
            if digits < 3 or plain in mapping.values():
                continue
            decimals = len(plain.split(".")[1]) if "." in plain else 0
            for old, new in mapping.items():
                old_decimals = len(old.split(".")[1]) if "." in old else 0
                if old_decimals >= decimals and f"{float(old):.{decimals}f}" == plain and f"{float(new):.{decimals}f}" != plain:
                    todo.append(f"line {lineno}: {m.group(0)} rounds {old}, now {new}: {line.strip()[:140]}")
    return text


def main():
    p = argparse.ArgumentParser()
    p.add_argument("readme")
    p.add_argument("--mpirun", required=True)
    p.add_argument("--bin", action="append", default=[])
    p.add_argument("--write", action="store_true")
    a = p.parse_args()
    text = open(a.readme, encoding="utf-8").read()
    changes, todo = {}, []
    new_text = refresh_blocks(text, a.mpirun, a.bin, changes, todo)
    mapping = {}
    for old, news in changes.items():
        if len(news) == 1:
            mapping[old] = next(iter(news))
        else:
            todo.append(f"{old} became {', '.join(sorted(news))} in different runs: its quotes are not rewritten")
    new_text = refresh_prose(new_text, mapping, todo)
    for old, new in sorted(mapping.items()):
        print(f"{old} -> {new}")
    for t in todo:
        print("TODO:", t)
    if a.write and new_text != text:
        open(a.readme, "w", encoding="utf-8").write(new_text)
    print(f"{a.readme}: {len(mapping)} number(s) changed, {len(todo)} thing(s) for a person"
          + ("" if a.write else " (dry run: --write to rewrite)"))


if __name__ == "__main__":
    main()
