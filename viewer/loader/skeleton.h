// skeleton.h: the file less its traceEvents (the "skeleton" event_splitter.h keeps), read at the
// end: checked all through as JSON, as the events are, and its distributedInfo.rank and
// otherData.incomplete read. Small
// (the events are nearly all of a trace), so it is parsed whole. Both throw FileError.
#pragma once

#include <optional>
#include <string>

namespace shardlab::viewer::loader {

// A file whose top level is not an object: not JSON at all, or JSON but not a trace.
[[noreturn]] void scalar_top(const std::string& text);

// What the skeleton says about the file: its rank, and whether its run failed before the end.
struct SkeletonInfo {
  std::optional<int> rank;  // distributedInfo.rank
  // otherData.incomplete (shardlab writes it when the run failed: the trace ends where the rank
  // stopped): "" for a complete trace, else otherData.failure's words ("rank 1: ...").
  std::string incomplete;
};

// The skeleton (the file less its events), which this validates.
SkeletonInfo read_skeleton(const std::string& skeleton);

}  // namespace shardlab::viewer::loader
