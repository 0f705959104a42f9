// bench_viewer_frame: how long shardlab-view takes to draw a frame of a million-event trace, GL
// rendering included, and what the loaded run costs in memory per event.
//
//   xvfb-run -a -s "-screen 0 1920x1080x24" build/tests/bench_viewer_frame [events] [frames] [ranks]
//
// A 1 GB directory of Kineto traces: bench_viewer_frame 5700000 120 8 (about 175 bytes an event).
// Defaults: 1,000,000 events, 120 frames per view, 1 rank (every event in the 4 lanes on screen:
// the hardest case; with 8 ranks most lanes are scrolled out of view). Writes the trace that
// bench_viewer_load writes (tests/viewer/synthetic_trace.h), loads it with load_traces, builds the
// viewer's indices (make_run), then renders frames in a 1600x900 window at full zoom-out and at a
// 1 ms window in the middle. A frame is the UI (ImGui::NewFrame, layout and draw lists,
// ImGui::Render) plus the GL rendering, waited for with glFinish; buffer swaps are timed apart
// (under Xvfb they copy the picture to the X server). Under Xvfb, OpenGL is Mesa's software
// renderer (llvmpipe): the GL part is CPU time too.
#include <GLFW/glfw3.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "app/window.h"
#include "../viewer/synthetic_trace.h"

namespace {

namespace fs = std::filesystem;
using namespace shardlab::viewer;
using namespace shardlab::viewer::app;
using shardlab::viewer::synthetic::footprint;
using shardlab::viewer::synthetic::write_rank;
using Clock = std::chrono::steady_clock;

// Resident and peak resident set size from /proc/self/status, in bytes.
std::pair<size_t, size_t> rss() {
  std::ifstream in("/proc/self/status");
  std::string key;
  size_t now = 0, peak = 0;
  while (in >> key) {
    size_t kb = 0;
    if (key == "VmRSS:" && in >> kb) now = kb * 1024;
    else if (key == "VmHWM:" && in >> kb) peak = kb * 1024;
    in.ignore(1 << 20, '\n');
  }
  return {now, peak};
}

// The viewer's indices on top of the model (per-depth slice lists with prefix sums, the
// correlation map), from container sizes.
size_t index_footprint(const Run& run) {
  size_t bytes = 0;
  for (const auto& lanes : run.depth_index)
    for (const DepthIndex& d : lanes)
      for (const DepthRow& row : d)
        bytes += sizeof row + row.slices.capacity() * sizeof(uint32_t) + row.busy_us.capacity() * sizeof(double);
  for (const auto& lanes : run.operations.of_slice)
    for (const auto& of : lanes) bytes += of.capacity() * sizeof(uint32_t);
  for (const auto& corr : run.by_correlation) {
    bytes += corr.bucket_count() * sizeof(void*);
    for (const auto& [id, refs] : corr)
      bytes += sizeof(void*) + sizeof(id) + sizeof(refs) + refs.capacity() * sizeof(SliceRef);
  }
  return bytes;
}

struct Stats {
  double mean = 0, p50 = 0, p95 = 0, max = 0;
};

Stats stats(std::vector<double> v) {
  Stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  for (double x : v) s.mean += x;
  s.mean /= static_cast<double>(v.size());
  auto at = [&](double q) { return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))]; };
  s.p50 = at(0.5);
  s.p95 = at(0.95);
  s.max = v.back();
  return s;
}

void print(const char* what, const std::vector<double>& ms) {
  const Stats s = stats(ms);
  std::printf("  %-22s mean %7.2f  p50 %7.2f  p95 %7.2f  max %7.2f ms\n", what, s.mean, s.p50, s.p95, s.max);
}

