#pragma once

// Internal: the knob file. Every environment variable and every timing
// constant of hvactor, named once, with the reason for its value.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

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

namespace hvactor::knobs {

using namespace std::chrono_literals;

// -- connections (every process; identical everywhere) -----------------------

/// CAF heartbeat on every connection, ticking at the same instants in every
/// process (base/net/heartbeat.hpp). Identical everywhere: a one-sided
/// setting drops healthy peers. A tick costs a process 3 wake-ups (20-90 us
/// each) plus one per peer whose heartbeat arrives alone: at 1 s, each
/// process at its own phase, an idle 32-node cluster with a job of 32 ranks
/// spent about 3.8 % of a core on them (its driver 10 ms/s). At 128 nodes
/// with an idle job the whole cluster used 6.1-6.4 % of a core at 2 s, 5.0 %
/// at 3 s and 3.9 % at 4 s (docs/performance/scale.md).
inline constexpr auto heartbeat_interval = 4s;

/// A peer silent this long is dropped: two missed heartbeats and a second
/// of slack, so a frozen (SIGSTOPped) node or a cut link is dropped 8-12 s
/// after it stopped (the timeout, checked at a tick). Ray's health check
/// takes about 30 s by default, a Gloo op timeout 30 s. At 2 s with a 500 ms
/// heartbeat, a driver starting 64 ranks on 2 cores fell that far behind
/// its own sockets and dropped live nodes.
inline constexpr auto connection_timeout = 9s;

/// Closing a published TLS port: a local request to the OpenSSL middleman,
/// answered at once unless the multiplexer is stuck.
inline constexpr auto unpublish_timeout = 5s;

/// A driver joining a cluster (connect, then the registry's first answer), or
/// the embedded cluster's node joining its in-process registry: a live head
/// answers in milliseconds; this bounds a head that accepts but never
/// answers (wrong service on the port, stalled TLS handshake).
inline constexpr auto join_timeout = 10s;

/// A connect whose caller gave up (its timeout passed) goes on in CAF's
/// middleman; transport::connect waits this long more for it to finish, so
/// that the caller may tear its actor system down (a handshake completing
/// during ~actor_system could hang it for ever). A live peer finishes in
/// milliseconds; a silent one is torn down pending, which is safe.
inline constexpr auto connect_settle = 1s;

/// The TLS connection watchdog (CAF 0.17's OpenSSL module has no handshake
/// timeout): a connection that received nothing for this long is shut
/// down. Live peers send heartbeats every heartbeat_interval (4 s), so only
/// stalled handshakes and silent intruders reach it.
inline constexpr auto watchdog_idle_limit = 10s;

/// Between two watchdog scans of /proc/net/tcp and TCP_INFO.
inline constexpr auto watchdog_period = 2s;

/// Connections kept per watched port; the idlest beyond it are shut down
/// (one process must not be exhausted by connection floods).
inline constexpr size_t watchdog_max_connections = 1024;

/// Largest message a peer may send to a published plain port (the BASP
/// payload its header announces); a larger announcement closes the
/// connection before anything is allocated (port_guard). Shipped binaries
/// travel in 4 MiB chunks; results of remote calls are the large ones.
/// HVACTOR_MAX_MESSAGE_BYTES overrides it.
inline constexpr uint32_t max_message_bytes = uint32_t{1} << 30;

/// Connections kept per published port; beyond it new ones are refused
/// (plain ports; the TLS watchdog applies the same cap to TLS ports).
inline constexpr size_t max_connections_per_port = watchdog_max_connections;

/// Certificates hvactor-node certs issues start this far in the past:
/// clock skew between the node that issues and the nodes that verify.
inline constexpr auto certificate_backdate = 1h;

/// The longest single wait any timer or receive is given: longer user
/// timeouts (up to milliseconds::max(), meaning "never") are clamped here,
/// since CAF adds a timeout to the clock in nanoseconds and an overflow
/// there fires at once. 10 years is "never" for a job, and sums of a few
/// such bounds still fit in nanoseconds.
inline constexpr auto longest_wait = std::chrono::hours{24 * 365 * 10};

// -- cluster membership ----------------------------------------------------------

/// A node rejoining under an id the registry still holds: how long the
/// registry asks the old agent whether it is alive before replacing it.
inline constexpr auto liveness_probe = 1s;

/// Pause between attempts of a node to rejoin a head that went away: a
/// restarted head sees its nodes back within about a second.
inline constexpr auto rejoin_interval = 1s;

/// One rejoin attempt of a node (connect + join): a live head answers in
/// milliseconds; a connection the head already dropped (the node was
/// frozen) must fail fast so that the next attempt, on a fresh connection,
/// starts at the next rejoin_interval. Below rejoin_interval.
inline constexpr auto rejoin_attempt_timeout = 800ms;

/// One connect + join round trip of a node to its head.
inline constexpr auto node_join_timeout = 5s;

/// A stopping node gives each colocator this long to stop its workers
/// (leave_grace + stop_grace per process, reaping included).
inline constexpr auto node_colocator_stop = 30s;

// -- worker processes --------------------------------------------------------------

/// On `stop`, workers get this long to leave by themselves before SIGTERM.
inline constexpr auto leave_grace = 500ms;

/// Between SIGTERM and SIGKILL of a worker that is being stopped.
inline constexpr auto stop_grace = 2s;

// -- jobs (the coordinator) -------------------------------------------------------

/// Pause between placement attempts while resources are busy: frequent
/// enough that a job starts soon after another releases its nodes, rare
/// enough that 10,000-node cluster views (1 ms each) cost nothing.
inline constexpr auto placement_retry = 200ms;

/// Shortest bound of one placement request (reserve, has_bin, colocate):
/// a healthy node answers in about a millisecond; near the placement
/// deadline a request still gets this long rather than failing at once.
inline constexpr auto min_placement_request = 500ms;

/// Shipped binaries travel in chunks of this size: CAF messages must stay
/// far below 4 GiB, and mid-sized buffers keep the sender's memory flat.
inline constexpr size_t ship_chunk_bytes = size_t{4} << 20;

/// Chunks of one binary in flight per node: enough to keep loopback and a
/// LAN busy while the node hashes, few enough to bound memory (16 MiB).
inline constexpr size_t ship_chunks_in_flight = 4;
/// The largest library a node copies into its cache from its own disk when
/// it has the driver's bytes at the driver's path (instead of a shipment).
inline constexpr uint64_t adopt_max_bytes = uint64_t{1} << 30;

/// A worker's connection dropped: wait this long for its colocator's exit
/// report (exit code, signal, stderr tail), the error the user needs,
/// before failing the job with "lost the connection".
inline constexpr auto exit_report_grace = 1500ms;

/// A call's first failure waits this long before it answers: when one rank
/// dies, its peers often fail first (their collective breaks), and the dead
/// rank's exit report is the error the user needs (call_fanin).
inline constexpr auto call_error_grace = 250ms;

/// Direct calls that failed or timed out keep the ids of their unanswered
/// requests so that late answers are taken out of the driver's blocking
/// actor; beyond this many (a rank that never answers), the oldest are
/// forgotten.
inline constexpr size_t max_abandoned_calls = 1024;

/// hvactor-run: after the first rank failed, the others get this long to
/// fail too (peers inside a collective with it) before the job ends and
/// the first failure is reported.
inline constexpr auto launch_failure_grace = 1s;

/// A colocator's stop takes up to settings.timeout for its workers plus
/// this for SIGTERM/SIGKILL and the reaping of every process.
inline constexpr auto colocator_stop_slack = 5s;

/// A worker process's bound to connect to its driver and register, when the
/// colocator did not pass HVACTOR_WORKER_TIMEOUT_MS (settings.timeout's
/// default).
inline constexpr int default_worker_timeout_ms = 30'000;

/// start()'s outer bound beyond placement and registration: the driver's
/// wait only catches a coordinator that stopped answering, never a slow job.
inline constexpr auto start_slack = 30s;

/// Shipping the binary is bounded per chunk only; start()'s outer bound
/// allows this rate for it (a slow but live link).
inline constexpr uint64_t shipping_bytes_per_second = 10'000'000;

/// shutdown() waits settings.timeout for the workers plus this for the
/// colocators to reap them and release their reservations.
inline constexpr auto shutdown_slack = 10s;

/// hvactor-run after SIGTERM/SIGINT: the ranks get this long to stop
/// (leave_grace + stop_grace, reaping, slack) plus the teardown bound of a
/// cluster it brought up (-H, Slurm); then it exits anyway, the ranks with
/// it (PR_SET_PDEATHSIG or their colocator's watch on the driver).
inline constexpr auto launcher_stop_limit = 6s;

// -- processes ------------------------------------------------------------------

/// An actor system that does not stop within this ends its process (exit 1):
/// a stuck actor must never hang a program's or a node's exit.
inline constexpr auto system_exit_limit = 10s;

/// hvactor-node on SIGTERM: its agent stops every colocator, which gives
/// workers leave_grace + stop_grace (2.5 s) before SIGKILL; the rest is slack.
inline constexpr auto node_stop_timeout = 15s;

// -- collectives ---------------------------------------------------------------------

/// Horovod's tensor fusion defaults (HOROVOD_FUSION_THRESHOLD,
/// HOROVOD_CYCLE_TIME): one Gloo call for up to 128 MiB of gradients, a
/// batch waits at most 1 ms to grow.
inline constexpr size_t default_fusion_threshold = size_t{128} << 20;
inline constexpr auto default_cycle_time = 1ms;

/// HOROVOD_GLOO_TIMEOUT_SECONDS when unset (Horovod's 30 s), and the
/// largest value accepted: longest_wait, beyond which waits are clamped.
inline constexpr int64_t default_gloo_timeout_seconds = 30;
/// A rank with no collective pending joins a negotiation round this often
/// (at most a quarter of the job's timeout), so that peers waiting in one
/// never reach the transport's timeout.
inline constexpr auto negotiation_heartbeat = std::chrono::milliseconds{1000};
/// HOROVOD_CACHE_CAPACITY's default and bound (a round sends a word per slot).
inline constexpr uint64_t default_cache_capacity = 1024;
inline constexpr uint64_t max_cache_capacity = 1u << 20;
inline constexpr int64_t max_gloo_timeout_seconds =
  std::chrono::duration_cast<std::chrono::seconds>(longest_wait).count();

/// A waiter gives up on the engine after twice the job's timeout plus this:
/// every transfer under it has its own timeout, so reaching it means the
/// engine is stuck (reported as a bug, never a hang).
inline constexpr auto engine_wait_slack = 10s;

/// The rendezvous store answers a timed get/wait itself; the client waits
/// this much longer so that the store's clearer error wins.
inline constexpr auto store_round_trip = 1s;

/// A watch on a rendezvous key (rank 0's wait for the driver's host
/// updates) asks again this often: the store holds a wait this long.
inline constexpr auto store_watch_period = 60s;

/// Shared-memory collectives (collectives/shm/): each local rank owns two
/// slots of this many bytes in its node's segment (one written while the
/// other is read). Smaller when the job's fusion threshold is (never below
/// the minimum); the segment's pages are only backed once touched.
inline constexpr size_t shm_slot_bytes = size_t{2} << 20;
inline constexpr size_t shm_min_slot_bytes = size_t{64} << 10;

/// A collective moves its data in chunks of this much (at most a slot),
/// two synchronisation points each for an allreduce: small enough that 4
/// ranks' chunks stay in the caches of this VM (2 MiB chunks made a quiet
/// 64 MiB allreduce of 4 ranks 1.6-1.8x slower). An allreduce whose ranks
/// saw their cores taken (the loaded waits) moves whole slots instead:
/// every synchronisation point may then cost a wake-up behind a busy
/// thread, and 4 times fewer of them pay more than the caches lose.
inline constexpr size_t shm_chunk_bytes = size_t{512} << 10;

/// A waiting rank spins this long on a sequence word before it sleeps on
/// the word's futex (when every local rank has a core of its own; with
/// more ranks than cores it yields instead: the rank it waits for needs
/// the core). Longer than a sleeping core's wake-up: with 50 us, two ranks
/// fell into a convoy on this VM, each waking the other ~55 us late, every
/// small allreduce 50-100 us instead of 0.4 (hvactor-bench found it).
inline constexpr auto shm_spin = std::chrono::microseconds{1000};

/// The most a rank spins after short waits that had to sleep (the spin
/// grows while they do): on this VM a sleeping rank sometimes wakes ~1 ms
/// late, and two ranks then fell into a convoy at 1 ms per step, each
/// spinning out just before the other woke (hvactor-bench --peer mpi
/// found it: allreduce p50 1 ms instead of 1 us at some sizes).
inline constexpr auto shm_spin_max = std::chrono::microseconds{16000};

/// A gap this long between two clock reads of a spinning rank (or a long
/// sched_yield) means a busy thread took its core: the machine is loaded.
inline constexpr auto shm_preempted = std::chrono::microseconds{200};

/// The same with more local ranks than cores, where ranks take each
/// other's cores all the time: only a gap this long says a foreign thread
/// ran (a busy thread's slice; a local rank's share of a step, up to a
/// 2 MiB slot, takes less). With 200 us, 4 quiet ranks on 2 cores took
/// each other for busy threads and moved to the loaded waits and chunks,
/// a quiet 4 MiB allreduce then 0.9-3.5 ms instead of about 1.
inline constexpr auto shm_preempted_oversubscribed = std::chrono::microseconds{1000};

/// After such a gap, waits take the loaded strategy for this long (spin
/// shm_spin_loaded, then sleep); a later gap extends it.
inline constexpr auto shm_load_memory = std::chrono::milliseconds{250};

/// How long a waiting rank spins on a loaded machine before it sleeps:
/// long enough for a peer that runs at the same time to answer, short
/// enough that a rank whose peer waits for a core keeps its share of its
/// own (a ping-pong between two processes pinned to the 2 cores of this
/// VM, each core with two busy threads: spin 20 us then sleep 0.3 us per
/// step; spin without sleeping, as Open MPI does, 1.4-2.8 us; yield
/// instead of spinning, over 1 ms).
inline constexpr auto shm_spin_loaded = std::chrono::microseconds{20};

/// With more local ranks than cores, a quiet wait yields (to the local
/// rank that needs the core) for up to this long before it sleeps: a step
/// of a large allreduce takes milliseconds there, and a futex wake-up per
/// step doubled a 64 MiB allreduce of 4 ranks on 2 cores (22 to 70 ms).
inline constexpr auto shm_yield = std::chrono::milliseconds{50};

/// While a rank sleeps on a peer's word, its thread asks the scheduler for
/// slices this short (Linux 6.12+ EEVDF: sched_attr's sched_runtime, 100 us
/// the least; older kernels ignore it): woken, it may preempt the running
/// thread instead of waiting out its 1.4 ms slice, with the same share of
/// the core. 4 ranks, 64 MiB, one busy thread per core: 74 against 105 ms
/// per allreduce; two: 75-121 against 242-252 ms.
inline constexpr auto shm_wake_slice = std::chrono::microseconds{100};

/// A sleeping rank wakes this often to check the abort word and its peer.
inline constexpr auto shm_sleep_slice = 20ms;

/// Allreduces up to this size (per rank) take the one-step path: every
/// rank copies all of its data in and reduces every rank's copy; larger
/// ones reduce-scatter then allgather (each rank reduces one slice).
inline constexpr size_t shm_small_bytes = size_t{16} << 10;

// -- elastic jobs --------------------------------------------------------------------

/// Discovery polls (executor_options::discovery_period's default, Horovod's
/// DISCOVER_HOSTS_FREQUENCY_SECS).
inline constexpr auto discovery_period = 1s;

/// One run of a host discovery script (discovery::script) may take this
/// long; then it is killed and the poll failed.
inline constexpr auto discovery_script_limit = 10s;

/// A worker's collectives failed and it asks for a new generation: the
/// driver waits this long for the exit report of a worker that died, so
/// that one reset covers both.
inline constexpr auto elastic_reset_grace = 250ms;

/// check_host_updates() (and commit()) agree on host changes with one small
/// broadcast about this often, skipping the checks in between.
inline constexpr auto elastic_check_interval = 50ms;

/// hvd::init in an elastic job gives up after this many generations in a
/// row that did not connect.
inline constexpr int elastic_init_attempts = 5;

/// A worker leaving the job (its host is gone) may take this long to reach
/// its next commit and see the change; then its process is stopped.
inline constexpr auto elastic_leave_grace = 10s;

/// Once a worker returned successfully, the others may take this long to
/// return too (Horovod: the job stops on the first success).
inline constexpr auto elastic_finish_grace = 10s;

/// hvactor::train: one report() waits this long for every other rank's
/// report of the same iteration and for the driver to persist rank 0's
/// checkpoint (a slow rank still finishing its epoch, a large checkpoint).
inline constexpr auto train_report_limit = std::chrono::minutes{30};

/// hvactor::train moves shards and checkpoints in ship_chunk_bytes chunks,
/// this many in flight: CAF serializes one message at about 0.4 GB/s, but
/// pipelined messages reach 1-1.5 GB/s (caf-0.17 notes, section 6).
inline constexpr size_t train_chunks_in_flight = 8;

/// Device backends poll NCCL and CUDA streams against the job's timeout
/// (NCCL calls are nonblocking so that a dead peer never hangs): back to
/// back, yielding the core between polls, for the first `device_spin` of a
/// wait (a collective or copy usually completes within it: measured on an
/// H100, sleeping from the first poll on cost ~100 us per wait), then every
/// `device_poll`.
inline constexpr auto device_spin = std::chrono::microseconds{2000};
inline constexpr auto device_poll = std::chrono::microseconds{50};

} // namespace hvactor::knobs
