// operations.cpp: slices grouped by operation, per step, and the two runs' operations joined.
#include "operations.h"

#include <algorithm>
#include <cmath>
#include <string_view>

#include "app.h"
#include "trace/metrics.h"

namespace shardlab::viewer::app {
namespace {

// "void cutlass::Kernel2<cutlass_80_tensorop_...>(Params)" -> "cutlass::Kernel2": a kernel's
// name without its template arguments and parameters, which vary with shapes and types.
std::string kernel_family(std::string_view name) {
  if (name.starts_with("void ")) name.remove_prefix(5);
  return std::string(name.substr(0, name.find_first_of("<(")));
}

const char* kind_of(ViewCategory c, bool device) {
  switch (c) {
    case ViewCategory::compute: return "kernel";
    case ViewCategory::comm: return "collective";
    case ViewCategory::comm_wait: return "comm wait";
    case ViewCategory::memcpy: return "memcpy";
    case ViewCategory::cpu_op: return "cpu op";
    case ViewCategory::runtime:
    case ViewCategory::sync: return "runtime";
    case ViewCategory::annotation: return device ? "gpu annotation" : "annotation";
    case ViewCategory::other: break;
  }
  return "other";
}

}  // namespace

RunOperations index_operations(const Run& run) {
  const TraceModel& model = run.model;
  RunOperations out;
  struct Sums {
    double count = 0, time_us = 0, exposed_us = 0;
  };
  std::vector<Sums> sums;
  auto op_id = [&](const std::string& kind, std::string label, bool communication) {
    std::string key = kind;
    key.append(" ").append(label);
    const auto [it, fresh] = out.by_key.try_emplace(key, static_cast<uint32_t>(out.ops.size()));
    if (fresh) {
      out.ops.push_back({key, kind, std::move(label), communication, 0, 0, 0, {}, 0});
      sums.emplace_back();
    }
    return it->second;
  };
  size_t windows = 0;
  // A non-collective slice's operation depends on its name alone: worked out once per name and lane kind.
  std::vector<uint32_t> by_name[2];
  for (auto& v : by_name) v.assign(model.names.size(), RunOperations::kNone);

  for (size_t r = 0; r < model.ranks.size(); ++r) {
    const Rank& rank = model.ranks[r];
    const RankTimeline& tl = rank.timeline;
    windows += tl.steps.size();
    const auto hiding = compute_union(tl);
    // Step windows by time; when none overlaps another (as ProfilerSteps follow each other) their
    // ends are in order too and a slice's windows are found by one search, else by a scan.
    std::vector<StepWindow> windows_by_time = tl.steps;
    std::sort(windows_by_time.begin(), windows_by_time.end(),
              [](const StepWindow& a, const StepWindow& b) { return a.start_us < b.start_us; });
    bool in_time_order = true;
    for (size_t k = 1; k < windows_by_time.size(); ++k)
      in_time_order = in_time_order && windows_by_time[k - 1].end_us <= windows_by_time[k].start_us;
    auto& lanes = out.of_slice.emplace_back();
    for (size_t l = 0; l < rank.lanes.size(); ++l) {
      const Lane& lane = rank.lanes[l];
      auto& of = lanes.emplace_back(lane.slices.size(), RunOperations::kNone);
      for (uint32_t i = 0; i < lane.slices.size(); ++i) {
        const Slice& s = lane.slices[i];
        const std::string& name = model.names[s.name];
        if (s.category == Category::annotation && name.starts_with("ProfilerStep#")) continue;  // the steps themselves
        const ViewCategory view = view_category(run, s);
        if (view == ViewCategory::other) continue;  // the profiler's own spans, unknown categories
        const bool communication = view == ViewCategory::comm || view == ViewCategory::comm_wait;
        uint32_t id = RunOperations::kNone;
        // A collective by its kind and size, as its record in the timeline gives them.
        if (const CollectiveRecord* record = collective_record(run, static_cast<int>(r), static_cast<int>(l), i)) {
          std::string label = record->name;
          label.append(" ").append(collective_size_text(*record));
          id = op_id("collective", std::move(label), true);
        }
        if (id == RunOperations::kNone) {
          uint32_t& cached = by_name[lane.device][s.name];
          if (cached == RunOperations::kNone) {
            const bool kernel = view == ViewCategory::compute || view == ViewCategory::comm;
            cached = op_id(kind_of(view, lane.device), kernel ? kernel_family(name) : name, communication);
          }
          id = cached;
        }
        of[i] = id;
        // Its part of each step window it overlaps (counted in the one it starts in).
        Sums& sum = sums[id];
        Operation& op = out.ops[id];
        // The windows it overlaps: from the first one ending after its start (one search).
        const auto from = in_time_order ? std::partition_point(windows_by_time.begin(), windows_by_time.end(),
                                                               [&](const StepWindow& w) { return w.end_us <= s.start_us; })
                                        : windows_by_time.begin();
        for (auto w_it = from; w_it != windows_by_time.end() && (w_it->start_us < s.end_us || !in_time_order); ++w_it) {
          const StepWindow& w = *w_it;
          if (s.end_us <= w.start_us || s.start_us >= w.end_us) continue;
          const double time = std::min(s.end_us, w.end_us) - std::max(s.start_us, w.start_us);
          sum.time_us += time;
          if (communication) sum.exposed_us += uncovered_length(s.start_us, s.end_us, w.start_us, w.end_us, hiding);
          if (s.start_us >= w.start_us) {
            sum.count += 1;
            if (op.first.rank < 0 || s.start_us < op.first_start_us) {
              op.first = {static_cast<int>(r), static_cast<int>(l), i};
              op.first_start_us = s.start_us;
            }
          }
        }
      }
    }
  }
  for (size_t k = 0; k < out.ops.size(); ++k) {
    const double n = windows > 0 ? static_cast<double>(windows) : 1.0;
    out.ops[k].count = sums[k].count / n;
    out.ops[k].time_us = sums[k].time_us / n;
    out.ops[k].exposed_us = sums[k].exposed_us / n;
  }
  return out;
}

std::vector<OperationRow> operation_rows(const AppState& app) {
  if (app.runs.size() < 2) return {};
  std::vector<OperationRow> rows;
  std::unordered_map<std::string, size_t> row_of;
  for (int side = 0; side < 2; ++side)
    for (const Operation& op : app.runs[static_cast<size_t>(side)].operations.ops) {
      if (op.count == 0 && op.time_us == 0) continue;  // outside every step
      const auto [it, fresh] = row_of.try_emplace(op.key, rows.size());
      if (fresh) rows.push_back({op.key, op.kind, op.label, op.communication, {0, 0}, {0, 0}, {0, 0}});
      OperationRow& row = rows[it->second];
      row.count[side] = op.count;
      row.time_us[side] = op.time_us;
      row.exposed_us[side] = op.exposed_us;
    }
  std::stable_sort(rows.begin(), rows.end(), [](const OperationRow& a, const OperationRow& b) {
    return std::abs(a.difference_us()) > std::abs(b.difference_us());
  });
  return rows;
}

}  // namespace shardlab::viewer::app
