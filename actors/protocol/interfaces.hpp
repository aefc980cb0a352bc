#pragma once

// Every typed actor of hvactor and every message it exchanges, in one place.
//
// Cluster membership (hvactor-node):
//  A. The head runs a `node_registry` and a `node_agent`; every other
//     hvactor-node runs a `node_agent`, publishes it and sends `join` to it,
//     which connects to the head and joins the registry with its
//     `node_info` (address, port, resources). The registry monitors each
//     agent and drops a node whose process dies (at once) or freezes (CAF
//     heartbeat timeout). Agents send `update` after every change of their
//     free resources; an agent that loses the head rejoins every second.
//  B. An embedded cluster is the same pair of actors inside the driver.
//
// Protocol of a static job (executor::start and the calls after it):
//  1. The driver spawns a `coordinator` (and beside it a `rendezvous_store`)
//     and publishes both on the driver's address.
//  2. `coordinator` asks the registry for a `cluster_view`, connects
//     directly to the agents of hvactor-node nodes, plans a placement (PACK
//     or one colocator per distinct node) and sends `reserve` to every
//     chosen agent. If any reservation fails it sends `release` to all of
//     them and retries until the placement timeout. Agents monitor the
//     requester and release a reservation whose driver died.
//  3. To each chosen node that caches binaries it sends `has_bin` with the
//     SHA-256 of the driver's executable and, if missing, the binary in
//     `put_bin` chunks (the node verifies the hash before caching it).
//  4. `coordinator` sends `colocate` to each chosen agent. The agent spawns a
//     `node_colocator` that holds the reservation, starts one worker process
//     per assigned rank (from the cached binary) and monitors the
//     coordinator and the processes.
//  5. Each worker process connects to the coordinator and sends `register`
//     with its `worker_hello` and its `horovod_worker` handle.
//  6. Once every rank registered (else `rendezvous_timeout` naming the
//     missing ranks), `coordinator` computes local/cross ranks and sends
//     every worker `set_env` with the Horovod variables, then the user's
//     extra_env_vars; then `start<T>` sends `call` with the constructor.
//  7. A synchronous `run()` from the thread that started the executor sends
//     `call` to the workers itself, one request id for all of its direct
//     calls (job_session::call_workers; each call numbered by its `seq`);
//     the coordinator tells it the job's failure as a `job_failed` answer
//     to that id. Calls from other threads,
//     `run_remote`, `execute_single` and every call of an elastic job travel
//     driver -> coordinator -> workers. Answers come back in world-rank
//     order. A worker process that exits is reported by its
//     colocator (`worker_exit`, with exit status and stderr tail) and fails
//     every pending call of the job at once; a colocator that goes away
//     (its node died) fails the job with `node_lost`.
//  8. `shutdown`: coordinator sends `stop` to every colocator, which
//     terminates its workers, releases the reservation and quits. A dead
//     coordinator (driver killed) is a `down_msg` at every colocator and
//     worker, which then do the same on their own.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <caf/all.hpp>
#include <caf/type_id.hpp>

#include "actors/board/board_types.hpp"
#include "actors/protocol/messages.hpp"

// The rendezvous_store interface, its atoms and the error category.
#include "collectives/rendezvous/rendezvous_protocol.hpp"

