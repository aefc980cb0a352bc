#pragma once

// The elastic driver's decisions as plain code (no actors, no I/O), after
// Horovod's runner/elastic (discovery.py HostManager/HostState, hosts.py
// get_host_assignments) with hvactor's rule for rank 0: it is the oldest
// surviving worker that holds the job's state, so a new world never needs a
// host of the previous set (horovod#3197) while any worker of it survives.

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "hvactor/discovery.hpp"
#include "actors/placement/rank_planner.hpp"

namespace hvactor::elastic {

using clock = std::chrono::steady_clock;

/// Hosts whose worker failed (Horovod's HostState). Without a cooldown range
/// a failed host is blacklisted for good; with (lower, upper) seconds, its
/// n-th failure (n = 0, 1, ...) blacklists it for
/// lower * 2^n + U(0,1) * lower seconds, clamped to [lower, upper].
class host_blacklist {
public:
  explicit host_blacklist(std::optional<std::pair<int, int>> cooldown_range = {},
                          uint64_t seed = std::random_device{}());

  /// A worker on `host` failed at `now`.
  void failed(const std::string& host, clock::time_point now);

  /// Whether `host` may not be used at `now`.
  bool blacklisted(const std::string& host, clock::time_point now) const;

  /// When `host` may be used again; nullopt when not blacklisted, or when
  /// blacklisted for good (see forever()).
  std::optional<clock::time_point> until(const std::string& host) const;

  /// Whether `host` is blacklisted for good (no cooldown range).
  bool forever(const std::string& host) const;

  /// Failures recorded for `host`.
  int failures(const std::string& host) const;

  /// The cooldown of the n-th failure for a draw u in [0, 1), in seconds.
  static double cooldown_seconds(std::pair<int, int> range, int n, double u);

private:
  struct entry {
    int failures = 0;
    clock::time_point until;
  };
  std::optional<std::pair<int, int>> range_;
  std::mt19937_64 rng_;
  std::map<std::string, entry> hosts_;
};

/// Discovered hosts in assignment order: hosts seen before keep their old
/// order, new hosts are appended in discovery order ("oldest hosts are
/// assigned lower ranks", discovery.py order_available_hosts).
class host_order {
public:
  /// `found` in assignment order; remembers new hosts.
  std::vector<host_slots> order(const std::vector<host_slots>& found);

private:
  std::vector<std::string> seen_;
};

/// A worker process of the job as the planner sees it.
struct member {
  /// Unique per job, increasing with start order (older = smaller).
  int64_t id = 0;
  std::string host;
  /// Whether it joined a generation that formed, i.e. holds the job's state.
  bool has_state = false;
};

/// One worker's place in a planned world.
struct seat {
  /// A member's id; -1 for a new worker still to start.
  int64_t id = -1;
  std::string host;
  rank_layout layout;
};

/// The next world.
struct world_plan {
  /// In world-rank order (seats[r].layout.rank == r).
  std::vector<seat> seats;
  /// Members that are not in the new world (their host is gone, blacklisted
  /// or has fewer slots now, or max_workers is reached).
  std::vector<int64_t> leaving;
  /// True when rank 0 is a member with state on a host that is no longer
  /// available: it stays for this generation only, to hand the state on.
  bool handover = false;
};

/// Plans the world from the available hosts (assignment order, blacklisted
/// ones already removed) and the live members (any order):
/// - rank 0 is the oldest member with state (else the oldest member, else a
///   new worker); its host comes first, then the other hosts in order;
/// - on each host, members keep their seats first (oldest first), up to the
///   host's slots; new workers fill the host's remaining slots;
/// - at most max_workers seats: members are kept before any new worker;
/// - ranks are contiguous per host; local and cross ranks as rank_planner.
/// If every member with state is on an unavailable host, the oldest of them
/// is kept as rank 0 on its host (handover). Returns nullopt when fewer than
/// min_workers seats result.
std::optional<world_plan> plan_world(const std::vector<host_slots>& available,
                                     const std::vector<member>& members, int min_workers,
                                     int max_workers);

/// Total slots of `hosts`.
int total_slots(const std::vector<host_slots>& hosts);

} // namespace hvactor::elastic
