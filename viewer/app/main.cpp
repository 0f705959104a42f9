// shardlab-view: every rank's CPU thread and streams on one timeline; two runs side by side.
//
//   shardlab-view [paths...] [--screenshot out.png] [--size WxH] [--range T0:T1] [--compare PATH]
//
// Paths are a run directory (every rank<R>.json in it) or trace files. --range is the initial
// window in microseconds. --screenshot renders a few frames without input, writes a PNG and
// exits: what the tests and the README use (under xvfb-run when there is no display).
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <GLFW/glfw3.h>
#include <backends/imgui_impl_glfw.h>
#include <backends/imgui_impl_opengl3.h>
#include <imgui.h>
// Debian's libstb carries the implementation: the header alone, no STB_IMAGE_WRITE_IMPLEMENTATION.
#include <stb_image_write.h>

#include "app.h"
#include "panels.h"
#include "timeline.h"

namespace {

using namespace shardlab::viewer;
using namespace shardlab::viewer::app;

struct Options {
  std::vector<std::string> paths;
  std::string compare, screenshot;
  int width = 1600, height = 900;
  std::optional<std::pair<double, double>> range;
};

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr,
               "shardlab-view: %s\nusage: shardlab-view [paths...] [--screenshot out.png] [--size WxH] "
               "[--range T0:T1 (us)] [--compare PATH]\n",
               message.c_str());
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) {
      o.paths.push_back(arg);
      continue;
    }
    if (arg != "--screenshot" && arg != "--size" && arg != "--range" && arg != "--compare")
      usage_error("unknown flag " + arg + "; allowed flags: --screenshot, --size, --range, --compare");
    if (i + 1 >= argc) usage_error(arg + ": missing value");
    const std::string value = argv[++i];
    if (arg == "--screenshot") {
      o.screenshot = value;
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
  if (!o.screenshot.empty() && o.paths.empty()) usage_error("--screenshot needs a run directory or trace files");
  return o;
}

std::string label_of(const std::vector<std::string>& paths) {
  std::string label;
  for (const std::string& p : paths) label += (label.empty() ? "" : " ") + p;
  return label;
}

std::vector<Run> load_runs(const Options& o, const LoadProgress& progress) {
  std::vector<Run> runs;
  runs.push_back(make_run(label_of(o.paths), load_traces(o.paths, progress), 0));
  if (!o.compare.empty()) runs.push_back(make_run(o.compare, load_traces({o.compare}, progress), 1));
  return runs;
}

// Loads off the UI thread so a big trace shows a progress bar instead of a frozen window.
struct Loader {
  std::thread thread;
  std::atomic<size_t> done{0}, total{0};
  std::atomic<bool> finished{false}, cancel{false};
  std::vector<Run> runs;  // written by the thread before `finished`
  std::string error;

  void start(const Options& o) {
    thread = std::thread([this, o] {
      try {
        runs = load_runs(o, [this](size_t d, size_t t) {
          done = d;
          total = t;
          return !cancel;
        });
      } catch (const std::exception& e) {
        error = e.what();
      }
      finished = true;
    });
  }
  ~Loader() {
    cancel = true;
    if (thread.joinable()) thread.join();
  }
};

void show(AppState& app, std::vector<Run> runs, const Options& o) {
  app.runs = std::move(runs);
  app.update_search();
  app.align_runs();
  if (o.range) app.view_t0 = o.range->first, app.view_t1 = o.range->second;
  else app.fit_all();
  app.panel_tab = app.runs.size() > 1 ? tab_compare : tab_steps;
}

// The whole window: toolbar, timeline, a splitter, the panels.
void frame(AppState& app, const Loader& loader, const std::string& error, bool screenshot) {
  const ImGuiIO& io = ImGui::GetIO();
  ImGui::SetNextWindowPos({0, 0});
  ImGui::SetNextWindowSize(io.DisplaySize);
  ImGui::Begin("shardlab-view", nullptr, ImGuiWindowFlags_NoDecoration | ImGuiWindowFlags_NoMove |
                                             ImGuiWindowFlags_NoSavedSettings | ImGuiWindowFlags_NoBringToFrontOnFocus);
  if (!error.empty()) {
    ImGui::TextColored({1, 0.45f, 0.4f, 1}, "Could not load the traces:");
    ImGui::TextWrapped("%s", error.c_str());
  } else if (loader.thread.joinable() && !loader.finished) {
    const size_t total = loader.total;
    ImGui::SetCursorPos({io.DisplaySize.x * 0.3f, io.DisplaySize.y * 0.45f});
    ImGui::Text("Loading %s", format_bytes(static_cast<double>(total)).c_str());
    ImGui::SetCursorPosX(io.DisplaySize.x * 0.3f);
    ImGui::ProgressBar(total ? static_cast<float>(loader.done) / static_cast<float>(total) : 0.f,
                       {io.DisplaySize.x * 0.4f, 0});
  } else if (app.runs.empty()) {
    ImGui::TextDisabled("No trace loaded: start shardlab-view with a run directory, e.g. shardlab-view traces/03_bucketed_ddp");
  } else {
    toolbar(app);
    ImGui::SameLine(0, 24);
    ImGui::TextDisabled("%zu ranks, %zu events", app.runs[0].model.ranks.size(), app.runs[0].model.events);
    // Frame time, interactive only: a screenshot's first frames measure start-up, not drawing.
    if (!screenshot) {
      ImGui::SameLine();
      ImGui::TextDisabled("  %.1f ms/frame", 1000.0 / static_cast<double>(io.Framerate));
    }
    // The panels keep their height when the window resizes; the splitter between moves it.
    static float panel_height = 230;
    const float avail = ImGui::GetContentRegionAvail().y;
    panel_height = std::clamp(panel_height, 80.f, std::max(80.f, avail - 150));
    timeline(app, avail - panel_height - 6);
    ImGui::InvisibleButton("splitter", {-1, 6});
    if (ImGui::IsItemActive()) panel_height -= io.MouseDelta.y;
    if (ImGui::IsItemHovered() || ImGui::IsItemActive()) ImGui::SetMouseCursor(ImGuiMouseCursor_ResizeNS);
    ImGui::BeginChild("panels");
    panels(app);
    ImGui::EndChild();
  }
  ImGui::End();
}

