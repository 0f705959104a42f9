#!/usr/bin/env python3
"""Checks that every relative link in the repository's Markdown files leads somewhere.

    python3 tests/repository/check_links.py REPO_ROOT

For each `[text](target)` and `![alt](target)` in a file git tracks ending in .md, a target
that is not a URL (no scheme such as https:) must name a file or
directory that exists, taken from the linking file's directory. A #fragment must name an anchor
of the target Markdown file (or of the linking file, for a bare #fragment): a heading, as GitHub
turns it into an id (lower case, punctuation dropped, spaces to dashes, -1, -2 ... for repeats),
or an explicit `<a id="...">`. Links inside code blocks and code spans are not links.

Every fenced code block must close, with a fence alone on its line: a closing fence with text
after it does not close the block, and the prose after it renders as code (and its links would
go unchecked).

Prints one line per broken link, `file:line: target: why`, and exits 1; else how many links it
checked, and exits 0.
"""
import os
import re
import subprocess
import sys

LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^()\s]+)(?:\s+\"[^\"]*\")?\)")
EXPLICIT_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def tracked_markdown(root):
    out = subprocess.run(["git", "-C", root, "ls-files", "*.md"], capture_output=True, text=True, check=True)
    return [p for p in out.stdout.splitlines() if p]


def prose_lines(text):
    """(line number, line) outside fenced code blocks, with code spans blanked."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            yield number, re.sub(r"`[^`]*`", "``", line)


def fence_problems(rel, text):
    """A block opened by ``` and never closed, or closed by a fence with text after it."""
    problems, opened = [], None
    for number, line in enumerate(text.splitlines(), 1):
        fence = line.strip()
        if not fence.startswith("```"):
            continue
        if opened is None:
            opened = number
        elif fence == "```":
            opened = None
        else:
            problems.append(f"{rel}:{number}: a code block's closing fence has text after it: {fence[:40]}")
            opened = None
    if opened is not None:
        problems.append(f"{rel}:{opened}: this code block never closes")
    return problems


def slug(heading):
    """GitHub's id for a heading's text."""
    text = re.sub(r"<[^>]+>", "", heading)                   # inline HTML
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)      # links keep their text
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path, cache={}):
    if path not in cache:
        found, seen = set(), {}
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for _, line in prose_lines(text):
            found.update(EXPLICIT_ANCHOR.findall(line))
            m = HEADING.match(line)
            if m:
                base = slug(m.group(2))
                n = seen.get(base, 0)
                seen[base] = n + 1
                found.add(base if n == 0 else f"{base}-{n}")
        with open(path, encoding="utf-8") as f:  # anchors written inside code spans count too
            found.update(EXPLICIT_ANCHOR.findall(f.read()))
        cache[path] = found
    return cache[path]


def check(root):
    root = os.path.abspath(root)
    problems, checked = [], 0
    for rel in tracked_markdown(root):
        path = os.path.join(root, rel)
        if not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8") as f:
            text = f.read()
        problems += fence_problems(rel, text)
        for number, line in prose_lines(text):
            for target in LINK.findall(line):
                if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # https:, mailto:, ...
                    continue
                checked += 1
                file_part, _, fragment = target.partition("#")
                dest = path if not file_part else os.path.normpath(os.path.join(os.path.dirname(path), file_part))
                where = f"{rel}:{number}: {target}"
                if not os.path.realpath(dest).startswith(root + os.sep) and os.path.realpath(dest) != root:
                    problems.append(f"{where}: leaves the repository")
                elif not os.path.exists(dest):
                    problems.append(f"{where}: no such file or directory")
                elif fragment and dest.endswith(".md") and fragment not in anchors(dest):
                    problems.append(f"{where}: no heading or <a id> '{fragment}' in {os.path.relpath(dest, root)}")
    return checked, problems


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    checked, problems = check(argv[1])
    for p in problems:
        print(p)
    if problems:
        return 1
    print(f"checked {checked} relative links: all lead somewhere; every code block closes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
