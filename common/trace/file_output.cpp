#include "trace/file_output.h"

#include <fcntl.h>
#include <unistd.h>

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

GrowingFile::GrowingFile(const fs::path& file, std::string_view first) : path_(file.string()) {
  // The first bytes go in as a whole file does (.tmp, then renamed); the descriptor opened on
  // the temporary follows it through the rename, since it names the file itself, not its path.
  const std::string partial = path_ + ".tmp";
  fd_ = ::open(partial.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw std::runtime_error("cannot write " + path_ + ": " + std::strerror(errno));
  const auto discard = [&] {  // nothing of a failed start is left behind
    ::close(fd_);
    ::unlink(partial.c_str());
  };
  try {
    append(first);
  } catch (...) {
    discard();
    throw;
  }
  std::error_code ec;
  fs::rename(partial, file, ec);
  if (ec) {
    discard();
    throw std::runtime_error("cannot write " + path_ + ": " + ec.message());
  }
}

GrowingFile::~GrowingFile() {
  if (fd_ >= 0) ::close(fd_);
}

void GrowingFile::append(std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd_, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw std::runtime_error("cannot write " + path_ + ": " + std::strerror(n < 0 ? errno : ENOSPC));
    bytes.remove_prefix(static_cast<size_t>(n));
  }
}

}  // namespace shardlab
