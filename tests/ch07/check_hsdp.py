#!/usr/bin/env python3
"""Checks chapter 07's HSDP on the timeline it writes.

    python3 tests/ch07/check_hsdp.py RUN_DIR --gpus-per-node G --shard S --replicate R --units U [--grad-accum K]

On every rank file and every ProfilerStep:

  * every all-gather's group ("Process Group Ranks") is the rank's shard group: S contiguous
    ranks, and when S divides G they lie on one node, so no all-gather crosses the network;
  * the reduce-scatters run in the same shard group; every all-reduce runs in the replicate
    group (the same local rank on each of the R nodes), on the stream named "all_reduce";
  * the k-th all-reduce of a step starts after the k-th reduce-scatter has ended: the shard is
    summed across nodes only once the node has reduced it (the all_reduce stream waits on
    post_backward);
  * per step, K x U reduce-scatters (U FlatParams, K micro-batches) and as many all-reduces.
    With S = 1 there is no reduce-scatter, and still one all-reduce per unit and pass:
    pytorch/pytorch#154888 is the bug where HSDP skipped it.

Prints what it found; exits 1 on a problem.
"""
import argparse
import glob
import json
import os
import re
import sys


def ranks_of(e):
    return tuple(json.loads(str(e["args"]["Process Group Ranks"])))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir")
    ap.add_argument("--gpus-per-node", type=int, required=True)
    ap.add_argument("--shard", type=int, required=True)
    ap.add_argument("--replicate", type=int, required=True)
    ap.add_argument("--units", type=int, required=True, help="FlatParams: the model's blocks + 1")
    ap.add_argument("--grad-accum", type=int, default=1)
    args = ap.parse_args()
    S, R, G = args.shard, args.replicate, args.gpus_per_node
    files = sorted(glob.glob(os.path.join(args.run_dir, "rank*.json")))
    problems = [f"{args.run_dir}: no rank files"] if len(files) != S * R else []
    checked_steps = gathers = all_reduces = 0
    for path in files:
        rank = int(re.search(r"rank(\d+)\.json$", path).group(1))
        shard_group = tuple(range(rank // S * S, rank // S * S + S))
        replicate_group = tuple(rank % S + i * S for i in range(R))
        with open(path) as f:
            events = json.load(f)["traceEvents"]
        streams = {e["tid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"}
        comm = [e for e in events if e.get("ph") == "X" and e.get("cat") == "kernel" and "Collective name" in e.get("args", {})]
        for step in (e for e in events if e.get("ph") == "X" and e.get("name", "").startswith("ProfilerStep#")):
            inside = sorted((e for e in comm if step["ts"] <= e["ts"] < step["ts"] + step["dur"]), key=lambda e: e["ts"])
            by_name = {n: [e for e in inside if e["args"]["Collective name"] == n] for n in ("allgather", "reduce_scatter", "allreduce")}
            where = f"{os.path.basename(path)} {step['name']}"
            for e in by_name["allgather"]:
                gathers += 1
                if ranks_of(e) != shard_group:
                    problems.append(f"{where}: an all-gather over {ranks_of(e)}, not the shard group {shard_group}")
                elif S <= G and G % S == 0 and len({r // G for r in ranks_of(e)}) != 1:
                    problems.append(f"{where}: an all-gather spans nodes: {ranks_of(e)}")
            for e in by_name["reduce_scatter"]:
                if ranks_of(e) != shard_group:
                    problems.append(f"{where}: a reduce-scatter over {ranks_of(e)}, not the shard group {shard_group}")
            expect = args.grad_accum * args.units
            if len(by_name["allreduce"]) != expect:
                problems.append(f"{where}: {len(by_name['allreduce'])} all-reduces, expected {expect} (one per unit and pass)")
            if S > 1 and len(by_name["reduce_scatter"]) != expect:
                problems.append(f"{where}: {len(by_name['reduce_scatter'])} reduce-scatters, expected {expect}")
            for k, e in enumerate(by_name["allreduce"]):
                all_reduces += 1
                if ranks_of(e) != replicate_group:
                    problems.append(f"{where}: an all-reduce over {ranks_of(e)}, not the replicate group {replicate_group}")
                if not streams.get(e["tid"], "").endswith("all_reduce"):
                    problems.append(f"{where}: an all-reduce on '{streams.get(e['tid'])}', not the all_reduce stream")
                if S > 1 and k < len(by_name["reduce_scatter"]):
                    rs = by_name["reduce_scatter"][k]
                    if e["ts"] < rs["ts"] + rs["dur"] - 1e-3:
                        problems.append(f"{where}: all-reduce {k} starts at {e['ts']} before its reduce-scatter ends "
                                        f"({rs['ts'] + rs['dur']})")
            checked_steps += 1
    print(f"{args.run_dir}: {len(files)} ranks, {checked_steps} rank-steps, {gathers} all-gathers, "
          f"{all_reduces} all-reduces checked (mesh {R} x {S}, {G} GPUs a node)")
    for p in problems[:20]:
        print("problem:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
