"""Holistic Trace Analysis on a shardlab run directory, for the chapters' HTA checks.

    import hta_runs
    if not hta_runs.available():
        sys.exit(77)                       # ctest's "skipped"
    with hta_runs.analysis("traces", "11_pipeline_parallel") as t:
        t.get_gpu_user_annotation_breakdown(visualize=False)

HTA (pip package HolisticTraceAnalysis) is not among the project's packages. It reads every trace
file of a directory, and a run directory holds summary.json too: the rank files are copied to a
temporary directory of their own. HTA's warnings and its logging are silenced.
"""
import contextlib
import logging
import os
import shutil
import tempfile
import warnings


def available():
    """True when HTA imports; otherwise prints the skip line ctest shows."""
    try:
        import hta  # noqa: F401
    except ImportError:
        print("skipped: Holistic Trace Analysis is not installed (pip install HolisticTraceAnalysis)")
        return False
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    return True


@contextlib.contextmanager
def analysis(traces, run):
    """HTA's TraceAnalysis of the rank files of traces/run."""
    from hta.trace_analysis import TraceAnalysis

    with tempfile.TemporaryDirectory() as tmp:
        for name in os.listdir(os.path.join(traces, run)):
            if name.startswith("rank"):
                shutil.copy(os.path.join(traces, run, name), tmp)
        yield TraceAnalysis(trace_dir=tmp)
