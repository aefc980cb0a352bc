#pragma once

// Internal: this process's collective operations counted for the head's
// dashboard and /metrics (tools/dashboard): per kind and backend, how many
// ran, the bytes of this rank's buffers and the seconds they took (from the
// backend call to its end; negotiation not included). The engine counts
// (engine_execute.cpp, engine_sync.cpp) and, in a process that hvactor
// started, sends the totals as an "hvactor.collectives" event at most every
// op_stats_interval while operations run, and once more at shutdown; the
// job's coordinator keeps them (and does not pass them to on_event).

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "collectives/internal/operation.hpp"

namespace hvactor::collectives {

inline constexpr auto op_stats_interval = std::chrono::seconds(5);

/// Counts one operation that ran from `began` to `ended`; thread-safe. It
/// reads no clock of its own and takes one lock (a synchronous 4-byte
/// allreduce in shared memory takes about a microsecond in all).
void count_op(op_kind kind, std::string_view path, uint64_t bytes,
              std::chrono::steady_clock::time_point began,
              std::chrono::steady_clock::time_point ended);

/// Sends the totals as an event when something was counted since the last
/// one and `interval` passed since it (0: now), in a process hvactor
/// started (HVACTOR_RENDEZVOUS_SCOPE set); otherwise nothing.
void report_op_stats(std::chrono::steady_clock::duration interval = op_stats_interval);

/// The totals as the event carries them: "kind/path=count,bytes,seconds;"
/// per kind and path, in name order.
std::string encode_op_stats();

} // namespace hvactor::collectives
