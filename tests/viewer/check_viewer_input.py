#!/usr/bin/env python3
"""check_viewer_input.py VIEWER RUN_DIR OTHER_RUN_DIR OUT_DIR SCENARIO

Drives shardlab-view's real input path headless (under Xvfb) with --replay scripts of synthetic
events, reads the view state it dumps (--state-out, or `state FILE` in the script) and checks
the numbers: where the view went, what got selected, the range and the Range panel's totals,
what got loaded, which error is shown. Each scenario is one ctest entry:

  wheel     wheel up at a point zooms in 0.8x keeping the time under the pointer; down zooms out
  drag      dragging pans by the dragged time (left and right), the vertical part moves no time
  keys      W/S zoom in/out about the pointer (or the middle), A/D pan, Home fits everything
  select    a click selects the slice under the pointer (the Details tab shows), F fits it
  range     shift-drag sets the range selection; the Range panel's totals match the trace
            files' kernels; F then fits the range
  drop      dropping a run directory onto an empty window loads it (and two compare them)
  bad_path  a missing path and a malformed file typed in the path field show errors in the
            window while the app keeps running (and keeps the run it had)
  cancel    a big trace loads in the background (progress bar, the open run still responds);
            Cancel stops it and keeps the open run
  collective  a click on rank 0's all-reduce lists the same collective on every rank (same
            process group and Seq) with the start, end and preceding wait the trace files give
            each rank, and draws the link between the ranks; its details name the link and the
            bytes this rank sent as the file's args give them; a send/recv (whose Seq counts per
            pair of ranks) links to nothing. Also reads 01_ring_allreduce, next to RUN_DIR, for
            its waits and send/recvs.
  compare   a run opened with --compare OTHER: the Compare tab shows, the second run is shifted so
            both runs' step 1 start together on rank 0, and the table's per-step averages equal the
            averages of the two runs' summary.json (the metrics library, computed by the chapter);
            the change column: float noise (1e-13 us of "overlap") reads as zero, "same", a metric
            that appears or vanishes reads "new" / "gone", not a percentage, and each change is
            judged better or worse by what is good for its row (less step time, more overlap),
            neither for plain compute, comm and memcpy time. Also reads 01_ring_allreduce, next to
            RUN_DIR, for its comm waits that naive DDP has none of.
  streams   chapter 00 (RUN_DIR is traces/00_streams_events): the Steps tab's rows give each step's
            memcpy time and copy/compute overlap as the trace files do, and there is overlap to
            see; synchronizations (cudaDeviceSynchronize...) are the "sync" category, drawn red,
            and unticking it in the legend hides them while other runtime calls stay "runtime"
  search_filter  typing in the search box counts the slices whose names contain the text, as
            many as the trace files hold; unticking "comm" hides every communication slice (no
            orange left in the picture), ticking it again brings them back

  open_files  what users have: a directory of rank files named rank-0.json.gz ... (no
            distributedInfo) opens one rank per file, ranked by the number in the name; beside
            them summary.json is skipped as not a trace, and a truncated file and a second file
            claiming rank 2 are each reported, in the window and (with --screenshot) on stderr,
            while the rest opens; a PyTorch profiler trace's ruler reads time since its first
            event ("0 us", ...), --range counts from there, and its Details give the file's time

  compare_ops  the Compare tab's operations: on chapter 02 against 03 the communication rows'
            time and exposed time add up to each run's summary.json comm and exposed comm per step
            (the metrics library's figures), rows come largest |difference| first, and a click on
            a row outlines that operation's slices and fits the view to its first one; on the
            PyTorch DDP against FSDP recordings (tests/data/torch_gloo) the collectives each
            strategy issues are rows of their own (c10d::allreduce_ in DDP only, all-gather and
            reduce-scatter in FSDP only)

  kineto_gpu  Kineto 2.x's GPU spellings (tests/data/kineto_gpu_synthetic, synthetic): a click on
            rank 0's ncclDevKernel_AllReduce links it to rank 1's (same process group and Seq)
            with the bytes its args give, and the ruler reads time since the first event

Coordinates come from the layout the viewer reports for its first frames: the script is written
in window pixels, as a user's pointer would move.
"""
import gzip
import json
import math
import os
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from check_link_bytes import link_bytes  # noqa: E402
from check_screenshot import COMM_ORANGE, read_png  # noqa: E402

SYNC_RED = (215, 30, 40)  # viewer/app/app.cpp category_color(ViewCategory::sync)

WIDTH, HEIGHT = 1280, 720
# The replay's fixed time step per frame, as ImGui holds it (a float).
DT = struct.unpack("f", struct.pack("f", 1 / 60))[0]
FAILURES = []


def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what)
    if not ok:
        FAILURES.append(what)


def close(a, b, tol):
    return a is not None and b is not None and abs(a - b) <= tol


class Viewer:
    def __init__(self, viewer, out_dir, scenario):
        self.viewer, self.out, self.scenario, self.runs = viewer, out_dir, scenario, 0

    def replay(self, script, paths=(), extra=(), expect_rc=0):
        """Runs the viewer on a script; returns the final state."""
        self.runs += 1
        stem = os.path.join(self.out, f"{self.scenario}_{self.runs}")
        with open(stem + ".txt", "w") as f:
            f.write(script)
        for suffix in (".json", ".png"):
            if os.path.exists(stem + suffix):
                os.remove(stem + suffix)
        cmd = ["xvfb-run", "-a", "-s", "-screen 0 1920x1080x24", self.viewer, *paths, "--size", f"{WIDTH}x{HEIGHT}",
               "--replay", stem + ".txt", "--state-out", stem + ".json", "--screenshot", stem + ".png", *extra]
        print("$ " + " ".join(cmd))
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        print(result.stdout + result.stderr, end="")
        if result.returncode != expect_rc:
            sys.exit(f"the viewer exited with {result.returncode}, expected {expect_rc}")
        with open(stem + ".json") as f:
            return json.load(f)

    def state_file(self, name):
        return os.path.join(self.out, f"{self.scenario}_{name}.json")

    def load(self, name):
        with open(self.state_file(name)) as f:
            return json.load(f)


# --- Geometry: the view's time axis and the lanes, as the state reports them.

def t_at(state, x):
    v, lay = state["view"], state["layout"]
    return v["t0"] + (x - lay["track_x0"]) / lay["track_width"] * (v["t1"] - v["t0"])


def x_at(state, t):
    v, lay = state["view"], state["layout"]
    return lay["track_x0"] + (t - v["t0"]) / (v["t1"] - v["t0"]) * lay["track_width"]


def width(state):
    return state["view"]["t1"] - state["view"]["t0"]


def lane(state, rank, tid):
    for ln in state["layout"]["lanes"]:
        if ln["rank"] == rank and ln["tid"] == tid and ln["run"] == 0:
            return ln
    sys.exit(f"no visible lane for rank {rank} tid {tid}")


def row_y(ln, depth=0):
    """The middle of a lane's depth row (lanes.h: 3 px padding, 19 px rows)."""
    return px(ln["y"] + 3 + depth * 19 + 9)


def px(x):
    """A pointer coordinate: whole pixels, as a display reports them (ImGui floors the rest)."""
    return int(round(x))


def fitted(t0, t1):
    """AppState::fit: the window with a 2% margin each side."""
    m = max(t1 - t0, 1e-3) * 0.02
    return t0 - m, t1 + m


def view_is(state, t0, t1, what, tol=1e-6):
    v = state["view"]
    check(close(v["t0"], t0, tol) and close(v["t1"], t1, tol),
          f"{what}: view [{v['t0']:.6f}, {v['t1']:.6f}], expected [{t0:.6f}, {t1:.6f}]")


