// panels.cpp: the toolbar and the tabs under the timeline. Every figure comes from
// common/trace/metrics.h, the code behind the run summary, so the viewer and the summary agree.
#include "panels.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

namespace shardlab::viewer::app {
namespace {

// The Compare tab's change column: green where the compared run is better off, red where worse.
const ImVec4 kBetter(0.4f, 0.9f, 0.4f, 1), kWorse(1, 0.5f, 0.4f, 1);

constexpr ImGuiTableFlags kTableFlags = ImGuiTableFlags_RowBg | ImGuiTableFlags_BordersInnerV |
                                        ImGuiTableFlags_ScrollY | ImGuiTableFlags_SizingStretchProp;

void time_cell(double us) {
  ImGui::TableNextColumn();
  ImGui::TextUnformatted(format_time(us).c_str());
}

// A time and its share of the window: "1.2 ms (34%)".
void share_cell(double us, double window_us) {
  ImGui::TableNextColumn();
  ImGui::Text("%s (%.0f%%)", format_time(us).c_str(), window_us > 0 ? 100 * us / window_us : 0.0);
}

void bytes_cell(int64_t bytes) {
  ImGui::TableNextColumn();
  ImGui::TextUnformatted(human_bytes(static_cast<double>(bytes)).c_str());
}

void headers(std::initializer_list<const char*> names) {
  for (const char* n : names) ImGui::TableSetupColumn(n);
  ImGui::TableSetupScrollFreeze(0, 1);
  ImGui::TableHeadersRow();
}

// A collective on each rank: when it started (the earliest start is the reference), how long it
// took, how long its stream waited for the others first. Clicking a row selects that rank's kernel.
void collective_table(AppState& app, const Collective& c) {
  const Run& run = app.runs[static_cast<size_t>(app.selected.run)];
  ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(kCollectiveColor), "%s #%lld of %s%s%s on every rank",
                     c.name.c_str(), static_cast<long long>(c.seq), c.group.c_str(), c.group_ranks.empty() ? "" : " ",
                     c.group_ranks.c_str());
  double first = app.slice(c.peers.front().ref)->start_us;
  for (const CollectivePeer& p : c.peers) first = std::min(first, app.slice(p.ref)->start_us);
  if (!ImGui::BeginTable("collective", 5, kTableFlags)) return;
  headers({"rank", "start", "duration", "wait before", "late by"});
  SliceRef select;
  for (const CollectivePeer& p : c.peers) {
    const Slice& s = *app.slice(p.ref);
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    char label[48];
    std::snprintf(label, sizeof label, "%d##peer%d.%d.%u", run.model.ranks[static_cast<size_t>(p.ref.rank)].rank,
                  p.ref.rank, p.ref.lane, p.ref.slice);
    if (ImGui::Selectable(label, p.ref == app.selected, ImGuiSelectableFlags_SpanAllColumns)) select = p.ref;
    ImGui::TableNextColumn();
    ImGui::Text("%.3f us", s.start_us + run.offset_us - app.time_origin());  // to the ns: the skew is in the digits
    time_cell(s.end_us - s.start_us);
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(p.wait_us > 0 ? format_time(p.wait_us).c_str() : "-");
    ImGui::TableNextColumn();
    if (s.start_us > first) ImGui::Text("+%s", format_time(s.start_us - first).c_str());
    else ImGui::TextUnformatted("-");
  }
  ImGui::EndTable();
  if (select.valid()) app.selected = select;
}

void details_tab(AppState& app) {
  if (!app.selected.valid()) {
    ImGui::TextDisabled("Click a slice to see its details; hover one for a quick look.");
    return;
  }
  const Collective* c = app.collective(app.selected);
  if (!c || c->peers.size() < 2) {
    slice_details(app, app.selected);
    return;
  }
  // A collective: its details on the left, the same collective on every rank on the right.
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  ImGui::BeginChild("slice", {avail.x * 0.5f, 0});
  slice_details(app, app.selected);
  ImGui::EndChild();
  ImGui::SameLine();
  ImGui::BeginChild("peers");
  collective_table(app, *c);
  ImGui::EndChild();
}

void steps_tab(AppState& app) {
  // Every step of every rank of each run: thousands of rows in a long profile, so only the rows
  // on screen are laid out (ImGuiListClipper).
  struct StepRow {
    size_t run, rank;
    const StepMetrics* step;
  };
  std::vector<StepRow> rows;
  for (size_t r = 0; r < app.runs.size(); ++r)
    for (size_t k = 0; k < app.runs[r].steps.size(); ++k)
      for (const StepMetrics& s : app.runs[r].steps[k]) rows.push_back({r, k, &s});
  if (!ImGui::BeginTable("steps", 14, kTableFlags)) return;
  headers({"rank", "step", "step time", "compute", "comm", "overlapped", "exposed comm", "memcpy", "copy overlap",
           "idle", "peak allocated", "peak reserved", "intra-node sent", "network sent"});
  ImGuiListClipper clipper;
  clipper.Begin(static_cast<int>(rows.size()));
  while (clipper.Step())
    for (int i = clipper.DisplayStart; i < clipper.DisplayEnd; ++i) {
      const auto& [r, k, step] = rows[static_cast<size_t>(i)];
      const StepMetrics& s = *step;
      const Run& run = app.runs[r];
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      char label[48];
      std::snprintf(label, sizeof label, "%s%d##%zu.%d.%d", r ? "cmp " : "", s.rank, r, s.rank, s.step);
      // Clicking a row shows that step.
      if (ImGui::Selectable(label, false, ImGuiSelectableFlags_SpanAllColumns))
        for (const StepWindow& w : run.model.ranks[k].timeline.steps)
          if (w.step == s.step) app.fit(w.start_us + run.offset_us, w.end_us + run.offset_us);
      ImGui::TableNextColumn();
      ImGui::Text("%d", s.step);
      time_cell(s.step_us);
      share_cell(s.compute_us, s.step_us);
      share_cell(s.comm_us, s.step_us);
      share_cell(s.overlap_us, s.step_us);
      share_cell(s.exposed_comm_us, s.step_us);
      share_cell(s.memcpy_us, s.step_us);
      share_cell(s.copy_overlap_us, s.step_us);
      share_cell(s.idle_us, s.step_us);
      bytes_cell(s.peak_allocated);
      bytes_cell(s.peak_reserved);
      bytes_cell(s.intra_node_bytes);  // what this rank's collectives sent over each link tier
      bytes_cell(s.network_bytes);
    }
  ImGui::EndTable();
}

void range_tab(AppState& app) {
  if (!app.range) {
    ImGui::TextDisabled("Shift-drag on the timeline to select a time range.");
    return;
  }
  const auto [t0, t1] = *app.range;
  ImGui::Text("%s to %s: %s", format_time(t0 - app.time_origin()).c_str(), format_time(t1 - app.time_origin()).c_str(),
              format_time(t1 - t0).c_str());
  // Recomputed only when the range changes: a drag moves it every frame, but a still range
  // should cost nothing on a big trace.
  if (app.range_rows_for != app.range) {
    app.range_rows_for = app.range;
    app.range_rows.clear();
    for (size_t r = 0; r < app.runs.size(); ++r)
      for (const Rank& rank : app.runs[r].model.ranks)
        app.range_rows.emplace_back((r ? "cmp " : "") + std::to_string(rank.rank),
                                    range_metrics(rank.timeline, t0 - app.runs[r].offset_us, t1 - app.runs[r].offset_us));
  }
  if (!ImGui::BeginTable("range", 9, kTableFlags)) return;
  headers({"rank", "compute", "comm", "overlapped", "exposed comm", "comm wait", "memcpy", "copy overlap", "idle"});
  for (const auto& [rank, m] : app.range_rows) {
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(rank.c_str());
    for (double v : {m.compute_us, m.comm_us, m.overlap_us, m.exposed_comm_us, m.comm_wait_us, m.memcpy_us,
                     m.copy_overlap_us, m.idle_us})
      share_cell(v, m.window_us);
  }
  ImGui::EndTable();
}

void metrics_table(const AppState& app) {
  if (!ImGui::BeginTable("compare", 5, kTableFlags)) return;
  headers({"per step, rank average", "run", "compared", "difference", "change"});
  for (const CompareRow& row : compare_rows(app)) {
    auto fmt = [&](double v) { return row.bytes ? human_bytes(v) : format_time(v); };
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(row.name);
    for (double v : {row.run, row.compared, row.compared - row.run}) {
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(fmt(v).c_str());
    }
    ImGui::TableNextColumn();
    const CompareChange change = compare_change(row);
    switch (change.verdict) {
      case CompareChange::better: ImGui::TextColored(kBetter, "%s", change.text.c_str()); break;
      case CompareChange::worse: ImGui::TextColored(kWorse, "%s", change.text.c_str()); break;
      case CompareChange::neutral: ImGui::TextUnformatted(change.text.c_str()); break;
      case CompareChange::same: ImGui::TextDisabled("%s", change.text.c_str()); break;
    }
  }
  ImGui::EndTable();
}

// "12 -> 8" per step (counts are averages: fractions where ops run in some steps only).
std::string count_text(const OperationRow& row) {
  char text[48];
  std::snprintf(text, sizeof text, "%.4g -> %.4g", row.count[0], row.count[1]);
  return text;
}

// Operation by operation, the largest difference in time first; a click outlines the
// operation's slices in both runs and shows its first one.
void operations_table(AppState& app) {
  const std::vector<OperationRow> rows = operation_rows(app);
  app.layout.operation_rows.clear();
  if (!ImGui::BeginTable("operations", 8, kTableFlags)) return;
  headers({"operation, per step", "kind", "count", "time: run", "compared", "difference", "exposed: run", "compared"});
  std::string clicked;
  ImGuiListClipper clipper;  // a real model has hundreds of operations: lay out the visible rows
  clipper.Begin(static_cast<int>(rows.size()));
  while (clipper.Step())
    for (int i = clipper.DisplayStart; i < clipper.DisplayEnd; ++i) {
      const OperationRow& row = rows[static_cast<size_t>(i)];
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      const std::string label = row.label + "##" + row.key;
      if (ImGui::Selectable(label.c_str(), row.key == app.highlighted_op, ImGuiSelectableFlags_SpanAllColumns))
        clicked = row.key;
      if (ImGui::IsItemVisible()) app.layout.operation_rows.push_back({row.key, {ImGui::GetItemRectMin(), ImGui::GetItemRectMax()}});
      ImGui::TableNextColumn();
      ImGui::TextDisabled("%s", row.kind.c_str());
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(count_text(row).c_str());
      time_cell(row.time_us[0]);
      time_cell(row.time_us[1]);
      ImGui::TableNextColumn();
      const double diff = row.difference_us();
      if (std::abs(diff) < 1e-3) ImGui::TextDisabled("same");
      else ImGui::TextColored(diff < 0 ? kBetter : kWorse, "%s%s", diff > 0 ? "+" : "", format_time(diff).c_str());
      for (double exposed : row.exposed_us) {
        ImGui::TableNextColumn();
        if (row.communication) ImGui::TextUnformatted(format_time(exposed).c_str());
        else ImGui::TextDisabled("-");
      }
    }
  ImGui::EndTable();
  if (!clicked.empty()) app.highlight_op(clicked == app.highlighted_op ? std::string() : clicked);
}

// The two runs side by side: the per-step metrics, and operation by operation.
void compare_tab(AppState& app) {
  if (app.runs.size() < 2) {
    ImGui::TextDisabled("Start with --compare PATH to put a second run below this one.");
    return;
  }
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  ImGui::BeginChild("metrics", {std::min(avail.x * 0.36f, 560.f), 0});
  metrics_table(app);
  ImGui::EndChild();
  ImGui::SameLine();
  ImGui::BeginChild("operations");
  operations_table(app);
  ImGui::EndChild();
}

}  // namespace

