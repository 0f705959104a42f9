// window.cpp: the window, the open bar, loading feedback, and the frame's parts (see window.h).
#include "window.h"

#include <algorithm>
#include <cfloat>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include <GLFW/glfw3.h>
#include <backends/imgui_impl_glfw.h>
#include <backends/imgui_impl_opengl3.h>
#include <imgui.h>
// Debian's libstb carries the implementation: the header alone, no STB_IMAGE_WRITE_IMPLEMENTATION.
#include <stb_image_write.h>

#include "panels.h"
#include "timeline.h"
#include "trace/metrics_json.h"

namespace fs = std::filesystem;

namespace shardlab::viewer::app {
namespace {

const ImVec4 kErrorColor(1, 0.45f, 0.4f, 1);
const ImVec4 kWarningColor(1, 0.8f, 0.3f, 1);

// A run's files that failed to open, one line each (folded when there are many): the rest of
// the run is open below them. (Files that are not traces, summary.json, are listed by the
// toolbar's "skipped" note instead: expected beside rank files, they need no warning.)
void not_opened_lines(const TraceModel& model, bool compared) {
  std::vector<const NotOpened*> files;
  for (const NotOpened& n : model.not_opened)
    if (!n.not_a_trace) files.push_back(&n);
  if (files.empty()) return;
  const char* which = compared ? " (compared run)" : "";
  ImGui::PushStyleColor(ImGuiCol_Text, kWarningColor);
  if (files.size() <= 3) {
    for (const NotOpened* n : files) ImGui::TextWrapped("Not opened%s: %s: %s", which, n->file.c_str(), n->why.c_str());
  } else if (ImGui::TreeNode(compared ? "not opened compared" : "not opened", "%zu files not opened%s", files.size(),
                             which)) {
    for (const NotOpened* n : files) ImGui::TextWrapped("%s: %s", n->file.c_str(), n->why.c_str());
    ImGui::TreePop();
  }
  ImGui::PopStyleColor();
}

// "1 file skipped (not a trace)": the files that are not traces (summary.json), listed when hovered.
void skipped_note(const std::vector<Run>& runs) {
  std::vector<const NotOpened*> skipped;
  for (const Run& run : runs)
    for (const NotOpened& n : run.model.not_opened)
      if (n.not_a_trace) skipped.push_back(&n);
  if (skipped.empty()) return;
  ImGui::TextDisabled("%zu file%s skipped (not a trace)", skipped.size(), skipped.size() == 1 ? "" : "s");
  if (!ImGui::IsItemHovered()) return;
  ImGui::BeginTooltip();
  for (const NotOpened* n : skipped) ImGui::Text("%s: %s", n->file.c_str(), n->why.c_str());
  ImGui::EndTooltip();
}

// "12 events dropped, 1 name cut": what the loader could not keep as the files had it (events
// with unusable fields or nested too deep, names past the load's cap), per file when hovered.
// Nothing when all was kept.
void dropped_note(const std::vector<Run>& runs) {
  size_t dropped = 0, cut = 0;
  for (const Run& run : runs) dropped += run.model.skipped, cut += run.model.names_cut;
  if (dropped == 0 && cut == 0) return;
  ImGui::SameLine();
  ImGui::PushStyleColor(ImGuiCol_Text, kWarningColor);
  if (dropped > 0) ImGui::Text("%zu event%s dropped%s", dropped, dropped == 1 ? "" : "s", cut > 0 ? "," : "");
  if (dropped > 0 && cut > 0) ImGui::SameLine();
  if (cut > 0) ImGui::Text("%zu name%s cut", cut, cut == 1 ? "" : "s");
  ImGui::PopStyleColor();
  if (!ImGui::IsItemHovered()) return;
  ImGui::BeginTooltip();
  for (const Run& run : runs)
    for (const Rank& rank : run.model.ranks)
      if (rank.skipped > 0 || rank.names_cut > 0)
        ImGui::Text("%s: %zu dropped (bad pid/tid, non-finite or negative times, unmatched E, nested deeper than "
                    "%d levels), %zu names cut to %zu bytes (--max-name-bytes)",
                    rank.file.c_str(), rank.skipped, static_cast<int>(kMaxDepth), rank.names_cut,
                    run.model.limits.max_name_bytes);
  ImGui::EndTooltip();
}

bool on_disk(const std::string& p) {
  std::error_code ec;
  return !p.empty() && fs::exists(p, ec);
}

std::string expand_home(std::string p) {
  if (p.rfind("file://", 0) == 0) p.erase(0, 7);
  if (p.rfind("~/", 0) == 0)
    if (const char* home = std::getenv("HOME")) p = home + p.substr(1);
  return p;
}

// ./traces/* directories holding a rank0.json: the reference traces, when the viewer runs from
// the repository (as the README's commands do).
std::vector<std::string> find_reference_traces() {
  std::vector<std::string> found;
  try {
    std::error_code ec;
    for (const fs::directory_entry& e : fs::directory_iterator("traces", ec))
      if (e.is_directory(ec) && (fs::exists(e.path() / "rank0.json", ec) || fs::exists(e.path() / "rank0.json.gz", ec)))
        found.push_back(e.path().string());
  } catch (const fs::filesystem_error&) {  // a directory that changed under us: offer what was seen
  }
  std::sort(found.begin(), found.end());
  return found;
}

}  // namespace

// "" for a run that ended normally; else why it did not, and how many rank files say so.
std::string incomplete_text(const TraceModel& model) {
  std::string why;
  size_t marked = 0;
  for (const Rank& r : model.ranks)
    if (!r.incomplete.empty()) ++marked, why = why.empty() ? r.incomplete : why;
  if (marked == 0) return "";
  return "the run failed (" + why + "): " + std::to_string(marked) + " of " + std::to_string(model.ranks.size()) +
         " rank files are marked incomplete, each ending where its rank stopped";
}

// "" when every file was read to its end; else how many were not, and the first one's reason
// (a file cut short, as a run killed while writing it leaves it, or a LoadLimits cap).
std::string stopped_text(const TraceModel& model) {
  size_t stopped = 0;
  std::string first;
  for (const Rank& r : model.ranks)
    if (!r.stopped.empty()) ++stopped, first = first.empty() ? r.stopped : first;
  if (stopped == 0) return "";
  return std::to_string(stopped) + " of " + std::to_string(model.ranks.size()) + " rank files read up to where " +
         (stopped == 1 ? "it stops" : "they stop") + " (" + first + ")";
}

std::vector<std::string> split_paths(const std::string& text) {
  const size_t b = text.find_first_not_of(" \t\r\n"), e = text.find_last_not_of(" \t\r\n");
  if (b == std::string::npos) return {};
  const std::string whole = expand_home(text.substr(b, e - b + 1));
  if (on_disk(whole)) return {whole};
  std::vector<std::string> paths;
  std::string word;
  bool in_word = false;
  char quote = 0;
  for (const char c : text) {
    if (quote) {
      if (c == quote) quote = 0;
      else word += c;
    } else if (c == '"' || c == '\'') {
      quote = c;
      in_word = true;
    } else if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
      if (in_word) paths.push_back(expand_home(word));
      word.clear();
      in_word = false;
    } else {
      word += c;
      in_word = true;
    }
  }
  if (in_word) paths.push_back(expand_home(word));
  return paths;
}

