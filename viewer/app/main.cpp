// shardlab-view: every rank's CPU thread and streams on one timeline; two runs side by side.
//
//   shardlab-view [paths...] [--compare PATH] [--range T0:T1] [--size WxH]
//                 [--screenshot out.png] [--state-out state.json] [--replay script.txt]
//                 [--streams-only] [--check] [--max-name-bytes N] [--max-file-bytes N] [--max-events N]
//   shardlab-view --help
//
// Paths are a run directory (every *.json and *.json.gz trace file in it) or trace files; without
// any, the window opens empty and says how to open a run (drop it, or type its path). --range is
// the initial window in microseconds since the run's first event, as the ruler reads.
// Headless (under xvfb-run when there is no display):
//   --screenshot / --state-out alone render a few frames without input, write the PNG and/or the
//     state JSON, and exit; a trace that does not load is a message and exit code 1.
//   --replay SCRIPT drives the real input path with a script of synthetic events (replay.h),
//     loading as the interactive window does (errors shown in the window, not an exit), then
//     writes --state-out / --screenshot once the script has ended: what the input tests use.
//   --check loads the paths without a window and prints what opened, what was read in part and
//     what did not open: exit 0 when every trace file opened, 1 otherwise.
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "replay.h"
#include "window.h"

namespace {

using namespace shardlab::viewer;
using namespace shardlab::viewer::app;

struct Options {
  std::vector<std::string> paths;
  std::string compare, screenshot, state_out, replay;
  int width = 1600, height = 900;
  std::optional<std::pair<double, double>> range;
  bool check = false, streams_only = false;
  LoadLimits limits;
};

constexpr const char* kUsage =
    "usage: shardlab-view [paths...] [--compare PATH] [--range T0:T1] [--size WxH]\n"
    "                     [--screenshot out.png] [--state-out state.json] [--replay script.txt]\n"
    "                     [--streams-only] [--check] [--max-name-bytes N] [--max-file-bytes N]\n"
    "                     [--max-events N]\n";

constexpr const char* kHelp =
    "\n"
    "Opens traces (shardlab's, or PyTorch profiler / Kineto ones) as one timeline: every rank's CPU\n"
    "threads, GPU streams and memory, with per-step metrics.\n"
    "\n"
    "paths               a run directory (every *.json and *.json.gz trace file in it, Kineto's\n"
    "                    <worker>.<time>.pt.trace.json(.gz) included) or trace files. A file's rank\n"
    "                    is its distributedInfo.rank, else a number in its name, else by name order.\n"
    "                    Files that do not open (not a trace, broken, a rank taken twice) are\n"
    "                    listed in the window and the rest open.\n"
    "--compare PATH      a second run (a directory or a trace file), shown below the first and\n"
    "                    aligned at a step; the Compare tab puts the two runs' metrics side by side\n"
    "--range T0:T1       the window to show first, in microseconds since the run's first event\n"
    "--size WxH          the window's size in pixels (default 1600x900, at least 320x200)\n"
    "--screenshot FILE   render a few frames, write them as a PNG and exit (under xvfb-run\n"
    "                    without a display); files not opened are listed on stderr\n"
    "--state-out FILE    write what the view shows as JSON (with --screenshot, or on its own)\n"
    "--replay FILE       drive the window with a script of input events (viewer/app/replay.h),\n"
    "                    then write --state-out and --screenshot\n"
    "--streams-only      show each rank's GPU streams only, every rank open (the toolbar's\n"
    "                    \"streams only\"): many ranks one under another, a pipeline's stages\n"
    "--check             load the paths without a window, print each file's rank, events and\n"
    "                    whether it was read whole, and what did not open; exit 1 if a trace\n"
    "                    file did not open\n"
    "\n"
    "Caps on what a load holds (a file that reaches one opens with what was read before it, and\n"
    "says so), so that no file takes the machine's memory:\n"
    "--max-name-bytes N  event names longer are kept cut, with their length (default 4096)\n"
    "--max-file-bytes N  JSON bytes read per file, a .gz's decompressed; a K, M or G suffix\n"
    "                    counts 1024s (default 8G)\n"
    "--max-events N      events read per file (default 20000000; about 200 bytes each in memory)\n"
    "-h, --help          print this and exit\n";

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr, "shardlab-view: %s\n%s", message.c_str(), kUsage);
  std::exit(2);
}

