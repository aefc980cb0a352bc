#pragma once

// Internal: the names of every environment variable hvactor reads or sets
// (hvactor::env); one of the knob files (base/internal/knobs.hpp lists them),
// each value named once with the reason for it.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "base/internal/knobs_net.hpp"

/// Every environment variable hvactor reads or sets, named once. Horovod's
/// own names are kept so that Horovod-aware code keeps working; hvactor's
/// use the HVACTOR_ prefix.
namespace hvactor::env {

// -- the worker env contract (DESIGN.md "Worker env"; worker_env.hpp) --------------

/// World rank and size, local (per node) and cross (per local rank) ranks
/// and sizes, by Horovod's rules.
inline constexpr const char* rank = "HOROVOD_RANK";
inline constexpr const char* size = "HOROVOD_SIZE";
inline constexpr const char* local_rank = "HOROVOD_LOCAL_RANK";
inline constexpr const char* local_size = "HOROVOD_LOCAL_SIZE";
inline constexpr const char* cross_rank = "HOROVOD_CROSS_RANK";
inline constexpr const char* cross_size = "HOROVOD_CROSS_SIZE";
/// The node id a rank runs on.
inline constexpr const char* hostname = "HOROVOD_HOSTNAME";
/// Always "gloo": Horovod-aware code checks them.
inline constexpr const char* controller = "HOROVOD_CONTROLLER";
inline constexpr const char* cpu_operations = "HOROVOD_CPU_OPERATIONS";
/// Where the job's rendezvous store answers.
inline constexpr const char* rendezvous_addr = "HOROVOD_GLOO_RENDEZVOUS_ADDR";
inline constexpr const char* rendezvous_port = "HOROVOD_GLOO_RENDEZVOUS_PORT";
/// NICs for Gloo and NCCL, when known.
inline constexpr const char* gloo_iface = "HOROVOD_GLOO_IFACE";
inline constexpr const char* nccl_socket_ifname = "NCCL_SOCKET_IFNAME";
/// Whole seconds every collective transfer may take (settings.timeout).
inline constexpr const char* gloo_timeout_seconds = "HOROVOD_GLOO_TIMEOUT_SECONDS";
/// "1" in elastic jobs.
inline constexpr const char* elastic = "HOROVOD_ELASTIC";
/// GPU jobs: the union of the node's assigned GPU ids, comma-joined.
inline constexpr const char* cuda_visible_devices = "CUDA_VISIBLE_DEVICES";
/// Job id and rendezvous generation ("<job>/<generation>").
inline constexpr const char* rendezvous_scope = "HVACTOR_RENDEZVOUS_SCOPE";
/// Address of the node a worker runs on (Gloo binds its TCP pairs there).
inline constexpr const char* node_address = "HVACTOR_NODE_ADDRESS";
/// Elastic jobs: this process's worker id (unique in the job, increasing
/// with start order), the first generation it may join, and how long
/// hvd::init waits for its next assignment (elastic_timeout + timeout).
inline constexpr const char* elastic_worker = "HVACTOR_ELASTIC_WORKER";
inline constexpr const char* elastic_generation = "HVACTOR_ELASTIC_GENERATION";
inline constexpr const char* elastic_wait_ms = "HVACTOR_ELASTIC_WAIT_MS";

// -- a worker process's bootstrap (set by its colocator) ---------------------------

/// "host:port" of the coordinator to register with.
inline constexpr const char* worker_coordinator = "HVACTOR_WORKER_COORDINATOR";
inline constexpr const char* worker_job = "HVACTOR_WORKER_JOB";
inline constexpr const char* worker_rank = "HVACTOR_WORKER_RANK";
inline constexpr const char* worker_node = "HVACTOR_WORKER_NODE";
/// Milliseconds a worker waits to connect and register.
inline constexpr const char* worker_timeout_ms = "HVACTOR_WORKER_TIMEOUT_MS";
/// "lines": the node captures the worker's stdout (horovod_runner's log
/// verbosity), so the worker line-buffers it.
inline constexpr const char* worker_output = "HVACTOR_WORKER_OUTPUT";

// -- the collectives engine (read once at hvd::init) -------------------------------

/// Bytes per fused batch (Horovod's tensor fusion; default 128 MiB, 0: off).
inline constexpr const char* fusion_threshold = "HOROVOD_FUSION_THRESHOLD";
/// Milliseconds a batch may wait to grow (default 1).
inline constexpr const char* cycle_time = "HOROVOD_CYCLE_TIME";
/// "ring", "bcube", "gather", "doubling" or "auto": forces Gloo's allreduce algorithm.
inline constexpr const char* gloo_allreduce = "HVACTOR_GLOO_ALLREDUCE";
/// Chrome trace of every collective (a path; "{rank}" names each rank's).
inline constexpr const char* timeline = "HOROVOD_TIMELINE";
/// 1: a CYCLE_START instant in the timeline at every negotiation cycle.
inline constexpr const char* timeline_mark_cycles = "HOROVOD_TIMELINE_MARK_CYCLES";
/// Horovod's stall inspector: seconds before a rank warns about operations
/// others have not submitted (60), before it fails them (0: never), "1": off.
inline constexpr const char* stall_check_time_seconds = "HOROVOD_STALL_CHECK_TIME_SECONDS";
inline constexpr const char* stall_shutdown_time_seconds = "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS";
inline constexpr const char* stall_check_disable = "HOROVOD_STALL_CHECK_DISABLE";
/// Horovod's autotune ("1"), rank 0's CSV log, and its search's knobs.
inline constexpr const char* autotune = "HOROVOD_AUTOTUNE";
inline constexpr const char* autotune_log = "HOROVOD_AUTOTUNE_LOG";
inline constexpr const char* autotune_warmup_samples = "HOROVOD_AUTOTUNE_WARMUP_SAMPLES";
inline constexpr const char* autotune_steps_per_sample = "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE";
inline constexpr const char* autotune_bayes_opt_max_samples = "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES";
inline constexpr const char* autotune_gaussian_process_noise = "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE";
/// Autotune and a knob set explicitly: "fixed" keeps it (Horovod's, default), "start" tunes it.
inline constexpr const char* autotune_set_knobs = "HVACTOR_AUTOTUNE_SET_KNOBS";
/// "1": add/remove_process_set after hvd::init (or hvd::init(sets, true)).
inline constexpr const char* dynamic_process_sets = "HOROVOD_DYNAMIC_PROCESS_SETS";
/// Names the response cache keeps after negotiating them once (0: off).
inline constexpr const char* cache_capacity = "HOROVOD_CACHE_CAPACITY";
/// "0": ranks on one node use Gloo's TCP, not the node's shared memory.
inline constexpr const char* shm = "HVACTOR_SHM";
/// The node's shared-memory segment's fd, inherited from the colocator.
inline constexpr const char* shm_fd = "HVACTOR_SHM_FD";
/// Horovod's: "1" forces, "0" forbids the hierarchical path (shm in, Gloo across); unset: auto.
inline constexpr const char* hierarchical_allreduce = "HOROVOD_HIERARCHICAL_ALLREDUCE";
inline constexpr const char* hierarchical_allgather = "HOROVOD_HIERARCHICAL_ALLGATHER";
/// "core": hvd::init pins the worker (every thread) to one core of its own
/// by local rank, as mpirun --bind-to core does; "none" (default).
inline constexpr const char* bind_to = "HVACTOR_BIND_TO";
/// Horovod's: a core id per local rank ("1,33") for its engine thread; too few: unpinned.
inline constexpr const char* thread_affinity = "HOROVOD_THREAD_AFFINITY";
/// How device collectives run (Horovod's HOROVOD_GPU_OPERATIONS, at
/// hvd::init): unset/"auto": NCCL when it can serve the job, else host-staged;
/// "NCCL": NCCL or an init error saying why not; "GLOO": host-staged (device
/// -> host, Gloo, host -> device); "NONE": no device backend (device calls
/// fail; LibTorch's CUDA tensors go through CPU copies). Case-insensitive.
inline constexpr const char* gpu_operations = "HVACTOR_GPU_OPERATIONS";
/// NCCL's own switches that decide whether two ranks may share one GPU.
inline constexpr const char* nccl_multi_rank_gpu = "NCCL_MULTI_RANK_GPU_ENABLE";
inline constexpr const char* nccl_hostid = "NCCL_HOSTID";

// -- processes of a cluster ---------------------------------------------------------

/// Cluster to join instead of starting an embedded one.
inline constexpr const char* address = "HVACTOR_ADDRESS";
/// Log level: error, warn, info, debug.
inline constexpr const char* log_level = "HVACTOR_LOG_LEVEL";
/// Largest message a published plain port accepts (knobs::max_message_bytes).
inline constexpr const char* max_message_bytes = "HVACTOR_MAX_MESSAGE_BYTES";
/// Connections kept per published plain port (knobs::max_connections_per_port).
inline constexpr const char* max_connections_per_port = "HVACTOR_MAX_CONNECTIONS_PER_PORT";
/// A process's TLS identity (a worker inherits its node's).
inline constexpr const char* tls_certificate = "HVACTOR_TLS_CERT";
inline constexpr const char* tls_key = "HVACTOR_TLS_KEY";
inline constexpr const char* tls_cafile = "HVACTOR_TLS_CA";
inline constexpr const char* tls_passphrase = "HVACTOR_TLS_PASSPHRASE";

/// The variable's value, if set.
std::optional<std::string> get(const char* name);

/// The variable as an int; `fallback` when unset, not a number or out of
/// range.
int get_int(const char* name, int fallback);

/// The variable as a 64-bit integer; `fallback` when unset or not a number.
int64_t get_int64(const char* name, int64_t fallback);

} // namespace hvactor::env
