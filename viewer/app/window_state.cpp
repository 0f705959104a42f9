// window_state.cpp: Viewer::state(), what the window shows as JSON. The tests and the
// screenshot tools read it (tests/viewer/check_viewer_input.py, viewer/app/replay.cpp) instead of pixels:
// the view, the selection, the panels' rows, and where each thing is on screen.
#include "window.h"

#include <imgui.h>

#include "panels.h"
#include "timeline.h"
#include "trace/metrics_json.h"

namespace shardlab::viewer::app {
namespace {

nlohmann::json rect(const std::pair<ImVec2, ImVec2>& r) { return {r.first.x, r.first.y, r.second.x, r.second.y}; }

nlohmann::json slice_json(const AppState& app, const SliceRef& ref) {
  const Slice* s = app.slice(ref);
  if (!s) return nullptr;
  const Run& run = app.runs[static_cast<size_t>(ref.run)];
  const Rank& rank = run.model.ranks[static_cast<size_t>(ref.rank)];
  nlohmann::json j = {{"run", ref.run},
                      {"rank", rank.rank},
                      {"lane", ref.lane},
                      {"lane_name", rank.lanes[static_cast<size_t>(ref.lane)].name},
                      {"index", ref.slice},
                      {"name", run.model.names[s->name]},
                      {"category", category_name(view_category(run, *s))},
                      {"depth", s->depth},
                      {"start_us", s->start_us + run.offset_us},
                      {"end_us", s->end_us + run.offset_us}};
  // A communication kernel: the figures its details show (bandwidths, link, bytes sent).
  if (const CollectiveRecord* record = app.collective_record(ref)) {
    const CollectiveMetrics c = collective_metrics(*record);
    j["collective_metrics"] = to_json(c);
    j["collective_metrics"]["link"] = c.link;
  }
  // The CPU ops around its launch, outermost first (what its details say it was launched in).
  nlohmann::json context = nlohmann::json::array();
  for (uint32_t name : launch_context(run, ref.rank, ref.lane, ref.slice)) context.push_back(run.model.names[name]);
  j["launched_in"] = context;
  return j;
}

const char* verdict_name(CompareChange::Verdict v) {
  switch (v) {
    case CompareChange::same: return "same";
    case CompareChange::better: return "better";
    case CompareChange::worse: return "worse";
    case CompareChange::neutral: break;
  }
  return "neutral";
}

}  // namespace

nlohmann::json Viewer::state() const {
  using nlohmann::json;
  const ImGuiIO& io = ImGui::GetIO();
  json runs = json::array();
  for (const Run& run : app.runs) {
    json files = json::array(), rank_files = json::array(), not_opened = json::array();
    for (const Rank& r : run.model.ranks) {
      files.push_back(r.file);
      rank_files.push_back({{"rank", r.rank}, {"file", r.file}, {"rank_from", rank_source_name(r.rank_from)},
                            {"stopped", r.stopped}});
    }
    for (const NotOpened& n : run.model.not_opened)
      not_opened.push_back({{"file", n.file}, {"why", n.why}, {"not_a_trace", n.not_a_trace}});
    runs.push_back({{"label", run.label},
                    {"files", files},
                    {"rank_files", rank_files},
                    {"not_opened", not_opened},
                    {"ranks", run.model.ranks.size()},
                    {"events", run.model.events},
                    {"dropped_events", run.model.skipped},
                    {"names_cut", run.model.names_cut},
                    {"start_us", run.model.start_us},
                    {"end_us", run.model.end_us},
                    {"offset_us", run.offset_us},
                    {"incomplete", incomplete_text(run.model)},
                    {"read_in_part", stopped_text(run.model)}});
  }
  json range_rows = json::array();
  if (app.range && app.range_rows_for == app.range)
    for (const auto& [rank, m] : app.range_rows) {
      json row = to_json(m);
      row["rank"] = rank;
      range_rows.push_back(std::move(row));
    }
  // The Steps tab's rows.
  json step_rows = json::array();
  for (size_t r = 0; r < app.runs.size(); ++r)
    for (const auto& rank_steps : app.runs[r].steps)
      for (const StepMetrics& s : rank_steps) {
        json row = to_json(s);
        row["run"] = r;
        row["rank"] = s.rank;
        step_rows.push_back(std::move(row));
      }
  // The selected slice's collective on every rank (the Details tab's table and the links).
  json collective = nullptr, peers = json::array();
  if (const Collective* c = app.collective(app.selected)) {
    collective = {{"name", c->name}, {"group", c->group}, {"group_ranks", c->group_ranks}, {"seq", c->seq}};
    for (const CollectivePeer& p : c->peers) {
      json peer = slice_json(app, p.ref);
      peer["wait_us"] = p.wait_us;
      peers.push_back(std::move(peer));
    }
  }
  json lanes = json::array();
  for (const AppState::LaneBox& b : app.layout.lanes) {
    const Rank& rank = app.runs[static_cast<size_t>(b.run)].model.ranks[static_cast<size_t>(b.rank)];
    const Lane& lane = rank.lanes[static_cast<size_t>(b.lane)];
    lanes.push_back({{"run", b.run},
                     {"rank", rank.rank},
                     {"rank_index", b.rank},
                     {"lane", b.lane},
                     {"name", lane.name},
                     {"pid", lane.pid},
                     {"tid", lane.tid},
                     {"device", lane.device},
                     {"max_depth", lane.max_depth},
                     {"y", b.y},
                     {"height", b.height}});
  }
  json compare = json::array();
  for (const CompareRow& row : compare_rows(app)) {
    const CompareChange change = compare_change(row);
    compare.push_back({{"name", row.name},
                       {"bytes", row.bytes},
                       {"run", row.run},
                       {"compared", row.compared},
                       {"change", change.text},
                       {"verdict", verdict_name(change.verdict)}});
  }
  json operations = json::array(), operation_boxes = json::array();
  for (const OperationRow& row : operation_rows(app))
    operations.push_back({{"key", row.key},
                          {"kind", row.kind},
                          {"label", row.label},
                          {"communication", row.communication},
                          {"count", row.count},
                          {"time_us", row.time_us},
                          {"exposed_us", row.exposed_us}});
  for (const AppState::Layout::OperationBox& b : app.layout.operation_rows)
    operation_boxes.push_back({{"key", b.key}, {"rect", rect(b.rect)}});
  json shown = json::object(), boxes = json::object();
  for (int c = 0; c < kCategories; ++c) {
    shown[category_name(static_cast<ViewCategory>(c))] = app.show_category[static_cast<size_t>(c)];
    boxes[category_name(static_cast<ViewCategory>(c))] = rect(app.layout.category_boxes[static_cast<size_t>(c)]);
  }
  return {{"frame", frames_},
          {"display", {io.DisplaySize.x, io.DisplaySize.y}},
          {"time_origin_us", app.time_origin()},
          {"view", {{"t0", app.view_t0}, {"t1", app.view_t1}}},
          {"full", {{"t0", app.full_t0()}, {"t1", app.full_t1()}}},
          {"runs", runs},
          {"loading", loading()},
          {"error", error_},
          {"path_field", path_},
          {"selected", slice_json(app, app.selected)},
          {"hovered", slice_json(app, app.hovered)},
          {"collective", collective},
          {"collective_peers", peers},
          {"range", app.range ? json{app.range->first, app.range->second} : json(nullptr)},
          {"range_rows", range_rows},
          {"step_rows", step_rows},
          {"panel", tab_name(app.shown_tab)},
          {"search", app.search},
          {"search_matches", app.match_count},
          {"align_step", app.align_step},
          {"compare_rows", compare},
          {"compare_operations", operations},
          {"highlighted_op", app.highlighted_op},
          {"highlighted_first", slice_json(app, app.highlighted_first())},
          {"show_category", shown},
          {"streams_only", app.streams_only},
          {"layout",
           {{"track_x0", app.layout.track_x0},
            {"track_width", app.layout.track_width},
            {"tracks_top", app.layout.tracks_top},
            {"tracks_bottom", app.layout.tracks_bottom},
            {"ruler_ticks", app.layout.ruler_ticks},
            {"search_field", rect(app.layout.search_field)},
            {"category_boxes", boxes},
            {"streams_only_box", rect(app.layout.streams_only_box)},
            {"operation_rows", operation_boxes},
            {"path_field", rect(path_rect_)},
            {"open_button", rect(open_rect_)},
            {"compare_button", rect(compare_rect_)},
            {"cancel_button", rect(cancel_rect_)},
            {"lanes", lanes}}}};
}

}  // namespace shardlab::viewer::app
