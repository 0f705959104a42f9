// trace_builder.cpp: Builder: add() maps each part's tables onto the file's and lays out its
// records (lanes, B/E pairs, collectives on the timeline); finish() orders the lanes, nests their
// slices, pairs and binds the flows and sorts what files may hold out of order.
#include "trace_builder.h"

#include <algorithm>
#include <iterator>
#include <limits>
#include <string_view>
#include <tuple>

namespace shardlab::viewer::loader {

namespace {

// Chrome JSON has at best nanosecond times (3 decimals of us), and ts + dur rounds: ends within
// this of a start count as touching, not overlapping, when nesting.
constexpr double kTouchUs = 1e-4;

// Kineto's dtype spellings (c10::ScalarType names) to element sizes.
int dtype_bytes(std::string_view d) {
  static const std::unordered_map<std::string_view, int> kSizes = {
      {"Float", 4},         {"Double", 8},       {"Half", 2},          {"BFloat16", 2},    {"Int", 4},
      {"Long", 8},          {"Short", 2},        {"Char", 1},          {"Byte", 1},        {"Bool", 1},
      {"ComplexHalf", 4},   {"ComplexFloat", 8}, {"ComplexDouble", 16}, {"Float8_e4m3fn", 1},
      {"Float8_e5m2", 1},   {"Float8_e4m3fnuz", 1}, {"Float8_e5m2fnuz", 1}, {"UInt16", 2},
      {"UInt32", 4},        {"UInt64", 8},       {"float32", 4},       {"float16", 2},     {"bfloat16", 2},
      {"float64", 8},       {"int32", 4},        {"int64", 8},         {"int8", 1},        {"uint8", 1}};
  const auto it = kSizes.find(d);
  return it == kSizes.end() ? 4 : it->second;
}

}  // namespace

int Builder::label_id(const std::string& label) {
  const auto [it, inserted] = labels_.try_emplace(label, -static_cast<int>(labels_.size()) - 1);
  if (inserted) label_names_.emplace(it->second, label);
  return it->second;
}

LaneBuild& Builder::lane(int pid, int tid) {
  const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(pid)) << 32) | static_cast<uint32_t>(tid);
  const auto [it, inserted] = lane_index_.try_emplace(key, static_cast<int>(lanes_.size()));
  if (inserted) {
    lanes_.emplace_back();
    lanes_.back().lane.pid = pid;
    lanes_.back().lane.tid = tid;
  }
  return lanes_[static_cast<size_t>(it->second)];
}

void Builder::add_slice(LaneBuild& lb, int tid, double start, double end, uint32_t name, uint32_t args, Category cat,
                        uint64_t correlation, bool device, bool memset, const CollectiveArgs* coll) {
  lb.lane.slices.push_back({start, end, name, args, 0, cat, correlation});
  if (!device) return;
  lb.lane.device = true;
  SliceKind kind = SliceKind::compute;
  switch (cat) {
    case Category::comm: kind = SliceKind::comm; break;
    case Category::comm_wait: kind = SliceKind::comm_wait; break;
    case Category::memcpy: kind = memset ? SliceKind::memset : SliceKind::memcpy; break;
    default: break;
  }
  int32_t collective = -1;
  if (kind == SliceKind::comm && coll) {
    collective = static_cast<int32_t>(timeline_.collectives.size());
    // Counts bounded so that bytes (count x element size) stay far from overflowing int64.
    const auto nelems = [](int64_t n) { return std::clamp<int64_t>(n, 0, int64_t{1} << 50); };
    timeline_.collectives.push_back({coll->name, nelems(coll->in_nelems), nelems(coll->out_nelems),
                                     dtype_bytes(coll->dtype),
                                     static_cast<int>(std::clamp<int64_t>(coll->group_size, 1, 1 << 30)), coll->group,
                                     coll->seq, start, end, coll->link, coll->link_tier});
    // A wait belongs to the collective that follows it on its stream.
    for (const uint32_t w : lb.pending_waits) timeline_.slices[w].collective = collective;
    lb.pending_waits.clear();
  }
  if (kind == SliceKind::comm_wait) lb.pending_waits.push_back(static_cast<uint32_t>(timeline_.slices.size()));
  timeline_.slices.push_back({start, end, tid, kind, collective});
}

