// A run's directory (run/run_directory.h): a run removes only the files the last run there
// listed in its manifest, never a user's, and lists its own before step 1.
#include <catch2/catch.hpp>

#include "test_files.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "run/run_directory.h"

using namespace shardlab;
namespace fs = std::filesystem;

namespace {

void touch(const fs::path& p) { std::ofstream(p) << "x\n"; }

}  // namespace

TEST_CASE("run directory: a run lists its files, and the next removes exactly those", "[run]") {
  TempDir tmp("shardlab_test_run_dir");
  // What a user keeps beside runs, with names a careless cleanup matches: rank*, a directory.
  for (const char* f : {"rankings.xlsx", "rank_important.txt", "notes.json"}) touch(tmp.path / f);
  fs::create_directories(tmp.path / "rank_backup");
  touch(tmp.path / "rank_backup" / "rank0.json");

  CHECK(claim_run_directory(tmp.path, "04_fsdp", 4).empty());  // no manifest yet: nothing removed
  CHECK(manifest_files(tmp.path) == run_files(4));
  // The 4-rank run writes its files, and a file the user dropped in later.
  for (const char* f : {"rank0.json", "rank1.json", "rank2.json", "rank3.json", "summary.json"}) touch(tmp.path / f);
  touch(tmp.path / "rank9.json");

  // A 3-rank run in the same directory: the 4-rank run's files go, rank3.json included.
  const std::vector<std::string> removed = claim_run_directory(tmp.path, "04_fsdp", 3);
  CHECK(removed == std::vector<std::string>{"rank0.json", "rank1.json", "rank2.json", "rank3.json", "summary.json"});
  CHECK(manifest_files(tmp.path) == run_files(3));
  for (const char* f : {"rankings.xlsx", "rank_important.txt", "notes.json", "rank9.json", "rank_backup/rank0.json"})
    CHECK(fs::exists(tmp.path / f));

  // A manifest edited to name other files cannot make a run delete them.
  std::ofstream(tmp.path / kRunManifest) << R"({"files": ["rankings.xlsx", "../x", "rank_backup", "rank9.json"]})";
  CHECK(manifest_files(tmp.path) == std::vector<std::string>{"rank9.json"});
  // Names almost a run's: only rank<digits>.json, flight_record_rank<digits>.json and summary.json pass.
  std::ofstream(tmp.path / kRunManifest)
      << R"({"files": ["rank.json", "rank-1.json", "rank1x.json", "rank1.json.bak", "xrank1.json", "flight_record_rank.json",
                        "flight_record_rank12.json", "summary.json", "summary.json.tmp", "rank07.json", 7]})";
  CHECK(manifest_files(tmp.path) == std::vector<std::string>{"flight_record_rank12.json", "summary.json", "rank07.json"});
  std::ofstream(tmp.path / kRunManifest) << R"({"files": ["rankings.xlsx", "../x", "rank_backup", "rank9.json"]})";
  CHECK(claim_run_directory(tmp.path, "04_fsdp", 1) == std::vector<std::string>{"rank9.json"});
  CHECK(fs::exists(tmp.path / "rankings.xlsx"));
  CHECK(fs::is_directory(tmp.path / "rank_backup"));
  // A broken manifest lists nothing.
  std::ofstream(tmp.path / kRunManifest) << "{not json";
  CHECK(manifest_files(tmp.path).empty());
}

TEST_CASE("run directory: run names are one plain directory name", "[run]") {
  for (const char* ok : {"04_fsdp", "my run", "..x", ".hidden", "a.b"}) CHECK(run_name_problem(ok).empty());
  for (const char* bad : {"", ".", "..", "a/b", "/", "../up", "x/"}) CHECK_FALSE(run_name_problem(bad).empty());
}

TEST_CASE("run directory: a manifest that cannot be written is an error naming the path", "[run]") {
  TempDir tmp("shardlab_test_run_dir");
  fs::create_directories(tmp.path / kRunManifest);  // a directory where the manifest goes
  CHECK_THROWS_WITH(claim_run_directory(tmp.path, "04_fsdp", 2), Catch::Contains(kRunManifest));
}
