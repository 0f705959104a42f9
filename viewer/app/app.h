// app.h: the viewer's state, shared by the timeline widget and the panels.
//
// One AppState per window. A Run is a loaded TraceModel plus what the drawing needs on top of it
// (per-depth slice indices, the correlation index for flows, the collectives across ranks) and
// its offset on the shared time axis (a compared run is shifted so both align at a chosen step).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <imgui.h>

#include "operations.h"
#include "trace/metrics.h"
#include "trace_model.h"

namespace shardlab::viewer::app {

// What the timeline colours and the toolbar filters by: the loader's categories, plus
// synchronizations told apart from the other runtime calls by name (cudaDeviceSynchronize,
// cudaStreamSynchronize, cudaEventSynchronize, their HIP and driver API twins): the CPU blocked
// until the device caught up, which is what a reader looks for on a CPU lane (chapter 00's
// "red cudaDeviceSynchronize slice"). In the legend's order.
enum class ViewCategory : uint8_t { compute, comm, comm_wait, memcpy, cpu_op, runtime, sync, annotation, other };
constexpr int kCategories = static_cast<int>(ViewCategory::other) + 1;

// Slices of one lane at one depth, by index into Lane::slices. Slices at one depth never overlap
// (they nest strictly), so both their starts and their ends are sorted: the visible ones are
// found by one binary search on the end, even when a long parent starts far before the window.
struct DepthRow {
  std::vector<uint32_t> slices;
  std::vector<double> busy_us;  // busy_us[i]: the summed duration of slices[0..i), so a folded
                                // block knows how busy it is without visiting its slices
};
using DepthIndex = std::vector<DepthRow>;

struct SliceRef {
  int run = -1, rank = -1, lane = -1;
  uint32_t slice = 0;
  bool valid() const { return run >= 0; }
  bool operator==(const SliceRef&) const = default;
};

// One collective's kernel on one rank.
struct CollectivePeer {
  SliceRef ref;
  double wait_us = 0;  // its stream's comm wait right before it (the loader's waits: the other members arriving)
};

// One collective across the ranks of a run: the kernels whose args name the same "Process Group
// Name", "Process Group Ranks" and "Seq" (Kineto's collective args). Send/recv are left out:
// their Seq counts per pair of ranks, so equal numbers on two ranks are not one operation.
struct Collective {
  std::string name;         // "Collective name": "allreduce", ...
  std::string group;        // "Process Group Name"
  std::string group_ranks;  // "Process Group Ranks" as the file writes it, spaces dropped ("" if absent)
  int64_t seq = 0;
  std::vector<CollectivePeer> peers;  // in rank order
};

struct Run {
  std::string label;  // the paths it was loaded from
  TraceModel model;
  double offset_us = 0;  // added to every time of this run to place it on the shared axis
  std::vector<std::vector<DepthIndex>> depth_index;  // [rank][lane]
  std::vector<std::unordered_map<uint64_t, std::vector<SliceRef>>> by_correlation;  // [rank]
  std::vector<Collective> collectives;  // built once per run (make_run); replaced with the run (set_runs)
  using BySlice = std::vector<std::unordered_map<uint64_t, uint32_t>>;  // [rank]: slice_key -> an index
  BySlice collective_of;  // -> collectives[]
  BySlice record_of;      // -> the rank's timeline.collectives[]: every comm kernel's record (send/recv too)
  std::vector<double> counter_max;  // [rank]: the largest counter value, the memory graph's scale
  std::vector<std::vector<StepMetrics>> steps;  // [rank]: step_metrics, computed once
  std::vector<bool> sync_name;  // [interned name]: a synchronization's name (ViewCategory::sync)
  RunOperations operations;     // its slices grouped by operation (the Compare tab's operations)
};

// A communication kernel's record in its rank's timeline (nullptr: not one).
const CollectiveRecord* collective_record(const Run& run, int rank, int lane, uint32_t slice);

// Where a device slice came from: the CPU ops enclosing its launch (the host slice sharing its
// correlation), outermost first, names as TraceModel::names indices. A chapter names the unit an
// all-gather or reduce-scatter is for in the op around its launch ("FlatParam.unshard (block8)"),
// PyTorch's FSDP2 in its own ("FSDP::all_gather (layers.8)"); the kernel itself cannot say.
// Empty: not a device slice, or its launch is not in the file.
std::vector<uint32_t> launch_context(const Run& run, int rank, int lane, uint32_t slice);

// A slice's category as the timeline colours it and the legend filters it.
ViewCategory view_category(const Run& run, const Slice& s);

// Builds the indices above (once, after loading).
Run make_run(std::string label, TraceModel model, int run_index);

struct AppState {
  std::vector<Run> runs;  // [0] the run, [1] the compared one (--compare)
  double view_t0 = 0, view_t1 = 1;  // the visible window on the shared axis, microseconds
  SliceRef hovered, selected;
  std::optional<std::pair<double, double>> range;  // shift-drag selection on the shared axis
  std::array<bool, kCategories> show_category = [] {
    std::array<bool, kCategories> all;
    all.fill(true);
    return all;
  }();
  char search[128] = "";
  std::vector<std::vector<bool>> name_matches;  // [run][interned name], rebuilt when search changes
  size_t match_count = 0;                        // slices whose name matches, over every run
  int align_step = 2;  // compare: the step both runs are aligned at (the first after warm-up)
  // Streams only: each rank's GPU streams and nothing else (no CPU thread, no memory), every
  // rank open, so that many ranks fit one under another: a pipeline's stages read like the
  // papers' diagrams. open_every_rank opens them all on the next frame (set when it turns on).
  bool streams_only = false;
  bool open_every_rank = false;
  // The operation whose row was clicked in the Compare tab ("" none): its slices are outlined in
  // both runs and the others dimmed, as a search does.
  std::string highlighted_op;
  bool highlighting() const { return !highlighted_op.empty(); }
  // Whether a slice belongs to the highlighted operation.
  bool in_highlighted_op(int run, int rank, int lane, uint32_t slice) const;
  int panel_tab = -1;  // a bottom panel to bring to the front (-1: leave as is)
  int shown_tab = -1;  // the bottom panel the last frame showed