// A whole number flag from lo to hi; `suffixes`: a K, M or G after it multiplies by 1024s.
uint64_t count_flag(const std::string& flag, const std::string& value, uint64_t lo, uint64_t hi, bool suffixes) {
  uint64_t n = 0;
  const char* end = value.data() + value.size();
  auto [p, ec] = std::from_chars(value.data(), end, n);
  int shift = 0;
  if (suffixes && p + 1 == end) shift = *p == 'K' ? 10 : *p == 'M' ? 20 : *p == 'G' ? 30 : -1;
  const bool ok = ec == std::errc() && p != value.data() && (p == end || shift > 0) &&
                  n <= (hi >> shift) && (n << shift) >= lo;
  if (!ok)
    usage_error(flag + ": got '" + value + "'; expected a whole number from " + std::to_string(lo) + " to " +
                std::to_string(hi) + (suffixes ? " (or with a K, M or G suffix)" : ""));
  return n << shift;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::printf("%s%s", kUsage, kHelp);
      std::exit(0);
    }
    if (arg.rfind("--", 0) != 0) {
      o.paths.push_back(arg);
      continue;
    }
    if (arg == "--check") {
      o.check = true;
      continue;
    }
    if (arg == "--streams-only") {
      o.streams_only = true;
      continue;
    }
    if (arg != "--screenshot" && arg != "--size" && arg != "--range" && arg != "--compare" && arg != "--state-out" &&
        arg != "--replay" && arg != "--max-name-bytes" && arg != "--max-file-bytes" && arg != "--max-events")
      usage_error("unknown flag " + arg +
                  "; allowed flags: --compare, --range, --size, --screenshot, --state-out, --replay, --streams-only, --check, "
                  "--max-name-bytes, --max-file-bytes, --max-events, --help");
    if (i + 1 >= argc) usage_error(arg + ": missing value");
    const std::string value = argv[++i];
    if (arg == "--max-name-bytes") {
      o.limits.max_name_bytes = count_flag(arg, value, 16, 1 << 20, false);
    } else if (arg == "--max-file-bytes") {
      o.limits.max_file_bytes = count_flag(arg, value, 1024, uint64_t{1} << 40, true);
    } else if (arg == "--max-events") {
      o.limits.max_events = count_flag(arg, value, 1, 1'000'000'000, false);
    } else if (arg == "--screenshot") {
      o.screenshot = value;
    } else if (arg == "--state-out") {
      o.state_out = value;
    } else if (arg == "--replay") {
      o.replay = value;
    } else if (arg == "--compare") {
      o.compare = value;
    } else if (arg == "--size") {
      char x = 0;
      if (std::sscanf(value.c_str(), "%d%c%d", &o.width, &x, &o.height) != 3 || x != 'x' || o.width < 320 ||
          o.height < 200)
        usage_error("--size: got '" + value + "'; expected WxH, at least 320x200");
    } else {
      double t0 = 0, t1 = 0;
      if (std::sscanf(value.c_str(), "%lf:%lf", &t0, &t1) != 2 || !(t1 > t0))
        usage_error("--range: got '" + value + "'; expected T0:T1 in microseconds with T0 < T1");
      o.range = std::pair{t0, t1};
    }
  }
  if (!o.compare.empty() && o.paths.empty()) usage_error("--compare needs a run to compare with");
  if (o.check && o.paths.empty()) usage_error("--check needs a run directory or trace files");
  if (o.check && (!o.screenshot.empty() || !o.state_out.empty() || !o.replay.empty() || !o.compare.empty()))
    usage_error("--check loads without a window: it takes no --screenshot, --state-out, --replay or --compare");
  return o;
}

