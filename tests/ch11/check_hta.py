#!/usr/bin/env python3
"""Holistic Trace Analysis reads chapter 11's reference traces and finds every pass by its name.

    python3 tests/ch11/check_hta.py TRACES_DIR

HTA (pip package HolisticTraceAnalysis) is not among the project's packages: without it this
prints "skipped: ..." and exits 77, which ctest counts as skipped. With it, for the two reference
runs (traces/11_gpipe and 11_pipeline_parallel, 1F1B: GPT-2 small, 4 stages, 8 micro-batches), HTA's
get_gpu_user_annotation_breakdown must find the passes the chapter names on the compute streams
(RecordFunction's gpu_user_annotation ranges): F0 .. F7, B0 .. B7 and the optimizer on every rank; a backward
must take about twice its forward (its matmuls do twice the FLOPs: 1.8 to 2.2 times); and each
rank's passes must take the same time under both schedules (within 1 %): a schedule moves the
passes, it does not change them. HTA analyses every ProfilerStep but the last: step 1 of the 2.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import hta_runs  # noqa: E402


def passes(traces, run):
    """{rank: {name: mean duration in us}} of the run's gpu_user_annotation ranges, as HTA reads them."""
    with hta_runs.analysis(traces, run) as t:
        table = t.get_gpu_user_annotation_breakdown(visualize=False, num_kernels=1000)
    out = {}
    for _, row in table.iterrows():
        out.setdefault(int(row["rank"]), {})[row["name"]] = float(row["mean (us)"])
    return out


def main():
    if not hta_runs.available():
        return 77
    traces = sys.argv[1]
    problems = []
    expected = {f"{kind}{m}" for kind in "FB" for m in range(8)} | {"optimizer"}
    found = {run: passes(traces, run) for run in ("11_gpipe", "11_pipeline_parallel")}
    for run, ranks in found.items():
        if sorted(ranks) != [0, 1, 2, 3]:
            problems.append(f"{run}: HTA found annotations on ranks {sorted(ranks)}, not 0-3")
        for rank, names in sorted(ranks.items()):
            if set(names) != expected:
                problems.append(f"{run} rank {rank}: HTA found {sorted(names)}, not F0-F7, B0-B7 and optimizer")
                continue
            forward = sum(names[f"F{m}"] for m in range(8)) / 8
            backward = sum(names[f"B{m}"] for m in range(8)) / 8
            print(f"{run} rank {rank}: a forward {forward:.0f} us, a backward {backward:.0f} us ({backward / forward:.2f}x)")
            if not 1.8 <= backward / forward <= 2.2:
                problems.append(f"{run} rank {rank}: a backward takes {backward / forward:.2f} x its forward, not about 2")
    for rank in set(found["11_gpipe"]) & set(found["11_pipeline_parallel"]):
        for name, us in found["11_gpipe"][rank].items():
            other = found["11_pipeline_parallel"][rank].get(name)
            if other is not None and abs(other - us) > 0.01 * us:
                problems.append(f"rank {rank} {name}: {us:.0f} us under GPipe, {other:.0f} us under 1F1B")
    for p in problems:
        print("FAIL", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