# --- The trace files, read independently of the viewer.

def trace_events(run_dir):
    files = sorted(f for f in os.listdir(run_dir) if f.startswith("rank") and f.endswith(".json"))
    out = {}
    for f in files:
        with open(os.path.join(run_dir, f)) as fh:
            out[int(f[4:-5])] = json.load(fh)["traceEvents"]
    return out


def merged(intervals, a, b):
    out = []
    for s, e in sorted((max(s, a), min(e, b)) for s, e in intervals if e > a and s < b):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def total(iv):
    return sum(e - s for s, e in iv)


def intersection(x, y):
    i = j = 0
    t = 0.0
    while i < len(x) and j < len(y):
        lo, hi = max(x[i][0], y[j][0]), min(x[i][1], y[j][1])
        t += max(0.0, hi - lo)
        if x[i][1] < y[j][1]:
            i += 1
        else:
            j += 1
    return t


def range_totals(events, a, b):
    """common/trace/metrics.cpp range_metrics, recomputed from the rank file's device events."""
    compute, comm, copy = [], [], []
    for e in events:
        if e.get("ph") != "X" or e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        iv = (e["ts"], e["ts"] + e["dur"])
        if e["cat"] != "kernel":
            copy.append(iv)
        elif e["name"].startswith("nccl"):
            comm.append(iv)
        else:
            compute.append(iv)
    cu, mu, pu = merged(compute, a, b), merged(comm, a, b), merged(copy, a, b)
    return {"window_us": b - a, "compute_us": total(cu), "comm_us": total(mu), "overlap_us": intersection(cu, mu),
            "memcpy_us": total(pu), "copy_overlap_us": intersection(cu, pu),
            "idle_us": (b - a) - total(merged(compute + comm + copy, a, b))}


def step_totals(events):
    """range_totals over each ProfilerStep#N of a rank file, by N."""
    return {int(e["name"].split("#")[1]): range_totals(events, e["ts"], e["ts"] + e["dur"])
            for e in events if e.get("ph") == "X" and e["name"].startswith("ProfilerStep#")}


def colour_pixels(png, target, tolerance=24):
    _, _, rows = read_png(png)
    return sum(1 for row in rows for px in row if all(abs(p - t) <= tolerance for p, t in zip(px, target)))


# --- Scenarios.

def track_pixels(png, state, target, tolerance=24):
    """Pixels of a colour between the top and the bottom of the tracks (not the toolbar's legend)."""
    _, _, rows = read_png(png)
    top, bottom = px(state["layout"]["tracks_top"]), px(state["layout"]["tracks_bottom"])
    return sum(1 for row in rows[top:bottom] for p in row if all(abs(c - t) <= tolerance for c, t in zip(p, target)))


def centre(rect):
    return px((rect[0] + rect[2]) / 2), px((rect[1] + rect[3]) / 2)


def step_start(run_dir, step, rank=0):
    for e in trace_events(run_dir)[rank]:
        if e.get("ph") == "X" and e["name"] == f"ProfilerStep#{step}":
            return e["ts"]
    sys.exit(f"{run_dir}: no ProfilerStep#{step} on rank {rank}")


def summary_average(run_dir, key):
    with open(os.path.join(run_dir, "summary.json")) as f:
        values = [s[key] for r in json.load(f)["ranks"] for s in r["steps"]]
    return sum(values) / len(values)


def scenario_compare(v, run_dir, other_dir):
    # The run is other_dir (naive DDP), compared against run_dir (bucketed), as in chapter 03.
    st = v.replay("", [other_dir], ["--compare", run_dir])
    check(len(st["runs"]) == 2 and st["panel"] == "Compare", f"two runs, the Compare tab shown: {st['panel']}")
    check(st["align_step"] == 2, "aligned at step 2 (the first after warm-up) by default")
    a, b = step_start(other_dir, 2), step_start(run_dir, 2)
    shifted = b + st["runs"][1]["offset_us"]
    check(close(shifted, a + st["runs"][0]["offset_us"], 1e-6),
          f"step 1 starts together: {a:.3f} us and {b:.3f} + offset = {shifted:.3f} us")
    rows = {r["name"]: r for r in st["compare_rows"]}
    for name, key in [("step time", "step_us"), ("compute", "compute_us"), ("comm", "comm_us"),
                      ("exposed comm", "exposed_comm_us"), ("idle", "idle_us"),
                      ("peak allocated", "peak_allocated_bytes"), ("intra-node sent", "intra_node_bytes"),
                      ("network sent", "network_bytes")]:
        want_a, want_b = summary_average(other_dir, key), summary_average(run_dir, key)
        got = rows[name]
        check(close(got["run"], want_a, 1e-2) and close(got["compared"], want_b, 1e-2),
              f"{name}: {got['run']:.3f} vs {got['compared']:.3f}, summaries {want_a:.3f} vs {want_b:.3f}")
    check(rows["step time"]["compared"] < rows["step time"]["run"], "bucketed steps are shorter than naive ones")
    check_changes(st, "naive against bucketed")
    check(rows["step time"]["verdict"] == "better" and rows["exposed comm"]["verdict"] == "better",
          f"shorter steps and less exposed comm are better: {rows['step time']} {rows['exposed comm']}")
    check(rows["comm"]["verdict"] == "neutral", f"less comm time is neither: {rows['comm']}")
    # Nothing overlaps in either run, but bucketed DDP's interval sums leave 1e-13 us of "overlap":
    # zero, whichever side it is on (as the run, it once read -100%).
    check(rows["overlapped"]["compared"] == 0 and rows["overlapped"]["change"] == "same",
          f"no overlap in either run reads 0 and 'same': {rows['overlapped']}")
    back = v.replay("", [run_dir], ["--compare", other_dir])
    check_changes(back, "bucketed against naive")
    overlap = {r["name"]: r for r in back["compare_rows"]}["overlapped"]
    check(overlap["run"] == 0 and overlap["change"] == "same", f"... the other way round too: {overlap}")

    # A metric one run has and the other lacks: a word, not -100% or +inf%.
    ring_dir = os.path.join(os.path.dirname(os.path.abspath(run_dir)), "01_ring_allreduce")
    st = v.replay("", [ring_dir], ["--compare", other_dir])
    check_changes(st, "the ring against naive DDP")
    rows = {r["name"]: r for r in st["compare_rows"]}
    check(rows["comm wait"]["run"] > 1 and rows["comm wait"]["change"] == "gone" and
          rows["comm wait"]["verdict"] == "better", f"the ring's comm wait, none in naive DDP, is gone: {rows['comm wait']}")
    check(rows["memcpy"]["compared"] > 1 and rows["memcpy"]["change"] == "new" and rows["memcpy"]["verdict"] == "neutral",
          f"naive DDP's memcpy, none in the ring, is new: {rows['memcpy']}")


# Which way each Compare row is better off: less of what a step loses, of memory or of bytes sent
# over the network, more hidden under compute; plain compute, comm and memcpy time and bytes sent
# inside a node are neither.
BETTER = {"step time": -1, "compute": 0, "comm": 0, "overlapped": 1, "exposed comm": -1, "comm wait": -1,
          "memcpy": 0, "copy overlap": 1, "idle": -1, "peak allocated": -1, "peak reserved": -1,
          "intra-node sent": 0, "network sent": -1}