  // The Range panel's rows, one per rank of every run: recomputed when the range changes.
  std::optional<std::pair<double, double>> range_rows_for;
  std::vector<std::pair<std::string, RangeMetrics>> range_rows;

  // Where the last frame put things on screen: for the state dump (--state-out) that the
  // input tests read to aim their synthetic clicks.
  struct LaneBox {
    int run = 0, rank = 0, lane = 0;
    float y = 0, height = 0;
  };
  struct Layout {
    float track_x0 = 0, track_width = 0;  // the time axis: x of view_t0 and its width in pixels
    float tracks_top = 0, tracks_bottom = 0;
    std::vector<LaneBox> lanes;  // the visible lanes
    std::vector<std::string> ruler_ticks;  // the ruler's labels, left to right ("0 us", "500 us")
    struct OperationBox {
      std::string key;
      std::pair<ImVec2, ImVec2> rect;
    };
    std::vector<OperationBox> operation_rows;  // the Compare tab's visible operation rows
    std::pair<ImVec2, ImVec2> search_field;                       // the toolbar's search box
    std::array<std::pair<ImVec2, ImVec2>, kCategories> category_boxes;  // its category checkboxes
    std::pair<ImVec2, ImVec2> streams_only_box;                         // and its "streams only" one
  } layout;

  bool searching() const { return search[0] != '\0'; }
  // Highlights an operation (a row of the Compare tab) and fits the view to its first slice.
  void highlight_op(const std::string& key);
  // The highlighted operation's first slice: in the run, else in the compared run (invalid: none).
  SliceRef highlighted_first() const;
  bool filtering() const;
  double full_t0() const;
  double full_t1() const;
  // Where the ruler's zero is on the shared axis: the run's first event. The ruler and the
  // panels give times since then ("12.5 ms"); tooltips and Details add the file's own (epoch
  // microseconds in a PyTorch profiler trace).
  double time_origin() const;
  void fit(double t0, double t1);  // shows [t0, t1] with a small margin
  void fit_all() { fit(full_t0(), full_t1()); }
  void update_search();
  // Shows freshly loaded runs: everything that pointed into the old ones (selection, hover,
  // range, caches) is reset and the whole run is fitted.
  void set_runs(std::vector<Run> loaded);
  void align_runs();  // sets runs[1].offset_us so both runs' align_step starts coincide (rank 0)
  const Slice* slice(const SliceRef& r) const;
  // The collective a slice is one rank's part of (nullptr: not a collective's kernel).
  const Collective* collective(const SliceRef& r) const;
  // A communication kernel's record in its rank's timeline (nullptr: not one).
  const CollectiveRecord* collective_record(const SliceRef& r) const;
};

// Looks and words, shared by the widget and the panels.
ImU32 category_color(ViewCategory c);
constexpr ImU32 kCollectiveColor = IM_COL32(90, 225, 255, 255);  // a collective's links across ranks
const char* category_name(ViewCategory c);

// The Compare tab's rows: each per-step metric averaged over every step of every rank, for the
// run and the compared run (empty unless two runs are open). Values below the row's resolution
// are zero (see compare_rows).
struct CompareRow {
  enum Better { lower, higher, neither };  // which way the compared run is better off
  const char* name;
  double run, compared;
  bool bytes;  // an amount of bytes: memory, or what was sent (else microseconds)
  Better better;
};
std::vector<CompareRow> compare_rows(const AppState& app);

// A row's change column: "-37.9%", "same", "new" (zero in the run, not in the compared one),
// "gone" (the other way round), and whether the compared run is better off for it.
struct CompareChange {
  enum Verdict { same, better, worse, neutral };
  std::string text;
  Verdict verdict;
};
CompareChange compare_change(const CompareRow& row);
std::string format_time(double us);   // "12.5 ms", "850 ns"
// A time as the file gives it: "1682725897512345.125 us", with the UTC date and time when it is
// one (microseconds since 1970, as PyTorch's profiler writes them): "... (2023-04-29 00:31:37.512345 UTC)".
std::string format_absolute(double us);

// A slice's description: name, times, lane, args, achieved rates; for tooltips and details.
void slice_details(const AppState& app, const SliceRef& ref);

}  // namespace shardlab::viewer::app
