// timeline.cpp: the timeline widget. Immediate mode: every frame lays out the ranks and lanes as
// ImGui items (so collapsing and scrolling come for free) and draws their slices with the draw
// list (lanes.cpp), touching only what is visible.
#include "timeline.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "lanes.h"
#include "panels.h"
#include "trace/timeline.h"

namespace shardlab::viewer::app {
namespace {

constexpr float kLabelWidth = 170;   // the lane names column
constexpr float kRulerHeight = 24;

// A ruler step of 1, 2 or 5 x 10^k microseconds, about 110 px apart.
double tick_step(const Mapping& m) {
  const double raw = 110 * m.us_per_px();
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double mant : {1.0, 2.0, 5.0})
    if (mant * p >= raw) return mant * p;
  return 10 * p;
}

// The first tick in the window, as time since zero (the run's first event): ticks fall on
// round times since then, not on round epoch microseconds.
double first_tick(const Mapping& m, double zero, double step) { return std::ceil((m.t0 - zero) / step) * step; }

// "12.5 ms" with as many decimals as the step needs to tell neighbouring ticks apart.
std::string tick_label(double t, double step) {
  const double unit = step >= 1e6 ? 1e6 : step >= 1e3 ? 1e3 : step >= 1 ? 1 : 1e-3;
  const char* name = unit == 1e6 ? "s" : unit == 1e3 ? "ms" : unit == 1 ? "us" : "ns";
  const int decimals = std::max(0, static_cast<int>(-std::floor(std::log10(step / unit) + 1e-9)));
  if (std::abs(t) < step * 1e-6) t = 0;  // not "-0 us"
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f %s", decimals, t / unit, name);
  return buf;
}

struct Drag {
  bool active = false, range = false, moved = false;
  ImVec2 start;
  double t_start = 0;
};

void draw_ruler(ImDrawList* dl, AppState& app, ImVec2 origin, const Mapping& m) {
  const float x1 = m.x0 + m.width;
  dl->AddRectFilled(origin, {x1, origin.y + kRulerHeight}, IM_COL32(38, 40, 46, 255));
  char window[64];
  std::snprintf(window, sizeof window, "window %s", format_time(m.t1 - m.t0).c_str());
  dl->AddText({origin.x + 6, origin.y + 5}, IM_COL32(170, 170, 180, 255), window);
  const double step = tick_step(m), zero = app.time_origin();
  dl->PushClipRect({m.x0, origin.y}, {x1, origin.y + kRulerHeight}, true);
  app.layout.ruler_ticks.clear();
  for (double since = first_tick(m, zero, step); zero + since < m.t1; since += step) {
    const float x = m.x(zero + since);
    const std::string label = tick_label(since, step);
    dl->AddLine({x, origin.y + kRulerHeight - 8}, {x, origin.y + kRulerHeight}, IM_COL32(170, 170, 180, 255));
    dl->AddText({x + 3, origin.y + 3}, IM_COL32(210, 210, 220, 255), label.c_str());
    app.layout.ruler_ticks.push_back(label);
  }
  if (app.range) {
    const float a = m.x(app.range->first), b = m.x(app.range->second);
    dl->AddRectFilled({a, origin.y}, {b, origin.y + kRulerHeight}, IM_COL32(90, 160, 255, 90));
    const std::string len = format_time(app.range->second - app.range->first);
    const float w = ImGui::CalcTextSize(len.c_str()).x;
    dl->AddText({(a + b - w) / 2, origin.y + 5}, IM_COL32(255, 255, 255, 255), len.c_str());
  }
  dl->PopClipRect();
}

void handle_input(AppState& app, const Frame& f, bool tracks_hovered) {
  static Drag drag;
  ImGuiIO& io = ImGui::GetIO();
  const Mapping& m = f.map;
  auto zoom_at = [&](double t, double factor) {
    app.view_t0 = t - (t - app.view_t0) * factor;
    app.view_t1 = t + (app.view_t1 - t) * factor;
  };
  if (tracks_hovered && io.MouseWheel != 0) {
    if (io.KeyCtrl) ImGui::SetScrollY(ImGui::GetScrollY() - io.MouseWheel * 3 * kRowHeight);
    else zoom_at(m.t(io.MousePos.x), std::pow(0.8, static_cast<double>(io.MouseWheel)));
  }
  if (tracks_hovered && ImGui::IsMouseClicked(0) && !ImGui::IsAnyItemHovered())
    drag = {true, io.KeyShift, false, io.MousePos, m.t(io.MousePos.x)};
  if (drag.active && ImGui::IsMouseDown(0)) {
    const ImVec2 d(io.MousePos.x - drag.start.x, io.MousePos.y - drag.start.y);
    drag.moved = drag.moved || d.x * d.x + d.y * d.y > 9;
    if (drag.range && drag.moved) {
      const double t = m.t(io.MousePos.x);
      app.range = std::pair{std::min(t, drag.t_start), std::max(t, drag.t_start)};
      app.panel_tab = tab_range;
    } else if (!drag.range) {
      const double dt = -static_cast<double>(io.MouseDelta.x) * m.us_per_px();
      app.view_t0 += dt;
      app.view_t1 += dt;
      ImGui::SetScrollY(ImGui::GetScrollY() - io.MouseDelta.y);
    }
  } else if (drag.active) {  // released: a click without a drag selects (or clears)
    if (!drag.moved) {
      app.selected = app.hovered;
      if (drag.range || !app.hovered.valid()) app.range.reset();
      if (app.selected.valid()) app.panel_tab = tab_details;
    }
    drag.active = false;
  }

  if (io.WantTextInput) return;
  // Letter keys: GLFW's key codes for letters are their upper-case ASCII codes.
  const double dt = io.DeltaTime, center = ImGui::IsWindowHovered() ? m.t(io.MousePos.x) : (m.t0 + m.t1) / 2;
  if (ImGui::IsKeyDown('W')) zoom_at(center, std::exp(-2.5 * dt));
  if (ImGui::IsKeyDown('S')) zoom_at(center, std::exp(2.5 * dt));
  const double pan = (app.view_t1 - app.view_t0) * 1.2 * dt;
  if (ImGui::IsKeyDown('A')) app.view_t0 -= pan, app.view_t1 -= pan;
  if (ImGui::IsKeyDown('D')) app.view_t0 += pan, app.view_t1 += pan;
  if (ImGui::IsKeyPressed('F')) {
    if (const Slice* s = app.slice(app.selected)) {
      const double off = app.runs[app.selected.run].offset_us;
      app.fit(s->start_us + off, s->end_us + off);
    } else if (app.range) {
      app.fit(app.range->first, app.range->second);
    }
  }
  if (ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_Home))) app.fit_all();
}

}  // namespace

