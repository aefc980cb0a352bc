// The same machine's route for a checkpoint (internal/transfer.hpp): the
// driver copies rank 0's directory, a worker the checkpoint to resume from
// (internal/checkpoint_stream.hpp, copy_checkpoint_dir).

#include "train/internal/checkpoint_stream.hpp"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "hvactor/errors.hpp"
#include "train/internal/checkpoint_files.hpp"

namespace fs = std::filesystem;

namespace hvactor::train {

using namespace checkpoint_files;

namespace {

struct fd_closer {
  int fd;
  ~fd_closer() {
    if (fd >= 0)
      ::close(fd);
  }
};

// Copies [at, at + n) of `in` to the same place in `out` through a 1 MiB
// buffer: where copy_file_range cannot (another file system: EXDEV).
void copy_range_buffered(int in, int out, uint64_t at, uint64_t n, const std::string& what) {
  std::vector<char> buf(std::min<uint64_t>(n, uint64_t{1} << 20));
  while (n > 0) {
    auto got = ::pread(in, buf.data(), std::min<uint64_t>(n, buf.size()), static_cast<off_t>(at));
    if (got < 0 && errno == EINTR)
      continue;
    if (got < 0)
      fail_errno("read", what);
    if (got == 0)
      fail(fmt::format("'{}' became shorter while it was copied", what));
    for (ssize_t put = 0; put < got;) {
      auto w = ::pwrite(out, buf.data() + put, static_cast<size_t>(got - put),
                        static_cast<off_t>(at) + put);
      if (w < 0 && errno == EINTR)
        continue;
      if (w < 0)
        fail_errno("write the copy of", what);
      put += w;
    }
    at += static_cast<uint64_t>(got);
    n -= static_cast<uint64_t>(got);
  }
}

// Copies [at, at + n) of `in` to the same place in `out`, in the kernel
// where it can.
void copy_range(int in, int out, uint64_t at, uint64_t n, const std::string& what) {
  auto from = static_cast<off_t>(at), to = static_cast<off_t>(at);
  while (n > 0) {
    auto chunk = static_cast<size_t>(std::min<uint64_t>(n, uint64_t{1} << 30));
    auto got = ::copy_file_range(in, &from, out, &to, chunk, 0);
    if (got < 0 && errno == EINTR)
      continue;
    if (got < 0 && (errno == EXDEV || errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP))
      return copy_range_buffered(in, out, static_cast<uint64_t>(from), n, what);
    if (got < 0)
      fail_errno("copy", what);
    if (got == 0)
      fail(fmt::format("'{}' became shorter while it was copied", what));
    n -= static_cast<uint64_t>(got);
  }
}

// Opens `rel` under the directory `root` without following a symbolic
// link in any component (openat2's RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH):
// a directory swapped for a link after the listing cannot lead elsewhere.
int open_beneath(int root, const std::string& rel, uint64_t flags) {
  open_how how{};
  how.flags = flags | O_CLOEXEC | O_NOFOLLOW;
  how.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH;
  return static_cast<int>(::syscall(SYS_openat2, root, rel.c_str(), &how, sizeof how));
}

uint64_t copy_one_file(int root, const fs::path& src, const std::string& rel,
                       const fs::path& dst) {
  fd_closer in{open_beneath(root, rel, O_RDONLY | O_NONBLOCK)};
  if (in.fd < 0)
    fail_errno("read", src.string());
  struct stat st{};
  if (::fstat(in.fd, &st) != 0 || !S_ISREG(st.st_mode))
    fail(fmt::format("'{}' is not a regular file any more", src.string()));
  if (st.st_uid != ::geteuid())
    fail(fmt::format("'{}' belongs to uid {}, not to the driver's user {}", src.string(),
                     st.st_uid, ::geteuid()));
  // The source's permissions, never wider.
  fd_closer out{::open(dst.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
                       st.st_mode & 0777)};
  if (out.fd < 0)
    fail_errno("create", dst.string());
  auto size = static_cast<uint64_t>(st.st_size);
  // Data segments only; a file system without SEEK_DATA has one.
  uint64_t at = 0;
  while (at < size) {
    auto data = ::lseek(in.fd, static_cast<off_t>(at), SEEK_DATA);
    if (data < 0 && errno == ENXIO) {
      check_not_shorter(in.fd, size, src.string());
      break;
    }
    uint64_t begin = data < 0 ? at : static_cast<uint64_t>(data);
    auto hole = ::lseek(in.fd, static_cast<off_t>(begin), SEEK_HOLE);
    uint64_t end = hole < 0 ? size : std::min<uint64_t>(static_cast<uint64_t>(hole), size);
    if (begin >= end)
      break;
    copy_range(in.fd, out.fd, begin, end - begin, src.string());
    at = end;
  }
  if (::ftruncate(out.fd, static_cast<off_t>(size)) != 0 || ::fsync(out.fd) != 0)
    fail_errno("write", dst.string());
  return size;
}

} // namespace

uint64_t copy_checkpoint_dir(const fs::path& src, const fs::path& dst) {
  auto entries = list_tree(src);
  fd_closer root{::open(src.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW)};
  struct stat top{};
  if (root.fd < 0 || ::fstat(root.fd, &top) != 0 || top.st_uid != ::geteuid())
    fail(fmt::format("'{}' is not a directory of the driver's user {}", src.string(),
                     ::geteuid()));
  if (::mkdir(dst.c_str(), 0755) != 0)
    fail_errno("create", dst.string());
  uint64_t total = 0;
  for (auto& e : entries) {
    auto to = dst / e.rel;
    if (!e.is_dir) {
      total += copy_one_file(root.fd, e.path, e.rel, to);
    } else if (::mkdir(to.c_str(), 0755) != 0) {
      fail_errno("create", to.string());
    }
  }
  fd_closer dir{::open(dst.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  if (dir.fd >= 0)
    ::fsync(dir.fd);
  return total;
}


} // namespace hvactor::train
