#include "device/profile.h"

#include <algorithm>
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

double number(const json& root, const std::string& path, const std::string& file, bool positive = true) {
  const json& v = constant(root, path, file);
  if (!v.is_number()) throw std::runtime_error("profile " + file + ": '" + path + "' must be a number");
  const double d = v.get<double>();
  if (positive && !(d > 0)) throw std::runtime_error("profile " + file + ": '" + path + "' must be > 0, got " + v.dump());
  return d;
}

LinkTier link(const json& root, const std::string& tier, const std::string& file) {
  const std::string base = "links." + tier;
  LinkTier t;
  if (!root.contains("links") || !root["links"].contains(tier) || !root["links"][tier].contains("name"))
    throw std::runtime_error("profile " + file + ": missing field '" + base + ".name'");
  t.name = root["links"][tier]["name"].get<std::string>();
  t.busbw_GBps = number(root, base + ".busbw_GBps", file);
  t.simple_base_us = number(root, base + ".simple_base_us", file);
  t.simple_hop_us = number(root, base + ".simple_hop_us", file);
  t.ll_base_us = number(root, base + ".ll_base_us", file);
  t.ll_hop_us = number(root, base + ".ll_hop_us", file);
  t.ll_bw_fraction = number(root, base + ".ll_bw_fraction", file);
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
  std::ifstream in(file);
  if (!in) {
    std::string known;
    for (const auto& n : profile_names()) known += (known.empty() ? "" : ", ") + n;
    if (is_path) throw std::runtime_error("--profile " + name_or_path + ": cannot open " + file.string());
    throw std::runtime_error("--profile " + name_or_path + ": no such profile; known profiles: " + known +
                             " (or give a path to a .json file)");
  }
  json root;
  try {
    root = json::parse(in);
  } catch (const json::exception& e) {
    throw std::runtime_error("profile " + file.string() + ": invalid JSON: " + e.what());
  }
  const std::string f = file.string();
  Profile p;
  p.path = f;
  p.name = root.value("name", file.stem().string());
  p.description = root.value("description", "");
  if (!root.contains("gpu") || !root["gpu"].contains("name"))
    throw std::runtime_error("profile " + f + ": missing field 'gpu.name'");
  p.gpu_name = root["gpu"]["name"].get<std::string>();
  p.memory_bytes = static_cast<int64_t>(number(root, "gpu.memory_bytes", f));
  p.sm_count = static_cast<int>(number(root, "gpu.sm_count", f));
  const std::string cc = constant(root, "gpu.compute_capability", f).get<std::string>();
  if (std::sscanf(cc.c_str(), "%d.%d", &p.compute_major, &p.compute_minor) != 2)
    throw std::runtime_error("profile " + f + ": gpu.compute_capability must look like \"9.0\", got " + cc);
  p.peak_tflops_f32 = number(root, "gpu.peak_tflops_f32", f);
  p.peak_tflops_bf16 = number(root, "gpu.peak_tflops_bf16", f);
  p.matmul_efficiency = number(root, "gpu.matmul_efficiency", f);
  p.attention_efficiency = number(root, "gpu.attention_efficiency", f);
  p.elementwise_efficiency = number(root, "gpu.elementwise_efficiency", f);
  p.hbm_GBps = number(root, "gpu.hbm_GBps", f);
  p.kernel_overhead_us = number(root, "gpu.kernel_overhead_us", f, false);
  p.launch_us = number(root, "host.launch_us", f, false);
  p.runtime_call_us = number(root, "host.runtime_call_us", f, false);
  p.malloc_us = number(root, "host.malloc_us", f, false);
  p.free_us = number(root, "host.free_us", f, false);
  p.h2d_GBps = number(root, "host.h2d_GBps", f);
  p.d2h_GBps = number(root, "host.d2h_GBps", f);
  p.memcpy_latency_us = number(root, "host.memcpy_latency_us", f, false);
  p.gpus_per_node = static_cast<int>(number(root, "topology.gpus_per_node", f));
  p.nodes = static_cast<int>(number(root, "topology.nodes", f));
  p.nics_per_node = static_cast<int>(number(root, "topology.nics_per_node", f));
  p.intra = link(root, "intra", f);
  p.inter = link(root, "inter", f);
  if (p.matmul_efficiency > 1 || p.attention_efficiency > 1 || p.elementwise_efficiency > 1)
    throw std::runtime_error("profile " + f + ": efficiencies are fractions of peak, at most 1");
  return p;
}

}  // namespace shardlab