def check_changes(st, what):
    """Every Compare row's change and verdict, from its two values (a value under the row's
    resolution, whole bytes or a nanosecond, must already be zero)."""
    names = [r["name"] for r in st["compare_rows"]]
    check(sorted(names) == sorted(BETTER), f"{what}: the Compare rows are {names}")
    for r in st["compare_rows"]:
        a, b = r["run"], r["compared"]
        resolution = 1 if r["bytes"] else 1e-3
        if abs(b - a) < resolution or (a != 0 and abs((b - a) / a) < 5e-4):
            text, verdict = "same", "same"
        else:
            text = "new" if a == 0 else "gone" if b == 0 else f"{100 * (b - a) / a:+.1f}%"
            way = BETTER.get(r["name"], 0)
            verdict = "neutral" if way == 0 else "better" if (b - a) * way > 0 else "worse"
        check(all(v == 0 or abs(v) >= resolution for v in (a, b)) and r["change"] == text and r["verdict"] == verdict,
              f"{what}: {r['name']} {a!r} -> {b!r}: {r['change']} ({r['verdict']}), expected {text} ({verdict})")


def depth_of(events, e):
    """The nesting depth of a complete event on its lane: how many others enclose it."""
    return sum(1 for o in events if o is not e and o.get("ph") == "X" and o["pid"] == e["pid"] and
               o["tid"] == e["tid"] and o["ts"] <= e["ts"] and o["ts"] + o["dur"] >= e["ts"] + e["dur"])


def click_event(v, run_dir, events, e, name):
    """Shows e in the middle third of the window, clicks it; the state after the click."""
    rng = ["--range", f"{e['ts'] - e['dur']}:{e['ts'] + 2 * e['dur']}"]
    s0 = v.replay("", [run_dir], rng)
    x, y = px(x_at(s0, e["ts"] + e["dur"] / 2)), row_y(lane(s0, 0, e["tid"]), depth_of(events, e))
    v.replay(f"click {x} {y}\nwait\nstate {v.state_file(name)}\n", [run_dir], rng)
    return v.load(name)


def scenario_streams(v, run_dir, _other):
    # The Steps tab: memcpy time and the part of it under compute, per rank and step.
    s0 = v.replay("", [run_dir])
    png0 = os.path.join(v.out, f"{v.scenario}_{v.runs}.png")
    check(s0["panel"] == "Steps", f"one run opens on the Steps tab: {s0['panel']}")
    files = trace_events(run_dir)
    rows = {(r["rank"], r["step"]): r for r in s0["step_rows"] if r["run"] == 0}
    want = {(rank, step): t for rank, evs in files.items() for step, t in step_totals(evs).items()}
    check(sorted(rows) == sorted(want), f"a Steps row per rank and step: {sorted(rows)}")
    for key, w in sorted(want.items()):
        got = rows.get(key, {})
        for k in ("memcpy_us", "copy_overlap_us"):
            check(close(got.get(k), w[k], 1e-3), f"rank {key[0]} step {key[1]} {k}: {got.get(k)}, files {w[k]:.4f}")
    check(all(w["copy_overlap_us"] > 10 and w["overlap_us"] == 0 for w in want.values()),
          "(every step copies under compute and overlaps no comm: the column is what there is to see)")

    # Synchronizations: their own category, red, in the legend's filters.
    check(s0["show_category"].get("sync") is True, f"'sync' is a category, shown: {s0['show_category']}")
    red = track_pixels(png0, s0, SYNC_RED)
    check(red > 200, f"synchronizations are drawn red ({red} px)")
    sync = max((e for e in files[0] if e.get("ph") == "X" and e["name"] == "cudaDeviceSynchronize"),
               key=lambda e: e["dur"])
    sel = click_event(v, run_dir, files[0], sync, "sync")["selected"] or {}
    check(sel.get("name") == "cudaDeviceSynchronize" and sel.get("category") == "sync" and
          close(sel.get("start_us"), sync["ts"], 1e-3), f"a click on cudaDeviceSynchronize at {sync['ts']} us "
          f"selects it, category sync: {sel}")
    malloc = next(e for e in files[0] if e.get("ph") == "X" and e["name"] == "cudaMalloc")
    sel = click_event(v, run_dir, files[0], malloc, "malloc")["selected"] or {}
    check(sel.get("name") == "cudaMalloc" and sel.get("category") == "runtime",
          f"other runtime calls stay runtime: {sel}")
    cx, cy = centre(s0["layout"]["category_boxes"]["sync"])
    hidden = v.replay(f"click {cx} {cy}\nwait 2\n", [run_dir])
    check(hidden["show_category"]["sync"] is False, "clicking the sync box unticks it")
    red = track_pixels(os.path.join(v.out, f"{v.scenario}_{v.runs}.png"), hidden, SYNC_RED)
    check(red == 0, f"no synchronization drawn once sync is hidden ({red} red pixels)")


def scenario_search_filter(v, run_dir, _other):
    s0 = v.replay("", [run_dir])
    png0 = os.path.join(v.out, f"{v.scenario}_{v.runs}.png")
    check(s0["search_matches"] == 0 and s0["search"] == "", "nothing searched at first")
    check(all(s0["show_category"].values()), f"every category shown at first: {s0['show_category']}")
    orange0 = track_pixels(png0, s0, COMM_ORANGE)
    check(orange0 > 50, f"communication slices are drawn at first ({orange0} orange pixels)")

    # The number of slices named like the needle, counted in the files (complete events).
    needle = "AllReduce"
    expected = sum(1 for events in trace_events(run_dir).values() for e in events
                   if e.get("ph") == "X" and needle.lower() in e["name"].lower())
    sx, sy = centre(s0["layout"]["search_field"])
    cx, cy = centre(s0["layout"]["category_boxes"]["comm"])
    searched = v.replay(f"""
click {sx} {sy}
type {needle}
wait 2
state {v.state_file('searched')}
press escape
click {cx} {cy}
wait 2
state {v.state_file('hidden')}
screenshot {os.path.join(v.out, 'search_filter_hidden.png')}
click {cx} {cy}
wait 2
""", [run_dir])
    found, hidden_state = v.load("searched"), v.load("hidden")
    check(found["search"] == needle, f"the search box holds what was typed: {found['search']!r}")
    check(expected > 0 and found["search_matches"] == expected,
          f"{found['search_matches']} matches for {needle!r}, the files hold {expected}")
    check(hidden_state["show_category"]["comm"] is False, "clicking the comm box unticks it")
    check(all(on for name, on in hidden_state["show_category"].items() if name != "comm"), "the other categories stay")
    orange = track_pixels(os.path.join(v.out, "search_filter_hidden.png"), hidden_state, COMM_ORANGE)
    check(orange == 0, f"no communication slice drawn once comm is hidden ({orange} orange pixels)")
    check(searched["show_category"]["comm"] is True, "clicking again ticks it again")

def scenario_wheel(v, run_dir, _other):
    s0 = v.replay("", [run_dir])
    ln = lane(s0, 0, 7)
    x, y = 300, row_y(ln)
    x2 = px(s0["layout"]["track_x0"] + s0["layout"]["track_width"] * 0.8)
    t_mouse, t_mouse2 = t_at(s0, x), t_at(s0, x2)
    v.replay(f"""
move {x} {y}
wheel 1
state {v.state_file('up1')}
wheel 1
wheel 1
state {v.state_file('up3')}
move {x2} {y}
wheel -2
state {v.state_file('down2')}
""", [run_dir])
    up1, up3, down2 = v.load("up1"), v.load("up3"), v.load("down2")
    check(close(width(up1), width(s0) * 0.8, 1e-6), f"one notch up zooms in 0.8x: {width(s0):.3f} -> {width(up1):.3f} us")
    check(close(t_at(up1, x), t_mouse, 1e-6), f"the time under the pointer stays: {t_mouse:.6f} -> {t_at(up1, x):.6f} us")
    check(close(width(up3), width(s0) * 0.8 ** 3, 1e-6), f"three notches zoom in 0.8^3: {width(up3):.3f} us")
    check(close(t_at(up3, x), t_mouse, 1e-6), f"... still about the pointer: {t_at(up3, x):.6f} us")
    t2 = t_at(up3, x2)
    check(close(width(down2), width(up3) / 0.8 ** 2, 1e-6), f"two notches down zoom out 1.25^2: {width(down2):.3f} us")
    check(close(t_at(down2, x2), t2, 1e-6), f"zooming out at another point keeps its time: {t2:.6f} us")
    check(t_mouse2 != t2, "(the second point's time had moved with the zoom, so the check above means something)")


