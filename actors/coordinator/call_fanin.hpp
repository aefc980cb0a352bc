#pragma once

// Internal: how one call's answers from its ranks are collected, the one
// fan-in of the coordinator's calls (coordinator_calls.cpp) and of the
// driver's direct calls (job_session.cpp), and the errors a call ends with.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <caf/error.hpp>

namespace hvactor {

/// The answers of the calls in flight, each sent to some ranks and answered
/// once every one of them answered, in slot (world-rank) order, or with its
/// first failure.
///
/// The first failure is held back for `grace` before it answers: when one
/// rank dies, its peers usually fail first (their collective breaks), and
/// the dead rank's own exit report, which arrives a little later as a job
/// failure, is the error the user needs. A job failure answers every call
/// at once (close_all). Later answers and failures of a call that already
/// failed are ignored.
///
/// A plain class: the coordinator owns the response promises and the timer;
/// this decides when a call is answered and with what.
class call_fanin {
public:
  /// What the caller does after reporting an answer.
  enum class next {
    /// More answers are due.
    wait,
    /// Every slot answered: take_results(id) now.
    answer,
    /// This was the call's first failure: take_error(id) after grace().
    hold_error,
    /// The call is unknown (answered already) or already failed.
    ignore,
  };

  explicit call_fanin(std::chrono::milliseconds grace) : grace_(grace) {
  }

  /// Opens call `id`, expecting one answer per slot in [0, slots).
  void open(uint64_t id, size_t slots);

  /// Slot `slot` of call `id` answered with `payload`.
  next on_result(uint64_t id, size_t slot, std::vector<char> payload);

  /// Slot `slot` of call `id` failed with `err` (non-empty).
  next on_error(uint64_t id, caf::error err);

  /// The payloads of a completely answered call, in slot order; closes it.
  std::vector<std::vector<char>> take_results(uint64_t id);

  /// The held failure of call `id` once its grace passed; closes it. Empty
  /// when the call was answered meanwhile (close_all or take_*).
  caf::error take_error(uint64_t id);

  /// Closes every open call and returns their ids, to answer with a job
  /// failure.
  std::vector<uint64_t> close_all();

  /// How long a first failure is held (see the class comment).
  std::chrono::milliseconds grace() const noexcept {
    return grace_;
  }

  /// The slots of open call `id` that have not answered, in order (empty
  /// for an unknown call).
  std::vector<size_t> open_slots(uint64_t id) const;

  /// Number of open calls.
  size_t open_calls() const noexcept {
    return calls_.size();
  }

private:
  struct call {
    std::vector<std::optional<std::vector<char>>> slots;
    size_t remaining = 0;
    caf::error failure;
  };

  std::chrono::milliseconds grace_;
  std::map<uint64_t, call> calls_;
};

/// The error of a call on `who` ("rank 3 on node 'n1' (pid 4711)"; rank
/// `rank`, -1 when not known) whose function raised `what`.
caf::error call_raised(const std::string& who, const std::string& what, int rank);

/// ... whose answer was the error `why` (the worker is gone, ...).
caf::error call_failed(const std::string& who, const caf::error& why, int rank);

/// ... that did not answer within call_timeout (`limit`).
caf::error call_timed_out(const std::string& who, std::chrono::milliseconds limit, int rank);

} // namespace hvactor