bool Viewer::open(const ViewerOptions& o) {
  headless_ = o.headless;
  glfwSetErrorCallback(
      [](int code, const char* what) { std::fprintf(stderr, "shardlab-view: GLFW error %d: %s\n", code, what); });
  if (!glfwInit()) {
    std::fprintf(stderr, "shardlab-view: cannot open a window (no display? try xvfb-run)\n");
    return false;
  }
  // OpenGL 3.0 is what Mesa's software renderer (Xvfb) offers everywhere; else take any context.
  glfwWindowHint(GLFW_CONTEXT_VERSION_MAJOR, 3);
  glfwWindowHint(GLFW_CONTEXT_VERSION_MINOR, 0);
  window_ = glfwCreateWindow(o.width, o.height, "shardlab-view", nullptr, nullptr);
  if (!window_) {
    glfwDefaultWindowHints();
    window_ = glfwCreateWindow(o.width, o.height, "shardlab-view", nullptr, nullptr);
  }
  if (!window_) {
    std::fprintf(stderr, "shardlab-view: cannot create an OpenGL window\n");
    glfwTerminate();
    return false;
  }
  glfwMakeContextCurrent(window_);
  glfwSwapInterval(headless_ ? 0 : 1);
  if (const auto* r = glGetString(GL_RENDERER)) renderer_ = reinterpret_cast<const char*>(r);

  IMGUI_CHECKVERSION();
  ImGui::CreateContext();
  ImGuiIO& io = ImGui::GetIO();
  io.IniFilename = nullptr;  // no imgui.ini dropped into whatever directory the viewer ran in
  ImGui::StyleColorsDark();
  ImGui::GetStyle().FrameRounding = 3;
  const char* font = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";
  if (fs::exists(font)) io.Fonts->AddFontFromFileTTF(font, 15);
  // ImGui's backend installs the mouse, key, char and scroll callbacks (and keeps no window
  // user pointer): the drop callback and the user pointer are ours.
  ImGui_ImplGlfw_InitForOpenGL(window_, true);
  ImGui_ImplOpenGL3_Init("#version 130");
  imgui_ready_ = true;
  glfwSetWindowUserPointer(window_, this);
  glfwSetDropCallback(window_, [](GLFWwindow* w, int count, const char** paths) {
    static_cast<Viewer*>(glfwGetWindowUserPointer(w))->on_drop(count, paths);
  });
  reference_traces_ = find_reference_traces();
  return true;
}

