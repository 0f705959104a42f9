// lanes.cpp: a lane's slices, touching only the visible ones; a rank's memory counters; the
// launch -> kernel arrows; a collective linked across ranks.
#include "lanes.h"

#include <algorithm>
#include <cmath>

namespace shardlab::viewer::app {
namespace {

ImU32 scale(ImU32 c, float f, int alpha = 255) {
  ImVec4 v = ImGui::ColorConvertU32ToFloat4(c);
  return IM_COL32(static_cast<int>(v.x * f * 255), static_cast<int>(v.y * f * 255), static_cast<int>(v.z * f * 255), alpha);
}

bool light(ImU32 c) {
  const ImVec4 v = ImGui::ColorConvertU32ToFloat4(c);
  return 0.299f * v.x + 0.587f * v.y + 0.114f * v.z > 0.6f;
}

void draw_slice(ImDrawList* dl, const AppState& app, const Run& run, const Slice& s, bool match, float x0, float x1,
                float top, const Mapping& m) {
  const float cx0 = std::max(x0, m.x0 - 2), cx1 = std::min(x1, m.x0 + m.width + 2);
  const bool dim = (app.searching() || app.highlighting()) && !match;
  const ImU32 base = category_color(view_category(run, s));
  dl->AddRectFilled({cx0, top}, {cx1, top + kRowHeight - 1}, dim ? scale(base, 0.35f) : base);
  if (match) dl->AddRect({cx0, top}, {cx1, top + kRowHeight - 1}, IM_COL32(255, 230, 0, 255), 0, 0, 2);
  if (cx1 - cx0 < 20) return;
  // The name where it fits: centred, else clipped at the slice's right edge.
  const char* name = run.model.names[s.name].c_str();
  const float w = ImGui::CalcTextSize(name).x;
  const float tx = w + 8 < cx1 - cx0 ? (cx0 + cx1 - w) / 2 : cx0 + 4;
  const ImVec4 clip(cx0 + 2, top, cx1 - 2, top + kRowHeight);
  const ImU32 text = dim ? IM_COL32(150, 150, 150, 255) : light(base) ? IM_COL32(20, 20, 20, 255) : IM_COL32(255, 255, 255, 255);
  dl->AddText(ImGui::GetFont(), ImGui::GetFontSize(), {tx, top + (kRowHeight - ImGui::GetFontSize()) / 2 - 1}, text, name,
              nullptr, 0, &clip);
}

// Adjacent folded blocks that rasterize alike (same colour, same bar height in whole pixels,
// touching) are drawn as one: a zoomed-out lane of steady work becomes a few rectangles instead
// of two per block of 6 px. Fewer triangles is what counts with Mesa's software renderer.
struct FoldRun {
  float x0 = 0, x1 = 0, bar_top = 0;
  ImU32 color = 0;
  bool open = false;

