#pragma once

// Internal: timing and limits of worker processes, jobs and processes; one of
// the knob files (base/internal/knobs.hpp lists them), each value named once
// with the reason for it.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace hvactor::knobs {

using namespace std::chrono_literals;

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
/// The first retry comes sooner and the delay doubles up to
/// placement_retry: resources a job just gave back reach the registry a
/// few ms after its shutdown() returned (a tune trial starting on its
/// predecessor's gang waited a whole 200 ms).
inline constexpr auto placement_first_retry = 10ms;

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
/// The largest library a node copies into its cache from its own disk when
/// it has the driver's bytes at the driver's path (instead of a shipment).
inline constexpr uint64_t adopt_max_bytes = uint64_t{1} << 30;

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

/// hvactor-run after SIGTERM/SIGINT: the ranks get this long to stop
/// (leave_grace + stop_grace, reaping, slack) plus the teardown bound of a
/// cluster it brought up (-H, Slurm); then it exits anyway, the ranks with
/// it (PR_SET_PDEATHSIG or their colocator's watch on the driver).
inline constexpr auto launcher_stop_limit = 6s;

// -- processes ------------------------------------------------------------------

/// An actor system that does not stop within this ends its process (exit 1):
/// a stuck actor must never hang a program's or a node's exit.
inline constexpr auto system_exit_limit = 10s;

/// hvactor-node on SIGTERM: its agent stops every colocator, which gives
/// workers leave_grace + stop_grace (2.5 s) before SIGKILL; the rest is slack.
inline constexpr auto node_stop_timeout = 15s;

} // namespace hvactor::knobs
