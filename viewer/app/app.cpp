// app.cpp: the state's indices and helpers, and the one description of a slice (tooltip and
// details panel show the same words).
#include "app.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <map>
#include <string_view>
#include <tuple>

#include <nlohmann/json.hpp>

#include "panels.h"

namespace shardlab::viewer::app {

namespace {

// The text of one top-level value in an args object ("Process Group Ranks": [0, 1, 2, 3] gives
// "[0,1,2,3]"), whitespace dropped; "" when the key is absent. A scan, not a parse: it runs once
// per collective kernel at load time, and the loader has already checked the JSON.
std::string raw_arg(std::string_view args, std::string_view key) {
  std::string quoted = "\"";  // appended: GCC 12 warns falsely (-Wrestrict) on "\"" + std::string
  quoted.append(key).append("\"");
  size_t i = args.find(quoted);
  if (i == std::string_view::npos) return {};
  i = args.find_first_not_of(" \t\r\n", i + quoted.size());
  if (i == std::string_view::npos || args[i] != ':') return {};
  std::string out;
  int depth = 0;
  bool in_string = false, escaped = false;
  for (++i; i < args.size(); ++i) {
    const char c = args[i];
    if (in_string) {
      out += c;
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n') continue;
    if (depth == 0 && (c == ',' || c == '}' || c == ']')) break;  // the end of a scalar
    out += c;
    if (c == '"') in_string = true;
    else if (c == '[' || c == '{') ++depth;
    else if ((c == ']' || c == '}') && --depth == 0) break;
  }
  return out;
}

// A slice's key in Run::BySlice maps.
uint64_t slice_key(int lane, uint32_t slice) { return (static_cast<uint64_t>(lane) << 32) | slice; }

// What a Run::BySlice map holds for slice r (nullptr: nothing).
const uint32_t* find_slice(const Run::BySlice& by_slice, const SliceRef& r) {
  if (static_cast<size_t>(r.rank) >= by_slice.size()) return nullptr;
  const auto& of = by_slice[static_cast<size_t>(r.rank)];
  const auto it = of.find(slice_key(r.lane, r.slice));
  return it == of.end() ? nullptr : &it->second;
}

// Point-to-point operations: their Seq counts per pair of ranks (or per peer), not per group.
bool point_to_point(const std::string& name) { return name == "sendrecv" || name == "send" || name == "recv"; }

// Run::record_of and Run::collectives: every rank's communication kernels with their records,
// and the collective kernels grouped by (group, its ranks, Seq). The loader has parsed their
// args into the rank's timeline (CollectiveRecord) and tied each comm wait to the collective
// after it on its stream; a lane's kernel finds its record by stream and times.
void index_collectives(Run& run, int run_index) {
  std::map<std::tuple<std::string, std::string, int64_t>, uint32_t> index;
  for (size_t r = 0; r < run.model.ranks.size(); ++r) {
    const Rank& rank = run.model.ranks[r];
    const RankTimeline& tl = rank.timeline;
    auto& of = run.collective_of.emplace_back();
    auto& record_of = run.record_of.emplace_back();
    std::vector<double> wait(tl.collectives.size(), 0.0);
    struct Kernel {
      int stream;
      double start_us, end_us;
      int32_t collective;
      auto key() const { return std::tie(stream, start_us, end_us); }
    };
    std::vector<Kernel> kernels;
    for (const DeviceSlice& d : tl.slices) {
      if (d.collective < 0 || static_cast<size_t>(d.collective) >= tl.collectives.size()) continue;
      if (d.kind == SliceKind::comm_wait) wait[static_cast<size_t>(d.collective)] += d.end_us - d.start_us;
      else if (d.kind == SliceKind::comm) kernels.push_back({d.stream, d.start_us, d.end_us, d.collective});
    }
    if (kernels.empty()) continue;
    std::sort(kernels.begin(), kernels.end(), [](const Kernel& a, const Kernel& b) { return a.key() < b.key(); });
    for (size_t l = 0; l < rank.lanes.size(); ++l) {
      const Lane& lane = rank.lanes[l];
      if (!lane.device) continue;
      for (uint32_t i = 0; i < lane.slices.size(); ++i) {
        const Slice& s = lane.slices[i];
        if (s.category != Category::comm) continue;
        const Kernel probe{lane.tid, s.start_us, s.end_us, -1};
        const auto k = std::lower_bound(kernels.begin(), kernels.end(), probe,
                                        [](const Kernel& a, const Kernel& b) { return a.key() < b.key(); });
        if (k == kernels.end() || k->key() != probe.key()) continue;
        record_of[slice_key(static_cast<int>(l), i)] = static_cast<uint32_t>(k->collective);
        const CollectiveRecord& rec = tl.collectives[static_cast<size_t>(k->collective)];
        // Without its Seq a kernel cannot be told from the group's other collectives.
        const std::string& args = run.model.args_json[s.args];
        if (rec.group.empty() || point_to_point(rec.name) || raw_arg(args, "Seq").empty()) continue;
        std::string ranks = raw_arg(args, "Process Group Ranks");
        const auto next = static_cast<uint32_t>(run.collectives.size());
        const auto [it, fresh] = index.try_emplace({rec.group, ranks, rec.seq}, next);
        if (fresh) run.collectives.push_back({rec.name, rec.group, std::move(ranks), rec.seq, {}});
        run.collectives[it->second].peers.push_back(
            {{run_index, static_cast<int>(r), static_cast<int>(l), i}, wait[static_cast<size_t>(k->collective)]});
        of[slice_key(static_cast<int>(l), i)] = it->second;
      }
    }
  }
}

// cudaDeviceSynchronize, hipStreamSynchronize, cuCtxSynchronize...: the runtime (and driver)
// calls that block the CPU until the device has done some or all of its work.
bool synchronizes(const std::string& name) { return name.ends_with("Synchronize"); }

}  // namespace

Run make_run(std::string label, TraceModel model, int run_index) {
  Run run;
  run.label = std::move(label);
  run.model = std::move(model);
  for (const std::string& name : run.model.names) run.sync_name.push_back(synchronizes(name));
  for (size_t r = 0; r < run.model.ranks.size(); ++r) {
    const Rank& rank = run.model.ranks[r];
    auto& lanes = run.depth_index.emplace_back();
    auto& corr = run.by_correlation.emplace_back();
    double& counter_max = run.counter_max.emplace_back(0.0);
    for (const Counter& c : rank.counters)
      for (const auto& [t, v] : c.samples) counter_max = std::max(counter_max, v);
    run.steps.push_back(step_metrics(rank.timeline));
    for (size_t l = 0; l < rank.lanes.size(); ++l) {
      const Lane& lane = rank.lanes[l];
      DepthIndex& index = lanes.emplace_back(size_t{lane.max_depth} + 1);
      for (uint32_t i = 0; i < lane.slices.size(); ++i) {
        const Slice& s = lane.slices[i];
        DepthRow& row = index[std::min<size_t>(s.depth, lane.max_depth)];
        if (row.busy_us.empty()) row.busy_us.push_back(0);
        row.slices.push_back(i);
        row.busy_us.push_back(row.busy_us.back() + (s.end_us - s.start_us));
        if (s.correlation != 0)
          corr[s.correlation].push_back({run_index, static_cast<int>(r), static_cast<int>(l), i});
      }
    }
  }
  index_collectives(run, run_index);
  run.operations = index_operations(run);
  return run;
}

const CollectiveRecord* collective_record(const Run& run, int rank, int lane, uint32_t slice) {
  const uint32_t* i = find_slice(run.record_of, {0, rank, lane, slice});
  return i ? &run.model.ranks[static_cast<size_t>(rank)].timeline.collectives[*i] : nullptr;
}

std::vector<uint32_t> launch_context(const Run& run, int rank, int lane, uint32_t slice) {
  const Rank& r = run.model.ranks[static_cast<size_t>(rank)];
  const Slice& s = r.lanes[static_cast<size_t>(lane)].slices[slice];
  if (!r.lanes[static_cast<size_t>(lane)].device || s.correlation == 0) return {};
  const auto& by_correlation = run.by_correlation[static_cast<size_t>(rank)];
  const auto it = by_correlation.find(s.correlation);
  if (it == by_correlation.end()) return {};
  for (const SliceRef& p : it->second) {
    const Lane& host = r.lanes[static_cast<size_t>(p.lane)];
    if (host.device) continue;
    const Slice& launch = host.slices[p.slice];
    const DepthIndex& index = run.depth_index[static_cast<size_t>(rank)][static_cast<size_t>(p.lane)];
    std::vector<uint32_t> names;
    // Slices of one depth row do not overlap and are sorted by start: the row's op around the
    // launch, if any, is the last one to start at or before it.
    for (size_t d = 0; d < std::min<size_t>(launch.depth, index.size()); ++d) {
      const std::vector<uint32_t>& row = index[d].slices;
      const auto after = std::partition_point(row.begin(), row.end(), [&](uint32_t k) {
        return host.slices[k].start_us <= launch.start_us; });
      if (after == row.begin()) continue;
      const Slice& op = host.slices[*(after - 1)];
      if (op.end_us >= launch.end_us) names.push_back(op.name);
    }
    return names;
  }
  return {};
}

bool AppState::filtering() const {
  return searching() || highlighting() ||
         std::find(show_category.begin(), show_category.end(), false) != show_category.end();
}

bool AppState::in_highlighted_op(int run, int rank, int lane, uint32_t slice) const {
  const RunOperations& ops = runs[static_cast<size_t>(run)].operations;
  const uint32_t id = ops.of_slice[static_cast<size_t>(rank)][static_cast<size_t>(lane)][slice];
  return id != RunOperations::kNone && ops.ops[id].key == highlighted_op;
}

SliceRef AppState::highlighted_first() const {
  for (size_t r = 0; r < runs.size(); ++r) {
    const auto it = runs[r].operations.by_key.find(highlighted_op);
    if (it == runs[r].operations.by_key.end()) continue;
    const SlicePlace& first = runs[r].operations.ops[it->second].first;
    if (first.rank >= 0) return {static_cast<int>(r), first.rank, first.lane, first.slice};
  }
  return {};
}

void AppState::highlight_op(const std::string& key) {
  highlighted_op = key;
  if (const Slice* s = slice(highlighted_first())) {
    const double offset = runs[static_cast<size_t>(highlighted_first().run)].offset_us;
    fit(s->start_us + offset, s->end_us + offset);
  }
}

double AppState::full_t0() const {
  double t = runs.empty() ? 0 : runs[0].model.start_us + runs[0].offset_us;
  for (const Run& r : runs) t = std::min(t, r.model.start_us + r.offset_us);
  return t;
}

double AppState::full_t1() const {
  double t = runs.empty() ? 1 : runs[0].model.end_us + runs[0].offset_us;
  for (const Run& r : runs) t = std::max(t, r.model.end_us + r.offset_us);
  return t;
}

double AppState::time_origin() const { return runs.empty() ? 0 : runs[0].model.start_us + runs[0].offset_us; }

void AppState::fit(double t0, double t1) {
  const double margin = std::max(t1 - t0, 1e-3) * 0.02;
  view_t0 = t0 - margin;
  view_t1 = t1 + margin;
}

void AppState::set_runs(std::vector<Run> loaded) {
  runs = std::move(loaded);
  hovered = selected = {};
  range.reset();
  range_rows_for.reset();
  range_rows.clear();
  highlighted_op.clear();
  layout = {};
  update_search();
  align_runs();
  fit_all();
  panel_tab = runs.size() > 1 ? tab_compare : tab_steps;
}

void AppState::update_search() {
  std::string needle = search;
  std::transform(needle.begin(), needle.end(), needle.begin(), [](unsigned char c) { return std::tolower(c); });
  name_matches.assign(runs.size(), {});
  for (size_t r = 0; r < runs.size(); ++r) {
    const auto& names = runs[r].model.names;
    name_matches[r].resize(names.size());
    for (size_t i = 0; i < names.size(); ++i) {
      std::string name = names[i];
      std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
      name_matches[r][i] = !needle.empty() && name.find(needle) != std::string::npos;
    }
  }
  match_count = 0;
  if (!searching()) return;
  for (size_t r = 0; r < runs.size(); ++r)
    for (const Rank& rank : runs[r].model.ranks)
      for (const Lane& lane : rank.lanes)
        for (const Slice& s : lane.slices) match_count += name_matches[r][s.name];
}

static std::optional<double> step_start(const Run& run, int step) {
  if (run.model.ranks.empty()) return std::nullopt;
  for (const StepWindow& w : run.model.ranks[0].timeline.steps)
    if (w.step == step) return w.start_us;
  return std::nullopt;
}

void AppState::align_runs() {
  if (runs.size() < 2) return;
  const auto a = step_start(runs[0], align_step), b = step_start(runs[1], align_step);
  // Without that step in both runs, both start at their first event.
  runs[1].offset_us = a && b ? *a - *b : runs[0].model.start_us - runs[1].model.start_us;
}

const Slice* AppState::slice(const SliceRef& r) const {
  if (!r.valid()) return nullptr;
  return &runs[r.run].model.ranks[r.rank].lanes[r.lane].slices[r.slice];
}

const Collective* AppState::collective(const SliceRef& r) const {
  if (!r.valid()) return nullptr;
  const Run& run = runs[static_cast<size_t>(r.run)];
  const uint32_t* i = find_slice(run.collective_of, r);
  return i ? &run.collectives[*i] : nullptr;
}

const CollectiveRecord* AppState::collective_record(const SliceRef& r) const {
  if (!r.valid()) return nullptr;
  return shardlab::viewer::app::collective_record(runs[static_cast<size_t>(r.run)], r.rank, r.lane, r.slice);
}

ViewCategory view_category(const Run& run, const Slice& s) {
  switch (s.category) {
    case Category::compute: return ViewCategory::compute;
    case Category::comm: return ViewCategory::comm;
    case Category::comm_wait: return ViewCategory::comm_wait;
    case Category::memcpy: return ViewCategory::memcpy;
    case Category::cpu_op: return ViewCategory::cpu_op;
    case Category::runtime: return run.sync_name[s.name] ? ViewCategory::sync : ViewCategory::runtime;
    case Category::annotation: return ViewCategory::annotation;
    case Category::other: break;
  }
  return ViewCategory::other;
}

ImU32 category_color(ViewCategory c) {
  switch (c) {
    case ViewCategory::compute: return IM_COL32(66, 133, 244, 255);
    case ViewCategory::comm: return IM_COL32(245, 140, 30, 255);
    case ViewCategory::comm_wait: return IM_COL32(250, 200, 140, 255);
    case ViewCategory::memcpy: return IM_COL32(60, 180, 90, 255);
    case ViewCategory::runtime: return IM_COL32(140, 140, 140, 255);
    // Red, as chapter 00 and the notebooks draw host syncs, and far from the memory graph's
    // lighter reserved line (240, 90, 90).
    case ViewCategory::sync: return IM_COL32(215, 30, 40, 255);
    case ViewCategory::cpu_op: return IM_COL32(200, 200, 200, 255);
    case ViewCategory::annotation: return IM_COL32(150, 100, 210, 255);
    case ViewCategory::other: break;
  }
  return IM_COL32(110, 120, 150, 255);
}

const char* category_name(ViewCategory c) {
  switch (c) {
    case ViewCategory::compute: return "compute";
    case ViewCategory::comm: return "comm";
    case ViewCategory::comm_wait: return "comm wait";
    case ViewCategory::memcpy: return "memcpy";
    case ViewCategory::runtime: return "runtime";
    case ViewCategory::sync: return "sync";
    case ViewCategory::cpu_op: return "cpu op";
    case ViewCategory::annotation: return "annotation";
    case ViewCategory::other: break;
  }
  return "other";
}

std::string format_time(double us) {
  char buf[32];
  if (std::abs(us) < 1e-6) us = 0;  // float noise from interval sums, not "1.1e-10 ns"
  const double a = std::abs(us);
  if (a >= 1e6) std::snprintf(buf, sizeof buf, "%.4g s", us / 1e6);
  else if (a >= 1e3) std::snprintf(buf, sizeof buf, "%.4g ms", us / 1e3);
  else if (a >= 1 || a == 0) std::snprintf(buf, sizeof buf, "%.4g us", us);
  else std::snprintf(buf, sizeof buf, "%.4g ns", us * 1e3);
  return buf;
}

std::string format_absolute(double us) {
  char buf[96];
  int n = std::snprintf(buf, sizeof buf, "%.3f us", us);
  // From 2001 to 2286 in microseconds since 1970: a wall-clock time, not one from a job's start.
  if (us >= 1e15 && us < 1e16) {
    const auto seconds = static_cast<std::time_t>(us / 1e6);
    std::tm utc{};
    gmtime_r(&seconds, &utc);
    n += static_cast<int>(std::strftime(buf + n, sizeof buf - static_cast<size_t>(n), " (%Y-%m-%d %H:%M:%S", &utc));
    std::snprintf(buf + n, sizeof buf - static_cast<size_t>(n), ".%06lld UTC)",
                  static_cast<long long>(std::fmod(us, 1e6)));
  }
  return buf;
}

// Args come from files: read them without trusting their types.
static double number(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
}

void slice_details(const AppState& app, const SliceRef& ref) {
  const Run& run = app.runs[ref.run];
  const Rank& rank = run.model.ranks[ref.rank];
  const Lane& lane = rank.lanes[ref.lane];
  const Slice& s = lane.slices[ref.slice];
  const double dur = s.end_us - s.start_us;

  const ViewCategory category = view_category(run, s);
  ImGui::ColorButton("##category", ImGui::ColorConvertU32ToFloat4(category_color(category)),
                     ImGuiColorEditFlags_NoTooltip, {ImGui::GetFontSize(), ImGui::GetFontSize()});
  ImGui::SameLine();
  ImGui::TextUnformatted(run.model.names[s.name].c_str());
  ImGui::TextDisabled("%s  |  rank %d, %s%s", category_name(category), rank.rank, lane.name.c_str(),
                      app.runs.size() > 1 ? (ref.run == 0 ? "  |  run" : "  |  compared run") : "");
  const double since = s.start_us + run.offset_us - app.time_origin();  // as the ruler reads
  ImGui::Text("at %s   duration %s   end %s", format_time(since).c_str(), format_time(dur).c_str(),
              format_time(since + dur).c_str());
  ImGui::TextDisabled("start in the file: %s", format_absolute(s.start_us).c_str());

  const std::string& text = run.model.args_json[s.args];
  const nlohmann::json args = nlohmann::json::parse(text, nullptr, false);
  if (args.is_object() && !args.empty()) {
    ImGui::Separator();
    for (const auto& [key, value] : args.items())
      ImGui::Text("%s: %s", key.c_str(), value.is_string() ? value.get<std::string>().c_str() : value.dump().c_str());
  }

  // Achieved rates: what the kernel moved and computed per second.
  if (args.is_object() && dur > 0) {
    const double bytes = number(args, "bytes"), flops = number(args, "flops");
    if (bytes > 0 || flops > 0) {
      ImGui::Separator();
      if (bytes > 0) ImGui::Text("achieved %.1f GB/s", bytes / (dur * 1e3));
      if (flops > 0) ImGui::Text("achieved %.2f TFLOP/s", flops / (dur * 1e6));
    }
  }

  // A communication kernel as the metrics see it (its record in the rank's timeline): the bus
  // bandwidth nccl-tests reports (comparable across world sizes), and the link its bytes left by.
  if (const CollectiveRecord* record = app.collective_record(ref)) {
    const CollectiveMetrics c = collective_metrics(*record);
    ImGui::Separator();
    // A sendrecv by its two sides (a receive alone sends nothing), a collective by its bytes.
    ImGui::Text(point_to_point(c.name) ? "%s: %s, in a group of %d ranks" : "%s of %s over %d ranks", c.name.c_str(),
                collective_size_text(*record).c_str(), c.group_size);
    ImGui::Text("algbw %.1f GB/s   busbw %.1f GB/s", c.algbw_GBps, c.busbw_GBps);
    if (c.link_tier == LinkTierKind::unknown)
      ImGui::TextDisabled("link: the trace does not say");
    else
      ImGui::Text("%s (%s): this rank sends %s", c.link.c_str(), std::string(link_tier_name(c.link_tier)).c_str(),
                  human_bytes(static_cast<double>(c.link_bytes)).c_str());
  }

  if (const Collective* c = app.collective(ref); c && c->peers.size() > 1) {
    double first = s.start_us, last = s.start_us, longest_wait = 0;
    for (const CollectivePeer& p : c->peers) {
      first = std::min(first, app.slice(p.ref)->start_us);
      last = std::max(last, app.slice(p.ref)->start_us);
      longest_wait = std::max(longest_wait, p.wait_us);
    }
    ImGui::Separator();
    ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(kCollectiveColor), "%s #%lld of %s on %zu ranks", c->name.c_str(),
                       static_cast<long long>(c->seq), c->group.c_str(), c->peers.size());
    ImGui::Text("starts %s apart, longest wait before it %s%s", format_time(last - first).c_str(),
                format_time(longest_wait).c_str(), s.start_us > first ? "; this rank started late" : "");
  }

