#include "trace/file_output.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <system_error>

namespace shardlab {

namespace fs = std::filesystem;

void write_whole_file(const fs::path& file, std::string_view bytes) {
  const fs::path partial = file.string() + ".tmp";
  const auto fail = [&](int error) {
    std::error_code ignored;
    fs::remove(partial, ignored);
    throw std::runtime_error("cannot write " + file.string() + ": " + std::strerror(error));
  };
  std::FILE* f = std::fopen(partial.c_str(), "wb");
  if (!f) fail(errno);
  // fwrite buffers: a full disk may only show at the flush, or at the close.
  const bool written = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size() && std::fflush(f) == 0;
  const int error = errno;
  if (std::fclose(f) != 0 || !written) fail(written ? errno : error);
  std::error_code ec;
  fs::rename(partial, file, ec);
  if (ec) fail(ec.value());
}

}  // namespace shardlab
