#!/usr/bin/env python3
"""Holistic Trace Analysis reads chapter 10's reference traces and sees what the chapter says.

    python3 tests/ch10/check_hta.py TRACES_DIR

HTA (pip package HolisticTraceAnalysis) is not among the project's packages: without it this
prints "skipped: ..." and exits 77, which ctest counts as skipped. With it, for the three
reference runs (traces/10_tensor_parallel, 10_sequence_parallel, 10_async_tp), HTA's
get_comm_comp_overlap must find no communication under computation on any rank for tensor and
sequence parallelism (every f and g is on the compute stream's critical path), and some on every
rank for async tensor parallelism (its exchanges run under the matmuls). HTA analyses every
ProfilerStep but the last: step 1 of the 2.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import hta_runs  # noqa: E402


def main():
    if not hta_runs.available():
        return 77
    traces = sys.argv[1]
    problems = []
    for run, overlapped in (("10_tensor_parallel", False), ("10_sequence_parallel", False), ("10_async_tp", True)):
        with hta_runs.analysis(traces, run) as t:
            overlap = t.get_comm_comp_overlap(visualize=False)
        pct = dict(zip(overlap["rank"], overlap["comp_comm_overlap_pctg"]))
        print(f"{run}: HTA's communication overlapped with computation, per rank: "
              + ", ".join(f"rank {r} {p:.2f}%" for r, p in sorted(pct.items())))
        for rank, p in pct.items():
            if overlapped and p <= 0:
                problems.append(f"{run} rank {rank}: HTA finds no overlap; async TP's exchanges should run under the matmuls")
            if not overlapped and p != 0:
                problems.append(f"{run} rank {rank}: HTA finds {p:.2f}% overlap; every collective should be exposed")
    for p in problems:
        print("check_hta:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
