#!/usr/bin/env python3
"""Checks that the repository cites no file outside itself.

    python3 tests/repository/check_no_outside_refs.py REPO_ROOT

The repository must stand alone: it cites primary sources (URLs, files of other projects named
by project and path), never a file that lives next to the checkout. This scans every file git
tracks (`git -C REPO_ROOT ls-files`), as it is in the work tree, skipping traces/, *.png and
binary files (a NUL byte in the first 8 KiB), and reports every line that

1. names a file known to live outside the repository (FACTS.md, DESIGN.md) when the repository
   tracks no file of that name, or cites one by its bare name (FACTS, "FACTS' example") or an
   issue of the project's tracker by number (Issue 19), which no reader of the repository can
   open;
2. names a directory known to live outside it (shared/reference, shared/seeds, ../shared) when
   the repository tracks no shared/ directory; or
3. holds a relative path starting with ../ (a Markdown link, a default path in a notebook, ...)
   that, taken from the directory of the file it is in, leaves the repository root. A ../ glued
   to something before it (`$(dirname "$0")/../..`, `https://a/b/../c`, `.../x`) is not taken
   for the start of a path.

It prints one line per problem, `file:line: text`, and exits 1, or prints how many files it
checked and exits 0. This file itself is not scanned: its docstring names what it looks for.
"""
import os
import re
import subprocess
import sys

# Built from pieces so the patterns read the same wherever this file is copied.
OUTSIDE_FILES = ["FACTS" + ".md", "DESIGN" + ".md"]
OUTSIDE_DIRS = ["shared/" + "reference", "shared/" + "seeds", "../" + "shared"]
# The bare names: the notes file without its extension, and the tracker's issue numbers.
BARE_CITATIONS = re.compile(r"\b" + "FA" + r"CTS\b|\b[Ii]" + r"ssue \d+\b")
# A path that starts with ../ and is not glued to a word, a dot, a slash or a dash before it;
# it runs up to whitespace, a quote, a bracket, a comma, a semicolon or a #fragment.
PARENT_PATH = re.compile(r"(?<![\w./\-$~])((?:\.\./)+[^\s\"'`()<>\[\]{},;#\\]*)")


def tracked_files(root):
    out = subprocess.run(["git", "-C", root, "ls-files", "-z"], check=True,
                         stdout=subprocess.PIPE).stdout
    return [p for p in out.decode("utf-8", "surrogateescape").split("\0") if p]


def is_text(path):
    with open(path, "rb") as f:
        return b"\0" not in f.read(8192)


def problems_in_line(rel, line, outside_files, outside_dirs):
    found = []
    for name in outside_files:
        if name in line:
            found.append(name)
    for d in outside_dirs:
        if d in line:
            found.append(d)
    found += [m.group(0) for m in BARE_CITATIONS.finditer(line) if m.group(0) + ".md" not in found]
    for m in PARENT_PATH.finditer(line):
        target = os.path.normpath(os.path.join(os.path.dirname(rel), m.group(1)))
        if target == ".." or target.startswith(".." + os.sep):
            found.append(m.group(1))
    return found


def check(root):
    """Returns (number of files checked, list of 'file:line: text' problems)."""
    root = os.path.abspath(root)
    files = tracked_files(root)
    names = {os.path.basename(p) for p in files}
    has_shared = any(p.startswith("shared/") for p in files)
    outside_files = [n for n in OUTSIDE_FILES if n not in names]
    outside_dirs = [] if has_shared else OUTSIDE_DIRS
    me = os.path.realpath(os.path.abspath(__file__))
    problems = []
    checked = 0
    for rel in files:
        path = os.path.join(root, rel)
        if rel.startswith("traces/") or rel.endswith(".png") or not os.path.isfile(path):
            continue
        if os.path.realpath(path) == me:  # its docstring names every pattern it looks for
            continue
        if not is_text(path):
            continue
        checked += 1
        with open(path, encoding="utf-8", errors="replace") as f:
            for number, line in enumerate(f, 1):
                if problems_in_line(rel, line, outside_files, outside_dirs):
                    problems.append(f"{rel}:{number}: {line.strip()}")
    return checked, problems


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    checked, problems = check(argv[1])
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} line(s) cite something outside the repository; cite the primary "
              "source (a URL, or a project and its file path) instead", file=sys.stderr)
        return 1
    print(f"checked {checked} files: no reference to a file outside the repository")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
