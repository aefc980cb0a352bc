#pragma once

// Internal: what the layers built on hvactor::executor (hvactor::train,
// hvactor::horovod_runner) need of its job beyond the public API.

#include <functional>
#include <string>

#include "hvactor/executor.hpp"
#include "actors/protocol/interfaces.hpp"

namespace hvactor {

class job_session;

struct executor_access {
  /// Places the job on the driver's own machine only (HorovodRunner's
  /// np < 0): the embedded cluster, or a node of the driver's own when the
  /// runtime joined a cluster. Before start().
  static void run_on_driver_only(executor& ex);

  /// What happens to the workers' output (proto::output_*); forwarded lines
  /// go to `on_output(rank, stream, line)` on a runtime thread, in order
  /// per rank. Before start().
  static void set_output(executor& ex, int32_t mode,
                         std::function<void(int, int, const std::string&)> on_output);

  /// The started job's session (its rendezvous store) and its description;
  /// not_started before start() and after shutdown().
  static job_session& session(executor& ex);
  static const proto::job_info& job(executor& ex);

  /// The registry the started job was placed through (the head's, or the
  /// embedded cluster's): where its dashboard data goes.
  static proto::node_registry board(executor& ex);
};

} // namespace hvactor
