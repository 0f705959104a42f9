// trace_builder.h: the loader's third stage: a file's Parts (records.h), taken in file order, into
// its Rank: lanes named and ordered, slices sorted and nested, B/E paired, flows bound to slices,
// counters, steps and the RankTimeline that common/trace/metrics.h reads. File order, whichever thread
// parsed a part, so that whatever depends on order (B/E pairs, a wait's collective, metadata, the
// numbering of string ids) comes out exactly as one sequential pass would make it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "records.h"

namespace shardlab::viewer::loader {

struct LaneBuild {
  Lane lane;
  std::vector<uint32_t> pending_waits;  // timeline slices of nccl:wait not yet tied to a collective
  struct Open {  // a B event awaiting its E
    double ts;
    uint32_t name, args;
    Category category;
    uint64_t correlation;
  };
  std::vector<Open> open;
};

struct FlowEnd {
  uint64_t id;
  int lane;
  double t;
  bool finish, enclosing;  // an "f"; bound to the enclosing slice ("bp": "e")
};

struct StepCandidate {
  int lane, step;
  double start, end;
};

struct FileResult {
  Rank rank;
  std::optional<int> declared_rank;  // distributedInfo.rank
  std::vector<std::string> names, args;  // this file's interned tables (args without the "")
};

class Builder {
 public:
  void add(Part& part);
  FileResult finish(std::optional<int> declared_rank);

 private:
  void add_record(const Rec& r, const Part& part, int pid, int tid, uint32_t name, uint32_t args);
  LaneBuild& lane(int pid, int tid);
  void add_slice(LaneBuild& lb, int tid, double start, double end, uint32_t name, uint32_t args, Category cat,
                 uint64_t correlation, bool device, bool memset, const CollectiveArgs* collective);
  int label_id(const std::string& label);

  Interner names_;
  std::vector<std::string> args_;  // slice args index i is args_[i - 1]
  std::vector<LaneBuild> lanes_;
  std::unordered_map<uint64_t, int> lane_index_;
  std::unordered_map<std::string, int> labels_;  // string pids/tids -> negative ids
  std::unordered_map<int, std::string> label_names_;
  std::map<int, std::string> process_names_;
  std::map<int, int> process_sort_;
  std::map<std::pair<int, int>, std::string> thread_names_;
  std::map<std::pair<int, int>, int> thread_sort_;
  std::map<std::string, Samples> counters_;
  std::vector<FlowEnd> flow_ends_;
  std::vector<StepCandidate> steps_;
  RankTimeline timeline_;
  std::vector<AllocatorMarker> markers_;
  size_t skipped_ = 0;
  size_t names_cut_ = 0;
  std::vector<int> label_map_;
  std::vector<uint32_t> name_map_;
};

}  // namespace shardlab::viewer::loader
