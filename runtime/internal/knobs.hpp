#pragma once

// Internal: every timing constant of hvactor, named once with the reason
// for its value. (Environment variable names: env.hpp.)

#include <chrono>
#include <cstddef>

namespace hvactor::knobs {

using namespace std::chrono_literals;

// -- connections (every process; identical everywhere) -----------------------

/// CAF heartbeat on every connection. Identical on every process: a
/// one-sided setting drops healthy peers. Also keeps bytes flowing twice a
/// second, which the TLS connection watchdog relies on.
inline constexpr auto heartbeat_interval = 500ms;

/// A peer silent this long is dropped: a frozen (SIGSTOPped) node leaves the
/// registry within 2.5 s.
inline constexpr auto connection_timeout = 2s;

/// Closing a published TLS port: a local request to the OpenSSL middleman,
/// answered at once unless the multiplexer is stuck.
inline constexpr auto unpublish_timeout = 5s;

/// A driver joining a cluster (connect, then the registry's first answer), or
/// the embedded cluster's node joining its in-process registry: a live head
/// answers in milliseconds; this bounds a head that accepts but never
/// answers (wrong service on the port, stalled TLS handshake).
inline constexpr auto join_timeout = 10s;

/// The TLS connection watchdog (CAF 0.17's OpenSSL module has no handshake
/// timeout): a connection that received nothing for this long is shut
/// down. Live peers send heartbeats twice a second, so only stalled
/// handshakes and silent intruders reach it.
inline constexpr auto watchdog_idle_limit = 10s;

/// Between two watchdog scans of /proc/net/tcp and TCP_INFO.
inline constexpr auto watchdog_period = 1s;

/// Connections kept per watched port; the idlest beyond it are shut down
/// (one process must not be exhausted by connection floods).
inline constexpr size_t watchdog_max_connections = 1024;

/// Certificates hvactor-node certs issues start this far in the past:
/// clock skew between the node that issues and the nodes that verify.
inline constexpr auto certificate_backdate = 1h;

// -- cluster membership ----------------------------------------------------------

/// A node rejoining under an id the registry still holds: how long the
/// registry asks the old agent whether it is alive before replacing it.
inline constexpr auto liveness_probe = 1s;

/// Pause between attempts of a node to rejoin a head that went away: a
/// restarted head sees its nodes back within about a second.
inline constexpr auto rejoin_interval = 1s;

/// One connect + join round trip of a node to its head.
inline constexpr auto node_join_timeout = 5s;

/// A stopping node gives each colocator this long to stop its workers
/// (leave_grace + stop_grace per process, reaping included).
inline constexpr auto node_colocator_stop = 30s;

// -- worker processes --------------------------------------------------------------

/// On `stop`, workers get this long to leave by themselves before SIGTERM.
inline constexpr auto leave_grace = 500ms;

/// Between SIGTERM and SIGKILL of a worker that is being stopped.
inline constexpr auto stop_grace = 2s;

// -- jobs (the coordinator) -------------------------------------------------------

/// Pause between placement attempts while resources are busy: frequent
/// enough that a job starts soon after another releases its nodes, rare
/// enough that 10,000-node cluster views (1 ms each) cost nothing.
inline constexpr auto placement_retry = 200ms;

/// Shortest bound of one placement request (reserve, has_bin, colocate):
/// a healthy node answers in about a millisecond; near the placement
/// deadline a request still gets this long rather than failing at once.
inline constexpr auto min_placement_request = 500ms;

/// Shipped binaries travel in chunks of this size: CAF messages must stay
/// far below 4 GiB, and mid-sized buffers keep the sender's memory flat.
inline constexpr size_t ship_chunk_bytes = size_t{4} << 20;

/// Chunks of one binary in flight per node: enough to keep loopback and a
/// LAN busy while the node hashes, few enough to bound memory (16 MiB).
inline constexpr size_t ship_chunks_in_flight = 4;

/// A worker's connection dropped: wait this long for its colocator's exit
/// report (exit code, signal, stderr tail), the error the user needs,
/// before failing the job with "lost the connection".
inline constexpr auto exit_report_grace = 1500ms;

/// A call's first failure waits this long before it answers: when one rank
/// dies, its peers often fail first (their collective breaks), and the dead
/// rank's exit report is the error the user needs (call_fanin).
inline constexpr auto call_error_grace = 250ms;

/// hvactor-run: after the first rank failed, the others get this long to
/// fail too (peers inside a collective with it) before the job ends and
/// the first failure is reported.
inline constexpr auto launch_failure_grace = 1s;

/// A colocator's stop takes up to settings.timeout for its workers plus
/// this for SIGTERM/SIGKILL and the reaping of every process.
inline constexpr auto colocator_stop_slack = 5s;

/// A worker process's bound to connect to its driver and register, when the
/// colocator did not pass HVACTOR_WORKER_TIMEOUT_MS (settings.timeout's
/// default).
inline constexpr int default_worker_timeout_ms = 30'000;

/// start()'s outer bound beyond placement and registration: the driver's
/// wait only catches a coordinator that stopped answering, never a slow job.
inline constexpr auto start_slack = 30s;

/// Shipping the binary is bounded per chunk only; start()'s outer bound
/// allows this rate for it (a slow but live link).
inline constexpr uint64_t shipping_bytes_per_second = 10'000'000;

/// shutdown() waits settings.timeout for the workers plus this for the
/// colocators to reap them and release their reservations.
inline constexpr auto shutdown_slack = 10s;

/// hvactor-run's main thread checks for SIGINT/SIGTERM this often while
/// the job runs: a signal stops every rank within about this long.
inline constexpr auto launcher_poll = 100ms;

// -- processes ------------------------------------------------------------------

/// An actor system that does not stop within this ends its process (exit 1):
/// a stuck actor must never hang a program's or a node's exit.
inline constexpr auto system_exit_limit = 10s;

/// hvactor-node on SIGTERM: its agent stops every colocator, which gives
/// workers leave_grace + stop_grace (2.5 s) before SIGKILL; the rest is slack.
inline constexpr auto node_stop_timeout = 15s;

} // namespace hvactor::knobs
