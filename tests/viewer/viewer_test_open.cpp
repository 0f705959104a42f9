// Opening what users have: a directory opens every trace file in it, whatever the names; ranks
// come from distributedInfo.rank, else a number in the file name, else name order; a file that
// does not open (not a trace, broken, a rank already taken) is reported and the rest open.
#include <catch2/catch.hpp>

#include "../unit/test_files.h"
#include "viewer_files.h"

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "trace_model.h"

using namespace shardlab::viewer;
namespace fs = std::filesystem;

namespace {

// A one-kernel trace whose kernel is named after the file, so a test can tell which file became
// which rank; with distributedInfo.rank when rank >= 0.
std::string trace(const std::string& kernel, int rank = -1) {
  std::string head = "{";
  if (rank >= 0) {
    head += "\"distributedInfo\": {\"rank\": ";
    head += std::to_string(rank);
    head += ", \"world_size\": 4}, ";
  }
  return head + "\"traceEvents\": [{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"" + kernel +
         "\", \"pid\": 0, \"tid\": 7, \"ts\": 1700000000000000.0, \"dur\": 2.0}]}";
}

// rank -> the kernel name its file holds.
std::map<int, std::string> kernels_by_rank(const TraceModel& m) {
  std::map<int, std::string> out;
  for (const Rank& r : m.ranks) out[r.rank] = m.names.at(r.lanes.at(0).slices.at(0).name);
  return out;
}

std::string why_not_opened(const TraceModel& m, const std::string& file_name) {
  for (const NotOpened& n : m.not_opened)
    if (fs::path(n.file).filename() == file_name) return n.why;
  return "";
}

}  // namespace

TEST_CASE("open: rank files named rank-0.json.gz, rank-1.json.gz ... open as one rank each, ranked by name",
          "[viewer]") {
  TempDir tmp("shardlab_test_open");
  for (int r : {0, 1, 2, 10}) {
    std::string name = "rank-";
    name += std::to_string(r);
    name += ".json.gz";
    write_gz(tmp.path / name, trace(name));
  }
  const TraceModel m = load_traces({tmp.path.string()});
  REQUIRE(m.ranks.size() == 4);
  CHECK(m.not_opened.empty());
  const auto by_rank = kernels_by_rank(m);
  CHECK(by_rank.at(0) == "rank-0.json.gz");
  CHECK(by_rank.at(2) == "rank-2.json.gz");
  CHECK(by_rank.at(10) == "rank-10.json.gz");
  for (const Rank& r : m.ranks) CHECK(r.rank_from == RankSource::file_name);
}

TEST_CASE("open: Kineto's default names open, ranked by distributedInfo, and summary.json is reported as not a trace",
          "[viewer]") {
  TempDir tmp("shardlab_test_open");
  // <hostname>_<pid>.<ms>.pt.trace.json(.gz): numbers that are not ranks; distributedInfo says.
  write_gz(tmp.path / "node7_4711.1700000000123.pt.trace.json.gz", trace("b", 1));
  write_text(tmp.path / "node7_4710.1700000000456.pt.trace.json", trace("a", 0));
  write_text(tmp.path / "summary.json", "{\"chapter\": \"x\", \"ranks\": []}");
  write_text(tmp.path / "notes.txt", "not a trace, and not a .json: not even tried");
  const TraceModel m = load_traces({tmp.path.string()});
  REQUIRE(m.ranks.size() == 2);
  CHECK(kernels_by_rank(m) == std::map<int, std::string>{{0, "a"}, {1, "b"}});
  for (const Rank& r : m.ranks) CHECK(r.rank_from == RankSource::distributed_info);
  REQUIRE(m.not_opened.size() == 1);
  CHECK(fs::path(m.not_opened[0].file).filename() == "summary.json");
  CHECK_THAT(m.not_opened[0].why, Catch::Contains("not a trace file"));
}