Viewer::~Viewer() {
  if (imgui_ready_) {
    ImGui_ImplOpenGL3_Shutdown();
    ImGui_ImplGlfw_Shutdown();
    ImGui::DestroyContext();
  }
  if (window_) {
    glfwDestroyWindow(window_);
    glfwTerminate();
  }
}

void Viewer::open_paths(std::vector<std::string> paths, bool as_compare, std::vector<std::string> compare) {
  if (paths.empty()) {
    error_ = "Nothing to open: type a run directory or trace files, or drop them onto the window.";
    return;
  }
  if (as_compare && app.runs.empty()) {
    error_ = "Nothing to compare with: open a run first.";
    return;
  }
  error_.clear();
  if (!as_compare) set_path_field(paths);
  loader_.start({std::move(paths), std::move(compare), as_compare, limits});
}

void Viewer::set_path_field(const std::vector<std::string>& paths) {
  std::string text;
  for (const std::string& p : paths) {
    const bool quote = p.find_first_of(" \t") != std::string::npos;
    text += (text.empty() ? "" : " ") + (quote ? "\"" + p + "\"" : p);
  }
  std::snprintf(path_, sizeof path_, "%s", text.c_str());
}

void Viewer::on_drop(int count, const char** paths) {
  std::vector<std::string> dropped(paths, paths + std::max(count, 0));
  std::error_code ec;
  if (dropped.size() == 2 && fs::is_directory(dropped[0], ec) && fs::is_directory(dropped[1], ec))
    open_paths({dropped[0]}, false, {dropped[1]});
  else
    open_paths(std::move(dropped));
}

