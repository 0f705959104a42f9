#include "trace/metrics.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>
#include <utility>

namespace shardlab {

namespace {

using Interval = std::pair<double, double>;

// Sorts, clips to [t0, t1) and merges: the union as disjoint intervals in time order.
std::vector<Interval> merged(std::vector<Interval> v, double t0, double t1) {
  std::vector<Interval> out;
  for (auto& [a, b] : v) {
    a = std::max(a, t0);
    b = std::min(b, t1);
  }
  std::erase_if(v, [](const Interval& i) { return i.second <= i.first; });
  std::sort(v.begin(), v.end());
  for (const Interval& i : v) {
    if (!out.empty() && i.first <= out.back().second)  // touching intervals merge too
      out.back().second = std::max(out.back().second, i.second);
    else
      out.push_back(i);
  }
  return out;
}

double total(const std::vector<Interval>& disjoint) {
  double sum = 0;
  for (const auto& [a, b] : disjoint) sum += b - a;
  return sum;
}

// |A ∩ B| for two disjoint, sorted interval lists: one linear sweep.
double intersection_length(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  double sum = 0;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    sum += std::max(0.0, std::min(a[i].second, b[j].second) - std::max(a[i].first, b[j].first));
    // The interval that ends first cannot meet anything later in the other list.
    if (a[i].second < b[j].second)
      ++i;
    else
      ++j;
  }
  return sum;
}

// "all_reduce", "AllReduce", "_allgather_base" -> "allreduce", "allreduce", "allgatherbase".
std::string normalized(const std::string& name) {
  std::string out;
  for (const char ch : name)
    if (ch != '_') out += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return out;
}

bool gathers(const std::string& norm) { return norm.starts_with("allgather"); }

}  // namespace

double union_length(std::vector<std::pair<double, double>> intervals, double t0, double t1) {
  return total(merged(std::move(intervals), t0, t1));
}

StreamMetrics stream_metrics(const RankTimeline& tl, int stream, double t0_us, double t1_us) {
  std::vector<Interval> mine, comm, compute;
  for (const DeviceSlice& s : tl.slices) {
    if (s.end_us <= t0_us || s.start_us >= t1_us) continue;
    const Interval i{s.start_us, s.end_us};
    const bool communicates = s.kind == SliceKind::comm || s.kind == SliceKind::comm_wait;
    if (s.stream == stream) {
      mine.push_back(i);
      if (communicates) comm.push_back(i);
    }
    if (s.kind == SliceKind::compute) compute.push_back(i);
  }
  StreamMetrics m;
  m.busy_us = union_length(std::move(mine), t0_us, t1_us);
  const auto comm_u = merged(std::move(comm), t0_us, t1_us);
  m.exposed_comm_us = total(comm_u) - intersection_length(comm_u, merged(std::move(compute), t0_us, t1_us));
  return m;
}

RangeMetrics range_metrics(const RankTimeline& tl, double t0_us, double t1_us) {
  RangeMetrics m;
  m.window_us = std::max(0.0, t1_us - t0_us);

  std::vector<Interval> compute, comm, wait, copy;
  for (const DeviceSlice& s : tl.slices) {
    if (s.end_us <= t0_us || s.start_us >= t1_us) continue;
    const Interval i{s.start_us, s.end_us};
    switch (s.kind) {
      case SliceKind::compute: compute.push_back(i); break;
      case SliceKind::comm: comm.push_back(i); break;
      case SliceKind::comm_wait:
        comm.push_back(i);
        wait.push_back(i);
        break;
      case SliceKind::memcpy:
      case SliceKind::memset: copy.push_back(i); break;
    }
  }
  std::vector<Interval> all;
  all.reserve(compute.size() + comm.size() + copy.size());
  for (const auto* part : {&compute, &comm, &copy}) all.insert(all.end(), part->begin(), part->end());

  const auto compute_u = merged(std::move(compute), t0_us, t1_us);
  const auto comm_u = merged(std::move(comm), t0_us, t1_us);
  const auto copy_u = merged(std::move(copy), t0_us, t1_us);
  m.compute_us = total(compute_u);
  m.comm_us = total(comm_u);
  m.overlap_us = intersection_length(compute_u, comm_u);
  m.exposed_comm_us = m.comm_us - m.overlap_us;
  m.comm_wait_us = union_length(std::move(wait), t0_us, t1_us);
  m.memcpy_us = total(copy_u);
  m.copy_overlap_us = intersection_length(compute_u, copy_u);
  m.idle_us = m.window_us - union_length(std::move(all), t0_us, t1_us);

  // Peak memory: the samples inside the window, plus the one still in effect at its start.
  const auto& mem = tl.memory;
  auto it = std::upper_bound(mem.begin(), mem.end(), t0_us,
                             [](double t, const MemorySample& s) { return t < s.t_us; });
  if (it != mem.begin()) --it;  // the last sample at or before t0
  for (; it != mem.end() && it->t_us < t1_us; ++it) {
    m.peak_allocated = std::max(m.peak_allocated, it->allocated);
    m.peak_reserved = std::max(m.peak_reserved, it->reserved);
  }
  const auto& marks = tl.allocator;
  auto mark = std::lower_bound(marks.begin(), marks.end(), t0_us,
                               [](const AllocatorMark& a, double t) { return a.t_us < t; });
  for (; mark != marks.end() && mark->t_us < t1_us; ++mark) {
    switch (mark->kind) {
      case AllocatorEventKind::segment_malloc: ++m.segment_mallocs; break;
      case AllocatorEventKind::segment_free: ++m.segment_frees; break;
      case AllocatorEventKind::alloc_retry: ++m.alloc_retries; break;
      case AllocatorEventKind::out_of_memory: ++m.ooms; break;
    }
  }
  for (const CollectiveRecord& c : tl.collectives) {
    if (c.start_us < t0_us || c.start_us >= t1_us) continue;
    switch (c.link_tier) {
      case LinkTierKind::intra_node: m.intra_node_bytes += link_bytes(c); break;
      case LinkTierKind::network: m.network_bytes += link_bytes(c); break;
      case LinkTierKind::unknown: break;
    }
  }
  return m;
}

