#!/usr/bin/env python3
"""Checks chapter 08's per-rank work against the layouts' formulas (zigzag: S(S+1)/(2N) on every
rank, zhuzilin/ring-flash-attention's zigzag_ring_flash_attn.py layout; contiguous: rank r's causal
rows): the unmasked score entries each rank's attention computed, per sequence and head,
as each rank's entry of summary.json reports them.

    python3 tests/ch08/check_context_parallel.py runs/x/summary.json

zigzag: every rank S (S + 1) / (2 N). contiguous: rank r, chunks of s = S / N tokens,
s (s + 1) / 2 for its own chunk plus r s^2 for the r earlier ones (N = 8, S = 1024: 8256 on rank
0 ... 122944 on rank 7). Groups of N consecutive ranks share a sequence.
"""
import json
import sys


def expected(layout, S, N, r):
    if layout == "zigzag":
        return S * (S + 1) // (2 * N)
    s = S // N
    return s * (s + 1) // 2 + r * s * s


def main():
    summary = json.load(open(sys.argv[1]))
    config = summary["config"]
    S, layout = config["seq-len"], config["cp-layout"]
    world = summary["world_size"]
    N = config["cp"] or world
    failed = 0
    for entry in summary["ranks"]:
        r = entry["rank"] % N
        got = entry["figures"]["score_entries"]["value"]
        want = expected(layout, S, N, r)
        ok = got == want
        failed += not ok
        print(f"{'ok:  ' if ok else 'FAIL:'} rank {entry['rank']} ({layout}, S {S}, N {N}, position {r} in its ring): "
              f"{got:.0f} score entries, the formula {want}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
