// bench_viewer_load: how fast the viewer loads a million-event trace, and what it keeps per event.
//
//   build/tests/bench_viewer_load [events]      (default 1,000,000)
//   build/tests/bench_viewer_load --gb 1        a 1 GB directory of 8 ranks
//
// Writes runs of synthetic Kineto-style traces to /tmp (tests/viewer/synthetic_trace.h's, one file per
// rank under PyTorch's default names) and times load_traces on each: 8 ranks x events/8 (a
// typical multi-rank run: files load in parallel, one thread each up to the hardware's threads)
// and 1 rank x events (one file, cut into chunks that parse on every core); with --gb, 8 ranks
// of that many gigabytes in all, about 175 bytes an event. Events are counted as written (M metadata
// excluded). Wall time gives the figures (MB/s, events/s); the CPU time of all threads beside it,
// and the load average, tell what other work on a shared machine did to them.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "../viewer/synthetic_trace.h"
#include "trace_model.h"

namespace fs = std::filesystem;
using namespace shardlab::viewer;
using synthetic::footprint;
using synthetic::write_rank;

namespace {

// CPU time of the process so far, every thread's (the machine may be shared: wall time alone
// depends on what else runs).
double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

void bench(const char* label, int ranks, size_t events) {
  const fs::path dir = fs::temp_directory_path() / ("shardlab_bench_viewer_" + std::to_string(ranks));
  fs::remove_all(dir);
  fs::create_directories(dir);
  size_t written = 0, bytes = 0;
  for (int r = 0; r < ranks; ++r) {
    const fs::path p = dir / synthetic::kineto_file_name(r);
    written += write_rank(p, r, events / static_cast<size_t>(ranks));
    bytes += static_cast<size_t>(fs::file_size(p));
  }
  double best = 1e9, best_cpu = 0;
  TraceModel model;
  for (int rep = 0; rep < 3; ++rep) {  // the best of 3: the page cache is warm after the first
    const double c0 = cpu_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    model = load_traces({dir.string()});
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (wall < best) best = wall, best_cpu = cpu_seconds() - c0;
  }
  size_t flows = 0;
  for (const Rank& r : model.ranks) flows += r.flows.size();
  const double mb = static_cast<double>(bytes) / 1e6;
  std::printf("%-16s %8.1f MB %9zu events %8zu slices %8zu flows  %6.3f s (cpu %6.3f s)  %6.1f MB/s  %5.2f M events/s"
              "  %5.1f B/event\n",
              label, mb, written, model.events, flows, best, best_cpu, mb / best,
              static_cast<double>(written) / best / 1e6, static_cast<double>(footprint(model)) / static_cast<double>(written));
  fs::remove_all(dir);
}

}  // namespace

int main(int argc, char** argv) {
  const bool gigabytes = argc > 2 && std::string(argv[1]) == "--gb";
  const size_t events = gigabytes ? static_cast<size_t>(std::stod(argv[2]) * 1e9 / 175)
                        : argc > 1 ? std::stoul(argv[1])
                                   : 1000000;
  double load[1] = {0};
  getloadavg(load, 1);
  std::printf("load_traces, best of 3, %u hardware threads, load average %.2f\n", std::thread::hardware_concurrency(),
              load[0]);
  bench("8 ranks", 8, events);
  if (!gigabytes) bench("1 rank", 1, events);
}