def scenario_drag(v, run_dir, _other):
    s0 = v.replay("", [run_dir])
    ln = lane(s0, 0, 7)
    y = row_y(ln)
    us_per_px = width(s0) / s0["layout"]["track_width"]
    v.replay(f"""
drag 700 {y} 450 {y}
state {v.state_file('left')}
drag 400 {y} 560 {y + 10} 5
state {v.state_file('right')}
""", [run_dir])
    left, right = v.load("left"), v.load("right")
    check(close(left["view"]["t0"] - s0["view"]["t0"], 250 * us_per_px, 1e-6) and close(width(left), width(s0), 1e-9),
          f"dragging 250 px left shows {250 * us_per_px:.3f} us later: moved {left['view']['t0'] - s0['view']['t0']:.3f} us")
    check(close(right["view"]["t0"] - left["view"]["t0"], -160 * us_per_px, 1e-6),
          f"dragging 160 px right (and 10 down) shows {160 * us_per_px:.3f} us earlier: "
          f"moved {right['view']['t0'] - left['view']['t0']:.3f} us")
    check(right["selected"] is None and right["range"] is None, "a drag neither selects nor sets a range")


def scenario_keys(v, run_dir, _other):
    s0 = v.replay("", [run_dir])
    w0, mid0 = width(s0), (s0["view"]["t0"] + s0["view"]["t1"]) / 2
    ln = lane(s0, 0, 7)
    x, y = 900, row_y(ln)
    t_mouse = t_at(s0, x)
    v.replay(f"""
hold w 30
state {v.state_file('w')}
hold s 30
state {v.state_file('s')}
hold d 30
state {v.state_file('d')}
hold a 15
state {v.state_file('a')}
move {x} {y}
hold w 20
state {v.state_file('w_at')}
press home
state {v.state_file('home')}
""", [run_dir])
    sw, ss, sd, sa, swat, home = (v.load(n) for n in ("w", "s", "d", "a", "w_at", "home"))
    mid = lambda s: (s["view"]["t0"] + s["view"]["t1"]) / 2  # noqa: E731
    check(close(width(sw), w0 * math.exp(-2.5 * 30 * DT), 1e-6) and close(mid(sw), mid0, 1e-6),
          f"W held 30 frames (0.5 s) zooms in exp(-1.25) about the middle: {w0:.3f} -> {width(sw):.3f} us")
    check(close(width(ss), w0, 1e-6) and close(mid(ss), mid0, 1e-6),
          f"S held 30 frames zooms back out by exp(1.25): {width(ss):.3f} us")
    check(close(sd["view"]["t0"] - ss["view"]["t0"], 1.2 * 30 * DT * w0, 1e-6) and close(width(sd), w0, 1e-6),
          f"D held 30 frames pans right 1.2 windows/s x 0.5 s: moved {sd['view']['t0'] - ss['view']['t0']:.3f} us "
          f"of {0.6 * w0:.3f}")
    check(close(sa["view"]["t0"] - sd["view"]["t0"], -1.2 * 15 * DT * w0, 1e-6),
          f"A held 15 frames pans left 0.3 windows: moved {sa['view']['t0'] - sd['view']['t0']:.3f} us")
    t_here = t_at(sa, x)
    check(close(width(swat), w0 * math.exp(-2.5 * 20 * DT), 1e-6) and close(t_at(swat, x), t_here, 1e-6),
          f"W with the pointer on the tracks zooms about the pointer: {t_here:.6f} -> {t_at(swat, x):.6f} us")
    full = fitted(home["full"]["t0"], home["full"]["t1"])
    view_is(home, *full, "Home fits everything")
    view_is(s0, *full, "(the start shows everything too)")
    check(t_mouse != t_here, "(the pointer's time before W differs from the start's: the pan happened)")


def longest_kernel(events, tid):
    ks = [e for e in events if e.get("ph") == "X" and e.get("cat") == "kernel" and e.get("tid") == tid
          and e.get("pid") == 0]
    return max(ks, key=lambda e: (e["dur"], -e["ts"]))


def largest_gap(events, pid, tid, t0, t1):
    """The middle of the longest stretch of [t0, t1] with no event on the lane."""
    iv = merged([(e["ts"], e["ts"] + e["dur"]) for e in events
                 if e.get("ph") == "X" and e.get("pid") == pid and e.get("tid") == tid], t0, t1)
    edges = [t0] + [t for a, b in iv for t in (a, b)] + [t1]
    gaps = [(edges[i + 1] - edges[i], (edges[i] + edges[i + 1]) / 2) for i in range(0, len(edges), 2)]
    return max(gaps)


def scenario_select(v, run_dir, _other):
    events = trace_events(run_dir)[0]
    k = longest_kernel(events, 7)
    ts, te = k["ts"], k["ts"] + k["dur"]
    rng = ["--range", f"{ts - k['dur']}:{te + k['dur']}"]  # the kernel fills the middle third
    s0 = v.replay("", [run_dir], rng)
    ln = lane(s0, 0, 7)
    x, y = px(x_at(s0, (ts + te) / 2)), row_y(ln)
    gap, gap_t = largest_gap(events, 0, 7, s0["view"]["t0"], s0["view"]["t1"])
    gap_x = px(x_at(s0, gap_t))
    end = v.replay(f"""
click {x} {y}
wait
state {v.state_file('clicked')}
click {gap_x} {y}
state {v.state_file('cleared')}
click {x} {y}
press f
state {v.state_file('fitted')}
""", [run_dir], rng)
    clicked, cleared, fit = v.load("clicked"), v.load("cleared"), v.load("fitted")
    sel = clicked["selected"] or {}
    check(sel.get("name") == k["name"] and sel.get("rank") == 0 and sel.get("lane_name") == ln["name"],
          f"the click selects {k['name']} on rank 0 {ln['name']}: got {sel.get('name')} on {sel.get('lane_name')}")
    check(close(sel.get("start_us"), ts, 1e-3) and close(sel.get("end_us"), te, 1e-3),
          f"... the one at {ts} us lasting {k['dur']} us: got {sel.get('start_us')} to {sel.get('end_us')}")
    check(clicked["panel"] == "Details", f"the Details tab comes to the front: {clicked['panel']}")
    check(gap > 5 * width(s0) / s0["layout"]["track_width"] and cleared["selected"] is None,
          f"a click on empty track ({gap:.3f} us free at {gap_t:.3f} us) clears the selection: {cleared['selected']}")
    view_is(fit, *fitted(ts, te), "a click again and F fit the selected slice", 1e-3)
    check(fit["selected"] is not None and end["selected"] == fit["selected"], "(the fitted slice stays selected)")
    view_is(clicked, s0["view"]["t0"], s0["view"]["t1"], "a click does not move the view")


