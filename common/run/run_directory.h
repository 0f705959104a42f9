// run_directory.h: what a run may write into, and remove from, its directory.
//
// A run writes into <trace-dir>/<run-name>: rank<R>.json for each rank, summary.json and, when
// it fails, flight_record_rank<R>.json. Directories are shared with whatever else lives there
// (an earlier run of another size, a user's own files), so a run deletes nothing it cannot
// prove a run wrote: rank 0 first lists this run's files in `.shardlab-run` (the manifest),
// and the next run in the directory removes exactly what that list names, then lists its own.
// A run killed at any moment therefore leaves only its own files behind, and a viewer that
// opens the directory reads the manifest to open only them (viewer/trace_model.cpp).
//
//   {"shardlab_run": 1, "chapter": "04_fsdp", "world_size": 3,
//    "files": ["rank0.json", "rank1.json", "rank2.json", "summary.json",
//              "flight_record_rank0.json", "flight_record_rank1.json", "flight_record_rank2.json"]}
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace shardlab {

inline constexpr const char* kRunManifest = ".shardlab-run";

// Why `name` cannot be a run's directory name ("" when it can): one plain path component, so a
// run stays inside --trace-dir and never lands in (or clears) the directory above it.
std::string run_name_problem(const std::string& name);

// The names of a run's files: what the writers write and the manifest lists, from one place.
std::string rank_trace_file(int rank);     // rank<R>.json
std::string flight_record_file(int rank);  // flight_record_rank<R>.json
inline constexpr const char* kSummaryFile = "summary.json";

// The files a run of `world_size` ranks may write.
std::vector<std::string> run_files(int world_size);

// Rank 0, before step 1, once the directory is known to be writable: removes the files the
// previous manifest lists, with their <file>.tmp (nothing else; a listed name that is now a
// directory stays), then
// writes this run's manifest. Returns what it removed; throws std::runtime_error, with the
// path and the system's reason, when the manifest cannot be written.
std::vector<std::string> claim_run_directory(const std::filesystem::path& dir, const std::string& chapter,
                                             int world_size);

// The files the manifest in `dir` lists, or nothing when there is none (or it is not one).
std::vector<std::string> manifest_files(const std::filesystem::path& dir);

}  // namespace shardlab
