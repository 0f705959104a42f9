// skeleton.h: the file less its traceEvents (the "skeleton" event_splitter.h keeps), read at the
// end: checked all through as JSON, as the events are, and its distributedInfo.rank read. Small
// (the events are nearly all of a trace), so it is parsed whole. Both throw FileError.
#pragma once

#include <optional>
#include <string>

namespace shardlab::viewer::loader {

// A file whose top level is not an object: not JSON at all, or JSON but not a trace.
[[noreturn]] void scalar_top(const std::string& text);

// The skeleton (the file less its events), which this validates: distributedInfo.rank.
std::optional<int> skeleton_rank(const std::string& skeleton);

}  // namespace shardlab::viewer::loader
