#include "actors/coordinator/binary_shipper.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace hvactor::detail {

std::vector<char> read_chunk(const std::string& path, uint64_t offset, size_t count) {
  std::vector<char> out(count);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw error(fmt::format("cannot read the driver's binary {}: {}", path, std::strerror(errno)));
  auto n = ::pread(fd, out.data(), count, static_cast<off_t>(offset));
  int err = errno;
  ::close(fd);
  if (n < 0)
    throw error(fmt::format("cannot read the driver's binary {}: {}", path, std::strerror(err)));
  out.resize(static_cast<size_t>(n));
  return out;
}

uint64_t file_size(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return 0;
  auto end = ::lseek(fd, 0, SEEK_END);
  ::close(fd);
  return end < 0 ? 0 : static_cast<uint64_t>(end);
}

} // namespace hvactor::detail
