#pragma once

// Internal: what differs between the kinds of job one coordinator drives,
// chosen once when the coordinator starts (make_job_kind), so that its
// handlers (coordinator.cpp) and the dashboard's view carry no kind
// branches:
//  - a static job (static_kind.cpp): one placement of the whole world, the
//    Horovod variables handed out once every rank registered, calls fanned
//    in by the coordinator or made by the driver directly;
//  - an elastic job (actors/elastic/elastic_kind.cpp): generations of
//    seats, one run at a time, workers that come and go.
// hvactor-run's launch of either runs the user's program instead of
// hvactor workers (coordinator_config::launch): a difference in what the
// nodes start and in how a process's end counts (its exit code is the
// job's outcome), which each kind's functions read from the config.

#include <cstdint>
#include <memory>
#include <string>

#include <caf/error.hpp>
#include <caf/result.hpp>

#include "actors/coordinator/coordinator.hpp"
#include "actors/protocol/interfaces.hpp"

namespace hvactor::detail {

/// The coordinator's handle inside its own files: the public protocol plus
/// the timers it sends itself, which nobody else can send it.
using coordinator_actor = proto::coordinator::extend<
  // Static jobs: retry placement; the registration deadline; answer a
  // call's held failure (by call id).
  caf::reacts_to<proto::placement_retry_atom>, caf::reacts_to<proto::registration_due_atom>,
  caf::reacts_to<proto::call_grace_atom, uint64_t>,
  // hvactor-run: end the job after its first failure's grace.
  caf::reacts_to<proto::launch_finish_atom>,
  // A worker's connection dropped and its exit report did not arrive in
  // time (by worker id: the world rank of a static job).
  caf::reacts_to<proto::worker_lost_atom, int32_t>,
  // Elastic jobs: poll discovery; a generation's reset request's grace
  // passed; a leaving worker's grace passed; the finish grace passed.
  caf::reacts_to<proto::discover_atom>, caf::reacts_to<proto::reset_due_atom, int32_t>,
  caf::reacts_to<proto::leave_due_atom, int32_t>, caf::reacts_to<proto::finish_due_atom>,
  // The dashboard: send the job's view to the registry (coordinator_board.cpp).
  caf::reacts_to<proto::board_due_atom>>;

struct coordinator_state;
struct job_worker;

using coord_actor = coordinator_actor::stateful_pointer<coordinator_state>;

/// One kind of job: the coordinator calls it where kinds differ.
class job_kind {
public:
  virtual ~job_kind() = default;

  /// The dashboard's name: executor, elastic, run or run-elastic.
  virtual const char* board_name() const = 0;
  /// What messages call a worker: "rank" (static) or "worker" (elastic).
  virtual const char* worker_noun() const = 0;

  /// start(): place the job and start its workers; the start promise is
  /// answered by the kind once they are ready (or by a failure).
  virtual void start(coord_actor self) = 0;
  /// Why worker `w` (known to the job, not registered yet) may not
  /// register now; none when it may.
  virtual caf::error refuse_registration(const coordinator_state& st,
                                         const job_worker& w) const = 0;
  /// Worker `w` registered (its handle is monitored).
  virtual void registered(coord_actor self, job_worker& w) = 0;

  /// run() and run_remote() through the coordinator.
  virtual caf::result<proto::call_results> call(coord_actor self,
                                                const proto::call_request& req) = 0;
  virtual caf::result<proto::call_result> call_one(coord_actor self, int32_t rank,
                                                   const proto::call_request& req) = 0;

  /// A worker's process exited (its colocator's report; the dashboard has
  /// counted it).
  virtual void exited(coord_actor self, const proto::worker_exit& ex) = 0;
  /// A worker's connection dropped and its exit report did not come.
  virtual void worker_lost(coord_actor self, int32_t id) = 0;
  /// The job failed (the waiters have the error): what its workers need.
  virtual void failed(coord_actor self) = 0;
  /// Shutdown: stop every worker (colocators answer once they reaped).
  virtual void stop_workers(coord_actor self) = 0;
  /// Somebody waits for the job's end (finished_atom).
  virtual void awaited(coord_actor self) = 0;

  /// The dashboard's view: the world's size, a worker's rank in it (-1:
  /// none now), and its state when the kind knows better than "running".
  virtual int32_t world_size(const coordinator_state& st) const = 0;
  virtual int32_t rank_of(const job_worker& w) const = 0;
  virtual std::string worker_state(const coordinator_state& st, const job_worker& w) const = 0;
  /// The generation and resets the dashboard shows (0 for a static job).
  virtual int32_t generation(const coordinator_state& st) const = 0;
  virtual int32_t resets(const coordinator_state& st) const = 0;
};

/// The kind of the job `cfg` describes: elastic when
/// cfg.options.min_workers is set, else static.
std::unique_ptr<job_kind> make_job_kind(const coordinator_config& cfg);
std::unique_ptr<job_kind> make_static_kind(bool launch);
std::unique_ptr<job_kind> make_elastic_kind(bool launch);

} // namespace hvactor::detail