  // What it is for, as the CPU said when it launched it: on a collective, the unit it gathers or
  // reduces ("FlatParam.unshard (block8)").
  if (const std::vector<uint32_t> context = launch_context(run, ref.rank, ref.lane, ref.slice); !context.empty()) {
    std::string path;
    for (uint32_t name : context) path += (path.empty() ? "" : " > ") + run.model.names[name];
    ImGui::Separator();
    ImGui::Text("launched in %s", path.c_str());
  }

  if (s.correlation != 0) {
    const auto& peers = run.by_correlation[ref.rank];
    if (auto it = peers.find(s.correlation); it != peers.end())
      for (const SliceRef& p : it->second)
        if (!(p == ref)) {
          const Slice& ps = *app.slice(p);
          ImGui::TextDisabled("correlation %llu -> %s on %s at %s", static_cast<unsigned long long>(s.correlation),
                              run.model.names[ps.name].c_str(), rank.lanes[p.lane].name.c_str(),
                              format_time(ps.start_us + run.offset_us - app.time_origin()).c_str());
        }
  }
}

namespace {

// The Compare tab's rows, in order: what each averages and which way is better. Less of the
// time a step loses (waiting, idle, communication nothing hid) or of memory is better, and so is
// more hidden under compute. Compute, comm and memcpy time are the work itself: more of it is
// neither (a strategy that adds comm but hides it is no worse for it). So are bytes sent inside a
// node; fewer over the network, the slow tier, is better (HSDP's point).
struct CompareMetric {
  const char* name;
  double (*value)(const StepMetrics&);
  bool bytes;
  CompareRow::Better better;
};
constexpr CompareMetric kCompareMetrics[] = {
    {"step time", [](const StepMetrics& s) { return s.step_us; }, false, CompareRow::lower},
    {"compute", [](const StepMetrics& s) { return s.compute_us; }, false, CompareRow::neither},
    {"comm", [](const StepMetrics& s) { return s.comm_us; }, false, CompareRow::neither},
    {"overlapped", [](const StepMetrics& s) { return s.overlap_us; }, false, CompareRow::higher},
    {"exposed comm", [](const StepMetrics& s) { return s.exposed_comm_us; }, false, CompareRow::lower},
    {"comm wait", [](const StepMetrics& s) { return s.comm_wait_us; }, false, CompareRow::lower},
    {"memcpy", [](const StepMetrics& s) { return s.memcpy_us; }, false, CompareRow::neither},
    {"copy overlap", [](const StepMetrics& s) { return s.copy_overlap_us; }, false, CompareRow::higher},
    {"idle", [](const StepMetrics& s) { return s.idle_us; }, false, CompareRow::lower},
    {"peak allocated", [](const StepMetrics& s) { return static_cast<double>(s.peak_allocated); }, true,
     CompareRow::lower},
    {"peak reserved", [](const StepMetrics& s) { return static_cast<double>(s.peak_reserved); }, true,
     CompareRow::lower},
    {"intra-node sent", [](const StepMetrics& s) { return static_cast<double>(s.intra_node_bytes); }, true,
     CompareRow::neither},
    {"network sent", [](const StepMetrics& s) { return static_cast<double>(s.network_bytes); }, true,
     CompareRow::lower},
};

// Every step of every rank of a run, averaged: the figure a strategy comparison quotes.
double average(const Run& run, const CompareMetric& metric) {
  double sum = 0;
  int n = 0;
  for (const auto& rank_steps : run.steps)
    for (const StepMetrics& s : rank_steps) {
      sum += metric.value(s);
      ++n;
    }
  return n > 0 ? sum / n : 0;
}

// Below this a value is zero. Times: trace files give microseconds to the nanosecond, so a real
// difference is at least 1 ns; what is smaller is the rounding of summed interval lengths
// (7.3e-13 us of "overlap" where nothing overlaps), which as a percentage is absurd. Memory:
// bytes are whole.
double resolution(bool bytes) { return bytes ? 1 : 1e-3; }

}  // namespace

std::vector<CompareRow> compare_rows(const AppState& app) {
  if (app.runs.size() < 2) return {};
  std::vector<CompareRow> rows;
  for (const CompareMetric& m : kCompareMetrics) {
    auto clean = [&](double v) { return std::abs(v) < resolution(m.bytes) ? 0.0 : v; };
    rows.push_back({m.name, clean(average(app.runs[0], m)), clean(average(app.runs[1], m)), m.bytes, m.better});
  }
  return rows;
}

CompareChange compare_change(const CompareRow& row) {
  const double diff = row.compared - row.run;
  if (std::abs(diff) < resolution(row.bytes) || (row.run != 0 && std::abs(diff / row.run) < 5e-4))
    return {"same", CompareChange::same};
  const bool better = row.better == CompareRow::lower ? diff < 0 : diff > 0;
  const auto verdict =
      row.better == CompareRow::neither ? CompareChange::neutral : better ? CompareChange::better : CompareChange::worse;
  // From nothing or to nothing a percentage says nothing (+inf, -100%): say so in words.
  if (row.run == 0) return {"new", verdict};
  if (row.compared == 0) return {"gone", verdict};
  char text[32];
  std::snprintf(text, sizeof text, "%+.1f%%", 100 * diff / row.run);
  return {text, verdict};
}

}  // namespace shardlab::viewer::app
