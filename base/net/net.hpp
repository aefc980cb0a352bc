#pragma once

#include <cstdint>
#include <string>
#include <utility>

/// Small address helpers shared by the runtime, hvactor-node and the
/// workers. No actors, no CAF.
namespace hvactor::net {

/// Splits "HOST:PORT" ("[::1]:PORT" for IPv6). Throws std::invalid_argument
/// naming `what` (e.g. "--address") when the text is malformed or the port
/// is not in 1..65535.
std::pair<std::string, uint16_t> parse_host_port(const std::string& text, const char* what);

/// True for 127.0.0.0/8, ::1 and "localhost".
bool is_loopback(const std::string& host);

/// True for 0.0.0.0 and :: (listen on every interface).
bool is_wildcard(const std::string& host);

/// The local address this machine uses to reach `host` (the source address
/// of a UDP socket connected to it; no packet is sent). Throws hvactor::error
/// when `host` does not resolve or no route exists.
std::string local_address_towards(const std::string& host);

/// This machine's host name.
std::string host_name();

} // namespace hvactor::net
