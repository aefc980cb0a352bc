#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>

namespace hvactor {

/// A node's cache of shipped driver binaries, content-addressed by SHA-256:
/// `<dir>/<hash>`, mode 0700, in a directory of mode 0700 (private to the
/// node's user). Uploads write `<dir>/.<hash>.<upload>.part` and become
/// visible only after the hash was verified, through an atomic rename, so
/// concurrent uploads of one binary and a crash mid-upload are harmless.
/// Not thread-safe: one owner (the node agent).
class binary_cache {
public:
  /// Creates `dir` (and its parents) with mode 0700 if needed; throws
  /// hvactor::error when it cannot, or when `dir` is accessible to others.
  explicit binary_cache(std::string dir);

  /// True when the binary with this hash is cached.
  bool has(const std::string& hash) const;

  /// Where the binary with this hash lives (whether or not it is cached).
  std::string path(const std::string& hash) const;

  /// Writes one chunk of an upload at `offset`. Throws std::invalid_argument
  /// for a hash that is not 64 hex digits or an upload id with a '/'.
  void write(const std::string& hash, const std::string& upload, uint64_t offset,
             std::span<const char> bytes);

  /// Verifies the upload's SHA-256 and moves it into the cache. Throws
  /// hvactor::error naming both hashes on a mismatch (and drops the upload).
  void finish(const std::string& hash, const std::string& upload);

  /// Drops an unfinished upload, if any (never throws).
  void abort(const std::string& hash, const std::string& upload) noexcept;

  /// Caches a copy of this node's own file at `local` when its SHA-256 is
  /// `hash` (a library the driver found at the same path): true when the
  /// binary is cached afterwards. Anything but a readable regular file of at
  /// most `max_bytes` (a FIFO, a device, a directory) is false, without
  /// blocking. Throws std::invalid_argument for a malformed hash.
  bool adopt(const std::string& hash, const std::string& local, uint64_t max_bytes);

  /// A directory in which each cached library of `libraries` (file name ->
  /// SHA-256) appears under its name: `<dir>/lib/<digest of the list>/`,
  /// created once, atomically, for the worker's LD_LIBRARY_PATH. Throws
  /// std::invalid_argument for a name that is not a plain file name, and
  /// hvactor::error for a library that is not cached or a failed mkdir.
  std::string library_dir(const std::map<std::string, std::string>& libraries);

  const std::string& dir() const noexcept {
    return dir_;
  }

private:
  std::string part_path(const std::string& hash, const std::string& upload) const;
  std::string dir_;
};

} // namespace hvactor
