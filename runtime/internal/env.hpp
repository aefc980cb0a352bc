#pragma once

#include <optional>
#include <string>

/// Names of the environment contract between hvactor processes (Horovod's
/// variables, which user code may read, and hvactor's own HVACTOR_ ones).
namespace hvactor::env {

inline constexpr const char* rank = "HOROVOD_RANK";
inline constexpr const char* size = "HOROVOD_SIZE";
inline constexpr const char* local_rank = "HOROVOD_LOCAL_RANK";
inline constexpr const char* local_size = "HOROVOD_LOCAL_SIZE";
inline constexpr const char* cross_rank = "HOROVOD_CROSS_RANK";
inline constexpr const char* cross_size = "HOROVOD_CROSS_SIZE";
inline constexpr const char* hostname = "HOROVOD_HOSTNAME";
inline constexpr const char* controller = "HOROVOD_CONTROLLER";
inline constexpr const char* cpu_operations = "HOROVOD_CPU_OPERATIONS";
inline constexpr const char* rendezvous_addr = "HOROVOD_GLOO_RENDEZVOUS_ADDR";
inline constexpr const char* rendezvous_port = "HOROVOD_GLOO_RENDEZVOUS_PORT";
inline constexpr const char* gloo_iface = "HOROVOD_GLOO_IFACE";
inline constexpr const char* nccl_socket_ifname = "NCCL_SOCKET_IFNAME";
inline constexpr const char* cuda_visible_devices = "CUDA_VISIBLE_DEVICES";

/// Set in a worker process by its colocator: "host:port" of the coordinator.
inline constexpr const char* worker_coordinator = "HVACTOR_WORKER_COORDINATOR";
inline constexpr const char* worker_job = "HVACTOR_WORKER_JOB";
inline constexpr const char* worker_rank = "HVACTOR_WORKER_RANK";
inline constexpr const char* worker_node = "HVACTOR_WORKER_NODE";
/// Milliseconds a worker waits to connect and register.
inline constexpr const char* worker_timeout_ms = "HVACTOR_WORKER_TIMEOUT_MS";
/// Job id and generation of the rendezvous scope.
inline constexpr const char* rendezvous_scope = "HVACTOR_RENDEZVOUS_SCOPE";
/// Address of the node a worker runs on (Gloo binds its TCP pairs there).
inline constexpr const char* node_address = "HVACTOR_NODE_ADDRESS";
/// Chrome trace of every collective (collectives/timeline.hpp).
inline constexpr const char* timeline = "HOROVOD_TIMELINE";
/// Cluster to join instead of starting an embedded one.
inline constexpr const char* address = "HVACTOR_ADDRESS";
/// Log level: error, warn, info, debug.
inline constexpr const char* log_level = "HVACTOR_LOG_LEVEL";

/// The variable's value, if set.
std::optional<std::string> get(const char* name);

/// The variable as an int; `fallback` when unset or not a number.
int get_int(const char* name, int fallback);

} // namespace hvactor::env
