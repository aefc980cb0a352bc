#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace hvactor {

/// One host an elastic job may use: the node id of a live hvactor-node (or
/// of the embedded cluster's node) and how many workers it can hold.
struct host_slots {
  std::string host;
  int slots = 1;

  friend bool operator==(const host_slots&, const host_slots&) = default;
};

/// Where an elastic job learns which hosts it may use (horovodrun's
/// --host-discovery-script, horovod.ray's RayHostDiscovery). The default
/// (`discovery{}`) is the cluster's live nodes, with the slots each node's
/// resources can hold for the job. The coordinator polls it every
/// `executor_options::discovery_period` on a thread of its own.
class discovery {
public:
  using function_type = std::function<std::vector<host_slots>()>;

  /// The cluster's live nodes (resolved by the coordinator from its registry).
  discovery() = default;

  /// Runs `path` (an executable; no shell) on every poll and reads one host
  /// per stdout line: "node-id:slots" or "node-id" (`default_slots`,
  /// horovodrun's --slots-per-host; 1 unless given); blank lines and
  /// lines starting with '#' are skipped. A non-zero exit, a malformed line
  /// or a run longer than 10 s is a failed poll (find() throws, naming the
  /// script and the reason).
  static discovery script(std::string path, int default_slots = 1);

  /// Calls `fn` on every poll (tests replay discovery schedules with it). An
  /// exception it throws is a failed poll.
  static discovery function(function_type fn);

  /// True for the default: the coordinator asks the cluster's registry.
  bool from_cluster() const noexcept {
    return !find_;
  }

  /// The current hosts (script or function); throws on a failed poll.
  /// Hosts with 0 slots are dropped; a host listed twice is an error.
  /// Must not be called on the default (from_cluster()).
  std::vector<host_slots> find() const;

  /// "the cluster's live nodes", "script ./discover.sh", "a function".
  std::string describe() const;

private:
  function_type find_;
  std::string what_;
};

/// Parses a discovery script's output (see discovery::script). Throws
/// std::invalid_argument naming the line number and the text of the first
/// malformed line (bad node id, slots not an integer in 0..65535, a host
/// listed twice). Hosts with 0 slots are dropped; a line without slots
/// gets `default_slots`.
std::vector<host_slots> parse_host_slots(const std::string& text, int default_slots = 1);

} // namespace hvactor
