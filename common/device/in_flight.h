// in_flight.h: a measured device's work whose timing has not been read yet, in issue order.
//
// A real GPU finishes work long after the CPU queued it. CudaDevice brackets each kernel, copy
// and collective with two timing events and keeps its slice here until the end event has
// completed; at each synchronize point it writes the completed slices to the trace and keeps
// the rest. The slices complete out of issue order (two streams), so the ones kept are
// compacted in place, and that compaction is where the first H200 run lost every string of a
// collective's slice: the hand-written loop moved the first kept slice onto itself, and a
// std::string moved onto itself is left empty. std::erase_if moves an element only into a gap
// a written slice left, never onto itself.
//
// Nothing here needs CUDA, so the logic is tested on every machine (tests/unit/test_trace.cpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "trace/trace.h"

namespace shardlab {

// One slice for a device lane, as the trace recorder takes it once its times are known.
struct MeasuredSlice {
  enum class Kind : uint8_t { kernel, memcpy, collective } kind = Kind::kernel;
  int stream = 0;
  std::string name;
  uint64_t correlation = 0;
  double flops = 0, bytes = 0;
  CollectiveArgs collective;  // for Kind::collective
  int64_t host_start_ns = 0;  // when the host began issuing it: the work cannot have started earlier
};

// `Marker` is what tells when the work began and ended (cudaEvent_t on CUDA).
template <class Marker>
class InFlight {
 public:
  struct Entry {
    MeasuredSlice slice;
    Marker start{}, end{};
  };

  void push(Entry e) { entries_.push_back(std::move(e)); }
  size_t size() const { return entries_.size(); }
  const std::vector<Entry>& entries() const { return entries_; }

  // Hands every entry for which done(entry) holds to finish(entry), in issue order, and keeps
  // the others in their order. `done` is asked once per entry.
  template <class Done, class Finish>
  void flush(Done&& done, Finish&& finish) {
    std::erase_if(entries_, [&](Entry& e) {
      if (!done(e)) return false;
      finish(e);
      return true;
    });
  }

 private:
  std::vector<Entry> entries_;
};

}  // namespace shardlab
