#pragma once

// The rendezvous and full-mesh knobs (hvd::init's store traffic and Gloo's
// connections), in one place; the knob files hold the rest.

#include <chrono>

namespace hvactor::knobs {

using namespace std::chrono_literals;

/// A rendezvous wait that every rank of the job takes part in (the mesh's
/// cards, a process set's) is bounded by the job's timeout plus this much
/// per rank: the store answers N ranks, and N ranks start, one after the
/// other on a loaded machine.
inline constexpr auto rendezvous_wait_per_rank = 100ms;

/// Connecting one pair of the full mesh: a transient error (a route or a
/// neighbour entry not there yet, a refused or timed-out connect while a
/// peer's node is busy) is retried after a pause that starts here and
/// doubles up to the cap, each one drawn at random within +-50 % (so that
/// ranks that failed together do not retry together), at most this many
/// attempts and never past the rendezvous deadline.
inline constexpr auto mesh_retry_first_pause = 50ms;
inline constexpr auto mesh_retry_longest_pause = 2s;
inline constexpr int mesh_connect_attempts = 12;

/// Set (to anything but 0): every rendezvous store request of the process
/// prints its time and outcome on stderr ("hvactor rendezvous trace: ...").
inline constexpr const char* rendezvous_trace_env = "HVACTOR_RENDEZVOUS_TRACE";

} // namespace hvactor::knobs
