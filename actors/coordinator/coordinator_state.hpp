#pragma once

// Internal: the job coordinator's state and the functions its files share.
//
// One actor drives every job (coordinator.cpp): it owns the worker table,
// the node agents and colocators, registration, exits, lost nodes, output
// and events, the failure fan-out and shutdown. Static and elastic jobs
// differ in how workers are planned and started, behind the job's kind
// (job_kind.hpp):
//  - static (coordinator_static.cpp, coordinator_placement.cpp): one
//    placement of the whole world (placement.hpp, rank_planner.hpp), one
//    colocator per node, the Horovod variables handed out once every rank
//    registered (static_roster.hpp holds the rules);
//  - elastic (elastic_state.hpp): generations planned by elastic_policy.hpp,
//    one colocator per worker, every worker's holdings in the
//    worker_registry.
// hvactor-run jobs (cfg.launch) run the user's program instead of hvactor
// workers; their end is the job's outcome (job_exit), which every job has.

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "hvactor/errors.hpp"
#include "actors/coordinator/call_fanin.hpp"
#include "actors/coordinator/coordinator.hpp"
#include "actors/coordinator/job_kind.hpp"
#include "actors/coordinator/job_observer.hpp"
#include "actors/elastic/elastic_state.hpp"
#include "base/internal/knobs_jobs.hpp"
#include "actors/placement/placement.hpp"
#include "actors/coordinator/static_roster.hpp"

namespace hvactor::detail {

enum class phase {
  idle,
  placing,     // static: reserving; elastic: waiting for min_workers slots
  shipping,    // static: the binary goes to the nodes
  registering, // static: the workers start and register
  ready,       // start() answered
  running,     // elastic: a run is in flight
  finishing,   // elastic: the first worker returned, the others get a grace
  stopping,
  stopped,
};

/// One worker process (static: one per world rank, id = rank; elastic: one
/// per seat ever started, id = start order).
struct job_worker {
  int32_t id = 0;
  /// The node it was planned on.
  std::string node;
  bool registered = false;
  proto::worker_hello hello;
  proto::horovod_worker handle;
  /// Its pid once known (registration or exit report), else 0.
  int32_t pid = 0;
  /// Why its actor went down, once it did ("" before).
  std::string down_reason;
  /// Elastic: its reservation's and colocator's job id "<job>.<id>";
  /// joined a generation that formed (holds the job's state); returned
  /// successfully with `payload`; its seat in the current generation (-1).
  std::string sub_job;
  bool has_state = false;
  bool returned = false;
  std::vector<char> payload;
  int rank = -1;
};

/// A colocator the job holds: one per node (static) or per worker (elastic).
struct colocation {
  std::string node;
  proto::node_colocator handle;
  /// Elastic: the worker it runs; -1 for a static node's colocator.
  int32_t worker = -1;
};

/// Who waits for a call's answer: a call on every rank, or on one.
struct call_waiter {
  bool single = false;
  caf::typed_response_promise<proto::call_results> all;
  caf::typed_response_promise<proto::call_result> one;
};

/// What only a static job has.
struct static_job {
  caf::timestamp placement_deadline;
  std::string last_placement_problem;
  /// Bumped per placement attempt; answers of older attempts are ignored.
  uint64_t attempt = 0;
  placement_plan plan;
  std::set<std::string> reserved_nodes;
  /// Registration and exits, by world rank (static_roster.hpp).
  static_roster roster;
  uint64_t shipped_bytes = 0;
  /// Calls in flight: their answers (fan-in) and who waits for them.
  call_fanin calls{knobs::call_error_grace};
  std::map<uint64_t, call_waiter> call_waiters;
  uint64_t next_call = 1;
  /// hvactor-run: the first failed process's outcome, final once the
  /// others had launch_failure_grace to exit.
  std::optional<proto::job_exit> pending_outcome;
};

/// What the dashboard shows beyond the worker table (coordinator_board.cpp).
struct board_state {
  bool pending = false;
  int64_t started_ms = 0;
  /// How workers that ended on their own ended, by id ("exited", "failed").
  std::map<int32_t, std::string> ended;
  std::map<int32_t, proto::rank_stat> stats;
  std::deque<std::string> failures;
  std::deque<std::string> log_tail;
  /// Each worker's latest collective totals (hvactor.collectives events);
  /// stall warnings seen.
  std::map<int32_t, std::vector<proto::op_stat>> ops;
  uint64_t stalls = 0;
};

struct coordinator_state {
  coordinator_config cfg;
  phase ph = phase::idle;
  std::string endpoint;
  std::string rendezvous_host;
  uint16_t rendezvous_port = 0;
  /// Nodes of the current cluster view: their infos, and their agents
  /// (direct connections to hvactor-node agents, cached for the job).
  std::map<std::string, proto::node_agent> agents_by_node;
  std::map<std::string, proto::node_info> infos_by_node;
  /// Every worker process, by id.
  std::map<int32_t, job_worker> workers;
  /// Every live colocator, by key (static: node id; elastic: sub job).
  std::map<std::string, colocation> colocators;
  /// Colocators told to stop that have not answered yet (keys).
  std::set<std::string> stopping;
  caf::typed_response_promise<proto::job_info> start_promise;
  bool start_pending = false;
  caf::error failure;
  /// The job's end: its failure, its shutdown, or (hvactor-run) every
  /// process's exit; answers every finished request.
  std::optional<proto::job_exit> outcome;
  std::vector<caf::typed_response_promise<proto::job_exit>> finished_promises;
  std::vector<caf::typed_response_promise<bool>> shutdown_promises;
  /// Bytes of each worker's output written by on_output and not yet
  /// acknowledged to its colocator (output_window.hpp).
  std::map<int32_t, uint64_t> output_unacked;
  static_job fixed;
  elastic_job el;
  board_state board;
  /// The job's kind (job_kind.hpp), chosen once from cfg.
  std::unique_ptr<job_kind> kind;
  /// Who watches the job (job_observer.hpp): the dashboard.
  std::unique_ptr<job_observer> observer = make_board_observer();
  static inline const char* name = "coordinator";