std::vector<StepMetrics> step_metrics(const RankTimeline& tl) {
  std::vector<StepMetrics> out;
  out.reserve(tl.steps.size());
  for (const StepWindow& w : tl.steps) {
    StepMetrics s;
    static_cast<RangeMetrics&>(s) = range_metrics(tl, w.start_us, w.end_us);
    s.rank = tl.rank;
    s.step = w.step;
    s.step_us = s.window_us;
    out.push_back(s);
  }
  return out;
}

double bus_factor(const std::string& collective, int group_size) {
  // n == 1 moves nothing over a bus: all-reduce's factor is then 0, and so is its busbw.
  const double n = std::max(group_size, 1);
  const std::string norm = normalized(collective);
  if (norm.starts_with("allreduce")) return 2 * (n - 1) / n;
  if (gathers(norm) || norm.starts_with("reducescatter")) return (n - 1) / n;
  return 1;  // broadcast, reduce, send, recv, sendrecv and anything unknown
}

int64_t collective_bytes(const CollectiveRecord& c) {
  // All-gather's input is one shard; its output is the gathered total. Reduce-scatter's input
  // is already the total. Everything else moves its input buffer.
  const int64_t nelems = gathers(normalized(c.name)) ? c.out_nelems : c.in_nelems;
  return nelems * c.dtype_bytes;
}

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (std::abs(bytes) >= 1024 && u < 4) bytes /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", bytes, units[u]);
  return buf;
}

std::string collective_size_text(const CollectiveRecord& c) {
  if (c.name != "sendrecv") return human_bytes(static_cast<double>(collective_bytes(c)));
  std::string text;
  if (c.in_nelems > 0) text = "sends " + human_bytes(static_cast<double>(c.in_nelems * c.dtype_bytes));
  if (c.out_nelems > 0)
    text += (text.empty() ? "" : ", ") + std::string("receives ") + human_bytes(static_cast<double>(c.out_nelems * c.dtype_bytes));
  return text.empty() ? "0 B" : text;
}

int64_t link_bytes(const CollectiveRecord& c) {
  return std::llround(static_cast<double>(collective_bytes(c)) * bus_factor(c.name, c.group_size));
}

CollectiveMetrics collective_metrics(const CollectiveRecord& c) {
  CollectiveMetrics m;
  m.name = c.name;
  m.group_size = c.group_size;
  m.group = c.group;
  m.bytes = collective_bytes(c);
  m.time_us = c.end_us - c.start_us;
  if (m.time_us > 0) {
    m.algbw_GBps = static_cast<double>(m.bytes) / (m.time_us * 1e3);  // bytes/us = 1e-3 GB/s
    m.busbw_GBps = m.algbw_GBps * bus_factor(c.name, c.group_size);
  }
  m.link = c.link;
  m.link_tier = c.link_tier;
  m.link_bytes = link_bytes(c);
  return m;
}

std::vector<CollectiveMetrics> collective_metrics(const RankTimeline& tl) {
  std::vector<CollectiveMetrics> out;
  out.reserve(tl.collectives.size());
  for (const CollectiveRecord& c : tl.collectives) {
    CollectiveMetrics m = collective_metrics(c);
    m.rank = tl.rank;
    // Step windows are in time order: the candidate is the last one starting at or before c.
    auto w = std::upper_bound(tl.steps.begin(), tl.steps.end(), c.start_us,
                              [](double t, const StepWindow& s) { return t < s.start_us; });
    if (w != tl.steps.begin() && c.start_us < std::prev(w)->end_us) m.step = std::prev(w)->step;
    out.push_back(m);
  }
  return out;
}

std::vector<std::pair<double, double>> compute_union(const RankTimeline& tl) {
  std::vector<Interval> compute;
  for (const DeviceSlice& s : tl.slices)
    if (s.kind == SliceKind::compute) compute.emplace_back(s.start_us, s.end_us);
  return merged(std::move(compute), -std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity());
}

double uncovered_length(double a, double b, double t0, double t1, const std::vector<std::pair<double, double>>& disjoint) {
  a = std::max(a, t0);
  b = std::min(b, t1);
  if (b <= a) return 0;
  const std::vector<Interval> one{{a, b}};
  // The covering intervals that can meet [a, b): from the last one starting before a.
  auto from = std::upper_bound(disjoint.begin(), disjoint.end(), Interval{a, a});
  if (from != disjoint.begin()) --from;
  auto to = std::lower_bound(from, disjoint.end(), Interval{b, b});
  return (b - a) - intersection_length(one, std::vector<Interval>(from, to));
}

}  // namespace shardlab