  void flush(ImDrawList* dl, float top, float bottom) {
    if (!open) return;
    // The faint block above the bar, not under it: no pixel is filled twice.
    if (bar_top > top) dl->AddRectFilled({x0, top}, {x1, bar_top}, scale(color, 1, 50));
    dl->AddRectFilled({x0, bar_top}, {x1, bottom}, color);
    open = false;
  }
  void add(ImDrawList* dl, float fx0, float fx1, float top_of_bar, ImU32 c, float top, float bottom) {
    if (open && c == color && top_of_bar == bar_top && fx0 <= x1 + 0.5f) {
      x1 = std::max(x1, fx1);
      return;
    }
    flush(dl, top, bottom);
    *this = {fx0, fx1, top_of_bar, c, true};
  }
};

}  // namespace

// One lane's slices, depth row by depth row, only the visible ones.
void draw_lane(ImDrawList* dl, AppState& app, int run_i, int rank_i, int lane_i, float y, Frame& f) {
  const Run& run = app.runs[run_i];
  const Lane& lane = run.model.ranks[rank_i].lanes[lane_i];
  const DepthIndex& index = run.depth_index[rank_i][lane_i];
  const Mapping& m = f.map;
  const double t0 = m.t0 - run.offset_us, t1 = m.t1 - run.offset_us;  // the window in the run's times
  const double min_us = kMinSlicePx * m.us_per_px();
  const bool filtering = app.filtering();
  const std::vector<bool>& matches = app.name_matches[run_i];
  const ImVec2 mouse = ImGui::GetMousePos();
  auto shown = [&](const Slice& s) { return app.show_category[static_cast<size_t>(view_category(run, s))]; };
  // Outlined: a search's matches, and the slices of the operation clicked in the Compare tab.
  auto match = [&](uint32_t k) {
    return (app.searching() && matches[lane.slices[k].name]) ||
           (app.highlighting() && app.in_highlighted_op(run_i, rank_i, lane_i, k));
  };

  // Only the rows in the clip rectangle: a deep lane scrolled partly out of view costs its
  // visible rows, not all of them.
  const float clip_top = dl->GetClipRectMin().y, clip_bottom = dl->GetClipRectMax().y;
  for (size_t d = 0; d < index.size(); ++d) {
    const DepthRow& row = index[d];
    const std::vector<uint32_t>& idx = row.slices;
    const float top = slice_top(y, static_cast<int>(d)), bottom = top + kRowHeight - 1;
    if (bottom < clip_top) continue;
    if (top > clip_bottom) break;
    const bool mouse_in_row = mouse.y >= top && mouse.y < bottom;
    auto at = [&](size_t i) -> const Slice& { return lane.slices[idx[i]]; };
    FoldRun pending;
    // The first slice that ends inside the window: one binary search, however long its parent.
    size_t i = std::partition_point(idx.begin(), idx.end(), [&](uint32_t k) { return lane.slices[k].end_us <= t0; }) - idx.begin();
    while (i < idx.size() && at(i).start_us < t1) {
      const Slice& s = at(i);
      const float x0 = m.x(s.start_us + run.offset_us), x1 = m.x(s.end_us + run.offset_us);
      if (x1 - x0 >= kMinSlicePx) {
        if (shown(s)) {
          draw_slice(dl, app, run, s, match(idx[i]), x0, x1, top, m);
          if (mouse_in_row && mouse.x >= x0 && mouse.x < x1) app.hovered = {run_i, rank_i, lane_i, idx[i]};
          if (app.selected == SliceRef{run_i, rank_i, lane_i, idx[i]})
            dl->AddRect({x0 - 1, top - 1}, {x1 + 1, bottom + 1}, IM_COL32(255, 255, 255, 255), 0, 0, 2);
        }
        ++i;
        continue;
      }
      // A run of narrow slices becomes one block of a few pixels (Tracy's trick), drawn as a bar
      // as high as the block is busy: a launch-bound stretch looks sparse, not solid. Unfiltered,
      // the block's slices are skipped by binary search and its busy time comes from the prefix
      // sums, so a zoomed-out million-slice lane costs a few searches per block, not a visit per slice.
      Fold fold{0, s.start_us, s.end_us, 0};
      const double limit = s.start_us + kMaxFoldPx * m.us_per_px();
      bool any_match = false;
      size_t j = i;
      if (!filtering) {
        j = i + 1;
        while (j < idx.size()) {
          const double until = std::min(fold.t1 + min_us, limit);
          const size_t k = std::partition_point(idx.begin() + j, idx.end(), [&](uint32_t n) {
            return lane.slices[n].start_us < until; }) - idx.begin();
          if (k == j) break;
          const Slice& last = at(k - 1);
          if (last.end_us - last.start_us >= min_us) {  // a wide slice ends the block before it
            if (k - 1 > j) fold.t1 = at(k - 2).end_us;
            j = k - 1;
            break;
          }
          fold.t1 = last.end_us;
          j = k;
        }
        fold.count = j - i;
        fold.busy_us = row.busy_us[j] - row.busy_us[i];
      } else {  // hidden categories and search matches need a look at every slice
        for (; j < idx.size(); ++j) {
          const Slice& n = at(j);
          if (j > i && (n.start_us >= std::min(fold.t1 + min_us, limit) || n.end_us - n.start_us >= min_us)) break;
          if (!shown(n)) continue;
          ++fold.count;
          fold.t1 = std::max(fold.t1, n.end_us);
          fold.busy_us += n.end_us - n.start_us;
          any_match = any_match || match(idx[j]);
        }
      }
      i = j;
      if (fold.count == 0) continue;
      const float fx0 = std::max(m.x(fold.t0 + run.offset_us), m.x0 - 2);
      const float fx1 = std::clamp(m.x(fold.t1 + run.offset_us), fx0 + 1, m.x0 + m.width + 2);
      const double span = fold.t1 - fold.t0;
      const float busy = span > 0 ? static_cast<float>(std::min(1.0, fold.busy_us / span)) : 1.f;
      const ImU32 color = category_color(view_category(run, s));
      const ImU32 base = (app.searching() || app.highlighting()) && !any_match ? scale(color, 0.35f) : color;
      // Whole pixels: the rasterizer fills the same rows either way, and equal blocks merge.
      const float bar_top = std::round(bottom - std::max(2.f, busy * (kRowHeight - 1)));
      pending.add(dl, fx0, fx1, bar_top, base, top, bottom);
      if (any_match) {  // the outline goes over the block: draw the block first
        pending.flush(dl, top, bottom);
        dl->AddRect({fx0, top}, {fx1, bottom}, IM_COL32(255, 230, 0, 255), 0, 0, 2);
      }
      if (mouse_in_row && mouse.x >= fx0 && mouse.x < fx1) f.hovered_fold = fold;
    }
    pending.flush(dl, top, bottom);
  }
}

// The memory counters of a rank as a step graph, one column per pixel holding the largest
// value in effect there (so a spike narrower than a pixel still shows).
void draw_counters(ImDrawList* dl, const Run& run, int rank_i, float y, const Mapping& m) {
  const Rank& rank = run.model.ranks[rank_i];
  const double vmax = run.counter_max[rank_i];
  if (vmax <= 0) return;
  const int width = static_cast<int>(m.width);
  std::vector<float> column(static_cast<size_t>(width));
  const float bottom = y + kCounterHeight - 4, h = kCounterHeight - 10;
  // Clamped before the cast: deep zoom puts far samples billions of pixels away.
  auto column_of = [&](double t) {
    return static_cast<int>(std::clamp(m.x(t + run.offset_us) - m.x0, -1.f, static_cast<float>(width)));
  };
  for (const Counter& counter : rank.counters) {
    std::fill(column.begin(), column.end(), -1.f);
    const auto& s = counter.samples;
    const double t0 = m.t0 - run.offset_us, t1 = m.t1 - run.offset_us;
    size_t i = std::partition_point(s.begin(), s.end(), [&](const auto& p) { return p.first <= t0; }) - s.begin();
    for (i = i > 0 ? i - 1 : 0; i < s.size() && s[i].first < t1; ++i) {
      const double next = i + 1 < s.size() ? s[i + 1].first : run.model.end_us;
      const int c0 = std::max(0, column_of(s[i].first)), c1 = std::min(width - 1, column_of(next));
      const float v = static_cast<float>(s[i].second / vmax);
      for (int c = c0; c <= c1; ++c) column[static_cast<size_t>(c)] = std::max(column[static_cast<size_t>(c)], v);
    }
    // Reserved is the allocator's envelope: a line; allocated (and anything else) is filled.
    // Neighbouring columns at the same height (in whole pixels, which is what the rasterizer
    // fills) are one rectangle: a flat stretch costs one, not one per pixel.
    const bool line = counter.name.find("reserved") != std::string::npos;
    const ImU32 col = line ? IM_COL32(240, 90, 90, 255) : IM_COL32(45, 180, 170, 200);
    int run_start = 0;
    float run_top = -1;  // the top of the run being gathered (-1: none)
    auto emit = [&](int end) {  // columns [run_start, end)
      if (run_top < 0) return;
      const float x0 = m.x0 + static_cast<float>(run_start), x1 = m.x0 + static_cast<float>(end);
      if (line) dl->AddRectFilled({x0, run_top - 1}, {x1, run_top + 1}, col);
      else dl->AddRectFilled({x0, run_top}, {x1, bottom}, col);
    };
    for (int c = 0; c < width; ++c) {
      const float v = column[static_cast<size_t>(c)];
      const float top = v < 0 ? -1 : std::round(bottom - v * h);
      if (top == run_top) continue;
      emit(c);
      run_start = c;
      run_top = top;
    }
    emit(width);
  }

  // The allocator's moments over the graph: an alloc retry as a red wedge from the top, an
  // out of memory as a magenta line through the lane, segment mallocs and frees as short
  // yellow and grey ticks at the bottom.
  const auto& marks = rank.allocator;
  const double t0 = m.t0 - run.offset_us, t1 = m.t1 - run.offset_us;
  auto it = std::partition_point(marks.begin(), marks.end(), [&](const AllocatorMarker& a) { return a.t_us < t0; });
  for (; it != marks.end() && it->t_us <= t1; ++it) {
    const float x = m.x(it->t_us + run.offset_us);
    switch (it->kind) {
      case AllocatorEventKind::alloc_retry:
        dl->AddTriangleFilled({x - 5, y + 2}, {x + 5, y + 2}, {x, y + 12}, kRetryColor);
        dl->AddLine({x, y + 2}, {x, bottom}, kRetryColor);
        break;
      case AllocatorEventKind::out_of_memory:
        dl->AddLine({x, y + 2}, {x, bottom}, IM_COL32(230, 60, 230, 255), 3);
        break;
      case AllocatorEventKind::segment_malloc:
        dl->AddLine({x, bottom - 6}, {x, bottom}, IM_COL32(230, 200, 60, 220));
        break;
      case AllocatorEventKind::segment_free:
        dl->AddLine({x, bottom - 6}, {x, bottom}, IM_COL32(160, 160, 170, 220));
        break;
    }
  }
}

const AllocatorMarker* allocator_marker_at(const Run& run, const Rank& rank, float mouse_x, const Mapping& m) {
  const AllocatorMarker* best = nullptr;
  float best_dx = kMarkerPickPx;
  const double t0 = m.t(mouse_x - kMarkerPickPx) - run.offset_us, t1 = m.t(mouse_x + kMarkerPickPx) - run.offset_us;
  auto it = std::partition_point(rank.allocator.begin(), rank.allocator.end(),
                                 [&](const AllocatorMarker& a) { return a.t_us < t0; });
  for (; it != rank.allocator.end() && it->t_us <= t1; ++it) {
    const float dx = std::abs(m.x(it->t_us + run.offset_us) - mouse_x);
    // A retry or an OOM wins over the ticks around it: they are what a user looks for.
    const bool major = it->kind == AllocatorEventKind::alloc_retry || it->kind == AllocatorEventKind::out_of_memory;
    if (dx <= best_dx || (major && best && dx <= kMarkerPickPx &&
                          best->kind != AllocatorEventKind::alloc_retry && best->kind != AllocatorEventKind::out_of_memory)) {
      best = &*it;
      best_dx = dx;
    }
  }
  return best;
}

// Arrows between a slice and each slice sharing its correlation, pointing as the work went:
// from the CPU's launch to the kernel on its stream.
void draw_flows(ImDrawList* dl, const AppState& app, const SliceRef& ref, const Frame& f) {
  const Slice& s = *app.slice(ref);
  if (s.correlation == 0) return;
  const Run& run = app.runs[ref.run];
  const auto& peers = run.by_correlation[ref.rank];
  const auto it = peers.find(s.correlation);
  if (it == peers.end()) return;
  for (SliceRef p : it->second) {
    if (p == ref) continue;
    SliceRef from = ref;
    if (run.model.ranks[ref.rank].lanes[ref.lane].device) std::swap(from, p);
    const float y0 = f.lane_y[from.run][from.rank][from.lane], y1 = f.lane_y[p.run][p.rank][p.lane];
    if (std::isnan(y0) || std::isnan(y1)) continue;
    const Slice &fs = *app.slice(from), &ps = *app.slice(p);
    const ImVec2 a(f.map.x(fs.start_us + run.offset_us), slice_top(y0, fs.depth) + kRowHeight / 2);
    const ImVec2 b(f.map.x(ps.start_us + run.offset_us), slice_top(y1, ps.depth) + kRowHeight / 2);
    const float bend = std::max(20.f, std::abs(b.y - a.y) / 2);
    const ImU32 col = IM_COL32(255, 255, 255, 230);
    dl->AddBezierCubic(a, {a.x, a.y + (b.y > a.y ? bend : -bend)}, {b.x - bend, b.y}, b, col, 2);
    dl->AddTriangleFilled(b, {b.x - 8, b.y - 5}, {b.x - 8, b.y + 5}, col);
  }
}

void draw_collective_links(ImDrawList* dl, const AppState& app, const SliceRef& ref, const Frame& f) {
  const Collective* c = app.collective(ref);
  if (!c || c->peers.size() < 2) return;
  const double offset = app.runs[ref.run].offset_us;
  const ImU32 col = kCollectiveColor;
  bool have_prev = false;
  ImVec2 prev;
  for (const CollectivePeer& p : c->peers) {
    const float y = f.lane_y[p.ref.run][p.ref.rank][p.ref.lane];
    if (std::isnan(y)) continue;  // a collapsed rank, a lane scrolled away
    const Slice& s = *app.slice(p.ref);
    const float top = slice_top(y, s.depth), bottom = top + kRowHeight - 1;
    const float x0 = f.map.x(s.start_us + offset), x1 = std::max(x0 + 2, f.map.x(s.end_us + offset));
    if (!(p.ref == ref)) dl->AddRect({x0 - 1, top - 1}, {x1 + 1, bottom + 1}, col, 0, 0, 2);
    if (p.wait_us > 0) {  // the wait, as a bar along the bottom of its row
      const float w0 = f.map.x(s.start_us - p.wait_us + offset);
      dl->AddRectFilled({w0, bottom - 3}, {x0, bottom}, col);
    }
    const ImVec2 at(x0, top + kRowHeight / 2);
    if (have_prev) dl->AddLine(prev, at, col, 2);
    dl->AddCircleFilled(at, 4, col);
    prev = at;
    have_prev = true;
  }
}

}  // namespace shardlab::viewer::app
