#pragma once

// Internal: this process's collective operations counted for the head's
// dashboard and /metrics (tools/dashboard): per kind and backend, how many
// ran, the bytes of this rank's buffers and the seconds they took (from the
// backend call to its end; negotiation not included). The engine counts
// (engine_execute.cpp, engine_sync.cpp) and, in a process that hvactor
// started, sends the totals as an op_stats_event at most every
// op_stats_interval while operations run, and once more at shutdown. The
// rank's colocator reads the event off the rank's stderr (the one channel
// every rank has, SPMD ranks included), decodes it here (decode_op_totals)
// and hands the totals to the job's coordinator as a typed message.

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "collectives/engine/operation.hpp"

namespace hvactor::collectives {

inline constexpr auto op_stats_interval = std::chrono::seconds(5);

/// The event (hvactor::log::event) that carries a rank's totals in its
/// "ops" field.
inline constexpr const char* op_stats_event = "hvactor.collectives";

/// One kind of operation on one path, counted up.
struct op_total {
  /// allreduce, allgather, broadcast, ...
  std::string op;
  /// The backend that ran it: gloo, shm, nccl, ...
  std::string path;
  uint64_t count = 0;
  uint64_t bytes = 0;
  double seconds = 0;
};

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

/// This process's totals, in name order.
std::vector<op_total> op_totals();

/// The totals as the event's "ops" field carries them:
/// "kind/path=count,bytes,seconds;" per entry. This file writes and reads
/// the form; nothing else does.
std::string encode_op_totals(const std::vector<op_total>& totals);

/// The entries of an "ops" field, at most `max_entries` of them, names cut
/// to `max_name` bytes; a malformed entry is skipped (a rank's stderr is
/// the user's too).
std::vector<op_total> decode_op_totals(std::string_view ops, size_t max_entries, size_t max_name);

} // namespace hvactor::collectives
