#pragma once

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

} // namespace hvactor
