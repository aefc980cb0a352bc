#pragma once

// Reading a small file a user named on a tool's command line (a host file,
// a cluster file, a config file) whole, without ever blocking on it: a FIFO,
// a device, a socket or a directory is refused before it is read (opening a
// FIFO for reading waits for a writer, for ever), and so is a file larger
// than the bound.

#include <cstdint>
#include <string>

namespace hvactor::tool {

/// The bytes of `path` (`what` names its role in messages: "the host
/// file"). Throws std::invalid_argument "<path>: cannot read <what>: <why>"
/// for a missing or unreadable file, a directory, anything but a regular
/// file, and more than `max_bytes` bytes (checked again while reading, for
/// a file that grows).
std::string read_text_file(const std::string& path, const std::string& what,
                           uintmax_t max_bytes);

} // namespace hvactor::tool
