#pragma once

// The elastic driver's rules about when a new world is published, as plain
// code (no actors, no I/O): the rules Horovod's ElasticDriver applies in
// driver.py (_activate_workers, _handle_worker_exit, reset limit,
// wait_for_available_slots), with hvactor's rank-0 survivor rule
// (elastic_policy.hpp plans the world itself). The coordinator feeds it
// what happened and does what it answers.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "hvactor/errors.hpp"
#include "actors/elastic/elastic_policy.hpp"

namespace hvactor::elastic {

struct rules_config {
  int min_workers = 1;
  int max_workers = 1 << 30;
  /// Resets allowed after the first world; nullopt: no limit.
  std::optional<int> reset_limit;
  /// How long the job may stay below min_workers (elastic_timeout).
  std::chrono::milliseconds wait{600000};
  /// The configured elastic_timeout in seconds, for messages.
  long long timeout_seconds = 600;
  /// "discovery script '...'" etc., for messages.
  std::string discovery;
};

/// What the coordinator sees when it asks for the next world.
struct world_state {
  /// Available hosts in assignment order (live, not blacklisted).
  std::vector<host_slots> available;
  /// Live workers that stay in the world (not gone, not leaving).
  std::vector<member> members;
  /// Whether any worker, live or not, ever joined a world that formed.
  bool held_state = false;
  /// The current world's seats (worker ids by rank); empty before the first.
  std::vector<int64_t> seats;
  /// Whether the current world formed (every seat joined).
  bool formed = false;
  /// Whether every host the job found is blacklisted for good.
  bool hopeless = false;
  /// The first worker failure's text, for messages ("" when none).
  std::string first_failure;
};

/// The answer: nothing to do, wait, publish `plan`, or fail the job.
struct decision {
  enum class action { keep, wait, publish, fail };
  action what = action::keep;
  std::optional<world_plan> plan;
  /// publish: the new world follows a failure (or a broken world).
  bool failure = false;
  error_kind kind = error_kind::generic;
  std::string message;
};

class job_rules {
public:
  using time_point = std::chrono::steady_clock::time_point;

  explicit job_rules(rules_config cfg = {}, time_point now = std::chrono::steady_clock::now());

  /// Before start() is answered: `publish` (no plan) once the available
  /// hosts offer min_workers slots, `fail` (elastic_timeout) once waiting
  /// for them took longer than `wait`, else `wait`.
  decision on_start(const std::vector<host_slots>& available, time_point now);

  /// The next world during a run. `failure`: a worker failed or asked for
  /// a reset since the last world (counted against the reset limit even
  /// when the plan keeps the same seats). Rules, in order:
  /// - every worker that held state is gone: fail (the last commit is lost);
  /// - too few slots: wait, remembering a failure; fail when every found
  ///   host is blacklisted for good, or (elastic_timeout) when the job has
  ///   been short of slots longer than `wait`;
  /// - the same seats without a failure: keep;
  /// - a change of hosts before the current world formed: wait (its workers
  ///   would not see the notification before joining it);
  /// - a new world after the first past the reset limit: fail
  ///   (reset_limit_exceeded); else publish, counting a reset.
  decision next_world(const world_state& now_state, bool failure, time_point now);

  /// Resets counted so far.
  int resets() const {
    return resets_;
  }

  /// Whether the current world failed and still waits for a new one.
  bool broken() const {
    return broken_;
  }

  /// A generation's reset request's grace passed: the world is broken.
  void mark_broken() {
    broken_ = true;
  }

private:
  decision short_of_slots(const world_state& s, time_point now);
  /// Below min_workers since short_since_: wait, or elastic_timeout naming
  /// the slots seen (`suffix` ends the message).
  decision wait_or_time_out(const std::vector<host_slots>& available, const std::string& suffix,
                            time_point now);

  rules_config cfg_;
  int resets_ = 0;
  bool broken_ = false;
  std::optional<time_point> short_since_;
};

} // namespace hvactor::elastic
