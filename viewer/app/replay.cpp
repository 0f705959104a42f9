// replay.cpp: the input script (see replay.h): parsed into frame-sized commands, then delivered
// one command at a time, at the point of the frame where GLFW would deliver it.
#include "replay.h"

#include <cctype>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

#include <GLFW/glfw3.h>
#include <backends/imgui_impl_glfw.h>

namespace shardlab::viewer::app {
namespace {

using Command = Replay::Command;

int key_code(std::string key) {
  for (char& c : key) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (key.size() == 1 && std::isalpha(static_cast<unsigned char>(key[0])))
    return GLFW_KEY_A + (key[0] - 'a');  // GLFW's letter codes are their upper-case ASCII codes
  if (key.size() == 1 && std::isdigit(static_cast<unsigned char>(key[0]))) return GLFW_KEY_0 + (key[0] - '0');
  static const std::map<std::string, int> names = {
      {"shift", GLFW_KEY_LEFT_SHIFT}, {"ctrl", GLFW_KEY_LEFT_CONTROL}, {"alt", GLFW_KEY_LEFT_ALT},
      {"enter", GLFW_KEY_ENTER},      {"escape", GLFW_KEY_ESCAPE},     {"tab", GLFW_KEY_TAB},
      {"backspace", GLFW_KEY_BACKSPACE}, {"delete", GLFW_KEY_DELETE},  {"space", GLFW_KEY_SPACE},
      {"home", GLFW_KEY_HOME},        {"end", GLFW_KEY_END},           {"left", GLFW_KEY_LEFT},
      {"right", GLFW_KEY_RIGHT},      {"up", GLFW_KEY_UP},             {"down", GLFW_KEY_DOWN},
      {"pageup", GLFW_KEY_PAGE_UP},   {"pagedown", GLFW_KEY_PAGE_DOWN}};
  const auto it = names.find(key);
  return it == names.end() ? -1 : it->second;
}

int button_code(const std::string& b) {
  if (b.empty() || b == "left") return GLFW_MOUSE_BUTTON_LEFT;
  if (b == "right") return GLFW_MOUSE_BUTTON_RIGHT;
  if (b == "middle") return GLFW_MOUSE_BUTTON_MIDDLE;
  return -1;
}

// UTF-8 to code points (what GLFW's character callback receives); bad bytes pass as they are.
std::vector<unsigned> code_points(const std::string& s) {
  std::vector<unsigned> out;
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const int extra = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;
    unsigned cp = extra == 0 ? c : c & (0x3Fu >> extra);
    size_t j = 1;
    for (; j <= static_cast<size_t>(extra) && i + j < s.size(); ++j)
      cp = (cp << 6) | (static_cast<unsigned char>(s[i + j]) & 0x3Fu);
    out.push_back(cp);
    i += j;
  }
  return out;
}

Command make(Command::Kind kind, int n = 1) {
  Command c;
  c.kind = kind;
  c.n = n;
  return c;
}

bool frameless(const Command& c) { return c.kind == Command::state || c.kind == Command::screenshot; }

}  // namespace

Replay Replay::load(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot read the replay script");
  std::stringstream text;
  text << in.rdbuf();
  return parse(text.str(), path);
}

