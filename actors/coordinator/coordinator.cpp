// The job coordinator: one actor for static and elastic jobs
// (coordinator_state.hpp). This file holds its handlers and the lifecycle
// every job shares: start, registration, exits, lost nodes and workers,
// output and events, failure and shutdown. What differs between kinds of
// job goes to the job's kind (job_kind.hpp: static_kind.cpp,
// actors/elastic/elastic_kind.cpp); what the dashboard shows to the job's
// observer (job_observer.hpp).

#include "actors/coordinator/coordinator.hpp"

#include <fmt/format.h>

#include "hvactor/errors.hpp"
#include "hvactor/event.hpp"
#include "actors/coordinator/coordinator_state.hpp"
#include "base/internal/knobs_jobs.hpp"
#include "base/internal/log.hpp"
#include "actors/coordinator/output_window.hpp"
#include "actors/node/worker_env.hpp"
#include "actors/protocol/system_config.hpp"

namespace hvactor::detail {

using namespace proto;

namespace {

// The driver's direct caller learns that the job failed or shuts down:
// its call in flight, if any, ends with `err`, and it makes no more direct
// calls (coordinator.hpp, direct_caller). Once.
void tell_direct_caller(coordinator_state& st, const caf::error& err) {
  auto& d = st.cfg.direct;
  if (!d.actor)
    return;
  d.actor->enqueue(caf::make_mailbox_element(nullptr, d.call.response_id(), {},
                                             job_failed{err}),
                   nullptr);
  d.actor = nullptr;
}

// A pending start, every call or run in flight and the outcome get `err`.
void answer_pending(coord_actor self, const caf::error& err) {
  auto& st = self->state;
  if (st.start_pending) {
    st.start_pending = false;
    st.start_promise.deliver(err);
  }
  fail_calls(self, err);
  if (st.el.run_pending) {
    st.el.run_pending = false;
    st.el.run_promise.deliver(err);
  }
  if (!st.outcome) {
    job_exit out;
    out.message = describe(err);
    finish(self, std::move(out));
  }
}

// A handler that throws ends the coordinator (CAF), and the request it was
// handling is never answered: fail the job with the exception's text
// first, so that every waiter gets it (the session's own waits also watch
// the coordinator's exit, exit_watch), and exit with it.
void handle_exceptions(coord_actor self) {
  self->set_exception_handler([=](caf::scheduled_actor*, std::exception_ptr& eptr) {
    std::string what = "unknown exception";
    try {
      std::rethrow_exception(eptr);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    auto err = make_error(error_kind::generic,
                          fmt::format("the job's coordinator failed: {}", what));
    log::error("job {}: {}", self->state.cfg.job_id, describe(err));
    fail(self, err);
    tell_direct_caller(self->state, err);
    return err;
  });
}

// A colocator that is gone needs no stop: its node died or shut down (a
// request to a dead node would only end by its timeout).
bool colocator_down(coord_actor self, const caf::down_msg& dm) {
  auto& st = self->state;
  for (auto i = st.colocators.begin(); i != st.colocators.end(); ++i) {
    if (i->second.handle.address() != dm.source)
      continue;
    auto key = i->first;
    auto c = i->second;
    st.colocators.erase(i);
    if (st.stopping.erase(key) > 0) {
      if (c.worker >= 0)
        st.el.registry.colocator_stopped(c.worker);
      shutdown_done(self);
      return true;
    }
    if (c.worker >= 0) {
      st.el.registry.colocator_stopped(c.worker);
      worker_failed(self, c.worker,
                    fmt::format("was lost with its node ({})", caf::to_string(dm.reason)));
    } else if (st.ph != phase::stopping && st.ph != phase::stopped && !st.failure) {
      static_node_lost(self, c.node, dm.reason);
    }
    return true;
  }
  return false;
}

// An agent (hvactor-node) went away while a static job was starting: the
// node is gone; fail now if the plan uses it and it runs no colocator.
bool agent_down(coord_actor self, const caf::down_msg& dm) {
  auto& st = self->state;
  for (auto& [node, agent] : st.agents_by_node) {
    if (agent.address() != dm.source)
      continue;
    // The dead handle stays: placement compares nodes before reuse.
    bool planned = false;
    for (auto& a : st.fixed.plan.nodes)
      planned = planned || a.node_id == node;
    if (planned && !st.colocators.count(node)
        && (st.ph == phase::shipping || st.ph == phase::registering))
      fail(self, make_error(error_kind::node_lost,
                            fmt::format("node '{}' left the cluster while the job was starting "
                                        "({}); its workers never started",
                                        node, caf::to_string(dm.reason))));
    return true;
  }
  return false;
}

void handle_downs(coord_actor self) {
  self->set_down_handler([=](caf::down_msg& dm) {
    auto& st = self->state;
    if (colocator_down(self, dm) || st.ph == phase::stopping || st.ph == phase::stopped
        || st.failure || agent_down(self, dm))
      return;
    for (auto& [id, w] : st.workers)
      if (w.registered && w.handle.address() == dm.source) {
        // Give the colocator's exit report (exit code, stderr) time to win.
        w.down_reason = caf::to_string(dm.reason);
        self->delayed_send(self, knobs::exit_report_grace, worker_lost_atom_v, id);
        return;
      }
  });
}

caf::result<job_info> on_start(coord_actor self, std::string& endpoint, std::string& rdv_host,
                               uint16_t rdv_port) {
  auto& st = self->state;
  if (st.ph != phase::idle)
    return make_error(error_kind::generic, "start() was already called on this executor");
  st.endpoint = std::move(endpoint);
  st.rendezvous_host = std::move(rdv_host);
  st.rendezvous_port = rdv_port;
  st.ph = phase::placing;
  st.start_promise = self->make_response_promise<job_info>();
  st.start_pending = true;
  auto rp = st.start_promise;
  st.observer->started(self);
  st.kind->start(self);
  st.observer->changed(self);
  return rp;
}

caf::result<bool> on_register(coord_actor self, const worker_hello& hello,
                              horovod_worker handle) {
  auto& st = self->state;
  auto i = st.workers.find(hello.world_rank);
  bool known = hello.job_id == st.cfg.job_id && i != st.workers.end() && !i->second.registered;
  if (!known)
    return make_error(error_kind::generic,
                      fmt::format("unexpected registration of {} {} for job {}",
                                  st.kind->worker_noun(), hello.world_rank, hello.job_id));
  auto& w = i->second;
  if (auto refused = st.kind->refuse_registration(st, w))
    return refused;
  w.registered = true;
  w.hello = hello;
  w.handle = handle;
  w.pid = hello.pid;
  self->monitor(handle);
  self->state.observer->changed(self);
  st.kind->registered(self, w);
  return true;
}

void on_output(coord_actor self, int32_t id, int32_t stream, const std::string& line) {
  auto& st = self->state;
  if (st.cfg.on_output)
    st.cfg.on_output(id, stream, line);
  // on_output wrote the line: give its colocator's reader credit back.
  auto& unacked = st.output_unacked[id];
  unacked += line.size() + 1;
  if (unacked >= output_ack_bytes) {
    if (auto from = caf::actor_cast<node_colocator>(self->current_sender()))
      self->send(from, output_ack_atom_v, id, unacked);
    unacked = 0;
  }
}

caf::result<bool> on_shutdown(coord_actor self) {
  auto& st = self->state;
  auto err = make_error(error_kind::not_started, "the executor was shut down");
  tell_direct_caller(st, err);
  if (st.ph == phase::stopped)
    return true;
  auto rp = self->make_response_promise<bool>();
  st.shutdown_promises.push_back(rp);
  if (st.ph == phase::stopping)
    return rp; // a second shutdown waits for the first
  if (!st.outcome) {
    job_exit out;
    out.message = "the job was stopped before every rank exited";
    finish(self, std::move(out));
  }
  answer_pending(self, err);
  st.ph = phase::stopping;
  self->state.observer->changed(self);
  st.kind->stop_workers(self);
  // Colocators answer their stop once their processes were reaped.
  shutdown_done(self);
  return rp;
}

coordinator_actor::behavior_type coordinator_impl(coord_actor self, coordinator_config cfg) {
  self->state.el.blacklist = elastic::host_blacklist{cfg.options.cooldown_range};
  self->state.kind = make_job_kind(cfg);
  self->state.cfg = std::move(cfg);
  handle_exceptions(self);
  handle_downs(self);
  return {
    [=](start_atom, std::string& endpoint, std::string& rdv_host, uint16_t rdv_port) {
      return on_start(self, endpoint, rdv_host, rdv_port);
    },
    [=](register_atom, const worker_hello& hello, horovod_worker handle) {
      return on_register(self, hello, std::move(handle));
    },
    [=](exited_atom, const worker_exit& ex) {
      self->state.observer->worker_exited(self, ex);
      self->state.kind->exited(self, ex);
    },
    [=](output_atom, int32_t id, int32_t stream, const std::string& line) {
      self->state.observer->output(self, id, line);
      on_output(self, id, stream, line);
    },
    [=](rank_stats_atom, const rank_stats& stats) {
      self->state.observer->usage(self, stats);
    },
    [=](board_due_atom) { self->state.observer->due(self); },
    [=](event_atom, int32_t id, const std::string& encoded) {
      self->state.observer->event(self, encoded);
      on_event(self, id, encoded);
    },
    [=](op_stats_atom, int32_t id, std::vector<op_stat>& ops) {
      self->state.observer->totals(self, id, std::move(ops));
    },
    [=](finished_atom) -> caf::result<job_exit> {
      auto& st = self->state;
      if (st.outcome)
        return *st.outcome;
      auto rp = self->make_response_promise<job_exit>();
      st.finished_promises.push_back(rp);
      st.kind->awaited(self);
      return rp;
    },
    [=](call_atom, const call_request& req) { return self->state.kind->call(self, req); },
    [=](call_one_atom, int32_t rank, const call_request& req) {
      return self->state.kind->call_one(self, rank, req);
    },
    [=](shutdown_atom) { return on_shutdown(self); },
    [=](placement_retry_atom) { try_placement(self); },
    [=](registration_due_atom) {
      registration_due(self);
      self->state.observer->changed(self);
    },
    [=](call_grace_atom, uint64_t id) { call_grace_passed(self, id); },
    [=](launch_finish_atom) {
      // The first failure's grace passed: its outcome was kept meanwhile.
      auto& st = self->state;
      if (st.fixed.pending_outcome)
        finish(self, std::move(*st.fixed.pending_outcome));
    },
    [=](worker_lost_atom, int32_t id) {
      self->state.kind->worker_lost(self, id);
      self->state.observer->changed(self);
    },
    [=](discover_atom) { poll_discovery(self); self->state.observer->changed(self); },
    [=](reset_due_atom, int32_t gen) {
      auto& st = self->state;
      if (st.el.generation == gen && st.ph == phase::running) {
        st.el.rules.mark_broken();
        replan(self, true);
      }
      self->state.observer->changed(self);
    },
    [=](leave_due_atom, int32_t id) {
      leave_due(self, id);
      self->state.observer->changed(self);
    },
    [=](finish_due_atom) { finish_run(self); self->state.observer->changed(self); },
  };
}

} // namespace

caf::error not_ready_error(const coordinator_state& st, const char* what) {
  if (st.failure)
    return st.failure;
  if (st.ph == phase::stopping || st.ph == phase::stopped)
    return make_error(error_kind::not_started, fmt::format("{}: the executor was shut down", what));
  if (st.ph == phase::running || st.ph == phase::finishing)
    return make_error(error_kind::generic,
                      fmt::format("{}: an elastic run is already in progress", what));
  return make_error(error_kind::not_started, fmt::format("{}: call start() first", what));
}

caf::error elastic_only(const char* what) {
  return make_error(error_kind::generic,
                    fmt::format("Elastic mode does not support {}. Please use run() instead.",
                                what));
}

void fail(coord_actor self, caf::error err) {
  auto& st = self->state;
  if (st.failure || st.ph == phase::stopping || st.ph == phase::stopped)
    return;
  log::debug("job {} failed: {}", st.cfg.job_id, describe(err));
  st.failure = err;
  self->state.observer->changed(self);
  tell_direct_caller(st, err);
  answer_pending(self, err);
  st.kind->failed(self);
}

void finish(coord_actor self, job_exit out) {
  auto& st = self->state;
  if (st.outcome)
    return;
  st.outcome = std::move(out);
  for (auto& rp : st.finished_promises)
    rp.deliver(*st.outcome);
  st.finished_promises.clear();
}

spawn_request spawn_request_for(const coordinator_state& st, const std::string& node,
                                const std::string& job, std::vector<int32_t> ranks, env_list env,
                                std::vector<env_list> rank_env) {
  spawn_request req;
  req.job_id = job;
  req.executable = st.cfg.executable;
  if (auto i = st.infos_by_node.find(node); i != st.infos_by_node.end()
                                            && i->second.caches_binaries)
  {
    req.binary_hash = st.cfg.binary_hash;
    for (auto& lib : st.cfg.libraries)
      req.libraries.emplace(lib.name, lib.hash);
  }
  req.args = st.cfg.args;
  req.ranks = std::move(ranks);
  req.env = std::move(env);
  req.launch = st.cfg.launch;
  req.rank_env = std::move(rank_env);
  req.stderr_tail_lines = st.cfg.settings.stderr_tail_lines;
  req.output = st.cfg.output;
  plan_shm(st.cfg.options.extra_env_vars, req);
  return req;
}

void adopt_colocator(coord_actor self, const std::string& key, colocation c) {
  self->monitor(c.handle);
  self->state.colocators[key] = std::move(c);
}

void stop_colocator(coord_actor self, const std::string& key) {
  auto& st = self->state;
  auto i = st.colocators.find(key);
  if (i == st.colocators.end() || !st.stopping.insert(key).second)
    return;
  auto c = i->second;
  // It stays monitored: one whose node dies meanwhile is done at once
  // (colocator_down), not when this request times out.
  auto stopped = [=] {
    auto& st = self->state;
    if (st.stopping.erase(key) == 0)
      return; // its down message came first
    st.colocators.erase(key);
    self->demonitor(c.handle.address());
    if (c.worker >= 0)
      st.el.registry.colocator_stopped(c.worker);
    shutdown_done(self);
  };
  self->request(c.handle, st.cfg.settings.timeout + knobs::colocator_stop_slack, stop_atom_v)
    .then([=](bool) { stopped(); },
          [=](caf::error& err) {
            log::warn("colocator on node '{}' did not stop cleanly: {}", c.node, describe(err));
            stopped();
          });
}

void shutdown_done(coord_actor self) {
  auto& st = self->state;
  if (st.ph != phase::stopping || !st.stopping.empty())
    return;
  release_reserved(self);
  st.ph = phase::stopped;
  st.observer->ended(self, [=] {
    for (auto& rp : self->state.shutdown_promises)
      rp.deliver(true);
    self->state.shutdown_promises.clear();
  });
}

} // namespace hvactor::detail

namespace hvactor {

proto::coordinator spawn_coordinator(caf::actor_system& sys, coordinator_config cfg) {
  return sys.spawn(detail::coordinator_impl, std::move(cfg));
}

} // namespace hvactor