// --check: what a load of the paths makes of each file, on stdout; 0 when every trace file opened.
int check(const Options& o) {
  LoadRequest request{o.paths, {}, false, o.limits};
  LoadResult result = Loader::load_now(request);
  if (!result.error.empty()) {
    std::fprintf(stderr, "shardlab-view: %s\n", result.error.c_str());
    return 1;
  }
  const TraceModel& m = result.runs[0].model;
  std::printf("%zu rank file(s), %zu events\n", m.ranks.size(), m.events);
  for (const Rank& r : m.ranks) {
    size_t events = 0;
    for (const Lane& l : r.lanes) events += l.slices.size();
    std::printf("rank %d: %s: %zu events", r.rank, r.file.c_str(), events);
    if (r.skipped > 0) std::printf(", %zu dropped", r.skipped);
    if (r.names_cut > 0) std::printf(", %zu names cut", r.names_cut);
    std::printf("\n");
    if (!r.incomplete.empty()) std::printf("  marked incomplete: %s\n", r.incomplete.c_str());
    if (!r.stopped.empty()) std::printf("  read in part: %s\n", r.stopped.c_str());
  }
  int status = 0;
  for (const NotOpened& n : m.not_opened) {
    std::printf("%s: %s: %s\n", n.not_a_trace ? "skipped" : "not opened", n.file.c_str(), n.why.c_str());
    if (!n.not_a_trace) status = 1;
  }
  return status;
}

// The headless outputs: the state JSON and the PNG of the frame just rendered.
bool write_outputs(const Viewer& v, const Options& o, double ui_ms) {
  bool ok = true;
  if (!o.state_out.empty()) {
    std::ofstream out(o.state_out);
    out << v.state().dump(1) << "\n";
    if (out) {
      std::printf("shardlab-view: wrote %s\n", o.state_out.c_str());
    } else {
      std::fprintf(stderr, "shardlab-view: cannot write %s\n", o.state_out.c_str());
      ok = false;
    }
  }
  if (!o.screenshot.empty()) {
    if (v.write_png(o.screenshot)) {
      // The UI's own cost per frame (layout and draw lists; not the GL rendering, which under
      // Xvfb is Mesa's software rasterizer: tests/benchmarks/bench_viewer_frame.cpp times both).
      std::printf("shardlab-view: wrote %s; UI frame %.2f ms\n", o.screenshot.c_str(), ui_ms);
    } else {
      std::fprintf(stderr, "shardlab-view: cannot write %s\n", o.screenshot.c_str());
      ok = false;
    }
  }
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  const Options opt = parse(argc, argv);
  if (opt.check) return check(opt);
  const bool replaying = !opt.replay.empty();
  // A screenshot or state dump without a script: a few frames of what the command line opens.
  const bool snapshot = !replaying && (!opt.screenshot.empty() || !opt.state_out.empty());
  std::optional<Replay> replay;
  if (replaying) {
    try {
      replay = Replay::load(opt.replay);
    } catch (const std::exception& e) {
      usage_error(e.what());
    }
  }

  Viewer v;
  v.initial_range = opt.range;
  v.app.streams_only = opt.streams_only;
  v.limits = opt.limits;
  const LoadRequest request{opt.paths, opt.compare.empty() ? std::vector<std::string>{} : std::vector{opt.compare}, false,
                            opt.limits};
  std::optional<LoadResult> loaded;
  // A snapshot loads before any window exists: a bad file is a message and exit 1, display or not.
  if (snapshot && !opt.paths.empty()) {
    loaded = Loader::load_now(request);
    if (!loaded->error.empty()) {
      std::fprintf(stderr, "shardlab-view: %s\n", loaded->error.c_str());
      return 1;
    }
  }
  if (!v.open({opt.width, opt.height, snapshot || replaying})) return 1;
  v.set_path_field(opt.paths);
  if (loaded) v.show(std::move(loaded->runs));
  else if (!opt.paths.empty()) v.open_paths(opt.paths, false, request.compare);

  int exit_code = 0;
  while (!v.should_close()) {
    v.poll_events();
    if (replay) replay->deliver(v);
    v.begin_frame();
    if (replay) replay->override_polled();
    const auto t0 = std::chrono::steady_clock::now();
    v.build();
    const double ui_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    v.render();
    if (replay) {
      bool more = false;
      try {
        more = replay->after_frame(v);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "shardlab-view: %s\n", e.what());
        exit_code = 1;
        break;
      }
      if (!more) {
        if (!write_outputs(v, opt, ui_ms)) exit_code = 1;
        break;
      }
    } else if (snapshot && v.frames() == 5) {  // a few frames first: ImGui sizes tables from the frames before
      if (!write_outputs(v, opt, ui_ms)) exit_code = 1;
      break;
    }
    v.present();
  }
  return exit_code;
}
