// records.h: what a chunk's parse hands the builder. ChunkParser (chunk_parser.h) turns a chunk's
// events into compact records (Rec) with the chunk's own tables in a Part: interned names and
// args text, string pids/tids, collectives, metadata, counters. Parts are made in parallel;
// Builder (trace_builder.h) takes them in file order and maps the tables onto the file's.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "trace_model.h"

namespace shardlab::viewer::loader {

// Interns strings: each distinct string once, its index handed out. Open addressing over a
// flat table of (hash, index) slots: a million mostly distinct args objects would otherwise cost
// a node allocation and a pointer chase each in std::unordered_map.
class Interner {
 public:
  Interner() : Interner(false) {}
  explicit Interner(bool reserve_empty, size_t expected = 0) {
    strings_.reserve(expected);
    slots_.resize(std::bit_ceil(std::max<size_t>(64, expected * 2)));
    if (reserve_empty) add("");
  }
  uint32_t add(std::string_view s) {
    const uint64_t h = std::hash<std::string_view>{}(s);
    const auto tag = static_cast<uint32_t>(h >> 32);
    size_t mask = slots_.size() - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
      Slot& slot = slots_[i];
      if (slot.index == kEmpty) break;
      if (slot.tag == tag && strings_[slot.index] == s) return slot.index;
    }
    const auto id = static_cast<uint32_t>(strings_.size());
    strings_.emplace_back(s);
    if (strings_.size() * 2 > slots_.size()) {  // keep the load under 1/2: short probes
      grow();
      mask = slots_.size() - 1;
    }
    size_t i = h & mask;
    while (slots_[i].index != kEmpty) i = (i + 1) & mask;
    slots_[i] = {tag, id};
    return id;
  }
  std::vector<std::string> take() {
    slots_.clear();
    return std::move(strings_);
  }

 private:
  static constexpr uint32_t kEmpty = std::numeric_limits<uint32_t>::max();
  struct Slot {
    uint32_t tag = 0;  // the hash's high bits: most mismatches fail without a string compare
    uint32_t index = kEmpty;
  };
  void grow() {
    std::vector<Slot> old(slots_.size() * 2);
    old.swap(slots_);
    const size_t mask = slots_.size() - 1;
    for (const Slot& o : old) {
      if (o.index == kEmpty) continue;
      size_t i = std::hash<std::string_view>{}(strings_[o.index]) & mask;
      while (slots_[i].index != kEmpty) i = (i + 1) & mask;
      slots_[i] = o;
    }
  }

  std::vector<std::string> strings_;
  std::vector<Slot> slots_;
};

// One event kept for the builder (which lays out lanes, pairs B/E, ... in file order).
struct Rec {
  double ts = 0, dur = 0;
  uint64_t id = 0;     // flows: the id; slices: the correlation (0: none)
  uint32_t name = 0;   // Part::names
  uint32_t args = 0;   // Part::args (0: none)
  int32_t pid = 0, tid = 0;  // < 0: Part::labels[-1 - id]
  uint32_t extra = 0;  // 1 + index into Part::collectives (slices) or Part::metas ("M"); 0: none
  int32_t step = 0;    // N of a ProfilerStep#N (flags & kStep)
  char ph = 0;
  uint8_t flags = 0;
  Category category = Category::other;
};
enum : uint8_t { kDevice = 1, kMemset = 2, kStep = 4, kEnclosing = 8, kNameEmpty = 16 };

struct CollectiveArgs {
  std::string name, dtype, group, link;
  LinkTierKind link_tier = LinkTierKind::unknown;
  int64_t in_nelems = 0, out_nelems = 0, group_size = 1, seq = 0;
};

struct Meta {
  enum Kind : uint8_t { process_name, thread_name, process_sort, thread_sort } kind = process_name;
  std::string name;
  int sort_index = 0;
};

using Samples = std::vector<std::pair<double, double>>;

struct Part {
  std::vector<Rec> recs;
  Interner names, args{true};
  std::vector<std::string> labels;  // string pids/tids in order of first use
  std::map<std::string, int, std::less<>> label_ids;
  std::vector<CollectiveArgs> collectives;
  std::vector<Meta> metas;
  std::map<std::string, Samples, std::less<>> counters;  // in file order within each
  std::vector<MemorySample> memory;                     // in file order
  std::vector<AllocatorMark> allocator;                 // cat "allocator" instants, in file order
  std::vector<uint32_t> allocator_args;                 // their args (Part::args), in the same order
  size_t skipped = 0;
  size_t names_cut = 0;
};

}  // namespace shardlab::viewer::loader
