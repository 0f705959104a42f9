"""Read shardlab run directories and draw their timelines with matplotlib.

    import shardlab_traces as st
    run = st.load_run("runs/00_streams_events")     # rank files + summary.json
    st.plot_timeline(run, rank=0, window=run.steps(0)[-1], path="timeline.png")

Kept small on purpose: the metrics themselves come from summary.json, which the C++ metrics
library writes; this module only reads events and draws them.
"""
import json
import os
import re

COLORS = {  # one colour per kind of work, as in the viewer
    "compute": "#4C72B0",
    "comm": "#DD8452",
    "comm_wait": "#F5C6A5",
    "memcpy": "#55A868",
    "runtime": "#8C8C8C",
    "cpu_op": "#C9C9C9",
    "sync": "#C44E52",
}


def kind_of(event):
    cat, name = event.get("cat", ""), event.get("name", "")
    if cat == "kernel":
        if name.startswith("nccl:wait"):
            return "comm_wait"
        return "comm" if name.startswith("nccl") else "compute"
    if cat in ("gpu_memcpy", "gpu_memset"):
        return "memcpy"
    if cat == "cuda_runtime":
        return "sync" if "Synchronize" in name else "runtime"
    return "cpu_op"


class Run:
    def __init__(self, path):
        self.path = path
        self.summary = json.load(open(os.path.join(path, "summary.json")))
        files = sorted((int(m.group(1)), f) for f in os.listdir(path) if (m := re.fullmatch(r"rank(\d+)\.json", f)))
        self.ranks = {r: json.load(open(os.path.join(path, f))) for r, f in files}

    def events(self, rank):
        return self.ranks[rank]["traceEvents"]

    def lane_names(self, rank):
        names = {}
        for e in self.events(rank):
            if e.get("ph") == "M" and e["name"] == "thread_name":
                names[(e["pid"], e["tid"])] = e["args"]["name"]
        return names

    def steps(self, rank):
        """(start_us, end_us) of each ProfilerStep#N on this rank, in order."""
        out = [(e["ts"], e["ts"] + e["dur"]) for e in self.events(rank)
               if e.get("ph") == "X" and e["name"].startswith("ProfilerStep#")]
        return sorted(out)

    def figure(self, key):
        return self.summary["figures"][key]["value"]


def load_run(path):
    return Run(path)


def find_slice(run, rank, name, cat=None):
    """The first complete event of this rank with this name (and category)."""
    for e in run.events(rank):
        if e.get("ph") == "X" and e["name"] == name and (cat is None or e.get("cat") == cat):
            return e
    raise KeyError(f"rank {rank}: no slice named {name!r}")


def plot_timeline(run, rank, window, path=None, title=None, annotate=(), ax=None, label_min_us=None,
                  device_only=False):
    """Draws one rank's lanes (CPU thread on top, then each stream) over window=(t0, t1) in us.

    annotate: names of CPU-lane slices to label above the lanes (for example the cases of a lesson).
    device_only: leave out the CPU thread (for one row per rank in multi-rank pictures).
    """
    import matplotlib.pyplot as plt

    t0, t1 = window
    names = run.lane_names(rank)
    lanes = sorted({(e["pid"], e["tid"]) for e in run.events(rank) if e.get("ph") == "X"},
                   key=lambda pt: (pt[0] < 100000, pt[1]))  # the host (pid >= 100000) first
    if device_only:
        lanes = [l for l in lanes if l[0] < 100000 and any(
            e.get("ph") == "X" and (e["pid"], e["tid"]) == l and window[0] <= e["ts"] <= window[1] for e in run.events(rank))]
    own_ax = ax is None
    if own_ax:
        fig, ax = plt.subplots(figsize=(12, 0.55 * len(lanes) + 1.4))
    if label_min_us is None:
        label_min_us = (t1 - t0) / 25
    for row, lane in enumerate(lanes):
        for e in run.events(rank):
            if e.get("ph") != "X" or (e["pid"], e["tid"]) != lane:
                continue
            b, d = e["ts"], e["dur"]
            if b + d < t0 or b > t1 or e.get("cat") == "user_annotation":
                continue
            k = kind_of(e)
            # Device slices full height; on the CPU lane, scopes tall and the calls inside them short.
            depth = 0.8 if lane[0] < 100000 or k == "cpu_op" else 0.45
            ax.broken_barh([(b - t0, d)], (row - depth / 2, depth), facecolors=COLORS[k], edgecolor="white",
                           linewidth=0.3, zorder=1 if k == "cpu_op" else 2)  # scopes behind the calls they hold
            if e["name"] in annotate:
                ax.text(b - t0 + d / 2, -0.9, e["name"], ha="center", va="bottom", fontsize=8)
                ax.axvspan(b - t0, b - t0 + d, color="#EEEEEE", zorder=-1)
            elif lane[0] < 100000 and d >= label_min_us and k != "comm_wait":
                short = e["name"].replace("Memcpy ", "").split(" (")[0].replace("ncclDevKernel_", "")
                ax.text(b - t0 + d / 2, row, short, ha="center", va="center", fontsize=6, color="white", clip_on=True)
    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels([names.get(l, str(l)) for l in lanes], fontsize=8)
    ax.set_ylim(len(lanes) - 0.4, -1.3)
    ax.set_xlim(0, t1 - t0)
    ax.set_xlabel("time since the window start (us, %s)" % run.summary.get("times", ""))
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in COLORS.values()]
    ax.legend(handles, COLORS.keys(), ncol=len(COLORS), fontsize=7, loc="lower center", bbox_to_anchor=(0.5, 1.0 if not annotate else 1.08), frameon=False)
    if title:
        ax.set_title(title, fontsize=10, pad=26 if annotate else 18)
    if own_ax:
        fig.tight_layout()
        if path:
            fig.savefig(path, dpi=110)
    return ax
