#pragma once

// Internal: what the job coordinator keeps for an elastic job
// (coordinator_state.hpp declares the functions: elastic_run.cpp: the
// run, workers' failures; elastic_processes.cpp: starting and stopping the
// workers' processes; elastic_world.cpp: discovery, planning and
// publishing generations).
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
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "actors/elastic/elastic_policy.hpp"
#include "actors/elastic/elastic_rules.hpp"
#include "actors/protocol/interfaces.hpp"
#include "actors/elastic/elastic_workers.hpp"

namespace hvactor::detail {

/// What only an elastic job has (its workers are in the coordinator's
/// worker table; their phases and holdings in `registry`).
struct elastic_job {
  /// Discovery (script/function) runs here, off the coordinator's threads.
  caf::actor finder;
  bool first_poll = true;
  std::vector<host_slots> found;
  std::set<std::string> shipped; // nodes that cache the binary
  elastic::host_blacklist blacklist;
  elastic::host_order order;
  /// When a new world is published, waited for, or the job fails
  /// (elastic_rules.hpp): the reset count, waiting below min_workers.
  elastic::job_rules rules;
  /// Every worker's phase and holdings, and what to give back when it ends.
  elastic::worker_registry registry;
  int generation = -1;
  bool formed = false;
  /// Worker ids by rank in the current generation.
  std::vector<int32_t> seats;
  /// The first failure's text (all workers failing reports it).
  std::string first_failure;
  /// The run in flight: its call, who waits for it.
  std::optional<proto::call_request> call;
  caf::typed_response_promise<proto::call_results> run_promise;
  bool run_pending = false;
};

} // namespace hvactor::detail
