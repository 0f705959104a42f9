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
from collections.abc import Mapping

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


class RankFiles(Mapping):
    """rank -> that rank's trace file, parsed when first asked for: a notebook that reads rank 0
    of a 16-rank run parses one file, not sixteen (JSON parsing is most of a notebook's own time)."""

    def __init__(self, path):
        self.paths = dict(sorted((int(m.group(1)), os.path.join(path, f)) for f in os.listdir(path)
                                 if (m := re.fullmatch(r"rank(\d+)\.json", f))))
        self.parsed = {}

    def __getitem__(self, rank):
        if rank not in self.parsed:
            with open(self.paths[rank]) as f:
                self.parsed[rank] = json.load(f)
        return self.parsed[rank]

    def __iter__(self):
        return iter(self.paths)

    def __len__(self):
        return len(self.paths)


class Run:
    def __init__(self, path):
        self.path = path
        with open(os.path.join(path, "summary.json")) as f:
            self.summary = json.load(f)
        self.ranks = RankFiles(path)  # rank -> its trace (a dict), read on first use

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
    by_lane = {lane: [] for lane in lanes}
    for e in run.events(rank):
        if e.get("ph") == "X" and (e["pid"], e["tid"]) in by_lane:
            by_lane[(e["pid"], e["tid"])].append(e)
    for row, lane in enumerate(lanes):
        bars = {}  # (depth, zorder) -> ([(start, length)], [colour]): one artist each, bars in trace order
        for e in by_lane[lane]:
            b, d = e["ts"], e["dur"]
            if b + d < t0 or b > t1 or e.get("cat") == "user_annotation":
                continue
            k = kind_of(e)
            # Device slices full height; on the CPU lane, scopes tall and the calls inside them short,
            # the scopes behind the calls they hold.
            depth = 0.8 if lane[0] < 100000 or k == "cpu_op" else 0.45
            spans, colours = bars.setdefault((depth, 1 if k == "cpu_op" else 2), ([], []))
            spans.append((b - t0, d))
            colours.append(COLORS[k])
            if e["name"] in annotate:
                ax.text(b - t0 + d / 2, -0.9, e["name"], ha="center", va="bottom", fontsize=8)
                ax.axvspan(b - t0, b - t0 + d, color="#EEEEEE", zorder=-1)
            elif lane[0] < 100000 and d >= label_min_us and k != "comm_wait":
                short = e["name"].replace("Memcpy ", "").split(" (")[0].replace("ncclDevKernel_", "")
                ax.text(b - t0 + d / 2, row, short, ha="center", va="center", fontsize=6, color="white", clip_on=True)
        for (depth, zorder), (spans, colours) in bars.items():
            ax.broken_barh(spans, (row - depth / 2, depth), facecolors=colours, edgecolor="white", linewidth=0.3,
                           zorder=zorder)
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


def union(intervals):
    """The union of (begin, end) intervals, as sorted, disjoint [begin, end] lists."""
    out = []
    for b, e in sorted(intervals):
        if out and b <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([b, e])
    return out


def minus(a, b):
    """The parts of the sorted, disjoint intervals a that no interval of the sorted, disjoint b covers."""
    out = []
    for s, e in a:
        cur = s
        for bs, be in b:
            if be > cur and bs < e:
                if bs > cur:
                    out.append((cur, bs))
                cur = max(cur, be)
        if cur < e:
            out.append((cur, e))
    return out


def plot_step(run, ax, rank=0, window=None, title=None, legend=True):
    """One step of one rank, as in the chapters' timeline figures: plot_timeline's lanes (no kernel
    labels), the compute stream's phases (forward, backward, optimizer) bracketed above the lanes, and
    under every stream that communicates a black strip where its communication is exposed (no compute
    kernel on any stream runs then; summary.json's exposed_comm_us is the length of the union of the
    strips, as the metrics library counts it). window defaults to the rank's last step; returns the
    (start, end) of the window in us.
    """
    import matplotlib.pyplot as plt

    t0, t1 = window or run.steps(rank)[-1]
    plot_timeline(run, rank=rank, window=(t0, t1), ax=ax, label_min_us=float("inf"), title=title)
    labels = [t.get_text() for t in ax.get_yticklabels()]
    names = run.lane_names(rank)
    device = [e for e in run.events(rank) if e.get("ph") == "X" and e["pid"] < 100000 and t0 <= e["ts"] <= t1]

    # the phases of the compute stream, named above the lanes
    main = sorted((e for e in device if kind_of(e) in ("compute", "memcpy")
                   and names.get((e["pid"], e["tid"]), "").endswith("compute")), key=lambda e: e["ts"])
    backward = [e for e in main if "backward" in e["name"]]
    optimizer = [e for e in main if e["name"] == "adamw"]
    if main and backward and optimizer:
        for name, b, e in [("forward", main[0]["ts"], backward[0]["ts"]),
                           ("backward", backward[0]["ts"], backward[-1]["ts"] + backward[-1]["dur"]),
                           ("optimizer", optimizer[0]["ts"], optimizer[-1]["ts"] + optimizer[-1]["dur"])]:
            ax.annotate("", (b - t0, -0.7), (e - t0, -0.7), arrowprops=dict(arrowstyle="|-|", lw=0.8, shrinkA=0,
                                                                               shrinkB=0, mutation_scale=3))
            ax.text((b + e) / 2 - t0, -0.82, name, ha="center", va="bottom", fontsize=8)

    # exposed communication, lane by lane: comm-stream time that no compute kernel overlaps
    compute = union([(e["ts"], e["ts"] + e["dur"]) for e in device if kind_of(e) == "compute"])
    for row, label in enumerate(labels):
        lane = next((l for l, n in names.items() if n == label), None)
        comm = [(e["ts"], e["ts"] + e["dur"]) for e in device
                if (e["pid"], e["tid"]) == lane and kind_of(e) in ("comm", "comm_wait")]
        if comm:
            exposed = minus(union(comm), compute)
            ax.broken_barh([(b - t0, e - b) for b, e in exposed], (row + 0.43, 0.14), facecolors="black")
    ax.set_ylim(len(labels) - 0.4, -1.3)
    if legend:  # plot_timeline's legend, with the exposed strip added
        handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in COLORS.values()]
        handles.append(plt.Rectangle((0, 0), 1, 1, color="black"))
        ax.legend(handles, list(COLORS) + ["exposed comm"], ncol=len(handles), fontsize=7,
                  loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)
    else:
        ax.get_legend().remove()
        if title:
            ax.set_title(title, fontsize=10, pad=6)
    return t0, t1
