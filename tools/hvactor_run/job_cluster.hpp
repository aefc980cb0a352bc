#pragma once

// hvactor-run -H / --hostfile: a cluster for one job on the listed hosts,
// brought up over ssh as hvactor-up does (one hvactor-node per host, the
// first host the head, a CA of this job's own, mutual TLS), and torn down
// when the job ends: the nodes stopped, their files removed there and
// here.

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "cluster_file.hpp"
#include "hvactor/tls.hpp"

namespace hvactor::run_tool {

class job_cluster {
public:
  /// Brings the nodes up (host, slots: the node's CPUs, so that a job of
  /// sum(slots) ranks fills each host with its slots in order). Throws
  /// hvactor::error naming the hosts that did not come up, after tearing
  /// down the others.
  job_cluster(const std::vector<std::pair<std::string, int>>& hosts, int ssh_port,
              const std::string& ssh_identity, int timeout_s);
  /// Tears the cluster down.
  ~job_cluster();
  job_cluster(const job_cluster&) = delete;
  job_cluster& operator=(const job_cluster&) = delete;

  /// How long the teardown may take at most: each node's stop over ssh
  /// (its connect timeout, the node's own stop, the removal of its files),
  /// one node after the other.
  std::chrono::milliseconds teardown_bound() const;

  /// The head's HEAD:PORT and the driver's identity.
  std::string address() const;
  tls::config driver_tls() const;

private:
  up_tool::cluster_file c_;
};

} // namespace hvactor::run_tool
