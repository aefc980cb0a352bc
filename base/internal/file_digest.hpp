#pragma once

#include <memory>
#include <span>
#include <string>

/// SHA-256 digests, as lowercase hex, for checking that a file shipped to a
/// node arrived intact.
namespace hvactor {

/// SHA-256 of the bytes of the file at `path`, read in 1 MiB chunks. Throws
/// hvactor::error naming the path and the system's reason on failure.
std::string sha256_file(const std::string& path);

/// SHA-256 of `bytes`.
std::string sha256_bytes(std::span<const char> bytes);

/// SHA-256 of bytes that come in pieces (a stream of chunks).
class sha256_stream {
public:
  sha256_stream();
  ~sha256_stream();
  sha256_stream(sha256_stream&&) noexcept;
  sha256_stream& operator=(sha256_stream&&) noexcept;

  void update(std::span<const char> bytes);
  /// The digest of everything so far, as lowercase hex; the stream then
  /// starts again from nothing.
  std::string finish();

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

} // namespace hvactor
