#include "trace/metrics_json.h"

namespace shardlab {

using nlohmann::json;

namespace {

// The figures a window and a step share: everything but the window's length.
json figures(const RangeMetrics& m) {
  return {{"compute_us", m.compute_us},
          {"comm_us", m.comm_us},
          {"overlap_us", m.overlap_us},
          {"exposed_comm_us", m.exposed_comm_us},
          {"comm_wait_us", m.comm_wait_us},
          {"memcpy_us", m.memcpy_us},
          {"copy_overlap_us", m.copy_overlap_us},
          {"idle_us", m.idle_us},
          {"peak_allocated_bytes", m.peak_allocated},
          {"peak_reserved_bytes", m.peak_reserved},
          {"segment_mallocs", m.segment_mallocs},
          {"segment_frees", m.segment_frees},
          {"alloc_retries", m.alloc_retries},
          {"ooms", m.ooms},
          {"intra_node_bytes", m.intra_node_bytes},
          {"network_bytes", m.network_bytes}};
}

}  // namespace

json to_json(const RangeMetrics& m) {
  json j = figures(m);
  j["window_us"] = m.window_us;
  return j;
}

json to_json(const StepMetrics& m) {
  json j = figures(m);
  j["step"] = m.step;
  j["step_us"] = m.step_us;
  return j;
}

json to_json(const CollectiveMetrics& c) {
  return {{"name", c.name},
          {"step", c.step},
          {"group_size", c.group_size},
          {"bytes", c.bytes},
          {"time_us", c.time_us},
          {"algbw_GBps", c.algbw_GBps},
          {"busbw_GBps", c.busbw_GBps},
          {"link_tier", link_tier_name(c.link_tier)},
          {"link_bytes", c.link_bytes}};
}

}  // namespace shardlab
