#!/usr/bin/env python3
"""Checks that ctest runs every Catch2 test case exactly once, and nothing else.

catch_discover_tests turns each TEST_CASE into one ctest entry whose command passes the case's
name as a Catch2 test spec. A name that CMake or Catch2 reads differently (a ';' splits it into
two entries, each matching nothing) gives entries that run no case and still pass. This check
asks ctest for its entries (ctest --show-only=json-v1), asks each binary which cases each
entry's spec selects (--list-test-names-only), and fails unless every entry selects exactly one
case and every case defined in the sources is selected by exactly one entry.

    python3 tests/repository/check_catch_discovery.py BUILD_DIR --suite BINARY SOURCE... [--suite ...]

SOURCE: the files compiled into BINARY. A binary's entries are the ctest entries that run it,
whatever their names' prefixes (shardlab_tests has two: "unit: ..." for common/, none for a
chapter's "chNN: ..." cases).
"""
import collections
import json
import re
import subprocess
import sys
from pathlib import Path

def cases_in_sources(sources):
    """Every TEST_CASE name in the sources (adjacent string literals joined), as written."""
    names = []
    for path in sources:
        text = Path(path).read_text()
        for m in re.finditer(r'\bTEST_CASE\(\s*((?:"(?:[^"\\]|\\.)*"\s*)+)', text):
            names.append("".join(re.findall(r'"((?:[^"\\]|\\.)*)"', m.group(1))))
    return names


def selected(binary, spec_args):
    out = subprocess.run([binary, *spec_args, "--list-test-names-only"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if line.strip()]


def parse_suites(args):
    """--suite BINARY SOURCE... groups -> {binary: [sources]}"""
    suites, current = {}, None
    for a in args:
        if a == "--suite":
            current = []
            suites[len(suites)] = current
        else:
            current.append(a)
    return {g[0]: g[1:] for g in suites.values()}


def main():
    build_dir, suites = sys.argv[1], parse_suites(sys.argv[2:])
    listing = subprocess.run(["ctest", "--test-dir", build_dir, "--show-only=json-v1"],
                             capture_output=True, text=True, check=True).stdout
    tests = json.loads(listing)["tests"]
    problems, checked = [], 0
    for binary_name, sources in suites.items():
        entries = [t for t in tests if any(c.endswith("/" + binary_name) for c in t.get("command", []))]
        if not entries:
            continue  # that suite is not built here (the viewer needs its packages)
        binary = next(c for c in entries[0]["command"] if c.endswith(binary_name))
        defined = cases_in_sources(sources)
        listed = selected(binary, [])
        if sorted(defined) != sorted(listed):
            problems.append(f"{binary_name}: the sources define {len(defined)} cases, the binary lists {len(listed)}: "
                            f"{sorted(set(defined) ^ set(listed))}")
        runs = collections.Counter()
        for t in entries:
            command = t["command"]
            args = command[command.index(binary) + 1:]
            # The spec is what comes before the first option (catch_discover_tests' EXTRA_ARGS).
            spec = [a for a in args[:next((i for i, a in enumerate(args) if a.startswith("-")), len(args))]]
            hits = selected(binary, spec)
            if len(hits) != 1:
                problems.append(f"ctest entry '{t['name']}' selects {len(hits)} cases {hits}, not one")
            runs.update(hits)
            checked += 1
        for name in listed:
            if runs[name] != 1:
                problems.append(f"{binary_name}: case '{name}' is run by {runs[name]} ctest entries, not one")
        print(f"{binary_name}: {len(defined)} cases in the sources, {len(listed)} in the binary, "
              f"{len(entries)} ctest entries")
    if checked == 0:
        problems.append("no Catch2 ctest entries found: is BUILD_DIR the build directory?")
    for p in problems:
        print("check_catch_discovery:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
