#!/usr/bin/env python3
"""Checks a run directory against the trace schema (README.md, "Traces"), end to end.

    python3 tests/tools/validate_trace.py runs/00_streams_events [--ranks N]

For every rank<R>.json: distributedInfo comes first with '"rank": R' (the regex HTA uses);
the header fields are present; every complete event has ts and dur with three decimals; the
complete events on each lane nest strictly; every ac2g flow has its start and its end and ids
are unique across the job; GPU events carry device, stream and correlation; a collective's
kernel names its link ("Link", and "Link tier" intra-node or network); no args key is
named "rank"; there are at least two ProfilerStep#N annotations and memory counters.
summary.json must list every rank, and no rank may report a race (the race check's findings).
A run that failed (otherData.incomplete, summary.json's "incomplete") is held to the same rules
but two: a flow may have its start without its end (a launch whose kernel never ran), and
summary.json may leave out the ranks it lists as "unreported_ranks". --expect-incomplete
requires the run to be marked so (the failure tests).

A run killed before its end (kill -9, a node lost) leaves each rank's file as it grew, step by
step (common/trace/trace.h): the header, marked incomplete, and the events, perhaps cut inside
the last one, and no summary.json. Such a file is read up to its last whole event, and the line
for it says where it ends; it is held to the rules of a failed run. Without a summary.json the
run must be --expect-incomplete.
Exits 1 with one line per problem.
"""
import json
import os
import re
import sys
from collections import defaultdict

REQUIRED = ["distributedInfo", "schemaVersion", "displayTimeUnit", "baseTimeNanoseconds",
            "deviceProperties", "otherData", "traceEvents"]
THREE_DECIMALS = re.compile(r'"(ts|dur)": -?\d+\.\d{3}[,}]')
LINK_TIERS = ("intra-node", "network")


def read_cut(text):
    """A trace cut inside its traceEvents array (the last key): the document with the whole
    events before the cut, and where it ends. None when the text is not cut so."""
    key = text.find('"traceEvents": [')
    if key < 0:
        return None
    try:
        doc = json.loads(text[:key] + '"traceEvents": []}')
    except json.JSONDecodeError:
        return None
    decoder = json.JSONDecoder()
    events, at = [], key + len('"traceEvents": [')
    end = at
    while True:
        while at < len(text) and text[at] in " \n\r\t,":
            at += 1
        try:
            event, at = decoder.raw_decode(text, at)
        except json.JSONDecodeError:
            break
        events.append(event)
        end = at
    doc["traceEvents"] = events
    return doc, (f"cut short at byte {len(text.encode('utf-8'))} (the run stopped before writing it whole): "
                 f"{len(events)} whole events read, to byte {len(text[:end].encode('utf-8'))}")