Replay Replay::parse(const std::string& text, const std::string& name) {
  Replay r;
  r.name_ = name;
  // The command line's paths first: a script starts on a loaded run, laid out (ImGui sizes
  // tables and windows from the frames before).
  r.commands_.push_back(make(Command::wait_load));
  r.commands_.push_back(make(Command::wait, 2));
  std::istringstream lines(text);
  std::string line;
  for (int number = 1; std::getline(lines, line); ++number) {
    const std::string where = name + ":" + std::to_string(number) + ": ";
    if (const size_t hash = line.find('#'); hash != std::string::npos && line.rfind("type", 0) != 0) line.erase(hash);
    std::istringstream words(line);
    std::string verb;
    if (!(words >> verb)) continue;
    auto fail = [&](const std::string& what) -> void { throw std::runtime_error(where + what + ": '" + line + "'"); };
    auto number_arg = [&](const char* what) {
      double v = 0;
      if (!(words >> v)) fail(std::string("expected ") + what);
      return v;
    };
    auto add = [&](Command c) {
      c.line = number;
      r.commands_.push_back(std::move(c));
    };
    auto move = [&](double x, double y) {
      Command c = make(Command::move);
      c.x = static_cast<float>(x), c.y = static_cast<float>(y);
      add(c);
    };
    auto key = [&]() {
      std::string k;
      if (!(words >> k)) fail("expected a key");
      const int code = key_code(k);
      if (code < 0) fail("unknown key '" + k + "'");
      return code;
    };
    auto button = [&]() {
      std::string b;
      words >> b;
      const int code = button_code(b);
      if (code < 0) fail("unknown button '" + b + "' (left, right or middle)");
      return code;
    };
    auto optional_int = [&](int fallback) {
      std::string w;
      if (!(words >> w)) return fallback;
      try {
        size_t used = 0;
        const int v = std::stoi(w, &used);
        if (used == w.size()) return v;
      } catch (const std::exception&) {
      }
      fail("expected a whole number, got '" + w + "'");
      return fallback;
    };
    auto rest = [&]() {
      std::string s;
      std::getline(words, s);
      if (!s.empty() && s[0] == ' ') s.erase(0, 1);
      return s;
    };
    if (verb == "move") {
      const double x = number_arg("X"), y = number_arg("Y");
      move(x, y);
    } else if (verb == "down" || verb == "up") {
      add(make(verb == "down" ? Command::down : Command::up, button()));
    } else if (verb == "click") {
      const double x = number_arg("X"), y = number_arg("Y");
      move(x, y);
      add(make(Command::down, GLFW_MOUSE_BUTTON_LEFT));
      add(make(Command::up, GLFW_MOUSE_BUTTON_LEFT));
    } else if (verb == "drag") {
      const double x0 = number_arg("X0"), y0 = number_arg("Y0"), x1 = number_arg("X1"), y1 = number_arg("Y1");
      const int steps = optional_int(8);
      if (steps < 1) fail("expected at least 1 step");
      move(x0, y0);
      add(make(Command::down, GLFW_MOUSE_BUTTON_LEFT));
      for (int s = 1; s <= steps; ++s) move(x0 + (x1 - x0) * s / steps, y0 + (y1 - y0) * s / steps);
      add(make(Command::up, GLFW_MOUSE_BUTTON_LEFT));
    } else if (verb == "wheel") {
      Command c = make(Command::wheel);
      c.dy = static_cast<float>(number_arg("DY"));
      add(c);
    } else if (verb == "keydown" || verb == "keyup") {
      add(make(verb == "keydown" ? Command::keydown : Command::keyup, key()));
    } else if (verb == "press" || verb == "hold") {
      const int k = key();
      const int frames = verb == "hold" ? static_cast<int>(number_arg("N frames")) : 1;
      if (frames < 1) fail("expected at least 1 frame");
      add(make(Command::keydown, k));
      if (frames > 1) add(make(Command::wait, frames - 1));
      add(make(Command::keyup, k));
    } else if (verb == "type") {
      Command c = make(Command::type);
      c.text = rest();
      add(c);
    } else if (verb == "drop") {
      Command c = make(Command::drop);
      c.paths = split_paths(rest());
      if (c.paths.empty()) fail("expected paths");
      add(c);
    } else if (verb == "wait") {
      const int frames = optional_int(1);
      if (frames < 0) fail("expected a number of frames");
      if (frames > 0) add(make(Command::wait, frames));
    } else if (verb == "wait_load") {
      add(make(Command::wait_load));
    } else if (verb == "state" || verb == "screenshot") {
      Command c = make(verb == "state" ? Command::state : Command::screenshot);
      c.text = rest();
      if (c.text.empty()) fail("expected a file");
      add(c);
    } else {
      fail("unknown command '" + verb + "'");
    }
  }
  return r;
}

