// flags.h: command-line flags, shared by every chapter and extended by each.
//
// Syntax: --name value or --name=value; a boolean flag alone means true. An unknown flag or a
// bad value throws FlagError with a message naming the flag and what is allowed; the job
// harness prints it and exits with status 2. What one flag cannot know alone (a batch that must
// divide by the ranks, a sequence within the model's context) is a check added with add_check:
// the harness runs the checks after parsing and before step 1, with the same exit and message.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace shardlab {

class FlagError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What a configuration check sees besides the flags: the run's shape, known before step 1.
struct RunShape {
  int world_size = 1;
  int gpus_per_node = 1;  // the profile's
};

// A check's verdict: when `ok` is false, throws FlagError "<flag>: got '<value>'; allowed:
// <allowed>", the form of every flag error.
void require(bool ok, const std::string& flag, const std::string& value, const std::string& allowed);
void require(bool ok, const std::string& flag, int64_t value, const std::string& allowed);

class Flags {
 public:
  explicit Flags(std::string program) : program_(std::move(program)) {}

  void add_int(std::string name, int64_t* target, int64_t min, int64_t max, std::string help);
  void add_double(std::string name, double* target, double min, double max, std::string help);
  void add_bool(std::string name, bool* target, std::string help);
  // A string flag's value may not be empty nor start with "--" (a forgotten value followed by
  // the next flag: --trace-dir --debug-collectives). `problem`, when given, says what else is
  // wrong with a value ("" when nothing is), and becomes the error's "allowed" part.
  void add_string(std::string name, std::string* target, std::string help,
                  std::function<std::string(const std::string&)> problem = {});
  void add_choice(std::string name, std::string* target, std::vector<std::string> choices, std::string help);

  // A check of flag values together, or against the run's shape, in a line:
  //   f.add_check([](const RunShape& run) {
  //     require(batch % run.world_size == 0, "--global-batch", batch, "a multiple of the ranks");
  //   });
  void add_check(std::function<void(const RunShape&)> check);
  // Runs every check in the order added; the first that fails throws its FlagError.
  void check(const RunShape& run) const;

  // Returns false when --help was given (usage() is what to print).
  bool parse(int argc, const char* const* argv);
  // Whether the command line gave this flag (its value may still equal the default): for the
  // checks that refuse flags that contradict each other rather than silently ignore one.
  bool given(const std::string& name) const;
  std::string usage() const;
  nlohmann::json values() const;  // every flag and its value, for traces and summaries

 private:
  struct Flag {
    std::string name, help, kind, allowed;
    bool is_bool = false;
    std::function<void(const std::string&)> set;  // throws FlagError on a bad value
    std::function<nlohmann::json()> get;
    bool given = false;  // on the command line
  };
  Flag& find(const std::string& name);
  std::string program_;
  std::vector<Flag> flags_;
  std::vector<std::function<void(const RunShape&)>> checks_;
};

}  // namespace shardlab