CAF_BEGIN_TYPE_ID_BLOCK(hvactor, caf::id_block::hvactor_rendezvous::end)
  CAF_ADD_ATOM(hvactor, hvactor::proto, info_atom, "info")
  CAF_ADD_ATOM(hvactor, hvactor::proto, reserve_atom, "reserve")
  CAF_ADD_ATOM(hvactor, hvactor::proto, release_atom, "release")
  CAF_ADD_ATOM(hvactor, hvactor::proto, colocate_atom, "colocate")
  CAF_ADD_ATOM(hvactor, hvactor::proto, stop_atom, "stop")
  CAF_ADD_ATOM(hvactor, hvactor::proto, exited_atom, "exited")
  CAF_ADD_ATOM(hvactor, hvactor::proto, register_atom, "register")
  CAF_ADD_ATOM(hvactor, hvactor::proto, start_atom, "start")
  CAF_ADD_ATOM(hvactor, hvactor::proto, set_env_atom, "set_env")
  CAF_ADD_ATOM(hvactor, hvactor::proto, call_atom, "call")
  CAF_ADD_ATOM(hvactor, hvactor::proto, call_one_atom, "call_one")
  CAF_ADD_ATOM(hvactor, hvactor::proto, shutdown_atom, "shutdown")
  CAF_ADD_ATOM(hvactor, hvactor::proto, ping_atom, "ping")
  CAF_ADD_ATOM(hvactor, hvactor::proto, rejoin_atom, "rejoin")
  CAF_ADD_ATOM(hvactor, hvactor::proto, sigterm_due_atom, "term_due")
  CAF_ADD_ATOM(hvactor, hvactor::proto, sigkill_due_atom, "kill_due")
  CAF_ADD_ATOM(hvactor, hvactor::proto, join_atom, "join")
  CAF_ADD_ATOM(hvactor, hvactor::proto, update_atom, "update")
  CAF_ADD_ATOM(hvactor, hvactor::proto, list_atom, "list")
  CAF_ADD_ATOM(hvactor, hvactor::proto, has_bin_atom, "has_bin")
  CAF_ADD_ATOM(hvactor, hvactor::proto, put_bin_atom, "put_bin")
  CAF_ADD_ATOM(hvactor, hvactor::proto, output_atom, "output")
  CAF_ADD_ATOM(hvactor, hvactor::proto, event_atom, "event")
  CAF_ADD_ATOM(hvactor, hvactor::proto, op_stats_atom, "op_stats")
  CAF_ADD_ATOM(hvactor, hvactor::proto, finished_atom, "finished")
  // The coordinator's timers, one atom each (its private interface,
  // coordinator_state.hpp: nobody else can send them).
  CAF_ADD_ATOM(hvactor, hvactor::proto, placement_retry_atom, "plc_retry")
  CAF_ADD_ATOM(hvactor, hvactor::proto, registration_due_atom, "reg_due")
  CAF_ADD_ATOM(hvactor, hvactor::proto, launch_finish_atom, "launch_fin")
  CAF_ADD_ATOM(hvactor, hvactor::proto, call_grace_atom, "call_grace")
  CAF_ADD_ATOM(hvactor, hvactor::proto, worker_lost_atom, "wrk_lost")
  CAF_ADD_ATOM(hvactor, hvactor::proto, output_ack_atom, "output_ack")
  // The coordinator's timers of elastic jobs.
  CAF_ADD_ATOM(hvactor, hvactor::proto, discover_atom, "discover")
  CAF_ADD_ATOM(hvactor, hvactor::proto, reset_due_atom, "reset_due")
  CAF_ADD_ATOM(hvactor, hvactor::proto, leave_due_atom, "leave_due")
  CAF_ADD_ATOM(hvactor, hvactor::proto, finish_due_atom, "finish_due")
  // The dashboard's data (board_types.hpp) and its timers.
  CAF_ADD_ATOM(hvactor, hvactor::proto, job_view_atom, "job_view")
  CAF_ADD_ATOM(hvactor, hvactor::proto, job_end_atom, "job_end")
  CAF_ADD_ATOM(hvactor, hvactor::proto, train_point_atom, "train_pt")
  CAF_ADD_ATOM(hvactor, hvactor::proto, board_atom, "board")
  CAF_ADD_ATOM(hvactor, hvactor::proto, rank_stats_atom, "rank_stats")
  CAF_ADD_ATOM(hvactor, hvactor::proto, board_due_atom, "board_due")
  CAF_ADD_ATOM(hvactor, hvactor::proto, sample_atom, "sample")
  CAF_ADD_TYPE_ID(hvactor, (hvactor::proto::resources))
  CAF_ADD_TYPE_ID(hvactor, (hvactor::proto::node_info))
  CAF_ADD_TYPE_ID(hvactor, (hvactor::proto::reservation))
  CAF_ADD_TYPE_ID(hvactor, (hvactor::proto::env_list))
  CAF_ADD_TYPE_ID(hvactor, (hvactor::proto::spawn_request))
  CAF_ADD_TYPE_ID(hvactor, (hvactor::proto::worker_hello))
  CAF_ADD_TYPE_ID(hvactor, (hvactor::proto::worker_exit))
  CAF_ADD_TYPE_ID(hvactor, (hvactor::detail::call_data))
  CAF_ADD_TYPE_ID(hvactor, (hvactor::proto::call_result))
  CAF_ADD_TYPE_ID(hvactor, (hvactor::proto::call_results))
  CAF_ADD_TYPE_ID(hvactor, (hvactor::proto::job_failed))
  CAF_ADD_TYPE_ID(hvactor, (hvactor::proto::job_info))
  CAF_ADD_TYPE_ID(hvactor, (hvactor::proto::job_exit))
  CAF_ADD_TYPE_ID(hvactor, (hvactor::proto::host_list))
  CAF_ADD_TYPE_ID(hvactor, (hvactor::proto::rank_stats))
  CAF_ADD_TYPE_ID(hvactor, (hvactor::proto::job_view))
  CAF_ADD_TYPE_ID(hvactor, (hvactor::proto::train_point))
  CAF_ADD_TYPE_ID(hvactor, (hvactor::proto::board))
  CAF_ADD_TYPE_ID(hvactor, (std::vector<hvactor::proto::op_stat>))