def scenario_range(v, run_dir, _other):
    s0 = v.replay("", [run_dir])
    ln = lane(s0, 1, 7)
    xa, xb, y = 420, 900, row_y(ln)
    a, b = t_at(s0, xa), t_at(s0, xb)
    v.replay(f"""
keydown shift
drag {xb} {y} {xa} {y}
keyup shift
state {v.state_file('selected')}
press f
state {v.state_file('fitted')}
""", [run_dir])
    sel, fit = v.load("selected"), v.load("fitted")
    r = sel["range"] or [None, None]
    check(close(r[0], a, 1e-6) and close(r[1], b, 1e-6),
          f"shift-drag from x={xb} back to x={xa} selects [{a:.4f}, {b:.4f}] us: got {r}")
    view_is(sel, s0["view"]["t0"], s0["view"]["t1"], "shift-drag does not pan")
    check(sel["panel"] == "Range", f"the Range tab comes to the front: {sel['panel']}")
    rows = {row["rank"]: row for row in sel["range_rows"]}
    events = trace_events(run_dir)
    check(sorted(rows) == sorted(str(k) for k in events), f"one Range row per rank: {sorted(rows)}")
    for rank, evs in sorted(events.items()):
        want, got = range_totals(evs, a, b), rows.get(str(rank), {})
        for key, value in want.items():
            check(close(got.get(key), value, 1e-3), f"rank {rank} {key}: panel {got.get(key)}, trace files {value:.4f}")
    check(any(range_totals(e, a, b)["compute_us"] > 0 for e in events.values()) and
          any(range_totals(e, a, b)["idle_us"] > 0 for e in events.values()),
          "(the range holds both compute and idle time, so the totals above mean something)")
    view_is(fit, *fitted(a, b), "F with no slice selected fits the range")


def scenario_drop(v, run_dir, other_dir):
    run_dir, other_dir = os.path.abspath(run_dir), os.path.abspath(other_dir)
    events = trace_events(run_dir)
    n_events = sum(1 for evs in events.values() for e in evs if e.get("ph") == "X")
    end = v.replay(f"""
state {v.state_file('empty')}
drop {run_dir}
wait_load
wait 3
state {v.state_file('dropped')}
screenshot {os.path.join(v.out, 'drop_dropped.png')}
drop {run_dir} {other_dir}
wait_load
wait 2
""")
    empty, dropped = v.load("empty"), v.load("dropped")
    check(empty["runs"] == [] and empty["error"] == "", "the viewer starts empty, without an error")
    runs = dropped["runs"]
    files = [os.path.join(run_dir, f"rank{r}.json") for r in sorted(events)]
    check(len(runs) == 1 and runs[0]["files"] == files, f"the dropped directory's rank files load: "
          f"{runs[0]['files'] if runs else None}")
    check(runs and runs[0]["events"] == n_events, f"... all {n_events} events: {runs[0]['events'] if runs else None}")
    check(dropped["error"] == "" and not dropped["loading"], "no error, not loading any more")
    view_is(dropped, *fitted(dropped["full"]["t0"], dropped["full"]["t1"]), "the dropped run is shown whole")
    check(dropped["path_field"] == run_dir, f"the path field shows what is open: {dropped['path_field']}")
    check(len(dropped["layout"]["lanes"]) >= 3, f"its lanes are drawn: {len(dropped['layout']['lanes'])} visible")
    png = os.path.join(v.out, "drop_dropped.png")
    blue, orange = colour_pixels(png, (66, 133, 244)), colour_pixels(png, (245, 140, 30))
    check(blue > 2000 and orange > 100, f"the window shows compute (blue: {blue} px) and comm (orange: {orange} px)")
    labels = [r["label"] for r in end["runs"]]
    check(labels == [run_dir, other_dir], f"two directories dropped together open as a run and its comparison: {labels}")
    check(end["panel"] == "Compare", f"... with the Compare tab in front: {end['panel']}")


def scenario_bad_path(v, run_dir, _other):
    missing = os.path.join(v.out, "no_such_run")
    malformed = os.path.join(v.out, "malformed_trace.json")
    with open(malformed, "w") as f:
        f.write('{"traceEvents": [{"ph": "X", "name": "truncated", "ts": ')
    s0 = v.replay("", [run_dir])
    field = s0["layout"]["path_field"]
    fx, fy = px((field[0] + field[2]) / 2), px((field[1] + field[3]) / 2)
    button = s0["layout"]["open_button"]
    ox, oy = px((button[0] + button[2]) / 2), px((button[1] + button[3]) / 2)
    ln = lane(s0, 0, 7)
    end = v.replay(f"""
click {fx} {fy}
keydown ctrl
press a
keyup ctrl
type {missing}
press enter
wait_load
wait 2
state {v.state_file('missing')}
screenshot {os.path.join(v.out, 'bad_path_missing.png')}
click {fx} {fy}
keydown ctrl
press a
keyup ctrl
type {malformed}
click {ox} {oy}
wait_load
state {v.state_file('malformed')}
move 700 {row_y(ln)}
wheel 1
wait 5
state {v.state_file('still_running')}
drop {run_dir}
wait_load
""", [run_dir])
    missing_s, malformed_s, running = v.load("missing"), v.load("malformed"), v.load("still_running")
    check(missing_s["path_field"] == missing, f"the typed path went into the field: {missing_s['path_field']}")
    check(missing in missing_s["error"] and "no such file" in missing_s["error"],
          f"a missing path shows an error naming it: {missing_s['error']!r}")
    check(len(missing_s["runs"]) == 1 and missing_s["runs"][0]["label"] == run_dir,
          "the run that was open stays open")
    check(malformed in malformed_s["error"] and "JSON" in malformed_s["error"],
          f"a malformed file (opened with the Open button) shows the loader's message: {malformed_s['error']!r}")
    check(len(malformed_s["runs"]) == 1 and malformed_s["runs"][0]["label"] == run_dir, "... and the run stays open")
    check(running["frame"] > malformed_s["frame"] and close(width(running), width(s0) * 0.8, 1e-6),
          f"the app keeps running and responding: frame {running['frame']}, the wheel still zooms")
    check(end["error"] == "" and len(end["runs"]) == 1, f"a good drop afterwards loads and clears the error: "
          f"{end['error']!r}")
    # A bad path on the command line: the window opens and says so (only a headless screenshot
    # without a script exits with an error instead).
    start = v.replay(f"state {v.state_file('cmdline')}\n", [missing])
    check(missing in start["error"] and start["runs"] == [], f"a bad path on the command line shows its error in "
          f"the window: {start['error']!r}")


def scenario_cancel(v, run_dir, _other):
    # A trace big enough to take a while to load (compressed: the test writes little).
    big = os.path.join(v.out, "cancel_big.json.gz")
    with gzip.open(big, "wt", compresslevel=1) as f:
        f.write('{"traceEvents": [\n')
        for i in range(600000):
            f.write('{"ph": "X", "cat": "kernel", "name": "k%d", "pid": 0, "tid": 7, "ts": %.3f, "dur": 5.0},\n'
                    % (i % 50, i * 7.0))
        f.write('{"ph": "X", "cat": "kernel", "name": "end", "pid": 0, "tid": 7, "ts": 1e7, "dur": 5.0}]}\n')
    s0 = v.replay("", [run_dir])
    ln = lane(s0, 0, 7)
    x, y = 700, row_y(ln)
    v.replay(f"""
drop {big}
wait 2
move {x} {y}
wheel 1
state {v.state_file('loading')}
""", [run_dir])
    loading = v.load("loading")
    cancel = loading["layout"]["cancel_button"]
    check(loading["loading"] and cancel[2] > cancel[0], f"while it loads, a progress bar with Cancel shows: {cancel}")
    check([r["label"] for r in loading["runs"]] == [run_dir] and close(width(loading), width(s0) * 0.8, 1e-6),
          "... and the open run stays on screen and keeps responding (the wheel zooms)")
    cx, cy = px((cancel[0] + cancel[2]) / 2), px((cancel[1] + cancel[3]) / 2)
    end = v.replay(f"""
drop {big}
wait 2
click {cx} {cy}
wait_load
wait 2
""", [run_dir])
    check(not end["loading"] and [r["label"] for r in end["runs"]] == [run_dir] and end["error"] == "",
          f"Cancel stops the load and keeps the open run, without an error: {[r['label'] for r in end['runs']]}, "
          f"{end['error']!r}")


