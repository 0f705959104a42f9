#!/usr/bin/env python3
"""Checks that the code includes in the order the repository says it is built.

    python3 tests/repository/check_include_order.py REPO_ROOT

Two rules, each stated in a README and kept here:

1. common/'s parts (common/README.md's table, top to bottom): a file in one part includes only
   its own part and the parts above it, never one below (`#include "model/ops.h"` names the
   part it reaches into).
2. The chapters (chapters/NN_name/): a chapter includes its own files and earlier chapters'
   headers, never a later chapter's, so a student reading chapter 04 never meets chapter 07.

It prints one line per include that breaks a rule, `file:line: why`, and exits 1, or prints
what it checked and exits 0.
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
TABLE_ROW = re.compile(r"^\|\s*\[`(\w+)/`\]")
CHAPTER_DIR = re.compile(r"^(\d\d)_\w+$")


def common_parts(root):
    """common/'s parts in the order of the table in common/README.md."""
    parts = []
    with open(os.path.join(root, "common", "README.md"), encoding="utf-8") as f:
        for line in f:
            m = TABLE_ROW.match(line)
            if m:
                parts.append(m.group(1))
    return parts


def includes(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, 1):
            m = INCLUDE.match(line)
            if m:
                yield number, m.group(1)


def sources(folder):
    for dirpath, _, names in os.walk(folder):
        for name in sorted(names):
            if name.endswith((".h", ".cpp", ".cu", ".cuh")):
                yield os.path.join(dirpath, name)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    root = sys.argv[1]
    problems, checked = [], 0

    parts = common_parts(root)
    if len(parts) < 2:
        sys.exit("common/README.md: found no table of parts (rows like | [`trace/`](trace/) | ...)")
    rank = {p: i for i, p in enumerate(parts)}
    for part in sorted(os.listdir(os.path.join(root, "common"))):
        folder = os.path.join(root, "common", part)
        if not os.path.isdir(folder) or part == "profiles":
            continue
        if part not in rank and any(True for _ in sources(folder)):
            problems.append(f"common/{part}/: a part with code that common/README.md's table does not list")
            continue
        for path in sources(folder):
            checked += 1
            for number, target in includes(path):
                used = target.split("/")[0]
                if "/" in target and used in rank and rank[used] > rank[part]:
                    problems.append(f"{os.path.relpath(path, root)}:{number}: {part}/ includes {target}, "
                                    f"but {used}/ comes below {part}/ in common/README.md")

    chapters = os.path.join(root, "chapters")
    for name in sorted(os.listdir(chapters)):
        m = CHAPTER_DIR.match(name)
        if not m:
            continue
        for path in sources(os.path.join(chapters, name)):
            checked += 1
            for number, target in includes(path):
                other = CHAPTER_DIR.match(target.split("/")[0])
                if other and int(other.group(1)) > int(m.group(1)):
                    problems.append(f"{os.path.relpath(path, root)}:{number}: chapter {m.group(1)} includes "
                                    f"{target}, a later chapter's")

    for p in problems:
        print(p)
    if problems:
        return 1
    print(f"{checked} files include in order: common/ as {' > '.join(parts)}, chapters no later chapter")
    return 0


if __name__ == "__main__":
    sys.exit(main())