CAF_END_TYPE_ID_BLOCK(hvactor)

namespace hvactor::proto {

/// Runs in every worker process (one rank per process).
using horovod_worker = caf::typed_actor<
  // Replace the process environment entries (Horovod contract, then extras).
  caf::replies_to<set_env_atom, env_list>::with<bool>,
  // Run one function (or constructor) and answer with its result.
  caf::replies_to<call_atom, call_request>::with<call_result>,
  // The job ended: leave the process.
  caf::reacts_to<stop_atom>>;

/// Holds one job's reservation on one node and owns its worker processes.
using node_colocator = caf::typed_actor<
  // Terminate the workers (SIGTERM, SIGKILL after a grace period), release
  // the reservation, quit. Answers once every worker process was reaped.
  caf::replies_to<stop_atom>::with<bool>,
  // From the colocator's own reaper threads.
  caf::reacts_to<exited_atom, worker_exit>,
  // From the coordinator (hvactor-run): the launcher wrote this many more
  // bytes of this rank's output; its reader may send as much again.
  caf::reacts_to<output_ack_atom, int32_t, uint64_t>,
  // Internal timers: the workers' leave grace ended (send SIGTERM), then
  // their SIGTERM grace ended (send SIGKILL).
  caf::reacts_to<sigterm_due_atom>,
  caf::reacts_to<sigkill_due_atom>,
  // Internal timer: sample the workers' CPU time and memory for the
  // coordinator (every knobs::rank_sample_interval).
  caf::reacts_to<sample_atom>,
  // Is its node reachable? (a worker's connection dropped). Its pid.
  caf::replies_to<ping_atom>::with<int32_t>>;

/// Drives one job from the driver process, static or elastic
/// (coordinator_state.hpp); the timers it sends itself are not part of
/// this interface.
using coordinator = caf::typed_actor<
  // Place, spawn, register, hand out env; answers when every worker is
  // ready. Arguments: where workers reach this coordinator ("host:port")
  // and where the rendezvous store answers (host, port).
  caf::replies_to<start_atom, std::string, std::string, uint16_t>::with<job_info>,
  // From worker processes (step 4).
  caf::replies_to<register_atom, worker_hello, horovod_worker>::with<bool>,
  // From colocators: a worker process ended.
  caf::reacts_to<exited_atom, worker_exit>,
  // From colocators: their workers' CPU time and memory (the dashboard).
  caf::reacts_to<rank_stats_atom, rank_stats>,
  // From a process's monitor thread: one line of its stdout (1) or stderr
  // (2) (hvactor-run jobs), by world rank. Sent as its colocator, which gets
  // output_ack credits back once the launcher wrote the bytes.
  caf::reacts_to<output_atom, int32_t, int32_t, std::string>,
  // hvactor::log::event from a process, by world rank (encoded key/values).
  caf::reacts_to<event_atom, int32_t, std::string>,
  // From colocators: a process's collective totals (the dashboard), by
  // world rank; they replace its earlier ones.
  caf::reacts_to<op_stats_atom, int32_t, std::vector<op_stat>>,
  // hvactor-run: answers when every rank exited, or the job failed.
  caf::replies_to<finished_atom>::with<job_exit>,
  // A call on every worker, results in world-rank order.
  caf::replies_to<call_atom, call_request>::with<call_results>,
  // A call on one rank.
  caf::replies_to<call_one_atom, int32_t, call_request>::with<call_result>,
  // Stop every worker and release every reservation; idempotent.
  caf::replies_to<shutdown_atom>::with<bool>>;

/// Owns one machine's resources and creates colocators on it.
using node_agent = caf::typed_actor<
  caf::replies_to<info_atom>::with<node_info>,
  // All-or-nothing on this node: either the whole request or an error. The
  // requester is monitored: a reservation whose driver dies is released.
  caf::replies_to<reserve_atom, std::string, resources>::with<reservation>,
  caf::replies_to<release_atom, std::string>::with<bool>,
  // Start a colocator for a reserved job; it reports to the coordinator.
  caf::replies_to<colocate_atom, spawn_request, coordinator>::with<node_colocator>,
  // Code shipping: is the binary with this SHA-256 in the node's cache? A
  // library also names where the driver found it: a node that has the same
  // bytes at that path caches its own copy instead of a shipment.
  caf::replies_to<has_bin_atom, std::string, std::string>::with<bool>,
  // One chunk of a binary (hash, job id, offset, bytes, last chunk); the
  // last one verifies the hash and moves the file into the cache (0700).
  caf::replies_to<put_bin_atom, std::string, std::string, uint64_t, std::vector<char>,
                  bool>::with<bool>,
  // Join the head at (host, port), announcing the port this agent is
  // published on, and keep rejoining when the head goes away; answers once
  // the first join succeeded. An agent spawned beside the registry (the
  // head) joins that one and ignores host and port.
  caf::replies_to<join_atom, std::string, uint16_t, uint16_t>::with<bool>,
  // Node shutdown: stop every colocator (kill its workers), then quit.
  caf::replies_to<stop_atom>::with<bool>,
  // Internal timer: try to rejoin a head that went away.
  caf::reacts_to<rejoin_atom>>;

/// Live nodes of a cluster, as the registry (or an embedded cluster) sees them.
struct cluster_view {
  std::vector<node_info> nodes;
  /// Same order as `nodes`.
  std::vector<node_agent> agents;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, cluster_view& x) {
  return f(caf::meta::type_name("cluster_view"), x.nodes, x.agents);
}

/// Cluster membership on the head: live nodes and their free resources.
using node_registry = caf::typed_actor<
  // A node (re)joins; its agent is monitored and dropped when it goes away.
  caf::replies_to<join_atom, node_info, node_agent>::with<bool>,
  // An agent's resources changed (reserve, release, job end).
  caf::reacts_to<update_atom, node_info>,
  // Every live node, in join order.
  caf::replies_to<list_atom>::with<cluster_view>,
  // The dashboard's data: a job changed (from its coordinator); a training
  // run reported; every job and run kept (board_types.hpp). A job's last
  // view is a request: the driver waits (briefly) until the head has it.
  caf::reacts_to<job_view_atom, job_view>, caf::replies_to<job_end_atom, job_view>::with<bool>,
  caf::reacts_to<train_point_atom, train_point>,
  caf::replies_to<board_atom>::with<board>>;

} // namespace hvactor::proto

CAF_BEGIN_TYPE_ID_BLOCK(hvactor_handles, caf::id_block::hvactor::end)
  CAF_ADD_TYPE_ID(hvactor_handles, (hvactor::proto::horovod_worker))
  CAF_ADD_TYPE_ID(hvactor_handles, (hvactor::proto::node_colocator))
  CAF_ADD_TYPE_ID(hvactor_handles, (hvactor::proto::coordinator))
  CAF_ADD_TYPE_ID(hvactor_handles, (hvactor::proto::node_agent))
  CAF_ADD_TYPE_ID(hvactor_handles, (hvactor::proto::rendezvous_store))
  CAF_ADD_TYPE_ID(hvactor_handles, (hvactor::proto::cluster_view))
  CAF_ADD_TYPE_ID(hvactor_handles, (hvactor::proto::node_registry))
CAF_END_TYPE_ID_BLOCK(hvactor_handles)

namespace hvactor::proto {

/// Registers the types above (not the rendezvous protocol, which
/// the system config registers) with a config.
void register_types(caf::actor_system_config& cfg);

} // namespace hvactor::proto