def collective_kernels(events):
    """A rank file's collective kernels (args with "Collective name"), each with the wait its
    stream had right before it: the nccl:wait slices since the stream's previous collective
    kernel, as the loader ties them."""
    out, pending = [], {}
    for e in sorted((e for e in events if e.get("ph") == "X" and e.get("cat") == "kernel"), key=lambda e: e["ts"]):
        lane_key = (e.get("pid"), e.get("tid"))
        if e["name"].startswith("nccl:wait"):
            pending[lane_key] = pending.get(lane_key, 0.0) + e["dur"]
        elif e["name"].startswith("nccl") and "Collective name" in e.get("args", {}):
            out.append((e, pending.pop(lane_key, 0.0)))
    return out


def collective_key(e):
    a = e["args"]
    return a.get("Process Group Name"), json.dumps(a.get("Process Group Ranks")), a.get("Seq")


def point_to_point(e):
    return e["args"]["Collective name"] in ("sendrecv", "send", "recv")


LINK_CYAN = (90, 225, 255)  # viewer/app/app.h kCollectiveColor


def link_pixels(png, state, x=None, y0=None, y1=None):
    """Pixels of the link colour on the tracks; with x, y0, y1: the rows of [y0, y1) holding one
    within a pixel of column x (a vertical connector there)."""
    _, _, rows = read_png(png)
    lay = state["layout"]
    near = lambda p: all(abs(a - b) <= 24 for a, b in zip(p, LINK_CYAN))  # noqa: E731
    if x is not None:
        return sum(1 for y in range(y0, y1) if any(near(rows[y][c]) for c in (x - 1, x, x + 1)))
    return sum(1 for y in range(px(lay["tracks_top"]), px(lay["tracks_bottom"]))
               for p in rows[y][px(lay["track_x0"]):px(lay["track_x0"] + lay["track_width"])] if near(p))


def check_peers(state, kernel, files, what):
    """The state's collective_peers against the trace files: one entry per rank, each the kernel
    with the selected one's process group, ranks and Seq, at the file's times, after its wait."""
    want = {}
    for rank, evs in files.items():
        found = [(e, w) for e, w in collective_kernels(evs) if collective_key(e) == collective_key(kernel)
                 and not point_to_point(e)]
        check(len(found) == 1, f"{what}: rank {rank}'s file holds exactly one such kernel: {len(found)}")
        if found:
            want[rank] = found[0]
    peers = state["collective_peers"]
    check([p["rank"] for p in peers] == sorted(files), f"{what}: the state lists it on ranks {sorted(files)}: "
          f"{[p['rank'] for p in peers]}")
    for p in peers:
        e, wait = want.get(p["rank"], ({"name": None, "ts": None, "dur": 0}, None))
        check(p["name"] == e["name"] and close(p["start_us"], e["ts"], 1e-3) and
              close(p["end_us"], e["ts"] + e["dur"], 1e-3) and close(p["wait_us"], wait, 1e-3),
              f"{what}: rank {p['rank']}: {p['name']} at {p['start_us']} to {p['end_us']} us after a wait of "
              f"{p['wait_us']:.3f} us; the file: {e['name']} at {e['ts']} lasting {e['dur']} after {wait}")
    return want


