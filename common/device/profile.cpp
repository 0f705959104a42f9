#include "device/profile.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace shardlab {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path profile_dir() {
  if (const char* env = std::getenv("SHARDLAB_PROFILES"); env && *env) return env;
  return SHARDLAB_PROFILE_DIR;
}

// Reads the constant at `path` ("gpu.hbm_GBps"): an object with a value and a source.
const json& constant(const json& root, const std::string& path, const std::string& file) {
  const json* node = &root;
  size_t begin = 0;
  while (begin <= path.size()) {
    const size_t dot = path.find('.', begin);
    const std::string key = path.substr(begin, dot == std::string::npos ? std::string::npos : dot - begin);
    if (!node->is_object() || !node->contains(key))
      throw std::runtime_error("profile " + file + ": missing field '" + path + "'");
    node = &(*node)[key];
    if (dot == std::string::npos) break;
    begin = dot + 1;
  }
  if (!node->is_object() || !node->contains("value") || !node->contains("source") ||
      !(*node)["source"].is_string() || (*node)["source"].get<std::string>().empty())
    throw std::runtime_error("profile " + file + ": field '" + path +
                             "' must be {\"value\": ..., \"unit\": ..., \"source\": \"where it comes from\"}");
  return (*node)["value"];
}

// What a constant may be: [lo, hi] in `unit`, a whole number when `whole`. The bounds are wide
// (no real machine is near them) but finite, so a slip of the keyboard (a bandwidth of 1e-300,
// a launch of 1e300 us, a negative latency) is refused with its name and unit instead of
// turning into a run with nonsense times.
struct Range {
  double lo, hi;
  const char* unit;
  bool whole = false;
  bool lo_open = false;  // (lo, hi]: lo itself is not allowed
};

std::string format_bound(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

double number(const json& root, const std::string& path, const std::string& file, const Range& r) {
  const json& v = constant(root, path, file);
  const std::string allowed = std::string(r.whole ? "a whole number" : "a number") + " from " + format_bound(r.lo) +
                              (r.lo_open ? " (exclusive)" : "") + " to " + format_bound(r.hi) + " " + r.unit;
  if (!v.is_number()) throw std::runtime_error("profile " + file + ": '" + path + "' is " + v.dump() + "; allowed: " + allowed);
  const double d = v.get<double>();
  const bool in_range = std::isfinite(d) && (r.lo_open ? d > r.lo : d >= r.lo) && d <= r.hi;
  if (!in_range || (r.whole && d != std::floor(d)))
    throw std::runtime_error("profile " + file + ": '" + path + "' is " + v.dump() + " " + r.unit + "; allowed: " + allowed);
  return d;
}

constexpr Range kFraction{0, 1, "(a fraction of peak)", false, true};
constexpr Range kBandwidth{0.01, 1e5, "GB/s"};
constexpr Range kHostCost{0, 1e6, "us"};
constexpr Range kLatency{0, 1e4, "us"};
constexpr Range kTflops{1e-3, 1e5, "TFLOP/s"};
constexpr Range kCount{1, 1e6, "", true};

LinkTier link(const json& root, const std::string& tier, const std::string& file) {
  const std::string base = "links." + tier;
  LinkTier t;
  if (!root.contains("links") || !root["links"].contains(tier) || !root["links"][tier].contains("name"))
    throw std::runtime_error("profile " + file + ": missing field '" + base + ".name'");
  t.name = root["links"][tier]["name"].get<std::string>();
  t.busbw_GBps = number(root, base + ".busbw_GBps", file, kBandwidth);
  t.simple_base_us = number(root, base + ".simple_base_us", file, kLatency);
  t.simple_hop_us = number(root, base + ".simple_hop_us", file, kLatency);
  t.ll_base_us = number(root, base + ".ll_base_us", file, kLatency);
  t.ll_hop_us = number(root, base + ".ll_hop_us", file, kLatency);
  t.ll_bw_fraction = number(root, base + ".ll_bw_fraction", file, Range{0, 1, "(of Simple's bandwidth)", false, true});
  return t;
}

}  // namespace