void Viewer::show(std::vector<Run> runs) {
  app.set_runs(std::move(runs));
  app.open_every_rank = app.streams_only;  // new runs: every rank open again, in streams-only mode
  if (headless_)
    for (const Run& run : app.runs)
      for (const NotOpened& n : run.model.not_opened)
        std::fprintf(stderr, "shardlab-view: %s %s: %s\n", n.not_a_trace ? "skipped" : "not opened", n.file.c_str(),
                     n.why.c_str());
  if (initial_range) {
    app.view_t0 = app.time_origin() + initial_range->first;
    app.view_t1 = app.time_origin() + initial_range->second;
    initial_range.reset();
  }
  std::string label = app.runs.empty() ? "" : app.runs[0].label;
  if (app.runs.size() > 1) label += " vs " + app.runs[1].label;
  if (window_) glfwSetWindowTitle(window_, ("shardlab-view " + label).c_str());
}

void Viewer::apply(LoadResult r) {
  if (r.cancelled) return;  // the current run, if any, stays
  if (!r.error.empty()) {
    error_ = r.error;
    return;
  }
  if (r.request.as_compare) {
    if (app.runs.empty()) {
      error_ = "Nothing to compare with: open a run first.";
      return;
    }
    r.runs.insert(r.runs.begin(), std::move(app.runs[0]));
  }
  error_.clear();
  show(std::move(r.runs));
}

void Viewer::poll_events() { glfwPollEvents(); }

void Viewer::begin_frame() {
  if (auto r = loader_.poll()) apply(std::move(*r));
  ImGui_ImplOpenGL3_NewFrame();
  ImGui_ImplGlfw_NewFrame();
  if (headless_) {
    ImGuiIO& io = ImGui::GetIO();
    io.MousePos = {-FLT_MAX, -FLT_MAX};
    std::fill(std::begin(io.MouseDown), std::end(io.MouseDown), false);
  }
}

void Viewer::build() {
  ImGui::NewFrame();
  ui();
  ImGui::Render();
  ++frames_;
}

void Viewer::render() {
  int w = 0, h = 0;
  glfwGetFramebufferSize(window_, &w, &h);
  glViewport(0, 0, w, h);
  // The main window has no background of its own: the clear paints it, in the colour its
  // background had over the clear colour, saving a blended full-window fill.
  const ImVec4 bg = ImGui::GetStyle().Colors[ImGuiCol_WindowBg];
  glClearColor(bg.x * bg.w + 0.1f * (1 - bg.w), bg.y * bg.w + 0.1f * (1 - bg.w), bg.z * bg.w + 0.12f * (1 - bg.w), 1);
  glClear(GL_COLOR_BUFFER_BIT);
  ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
}

void Viewer::present() { glfwSwapBuffers(window_); }

bool Viewer::should_close() const { return glfwWindowShouldClose(window_); }

bool Viewer::write_png(const std::string& path) const {
  // A README's screenshot command writes under runs/, which a fresh clone does not have yet.
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);  // a failure shows in the write
  int w = 0, h = 0;
  glfwGetFramebufferSize(window_, &w, &h);
  std::vector<unsigned char> pixels(static_cast<size_t>(w) * static_cast<size_t>(h) * 3);
  glPixelStorei(GL_PACK_ALIGNMENT, 1);
  glReadBuffer(GL_BACK);
  glReadPixels(0, 0, w, h, GL_RGB, GL_UNSIGNED_BYTE, pixels.data());
  stbi_flip_vertically_on_write(1);  // OpenGL's rows run bottom-up
  return stbi_write_png(path.c_str(), w, h, 3, pixels.data(), w * 3) != 0;
}

// ---------------------------------------------------------------------------------------------
// The UI.

