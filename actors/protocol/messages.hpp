#pragma once

// Internal: the plain messages of the actors' protocol (interfaces.hpp
// holds the actors, the atoms and the type-ID block): what nodes offer and
// reserve, what a colocator spawns, how workers register and exit, calls
// and their results, how a job ended.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/meta/type_name.hpp>

#include "hvactor/call_data.hpp"

namespace hvactor::proto {

/// Countable resources of a node or a request.
struct resources {
  int32_t cpus = 0;
  int32_t gpus = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, resources& x) {
  return f(caf::meta::type_name("resources"), x.cpus, x.gpus);
}

/// What a node agent reports about itself.
struct node_info {
  std::string node_id;
  std::string hostname;
  /// Address other processes use to reach this node (bind address).
  std::string address;
  /// Port the node agent is published on; 0 for an agent in the driver's
  /// own process (embedded cluster, simulations), reached by its handle.
  uint16_t port = 0;
  /// True when the node runs shipped binaries from its cache (hvactor-node);
  /// false when workers run the driver's binary in place (embedded).
  bool caches_binaries = false;
  resources total;
  resources free;
  std::vector<int32_t> gpu_ids;
  std::vector<int32_t> free_gpu_ids;
  /// Job ids currently holding resources here.
  std::vector<std::string> jobs;
  /// hvactor's version, and when the agent started (ms since the epoch).
  std::string version;
  int64_t started_ms = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, node_info& x) {
  return f(caf::meta::type_name("node_info"), x.node_id, x.hostname, x.address, x.port,
           x.caches_binaries, x.total, x.free, x.gpu_ids, x.free_gpu_ids, x.jobs, x.version,
           x.started_ms);
}

/// Resources a node agent set aside for one job.
struct reservation {
  std::string job_id;
  std::string node_id;
  resources res;
  std::vector<int32_t> gpu_ids;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, reservation& x) {
  return f(caf::meta::type_name("reservation"), x.job_id, x.node_id, x.res, x.gpu_ids);
}

/// An ordered list of environment entries.
struct env_list {
  std::vector<std::pair<std::string, std::string>> entries;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, env_list& x) {
  return f(caf::meta::type_name("env_list"), x.entries);
}

/// What a node_colocator starts: the driver's binary once per rank.
struct spawn_request {
  std::string job_id;
  /// Path of the binary to run (the driver's own executable).
  std::string executable;
  /// SHA-256 of the binary; when set, the node runs its cached copy of it
  /// (shipped by the coordinator beforehand) instead of `executable`.
  std::string binary_hash;
  /// The program's own libraries (file name -> SHA-256, program_libraries.hpp),
  /// cached beside it: the node puts them first on LD_LIBRARY_PATH.
  std::map<std::string, std::string> libraries;
  /// argv[0..] the driver was started with.
  std::vector<std::string> args;
  /// World ranks of the workers this node runs, in local-rank order.
  std::vector<int32_t> ranks;
  /// Set in every worker before the user's main runs (HVACTOR_* contract
  /// variables; CUDA_VISIBLE_DEVICES is added by the colocator).
  env_list env;
  int32_t stderr_tail_lines = 20;
  /// hvactor-run: the processes are the user's SPMD program, not hvactor
  /// workers. Each gets `rank_env[i]` (Horovod variables of ranks[i]) on
  /// top of `env`; their stdout and stderr lines go to the coordinator.
  bool launch = false;
  std::vector<env_list> rank_env;
  /// hvactor workers' stdout and stderr (not launch): output_inherit, or
  /// captured line by line and sent to the coordinator (output_forward) or
  /// dropped (output_drop; the stderr tail for errors is kept).
  int32_t output = 0;
  /// The job's word on its shared-memory segment (the colocator makes one
  /// per node when it runs two or more of the job's ranks): HVACTOR_SHM as
  /// 1 (on), 0 (off) or -1 (the job did not say: the node's own
  /// HVACTOR_SHM decides, on by default); the slot size from
  /// HOROVOD_FUSION_THRESHOLD, clamped (0: the job did not say).
  int32_t shm = -1;
  uint64_t shm_slot_bytes = 0;
};

inline constexpr int32_t output_inherit = 0;
inline constexpr int32_t output_forward = 1;
inline constexpr int32_t output_drop = 2;

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, spawn_request& x) {
  return f(caf::meta::type_name("spawn_request"), x.job_id, x.executable, x.binary_hash,
           x.libraries, x.args, x.ranks, x.env, x.stderr_tail_lines, x.launch, x.rank_env,
           x.output, x.shm, x.shm_slot_bytes);
}