void Builder::add_record(const Rec& r, const Part& part, int pid, int tid, uint32_t name, uint32_t args) {
  switch (r.ph) {
    case 'X':
    case 'B':
    case 'E':
    case 'i':
    case 'I': {
      LaneBuild& lb = lane(pid, tid);
      const bool device = r.flags & kDevice;
      if (r.ph == 'B') {
        lb.open.push_back({r.ts, name, args, r.category, r.id});
        return;
      }
      double start = r.ts;
      const double end = r.ts + r.dur;
      Category cat = r.category;
      uint64_t correlation = r.id;
      if (r.ph == 'E') {
        if (lb.open.empty() || lb.open.back().ts > r.ts) {
          ++skipped_;
          return;
        }
        const LaneBuild::Open b = lb.open.back();
        lb.open.pop_back();
        start = b.ts;
        if (r.flags & kNameEmpty) name = b.name;
        if (b.args) args = b.args;
        cat = b.category;
        correlation = b.correlation ? b.correlation : correlation;
      }
      add_slice(lb, tid, start, end, name, args, cat, correlation, device, r.flags & kMemset,
                r.extra ? &part.collectives[r.extra - 1] : nullptr);
      if (r.ph != 'i' && r.ph != 'I' && (r.flags & kStep))
        steps_.push_back({static_cast<int>(&lb - lanes_.data()), r.step, start, end});
      return;
    }
    case 's':
    case 'f':
      flow_ends_.push_back({r.id, static_cast<int>(&lane(pid, tid) - lanes_.data()), r.ts, r.ph == 'f',
                            (r.flags & kEnclosing) != 0});
      return;
    case 'M': {
      const Meta& m = part.metas[r.extra - 1];
      switch (m.kind) {
        case Meta::process_name: process_names_[pid] = m.name; break;
        case Meta::thread_name: thread_names_[{pid, tid}] = m.name; break;
        case Meta::process_sort: process_sort_[pid] = m.sort_index; break;
        case Meta::thread_sort: thread_sort_[{pid, tid}] = m.sort_index; break;
      }
      return;
    }
    default: return;
  }
}

void Builder::add(Part& part) {
  label_map_.resize(part.labels.size());
  for (size_t k = 0; k < part.labels.size(); ++k) label_map_[k] = label_id(part.labels[k]);
  const std::vector<std::string> names = part.names.take();
  name_map_.resize(names.size());
  for (size_t k = 0; k < names.size(); ++k) name_map_[k] = names_.add(names[k]);
  std::vector<std::string> args = part.args.take();
  const auto args_base = static_cast<uint32_t>(args_.size());  // part index k > 0 -> args_base + k
  for (size_t k = 1; k < args.size(); ++k) args_.push_back(std::move(args[k]));

  for (const Rec& r : part.recs) {
    const int pid = r.pid < 0 ? label_map_[static_cast<size_t>(-1 - r.pid)] : r.pid;
    const int tid = r.tid < 0 ? label_map_[static_cast<size_t>(-1 - r.tid)] : r.tid;
    const bool slice = r.ph != 's' && r.ph != 'f' && r.ph != 'M';
    add_record(r, part, pid, tid, slice ? name_map_[r.name] : 0, slice && r.args ? args_base + r.args : 0);
  }
  for (auto& [name, samples] : part.counters) {
    Samples& to = counters_[name];
    to.insert(to.end(), samples.begin(), samples.end());
  }
  timeline_.memory.insert(timeline_.memory.end(), part.memory.begin(), part.memory.end());
  timeline_.allocator.insert(timeline_.allocator.end(), part.allocator.begin(), part.allocator.end());
  for (size_t k = 0; k < part.allocator.size(); ++k) {
    const uint32_t a = part.allocator_args[k];
    markers_.push_back({part.allocator[k].t_us, part.allocator[k].kind, a ? args_base + a : 0});
  }
  skipped_ += part.skipped;
  names_cut_ += part.names_cut;
  part = Part{};  // its memory goes now
}