void Replay::deliver(Viewer& v) {
  if (pc_ >= commands_.size() || issued_) return;
  issued_ = true;
  const Command& c = commands_[pc_];
  GLFWwindow* w = v.window();
  const int mods = (shift_ ? GLFW_MOD_SHIFT : 0) | (ctrl_ ? GLFW_MOD_CONTROL : 0) | (alt_ ? GLFW_MOD_ALT : 0);
  switch (c.kind) {
    case Command::move: mouse_ = {c.x, c.y}; break;
    case Command::down:
    case Command::up:
      buttons_[c.n] = c.kind == Command::down;
      ImGui_ImplGlfw_MouseButtonCallback(w, c.n, c.kind == Command::down ? GLFW_PRESS : GLFW_RELEASE, mods);
      break;
    case Command::wheel: ImGui_ImplGlfw_ScrollCallback(w, 0, c.dy); break;
    case Command::keydown:
    case Command::keyup: {
      const bool down = c.kind == Command::keydown;
      if (c.n == GLFW_KEY_LEFT_SHIFT) shift_ = down;
      if (c.n == GLFW_KEY_LEFT_CONTROL) ctrl_ = down;
      if (c.n == GLFW_KEY_LEFT_ALT) alt_ = down;
      ImGui_ImplGlfw_KeyCallback(w, c.n, 0, down ? GLFW_PRESS : GLFW_RELEASE, mods);
      break;
    }
    case Command::type:
      for (const unsigned cp : code_points(c.text)) ImGui_ImplGlfw_CharCallback(w, cp);
      break;
    case Command::drop: {
      std::vector<const char*> paths;
      for (const std::string& p : c.paths) paths.push_back(p.c_str());
      // The callback GLFW itself would call.
      const GLFWdropfun drop = glfwSetDropCallback(w, nullptr);
      glfwSetDropCallback(w, drop);
      if (drop) drop(w, static_cast<int>(paths.size()), paths.data());
      break;
    }
    case Command::wait_load: load_wait_start_ = std::chrono::steady_clock::now(); break;
    case Command::wait:
    case Command::state:
    case Command::screenshot: break;
  }
}

void Replay::override_polled() const {
  ImGuiIO& io = ImGui::GetIO();
  io.MousePos = mouse_;
  for (int b = 0; b < 3; ++b) io.MouseDown[b] = buttons_[b];
  io.DeltaTime = 1.f / 60;
}

bool Replay::after_frame(Viewer& v) {
  if (pc_ >= commands_.size()) return false;
  const Command& c = commands_[pc_];
  ++frames_in_command_;
  if (c.kind == Command::wait && frames_in_command_ < c.n) return true;
  if (c.kind == Command::wait_load && v.loading()) {
    if (std::chrono::steady_clock::now() - load_wait_start_ > std::chrono::seconds(60))
      throw std::runtime_error(name_ + ":" + std::to_string(c.line) + ": the load did not end within 60 s");
    return true;
  }
  ++pc_;
  issued_ = false;
  frames_in_command_ = 0;
  for (; pc_ < commands_.size() && frameless(commands_[pc_]); ++pc_) {
    const Command& f = commands_[pc_];
    const std::string where = name_ + ":" + std::to_string(f.line) + ": ";
    if (f.kind == Command::state) {
      std::ofstream out(f.text);
      out << v.state().dump(1) << "\n";
      if (!out) throw std::runtime_error(where + "cannot write " + f.text);
    } else if (!v.write_png(f.text)) {
      throw std::runtime_error(where + "cannot write " + f.text);
    }
  }
  return pc_ < commands_.size();
}

}  // namespace shardlab::viewer::app