def scenario_collective(v, run_dir, _other):
    # 1. Chapter 03: rank 0's all-reduce of step 2, clicked.
    files = trace_events(run_dir)
    mine = [e for e, _ in collective_kernels(files[0]) if e["args"]["Collective name"] == "allreduce"]
    k = mine[len(mine) // 2]
    ts, te = k["ts"], k["ts"] + k["dur"]
    rng = ["--range", f"{ts - k['dur']}:{te + k['dur']}"]
    s0 = v.replay(f"screenshot {os.path.join(v.out, 'collective_none.png')}\n", [run_dir], rng)
    ln = lane(s0, 0, k["tid"])
    x, y = px(x_at(s0, (ts + te) / 2)), row_y(ln)
    gap, gap_t = largest_gap(files[0], k["pid"], k["tid"], s0["view"]["t0"], s0["view"]["t1"])
    away = px(s0["layout"]["tracks_top"]) - 16  # the ruler: no hover, no tooltip over the tracks
    v.replay(f"""
click {x} {y}
move {x} {away}
wait 2
state {v.state_file('clicked')}
screenshot {os.path.join(v.out, 'collective_clicked.png')}
click {px(x_at(s0, gap_t))} {y}
move {x} {away}
wait 2
state {v.state_file('cleared')}
screenshot {os.path.join(v.out, 'collective_cleared.png')}
""", [run_dir], rng)
    clicked, cleared = v.load("clicked"), v.load("cleared")
    sel = clicked["selected"] or {}
    check(sel.get("name") == k["name"] and sel.get("rank") == 0 and close(sel.get("start_us"), ts, 1e-3),
          f"the click selects rank 0's {k['name']} at {ts} us: got {sel.get('name')} at {sel.get('start_us')}")
    a = k["args"]
    coll = clicked["collective"] or {}
    check(coll.get("name") == a["Collective name"] and coll.get("group") == a["Process Group Name"] and
          coll.get("seq") == a["Seq"], f"... a collective: {a['Collective name']} #{a['Seq']} of "
          f"{a['Process Group Name']}: got {coll}")
    check(clicked["panel"] == "Details", f"the Details tab (with the per-rank table) comes to the front: {clicked['panel']}")
    shown = sel.get("collective_metrics") or {}
    check(shown.get("link") == a["Link"] and shown.get("link_tier") == a["Link tier"] and
          shown.get("link_bytes") == link_bytes(a),
          f"... its details: sent {link_bytes(a)} bytes over {a['Link']} ({a['Link tier']}), as the file's args give "
          f"them: got {shown}")
    want = check_peers(clicked, k, files, "chapter 03")
    # The drawing: a vertical connector at the kernels' common start from rank 0's stream to
    # rank 1's, and none of the link colour before the click or once the selection is cleared.
    ln1 = lane(s0, 1, want[1][0]["tid"]) if 1 in want else ln
    y0, y1 = row_y(ln) + 6, row_y(ln1) - 6
    starts = {round(e["ts"], 3) for e, _ in want.values()}
    xs = px(x_at(clicked, ts))
    rows = link_pixels(os.path.join(v.out, "collective_clicked.png"), clicked, xs, y0, y1)
    check(len(starts) == 1 and rows >= 0.9 * (y1 - y0),
          f"a vertical link at the common start (x={xs}) joins rank 0 and rank 1: {rows} of {y1 - y0} rows")
    before = link_pixels(os.path.join(v.out, "collective_none.png"), s0)
    after = link_pixels(os.path.join(v.out, "collective_cleared.png"), cleared)
    check(before < 20 and after < 20, f"no link drawn before the click ({before} px) or after clearing ({after} px)")
    check(cleared["selected"] is None and cleared["collective"] is None and cleared["collective_peers"] == [],
          "clearing the selection clears the list")

    # 2. Chapter 01's ring: ranks wait for each other before an all-reduce, and send/recvs number
    # their Seq per pair of ranks, colliding with the all-reduces' numbers.
    ring_dir = os.path.join(os.path.dirname(os.path.abspath(run_dir)), "01_ring_allreduce")
    ring = trace_events(ring_dir)
    waits = {}
    for rank, evs in ring.items():
        for e, w in collective_kernels(evs):
            if not point_to_point(e):
                waits[collective_key(e)] = max(waits.get(collective_key(e), 0.0), w)
    ours = collective_kernels(ring[0])
    ar = next(e for e, _ in ours if not point_to_point(e) and waits[collective_key(e)] > 1.0)
    sr = [e for e, _ in ours if point_to_point(e) and e["ts"] + e["dur"] <= ar["ts"] and e["tid"] == ar["tid"]][-1]
    others = {collective_key(e) for r in ring if r != 0 for e, _ in collective_kernels(ring[r])}
    check(collective_key(sr) in others, f"(rank 0's sendrecv #{sr['args']['Seq']} shares its group and Seq with "
          "other ranks' kernels, so pairing on those alone would link it)")
    rng = ["--range", f"{sr['ts'] - sr['dur']}:{ar['ts'] + 2 * ar['dur']}"]
    r0 = v.replay("", [ring_dir], rng)
    rl = lane(r0, 0, ar["tid"])
    v.replay(f"""
click {px(x_at(r0, sr['ts'] + sr['dur'] / 2))} {row_y(rl)}
wait
state {v.state_file('sendrecv')}
click {px(x_at(r0, ar['ts'] + ar['dur'] / 2))} {row_y(rl)}
wait
state {v.state_file('waits')}
""", [ring_dir], rng)
    srs, ws = v.load("sendrecv"), v.load("waits")
    check((srs["selected"] or {}).get("name") == sr["name"] and srs["collective"] is None and
          srs["collective_peers"] == [], f"a sendrecv ({sr['name']} at {sr['ts']} us) is linked to nothing: "
          f"{srs['collective']}, {len(srs['collective_peers'])} peers")
    check((ws["selected"] or {}).get("name") == ar["name"], f"the all-reduce after it is selected: {ws['selected']}")
    want = check_peers(ws, ar, ring, "chapter 01")
    check(sum(1 for _, w in want.values() if w > 0) >= 1, "(some rank waited before it, so the waits above mean "
          f"something: {[round(w, 3) for _, w in want.values()]})")

    # 3. Chapter 05's FSDP: an all-gather and a reduce-scatter say which unit they are for, by the
    # CPU ops around their launches (the file's cuda_runtime event with the kernel's correlation,
    # and the cpu_op events on its thread that enclose it), innermost FlatParam's op naming it.
    fsdp_dir = os.path.join(os.path.dirname(os.path.abspath(run_dir)), "05_prefetch")
    evs = trace_events(fsdp_dir)[0]
    kernels = collective_kernels(evs)
    for kind, op in (("allgather", "FlatParam.unshard"), ("reduce_scatter", "FlatParam.reduce_scatter")):
        of_kind = [e for e, _ in kernels if e["args"]["Collective name"] == kind]
        k = of_kind[len(of_kind) // 2]
        launch = next(e for e in evs if e.get("cat") == "cuda_runtime" and
                      e.get("args", {}).get("correlation") == k["args"]["correlation"])
        around = sorted((e for e in evs if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation") and
                         (e["pid"], e["tid"]) == (launch["pid"], launch["tid"]) and e["ts"] <= launch["ts"] and
                         e["ts"] + e["dur"] >= launch["ts"] + launch["dur"]), key=lambda e: (e["ts"], -e["dur"]))
        names = [e["name"] for e in around]
        check(bool(names) and names[-1].startswith(op + " (") and names[-1].endswith(")"),
              f"(the file: rank 0's {kind} at {k['ts']} us was launched inside {names}, the last {op} (unit))")
        sel = click_event(v, fsdp_dir, evs, k, "unit_" + kind)["selected"] or {}
        check(sel.get("name") == k["name"] and close(sel.get("start_us"), k["ts"], 1e-3) and
              sel.get("launched_in") == names,
              f"chapter 05's {kind} at {k['ts']} us: its details say it was launched in {names}: "
              f"got {sel.get('name')} at {sel.get('start_us')}, launched in {sel.get('launched_in')}")


DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data")


def scenario_open_files(v, run_dir, _other):
    # 1. A directory as users have it: rank-R.json.gz without distributedInfo, summary.json,
    # a file cut before its first event (one cut later opens with the events before the cut:
    # viewer_test_model.cpp), and a copy of rank 2 that says so (distributedInfo wins over the name).
    mess = os.path.join(v.out, "open_files_run")
    if os.path.isdir(mess):
        for f in os.listdir(mess):
            os.remove(os.path.join(mess, f))
    os.makedirs(mess, exist_ok=True)
    for rank, events in trace_events(run_dir).items():
        with gzip.open(os.path.join(mess, f"rank-{rank}.json.gz"), "wt") as f:
            json.dump({"traceEvents": events}, f)
    with open(os.path.join(run_dir, "summary.json")) as src, open(os.path.join(mess, "summary.json"), "w") as dst:
        dst.write(src.read())
    with open(os.path.join(run_dir, "rank1.json")) as src:
        text = src.read()
    with open(os.path.join(mess, "broken.json"), "w") as f:
        f.write(text[:60])
    with open(os.path.join(mess, "another-rank2.json"), "w") as f:
        f.write(open(os.path.join(run_dir, "rank2.json")).read())
    st = v.replay("", [mess])
    run = st["runs"][0]
    ranks = {r["rank"]: (os.path.basename(r["file"]), r["rank_from"]) for r in run["rank_files"]}
    want = {0: ("rank-0.json.gz", "file name"), 1: ("rank-1.json.gz", "file name"),
            2: ("another-rank2.json", "distributedInfo"), 3: ("rank-3.json.gz", "file name")}
    check(ranks == want, f"one rank per file, from distributedInfo or the name: {ranks}")
    why = {os.path.basename(n["file"]): n for n in run["not_opened"]}
    check(sorted(why) == ["broken.json", "rank-2.json.gz", "summary.json"], f"three files not opened: {sorted(why)}")
    check(why.get("summary.json", {}).get("not_a_trace") is True and "not a trace" in why["summary.json"]["why"],
          f"summary.json is skipped as not a trace: {why.get('summary.json')}")
    check("truncated" in why.get("broken.json", {}).get("why", ""), f"the truncated file says so: {why.get('broken.json')}")
    check("rank 2" in why.get("rank-2.json.gz", {}).get("why", "") and
          "another-rank2.json" in why["rank-2.json.gz"]["why"], f"the second rank 2 names the first: {why.get('rank-2.json.gz')}")
    check(st["error"] == "", f"no error: the rest opened ({st['error']!r})")
    # The same on stderr for a screenshot run.
    shot = subprocess.run(["xvfb-run", "-a", v.viewer, mess, "--screenshot", os.path.join(v.out, "open_files.png")],
                          capture_output=True, text=True, timeout=120)
    print(shot.stdout + shot.stderr, end="")
    check(shot.returncode == 0 and "not opened " + os.path.join(mess, "broken.json") in shot.stderr and
          "not opened " + os.path.join(mess, "rank-2.json.gz") in shot.stderr and
          "skipped " + os.path.join(mess, "summary.json") in shot.stderr,
          f"--screenshot opens the rest (exit {shot.returncode}) and lists each file not opened on stderr")

    # 2. A PyTorch profiler trace: times on the ruler since its first event, not since 1970.
    kineto = os.path.join(DATA, "kineto_cpu_torch2.15.pt.trace.json.gz")
    with gzip.open(kineto, "rt") as f:
        events = json.load(f)["traceEvents"]
    first = min(e["ts"] for e in events if e.get("ph") == "X")
    st = v.replay("", [kineto], ["--range", "0:1000"])
    check(close(st["time_origin_us"], first, 1e-3), f"the ruler's zero is the first event: {st['time_origin_us']} vs {first}")
    check(close(st["view"]["t0"], first, 1e-3) and close(st["view"]["t1"], first + 1000, 1e-3),
          f"--range 0:1000 shows the first millisecond: {st['view']}")
    ticks = st["layout"]["ruler_ticks"]
    values = [float(t.split()[0]) for t in ticks]
    check(ticks[0] == "0 us" and all(t.endswith(" us") for t in ticks) and len(values) >= 4 and
          all(close(b - a, values[1], 1e-9) for a, b in zip(values, values[1:])) and values[-1] <= 1000,
          f"the ruler reads microseconds since the first event, evenly: {ticks}")
    step = next(e for e in events if e.get("ph") == "X" and e["name"].startswith("ProfilerStep#"))
    sel = v.replay("", [kineto], [])
    lane_of_step = next(ln for ln in sel["layout"]["lanes"] if ln["tid"] == step["tid"])
    clicked = v.replay(f"click {px(x_at(sel, step['ts'] + step['dur'] / 2))} {row_y(lane_of_step)}\nwait\n", [kineto])
    check((clicked["selected"] or {}).get("name") == step["name"] and
          close(clicked["selected"]["start_us"] - clicked["time_origin_us"], step["ts"] - first, 1e-3),
          f"a click on {step['name']} selects it at {step['ts'] - first:.3f} us since the first event: {clicked['selected']}")


def scenario_compare_ops(v, run_dir, other_dir):
    # RUN_DIR is chapter 03 (bucketed), OTHER_RUN_DIR chapter 02 (naive): naive as the run.
    st = v.replay("", [other_dir], ["--compare", run_dir])
    rows = st["compare_operations"]
    diffs = [abs(r["time_us"][1] - r["time_us"][0]) for r in rows]
    check(len(rows) > 10 and diffs == sorted(diffs, reverse=True), f"{len(rows)} operations, largest |difference| first")
    for side, d in enumerate([other_dir, run_dir]):
        comm = [r for r in rows if r["communication"]]
        time = sum(r["time_us"][side] for r in comm)
        exposed = sum(r["exposed_us"][side] for r in comm)
        want_comm, want_exposed = summary_average(d, "comm_us"), summary_average(d, "exposed_comm_us")
        check(close(time, want_comm, 1e-2) and close(exposed, want_exposed, 1e-2),
              f"{os.path.basename(d)}: communication rows add up to {time:.3f} us, {exposed:.3f} exposed; "
              f"summary.json: comm {want_comm:.3f}, exposed {want_exposed:.3f} per step")
    kinds = {r["kind"] for r in rows}
    check({"collective", "kernel", "runtime", "cpu op"} <= kinds, f"operations of every kind: {sorted(kinds)}")
    # A click on the first row: its slices outlined in both runs, the view on its first slice.
    box = st["layout"]["operation_rows"][0]
    x, y = centre(box["rect"])
    shot = os.path.join(v.out, "compare_ops_clicked.png")
    after = v.replay(f"click {x} {y}\nwait 2\nscreenshot {shot}\n", [other_dir], ["--compare", run_dir])
    first = after["highlighted_first"] or {}
    check(after["highlighted_op"] == box["key"] and first, f"the click highlights {box['key']}: {after['highlighted_op']}")
    if first:
        want = fitted(first["start_us"], first["end_us"])
        view_is(after, want[0], want[1], f"the view fits its first slice ({first['name']})")
    outlined = track_pixels(shot, after, (255, 230, 0), 10)
    check(outlined > 20, f"its slices are outlined in the timeline: {outlined} px")

    # PyTorch's DDP against FSDP (gloo on the CPU): each strategy's collectives are rows.
    gloo = os.path.join(DATA, "torch_gloo")
    st = v.replay("", [os.path.join(gloo, "ddp_2ranks")], ["--compare", os.path.join(gloo, "fsdp_2ranks")])
    by_label = {r["label"]: r for r in st["compare_operations"]}
    ddp_only, fsdp_only = by_label.get("c10d::allreduce_"), by_label.get("c10d::_allgather_base_")
    check(ddp_only and ddp_only["count"][0] > 0 and ddp_only["count"][1] == 0,
          f"DDP's all-reduce is in the run only: {ddp_only}")
    check(fsdp_only and fsdp_only["count"][0] == 0 and fsdp_only["count"][1] > 0,
          f"FSDP's all-gather is in the compared run only: {fsdp_only}")
    check("c10d::_reduce_scatter_base_" in by_label, "FSDP's reduce-scatter is a row")


def scenario_kineto_gpu(v, _run_dir, _other):
    run = os.path.join(DATA, "kineto_gpu_synthetic")
    files = {}
    for name in sorted(os.listdir(run)):
        with open(os.path.join(run, name)) as f:
            trace = json.load(f)
        files[trace["distributedInfo"]["rank"]] = trace["traceEvents"]
    first = min(e["ts"] for evs in files.values() for e in evs if e.get("ph") == "X")
    k = next(e for e in files[0] if e.get("cat") == "kernel" and e["name"].startswith("ncclDevKernel_AllReduce"))
    rng = ["--range", f"{k['ts'] - first - k['dur']}:{k['ts'] - first + 2 * k['dur']}"]
    s0 = v.replay("", [run], rng)
    check(s0["layout"]["ruler_ticks"][0].endswith(" us") and not s0["layout"]["ruler_ticks"][0].startswith("17"),
          f"the ruler reads time since the first event, not since 1970: {s0['layout']['ruler_ticks'][:3]}")
    st = v.replay(f"click {px(x_at(s0, k['ts'] + k['dur'] / 2))} {row_y(lane(s0, 0, k['tid']), 1)}\nwait\n", [run], rng)
    sel = st["selected"] or {}
    check(sel.get("name") == k["name"], f"the click selects {k['name']}: {sel.get('name')}")
    peers = {p["rank"]: p for p in st["collective_peers"]}
    other = next(e for e in files[1] if e.get("name") == k["name"])
    check(sorted(peers) == [0, 1] and close(peers[1]["start_us"], other["ts"], 1e-3),
          f"linked to rank 1's kernel at {other['ts']}: {[(r, p['start_us']) for r, p in peers.items()]}")
    metrics = sel.get("collective_metrics") or {}
    check(metrics.get("bytes") == k["args"]["In msg nelems"] * 4 and metrics.get("link_tier") == "unknown",
          f"its bytes from In msg nelems x Float, no link named: {metrics}")


def main():
    viewer, run_dir, other_dir, out_dir, scenario = sys.argv[1:6]
    os.makedirs(out_dir, exist_ok=True)
    fn = globals().get("scenario_" + scenario)
    if fn is None:
        sys.exit(f"unknown scenario {scenario}")
    fn(Viewer(viewer, out_dir, scenario), run_dir, other_dir)
    if FAILURES:
        sys.exit(f"{len(FAILURES)} check(s) failed")
    print(f"{scenario}: all checks passed")


if __name__ == "__main__":
    main()
