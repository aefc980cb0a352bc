#pragma once

// Internal: the coordinator's state and the functions its phases share
// (coordinator.cpp: start, registration, calls, shutdown;
// coordinator_placement.cpp: placement, reservation, code shipping).

#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "internal/coordinator.hpp"
#include "hvactor/errors.hpp"
#include "internal/placement.hpp"
#include "internal/call_fanin.hpp"
#include "internal/knobs.hpp"

namespace hvactor::detail {

enum class phase { idle, placing, shipping, registering, ready, stopping, stopped };

struct worker_slot {
  bool registered = false;
  proto::worker_hello hello;
  proto::horovod_worker handle;
  std::string node_id; // planned node
};

/// Who waits for a call's answer: a call on every rank, or on one.
struct call_waiter {
  bool single = false;
  caf::typed_response_promise<proto::call_results> all;
  caf::typed_response_promise<proto::call_result> one;
};

struct coordinator_state {
  coordinator_config cfg;
  phase ph = phase::idle;
  std::string endpoint;
  std::string rendezvous_host;
  uint16_t rendezvous_port = 0;
  caf::timestamp placement_deadline;
  std::string last_placement_problem;
  /// Bumped per placement attempt; answers of older attempts are ignored.
  uint64_t attempt = 0;
  placement_plan plan;
  /// Agents of the nodes of the current cluster view (direct connections
  /// for hvactor-node agents, cached for the job's life).
  std::map<std::string, proto::node_agent> agents_by_node;
  std::map<std::string, proto::node_info> infos_by_node;
  std::set<std::string> reserved_nodes;
  std::map<std::string, proto::node_colocator> colocators; // by node id
  /// hvactor-run: bytes of each rank's output written by on_output and not
  /// yet acknowledged to its colocator (output_window.hpp).
  std::map<int32_t, uint64_t> output_unacked;
  std::vector<worker_slot> workers;                        // by world rank
  size_t registered = 0;
  uint64_t shipped_bytes = 0;
  caf::typed_response_promise<proto::job_info> start_promise;
  bool start_pending = false;
  caf::error failure;
  /// shutdown: nodes whose colocator has not stopped yet.
  std::set<std::string> stopping_nodes;
  std::vector<caf::typed_response_promise<bool>> shutdown_promises;
  /// Calls in flight: their answers (fan-in) and who waits for them.
  call_fanin calls{knobs::call_error_grace};
  std::map<uint64_t, call_waiter> call_waiters;
  uint64_t next_call = 1;
  // hvactor-run jobs (cfg.launch).
  size_t exited_ok = 0;
  bool launch_done = false;
  proto::job_exit outcome;
  std::vector<caf::typed_response_promise<proto::job_exit>> finished_promises;
  static inline const char* name = "coordinator";

  int size() const {
    return static_cast<int>(workers.size());
  }
};

using coord_actor = proto::coordinator::stateful_pointer<coordinator_state>;

/// Fails the job: every pending call and a pending start get `err`.
void fail(coord_actor self, caf::error err);

/// Placement phase: asks the registry for live nodes, plans (PACK or one
/// colocator per node), reserves all-or-nothing, ships the binary where
/// needed, then calls spawn_workers. Retries every 200 ms until the
/// placement deadline, then fails with placement_timeout.
void try_placement(coord_actor self);

/// Releases every reservation this job holds that no colocator owns yet.
void release_reserved(coord_actor self);

/// Registration phase: one colocate per planned node (coordinator.cpp).
void spawn_workers(coord_actor self);

/// "rank 3 on node 'n1' (pid 4711)", for error messages.
std::string worker_label(const coordinator_state& st, int rank);

/// The Horovod variables of every rank, given each rank's node.
std::vector<proto::env_list> horovod_envs(const coordinator_state& st,
                                          const std::vector<std::string>& node_of_rank);

/// hvactor-run (coordinator_launch.cpp): every node started its processes.
void launch_started(coord_actor self);

/// hvactor-run: a process ended; `err` is the job error it would be.
void launch_exited(coord_actor self, const proto::worker_exit& ex, caf::error err);

/// hvactor-run: the job's outcome; answers every finished request.
void finish_launch(coord_actor self, proto::job_exit out);

/// Opens a call: on every rank into call_results, or (`single`) on one rank
/// into a call_result; sends it and returns the promise's id
/// (coordinator_calls.cpp).
uint64_t open_call(coord_actor self, call_waiter waiter, const std::vector<int>& ranks,
                   const proto::call_request& req);

/// A call the driver made itself failed with `err`: answers `waiter` like
/// a call's first failure (held for the grace, unless the job fails).
void hold_failure(coord_actor self, call_waiter waiter, caf::error err);

/// Answers every call in flight with `err` (a job failure or shutdown).
void fail_calls(coord_actor self, const caf::error& err);

/// A held call failure's grace passed: answer it unless answered meanwhile.
void call_grace_passed(coord_actor self, uint64_t id);

} // namespace hvactor::detail
