#include "run/run_directory.h"

#include <fstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "trace/file_output.h"

namespace shardlab {
namespace fs = std::filesystem;

std::string run_name_problem(const std::string& name) {
  if (name.empty() || name == "." || name == "..") return "one directory name, not empty, '.' or '..'";
  if (name.find('/') != std::string::npos) return "one directory name, without '/' (use --trace-dir for the parent)";
  return "";
}

std::string rank_trace_file(int rank) { return "rank" + std::to_string(rank) + ".json"; }

std::string flight_record_file(int rank) { return "flight_record_rank" + std::to_string(rank) + ".json"; }

std::vector<std::string> run_files(int world_size) {
  std::vector<std::string> files;
  for (int r = 0; r < world_size; ++r) files.push_back(rank_trace_file(r));
  files.push_back(kSummaryFile);
  for (int r = 0; r < world_size; ++r) files.push_back(flight_record_file(r));
  return files;
}

namespace {

// Only names a run writes (rank<R>.json, flight_record_rank<R>.json, summary.json): a manifest
// edited by hand cannot point a run at other files.
bool is_run_file(const std::string& name) {
  if (name == kSummaryFile) return true;
  for (const std::string prefix : {"rank", "flight_record_rank"}) {
    const std::string suffix = ".json";
    if (name.size() <= prefix.size() + suffix.size() || !name.starts_with(prefix) || !name.ends_with(suffix)) continue;
    const std::string digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
    if (digits.find_first_not_of("0123456789") == std::string::npos) return true;
  }
  return false;
}

}  // namespace

std::vector<std::string> manifest_files(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_regular_file(dir / kRunManifest, ec)) return {};
  std::ifstream in(dir / kRunManifest);
  if (!in) return {};
  const nlohmann::json m = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!m.is_object() || !m.contains("files") || !m["files"].is_array()) return {};
  std::vector<std::string> files;
  for (const auto& f : m["files"])
    if (f.is_string() && is_run_file(f.get<std::string>())) files.push_back(f.get<std::string>());
  return files;
}

std::vector<std::string> claim_run_directory(const fs::path& dir, const std::string& chapter, int world_size) {
  std::vector<std::string> removed;
  for (const std::string& listed : manifest_files(dir)) {
    // With the file, its temporary (file_output.h), which a kill in the middle of a write leaves.
    for (const std::string& name : {listed, listed + ".tmp"}) {
      std::error_code ec;
      if (fs::is_regular_file(dir / name, ec) && fs::remove(dir / name, ec)) removed.push_back(name);
    }
  }
  const nlohmann::json manifest = {
      {"shardlab_run", 1}, {"chapter", chapter}, {"world_size", world_size}, {"files", run_files(world_size)}};
  write_whole_file(dir / kRunManifest, manifest.dump() + "\n");
  return removed;
}

}  // namespace shardlab
