// Buffers for dataset shards: fresh memory with huge pages, and mapped
// files (internal/shard_bytes.hpp).

#include "train/internal/shard_bytes.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "hvactor/errors.hpp"

namespace hvactor::train {

namespace {

constexpr size_t huge_page = size_t{2} << 20;

shared_bytes owned_mapping(void* base, size_t length, size_t size) {
  auto* first = static_cast<std::byte*>(base);
  return {std::shared_ptr<std::byte>{first, [length](std::byte* p) { ::munmap(p, length); }},
          size};
}

} // namespace

shared_bytes fresh_bytes(size_t size) {
  if (size == 0)
    return {std::make_shared<std::byte>(), 0};
  if (size > SIZE_MAX / 2)
    throw error(fmt::format("train: cannot map {} bytes for a dataset shard", size));
  // Room for the rounded size from a 2 MiB boundary: whole huge pages.
  // (The rounded size, not the size: a mapping of size + 2 MiB starting
  // 1.5 MiB before a boundary would end before the rounded body, and
  // unmapping the body would take someone else's pages.)
  size_t body = (size + huge_page - 1) & ~(huge_page - 1);
  size_t length = size >= huge_page ? body + huge_page : size;
  void* base = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED)
    throw error(fmt::format("train: cannot map {} bytes for a dataset shard: {}", size,
                            std::strerror(errno)));
  if (size < huge_page)
    return owned_mapping(base, length, size);
  auto at = reinterpret_cast<uintptr_t>(base);
  auto aligned = (at + huge_page - 1) & ~(huge_page - 1);
  // Give back the unaligned head and the tail past the rounded size.
  size_t head = aligned - at;
  if (head != 0)
    ::munmap(base, head);
  if (length - head > body)
    ::munmap(reinterpret_cast<void*>(aligned + body), length - head - body);
  // Advice only: without THP the pages are small, nothing else changes.
  ::madvise(reinterpret_cast<void*>(aligned), body, MADV_HUGEPAGE);
  return owned_mapping(reinterpret_cast<void*>(aligned), body, size);
}

shared_bytes map_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0)
    throw error(fmt::format("train: cannot open the shard file '{}': {}", path,
                            std::strerror(errno)));
  struct stat st{};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw error(fmt::format("train: the shard file '{}' is not a regular file", path));
  }
  auto size = static_cast<size_t>(st.st_size);
  if (size == 0) {
    ::close(fd);
    return {std::make_shared<std::byte>(), 0};
  }
  void* base = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
  int err = errno;
  ::close(fd);
  if (base == MAP_FAILED)
    throw error(fmt::format("train: cannot map the shard file '{}': {}", path,
                            std::strerror(err)));
  return owned_mapping(base, size, size);
}

std::pair<int, uint64_t> open_shard_file(const std::string& dir, uint32_t dataset, int32_t rank) {
  if (dir.empty() || rank < 0)
    throw error("no such dataset shard");
  auto path = fmt::format("{}/{}/{}", dir, dataset, rank);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0)
    throw error(fmt::format("no shard {} of dataset {} ({})", rank, dataset,
                            std::strerror(errno)));
  struct stat st{};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw error(fmt::format("the shard file '{}' is not a regular file", path));
  }
  return {fd, static_cast<uint64_t>(st.st_size)};
}

std::pair<uint64_t, std::vector<char>> read_shard_piece(const std::string& dir, uint32_t dataset,
                                                        int32_t rank, uint64_t offset, size_t max) {
  auto [fd, size] = open_shard_file(dir, dataset, rank);
  struct closer {
    int fd;
    ~closer() {
      ::close(fd);
    }
  } close_fd{fd};
  if (offset > size)
    throw error(fmt::format("offset {} past the {} bytes of shard {} of dataset {}",
                            offset, size, rank, dataset));
  std::vector<char> out(static_cast<size_t>(std::min<uint64_t>(max, size - offset)));
  size_t got = 0;
  while (got < out.size()) {
    auto n = ::pread(fd, out.data() + got, out.size() - got, static_cast<off_t>(offset + got));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      throw error(fmt::format("cannot read shard {} of dataset {}: {}", rank, dataset,
                              n == 0 ? "it became shorter" : std::strerror(errno)));
    got += static_cast<size_t>(n);
  }
  return {size, std::move(out)};
}

} // namespace hvactor::train
