// file_output.h: how a run writes a file (a rank's trace, summary.json, a flight record, the
// run manifest): whole or not at all, and when not, saying why.
//
// The bytes go to `<file>.tmp` first, which is renamed over the file once every byte is written
// and flushed: a reader never sees half a file under the final name, and an earlier run's file
// stays whole until the new one is. A failed write (a full disk, a read-only directory, a quota)
// removes the temporary and throws an error naming the file and the system's reason, errno's
// text: "cannot write runs/x/rank2.json: No space left on device".
//
// A GrowingFile is the other way, for what must survive a kill before the whole file is known
// (a rank's trace while the run goes on): it is written in pieces, appended as each is ready,
// so a reader finds every piece written before the kill, the last one perhaps cut short.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace shardlab {

void write_whole_file(const std::filesystem::path& file, std::string_view bytes);

class GrowingFile {
 public:
  // Creates `file` holding `first` (its header: a reader never finds less of it), replacing
  // what was there, as write_whole_file does; throws as it does.
  GrowingFile(const std::filesystem::path& file, std::string_view first);
  ~GrowingFile();
  GrowingFile(const GrowingFile&) = delete;
  GrowingFile& operator=(const GrowingFile&) = delete;

  // Appends every byte, straight to the kernel (no buffer in this process that a kill loses);
  // throws "cannot write <file>: <errno's text>".
  void append(std::string_view bytes);

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace shardlab
