// replay.h: drives the viewer with a script of synthetic input, frame by frame, through the same
// path real input takes: key, character, scroll and button events go to the GLFW callbacks that
// ImGui's backend installed (and drops to the viewer's drop callback) at the point of the frame
// where glfwPollEvents would deliver them; the pointer position and the held buttons, which the
// backend polls from the display, are set right after it polled. Each frame advances time by a
// fixed 1/60 s, so key-held zoom and pan come out the same on every machine. What the tests use
// (shardlab-view --replay SCRIPT --state-out STATE.json), under Xvfb.
//
// The script: one command per line, '#' starts a comment. Coordinates are window pixels (the
// state dump's "layout" says where the tracks, lanes and the path field are). Every command
// takes the frames noted; the script begins once the command line's paths have loaded.
//
//   move X Y                 the pointer to (X, Y)                                     1 frame
//   down [left|right|middle] press a mouse button (default left)                       1 frame
//   up [left|right|middle]   release it                                                1 frame
//   click X Y                move, down, up                                            3 frames
//   drag X0 Y0 X1 Y1 [N]     move to X0 Y0, down, N moves (default 8) to X1 Y1, up     N+3 frames
//   wheel DY                 DY notches of the wheel (positive: away from you)         1 frame
//   keydown KEY, keyup KEY   KEY: a letter, a digit, shift, ctrl, alt, enter, escape,  1 frame
//                            tab, backspace, delete, space, home, end, left, right,
//                            up, down, pageup, pagedown
//   press KEY                keydown, keyup: the key is down for one frame             2 frames
//   hold KEY N               the key down for N frames, then up                        N+1 frames
//   type TEXT                the rest of the line, typed                               1 frame
//   drop PATH...             paths dropped onto the window (quoted as in the path      1 frame
//                            field)
//   wait [N]                 N frames (default 1) with nothing new                     N frames
//   wait_load                until the load under way has been shown (60 s at most)    1+ frames
//   state FILE               write the state JSON (as --state-out) now                 none
//   screenshot FILE          write the last frame as a PNG now                         none
#pragma once

#include <cfloat>
#include <chrono>
#include <string>
#include <vector>

#include <imgui.h>

#include "window.h"

namespace shardlab::viewer::app {

class Replay {
 public:
  // Reads a script; throws std::runtime_error naming the file and line of a bad command.
  static Replay load(const std::string& path);
  static Replay parse(const std::string& text, const std::string& name);

  // After glfwPollEvents: the current command's events, through GLFW's callbacks.
  void deliver(Viewer& v);
  // After the backends' NewFrame: the pointer and buttons the backend polled, and the time step.
  void override_polled() const;
  // After the frame is rendered, before it is presented: moves the script on. False once it
  // has ended. Throws std::runtime_error when a command fails (a file not written, a load
  // that never ends).
  bool after_frame(Viewer& v);

  struct Command {
    enum Kind { move, down, up, wheel, keydown, keyup, type, drop, wait, wait_load, state, screenshot } kind = wait;
    float x = 0, y = 0;  // move
    int n = 1;           // button, key, frames
    float dy = 0;        // wheel
    std::string text;    // type, state, screenshot
    std::vector<std::string> paths;  // drop
    int line = 0;
  };

 private:
  std::string name_;
  std::vector<Command> commands_;
  size_t pc_ = 0;
  int frames_in_command_ = 0;
  bool issued_ = false;
  std::chrono::steady_clock::time_point load_wait_start_;
  ImVec2 mouse_{-FLT_MAX, -FLT_MAX};
  bool buttons_[3] = {false, false, false};
  bool shift_ = false, ctrl_ = false, alt_ = false;
};

}  // namespace shardlab::viewer::app