/// First message of a worker process to its coordinator.
struct worker_hello {
  std::string job_id;
  int32_t world_rank = -1;
  std::string node_id;
  std::string hostname;
  int32_t pid = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, worker_hello& x) {
  return f(caf::meta::type_name("worker_hello"), x.job_id, x.world_rank, x.node_id, x.hostname,
           x.pid);
}

/// How a worker process ended, as its colocator saw it.
struct worker_exit {
  std::string job_id;
  int32_t world_rank = -1;
  std::string node_id;
  int32_t pid = 0;
  /// Exit status when it exited, -1 otherwise.
  int32_t exit_code = -1;
  /// Signal that killed it, 0 otherwise.
  int32_t signal = 0;
  /// True when hvactor itself stopped the process (shutdown).
  bool expected = false;
  std::vector<std::string> stderr_tail;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, worker_exit& x) {
  return f(caf::meta::type_name("worker_exit"), x.job_id, x.world_rank, x.node_id, x.pid,
           x.exit_code, x.signal, x.expected, x.stderr_tail);
}

/// One remote invocation (invoker, target, serialized arguments): the same
/// type the executor's call sites build (executor.hpp), sent as is.
using call_request = hvactor::detail::call_data;

/// The outcome of a call_request on one worker.
struct call_result {
  bool ok = false;
  /// Serialized result when ok.
  std::vector<char> payload;
  /// The exception's text otherwise.
  std::string error;
  /// The request's seq (call_data::seq).
  uint64_t seq = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, call_result& x) {
  return f(caf::meta::type_name("call_result"), x.ok, x.payload, x.error, x.seq);
}

/// The job failed or was shut down: what the coordinator tells the
/// driver's direct caller (coordinator_config::direct_caller), as an answer
/// to the id of its direct calls, so that a call in flight ends at once.
struct job_failed {
  caf::error reason;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, job_failed& x) {
  return f(caf::meta::type_name("job_failed"), x.reason);
}

/// Results of one call on every worker, in world-rank order.
struct call_results {
  std::vector<std::vector<char>> payloads;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, call_results& x) {
  return f(caf::meta::type_name("call_results"), x.payloads);
}

/// How an hvactor-run job ended.
struct job_exit {
  bool ok = false;
  /// First rank that failed (-1: none, or the job failed otherwise).
  int32_t rank = -1;
  std::string node_id;
  int32_t pid = 0;
  int32_t exit_code = -1;
  int32_t signal = 0;
  std::vector<std::string> stderr_tail;
  /// What went wrong, for the user.
  std::string message;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, job_exit& x) {
  return f(caf::meta::type_name("job_exit"), x.ok, x.rank, x.node_id, x.pid, x.exit_code,
           x.signal, x.stderr_tail, x.message);
}

/// What `start` reports back to the driver.
struct job_info {
  std::string job_id;
  int32_t size = 0;
  /// Node id per world rank.
  std::vector<std::string> nodes;
  std::vector<int32_t> pids;
  /// Bytes of the driver's binary sent to nodes that did not have it.
  uint64_t shipped_bytes = 0;
  /// Each rank's worker actor (a horovod_worker), for the driver's direct
  /// calls.
  std::vector<caf::actor> workers;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, job_info& x) {
  return f(caf::meta::type_name("job_info"), x.job_id, x.size, x.nodes, x.pids, x.shipped_bytes,
           x.workers);
}

/// Hosts an elastic job may use and their slots (hvactor::discovery).
struct host_list {
  std::vector<std::string> hosts;
  std::vector<int32_t> slots;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, host_list& x) {
  return f(caf::meta::type_name("host_list"), x.hosts, x.slots);
}

} // namespace hvactor::proto

