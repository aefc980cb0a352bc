#pragma once

// hvactor-up / hvactor-down's commands over a cluster file.

#include "cluster_file.hpp"

namespace hvactor::up_tool {

/// Hands out the certificates, runs the setup commands, starts the head and
/// every worker's hvactor-node over ssh, waits until each joined the head,
/// and prints how to use the cluster. Returns 1 when a node is not up (the
/// others keep running).
int up(const cluster_file& c);

/// Stops every node it reaches, the head last; 1 when one was unreachable.
int down(const cluster_file& c);

/// Replaces this process with `hvactor-node status` with the driver's
/// identity; returns only when that cannot run.
int status(const cluster_file& c);

} // namespace hvactor::up_tool