std::vector<std::string> profile_names() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(profile_dir(), ec))
    if (entry.path().extension() == ".json") names.push_back(entry.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

Profile load_profile(const std::string& name_or_path) {
  const bool is_path = name_or_path.find('/') != std::string::npos ||
                       (name_or_path.size() > 5 && name_or_path.ends_with(".json"));
  const fs::path file = is_path ? fs::path(name_or_path) : profile_dir() / (name_or_path + ".json");
  std::error_code ec;
  // A directory would read as garbage and a FIFO would block the open: refuse both, at once.
  if (fs::exists(file, ec) && !fs::is_regular_file(file, ec))
    throw std::runtime_error("--profile " + name_or_path + ": " + file.string() +
                             " is not a regular file (a directory, FIFO or device); give a profile's .json file");
  std::ifstream in(file);
  if (!in) {
    std::string known;
    for (const auto& n : profile_names()) known += (known.empty() ? "" : ", ") + n;
    if (is_path) throw std::runtime_error("--profile " + name_or_path + ": cannot open " + file.string());
    throw std::runtime_error("--profile " + name_or_path + ": no such profile; known profiles: " + known +
                             " (or give a path to a .json file)");
  }
  const std::string f = file.string();
  json root;
  try {
    root = json::parse(in);
  } catch (const json::exception& e) {
    throw std::runtime_error("profile " + f + ": invalid JSON: " + e.what());
  }
  Profile p;
  try {
    p.path = f;
    p.name = root.value("name", file.stem().string());
    p.description = root.value("description", "");
    if (!root.contains("gpu") || !root["gpu"].contains("name"))
      throw std::runtime_error("profile " + f + ": missing field 'gpu.name'");
    p.gpu_name = root["gpu"]["name"].get<std::string>();
    p.memory_bytes = static_cast<int64_t>(number(root, "gpu.memory_bytes", f, Range{1 << 20, 1e15, "bytes", true}));
    p.sm_count = static_cast<int>(number(root, "gpu.sm_count", f, kCount));
    const std::string cc = constant(root, "gpu.compute_capability", f).get<std::string>();
    if (std::sscanf(cc.c_str(), "%d.%d", &p.compute_major, &p.compute_minor) != 2)
      throw std::runtime_error("profile " + f + ": gpu.compute_capability must look like \"9.0\", got " + cc);
    p.peak_tflops_f32 = number(root, "gpu.peak_tflops_f32", f, kTflops);
    p.peak_tflops_bf16 = number(root, "gpu.peak_tflops_bf16", f, kTflops);
    p.matmul_efficiency = number(root, "gpu.matmul_efficiency", f, kFraction);
    p.attention_efficiency = number(root, "gpu.attention_efficiency", f, kFraction);
    p.elementwise_efficiency = number(root, "gpu.elementwise_efficiency", f, kFraction);
    p.hbm_GBps = number(root, "gpu.hbm_GBps", f, kBandwidth);
    p.kernel_overhead_us = number(root, "gpu.kernel_overhead_us", f, kLatency);
    p.launch_us = number(root, "host.launch_us", f, kLatency);
    p.runtime_call_us = number(root, "host.runtime_call_us", f, kLatency);
    p.malloc_us = number(root, "host.malloc_us", f, kHostCost);
    p.free_us = number(root, "host.free_us", f, kHostCost);
    p.h2d_GBps = number(root, "host.h2d_GBps", f, kBandwidth);
    p.d2h_GBps = number(root, "host.d2h_GBps", f, kBandwidth);
    p.memcpy_latency_us = number(root, "host.memcpy_latency_us", f, kLatency);
    p.gpus_per_node = static_cast<int>(number(root, "topology.gpus_per_node", f, kCount));
    p.nodes = static_cast<int>(number(root, "topology.nodes", f, kCount));
    p.nics_per_node = static_cast<int>(number(root, "topology.nics_per_node", f, kCount));
    p.intra = link(root, "intra", f);
    static_cast<LinkTier&>(p.inter) = link(root, "inter", f);
    p.inter.simple_hop_exposed_us = number(root, "links.inter.simple_hop_exposed_us", f, kLatency);
    p.inter.ll_hop_exposed_us = number(root, "links.inter.ll_hop_exposed_us", f, kLatency);
    p.inter.net_overhead_us = number(root, "links.inter.net_overhead_us", f, kLatency);
  } catch (const json::exception& e) {  // a field of the wrong type ("name": 3)
    throw std::runtime_error("profile " + f + ": " + e.what());
  }
  return p;
}

}  // namespace shardlab
