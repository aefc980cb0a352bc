#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/expected.hpp>


namespace hvactor::tls {
struct config;
} // namespace hvactor::tls

/// How hvactor processes open CAF connections: through CAF's OpenSSL module
/// when the process has a TLS identity (mutual TLS,
/// docs/development/platform-notes.md, "CAF TLS: mutual TLS is enforced"),
/// else through the plain middleman. One process never mixes the two: an
/// io::publish beside openssl::publish would open an unauthenticated door.
namespace hvactor::transport {

/// Loads the OpenSSL module and its certificate, key and CA into `cfg` when
/// `tls.enabled()`; the caller validated the files (tls::validate) first.
void configure(caf::actor_system_config& cfg, const tls::config& tls);

/// Sets the port guard's policy for this process (internal/port_guard.hpp)
/// from its transport: without TLS, only processes of this user may connect
/// on loopback (unless `insecure`) and oversized messages are refused;
/// under TLS, only the connection cap. Throws when the guard is not in
/// place (this library lost symbol lookup to libc). Drivers and nodes call
/// it before they publish; worker processes keep the default.
void guard_ports(const tls::config& tls, bool insecure);

/// True when `sys` talks mutual TLS.
bool secure(caf::actor_system& sys);

/// The actor that answers `connect_atom(host, port)`: OpenSSL's middleman
/// actor under TLS, the plain one otherwise. Request it with a timeout
/// (openssl::remote_actor has none).
caf::actor connector(caf::actor_system& sys);

/// Publishes `whom` on `bind:port` (port 0 picks one) with SO_REUSEADDR.
caf::expected<uint16_t> publish(caf::actor_system& sys, const caf::actor& whom, uint16_t port,
                                const std::string& bind);

/// Closes `port` for `whom`.
void unpublish(caf::actor_system& sys, const caf::actor& whom, uint16_t port);

/// Blocking connect (API edge only, never in a handler), bounded by
/// `timeout`: the actor published at host:port, or the error. After a
/// timeout it waits up to knobs::connect_settle more for the middleman to
/// finish the abandoned connect, so that `sys` may be destroyed at once.
caf::expected<caf::strong_actor_ptr> connect(caf::actor_system& sys, const std::string& host,
                                             uint16_t port, std::chrono::milliseconds timeout);

} // namespace hvactor::transport
