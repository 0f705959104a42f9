#include "run/harness.h"

#include <cstdio>

#include "comm/watchdog.h"
#include "trace/file_output.h"

namespace shardlab {

namespace fs = std::filesystem;
using nlohmann::json;

void print_error(const std::string& line) {
  const std::string text = line + "\n";
  std::fwrite(text.data(), 1, text.size(), stderr);
  std::fflush(stderr);
}

std::vector<std::string> gather_strings(const std::string& mine) {
  int size = 1, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int len = static_cast<int>(mine.size());
  std::vector<int> lens(size), offsets(size);
  MPI_Request request;
  MPI_Igather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, MPI_COMM_WORLD, &request);
  Watchdog::get().wait(request, "a gather to rank 0 (the harness: checks or the run summary)");
  std::string all;
  if (rank == 0) {
    int total = 0;
    for (int r = 0; r < size; ++r) offsets[r] = total, total += lens[r];
    all.resize(total);
  }
  MPI_Igatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), offsets.data(), MPI_CHAR, 0, MPI_COMM_WORLD,
               &request);
  Watchdog::get().wait(request, "a gather to rank 0 (the harness: checks or the run summary)");
  std::vector<std::string> out;
  if (rank == 0)
    for (int r = 0; r < size; ++r) out.push_back(all.substr(offsets[r], lens[r]));
  return out;
}

void broadcast(int root, void* data, int count, MPI_Datatype type, const std::string& what, bool timed) {
  MPI_Request request;
  MPI_Ibcast(data, count, type, root, MPI_COMM_WORLD, &request);
  Watchdog::get().wait(request, what, timed);
}

std::string first_problem(const std::string& mine) {
  const std::vector<std::string> all = gather_strings(mine);
  std::string first;
  for (const auto& p : all)
    if (first.empty()) first = p;
  int len = static_cast<int>(first.size());
  broadcast(0, &len, 1, MPI_INT, "the configuration checks' verdict");
  first.resize(static_cast<size_t>(len));
  broadcast(0, first.data(), len, MPI_CHAR, "the configuration checks' verdict");
  return first;
}

std::string run_dir(const CommonFlags& flags, const ChapterInfo& info) {
  return (fs::path(flags.trace_dir) / (flags.run_name.empty() ? info.id : flags.run_name)).string();
}

void write_json(const fs::path& path, const json& j) { write_whole_file(path, j.dump(2) + "\n"); }

}  // namespace shardlab