bool write_png(const std::string& path, int width, int height) {
  std::vector<unsigned char> pixels(static_cast<size_t>(width) * static_cast<size_t>(height) * 3);
  glPixelStorei(GL_PACK_ALIGNMENT, 1);
  glReadBuffer(GL_BACK);
  glReadPixels(0, 0, width, height, GL_RGB, GL_UNSIGNED_BYTE, pixels.data());
  stbi_flip_vertically_on_write(1);  // OpenGL's rows run bottom-up
  return stbi_write_png(path.c_str(), width, height, 3, pixels.data(), width * 3) != 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Options opt = parse(argc, argv);
  const bool screenshot = !opt.screenshot.empty();
  AppState app;
  Loader loader;
  std::string error;
  // A screenshot loads before any window exists: a bad file is a message and exit 1, display or not.
  if (screenshot) {
    try {
      show(app, load_runs(opt, {}), opt);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "shardlab-view: %s\n", e.what());
      return 1;
    }
  }

  glfwSetErrorCallback([](int code, const char* what) { std::fprintf(stderr, "shardlab-view: GLFW error %d: %s\n", code, what); });
  if (!glfwInit()) {
    std::fprintf(stderr, "shardlab-view: cannot open a window (no display? try xvfb-run)\n");
    return 1;
  }
  // OpenGL 3.0 is what Mesa's software renderer (Xvfb) offers everywhere; else take any context.
  glfwWindowHint(GLFW_CONTEXT_VERSION_MAJOR, 3);
  glfwWindowHint(GLFW_CONTEXT_VERSION_MINOR, 0);
  const std::string title = "shardlab-view " + label_of(opt.paths);
  GLFWwindow* window = glfwCreateWindow(opt.width, opt.height, title.c_str(), nullptr, nullptr);
  if (!window) {
    glfwDefaultWindowHints();
    window = glfwCreateWindow(opt.width, opt.height, title.c_str(), nullptr, nullptr);
  }
  if (!window) {
    std::fprintf(stderr, "shardlab-view: cannot create an OpenGL window\n");
    glfwTerminate();
    return 1;
  }
  glfwMakeContextCurrent(window);
  glfwSwapInterval(screenshot ? 0 : 1);

  IMGUI_CHECKVERSION();
  ImGui::CreateContext();
  ImGuiIO& io = ImGui::GetIO();
  io.IniFilename = nullptr;  // no imgui.ini dropped into whatever directory the viewer ran in
  ImGui::StyleColorsDark();
  ImGui::GetStyle().FrameRounding = 3;
  const char* font = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";
  if (std::filesystem::exists(font)) io.Fonts->AddFontFromFileTTF(font, 15);
  ImGui_ImplGlfw_InitForOpenGL(window, true);
  ImGui_ImplOpenGL3_Init("#version 130");

  if (!screenshot && !opt.paths.empty()) loader.start(opt);
  int exit_code = 0;
  for (int n = 0; !glfwWindowShouldClose(window); ++n) {
    glfwPollEvents();
    ImGui_ImplOpenGL3_NewFrame();
    ImGui_ImplGlfw_NewFrame();
    if (screenshot) {  // no input: whatever the pointer does on the display stays out of the picture
      io.MousePos = {-FLT_MAX, -FLT_MAX};
      std::fill(std::begin(io.MouseDown), std::end(io.MouseDown), false);
    }
    if (loader.finished && loader.thread.joinable()) {
      loader.thread.join();
      if (loader.error.empty()) show(app, std::move(loader.runs), opt);
      else error = loader.error;
    }
    const auto t0 = std::chrono::steady_clock::now();
    ImGui::NewFrame();
    frame(app, loader, error, screenshot);
    ImGui::Render();
    const std::chrono::duration<double, std::milli> ui_ms = std::chrono::steady_clock::now() - t0;
    int w = 0, h = 0;
    glfwGetFramebufferSize(window, &w, &h);
    glViewport(0, 0, w, h);
    glClearColor(0.1f, 0.1f, 0.12f, 1);
    glClear(GL_COLOR_BUFFER_BIT);
    ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
    // A few frames first: ImGui sizes tables and windows from the frames before.
    if (screenshot && n == 4) {
      if (write_png(opt.screenshot, w, h)) {
        // The UI's own cost per frame (layout and draw lists; not the GL rendering, which under
        // Xvfb is Mesa's software rasterizer).
        std::printf("shardlab-view: wrote %s (%dx%d); UI frame %.2f ms\n", opt.screenshot.c_str(), w, h, ui_ms.count());
      } else {
        std::fprintf(stderr, "shardlab-view: cannot write %s\n", opt.screenshot.c_str());
        exit_code = 1;
      }
      break;
    }
    glfwSwapBuffers(window);
  }

  ImGui_ImplOpenGL3_Shutdown();
  ImGui_ImplGlfw_Shutdown();
  ImGui::DestroyContext();
  glfwDestroyWindow(window);
  glfwTerminate();
  return exit_code;
}
