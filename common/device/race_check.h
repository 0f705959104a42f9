// race_check.h: finds the ordering bugs a real GPU would hide until they corrupt a result.
//
// Every op names what it reads and writes (device.h, Access). Two accesses to overlapping bytes
// conflict when at least one writes; a conflict is a race unless the later op is ordered after
// the earlier one. Order comes from:
//   - the same stream (a stream runs its ops in order);
//   - events: wait(s, e) orders s after everything e's stream had done when e was recorded;
//   - the host: after synchronize(e) the CPU has seen that work finish, so anything it launches
//     afterwards is ordered after it.
// Vector clocks capture exactly that: each stream (and the host) holds a clock per stream; an
// op on stream s ticks s's own entry; events carry a copy; waits and syncs take the maximum.
// An earlier access by stream a at tick t is ordered before the current op on s iff
// clock(s)[a] >= t.
//
// Accesses are tracked by address (allocator segment and byte range), not by tensor, so a
// block freed on one stream and handed to another allocation while the first stream still
// used it (the missing record_stream bug) shows as a race between the old and the new owner.
// Using a tensor after its allocation was freed is reported as a use after free.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace shardlab {

struct Access;
class CachingAllocator;

using VectorClock = std::vector<uint32_t>;  // indexed by stream slot

class RaceCheck {
 public:
  // Streams are registered in order; `slot` is their index in every VectorClock.
  int add_stream(int stream_id, std::string name);

  // Called for each op before it runs. Reports go to reports().
  void on_op(int slot, std::string_view op, const std::vector<Access>& accesses, const CachingAllocator& alloc);
  VectorClock clock_of(int slot) const { return streams_[slot].clock; }
  void on_wait(int slot, const VectorClock& event_clock);  // stream waits for an event
  void on_host_sync(const VectorClock& clock);             // CPU saw this work finish
  void on_host_sync_all();                                 // device synchronize

  const std::vector<std::string>& reports() const { return reports_; }

 private:
  struct StreamState {
    int id;
    std::string name;
    VectorClock clock;
  };
  struct Record {  // one past access to a byte range of a segment
    uint64_t begin, end;  // byte offsets in the segment
    bool write;
    int slot;
    uint32_t tick;
    uint64_t alloc_id;
    std::string op;
  };
  void join(VectorClock& into, const VectorClock& from) const;
  bool ordered(const Record& r, const VectorClock& now) const;
  void report(const std::string& text);

  std::vector<StreamState> streams_;
  VectorClock host_;  // what the CPU has seen complete
  std::unordered_map<uint64_t, std::vector<Record>> by_segment_;
  std::vector<std::string> reports_;
};

}  // namespace shardlab
