#pragma once

// Internal: Horovod's stall inspector (stall_inspector.cc, written anew).
// The engine hands it, before each negotiation round, what this rank waits
// on and which ranks have not submitted each; it decides when to warn
// (every HOROVOD_STALL_CHECK_TIME_SECONDS while something waits that long)
// and when to give up (HOROVOD_STALL_SHUTDOWN_TIME_SECONDS, which makes the
// round abort on every rank). Plain code: the clock is an argument.

#include <chrono>
#include <string>
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

  stall_inspector(stall_settings s, int rank, int size) : s_(s), rank_(rank), size_(size) {
  }

  /// True when an operation submitted at `submitted` waited long enough
  /// that the warning should name the ranks it waits on (the engine then
  /// has its name announced instead of cached, so that every rank learns
  /// who submitted it).
  bool overdue(clock::time_point now, clock::time_point submitted) const {
    return !s_.disabled && now - submitted >= s_.warning;
  }

  verdict check(clock::time_point now, const std::vector<waiting>& ops);

  const stall_settings& settings() const noexcept {
    return s_;
  }

private:
  stall_settings s_;
  int rank_;
  int size_;
  clock::time_point last_warning_{};
};

} // namespace hvactor::collectives
