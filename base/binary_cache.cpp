#include "base/internal/binary_cache.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "hvactor/errors.hpp"
#include "base/internal/file_digest.hpp"
#include "base/internal/program_libraries.hpp"

namespace hvactor {

namespace {

namespace fs = std::filesystem;

void check_hash(const std::string& hash) {
  if (hash.size() != 64 || hash.find_first_not_of("0123456789abcdef") != std::string::npos)
    throw std::invalid_argument(fmt::format("'{}' is not a SHA-256 in lowercase hex", hash));
}

// A temporary directory's links and then the directory (all ours).
void remove_links(const std::string& dir, const std::map<std::string, std::string>& libraries) {
  for (auto& [name, hash] : libraries)
    ::unlink((dir + "/" + name).c_str());
  ::rmdir(dir.c_str());
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

bool binary_cache::adopt(const std::string& hash, const std::string& local, uint64_t max_bytes) {
  if (has(hash))
    return true;
  if (local.empty() || local[0] != '/')
    return false;
  int fd = ::open(local.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0)
    return false;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) > max_bytes) {
    ::close(fd);
    return false;
  }
  static std::atomic<uint64_t> adoptions{0};
  auto upload = fmt::format("adopt-{}-{}", ::getpid(), adoptions++);
  std::vector<char> buf(size_t{1} << 20);
  uint64_t offset = 0;
  try {
    for (;;) {
      auto n = ::read(fd, buf.data(), buf.size());
      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0)
        throw error(fmt::format("cannot read {}: {}", local, std::strerror(errno)));
      if (n == 0 || offset + static_cast<uint64_t>(n) > max_bytes)
        break;
      write(hash, upload, offset, std::span<const char>{buf.data(), static_cast<size_t>(n)});
      offset += static_cast<uint64_t>(n);
    }
    ::close(fd);
    fd = -1;
    finish(hash, upload); // verifies the digest
    return true;
  } catch (const error&) {
    if (fd >= 0)
      ::close(fd);
    abort(hash, upload);
    return false;
  }
}

std::string binary_cache::library_dir(const std::map<std::string, std::string>& libraries) {
  std::string list;
  for (auto& [name, hash] : libraries) {
    if (!valid_library_name(name))
      throw std::invalid_argument(fmt::format("'{}' is not a library's file name", name));
    if (!has(hash))
      throw error(fmt::format("library {} (SHA-256 {}) is not in the binary cache {}", name, hash,
                              dir_));
    list += name + "=" + hash + "\n";
  }
  auto root = dir_ + "/lib";
  if (::mkdir(root.c_str(), 0700) != 0 && errno != EEXIST)
    throw error(fmt::format("cannot create {}: {}", root, std::strerror(errno)));
  auto final_dir = root + "/" + sha256_bytes(list);
  struct stat st {};
  if (::lstat(final_dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    return final_dir;
  std::string tmp = root + "/.new.XXXXXX";
  if (::mkdtemp(tmp.data()) == nullptr)
    throw error(fmt::format("cannot create a directory in {}: {}", root, std::strerror(errno)));
  for (auto& [name, hash] : libraries) {
    if (::symlink(("../../" + hash).c_str(), (tmp + "/" + name).c_str()) != 0) {
      int err = errno;
      remove_links(tmp, libraries);
      throw error(fmt::format("cannot link {} into {}: {}", name, tmp, std::strerror(err)));
    }
  }
  if (::rename(tmp.c_str(), final_dir.c_str()) != 0) {
    // Another job linked the same list first: its directory is the same.
    int err = errno;
    remove_links(tmp, libraries);
    if (::lstat(final_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      throw error(fmt::format("cannot create {}: {}", final_dir, std::strerror(err)));
  }
  return final_dir;
}

} // namespace hvactor
