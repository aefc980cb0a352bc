#pragma once

// hvactor-bench scale: what a cluster's processes hold and use, read from
// /proc on this machine (an emulated cluster's nodes are processes here):
// resident memory, and CPU time over an idle interval.

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace hvactor::bench_tool {

/// The processes of the cluster this program runs in, by role. Inside
/// `hvactor-netcluster up -- COMMAND` (NETCLUSTER_STATE_DIR): the head's
/// and every node's hvactor-node (state.json's pids), their descendants
/// (the job's workers) and this driver. Elsewhere (the embedded cluster, in
/// this process): the driver and its descendants.
struct cluster_processes {
  pid_t head = 0;
  /// Node id -> pid of its hvactor-node.
  std::map<std::string, pid_t> nodes;
  pid_t driver = 0;
  /// Every descendant of a node (or of the driver outside a netcluster).
  std::vector<pid_t> workers;

  /// Every pid above.
  std::vector<pid_t> all() const;
};

/// Finds them now (the workers must be running).
cluster_processes find_cluster_processes();

/// Resident memory of `pid` in bytes; 0 when it is gone.
uint64_t rss_bytes(pid_t pid);

/// CPU time (user + system, every thread) of `pid` in seconds; -1 when it
/// is gone.
double cpu_seconds(pid_t pid);

/// CPU used by each role over an interval, in percent of one core.
struct idle_cpu {
  double seconds = 0;
  double head = 0, nodes = 0, driver = 0, workers = 0;
  /// The busiest process: its role and pid and its share.
  std::string busiest;
  double busiest_percent = 0;
  /// CPU by role and thread name ("worker caf.multiplexer"), summed over
  /// the processes of that role, busiest first.
  std::vector<std::pair<std::string, double>> threads;

  double total() const {
    return head + nodes + driver + workers;
  }
};

/// Samples every process of `p` at the start and the end of `seconds`
/// (sleeping in between; processes that end meanwhile count as 0).
idle_cpu measure_idle_cpu(const cluster_processes& p, double seconds);

} // namespace hvactor::bench_tool
