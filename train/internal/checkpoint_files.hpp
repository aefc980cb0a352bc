#pragma once

// Internal: what the checkpoint stream (checkpoint_stream.cpp) and the same
// machine's copy (checkpoint_copy.cpp) share: their errors and the listing
// of a checkpoint directory.

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "hvactor/errors.hpp"

namespace hvactor::train::checkpoint_files {

/// hvactor::error "checkpoint: `what`".
[[noreturn]] inline void fail(const std::string& what) {
  throw error("checkpoint: " + what);
}

/// The same, naming `path` and errno's reason.
[[noreturn]] inline void fail_errno(const std::string& what, const std::string& path) {
  fail(fmt::format("cannot {} '{}': {}", what, path, std::strerror(errno)));
}

/// ENXIO from SEEK_DATA means "only a hole is left" or "past the end": a
/// file that shrank since it was opened is an error, not zeros.
void check_not_shorter(int fd, uint64_t size, const std::string& what);

struct listed {
  std::string rel;
  bool is_dir;
  std::filesystem::path path;
};

/// Every directory and regular file under `dir`, directories before what
/// is in them; symbolic links and special files skipped with a warning.
std::vector<listed> list_tree(const std::filesystem::path& dir);

} // namespace hvactor::train::checkpoint_files
