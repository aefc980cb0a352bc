#include "base/internal/binary_cache.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include <fmt/format.h>

#include "hvactor/errors.hpp"
#include "base/internal/file_digest.hpp"

namespace hvactor {

namespace {

namespace fs = std::filesystem;

void check_hash(const std::string& hash) {
  if (hash.size() != 64 || hash.find_first_not_of("0123456789abcdef") != std::string::npos)
    throw std::invalid_argument(fmt::format("'{}' is not a SHA-256 in lowercase hex", hash));
}

} // namespace

binary_cache::binary_cache(std::string dir) : dir_(std::move(dir)) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec)
    throw error(fmt::format("cannot create the binary cache {}: {}", dir_, ec.message()));
  if (::chmod(dir_.c_str(), 0700) != 0)
    throw error(fmt::format("cannot make the binary cache {} private (chmod 0700): {}", dir_,
                            std::strerror(errno)));
}

bool binary_cache::has(const std::string& hash) const {
  check_hash(hash);
  struct stat st {};
  return ::stat(path(hash).c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string binary_cache::path(const std::string& hash) const {
  return dir_ + "/" + hash;
}

std::string binary_cache::part_path(const std::string& hash, const std::string& upload) const {
  check_hash(hash);
  if (upload.empty() || upload.find('/') != std::string::npos)
    throw std::invalid_argument(fmt::format("'{}' is not a valid upload id", upload));
  return fmt::format("{}/.{}.{}.part", dir_, hash, upload);
}

void binary_cache::write(const std::string& hash, const std::string& upload, uint64_t offset,
                         std::span<const char> bytes) {
  auto part = part_path(hash, upload);
  int fd = ::open(part.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0700);
  if (fd < 0)
    throw error(fmt::format("cannot write {}: {}", part, std::strerror(errno)));
  size_t done = 0;
  while (done < bytes.size()) {
    auto n = ::pwrite(fd, bytes.data() + done, bytes.size() - done,
                      static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      int err = errno;
      ::close(fd);
      throw error(fmt::format("cannot write {}: {}", part, std::strerror(err)));
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
}

void binary_cache::finish(const std::string& hash, const std::string& upload) {
  auto part = part_path(hash, upload);
  auto got = sha256_file(part);
  if (got != hash) {
    ::unlink(part.c_str());
    throw error(fmt::format("shipped binary is corrupt: SHA-256 {} but the driver announced {}",
                            got, hash));
  }
  if (::chmod(part.c_str(), 0700) != 0 || ::rename(part.c_str(), path(hash).c_str()) != 0) {
    int err = errno;
    ::unlink(part.c_str());
    throw error(fmt::format("cannot move {} into the binary cache: {}", part, std::strerror(err)));
  }
}

void binary_cache::abort(const std::string& hash, const std::string& upload) noexcept {
  try {
    ::unlink(part_path(hash, upload).c_str());
  } catch (const std::exception&) {
    // A malformed hash or upload id names no file.
  }
}

} // namespace hvactor