namespace {

// For slices with identical times: annotations enclose ops, ops enclose runtime calls (files
// record an op when it ends, after the calls inside it).
int nesting_rank(Category c) {
  switch (c) {
    case Category::annotation: return 0;
    case Category::cpu_op: return 1;
    case Category::runtime: return 2;
    default: return 3;
  }
}

// The deepest slice of a lane (sorted, nested) enclosing t, or -1.
int64_t enclosing_slice(const Lane& lane, double t) {
  const auto& s = lane.slices;
  // The last slice starting at or before t; then up its ancestors until one contains t.
  auto it = std::upper_bound(s.begin(), s.end(), t, [](double x, const Slice& sl) { return x < sl.start_us; });
  if (it == s.begin()) return -1;
  size_t i = static_cast<size_t>(it - s.begin()) - 1;
  int depth = s[i].depth + 1;
  while (true) {
    if (s[i].depth < depth) {
      if (s[i].end_us >= t) return static_cast<int64_t>(i);
      depth = s[i].depth;
      if (depth == 0) return -1;
    }
    if (i == 0) return -1;
    --i;
  }
}

// std::stable_sort, skipped when the range is in order already (the usual case: files are
// written in time order).
template <typename It, typename Less>
void sort_stable(It first, It last, Less less) {
  if (!std::is_sorted(first, last, less)) std::stable_sort(first, last, less);
}

}  // namespace

