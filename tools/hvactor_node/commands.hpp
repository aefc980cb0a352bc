#pragma once

// What hvactor-node does, one function per command; main() parses the
// options (cluster/node_options.hpp) and picks one.

#include "tools/cluster/node_options.hpp"

namespace hvactor::node_tool {

using cluster::node_options;

/// Runs a head or a node until SIGTERM/SIGINT; returns the exit code.
int serve(node_options opts);

/// status: prints every node of the cluster at opts.address.
int status(const node_options& opts);

/// wait: returns 0 once the head at opts.address answers and lists every
/// node of opts.wait_nodes, 1 when it has not within opts.wait_timeout_s
/// (naming what is missing). What a Kubernetes node's init container runs.
int wait(const node_options& opts);

/// certs: makes the cluster CA (once) and a certificate per name in
/// opts.certs_dir.
int certs(const node_options& opts);

} // namespace hvactor::node_tool
