#pragma once

// Internal: the worker env contract (DESIGN.md, "Worker env") as pure
// functions: no actors, no I/O, no getenv. The coordinator hands their
// result to workers (set_env) or to hvactor-run's processes (rank_env); the
// colocator sets CUDA_VISIBLE_DEVICES with the same formatting.

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "actors/protocol/interfaces.hpp"

namespace hvactor {

/// Everything a job's Horovod variables depend on.
struct worker_env_spec {
  /// Node id of every world rank, in rank order; nodes count in order of
  /// their first rank (Horovod's registration order).
  std::vector<std::string> node_of_rank;
  /// Where the rendezvous store answers.
  std::string rendezvous_host;
  uint16_t rendezvous_port = 0;
  /// The rendezvous scope is "<job_id>/<generation>"; a static job has
  /// generation 0, an elastic job one per reset.
  std::string job_id;
  int generation = 0;
  /// The job's control-plane timeout; Gloo gets it in whole seconds, at
  /// least 1.
  std::chrono::milliseconds timeout{30000};
  /// GPU ids of every world rank (index = rank); empty, or every entry
  /// empty, for a CPU job.
  std::vector<std::vector<int32_t>> gpu_ids_of_rank;
  /// Network interfaces collectives should use; empty when unknown.
  std::vector<std::string> nics;
  bool elastic = false;
  /// The user's variables, set after (and over) every variable above.
  std::map<std::string, std::string> extra_env_vars;
};

/// Every rank's variables (index = world rank), in this order:
/// HOROVOD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE, _CROSS_RANK, _CROSS_SIZE
/// (rank_planner), HOROVOD_HOSTNAME (node id), HOROVOD_CONTROLLER=gloo,
/// HOROVOD_CPU_OPERATIONS=gloo, HOROVOD_GLOO_RENDEZVOUS_ADDR/_PORT,
/// HVACTOR_RENDEZVOUS_SCOPE, HOROVOD_GLOO_TIMEOUT_SECONDS; with NICs
/// HOROVOD_GLOO_IFACE (the first) and NCCL_SOCKET_IFNAME (all,
/// comma-joined), as Horovod's gloo_run; HOROVOD_ELASTIC=1 for an elastic
/// job; CUDA_VISIBLE_DEVICES for a GPU job (the union of the node's ids in
/// local-rank order); then `extra_env_vars`, each one replacing a variable
/// above of the same name (a process's env keeps the first of duplicates).
/// Throws std::invalid_argument when `node_of_rank` and a non-empty
/// `gpu_ids_of_rank` differ in length.
std::vector<proto::env_list> worker_envs(const worker_env_spec& spec);

/// The variables elastic worker `worker_id` on `node` starts with (its
/// ranks come with each generation's assignment, elastic_assignment.hpp):
/// HOROVOD_HOSTNAME and the job's shared variables as worker_envs (for
/// `spec.generation`, HOROVOD_ELASTIC=1), then HVACTOR_ELASTIC_WORKER,
/// HVACTOR_ELASTIC_GENERATION, HVACTOR_ELASTIC_WAIT_MS (`wait`: how long
/// hvd::init waits for a generation), then `extra_env_vars` as worker_envs.
/// `spec.node_of_rank` and `gpu_ids_of_rank` are not used.
proto::env_list elastic_worker_env(worker_env_spec spec, const std::string& node,
                                   int32_t worker_id, std::chrono::milliseconds wait);

/// CUDA_VISIBLE_DEVICES for `gpu_ids`: "0,2,3", in the given order, each id
/// once (its first place), no spaces.
std::string cuda_visible_devices(const std::vector<int32_t>& gpu_ids);

/// What every worker process of a job needs to reach its coordinator
/// (HVACTOR_WORKER_COORDINATOR "host:port", HVACTOR_WORKER_JOB,
/// HVACTOR_WORKER_TIMEOUT_MS); its colocator adds rank and node.
proto::env_list worker_bootstrap_env(const std::string& coordinator_endpoint,
                                     const std::string& job_id,
                                     std::chrono::milliseconds timeout);

/// A job's shared-memory segment as its settings ask for it: HVACTOR_SHM
/// and HOROVOD_FUSION_THRESHOLD from `job_env` (the executor's
/// extra_env_vars) into spawn_request::shm and shm_slot_bytes; what the job
/// does not set stays "not said" (-1, 0), for the node's own settings.
void plan_shm(const std::map<std::string, std::string>& job_env, proto::spawn_request& req);

/// The slot size a fusion threshold asks for (HOROVOD_FUSION_THRESHOLD's
/// text; not a number: 0), clamped to the segment's bounds
/// (knobs::shm_min_slot_bytes .. knobs::shm_slot_bytes).
uint64_t shm_slot_bytes_for(const std::string& fusion_threshold);

} // namespace hvactor
