// window.h: the viewer's window: GLFW + Dear ImGui + OpenGL3, the open bar (a path field, Open
// and Compare), drag and drop, background loading with progress and errors shown in the window,
// and the timeline with its panels. main.cpp drives it interactively (or headless: screenshot,
// input replay), tests/benchmarks/bench_viewer_frame.cpp times its frames.
//
// A frame is split in parts so a replay or a benchmark can step in between:
//   poll_events()  GLFW delivers input to its callbacks (ImGui's backend, the drop callback)
//   begin_frame()  a finished load is shown; the backends start the frame (GLFW's backend
//                  polls the pointer here)
//   build()        ImGui::NewFrame, the whole UI, ImGui::Render (CPU only)
//   render()       OpenGL draws the frame into the back buffer
//   present()      swap buffers
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "app.h"
#include "loader.h"

struct GLFWwindow;

namespace shardlab::viewer::app {

struct ViewerOptions {
  int width = 1600, height = 900;
  // No vsync, and the display's pointer is ignored: for screenshots, replays and benchmarks,
  // whatever the pointer does on the display stays out of the picture.
  bool headless = false;
};

// Splits the path field's text: the whole text when it names something on disk, else words
// separated by spaces ("quoted" or 'quoted' words keep theirs); a leading file:// is dropped and
// ~/ is the home directory.
std::vector<std::string> split_paths(const std::string& text);

// What the window says of a run that did not end normally: "" for one that did (incomplete_text)
// or whose every file was read to its end (stopped_text); else why, and how many rank files say so.
std::string incomplete_text(const TraceModel& model);
std::string stopped_text(const TraceModel& model);

class Viewer {
 public:
  Viewer() = default;
  Viewer(const Viewer&) = delete;
  Viewer& operator=(const Viewer&) = delete;
  ~Viewer();

  // Creates the window and ImGui; false with a message on stderr when there is no display.
  bool open(const ViewerOptions& options);

  AppState app;
  // Applied to the first run shown (the command line's --range: microseconds since the run's first
  // event), then forgotten.
  std::optional<std::pair<double, double>> initial_range;
  // Every load's caps (the command line's --max-name-bytes, --max-file-bytes, --max-events).
  LoadLimits limits;

  // Starts loading in the background (the path field, drops and the command line come here).
  // as_compare: `paths` become the compared run, below the current one.
  void open_paths(std::vector<std::string> paths, bool as_compare = false, std::vector<std::string> compare = {});
  // The GLFW drop callback's work: a run directory or files open as the run; two run
  // directories open as a run and the run compared with it.
  void on_drop(int count, const char** paths);
  // Shows loaded runs now (the headless screenshot and the benchmark load before any frame).
  // Headless, the files they left unopened are listed on stderr as well as in the window.
  void show(std::vector<Run> runs);
  bool loading() const { return loader_.busy(); }
  const std::string& error() const { return error_; }
  void set_error(std::string e) { error_ = std::move(e); }
  // Shows these paths in the path field (quoted where they hold spaces, as split_paths reads them).
  void set_path_field(const std::vector<std::string>& paths);

  void poll_events();
  void begin_frame();
  void build();
  void render();
  void present();
  bool should_close() const;
  int frames() const { return frames_; }  // frames built so far
  GLFWwindow* window() const { return window_; }
  const std::string& renderer() const { return renderer_; }  // GL_RENDERER, e.g. "llvmpipe (LLVM 15.0.6, 256 bits)"

  // The back buffer as an RGB PNG (after render(), before present()).
  bool write_png(const std::string& path) const;
  // What the window shows, as JSON: the view, the selection (and, for a collective, its kernel
  // on every rank: "collective_peers"), the range with the Range panel's rows, the runs and files
  // loaded, the error text, and where things are on screen.
  nlohmann::json state() const;

 private:
  void ui();
  void open_bar();
  void error_banner();
  void empty_window();
  void loading_window();
  void apply(LoadResult result);

  GLFWwindow* window_ = nullptr;
  bool headless_ = false;
  bool imgui_ready_ = false;
  Loader loader_;
  std::string error_;
  char path_[2048] = "";
  std::pair<ImVec2, ImVec2> path_rect_{}, open_rect_{}, compare_rect_{}, cancel_rect_{};  // for the state dump
  float panel_height_ = 262;  // the Compare table (eleven rows) without a scrollbar
  int frames_ = 0;
  std::vector<std::string> reference_traces_;  // ./traces/* run directories, offered when nothing is open
  std::string renderer_;
};

}  // namespace shardlab::viewer::app
