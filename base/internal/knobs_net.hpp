#pragma once

// Internal: timing and limits of connections and cluster membership; one of the
// knob files (base/internal/knobs.hpp lists them), each value named once with
// the reason for it.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "base/internal/knobs_jobs.hpp"

namespace hvactor::knobs {

using namespace std::chrono_literals;

// -- connections (every process; identical everywhere) -----------------------

/// CAF heartbeat on every connection, ticking at the same instants in every
/// process (base/net/heartbeat.hpp). Identical everywhere: a one-sided
/// setting drops healthy peers. A tick costs a process 3 wake-ups (20-90 us
/// each) plus one per peer whose heartbeat arrives alone: at 1 s, each
/// process at its own phase, an idle 32-node cluster with a job of 32 ranks
/// spent about 3.8 % of a core on them (its driver 10 ms/s). At 128 nodes
/// with an idle job the whole cluster used 6.1-6.4 % of a core at 2 s, 5.0 %
/// at 3 s and 3.9 % at 4 s (docs/performance/scale.md).
inline constexpr auto heartbeat_interval = 4s;

/// A peer silent this long is dropped: two missed heartbeats and a second
/// of slack, so a frozen (SIGSTOPped) node or a cut link is dropped 8-12 s
/// after it stopped (the timeout, checked at a tick). Ray's health check
/// takes about 30 s by default, a Gloo op timeout 30 s. At 2 s with a 500 ms
/// heartbeat, a driver starting 64 ranks on 2 cores fell that far behind
/// its own sockets and dropped live nodes.
inline constexpr auto connection_timeout = 9s;

/// Closing a published TLS port: a local request to the OpenSSL middleman,
/// answered at once unless the multiplexer is stuck.
inline constexpr auto unpublish_timeout = 5s;

/// A driver joining a cluster (connect, then the registry's first answer), or
/// the embedded cluster's node joining its in-process registry: a live head
/// answers in milliseconds; this bounds a head that accepts but never
/// answers (wrong service on the port, stalled TLS handshake).
inline constexpr auto join_timeout = 10s;

/// A connect whose caller gave up (its timeout passed) goes on in CAF's
/// middleman; transport::connect waits this long more for it to finish, so
/// that the caller may tear its actor system down (a handshake completing
/// during ~actor_system could hang it for ever). A live peer finishes in
/// milliseconds; a silent one is torn down pending, which is safe.
inline constexpr auto connect_settle = 1s;

/// The TLS connection watchdog (CAF 0.17's OpenSSL module has no handshake
/// timeout): a connection that received nothing for this long is shut
/// down. Live peers send heartbeats every heartbeat_interval (4 s), so only
/// stalled handshakes and silent intruders reach it.
inline constexpr auto watchdog_idle_limit = 10s;

/// Between two watchdog scans of /proc/net/tcp and TCP_INFO.
inline constexpr auto watchdog_period = 2s;

/// Connections kept per watched port; the idlest beyond it are shut down
/// (one process must not be exhausted by connection floods).
inline constexpr size_t watchdog_max_connections = 1024;

/// Largest message a peer may send to a published plain port (the BASP
/// payload its header announces); a larger announcement closes the
/// connection before anything is allocated (port_guard). Shipped binaries
/// travel in 4 MiB chunks; results of remote calls are the large ones.
/// HVACTOR_MAX_MESSAGE_BYTES overrides it.
inline constexpr uint32_t max_message_bytes = uint32_t{1} << 30;

/// Connections kept per published port; beyond it new ones are refused
/// (plain ports; the TLS watchdog applies the same cap to TLS ports).
inline constexpr size_t max_connections_per_port = watchdog_max_connections;

/// Certificates hvactor-node certs issues start this far in the past:
/// clock skew between the node that issues and the nodes that verify.
inline constexpr auto certificate_backdate = 1h;

/// The longest single wait any timer or receive is given: longer user
/// timeouts (up to milliseconds::max(), meaning "never") are clamped here,
/// since CAF adds a timeout to the clock in nanoseconds and an overflow
/// there fires at once. 10 years is "never" for a job, and sums of a few
/// such bounds still fit in nanoseconds.
inline constexpr auto longest_wait = std::chrono::hours{24 * 365 * 10};

// -- cluster membership ----------------------------------------------------------

/// A node rejoining under an id the registry still holds: how long the
/// registry asks the old agent whether it is alive before replacing it.
inline constexpr auto liveness_probe = 1s;

/// Pause between attempts of a node to rejoin a head that went away: a
/// restarted head sees its nodes back within about a second.
inline constexpr auto rejoin_interval = 1s;

/// One rejoin attempt of a node (connect + join): a live head answers in
/// milliseconds; a connection the head already dropped (the node was
/// frozen) must fail fast so that the next attempt, on a fresh connection,
/// starts at the next rejoin_interval. Below rejoin_interval.
inline constexpr auto rejoin_attempt_timeout = 800ms;

/// One connect + join round trip of a node to its head.
inline constexpr auto node_join_timeout = 5s;

/// A stopping node gives each colocator this long to stop its workers
/// (leave_grace + stop_grace per process, reaping included).
inline constexpr auto node_colocator_stop = 30s;

} // namespace hvactor::knobs
