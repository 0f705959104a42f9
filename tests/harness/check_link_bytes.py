#!/usr/bin/env python3
"""Checks summary.json's bytes per link tier against the rank files, and which tier they are on.

    python3 tests/harness/check_link_bytes.py RUN_DIR --tier intra-node|network

For every rank file and every step (ProfilerStep#N on the CPU thread), the collective kernels
starting in the step (nccl... kernels with "Collective name", the nccl:wait slices left out) are
recounted from their args as common/trace/metrics.h defines link bytes: the bytes S ("Out msg
nelems" of an all-gather, else "In msg nelems", times the dtype's size) times nccl-tests' bus
factor (2(n-1)/n all-reduce, (n-1)/n all-gather and reduce-scatter, 1 otherwise), to the nearest
byte, added to the kernel's "Link tier". Each step's sums must equal that rank's step entry in
summary.json (intra_node_bytes, network_bytes), and every byte must be on --tier: some there,
none on the other. Prints the totals; exits 1 on a mismatch.
"""
import argparse
import glob
import json
import math
import os
import sys

DTYPE_BYTES = {"Float": 4, "BFloat16": 2, "Half": 2, "Double": 8, "Int": 4, "Long": 8, "Byte": 1, "Char": 1}
KEYS = {"intra-node": "intra_node_bytes", "network": "network_bytes"}


def bus_factor(name, n):
    norm = name.replace("_", "").lower()
    if norm.startswith("allreduce"):
        return 2 * (n - 1) / n
    if norm.startswith("allgather") or norm.startswith("reducescatter"):
        return (n - 1) / n
    return 1


def link_bytes(args):
    name = args["Collective name"]
    nelems = args["Out msg nelems"] if name.replace("_", "").lower().startswith("allgather") else args["In msg nelems"]
    s = nelems * DTYPE_BYTES[args["dtype"]]
    return math.floor(s * bus_factor(name, max(args["Group size"], 1)) + 0.5)  # llround, for bytes >= 0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("run")
    p.add_argument("--tier", choices=sorted(KEYS), required=True)
    a = p.parse_args()
    with open(os.path.join(a.run, "summary.json")) as f:
        ranks = {r["rank"]: r for r in json.load(f)["ranks"]}
    problems, totals = [], {key: 0 for key in KEYS.values()}
    for path in sorted(glob.glob(os.path.join(a.run, "rank*.json"))):
        rank = int(os.path.basename(path)[4:-5])
        with open(path) as f:
            events = json.load(f)["traceEvents"]
        kernels = [e for e in events if e.get("ph") == "X" and e["name"].startswith("nccl") and
                   not e["name"].startswith("nccl:wait") and "Collective name" in e.get("args", {})]
        steps = [e for e in events if e.get("ph") == "X" and e["name"].startswith("ProfilerStep#")]
        want = {s["step"]: s for s in ranks[rank]["steps"]}
        for step in steps:
            n = int(step["name"].split("#")[1])
            counted = {key: 0 for key in KEYS.values()}
            for k in kernels:
                if step["ts"] <= k["ts"] < step["ts"] + step["dur"]:
                    counted[KEYS[k["args"]["Link tier"]]] += link_bytes(k["args"])
            for key, value in counted.items():
                totals[key] += value
                if value != want[n][key]:
                    problems.append(f"rank {rank} step {n}: {key} {want[n][key]} in summary.json, {value} from the trace")
    print(f"{a.run}: " + ", ".join(f"{key} {value}" for key, value in totals.items()))
    other = KEYS["network" if a.tier == "intra-node" else "intra-node"]
    if totals[KEYS[a.tier]] == 0:
        problems.append(f"no bytes on the {a.tier} tier")
    if totals[other] != 0:
        problems.append(f"{totals[other]} bytes on the other tier ({other}), none expected")
    for line in problems:
        print("FAIL: " + line)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
