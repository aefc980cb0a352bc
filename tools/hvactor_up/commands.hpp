#pragma once

// hvactor-up / hvactor-down's commands over a cluster file.

#include <chrono>
#include <string>

#include "cluster_file.hpp"
#include "hvactor/tls.hpp"

namespace hvactor::up_tool {

/// Hands out the certificates, runs the setup commands, starts the head and
/// every worker's hvactor-node over ssh, waits until each joined the head,
/// and prints how to use the cluster (unless `print_usage` is false).
/// Returns 1 when a node is not up (the others keep running).
int up(const cluster_file& c, bool print_usage = true);

/// Stops every node it reaches, the head last; 1 when one was unreachable.
/// `remove_files`: also removes what the cluster left on each machine (its
/// certificates, logs and work directories) and here (its CA): a cluster
/// made for one job (hvactor-run -H).
int down(const cluster_file& c, bool remove_files = false);

/// The longest down() spends on one machine: its two ssh commands (the
/// stop, then the removal of its files), each cut off after the cluster's
/// timeout.
std::chrono::milliseconds stop_bound(const cluster_file& c);

/// What up() and down() print their lines after ("hvactor-up" unless set).
void set_message_prefix(std::string prefix);

/// Where this machine keeps the cluster's CA and the driver's identity
/// (~/.hvactor/up/NAME).
std::string local_dir(const cluster_file& c);

/// HEAD_IP:PORT.
std::string head_address(const cluster_file& c);

/// The driver's TLS identity (empty without TLS).
tls::config driver_tls(const cluster_file& c);

/// Replaces this process with `hvactor-node status` with the driver's
/// identity; returns only when that cannot run.
int status(const cluster_file& c);

} // namespace hvactor::up_tool