def check_rank(path, rank, problems, flow_ids, notes):
    text = open(path, encoding="utf-8", errors="replace").read()
    m = re.search(r'"rank":\s+(\d+)', text)
    if not m or int(m.group(1)) != rank:
        problems.append(f"{path}: HTA's rank regex finds {m.group(1) if m else 'nothing'}, expected {rank}")
    if not text.startswith('{"distributedInfo"'):
        problems.append(f"{path}: distributedInfo is not the first key")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        cut = read_cut(text)
        if cut is None:
            problems.append(f"{path}: not JSON, nor a trace cut inside its events: {e}")
            return True
        doc, where = cut
        notes.append(f"{path}: {where}")
        if not doc["otherData"].get("incomplete"):
            problems.append(f"{path}: cut short, but its otherData is not marked incomplete")
    incomplete = doc["otherData"].get("incomplete", False)
    keys = list(doc.keys())
    if keys != REQUIRED:
        problems.append(f"{path}: top-level keys {keys}, expected {REQUIRED}")
    if doc["distributedInfo"].get("rank") != rank:
        problems.append(f"{path}: distributedInfo.rank is {doc['distributedInfo'].get('rank')}")
    for line in text.splitlines()[:-1]:  # the last line may be cut
        if line.startswith('{"ph": "X"') and len(THREE_DECIMALS.findall(line)) != 2:
            problems.append(f"{path}: ts/dur not written with three decimals: {line[:120]}")
            break

    lanes = defaultdict(list)
    starts, ends = {}, {}
    steps = 0
    counters = 0
    for e in doc["traceEvents"]:
        args = e.get("args", {})
        if "rank" in args:
            problems.append(f"{path}: args key 'rank' in {e.get('name')}")
        ph = e.get("ph")
        if ph == "X":
            lanes[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"], e["name"]))
            if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
                for k in ("device", "stream"):
                    if k not in args:
                        problems.append(f"{path}: GPU event {e['name']} lacks args.{k}")
            if "Collective name" in args and not e["name"].startswith("nccl:wait"):
                if not args.get("Link") or args.get("Link tier") not in LINK_TIERS:
                    problems.append(f"{path}: collective {e['name']} names no link: Link {args.get('Link')!r}, "
                                    f"Link tier {args.get('Link tier')!r}")
            if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#"):
                steps += 1
        elif ph == "s":
            starts[e["id"]] = e
        elif ph == "f":
            ends[e["id"]] = e
            if e.get("bp") != "e":
                problems.append(f"{path}: flow end {e['id']} without \"bp\": \"e\"")
        elif ph == "C":
            counters += 1
    unmatched = set(ends) - set(starts) if incomplete else set(starts) ^ set(ends)
    if unmatched:
        problems.append(f"{path}: flows without both ends: {sorted(unmatched)[:5]}")
    for i in starts:
        if i in flow_ids:
            problems.append(f"{path}: flow id {i} also used in {flow_ids[i]}")
        flow_ids[i] = path
    if steps < (1 if incomplete else 2):
        problems.append(f"{path}: {steps} ProfilerStep annotations (HTA needs at least 2)")
    if counters == 0:
        problems.append(f"{path}: no memory counters")

    for lane, events in lanes.items():
        events.sort(key=lambda x: (x[0], -x[1]))
        stack = []
        for b, e, name in events:
            while stack and stack[-1][1] <= b + 1e-9:
                stack.pop()
            if stack and e > stack[-1][1] + 1e-9:
                problems.append(f"{path}: lane {lane}: '{name}' [{b}, {e}] overlaps '{stack[-1][2]}' "
                                f"[{stack[-1][0]}, {stack[-1][1]}] without nesting")
                break
            stack.append((b, e, name))
    return incomplete


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    run = sys.argv[1]
    ranks = sorted(int(m.group(1)) for f in os.listdir(run) if (m := re.fullmatch(r"rank(\d+)\.json", f)))
    problems = []
    if "--ranks" in sys.argv:
        want = int(sys.argv[sys.argv.index("--ranks") + 1])
        if ranks != list(range(want)):
            problems.append(f"{run}: rank files {ranks}, expected 0..{want - 1}")
    flow_ids, notes = {}, []
    marked = [check_rank(os.path.join(run, f"rank{r}.json"), r, problems, flow_ids, notes) for r in ranks]
    for n in notes:
        print("trace check:", n)
    expect_incomplete = "--expect-incomplete" in sys.argv
    if not os.path.exists(os.path.join(run, "summary.json")):
        if not expect_incomplete:
            problems.append(f"{run}: no summary.json")
        elif not all(marked):
            problems.append(f"{run}: no summary.json, and not every rank file is marked incomplete")
        for p in problems:
            print("trace check:", p)
        print(f"{run}: {len(ranks)} rank file(s), no summary.json (the run was killed), {len(problems)} problem(s)")
        return 1 if problems else 0
    summary = json.load(open(os.path.join(run, "summary.json")))
    reported = sorted([x["rank"] for x in summary["ranks"]] + summary.get("unreported_ranks", []))
    if reported != ranks:
        problems.append(f"{run}/summary.json: ranks {reported}, expected {ranks}")
    if expect_incomplete:
        if not summary.get("incomplete") or not all(marked):
            problems.append(f"{run}: not marked incomplete (summary.json: {summary.get('incomplete')}, "
                            f"rank files: {marked})")
    elif summary.get("incomplete") or any(marked):
        problems.append(f"{run}: marked incomplete (the run failed: {summary.get('failure')})")
    for x in summary["ranks"]:
        for race in x.get("races", []):
            problems.append(f"{run}: rank {x['rank']} race: {race}")
    for p in problems:
        print("trace check:", p)
    print(f"{run}: {len(ranks)} rank file(s), {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
