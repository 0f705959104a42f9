#include "device/race_check.h"

#include <algorithm>
#include <string>

#include "device/allocator.h"
#include "device/device.h"

namespace shardlab {

int RaceCheck::add_stream(int stream_id, std::string name) {
  streams_.push_back({stream_id, std::move(name), {}});
  return static_cast<int>(streams_.size()) - 1;
}

void RaceCheck::join(VectorClock& into, const VectorClock& from) const {
  if (into.size() < from.size()) into.resize(from.size(), 0);
  for (size_t i = 0; i < from.size(); ++i) into[i] = std::max(into[i], from[i]);
}

bool RaceCheck::ordered(const Record& r, const VectorClock& now) const {
  return static_cast<size_t>(r.slot) < now.size() && now[r.slot] >= r.tick;
}

void RaceCheck::on_wait(int slot, const VectorClock& event_clock) { join(streams_[slot].clock, event_clock); }

void RaceCheck::on_host_sync(const VectorClock& clock) { join(host_, clock); }

void RaceCheck::on_host_sync_all() {
  for (const auto& s : streams_) join(host_, s.clock);
}

void RaceCheck::report(const std::string& text) {
  // A loop repeats the same mistake every iteration: say it once.
  if (std::find(reports_.begin(), reports_.end(), text) == reports_.end()) reports_.push_back(text);
}

void RaceCheck::on_op(int slot, std::string_view op, const std::vector<Access>& accesses, const CachingAllocator& alloc) {
  StreamState& s = streams_[slot];
  // Work the CPU launches after it saw other work finish is ordered after that work.
  join(s.clock, host_);
  if (s.clock.size() <= static_cast<size_t>(slot)) s.clock.resize(slot + 1, 0);
  const uint32_t tick = ++s.clock[slot];
  const auto stream_label = [&](int sl) { return "stream " + std::to_string(streams_[sl].id) + " (" + streams_[sl].name + ")"; };

  for (const Access& a : accesses) {
    const Tensor& t = a.tensor;
    if (t.on_host() || t.alloc_id == 0 || t.bytes() == 0) continue;
    const std::string verb = a.write ? "writes" : "reads";
    if (!alloc.is_live(t.alloc_id)) {
      report("use after free: " + std::string(op) + " on " + stream_label(slot) + " " + verb + " '" +
             alloc.label(t.alloc_id) + "' after it was freed");
      continue;
    }
    const uint64_t begin = t.offset, end = t.offset + t.bytes();
    auto& records = by_segment_[t.segment];
    for (const Record& r : records) {
      if (r.end <= begin || end <= r.begin || !(r.write || a.write) || ordered(r, s.clock)) continue;
      const std::string earlier = std::string(r.write ? "wrote" : "read");
      if (r.alloc_id != t.alloc_id) {
        report("use after free (memory reused): " + std::string(op) + " on " + stream_label(slot) + " " + verb + " '" +
               alloc.label(t.alloc_id) + "', whose memory was '" + alloc.label(r.alloc_id) + "', which " + r.op +
               " on " + stream_label(r.slot) + " " + earlier +
               " and may still be using; call record_stream on it for that stream before freeing it");
      } else {
        report("race on '" + alloc.label(t.alloc_id) + "' (bytes " + std::to_string(std::max(begin, r.begin)) + "-" +
               std::to_string(std::min(end, r.end)) + " of its segment): " + std::string(op) + " on " +
               stream_label(slot) + " " + verb + " it, but " + r.op + " on " + stream_label(r.slot) + " " + earlier +
               " it and nothing orders the two; make " + stream_label(slot) + " wait for an event recorded on " +
               stream_label(r.slot) + " after " + r.op);
      }
    }
    // Forget what this access supersedes: ordered earlier accesses inside its range that it
    // overwrites (a write) or repeats (a read on the same stream).
    std::erase_if(records, [&](const Record& r) {
      return r.begin >= begin && r.end <= end && ordered(r, s.clock) && (a.write || (!r.write && r.slot == slot));
    });
    records.push_back({begin, end, a.write, slot, tick, t.alloc_id, std::string(op)});
  }
}

}  // namespace shardlab