  int size() const {
    return static_cast<int>(workers.size());
  }
};

// --- the lifecycle (coordinator.cpp) ---

/// Fails the job: a pending start, every call or run in flight and the
/// outcome get `err`; elastic workers are stopped. Once only.
void fail(coord_actor self, caf::error err);

/// Why a call (`what`: "run", ...) cannot run now: the job's failure, its
/// shutdown, an elastic run in progress, or a job not started.
caf::error not_ready_error(const coordinator_state& st, const char* what);

/// "Elastic mode does not support `what`", as horovod.ray says it.
caf::error elastic_only(const char* what);

/// Sets the job's outcome (once) and answers every finished request.
void finish(coord_actor self, proto::job_exit out);

/// The request a node's agent gets to start `ranks` (worker ids) of this
/// job under the colocator job id `job`; `rank_env` for hvactor-run.
proto::spawn_request spawn_request_for(const coordinator_state& st, const std::string& node,
                                       const std::string& job, std::vector<int32_t> ranks,
                                       proto::env_list env, std::vector<proto::env_list> rank_env);

/// Keeps `coloc` (monitored) under `key`.
void adopt_colocator(coord_actor self, const std::string& key, colocation c);

/// Tells the colocator under `key` to stop (it reaps its processes, then
/// releases the reservation); it is forgotten once it answered or is gone.
/// Idempotent.
void stop_colocator(coord_actor self, const std::string& key);

/// Completes shutdown once every colocator stopped.
void shutdown_done(coord_actor self);

/// Makes sure `node` has a usable agent handle (hvactor-node agents get a
/// direct connection; a handle relayed by the head would route every
/// message through it), then calls `then` with an error or none.
void with_agent(coord_actor self, const std::string& node, caf::timespan timeout,
                std::function<void(caf::error)> then);

/// Takes the cluster's view: forgets agents of nodes that left or came back
/// as another process; keeps in-process agents. Returns the nodes whose
/// agent was forgotten.
std::vector<std::string> take_view(coord_actor self, const proto::cluster_view& view);

/// hvactor::log::event from worker `id`, to the driver's on_event.
void on_event(coord_actor self, int32_t id, const std::string& encoded);

// --- static jobs (coordinator_static.cpp, coordinator_placement.cpp,
// coordinator_calls.cpp, coordinator_launch.cpp) ---

/// Placement phase: asks the registry for live nodes, plans (PACK or one
/// colocator per node), reserves all-or-nothing, ships the binary where
/// needed, then calls spawn_workers. Retries every 200 ms until the
/// placement deadline, then fails with placement_timeout.
void try_placement(coord_actor self);

/// Releases every reservation this job holds that no colocator owns yet.
void release_reserved(coord_actor self);

/// Registration phase: one colocate per planned node.
void spawn_workers(coord_actor self);

/// Every rank registered: hands out the Horovod variables, then answers
/// start().
void hand_out_env(coord_actor self);

/// A static job's worker exited unexpectedly.
void static_exited(coord_actor self, const proto::worker_exit& ex);

/// A static job's node (its colocator) went away.
void static_node_lost(coord_actor self, const std::string& node, const caf::error& reason);
/// The same, with the reason in words.
void static_node_lost(coord_actor self, const std::string& node, const std::string& why);

/// A static job's worker's connection dropped (after knobs::exit_report_grace
/// without an exit report): its node is asked before the worker is blamed.
void static_worker_lost(coord_actor self, int32_t id);

/// The registration deadline passed.
void registration_due(coord_actor self);

/// "rank 3 on node 'n1' (pid 4711)", for error messages.
std::string worker_label(const coordinator_state& st, int rank);

/// hvactor-run: a process ended; `err` is the job error it would be.
void launch_exited(coord_actor self, const proto::worker_exit& ex, caf::error err);

/// Opens a call: on every rank into call_results, or (`single`) on one rank
/// into a call_result; sends it and returns the promise's id.
uint64_t open_call(coord_actor self, call_waiter waiter, const std::vector<int>& ranks,
                   const proto::call_request& req);

/// Answers every call in flight with `err` (a job failure or shutdown).
void fail_calls(coord_actor self, const caf::error& err);

/// A held call failure's grace passed: answer it unless answered meanwhile.
void call_grace_passed(coord_actor self, uint64_t id);

// --- elastic jobs (elastic_run.cpp, elastic_world.cpp,
// elastic_processes.cpp) ---

/// start(): spawns the finder and polls discovery until min_workers slots.
void elastic_start(coord_actor self);

/// Polls discovery (and the registry) once; schedules the next poll.
void poll_discovery(coord_actor self);

/// Plans and publishes the next generation when the hosts or the live
/// workers call for one; `failure` marks a reset after a failure (counted
/// against reset_limit even when the plan keeps the same seats).
void replan(coord_actor self, bool failure);

/// A run (or, for hvactor-run, the processes) begins.
void begin_run(coord_actor self);

/// An elastic worker registered: it gets the run's call.
void send_call(coord_actor self, int32_t id);

/// An elastic worker's process exited.
void elastic_exited(coord_actor self, const proto::worker_exit& ex);

/// Worker `id` failed (`why` completes "worker 3 on node 'n1' (pid 42) ..."):
/// stops it, blacklists its host and replans, or fails the job.
void worker_failed(coord_actor self, int32_t id, const std::string& why);

/// A leaving worker's grace passed: stop it if it is still there.
void leave_due(coord_actor self, int32_t id);

/// The run ended: answer it, stop every worker.
void finish_run(coord_actor self);

/// Starts the worker process of a new seat (elastic_processes.cpp).
void start_worker(coord_actor self, int32_t id);

/// Ends a worker: gives back what it holds on its node as the registry
/// says (stops its colocator, or releases its reservation). Idempotent.
void stop_worker(coord_actor self, int32_t id);

/// Whether elastic worker `id` ended (its process exited, failed or was
/// stopped).
inline bool is_gone(const coordinator_state& st, int32_t id) {
  return st.el.registry.is_gone(id);
}

/// Whether elastic worker `id` is not in the current world any more (it
/// exits on its own, or is stopped after its grace).
inline bool is_leaving(const coordinator_state& st, int32_t id) {
  auto* w = st.el.registry.find(id);
  return w != nullptr && w->phase == elastic::worker_phase::leaving;
}

/// "worker 3 on node 'n1' (pid 42)".
std::string worker_name(const job_worker& w);

/// The available hosts now: found, live and not blacklisted, in order.
std::vector<host_slots> available_hosts(coord_actor self);

} // namespace hvactor::detail