void Viewer::ui() {
  const ImGuiIO& io = ImGui::GetIO();
  ImGui::SetNextWindowPos({0, 0});
  ImGui::SetNextWindowSize(io.DisplaySize);
  ImGui::Begin("shardlab-view", nullptr,
               ImGuiWindowFlags_NoDecoration | ImGuiWindowFlags_NoMove | ImGuiWindowFlags_NoSavedSettings |
                   ImGuiWindowFlags_NoBringToFrontOnFocus | ImGuiWindowFlags_MenuBar | ImGuiWindowFlags_NoBackground);
  open_bar();
  if (!error_.empty()) error_banner();
  if (app.runs.empty()) {
    app.shown_tab = -1;
    if (loading()) loading_window();
    else empty_window();
    ImGui::End();
    return;
  }
  // A failed run opens like any other; this line says its traces stop short.
  for (size_t i = 0; i < app.runs.size(); ++i)
    if (const std::string text = incomplete_text(app.runs[i].model); !text.empty()) {
      ImGui::PushStyleColor(ImGuiCol_Text, kWarningColor);
      ImGui::TextWrapped("Incomplete%s: %s", i == 0 ? "" : " (compared run)", text.c_str());
      ImGui::PopStyleColor();
    }
  for (size_t i = 0; i < app.runs.size(); ++i)
    if (const std::string text = stopped_text(app.runs[i].model); !text.empty()) {
      ImGui::PushStyleColor(ImGuiCol_Text, kWarningColor);
      ImGui::TextWrapped("Read in part%s: %s; hover for each file's", i == 0 ? "" : " (compared run)", text.c_str());
      ImGui::PopStyleColor();
      if (ImGui::IsItemHovered()) {
        ImGui::BeginTooltip();
        for (const Rank& r : app.runs[i].model.ranks)
          if (!r.stopped.empty()) ImGui::Text("%s: %s", r.file.c_str(), r.stopped.c_str());
        ImGui::EndTooltip();
      }
    }
  for (size_t i = 0; i < app.runs.size(); ++i) not_opened_lines(app.runs[i].model, i > 0);
  toolbar(app);
  ImGui::SameLine(0, 24);
  ImGui::TextDisabled("%zu ranks, %zu events", app.runs[0].model.ranks.size(), app.runs[0].model.events);
  // Frame time, interactive only: a screenshot's first frames measure start-up, not drawing.
  if (!headless_) {
    ImGui::SameLine();
    ImGui::TextDisabled("  %.1f ms/frame", 1000.0 / static_cast<double>(io.Framerate));
  }
  // The panels keep their height when the window resizes; the splitter between moves it.
  const float avail = ImGui::GetContentRegionAvail().y;
  panel_height_ = std::clamp(panel_height_, 80.f, std::max(80.f, avail - 150));
  timeline(app, avail - panel_height_ - 6);
  ImGui::InvisibleButton("splitter", {-1, 6});
  if (ImGui::IsItemActive()) panel_height_ -= io.MouseDelta.y;
  if (ImGui::IsItemHovered() || ImGui::IsItemActive()) ImGui::SetMouseCursor(ImGuiMouseCursor_ResizeNS);
  ImGui::BeginChild("panels");
  panels(app);
  ImGui::EndChild();
  ImGui::End();
}

