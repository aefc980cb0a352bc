#pragma once

// Internal: the elastic coordinator's state and the functions its files
// share (elastic_coordinator.cpp: the actor, workers' failures, the run
// call; elastic_processes.cpp: starting and stopping the workers'
// processes; elastic_world.cpp: discovery, planning and publishing
// generations).
//
// Protocol of an elastic job (horovod/runner/elastic/driver.py, rebuilt):
//  1. start: discovery is polled every discovery_period; start() answers
//     once the available hosts (live, not blacklisted) offer min_workers
//     slots, else elastic_timeout names the slots seen.
//  2. run(fn): the coordinator plans generation 0 (elastic_policy.hpp) and
//     starts one worker process per seat: its own reservation and
//     colocator (job id "<job>.<worker id>"), so that a worker can start and
//     stop alone. Every worker gets fn as soon as it registered.
//  3. Each generation g is published in the rendezvous store (scope
//     "<job>/elastic", elastic_session.hpp): every live worker's
//     assignment (its ranks, or "removed") and latest/<worker> = g; the
//     previous generation's scope is closed, failing its pending waits.
//     hvd::init in the workers takes the newest assignment.
//  4. A change of the available hosts, once the current generation has
//     formed (every seat joined), publishes g+1 and changed/<g>: rank 0 of
//     g sees it at its next commit and every rank raises
//     hosts_updated_interrupt. Survivors keep their processes; leaving
//     workers get "removed" and exit; new seats get new workers.
//  5. A worker failure (process exit, a raised call, its node lost) or a
//     worker's reset request (reset/<g>, its collectives failed) publishes
//     g+1 at once (after knobs::elastic_reset_grace for requests);
//     the failed worker's host is blacklisted (cooldown_range).
//  6. The first worker to return successfully ends the run: the others get
//     knobs::elastic_finish_grace to return; the result is every successful
//     worker's value in final rank order. If every worker failed, the run
//     fails with the first failure.

#include <map>
#include <set>
#include <optional>
#include <string>
#include <vector>

#include "internal/coordinator.hpp"
#include "internal/elastic_policy.hpp"
#include "internal/elastic_workers.hpp"

namespace hvactor::detail {

enum class elastic_phase { idle, waiting, ready, running, finishing, stopping, stopped };

/// One worker process of an elastic job.
struct elastic_worker {
  int32_t id = 0;
  std::string node;
  /// The reservation's and colocator's job id: "<job>.<id>".
  std::string sub_job;
  proto::node_colocator coloc;
  proto::horovod_worker handle;
  int32_t pid = 0;
  bool registered = false;
  /// Joined a generation that formed: holds the job's state.
  bool has_state = false;
  // Its phase (leaving, gone) and what it holds on its node live in the
  // state's worker registry (elastic_workers.hpp).
  /// Returned successfully (the run's call, or exit 0 for hvactor-run).
  bool returned = false;
  std::vector<char> payload;
  /// Seat in the current generation, -1 when not seated.
  int rank = -1;
};

struct elastic_coordinator_state {
  coordinator_config cfg;
  elastic_phase ph = elastic_phase::idle;
  std::string endpoint;
  std::string rendezvous_host;
  uint16_t rendezvous_port = 0;
  /// Discovery (script/function) runs here, off the coordinator's threads.
  caf::actor finder;
  bool first_poll = true;
  std::vector<host_slots> found;
  std::map<std::string, proto::node_info> infos_by_node;
  std::map<std::string, proto::node_agent> agents_by_node;
  std::set<std::string> shipped; // nodes that cache the binary
  elastic::host_blacklist blacklist;
  elastic::host_order order;
  /// Since when there have been fewer than min_workers slots (start, or a
  /// shrunken job); nullopt while there are enough.
  std::optional<caf::timestamp> short_since;
  std::map<int32_t, elastic_worker> workers;
  /// Every worker's phase and holdings, and what to give back when it ends.
  elastic::worker_registry registry;
  int generation = -1;
  bool formed = false;
  /// Worker ids by rank in the current generation.
  std::vector<int32_t> seats;
  int resets = 0;
  /// The current world failed and waits for a generation it could not get
  /// yet (too few slots).
  bool broken = false;
  /// The first failure's text (all workers failing reports it).
  std::string first_failure;
  caf::typed_response_promise<proto::job_info> start_promise;
  bool start_pending = false;
  /// The run in flight: its call, who waits for it.
  std::optional<proto::call_request> call;
  caf::typed_response_promise<proto::call_results> run_promise;
  bool run_pending = false;
  std::vector<caf::typed_response_promise<proto::job_exit>> finished_promises;
  std::optional<proto::job_exit> outcome;
  caf::error failure;
  std::set<std::string> stopping_jobs;
  std::vector<caf::typed_response_promise<bool>> shutdown_promises;
  static inline const char* name = "elastic_coordinator";
};

using elastic_actor = proto::coordinator::stateful_pointer<elastic_coordinator_state>;

/// Whether worker `id` ended (its process exited, failed or was stopped).
inline bool is_gone(const elastic_coordinator_state& st, int32_t id) {
  return st.registry.is_gone(id);
}

/// Whether worker `id` is not in the current world any more (it exits on
/// its own, or is stopped after its grace).
inline bool is_leaving(const elastic_coordinator_state& st, int32_t id) {
  auto* w = st.registry.find(id);
  return w != nullptr && w->phase == elastic::worker_phase::leaving;
}

/// Polls discovery (and the registry) once; schedules the next poll.
void poll_discovery(elastic_actor self);

/// Plans and publishes the next generation when the hosts or the live
/// workers call for one; `failure` marks a reset after a failure (counted
/// against reset_limit even when the plan keeps the same seats).
void replan(elastic_actor self, bool failure);

/// Fails the job: a pending start, run or finished request gets `err`.
void elastic_fail(elastic_actor self, caf::error err);

/// Worker `id` failed (`why` completes "worker 3 on node 'n1' (pid 42) ..."):
/// stops it, blacklists its host and replans, or fails the job
/// (elastic_coordinator.cpp).
void worker_failed(elastic_actor self, int32_t id, const std::string& why);

/// Answers the shutdown once every colocator stopped.
void shutdown_done(elastic_actor self);

/// Starts the worker process of a new seat on `node` (elastic_processes.cpp).
void start_worker(elastic_actor self, int32_t id);

/// Ends a worker: gives back what it holds on its node as the registry
/// says (stops its colocator, or releases its reservation). Idempotent.
void stop_worker(elastic_actor self, int32_t id);

/// Tells worker `id`'s colocator to stop (it reaps the process, then
/// releases the reservation); reports the answer to the registry.
void stop_colocator(elastic_actor self, int32_t id);

/// The available hosts now: found, live and not blacklisted, in order.
std::vector<host_slots> available_hosts(elastic_actor self);

} // namespace hvactor::detail
