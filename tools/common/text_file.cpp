#include "text_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

namespace hvactor::tool {

namespace {

// What a non-regular file is, for the message.
const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode))
    return "a directory";
  if (S_ISFIFO(mode))
    return "a FIFO";
  if (S_ISCHR(mode) || S_ISBLK(mode))
    return "a device";
  if (S_ISSOCK(mode))
    return "a socket";
  return "not a regular file";
}

// Refuses anything but a regular file of at most `max_bytes`.
void check_kind(const struct stat& st, const std::string& path, const std::string& what,
                uintmax_t max_bytes) {
  if (S_ISDIR(st.st_mode))
    throw std::invalid_argument(fmt::format("{}: cannot read {}: it is a directory", path, what));
  if (!S_ISREG(st.st_mode))
    throw std::invalid_argument(fmt::format(
      "{}: cannot read {}: not a regular file ({}); give the path of a file", path, what,
      kind_of(st.st_mode)));
  if (static_cast<uintmax_t>(st.st_size) > max_bytes)
    throw std::invalid_argument(fmt::format("{}: cannot read {}: larger than {} bytes ({})", path,
                                            what, max_bytes, st.st_size));
}

struct fd_closer {
  int fd;
  ~fd_closer() { ::close(fd); }
};

} // namespace

std::string read_text_file(const std::string& path, const std::string& what,
                           uintmax_t max_bytes) {
  auto failed = [&](int err) {
    return std::invalid_argument(
      fmt::format("{}: cannot read {}: {}", path, what, std::strerror(err)));
  };
  // stat first: opening a FIFO or some devices may block or act.
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw failed(errno);
  check_kind(st, path, what, max_bytes);
  // O_NONBLOCK: a FIFO put in its place meanwhile does not block the open.
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0)
    throw failed(errno);
  fd_closer closer{fd};
  if (::fstat(fd, &st) != 0)
    throw failed(errno);
  check_kind(st, path, what, max_bytes);
  std::string text;
  text.resize(static_cast<size_t>(st.st_size));
  size_t have = 0;
  for (;;) {
    if (have == text.size())
      text.resize(std::min<uintmax_t>(text.size() + 4096, max_bytes + 1));
    if (have == text.size())
      break; // max_bytes + 1 read: the file grew past the bound
    ssize_t n = ::read(fd, text.data() + have, text.size() - have);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      throw failed(errno);
    if (n == 0)
      break;
    have += static_cast<size_t>(n);
  }
  if (have > max_bytes)
    throw std::invalid_argument(
      fmt::format("{}: cannot read {}: larger than {} bytes", path, what, max_bytes));
  text.resize(have);
  return text;
}

} // namespace hvactor::tool
