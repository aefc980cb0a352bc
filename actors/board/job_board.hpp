#pragma once

// Internal: the jobs and training runs the head's registry keeps for the
// dashboard (board_types.hpp), bounded: every live job, the last
// board_limits::max_finished_jobs finished ones, the last max_runs runs of
// at most max_points reports each (thinned by halves, the first and the
// latest kept), metric names and lines cut to their bounds (as UTF-8,
// distinct names kept distinct: board_text).

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <string_view>

#include "actors/board/board_types.hpp"

namespace hvactor {

class job_board {
public:
  /// A coordinator's latest view of its job (`driver`: an id of the sender,
  /// to mark its jobs lost when it goes away).
  void update(proto::job_view view, uint64_t driver);

  /// A training run's report.
  void report(proto::train_point point);

  /// The sender `driver` went away: its jobs that had not ended are lost.
  /// Returns whether it had any.
  bool driver_lost(uint64_t driver, int64_t now_ms);

  /// Whether `driver` sent a job still live here.
  bool knows(uint64_t driver) const;

  proto::board snapshot() const;

private:
  struct entry {
    proto::job_view view;
    uint64_t driver = 0;
    uint64_t order = 0;
  };
  void trim();

  std::map<std::string, entry> jobs_;
  std::deque<proto::train_run> runs_;
  uint64_t next_ = 0;
};

/// Whether a job in this state has ended.
bool job_ended(const std::string& state);

/// `s` as well-formed UTF-8 of at most `max` bytes: each byte of an invalid
/// sequence becomes U+FFFD, and a cut falls between characters. With
/// `distinct`, text that had to change ends in "~" and 16 hex digits of a
/// hash of all of `s`, so that names differing anywhere (past the cut, or
/// in bytes that became U+FFFD) stay different.
std::string board_text(std::string_view s, size_t max, bool distinct = false);

} // namespace hvactor