const char* tab_name(int tab) {
  switch (tab) {
    case tab_details: return "Details";
    case tab_steps: return "Steps";
    case tab_range: return "Range";
    case tab_compare: return "Compare";
    default: return "";
  }
}

void toolbar(AppState& app) {
  ImGui::SetNextItemWidth(220);
  if (ImGui::InputTextWithHint("##search", "search names", app.search, sizeof app.search)) app.update_search();
  app.layout.search_field = {ImGui::GetItemRectMin(), ImGui::GetItemRectMax()};
  if (app.searching()) {
    ImGui::SameLine();
    ImGui::TextDisabled("%zu matches", app.match_count);
  }
  for (int c = 0; c < kCategories; ++c) {
    const auto cat = static_cast<ViewCategory>(c);
    ImGui::SameLine();
    // A colour swatch as the checkbox's legend.
    const ImVec2 p = ImGui::GetCursorScreenPos();
    const float h = ImGui::GetFrameHeight();
    ImGui::GetWindowDrawList()->AddRectFilled({p.x, p.y + 4}, {p.x + 10, p.y + h - 4}, category_color(cat));
    ImGui::Dummy({12, h});
    ImGui::SameLine(0, 2);
    ImGui::Checkbox(category_name(cat), &app.show_category[static_cast<size_t>(c)]);
    app.layout.category_boxes[static_cast<size_t>(c)] = {ImGui::GetItemRectMin(), ImGui::GetItemRectMax()};
  }
  ImGui::SameLine(0, 24);
  if (ImGui::Checkbox("streams only", &app.streams_only) && app.streams_only) app.open_every_rank = true;
  app.layout.streams_only_box = {ImGui::GetItemRectMin(), ImGui::GetItemRectMax()};
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("each rank's GPU streams only, every rank open: no CPU thread, no memory");
  if (app.runs.size() > 1 && !app.runs[0].model.ranks.empty()) {
    ImGui::SameLine(0, 24);
    ImGui::SetNextItemWidth(90);
    char current[32];
    std::snprintf(current, sizeof current, "step %d", app.align_step);
    if (ImGui::BeginCombo("align runs", current)) {
      for (const StepWindow& w : app.runs[0].model.ranks[0].timeline.steps) {
        std::snprintf(current, sizeof current, "step %d", w.step);
        if (ImGui::Selectable(current, w.step == app.align_step)) {
          app.align_step = w.step;
          app.align_runs();
        }
      }
      ImGui::EndCombo();
    }
  }
  ImGui::SameLine(0, 24);
  ImGui::TextDisabled("(?)");
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("wheel: zoom at the cursor   Ctrl+wheel: scroll   drag: pan\n"
                      "Shift+drag: select a range   click: select a slice\n"
                      "W/S: zoom   A/D: pan   F: fit the selection   Home: fit everything\n"
                      "Ctrl+L: the path field   drop run directories or trace files onto the window to open them");
}

void panels(AppState& app) {
  if (!ImGui::BeginTabBar("panels")) return;
  auto tab = [&](const char* name, Tab t) {
    const bool requested = app.panel_tab == t;
    const bool open = ImGui::BeginTabItem(name, nullptr, requested ? ImGuiTabItemFlags_SetSelected : 0);
    if (open) app.shown_tab = t;
    return open;
  };
  app.shown_tab = -1;
  if (tab("Details", tab_details)) {
    details_tab(app);
    ImGui::EndTabItem();
  }
  if (tab("Steps", tab_steps)) {
    steps_tab(app);
    ImGui::EndTabItem();
  }
  if (tab("Range", tab_range)) {
    range_tab(app);
    ImGui::EndTabItem();
  }
  if (tab("Compare", tab_compare)) {
    compare_tab(app);
    ImGui::EndTabItem();
  }
  app.panel_tab = -1;
  ImGui::EndTabBar();
}

}  // namespace shardlab::viewer::app