FileResult Builder::finish(std::optional<int> declared_rank) {
  FileResult out;
  Rank& r = out.rank;
  r.skipped = skipped_;
  r.names_cut = names_cut_;
  for (LaneBuild& lb : lanes_) r.skipped += lb.open.size();  // B without E

  // Lane names and order: CPU threads, then streams; by process then thread sort index.
  std::vector<int> order(lanes_.size());
  for (size_t i = 0; i < lanes_.size(); ++i) {
    Lane& l = lanes_[i].lane;
    order[i] = static_cast<int>(i);
    const auto pn = process_names_.find(l.pid);
    l.process = pn != process_names_.end() ? pn->second : label_names_.count(l.pid) ? label_names_[l.pid] : "";
    const auto tn = thread_names_.find({l.pid, l.tid});
    if (tn != thread_names_.end()) l.name = tn->second;
    else if (label_names_.count(l.tid)) l.name = label_names_[l.tid];
    else l.name = (l.device ? "stream " : "thread ") + std::to_string(l.tid);
    const auto ps = process_sort_.find(l.pid);
    l.process_sort_index = ps != process_sort_.end() ? ps->second : l.pid;
    const auto ts = thread_sort_.find({l.pid, l.tid});
    l.sort_index = ts != thread_sort_.end() ? ts->second : l.tid;
  }
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    const Lane& x = lanes_[static_cast<size_t>(a)].lane;
    const Lane& y = lanes_[static_cast<size_t>(b)].lane;
    return std::tie(x.device, x.process_sort_index, x.pid, x.sort_index, x.tid) <
           std::tie(y.device, y.process_sort_index, y.pid, y.sort_index, y.tid);
  });
  std::vector<int> new_index(lanes_.size());
  for (size_t i = 0; i < order.size(); ++i) new_index[static_cast<size_t>(order[i])] = static_cast<int>(i);

  // Each lane: time order, longer first at equal starts (parents before children), then depth.
  for (const int i : order) {
    Lane& l = lanes_[static_cast<size_t>(i)].lane;
    sort_stable(l.slices.begin(), l.slices.end(), [](const Slice& a, const Slice& b) {
      if (a.start_us != b.start_us) return a.start_us < b.start_us;
      if (a.end_us != b.end_us) return a.end_us > b.end_us;
      return nesting_rank(a.category) < nesting_rank(b.category);
    });
    std::vector<double> ends;  // the open ancestors' ends
    size_t too_deep = 0;
    for (Slice& s : l.slices) {
      while (!ends.empty() && ends.back() <= s.start_us + kTouchUs) ends.pop_back();
      // A slice crossing its would-be parent's end goes one deeper anyway: drawn, not dropped.
      // Past kMaxDepth it is dropped (marked here, removed below), and so are its children.
      if (ends.size() > kMaxDepth) {
        s.depth = std::numeric_limits<uint16_t>::max();
        ++too_deep;
      } else {
        s.depth = static_cast<uint16_t>(ends.size());
        l.max_depth = std::max(l.max_depth, s.depth);
      }
      ends.push_back(s.end_us);
    }
    if (too_deep > 0) {
      std::erase_if(l.slices, [](const Slice& s) { return s.depth > kMaxDepth; });
      r.skipped += too_deep;
    }
    r.lanes.push_back(std::move(l));
  }

  // Flows: pair each id's first "s" with its first "f".
  sort_stable(flow_ends_.begin(), flow_ends_.end(), [](const FlowEnd& a, const FlowEnd& b) {
    return a.id < b.id || (a.id == b.id && a.finish < b.finish);
  });
  for (size_t i = 0; i < flow_ends_.size();) {
    size_t j = i;
    while (j < flow_ends_.size() && flow_ends_[j].id == flow_ends_[i].id) ++j;
    const FlowEnd& s = flow_ends_[i];
    const auto f = std::find_if(flow_ends_.begin() + static_cast<std::ptrdiff_t>(i),
                                flow_ends_.begin() + static_cast<std::ptrdiff_t>(j), [](const FlowEnd& x) { return x.finish; });
    if (!s.finish && f != flow_ends_.begin() + static_cast<std::ptrdiff_t>(j)) {
      Flow flow;
      flow.id = s.id;
      flow.from_lane = new_index[static_cast<size_t>(s.lane)];
      flow.to_lane = new_index[static_cast<size_t>(f->lane)];
      flow.from_us = s.t;
      flow.to_us = f->t;
      const Lane& from = r.lanes[static_cast<size_t>(flow.from_lane)];
      const Lane& to = r.lanes[static_cast<size_t>(flow.to_lane)];
      flow.from_slice = enclosing_slice(from, s.t);
      if (f->enclosing) {
        flow.to_slice = enclosing_slice(to, f->t);
      } else {  // Chrome binds a plain "f" to the next slice to begin
        const auto it = std::lower_bound(to.slices.begin(), to.slices.end(), f->t,
                                         [](const Slice& sl, double x) { return sl.start_us < x; });
        flow.to_slice = it == to.slices.end() ? -1 : it - to.slices.begin();
      }
      r.flows.push_back(flow);
    }
    i = j;
  }
  sort_stable(r.flows.begin(), r.flows.end(), [](const Flow& a, const Flow& b) { return a.from_us < b.from_us; });

  for (auto& [name, samples] : counters_) {
    sort_stable(samples.begin(), samples.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    r.counters.push_back({name, std::move(samples)});
  }

  // Steps: ProfilerStep#N on CPU lanes (Kineto repeats them as gpu_user_annotation on streams).
  for (const StepCandidate& s : steps_)
    if (!lanes_[static_cast<size_t>(s.lane)].lane.device) timeline_.steps.push_back({s.step, s.start, s.end});
  sort_stable(timeline_.steps.begin(), timeline_.steps.end(),
              [](const StepWindow& a, const StepWindow& b) { return a.step < b.step; });
  sort_stable(timeline_.memory.begin(), timeline_.memory.end(),
              [](const MemorySample& a, const MemorySample& b) { return a.t_us < b.t_us; });
  sort_stable(timeline_.allocator.begin(), timeline_.allocator.end(),
              [](const AllocatorMark& a, const AllocatorMark& b) { return a.t_us < b.t_us; });
  sort_stable(markers_.begin(), markers_.end(),
              [](const AllocatorMarker& a, const AllocatorMarker& b) { return a.t_us < b.t_us; });
  r.allocator = std::move(markers_);
  r.timeline = std::move(timeline_);

  out.declared_rank = declared_rank;
  out.names = names_.take();
  out.args = std::move(args_);
  return out;
}

}  // namespace shardlab::viewer::loader
