#include "run/flags.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace shardlab {
namespace {

// Every flag error has this form, whether one flag's value is bad or a check of several fails.
FlagError value_error(const std::string& flag, const std::string& value, const std::string& allowed) {
  return FlagError(flag + ": got '" + value + "'; allowed: " + allowed);
}

[[noreturn]] void bad(const std::string& name, const std::string& value, const std::string& allowed) {
  throw value_error("--" + name, value, allowed);
}

}  // namespace

void require(bool ok, const std::string& flag, const std::string& value, const std::string& allowed) {
  if (!ok) throw value_error(flag, value, allowed);
}

void require(bool ok, const std::string& flag, int64_t value, const std::string& allowed) {
  require(ok, flag, std::to_string(value), allowed);
}

void Flags::add_check(std::function<void(const RunShape&)> check) { checks_.push_back(std::move(check)); }

void Flags::check(const RunShape& run) const {
  for (const auto& c : checks_) c(run);
}

void Flags::add_int(std::string name, int64_t* target, int64_t min, int64_t max, std::string help) {
  const std::string allowed = "an integer from " + std::to_string(min) + " to " + std::to_string(max);
  flags_.push_back({name, std::move(help), "N", allowed, false,
                    [=](const std::string& v) {
                      char* end = nullptr;
                      errno = 0;
                      const long long x = std::strtoll(v.c_str(), &end, 10);
                      if (v.empty() || *end != '\0' || errno == ERANGE || x < min || x > max) bad(name, v, allowed);
                      *target = x;
                    },
                    [=] { return nlohmann::json(*target); }});
}

void Flags::add_double(std::string name, double* target, double min, double max, std::string help) {
  char range[128];
  std::snprintf(range, sizeof range, "a number from %g to %g", min, max);
  const std::string allowed = range;
  flags_.push_back({name, std::move(help), "X", allowed, false,
                    [=](const std::string& v) {
                      char* end = nullptr;
                      const double x = std::strtod(v.c_str(), &end);
                      if (v.empty() || *end != '\0' || !std::isfinite(x) || x < min || x > max) bad(name, v, allowed);
                      *target = x;
                    },
                    [=] { return nlohmann::json(*target); }});
}

void Flags::add_bool(std::string name, bool* target, std::string help) {
  flags_.push_back({name, std::move(help), "", "true or false (or the flag alone)", true,
                    [=](const std::string& v) {
                      if (v == "true" || v == "1") *target = true;
                      else if (v == "false" || v == "0") *target = false;
                      else bad(name, v, "true or false (or the flag alone)");
                    },
                    [=] { return nlohmann::json(*target); }});
}

void Flags::add_string(std::string name, std::string* target, std::string help,
                       std::function<std::string(const std::string&)> problem) {
  const std::string allowed = "a non-empty string that does not start with --";
  flags_.push_back({name, std::move(help), "S", allowed, false,
                    [=](const std::string& v) {
                      if (v.empty() || v.rfind("--", 0) == 0) bad(name, v, allowed);
                      if (problem)
                        if (const std::string p = problem(v); !p.empty()) bad(name, v, p);
                      *target = v;
                    },
                    [=] { return nlohmann::json(*target); }});
}

void Flags::add_choice(std::string name, std::string* target, std::vector<std::string> choices, std::string help) {
  std::string allowed;
  for (const auto& c : choices) allowed += (allowed.empty() ? "" : ", ") + c;
  flags_.push_back({name, std::move(help), "{" + allowed + "}", allowed, false,
                    [=](const std::string& v) {
                      if (std::find(choices.begin(), choices.end(), v) == choices.end()) bad(name, v, allowed);
                      *target = v;
                    },
                    [=] { return nlohmann::json(*target); }});
}

bool Flags::given(const std::string& name) const {
  for (const auto& f : flags_)
    if (f.name == name) return f.given;
  return false;
}

Flags::Flag& Flags::find(const std::string& name) {
  for (auto& f : flags_)
    if (f.name == name) return f;
  std::string known;
  for (const auto& f : flags_) known += (known.empty() ? "--" : ", --") + f.name;
  throw FlagError("unknown flag --" + name + "; allowed flags: " + known + ", --help");
}

bool Flags::parse(int argc, const char* const* argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") return false;
    if (arg.rfind("--", 0) != 0 || arg.size() == 2)
      throw FlagError("unexpected argument '" + arg + "'; flags look like --name value (see --help)");
    const size_t eq = arg.find('=');
    const std::string name = arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    Flag& f = find(name);
    f.given = true;
    if (eq != std::string::npos) {
      f.set(arg.substr(eq + 1));
    } else if (f.is_bool) {
      f.set("true");
    } else {
      if (i + 1 >= argc) throw FlagError("--" + name + ": missing value; allowed: " + f.allowed);
      f.set(argv[++i]);
    }
  }
  return true;
}

std::string Flags::usage() const {
  std::string u = "usage: mpirun -np N " + program_ + " [flags]\n\nflags:\n";
  for (const auto& f : flags_) {
    std::string left = "  --" + f.name + (f.kind.empty() ? "" : " " + f.kind);
    if (left.size() < 30) left.resize(30, ' ');
    else left += "  ";
    // A help text that states its own default ("default: the chapter id") keeps its words.
    const bool says_default = f.help.find("(default:") != std::string::npos;
    u += left + f.help + (says_default ? "" : " (default: " + f.get().dump() + ")") + "\n";
  }
  u += "  --help                      this text\n";
  return u;
}

nlohmann::json Flags::values() const {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& f : flags_) j[f.name] = f.get();
  return j;
}

}  // namespace shardlab
