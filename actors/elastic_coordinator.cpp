// The elastic coordinator: the actor, its workers' failures and the run
// (elastic_state.hpp describes the protocol; elastic_world.cpp plans;
// elastic_processes.cpp starts and stops the workers' processes).

#include <algorithm>

#include <fmt/format.h>

#include "hvactor/event.hpp"
#include "internal/actor_system.hpp"
#include "internal/caf_error.hpp"
#include "internal/elastic_state.hpp"
#include "internal/log.hpp"
#include "internal/output_window.hpp"
#include "internal/process.hpp"

namespace hvactor::detail {

using namespace proto;

namespace {

// Runs the user's discovery (script or function) on a thread of its own.
caf::behavior finder_impl(caf::event_based_actor*, hvactor::discovery disc) {
  return {
    [=](discover_atom) -> caf::result<host_list> {
      try {
        host_list out;
        for (auto& h : disc.find()) {
          out.hosts.push_back(h.host);
          out.slots.push_back(h.slots);
        }
        return out;
      } catch (const std::exception& e) {
        return make_error(error_kind::generic, e.what());
      }
    },
  };
}

void answer_all(elastic_actor self, const caf::error& err) {
  auto& st = self->state;
  if (st.start_pending) {
    st.start_pending = false;
    st.start_promise.deliver(err);
  }
  if (st.run_pending) {
    st.run_pending = false;
    st.run_promise.deliver(err);
  }
  if (st.cfg.launch && !st.outcome) {
    job_exit out;
    out.message = describe(err);
    st.outcome = out;
    for (auto& rp : st.finished_promises)
      rp.deliver(out);
    st.finished_promises.clear();
  }
}

void send_call(elastic_actor self, int32_t id);

// The run ended: answer it, stop every worker.
void finish_run(elastic_actor self) {
  auto& st = self->state;
  if (st.ph != elastic_phase::finishing)
    return;
  std::vector<const elastic_worker*> ok;
  for (auto& [id, w] : st.workers)
    if (w.returned)
      ok.push_back(&w);
  std::stable_sort(ok.begin(), ok.end(), [](auto* a, auto* b) {
    auto key = [](auto* w) { return w->rank < 0 ? INT32_MAX : w->rank; };
    return key(a) < key(b);
  });
  log::info("job {}: the elastic run finished: {} workers returned", st.cfg.job_id, ok.size());
  if (st.cfg.launch) {
    job_exit out;
    out.ok = true;
    out.message = fmt::format("{} processes exited with status 0", ok.size());
    st.outcome = out;
    for (auto& rp : st.finished_promises)
      rp.deliver(out);
    st.finished_promises.clear();
  } else if (st.run_pending) {
    call_results out;
    for (auto* w : ok)
      out.payloads.push_back(w->payload);
    st.run_pending = false;
    st.run_promise.deliver(std::move(out));
  }
  for (auto& [id, w] : st.workers)
    stop_worker(self, id);
  st.seats.clear();
  st.call.reset();
  st.ph = elastic_phase::ready;
}

void check_finished(elastic_actor self) {
  auto& st = self->state;
  if (st.ph != elastic_phase::finishing)
    return;
  for (auto& [id, w] : st.workers)
    if (!is_gone(st, id) && !is_leaving(st, id) && w.rank >= 0 && !w.returned)
      return;
  finish_run(self);
}

void returned(elastic_actor self, int32_t id, std::vector<char> payload) {
  auto& st = self->state;
  auto& w = st.workers[id];
  if (is_gone(st, id) || w.returned)
    return;
  w.returned = true;
  w.payload = std::move(payload);
  if (st.ph == elastic_phase::running) {
    // Horovod: the first success ends the job; the others finish too.
    st.ph = elastic_phase::finishing;
    self->delayed_send(self, knobs::elastic_finish_grace, finish_due_atom_v);
  }
  check_finished(self);
}

void send_call(elastic_actor self, int32_t id) {
  auto& st = self->state;
  auto& w = st.workers[id];
  if (!st.call || !w.registered || is_gone(st, id))
    return;
  self->request(w.handle, st.cfg.settings.call_timeout, call_atom_v, *st.call)
    .then(
      [=](call_result& res) {
        if (res.ok)
          returned(self, id, std::move(res.payload));
        else
          worker_failed(self, id, fmt::format("raised: {}", res.error));
      },
      [=](caf::error& err) { worker_failed(self, id, fmt::format("failed: {}", describe(err))); });
}

std::string worker_name(const elastic_worker& w) {
  return w.pid > 0 ? fmt::format("worker {} on node '{}' (pid {})", w.id, w.node, w.pid)
                   : fmt::format("worker {} on node '{}'", w.id, w.node);
}

} // namespace

void worker_failed(elastic_actor self, int32_t id, const std::string& why) {
  auto& st = self->state;
  auto i = st.workers.find(id);
  if (i == st.workers.end() || is_gone(st, id))
    return;
  auto& w = i->second;
  bool leaving = is_leaving(st, id);
  stop_worker(self, id);
  if (leaving || st.ph == elastic_phase::stopping || st.ph == elastic_phase::stopped)
    return;
  auto text = fmt::format("{} {}", worker_name(w), why);
  log::warn("job {}: {}", st.cfg.job_id, text);
  if (st.first_failure.empty())
    st.first_failure = text;
  st.blacklist.failed(w.node, elastic::clock::now());
  if (st.ph == elastic_phase::finishing) {
    check_finished(self);
    return;
  }
  if (st.ph != elastic_phase::running)
    return;
  bool any_alive = false;
  for (auto& [wid, x] : st.workers)
    any_alive = any_alive || (!is_gone(st, wid) && !is_leaving(st, wid));
  if (!any_alive) {
    elastic_fail(self, make_error(error_kind::worker_error,
                                  fmt::format("every worker of the elastic job failed; the first: "
                                              "{}",
                                              st.first_failure),
                                  -1));
    return;
  }
  replan(self, true);
}

void shutdown_done(elastic_actor self) {
  auto& st = self->state;
  if (st.ph != elastic_phase::stopping || !st.stopping_jobs.empty())
    return;
  st.ph = elastic_phase::stopped;
  for (auto& rp : st.shutdown_promises)
    rp.deliver(true);
  st.shutdown_promises.clear();
}

void elastic_fail(elastic_actor self, caf::error err) {
  auto& st = self->state;
  if (st.failure || st.ph == elastic_phase::stopping || st.ph == elastic_phase::stopped)
    return;
  log::debug("job {} failed: {}", st.cfg.job_id, describe(err));
  st.failure = err;
  answer_all(self, err);
  for (auto& [id, w] : st.workers)
    stop_worker(self, id);
}

namespace {

caf::error elastic_only(const char* what) {
  return make_error(error_kind::generic,
                    fmt::format("Elastic mode does not support {}. Please use run() instead.",
                                what));
}

void begin_run(elastic_actor self) {
  auto& st = self->state;
  st.ph = elastic_phase::running;
  st.first_failure.clear();
  replan(self, false);
}

caf::error not_ready(const elastic_coordinator_state& st) {
  if (st.failure)
    return st.failure;
  if (st.ph == elastic_phase::stopping || st.ph == elastic_phase::stopped)
    return make_error(error_kind::not_started, "run: the executor was shut down");
  if (st.ph == elastic_phase::running || st.ph == elastic_phase::finishing)
    return make_error(error_kind::generic, "run: an elastic run is already in progress");
  return make_error(error_kind::not_started, "run: call start() first");
}

coordinator::behavior_type elastic_impl(elastic_actor self, coordinator_config cfg) {
  auto& st = self->state;
  st.blacklist = elastic::host_blacklist{cfg.options.cooldown_range};
  st.cfg = std::move(cfg);
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
    elastic_fail(self, err);
    return err;
  });
  self->set_down_handler([=](caf::down_msg& dm) {
    auto& st = self->state;
    for (auto& [id, w] : st.workers) {
      if (is_gone(st, id))
        continue;
      if (w.coloc && w.coloc.address() == dm.source) {
        // Gone with its node: nothing left there to stop or release.
        w.coloc = nullptr;
        st.registry.colocator_stopped(id);
        worker_failed(self, id, fmt::format("was lost with its node ({})",
                                            caf::to_string(dm.reason)));
        return;
      }
      if (w.registered && w.handle.address() == dm.source) {
        self->delayed_send(self, knobs::exit_report_grace, worker_lost_atom_v, id);
        return;
      }
    }
  });
  return {
    [=](start_atom, std::string& endpoint, std::string& rdv_host,
        uint16_t rdv_port) -> caf::result<job_info> {
      auto& st = self->state;
      if (st.ph != elastic_phase::idle)
        return make_error(error_kind::generic, "start() was already called on this executor");
      st.endpoint = std::move(endpoint);
      st.rendezvous_host = std::move(rdv_host);
      st.rendezvous_port = rdv_port;
      st.ph = elastic_phase::waiting;
      st.short_since = caf::make_timestamp();
      st.start_promise = self->make_response_promise<job_info>();
      st.start_pending = true;
      auto rp = st.start_promise;
      if (!st.cfg.options.discovery.from_cluster())
        st.finder = self->system().spawn<caf::detached>(finder_impl, st.cfg.options.discovery);
      poll_discovery(self);
      return rp;
    },
    [=](register_atom, const worker_hello& hello, horovod_worker handle) -> caf::result<bool> {
      auto& st = self->state;
      auto i = st.workers.find(hello.world_rank);
      if (hello.job_id != st.cfg.job_id || i == st.workers.end() || i->second.registered)
        return make_error(error_kind::generic,
                          fmt::format("unexpected registration of worker {} for job {}",
                                      hello.world_rank, hello.job_id));
      auto& w = i->second;
      if (is_gone(st, w.id))
        return make_error(error_kind::not_started, "this worker was stopped");
      w.registered = true;
      st.registry.registered(w.id);
      w.handle = handle;
      w.pid = hello.pid;
      self->monitor(handle);
      send_call(self, w.id);
      return true;
    },
    [=](exited_atom, const worker_exit& ex) {
      auto& st = self->state;
      auto i = st.workers.find(ex.world_rank);
      if (i == st.workers.end() || i->second.sub_job != ex.job_id)
        return;
      auto& w = i->second;
      if (ex.pid > 0)
        w.pid = ex.pid;
      // Whatever the reason, a worker that exited holds nothing any more:
      // its colocator stops (it releases the worker's reservation on its
      // node), or a host listed again later could not be used (its CPUs
      // stayed reserved, the reservation failed and blacklisted it).
      if (ex.expected || is_leaving(st, w.id)) {
        stop_worker(self, w.id);
        check_finished(self);
        return;
      }
      if (st.cfg.launch && ex.exit_code == 0 && ex.signal == 0) {
        returned(self, w.id, {});
        stop_worker(self, w.id);
        return;
      }
      std::string why = fmt::format("died: {}", describe_exit(ex.exit_code, ex.signal));
      if (!ex.stderr_tail.empty())
        why += fmt::format(". Last stderr lines:\n  {}", fmt::join(ex.stderr_tail, "\n  "));
      worker_failed(self, w.id, why);
    },
    [=](output_atom, int32_t rank, int32_t stream, const std::string& line) {
      if (self->state.cfg.on_output)
        self->state.cfg.on_output(rank, stream, line);
      if (auto from = caf::actor_cast<node_colocator>(self->current_sender()))
        self->send(from, output_ack_atom_v, rank, static_cast<uint64_t>(line.size() + 1));
    },
    [=](event_atom, int32_t rank, const std::string& encoded) {
      if (!self->state.cfg.on_event)
        return;
      // Events name the worker id: ranks change across generations.
      auto i = self->state.workers.find(rank);
      int r = i != self->state.workers.end() && i->second.rank >= 0 ? i->second.rank : rank;
      try {
        self->state.cfg.on_event(r, log::decode_event(encoded));
      } catch (const std::exception& e) {
        elastic_fail(self, make_error(error_kind::generic,
                                      fmt::format("the on_event callback threw on an event of "
                                                  "worker {}: {}",
                                                  rank, e.what())));
      }
    },
    [=](finished_atom) -> caf::result<job_exit> {
      auto& st = self->state;
      if (st.outcome)
        return *st.outcome;
      auto rp = self->make_response_promise<job_exit>();
      st.finished_promises.push_back(rp);
      if (st.ph == elastic_phase::ready && st.cfg.launch)
        begin_run(self);
      return rp;
    },
    [=](call_atom, const call_request& req) -> caf::result<call_results> {
      auto& st = self->state;
      if (st.ph != elastic_phase::ready || st.failure)
        return not_ready(st);
      st.call = req;
      st.run_promise = self->make_response_promise<call_results>();
      st.run_pending = true;
      auto rp = st.run_promise;
      begin_run(self);
      return rp;
    },
    [=](call_one_atom, int32_t, const call_request&) -> caf::result<call_result> {
      return elastic_only("execute_single");
    },
    [=](call_failed_atom, caf::error&) -> caf::result<call_results> {
      return elastic_only("direct calls");
    },
    [=](shutdown_atom) -> caf::result<bool> {
      auto& st = self->state;
      if (st.ph == elastic_phase::stopped)
        return true;
      auto rp = self->make_response_promise<bool>();
      st.shutdown_promises.push_back(rp);
      if (st.ph == elastic_phase::stopping)
        return rp;
      answer_all(self, make_error(error_kind::not_started, "the executor was shut down"));
      for (auto& [id, w] : st.workers)
        stop_worker(self, id);
      st.ph = elastic_phase::stopping;
      if (st.finder)
        caf::anon_send_exit(st.finder, caf::exit_reason::user_shutdown);
      // Colocators answer their stop once their processes were reaped.
      shutdown_done(self);
      return rp;
    },
    [=](discover_atom) { poll_discovery(self); },
    [=](reset_due_atom, int32_t gen) {
      auto& st = self->state;
      if (st.generation == gen && st.ph == elastic_phase::running) {
        st.broken = true;
        replan(self, true);
      }
    },
    [=](leave_due_atom, int32_t id) {
      auto& st = self->state;
      if (auto i = st.workers.find(id); i != st.workers.end() && !is_gone(st, id)) {
        log::info("job {}: {} did not leave within {} s; stopping it", st.cfg.job_id,
                  worker_name(i->second), knobs::elastic_leave_grace.count() / 1000.0);
        stop_worker(self, id);
      }
    },
    [=](finish_due_atom) {
      finish_run(self);
    },
    [=](worker_lost_atom, int32_t id) {
      worker_failed(self, id, "lost its connection to the driver");
    },
    [=](placement_retry_atom) {},
    [=](registration_due_atom) {},
    [=](launch_finish_atom) {},
    [=](call_grace_atom, uint64_t) {},
  };
}

} // namespace

} // namespace hvactor::detail

namespace hvactor {

proto::coordinator spawn_elastic_coordinator(caf::actor_system& sys, coordinator_config cfg) {
  return sys.spawn(detail::elastic_impl, std::move(cfg));
}

} // namespace hvactor