void time_view(Viewer& v, const char* label, double t0, double t1, int frames) {
  std::vector<double> ui, gl, frame, swap;
  std::string png;
  for (int i = -10; i < frames; ++i) {  // 10 frames first: layout settles, GL buffers grow
    v.app.view_t0 = t0, v.app.view_t1 = t1;
    const auto a = Clock::now();
    v.poll_events();
    v.begin_frame();
    v.build();
    const auto b = Clock::now();
    v.render();
    glFinish();
    const auto c = Clock::now();
    if (i == frames - 1) {  // the last frame, to see what was timed (outside the timings)
      const std::string name = std::string("bench_viewer_frame_") + (t1 - t0 > 2000 ? "full" : "1ms") + ".png";
      png = (fs::temp_directory_path() / name).string();
      if (!v.write_png(png)) png = "(not written)";
    }
    v.present();
    const auto d = Clock::now();
    if (i < 0) continue;
    auto ms = [](auto x, auto y) { return std::chrono::duration<double, std::milli>(y - x).count(); };
    ui.push_back(ms(a, b));
    gl.push_back(ms(b, c));
    frame.push_back(ms(a, c));
    swap.push_back(ms(c, d));
  }
  const ImDrawData* dd = ImGui::GetDrawData();
  std::printf("%s: window %s, %d frames, %d vertices and %d indices per frame in %d draw lists; last frame %s\n", label,
              format_time(t1 - t0).c_str(), frames, dd->TotalVtxCount, dd->TotalIdxCount, dd->CmdListsCount, png.c_str());
  print("frame (UI + GL)", frame);
  print("  UI (ImGui, CPU)", ui);
  print("  GL (+ glFinish)", gl);
  print("swap (not in frame)", swap);
}

}  // namespace

int main(int argc, char** argv) {
  const size_t events = argc > 1 ? std::stoul(argv[1]) : 1000000;
  const int frames = argc > 2 ? std::stoi(argv[2]) : 120;
  const int ranks = argc > 3 ? std::stoi(argv[3]) : 1;

  const fs::path dir = fs::temp_directory_path() / ("shardlab_bench_viewer_frame_" + std::to_string(ranks));
  fs::remove_all(dir);
  fs::create_directories(dir);
  size_t written = 0;
  for (int r = 0; r < ranks; ++r)
    written += write_rank(dir / synthetic::kineto_file_name(r), r, events / static_cast<size_t>(ranks));

  const auto [rss0, peak0] = rss();
  const auto t_load = Clock::now();
  TraceModel model = load_traces({dir.string()});
  const double load_s = std::chrono::duration<double>(Clock::now() - t_load).count();
  const size_t model_bytes = footprint(model), slices = model.events;
  std::vector<Run> runs;
  const auto t_index = Clock::now();
  runs.push_back(make_run(dir.string(), std::move(model), 0));
  const double index_s = std::chrono::duration<double>(Clock::now() - t_index).count();
  const auto [rss1, peak1] = rss();
  const size_t index_bytes = index_footprint(runs[0]);
  fs::remove_all(dir);

  std::printf("%zu events written (%zu slices) on %d rank(s), loaded in %.2f s, indexed for the view in %.2f s\n",
              written, slices, ranks, load_s, index_s);
  const double per = static_cast<double>(written);
  std::printf("memory per event: model %.1f B + view indices %.1f B = %.1f B; process RSS growth %.1f B "
              "(%.0f MB), peak RSS growth %.1f B\n",
              static_cast<double>(model_bytes) / per, static_cast<double>(index_bytes) / per,
              static_cast<double>(model_bytes + index_bytes) / per, static_cast<double>(rss1 - rss0) / per,
              static_cast<double>(rss1 - rss0) / 1e6, static_cast<double>(peak1 - peak0) / per);

  Viewer v;
  if (!v.open({1600, 900, true})) return 1;
  v.show(std::move(runs));
  std::printf("renderer: %s, window 1600x900\n", v.renderer().c_str());
  const double full0 = v.app.full_t0(), full1 = v.app.full_t1();
  time_view(v, "full zoom-out", full0 - (full1 - full0) * 0.02, full1 + (full1 - full0) * 0.02, frames);
  const double mid = (full0 + full1) / 2;
  time_view(v, "1 ms window", mid, mid + 1000, frames);
  return 0;
}
