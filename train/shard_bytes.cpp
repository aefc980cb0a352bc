// Buffers for dataset shards: fresh memory with huge pages, and mapped
// files (internal/shard_bytes.hpp).

#include "train/internal/shard_bytes.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <array>
#include <filesystem>
#include <string_view>
#include <cstring>

#include <fmt/format.h>

#include "hvactor/errors.hpp"
#include "base/internal/log.hpp"

namespace fs = std::filesystem;

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

namespace {

constexpr std::string_view shard_dir_prefix = "hvactor-train-shards-";

// This process's pid namespace ("4026531836"): a pid is only a process in
// the namespace it was taken in, and containers may share a temp dir.
std::string pid_namespace() {
  std::array<char, 64> buf{};
  auto n = ::readlink("/proc/self/ns/pid", buf.data(), buf.size() - 1);
  std::string link{buf.data(), n > 0 ? static_cast<size_t>(n) : 0};
  auto open = link.find('['), close = link.find(']');
  return open != std::string::npos && close > open ? link.substr(open + 1, close - open - 1)
                                                   : std::string{"0"};
}

} // namespace

fs::path make_shard_dir(const fs::path& root) {
  sweep_shard_dirs(root);
  auto pattern = (root / fmt::format("{}{}-{}-XXXXXX", shard_dir_prefix, pid_namespace(),
                                     ::getpid()))
                   .string();
  if (::mkdtemp(pattern.data()) == nullptr)
    throw error(fmt::format("train: cannot create a folder for the shards under '{}': {}",
                            root.string(), std::strerror(errno)));
  return pattern;
}

size_t sweep_shard_dirs(const fs::path& root) {
  auto prefix = fmt::format("{}{}-", shard_dir_prefix, pid_namespace());
  size_t removed = 0;
  std::error_code ec;
  for (fs::directory_iterator it{root, ec}, end; !ec && it != end; it.increment(ec)) {
    auto name = it->path().filename().string();
    if (name.rfind(prefix, 0) != 0)
      continue;
    auto rest = name.substr(prefix.size());
    auto dash = rest.find('-');
    if (dash == 0 || dash == std::string::npos
        || rest.find_first_not_of("0123456789") != dash || dash > 9)
      continue;
    auto pid = static_cast<pid_t>(std::stol(rest.substr(0, dash)));
    // Alive (or another user's process): not ours to judge.
    if (pid == ::getpid() || ::kill(pid, 0) == 0 || errno != ESRCH)
      continue;
    struct stat st{};
    if (::lstat(it->path().c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::getuid())
      continue;
    std::error_code gone;
    fs::remove_all(it->path(), gone);
    if (!gone) {
      ++removed;
      log::info("train: removed {}, the shards of a driver that is gone (pid {})",
                it->path().string(), pid);
    }
  }
  return removed;
}

} // namespace hvactor::train
