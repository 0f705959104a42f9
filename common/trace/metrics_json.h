// metrics_json.h: the metrics (metrics.h) as JSON, written one way wherever they are written:
// summary.json (run/job.cpp) and the viewer's --state-out (viewer/app/window.cpp).
//
// Keys are the fields' names with their units: times in microseconds ("compute_us"), memory and
// link bytes in bytes ("peak_allocated_bytes", "network_bytes"), the allocator's counts as
// counts ("segment_mallocs"); a tier as the trace spells it ("intra-node", "network", "unknown").
#pragma once

#include <nlohmann/json.hpp>

#include "trace/metrics.h"

namespace shardlab {

nlohmann::json to_json(const RangeMetrics& m);       // every figure, and the window ("window_us")
nlohmann::json to_json(const StepMetrics& m);        // every figure, "step" and "step_us"
nlohmann::json to_json(const CollectiveMetrics& c);  // name, step, group size, bytes, bandwidths, link tier and bytes

}  // namespace shardlab
