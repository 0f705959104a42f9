// lanes.h: drawing one lane's slices, a rank's memory counters, the flow arrows and the links of
// a collective across ranks; the
// pieces the timeline widget (timeline.cpp) lays out and the geometry they share.
#pragma once

#include <optional>
#include <vector>

#include "app.h"

namespace shardlab::viewer::app {

constexpr float kRowHeight = 19;     // one depth level
constexpr float kLanePad = 3;
constexpr float kCounterHeight = 46;
constexpr float kMarkerPickPx = 4;                          // hover distance to an allocator marker
constexpr ImU32 kRetryColor = IM_COL32(240, 70, 70, 255);  // an alloc retry on the memory lane
constexpr float kMinSlicePx = 3;     // narrower slices fold into one block (Tracy's trick)
constexpr float kMaxFoldPx = 6;      // ... of at most this width, so the blocks trace how busy it is

// Time <-> screen x for the track area.
struct Mapping {
  float x0 = 0, width = 1;
  double t0 = 0, t1 = 1;
  float x(double t) const { return x0 + static_cast<float>((t - t0) / (t1 - t0) * width); }
  double t(float px) const { return t0 + static_cast<double>(px - x0) / width * (t1 - t0); }
  double us_per_px() const { return (t1 - t0) / width; }
};

struct Fold {
  size_t count = 0;
  double t0 = 0, t1 = 0;
  double busy_us = 0;  // the summed duration of its slices
};

// What the frame's layout learned, for the passes after it (flows, tooltips, input).
struct Frame {
  Mapping map;
  std::vector<std::vector<std::vector<float>>> lane_y;  // [run][rank][lane]: top on screen, NAN if hidden
  std::optional<Fold> hovered_fold;
  const Rank* hovered_counters = nullptr;
  const Run* hovered_counters_run = nullptr;
};

inline float slice_top(float lane_y, int depth) { return lane_y + kLanePad + static_cast<float>(depth) * kRowHeight; }

// One lane's slices at screen height y; sets app.hovered / f.hovered_fold under the mouse.
void draw_lane(ImDrawList* dl, AppState& app, int run_i, int rank_i, int lane_i, float y, Frame& f);
void draw_counters(ImDrawList* dl, const Run& run, int rank_i, float y, const Mapping& m);
// The allocator marker of `rank` within kMarkerPickPx of the mouse, a retry or OOM first; else null.
const AllocatorMarker* allocator_marker_at(const Run& run, const Rank& rank, float mouse_x, const Mapping& m);
void draw_flows(ImDrawList* dl, const AppState& app, const SliceRef& ref, const Frame& f);
// A collective's kernel on every rank (the visible ones): each outlined, a dot at each start and
// a line through the starts from rank to rank, slanted where a rank started late; under each, a
// bar as long as the wait its stream had before it.
void draw_collective_links(ImDrawList* dl, const AppState& app, const SliceRef& ref, const Frame& f);

}  // namespace shardlab::viewer::app