// The menu bar: a path field with Open and Compare, then the load's progress or the open run.
void Viewer::open_bar() {
  if (!ImGui::BeginMenuBar()) return;
  cancel_rect_ = {};
  const ImGuiIO& io = ImGui::GetIO();
  // Ctrl+L (as a browser's address bar) or Ctrl+O puts the cursor in the path field.
  if (io.KeyCtrl && (ImGui::IsKeyPressed(GLFW_KEY_L, false) || ImGui::IsKeyPressed(GLFW_KEY_O, false)))
    ImGui::SetKeyboardFocusHere();
  ImGui::SetNextItemWidth(std::clamp(io.DisplaySize.x * 0.38f, 200.f, 640.f));
  const bool enter = ImGui::InputTextWithHint("##path", "a run directory or trace files (Ctrl+L), or drop them here",
                                              path_, sizeof path_, ImGuiInputTextFlags_EnterReturnsTrue);
  path_rect_ = {ImGui::GetItemRectMin(), ImGui::GetItemRectMax()};
  ImGui::SameLine();
  const bool open = ImGui::Button("Open");
  open_rect_ = {ImGui::GetItemRectMin(), ImGui::GetItemRectMax()};
  ImGui::SameLine();
  ImGui::BeginDisabled(app.runs.empty());
  const bool compare = ImGui::Button("Compare");
  ImGui::EndDisabled();
  compare_rect_ = {ImGui::GetItemRectMin(), ImGui::GetItemRectMax()};
  if (ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled))
    ImGui::SetTooltip("Load these paths as the compared run, below the open one (as --compare)");
  if (enter || open || compare) open_paths(split_paths(path_), compare);

  ImGui::SameLine(0, 20);
  if (loading()) {
    const size_t done = loader_.done(), total = loader_.total();
    char text[64];
    std::snprintf(text, sizeof text, "%s / %s", human_bytes(static_cast<double>(done)).c_str(),
                  human_bytes(static_cast<double>(total)).c_str());
    ImGui::TextUnformatted("loading");
    ImGui::ProgressBar(total ? static_cast<float>(done) / static_cast<float>(total) : 0.f, {200, 0}, text);
    const bool cancel = ImGui::SmallButton("Cancel");
    cancel_rect_ = {ImGui::GetItemRectMin(), ImGui::GetItemRectMax()};
    if (cancel) loader_.cancel();
  } else if (app.runs.size() > 1) {
    ImGui::TextDisabled("compared with %s", app.runs[1].label.c_str());
    ImGui::SameLine();
  }
  skipped_note(app.runs);
  dropped_note(app.runs);
  ImGui::EndMenuBar();
}

void Viewer::error_banner() {
  if (ImGui::SmallButton("Dismiss")) {
    error_.clear();
    return;
  }
  ImGui::SameLine();
  ImGui::PushStyleColor(ImGuiCol_Text, kErrorColor);
  ImGui::TextWrapped("Could not open: %s", error_.c_str());
  ImGui::PopStyleColor();
}

void Viewer::empty_window() {
  const ImVec2 size = ImGui::GetContentRegionAvail();
  const float x = std::max(16.f, size.x * 0.5f - 330);
  ImGui::SetCursorPos({x, ImGui::GetCursorPosY() + std::max(16.f, size.y * 0.3f)});
  ImGui::TextUnformatted("No run open.");
  ImGui::Spacing();
  for (const char* line : {"Drop a run directory (every *.json and *.json.gz trace in it) or trace files onto this window,",
                           "or type its path in the field above and press Enter or Open (Ctrl+L goes there),",
                           "or give it on the command line:  shardlab-view traces/03_bucketed_ddp",
                           "Two run directories dropped together (or --compare) are shown one above the other."}) {
    ImGui::SetCursorPosX(x);
    ImGui::TextDisabled("%s", line);
  }
  if (reference_traces_.empty()) return;
  ImGui::Spacing();
  ImGui::SetCursorPosX(x);
  ImGui::TextUnformatted("The reference traces here:");
  ImGui::SetCursorPosX(x);
  for (size_t i = 0; i < reference_traces_.size(); ++i) {
    if (i > 0) ImGui::SameLine();
    if (ImGui::Button(reference_traces_[i].c_str())) open_paths({reference_traces_[i]});
  }
}

void Viewer::loading_window() {
  const ImGuiIO& io = ImGui::GetIO();
  const size_t total = loader_.total();
  ImGui::SetCursorPos({io.DisplaySize.x * 0.3f, io.DisplaySize.y * 0.45f});
  ImGui::Text("Loading %s (%s)", label_of(loader_.request().paths).c_str(),
              human_bytes(static_cast<double>(total)).c_str());
  ImGui::SetCursorPosX(io.DisplaySize.x * 0.3f);
  ImGui::ProgressBar(total ? static_cast<float>(loader_.done()) / static_cast<float>(total) : 0.f,
                     {io.DisplaySize.x * 0.4f, 0});
  ImGui::SetCursorPosX(io.DisplaySize.x * 0.3f);
  if (ImGui::Button("Cancel")) loader_.cancel();
}

}  // namespace shardlab::viewer::app