TEST_CASE("open: files with no rank in them or their names take the free ranks in name order", "[viewer]") {
  TempDir tmp("shardlab_test_open");
  write_text(tmp.path / "gamma.json", trace("gamma"));
  write_text(tmp.path / "alpha.json", trace("alpha"));
  write_text(tmp.path / "host_12.1700000000999.pt.trace.json", trace("two numbers"));
  write_text(tmp.path / "worker1.json", trace("worker1"));  // one number: rank 1
  const TraceModel m = load_traces({tmp.path.string()});
  REQUIRE(m.ranks.size() == 4);
  // Name order: alpha, gamma, host_12... (rank 1 is worker1's).
  CHECK(kernels_by_rank(m) ==
        std::map<int, std::string>{{0, "alpha"}, {1, "worker1"}, {2, "gamma"}, {3, "two numbers"}});
  CHECK(m.ranks[1].rank_from == RankSource::file_name);
  CHECK(m.ranks[0].rank_from == RankSource::file_order);
  CHECK(m.ranks[3].rank_from == RankSource::file_order);

  // Files named directly: the same rules, in the order given.
  const TraceModel given = load_traces({(tmp.path / "gamma.json").string(), (tmp.path / "alpha.json").string()});
  CHECK(kernels_by_rank(given) == std::map<int, std::string>{{0, "gamma"}, {1, "alpha"}});
}

TEST_CASE("open: two files claiming one rank, a broken file and a missing path are each reported and the rest opens",
          "[viewer]") {
  TempDir tmp("shardlab_test_open");
  write_text(tmp.path / "a.json", trace("a", 0));
  write_text(tmp.path / "b.json", trace("b", 0));  // rank 0 again: not merged, not dropped silently
  write_text(tmp.path / "c.json", trace("c", 1));
  write_text(tmp.path / "d.json", trace("d", 2).substr(0, 60));  // truncated
  const std::string missing = (tmp.path / "missing.json").string();
  const TraceModel m = load_traces({tmp.path.string(), missing});
  CHECK(kernels_by_rank(m) == std::map<int, std::string>{{0, "a"}, {1, "c"}});
  REQUIRE(m.not_opened.size() == 3);
  CHECK_THAT(why_not_opened(m, "b.json"), Catch::Contains("rank 0") && Catch::Contains("distributedInfo") &&
                                              Catch::Contains("a.json"));
  CHECK_THAT(why_not_opened(m, "d.json"), Catch::Contains("truncated"));
  CHECK_THAT(why_not_opened(m, "missing.json"), Catch::Contains("no such file"));

  // When nothing opens, the load fails, naming each file and what is wrong with it.
  CHECK_THROWS_WITH(load_traces({(tmp.path / "d.json").string(), missing}),
                    Catch::Contains("d.json: ") && Catch::Contains("truncated") && Catch::Contains("missing.json: "));
  const TempDir empty("shardlab_test_open");
  CHECK_THROWS_WITH(load_traces({empty.path.string()}), Catch::Contains("no trace files"));
}

// A run's directory with files of an earlier, larger run left in it (a run killed after the
// earlier one, or files copied in): the run's manifest (run/run_directory.h) decides, and what
// it does not list is reported, not merged into the run.
TEST_CASE("open: a run directory opens only the files its .shardlab-run lists, and says which it left out",
          "[viewer]") {
  TempDir tmp("shardlab_test_open");
  for (int r : {0, 1, 2, 3}) {
    std::string name = "rank", kernel = "k";  // built by appending: GCC 12 warns (-Wrestrict) on "rank" + ...
    name += std::to_string(r);
    name += ".json";
    kernel += std::to_string(r);
    write_text(tmp.path / name, trace(kernel, r));
  }
  write_text(tmp.path / ".shardlab-run",
             R"({"shardlab_run": 1, "chapter": "04_fsdp", "world_size": 3, "files": ["rank0.json", "rank1.json", "rank2.json", "summary.json"]})");
  const TraceModel m = load_traces({tmp.path.string()});
  CHECK(m.ranks.size() == 3);
  CHECK(kernels_by_rank(m) == std::map<int, std::string>{{0, "k0"}, {1, "k1"}, {2, "k2"}});
  CHECK_THAT(why_not_opened(m, "rank3.json"), Catch::Contains("not this run's file"));
  // Without a manifest (traces from elsewhere, or older runs) every trace file opens, as before.
  fs::remove(tmp.path / ".shardlab-run");
  CHECK(load_traces({tmp.path.string()}).ranks.size() == 4);
}
