#pragma once

// Internal: a static job's rules about its ranks, as plain code (no actors):
// where each rank runs, who registered, who is missing at the registration
// deadline, who was on a lost node, what a dead worker's error says, and,
// for hvactor-run, when every process exited.

#include <cstdint>
#include <string>
#include <vector>

namespace hvactor::proto {
struct worker_exit;
}

namespace hvactor::detail {

class static_roster {
public:
  /// A fresh world: `node_of_rank[r]` is rank r's planned node.
  void plan(std::vector<std::string> node_of_rank);

  int size() const {
    return static_cast<int>(ranks_.size());
  }

  enum class registration {
    /// Not a rank of this world, or registered already.
    unexpected,
    accepted,
    /// Accepted, and now every rank registered.
    complete,
  };

  /// Rank `rank` registered from `node` as process `pid`.
  registration registered(int rank, const std::string& node, int32_t pid);

  bool is_registered(int rank) const;

  /// Where rank `rank` runs: its registered node, else its planned one.
  const std::string& node_of(int rank) const;

  /// Whether every rank registered.
  bool complete() const {
    return registered_ == ranks_.size();
  }

  /// "rank 3 on node 'n1' (pid 4711)", or without the pid before it
  /// registered. Throws std::out_of_range for a rank outside the world.
  std::string label(int rank) const;

  /// "rank 1 on node 'n2'" for each rank that did not register, in order.
  std::vector<std::string> missing() const;

  /// "rank 1 (pid 42)" (or "rank 1") for each rank planned on `node`.
  std::vector<std::string> on_node(const std::string& node) const;

  /// The text of a job error for a worker process that died.
  std::string died(const proto::worker_exit& ex) const;

  enum class launch_next {
    /// Other processes are still running.
    wait,
    /// This was the last process, and every one exited with status 0.
    all_ok,
    /// The job's first failed process: it decides the outcome.
    first_failure,
    /// A failure after the first one: nothing changes.
    later_failure,
  };

  /// hvactor-run: rank `rank`'s process exited (`ok`: status 0).
  launch_next exited(int rank, bool ok);

private:
  struct entry {
    std::string planned;
    std::string node;
    int32_t pid = 0;
    bool registered = false;
    bool exited = false;
  };
  std::vector<entry> ranks_;
  size_t registered_ = 0;
  size_t exited_ok_ = 0;
  bool failed_ = false;
};

} // namespace hvactor::detail
