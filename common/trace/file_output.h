// file_output.h: how a run writes a file (a rank's trace, summary.json, a flight record, the
// run manifest): whole or not at all, and when not, saying why.
//
// The bytes go to `<file>.tmp` first, which is renamed over the file once every byte is written
// and flushed: a reader never sees half a file under the final name, and an earlier run's file
// stays whole until the new one is. A failed write (a full disk, a read-only directory, a quota)
// removes the temporary and throws an error naming the file and the system's reason, errno's
// text: "cannot write runs/x/rank2.json: No space left on device".
#pragma once

#include <filesystem>
#include <string_view>

namespace shardlab {

void write_whole_file(const std::filesystem::path& file, std::string_view bytes);

}  // namespace shardlab
