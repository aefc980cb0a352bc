#pragma once

// Internal: Horovod's stall inspector (stall_inspector.cc, written anew).
// The engine hands it, after each negotiation round in which something
// waited long, what this rank waits on (operations, hvd::join()) and which
// ranks have not submitted each (that round learned them: see
// negotiator::pending()); it decides when to warn (every
// HOROVOD_STALL_CHECK_TIME_SECONDS while something waits that long) and
// when to give up (HOROVOD_STALL_SHUTDOWN_TIME_SECONDS, which makes the
// next round abort on every rank). Plain code: the clock is an argument.

#include <chrono>
#include <string>
#include <utility>
#include <vector>

namespace hvactor::collectives {

/// The stall inspector's knobs (hvd::init reads them).
struct stall_settings {
  /// HOROVOD_STALL_CHECK_DISABLE=1: never warn, never give up.
  bool disabled = false;
  /// HOROVOD_STALL_CHECK_TIME_SECONDS: wait this long before warning, and
  /// between warnings.
  std::chrono::seconds warning{60};
  /// HOROVOD_STALL_SHUTDOWN_TIME_SECONDS: fail every rank once something
  /// waited this long; 0: never.
  std::chrono::seconds shutdown{0};
  /// The job's ranks of the engine's ranks (a process set's members, in
  /// its order), so that messages name ranks as the user numbers them;
  /// empty: the job's own engine.
  std::vector<int> members;
  /// The process set (0: the job's).
  int process_set = 0;
};

/// Decides warnings and shutdowns from what waits. Not thread-safe (the
/// round driver calls it).
class stall_inspector {
public:
  using clock = std::chrono::steady_clock;

  /// One operation this rank waits on.
  struct waiting {
    std::string name;
    /// The ranks that have not submitted it (when known).
    std::vector<int> missing;
    bool known = false;
    clock::time_point submitted;
    /// hvd::join(): `missing` are the ranks that have not joined.
    bool join = false;
  };

  /// What check() found.
  struct verdict {
    /// A warning to print and send as an event; empty: none now.
    std::string warning;
    /// Give up: every rank fails what it waits on with `message`.
    bool shutdown = false;
    std::string message;
    /// The names and missing ranks, for the event ("grad/a:1,2;x:?").
    std::string summary;
  };

  /// `rank` of `size` in the engine's numbering (a process set's own).
  stall_inspector(stall_settings s, int rank, int size)
    : s_(std::move(s)), rank_(rank), size_(size) {
  }

  /// True when an operation submitted at `submitted` waited long enough
  /// that the warning should name the ranks it waits on (the engine then
  /// has its name announced instead of cached, so that every rank learns
  /// who submitted it).
  bool overdue(clock::time_point now, clock::time_point submitted) const {
    return !s_.disabled && now - submitted >= s_.warning;
  }

  /// Warns at most once per interval; past the shutdown time, gives up
  /// (and stays so: gives_up()). Ranks in `ops` are the engine's; the
  /// texts name the job's ranks.
  verdict check(clock::time_point now, const std::vector<waiting>& ops);

  /// check() gave up: the next round asks every rank to abort, and every
  /// rank fails with shutdown_message().
  bool gives_up() const noexcept {
    return !shutdown_message_.empty();
  }
  const std::string& shutdown_message() const noexcept {
    return shutdown_message_;
  }

  /// This rank in the job's numbering (events carry it).
  int job_rank() const noexcept {
    return job_rank_of(rank_);
  }

  const stall_settings& settings() const noexcept {
    return s_;
  }

private:
  int job_rank_of(int r) const noexcept {
    return s_.members.empty() ? r : s_.members[static_cast<size_t>(r)];
  }
  std::string who() const;
  std::string listed(const std::vector<const waiting*>& stalled, bool summary) const;

  stall_settings s_;
  int rank_;
  int size_;
  clock::time_point last_warning_{};
  std::string shutdown_message_;
};

} // namespace hvactor::collectives
