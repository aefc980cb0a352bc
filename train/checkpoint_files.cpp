// What the checkpoint stream and the same machine's copy share
// (internal/checkpoint_files.hpp).

#include "train/internal/checkpoint_files.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <system_error>

#include "base/internal/log.hpp"

namespace fs = std::filesystem;

namespace hvactor::train::checkpoint_files {

void check_not_shorter(int fd, uint64_t size, const std::string& what) {
  struct stat st{};
  if (::fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < size)
    fail(fmt::format("'{}' became shorter while it was read", what));
}

std::vector<listed> list_tree(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    fail(fmt::format("'{}' is not a directory", dir.string()));
  std::vector<listed> out;
  fs::recursive_directory_iterator it{dir, fs::directory_options::none, ec}, end;
  if (ec)
    fail(fmt::format("cannot read '{}': {}", dir.string(), ec.message()));
  for (; it != end; it.increment(ec)) {
    if (ec)
      fail(fmt::format("cannot read '{}': {}", dir.string(), ec.message()));
    auto st = it->symlink_status(ec);
    auto rel = fs::relative(it->path(), dir, ec).generic_string();
    if (fs::is_directory(st))
      out.push_back({rel, true, it->path()});
    else if (fs::is_regular_file(st))
      out.push_back({rel, false, it->path()});
    else
      log::warn("checkpoint: skipping '{}' (not a regular file or directory)",
                it->path().string());
  }
  if (ec)
    fail(fmt::format("cannot read '{}': {}", dir.string(), ec.message()));
  std::sort(out.begin(), out.end(),
            [](const listed& a, const listed& b) { return a.rel < b.rel; });
  return out;
}

} // namespace hvactor::train::checkpoint_files
