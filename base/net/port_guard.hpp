#pragma once

// Internal: who may connect to a plain (non-TLS) CAF port, and what one
// connection may make the process allocate.
//
// CAF 0.17's plain transport accepts every peer and trusts the BASP header
// of each message: a 32-byte header announcing a 4 GiB payload makes the
// receiver allocate 4 GiB before a byte of it arrives. The guard sits below
// CAF, at the socket calls it makes (accept, recv, connect, close; this
// library interposes them, as openssl_error_queue.cpp does for libssl):
//
// - accept on a published port: a peer on loopback must be a process of
//   this process's user (the kernel's owner of the peer's socket, from
//   /proc/net/tcp), or it is closed before CAF sees it; at most
//   knobs::max_connections_per_port connections per port. A connection its
//   peer already reset is closed without a lookup, and each refusal ends
//   that accept call, so that a flood of them never keeps CAF's event loop
//   from its heartbeats.
// - recv on an accepted connection: the BASP framing is followed and a
//   header announcing more than max_message_bytes closes the connection
//   before CAF allocates anything; so does a handshake header announcing
//   no payload, which CAF 0.17.6 dereferences as a null payload (any peer
//   could crash the process with 32 bytes).
// - connect (drivers and nodes joining a head): a loopback port must belong
//   to this user too, so that another user cannot stand in for a head.
//
// Under TLS the guard only counts connections: the handshake authenticates
// peers, and the bytes on the wire are ciphertext.

#include <sys/socket.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <optional>


namespace hvactor::port_guard {

struct policy {
  /// Refuse loopback peers (and loopback servers) of other users. Off with
  /// --insecure.
  bool same_user = true;
  /// Follow the BASP framing and refuse oversized messages (off under TLS).
  bool check_frames = true;
  /// Largest BASP payload a peer may announce.
  uint32_t max_message_bytes = 0;
  /// Connections kept per published port.
  size_t max_connections = 0;
  /// Also check outgoing loopback connects (drivers and nodes; workers
  /// connect to their own driver and leave this off).
  bool check_connects = false;
};

/// The process's policy (process-wide; set before the first publish). The
/// default: same_user and check_frames on, check_connects off, the limits
/// from knobs.
void configure(const policy& p);

/// The policy in force.
policy current();

/// Guards connections accepted on `port` from now on; `basp`: they carry
/// CAF's BASP and get the framing check too (false: another protocol, such
/// as the dashboard's HTTP, with the accept-time checks only).
void watch(uint16_t port, bool basp = true);

/// Stops guarding `port` (connections already accepted keep their checks).
void unwatch(uint16_t port);

/// What the guard refused so far (for tests and logs).
struct counters {
  uint64_t other_user = 0;
  uint64_t oversized = 0;
  uint64_t over_cap = 0;
  uint64_t connects_refused = 0;
  uint64_t empty_handshakes = 0;
};
counters refused();

/// The user owning the TCP socket whose local end is `local` and whose
/// remote end is `remote` (/proc/net/tcp and tcp6; IPv4-mapped addresses
/// match their IPv4 form); nullopt when there is none.
std::optional<uid_t> socket_owner(const sockaddr* local, const sockaddr* remote);

/// True for 127.0.0.0/8, ::1 and ::ffff:127.0.0.0/104.
bool is_loopback(const sockaddr* addr);

} // namespace hvactor::port_guard
