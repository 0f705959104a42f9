#!/usr/bin/env python3
"""Each rank finds its local rank on the node as the launcher says, and records where it came
from in its summary.json entry ("placement"); on a GPU that local rank picks the rank's GPU.

    python3 tests/harness/check_local_rank.py --mpirun "mpirun ..." --bin build/chapters/shardlab_ch00 --out DIR

Four launches of 2 ranks on this machine, each through `sh -c` so the launcher's variables can
be changed by hand before the chapter starts:
1. as mpirun starts them: Open MPI's OMPI_COMM_WORLD_LOCAL_RANK (0, 1);
2. as srun would: Open MPI's variable removed, SLURM_LOCALID set, here in reverse (1, 0), to
   show that it is read and not the ranks' order;
3. with neither: the ranks' place among those MPI finds on the node (0, 1);
4. a SLURM_LOCALID that is not a number: a warning naming it, and MPI's place instead.
"""
import argparse
import json
import os
import shlex
import subprocess
import sys


def launch(args, name, prelude):
    out = os.path.join(args.out, name)
    chapter = f"exec {shlex.quote(args.bin)} --steps 1 --trace-dir {shlex.quote(args.out)} --run-name {name}"
    cmd = shlex.split(args.mpirun) + ["-np", "2", "sh", "-c", prelude + chapter]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        sys.exit(f"check_local_rank: {name}: exit {p.returncode}\n{p.stdout}{p.stderr}")
    with open(os.path.join(out, "summary.json")) as f:
        ranks = sorted(json.load(f)["ranks"], key=lambda r: r["rank"])
    return [r["placement"] for r in ranks], p.stderr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mpirun", required=True)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    problems = []

    def expect(name, placements, local_ranks, source):
        got = [(p["local_rank"], p["local_rank_from"]) for p in placements]
        want = [(r, source) for r in local_ranks]
        print(f"{name}: {got}")
        if got != want:
            problems.append(f"{name}: placements {got}, expected {want}")
        if any(p["ranks_on_node"] != 2 for p in placements):
            problems.append(f"{name}: ranks_on_node {[p['ranks_on_node'] for p in placements]}, expected 2 each")

    no_ompi = "unset OMPI_COMM_WORLD_LOCAL_RANK SLURM_LOCALID; "
    placements, _ = launch(args, "local_rank_ompi", "unset SLURM_LOCALID; ")
    expect("mpirun", placements, [0, 1], "OMPI_COMM_WORLD_LOCAL_RANK")
    placements, _ = launch(args, "local_rank_slurm", no_ompi + "export SLURM_LOCALID=$((1 - OMPI_COMM_WORLD_RANK)); ")
    expect("srun (SLURM_LOCALID by hand)", placements, [1, 0], "SLURM_LOCALID")
    placements, _ = launch(args, "local_rank_mpi", no_ompi)
    expect("no launcher variable", placements, [0, 1], "MPI_COMM_TYPE_SHARED")
    placements, err = launch(args, "local_rank_bad", no_ompi + "export SLURM_LOCALID=first; ")
    expect("SLURM_LOCALID=first", placements, [0, 1], "MPI_COMM_TYPE_SHARED")
    if "warning: SLURM_LOCALID='first' is not a local rank" not in err:
        problems.append(f"SLURM_LOCALID=first: no warning naming it on stderr:\n{err}")

    for p in problems:
        print("check_local_rank:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
