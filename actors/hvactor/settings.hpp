#pragma once

#include "hvactor/discovery.hpp"
#include "hvactor/tls.hpp"

#include <chrono>
#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace hvactor {

/// Job-wide settings (horovod.ray's `RayExecutor.create_settings`).
struct settings {
  /// Bound on every control-plane wait: workers registering, rendezvous,
  /// connecting back to the driver. Every timeout must be positive;
  /// milliseconds::max() (or anything above 10 years) means no bound.
  std::chrono::milliseconds timeout = std::chrono::seconds(30);
  /// How long `start()` keeps retrying to reserve resources before it
  /// throws `placement_timeout`.
  std::chrono::milliseconds placement_timeout = std::chrono::seconds(100);
  /// Bound on one remote call (`run`, `execute`, ...). A dead worker fails a
  /// call at once; this only bounds a worker that is alive but never returns.
  std::chrono::milliseconds call_timeout = std::chrono::hours(24 * 7);
  /// Lines of a dead worker's stderr quoted in its `worker_error`.
  int stderr_tail_lines = 20;
};

/// Sizing and placement of one job (horovod.ray's RayExecutor arguments).
/// Set either `num_workers` (PACK: fill nodes in order) or `num_hosts` with
/// `num_workers_per_host` (one colocator per distinct node).
struct executor_options {
  std::optional<int> num_workers;
  std::optional<int> num_hosts;
  std::optional<int> num_workers_per_host;
  /// Elastic jobs (API.md "Elastic jobs"): set min_workers instead of
  /// num_workers. The world grows and shrinks between min_workers and
  /// max_workers (default: no limit) as discovery offers hosts.
  std::optional<int> min_workers;
  std::optional<int> max_workers;
  int cpus_per_worker = 1;
  bool use_gpu = false;
  /// Defaults to 1 when `use_gpu` is set.
  std::optional<int> gpus_per_worker;
  /// Added to every worker's environment after the Horovod variables.
  std::map<std::string, std::string> extra_env_vars;
  // The rest of an elastic job's options.
  /// Resets (re-rendezvous after a failure or a host change) allowed; past
  /// it the job stops with reset_limit_exceeded. Default: no limit.
  std::optional<int> reset_limit;
  /// (lower, upper) seconds a host whose worker failed is blacklisted:
  /// lower * 2^n + U(0,1) * lower for its n-th failure, clamped to the
  /// range. Default: blacklisted for good.
  std::optional<std::pair<int, int>> cooldown_range;
  /// How long start() (and a shrunken job) waits for min_workers slots.
  std::chrono::seconds elastic_timeout = std::chrono::seconds(600);
  /// Where hosts come from; default: the cluster's live nodes.
  hvactor::discovery discovery;
  /// How often discovery is polled.
  std::chrono::milliseconds discovery_period = std::chrono::seconds(1);
};

/// Throws std::invalid_argument with API.md's messages when `opts` is not a
/// valid job description.
void validate(const executor_options& opts);

/// Throws std::invalid_argument when a timeout is not positive or
/// stderr_tail_lines is negative. Timeouts have no upper limit:
/// milliseconds::max() means "no bound".
void validate(const settings& s);

/// Longest node id.
inline constexpr size_t max_node_id_length = 64;

/// Throws std::invalid_argument unless `id` is a valid node id: 1 to 64
/// characters from A-Z a-z 0-9 '.' '_' '-', not starting with '.' or '-'
/// (so no '/', no "..", no whitespace: ids name directories and appear in
/// logs and HOROVOD_HOSTNAME).
void validate_node_id(const std::string& id);

/// "0,2,3" -> {0, 2, 3} (--gpu-ids); throws std::invalid_argument naming
/// the option for anything but comma-separated non-negative integers.
std::vector<int> parse_gpu_ids(const std::string& text);

/// What the embedded local cluster offers; the command line
/// (`--num-cpus`, `--num-gpus`, `--gpu-ids`, `--address`) overrides it.
struct runtime_options {
  /// Cluster to join; empty: start an embedded local cluster (or take
  /// HVACTOR_ADDRESS from the environment).
  std::string address;
  /// CPUs offered by the local node; 0: this machine's count.
  int num_cpus = 0;
  /// GPUs offered by the local node; -1: detect (none without CUDA).
  int num_gpus = -1;
  /// Explicit GPU ids; overrides `num_gpus`.
  std::vector<int> gpu_ids;
  /// Node id of the local node; empty: the hostname.
  std::string node_id;
  /// Address the driver publishes its coordinator and rendezvous store on
  /// when it joins a cluster; empty: the local address that reaches the head.
  std::string bind;
  /// The driver's TLS identity (`--tls-cert/--tls-key/--tls-ca` or
  /// HVACTOR_TLS_*); required to join a cluster off loopback.
  tls::config tls;
  /// Join a non-loopback cluster without TLS (`--insecure`).
  bool insecure = false;
};

} // namespace hvactor