void timeline(AppState& app, float height) {
  static Frame f;
  const ImGuiStyle& style = ImGui::GetStyle();
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  const float width = ImGui::GetContentRegionAvail().x;
  // The tracks always show their scrollbar, so the ruler and the tracks share one mapping.
  f.map = {origin.x + kLabelWidth, width - kLabelWidth - style.ScrollbarSize - style.WindowPadding.x,
           app.view_t0, app.view_t1};
  f.hovered_fold.reset();
  f.hovered_counters = nullptr;
  app.hovered = {};
  draw_ruler(ImGui::GetWindowDrawList(), app, origin, f.map);
  ImGui::Dummy({width, kRulerHeight});

  ImGui::BeginChild("tracks", {width, height - kRulerHeight - style.ItemSpacing.y}, false,
                    ImGuiWindowFlags_AlwaysVerticalScrollbar | ImGuiWindowFlags_NoScrollWithMouse);
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 clip0 = ImGui::GetWindowPos();
  const float clip_y1 = clip0.y + ImGui::GetWindowHeight();
  const float track_x1 = f.map.x0 + f.map.width;
  app.layout.track_x0 = f.map.x0, app.layout.track_width = f.map.width;
  app.layout.tracks_top = clip0.y, app.layout.tracks_bottom = clip_y1;
  app.layout.lanes.clear();

  // Grid lines at the ruler's ticks, behind everything.
  const double step = tick_step(f.map), zero = app.time_origin();
  for (double since = first_tick(f.map, zero, step); zero + since < f.map.t1; since += step)
    dl->AddLine({f.map.x(zero + since), clip0.y}, {f.map.x(zero + since), clip_y1}, IM_COL32(255, 255, 255, 18));

  f.lane_y.resize(app.runs.size());
  for (int r = 0; r < static_cast<int>(app.runs.size()); ++r) {
    const Run& run = app.runs[r];
    f.lane_y[r].resize(run.model.ranks.size());
    ImGui::PushID(r);
    if (app.runs.size() > 1)
      ImGui::TextColored(r == 0 ? ImVec4(0.5f, 0.8f, 1, 1) : ImVec4(1, 0.75f, 0.4f, 1), "%s: %s",
                         r == 0 ? "run" : "compared", run.label.c_str());
    // Two runs: each shows rank 0, and its other ranks fold under one header (closed at first),
    // so the compared run stays on the screen whatever the rank count.
    const int ranks = static_cast<int>(run.model.ranks.size());
    bool others_open = true;
    for (int k = 0; k < ranks; ++k) {
      if (app.runs.size() > 1 && k == 1) {
        char fold[64];
        std::snprintf(fold, sizeof fold, ranks == 2 ? "rank %d" : "ranks %d to %d", run.model.ranks[1].rank,
                      run.model.ranks.back().rank);
        if (app.open_every_rank) ImGui::SetNextItemOpen(true);
        others_open = ImGui::TreeNodeEx(fold, ImGuiTreeNodeFlags_NoTreePushOnOpen | ImGuiTreeNodeFlags_SpanAvailWidth);
      }
      if (!others_open) {  // folded: no lanes, so nothing to draw or to hit
        f.lane_y[r][k].assign(run.model.ranks[k].lanes.size(), NAN);
        continue;
      }
      const Rank& rank = run.model.ranks[k];
      std::vector<float>& ys = f.lane_y[r][k];
      ys.assign(rank.lanes.size(), NAN);
      ImGui::PushID(k);
      if (app.open_every_rank) ImGui::SetNextItemOpen(true);
      else ImGui::SetNextItemOpen(app.runs.size() == 1 || k == 0, ImGuiCond_Once);
      char header[96];
      std::snprintf(header, sizeof header, "rank %d", rank.rank);
      const bool open = ImGui::CollapsingHeader(header);
      if (open) {
        for (int l = 0; l < static_cast<int>(rank.lanes.size()); ++l) {
          const Lane& lane = rank.lanes[l];
          if (app.streams_only && !lane.device) continue;
          const ImVec2 p = ImGui::GetCursorScreenPos();
          const float h = static_cast<float>(lane.max_depth + 1) * kRowHeight + 2 * kLanePad;
          ImGui::Dummy({width, h});
          if (!ImGui::IsItemVisible()) continue;
          ys[l] = p.y;
          app.layout.lanes.push_back({r, k, l, p.y, h});
          dl->AddRectFilled({p.x, p.y}, {track_x1, p.y + h}, l % 2 ? IM_COL32(255, 255, 255, 8) : IM_COL32(0, 0, 0, 0));
          dl->AddText({p.x + 14, p.y + kLanePad + 2}, IM_COL32(215, 215, 225, 255), lane.name.c_str());
          dl->PushClipRect({f.map.x0, p.y}, {track_x1, p.y + h}, true);
          draw_lane(dl, app, r, k, l, p.y, f);
          dl->PopClipRect();
        }
        if (!rank.counters.empty() && !app.streams_only) {
          const ImVec2 p = ImGui::GetCursorScreenPos();
          ImGui::Dummy({width, kCounterHeight});
          if (ImGui::IsItemVisible()) {
            dl->AddText({p.x + 14, p.y + 4}, IM_COL32(215, 215, 225, 255), "memory");
            dl->AddText({p.x + 14, p.y + 22}, IM_COL32(150, 150, 160, 255), human_bytes(run.counter_max[k]).c_str());
            dl->PushClipRect({f.map.x0, p.y}, {track_x1, p.y + kCounterHeight}, true);
            draw_counters(dl, run, k, p.y, f.map);
            dl->PopClipRect();
            if (ImGui::IsItemHovered() && ImGui::GetMousePos().x >= f.map.x0) {
              f.hovered_counters = &rank;
              f.hovered_counters_run = &run;
            }
          }
        }
      }
      ImGui::PopID();
    }
    ImGui::PopID();
  }
  if (!app.runs.empty()) app.open_every_rank = false;  // opened this frame; now the user folds what they like

  dl->PushClipRect({f.map.x0, clip0.y}, {track_x1, clip_y1}, true);
  if (app.range) {
    const float a = f.map.x(app.range->first), b = f.map.x(app.range->second);
    dl->AddRectFilled({a, clip0.y}, {b, clip_y1}, IM_COL32(90, 160, 255, 40));
    dl->AddLine({a, clip0.y}, {a, clip_y1}, IM_COL32(90, 160, 255, 200));
    dl->AddLine({b, clip0.y}, {b, clip_y1}, IM_COL32(90, 160, 255, 200));
  }
  if (const SliceRef& from = app.hovered.valid() ? app.hovered : app.selected; from.valid()) {
    draw_collective_links(dl, app, from, f);
    draw_flows(dl, app, from, f);
  }
  dl->PopClipRect();

  const bool tracks_hovered = ImGui::IsWindowHovered() && ImGui::GetMousePos().x >= f.map.x0;
  handle_input(app, f, tracks_hovered);
  if (tracks_hovered && !ImGui::IsMouseDown(0)) {
    if (app.hovered.valid()) {
      ImGui::BeginTooltip();
      slice_details(app, app.hovered);
      ImGui::EndTooltip();
    } else if (f.hovered_fold) {
      const Fold& fold = *f.hovered_fold;
      ImGui::SetTooltip("%zu slices in %s, busy %.0f%% of it (each narrower than %.0f px): zoom in", fold.count,
                        format_time(fold.t1 - fold.t0).c_str(), 100 * fold.busy_us / std::max(fold.t1 - fold.t0, 1e-9),
                        kMinSlicePx);
    } else if (f.hovered_counters) {
      const double at = f.map.t(ImGui::GetMousePos().x);
      const double t = at - f.hovered_counters_run->offset_us;
      ImGui::BeginTooltip();
      if (const AllocatorMarker* mark =
              allocator_marker_at(*f.hovered_counters_run, *f.hovered_counters, ImGui::GetMousePos().x, f.map)) {
        ImGui::Text("%s at %s", std::string(allocator_event_name(mark->kind)).c_str(),
                    format_time(mark->t_us + f.hovered_counters_run->offset_us - app.time_origin()).c_str());
        const nlohmann::json args =
            nlohmann::json::parse(f.hovered_counters_run->model.args_json[mark->args], nullptr, false);
        if (args.is_object())
          for (const auto& [key, value] : args.items())
            ImGui::Text("  %s: %s", key.c_str(),
                        value.is_string()                         ? value.get<std::string>().c_str()
                        : key.find("bytes") != std::string::npos ? human_bytes(value.get<double>()).c_str()
                                                                  : value.dump().c_str());
        ImGui::Separator();
      }
      ImGui::Text("at %s", format_time(at - app.time_origin()).c_str());
      ImGui::TextDisabled("in the file: %s", format_absolute(t).c_str());
      for (const Counter& c : f.hovered_counters->counters) {
        const auto it = std::partition_point(c.samples.begin(), c.samples.end(), [&](const auto& p) { return p.first <= t; });
        if (it != c.samples.begin()) ImGui::Text("%s: %s", c.name.c_str(), human_bytes(std::prev(it)->second).c_str());
      }
      ImGui::EndTooltip();
    }
  }
  ImGui::EndChild();
}

}  // namespace shardlab::viewer::app
