// The coordinator: start, registration, env hand-out, calls and shutdown.
// The placement phase lives in coordinator_placement.cpp.

#include "internal/coordinator.hpp"

#include <map>
#include <memory>
#include <set>

#include <fmt/format.h>

#include "internal/coordinator_state.hpp"
#include "internal/knobs.hpp"
#include "hvactor/event.hpp"
#include "hvactor/errors.hpp"
#include "internal/log.hpp"
#include "internal/output_window.hpp"
#include "internal/process.hpp"
#include "internal/rank_planner.hpp"
#include "internal/system_config.hpp"
#include "internal/worker_env.hpp"

namespace hvactor::detail {

using namespace proto;
using namespace std::chrono_literals;

namespace {

// A pending start and every pending call get `err`.
void answer_pending(coord_actor self, const caf::error& err) {
  auto& st = self->state;
  if (st.start_pending) {
    st.start_pending = false;
    st.start_promise.deliver(err);
  }
  fail_calls(self, err);
}

} // namespace

std::string worker_label(const coordinator_state& st, int rank) {
  auto& w = st.workers.at(rank);
  auto node = w.registered ? w.hello.node_id : w.node_id;
  if (w.registered)
    return fmt::format("rank {} on node '{}' (pid {})", rank, node, w.hello.pid);
  return fmt::format("rank {} on node '{}'", rank, node);
}

void fail(coord_actor self, caf::error err) {
  auto& st = self->state;
  if (st.failure || st.ph == phase::stopping || st.ph == phase::stopped)
    return;
  log::debug("job {} failed: {}", st.cfg.job_id, describe(err));
  st.failure = err;
  st.cfg.direct->end(err);
  answer_pending(self, err);
  if (st.cfg.launch && !st.launch_done) {
    job_exit out;
    out.message = describe(err);
    finish_launch(self, std::move(out));
  }
}

namespace {

env_list worker_env(const coordinator_state& st) {
  return worker_bootstrap_env(st.endpoint, st.cfg.job_id, st.cfg.settings.timeout);
}

} // namespace

std::vector<env_list> horovod_envs(const coordinator_state& st,
                                   const std::vector<std::string>& node_of_rank) {
  // Static jobs: generation 0, NICs not known, CUDA_VISIBLE_DEVICES set by
  // the colocators (they hold the GPU ids).
  worker_env_spec spec;
  spec.node_of_rank = node_of_rank;
  spec.rendezvous_host = st.rendezvous_host;
  spec.rendezvous_port = st.rendezvous_port;
  spec.job_id = st.cfg.job_id;
  spec.timeout = st.cfg.settings.timeout;
  spec.extra_env_vars = st.cfg.options.extra_env_vars;
  return worker_envs(spec);
}

void spawn_workers(coord_actor self) {
  auto& st = self->state;
  st.ph = phase::registering;
  st.workers.clear();
  int total = 0;
  for (auto& a : st.plan.nodes)
    total += static_cast<int>(a.ranks.size());
  st.workers.resize(total);
  for (auto& a : st.plan.nodes)
    for (auto r : a.ranks)
      st.workers[r].node_id = a.node_id;
  std::vector<env_list> envs;
  if (st.cfg.launch) {
    std::vector<std::string> nodes;
    for (auto& w : st.workers)
      nodes.push_back(w.node_id);
    envs = horovod_envs(st, nodes);
  } else {
    self->delayed_send(self, st.cfg.settings.timeout, registration_due_atom_v);
  }
  auto colocated = std::make_shared<size_t>(0);
  for (auto& a : st.plan.nodes) {
    spawn_request req;
    if (st.cfg.launch) {
      req.launch = true;
      for (auto r : a.ranks)
        req.rank_env.push_back(envs[r]);
    }
    req.job_id = st.cfg.job_id;
    req.executable = st.cfg.executable;
    if (st.infos_by_node[a.node_id].caches_binaries)
      req.binary_hash = st.cfg.binary_hash;
    req.args = st.cfg.args;
    req.ranks.assign(a.ranks.begin(), a.ranks.end());
    if (!st.cfg.launch) {
      req.env = worker_env(st);
      // The node sizes (or skips) the job's shared-memory segment by these
      // before the workers get the rest of their environment.
      for (auto& [key, value] : st.cfg.options.extra_env_vars)
        if (key == env::shm || key == env::fusion_threshold)
          req.env.entries.emplace_back(key, value);
    }
    req.stderr_tail_lines = st.cfg.settings.stderr_tail_lines;
    req.output = st.cfg.output;
    auto node = a.node_id;
    self->request(st.agents_by_node[node], st.cfg.settings.timeout, colocate_atom_v, req,
                  coordinator{self})
      .then(
        [=](node_colocator& coloc) {
          if (self->state.ph != phase::registering && self->state.ph != phase::ready) {
            caf::anon_send(coloc, stop_atom_v); // shut down meanwhile
            return;
          }
          self->monitor(coloc);
          self->state.colocators[node] = coloc;
          // hvactor-run: no registration; running once every node started.
          if (self->state.cfg.launch && ++*colocated == self->state.plan.nodes.size())
            launch_started(self);
        },
        [=](caf::error& err) {
          fail(self, make_error(error_kind::worker_error,
                                fmt::format("node '{}' could not start the job's workers: {}", node,
                                            describe(err))));
        });
  }
}

namespace {

void hand_out_env(coord_actor self) {
  auto& st = self->state;
  std::vector<std::string> nodes;
  for (int r = 0; r < st.size(); ++r)
    nodes.push_back(st.workers[r].hello.node_id);
  auto envs = horovod_envs(st, nodes);
  auto pending = std::make_shared<int>(st.size());
  for (int r = 0; r < st.size(); ++r) {
    auto& env = envs[r];
    self->request(st.workers[r].handle, st.cfg.settings.timeout, set_env_atom_v, env)
      .then(
        [=](bool) {
          auto& st = self->state;
          if (--*pending > 0 || !st.start_pending)
            return;
          st.ph = phase::ready;
          st.start_pending = false;
          job_info info{st.cfg.job_id, st.size(), {}, {}, st.shipped_bytes, {}};
          for (auto& w : st.workers) {
            info.nodes.push_back(w.hello.node_id);
            info.pids.push_back(w.hello.pid);
            info.workers.push_back(caf::actor_cast<caf::actor>(w.handle));
          }
          st.start_promise.deliver(std::move(info));
        },
        [=](caf::error& err) {
          fail(self, make_error(error_kind::worker_error,
                                fmt::format("{} did not accept its environment: {}",
                                            worker_label(self->state, r), describe(err)),
                                r));
        });
  }
}

caf::error exit_error(const coordinator_state& st, const worker_exit& ex) {
  std::string text = fmt::format("worker {} died: {}", worker_label(st, ex.world_rank),
                                 describe_exit(ex.exit_code, ex.signal));
  if (!st.workers.at(ex.world_rank).registered)
    text = fmt::format("worker rank {} on node '{}' (pid {}) died before registering: {}",
                       ex.world_rank, ex.node_id, ex.pid, describe_exit(ex.exit_code, ex.signal));
  if (ex.stderr_tail.empty())
    text += ". It wrote nothing to stderr.";
  else
    text += fmt::format(". Last stderr lines:\n  {}", fmt::join(ex.stderr_tail, "\n  "));
  return make_error(error_kind::worker_error, text, ex.world_rank);
}

// The job's error when the node behind a colocator went away.
caf::error node_lost_error(coordinator_state& st, const std::string& node,
                           const caf::error& reason) {
  std::vector<std::string> lost;
  for (int r = 0; r < st.size(); ++r)
    if (st.workers[r].node_id == node)
      lost.push_back(st.workers[r].registered
                       ? fmt::format("rank {} (pid {})", r, st.workers[r].hello.pid)
                       : fmt::format("rank {}", r));
  auto& info = st.infos_by_node[node];
  auto where = info.port != 0 ? fmt::format(" at {}:{}", info.address, info.port)
                              : std::string{};
  auto why = reason && reason != caf::exit_reason::user_shutdown
               ? caf::to_string(reason)
               : std::string{"the node was shut down"};
  return make_error(error_kind::node_lost,
                    fmt::format("node '{}'{} left the cluster during the job ({}); its workers "
                                "are gone: {}",
                                node, where, why, fmt::join(lost, ", ")));
}

// One colocator stopped (or is gone); the last one completes shutdown. An
// empty `node` only checks.
void colocator_stopped(coord_actor self, const std::string& node) {
  auto& st = self->state;
  if (!node.empty())
    st.stopping_nodes.erase(node);
  if (!st.stopping_nodes.empty() || st.ph != phase::stopping)
    return;
  release_reserved(self);
  st.ph = phase::stopped;
  for (auto& rp : st.shutdown_promises)
    rp.deliver(true);
  st.shutdown_promises.clear();
}

caf::error not_ready_error(const coordinator_state& st, const char* what) {
  if (st.failure)
    return st.failure;
  if (st.ph == phase::stopping || st.ph == phase::stopped)
    return make_error(error_kind::not_started, fmt::format("{}: the executor was shut down", what));
  return make_error(error_kind::not_started, fmt::format("{}: call start() first", what));
}

coordinator::behavior_type coordinator_impl(coord_actor self, coordinator_config cfg) {
  self->state.cfg = std::move(cfg);
  // A handler that throws ends the coordinator (CAF), and the request it
  // was handling is never answered: fail the job with the exception's text
  // first, so that every waiter gets it (the session's own waits also
  // watch the coordinator's exit, exit_watch), and exit with it.
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
    self->state.cfg.direct->end(err);
    return err;
  });
  self->set_down_handler([=](caf::down_msg& dm) {
    auto& st = self->state;
    // A colocator that is gone needs no stop: its node died or shut down
    // (a request to a dead node would only end by its timeout).
    for (auto i = st.colocators.begin(); i != st.colocators.end(); ++i)
      if (i->second.address() == dm.source) {
        auto node = i->first;
        st.colocators.erase(i);
        if (st.ph == phase::stopping)
          colocator_stopped(self, node);
        else if (st.ph != phase::stopped && !st.failure)
          fail(self, node_lost_error(st, node, dm.reason));
        return;
      }
    if (st.ph == phase::stopping || st.ph == phase::stopped || st.failure)
      return;
    // An agent (hvactor-node) went away while the job was starting: the
    // node is gone; fail now if the plan uses it and it runs no colocator.
    for (auto i = st.agents_by_node.begin(); i != st.agents_by_node.end(); ++i)
      if (i->second.address() == dm.source) {
        // The dead handle stays: placement compares nodes before reuse.
        auto node = i->first;
        bool planned = false;
        for (auto& a : st.plan.nodes)
          planned = planned || a.node_id == node;
        if (planned && !st.colocators.count(node)
            && (st.ph == phase::shipping || st.ph == phase::registering))
          fail(self, make_error(error_kind::node_lost,
                                fmt::format("node '{}' left the cluster while the job was "
                                            "starting ({}); its workers never started",
                                            node, caf::to_string(dm.reason))));
        return;
      }
    for (int r = 0; r < st.size(); ++r) {
      if (st.workers[r].registered && st.workers[r].handle.address() == dm.source) {
        // Give the colocator's exit report (exit code, stderr) time to win.
        self->delayed_send(self, knobs::exit_report_grace, worker_lost_atom_v,
                           static_cast<int32_t>(r));
        return;
      }
    }
  });
  return {
    [=](start_atom, std::string& endpoint, std::string& rdv_host,
        uint16_t rdv_port) -> caf::result<job_info> {
      auto& st = self->state;
      if (st.ph != phase::idle)
        return make_error(error_kind::generic, "start() was already called on this executor");
      st.endpoint = std::move(endpoint);
      st.rendezvous_host = std::move(rdv_host);
      st.rendezvous_port = rdv_port;
      st.ph = phase::placing;
      st.placement_deadline = caf::make_timestamp() + st.cfg.settings.placement_timeout;
      st.start_promise = self->make_response_promise<job_info>();
      st.start_pending = true;
      try_placement(self);
      return st.start_promise;
    },
    [=](register_atom, const worker_hello& hello, horovod_worker handle) -> caf::result<bool> {
      auto& st = self->state;
      if (hello.job_id != st.cfg.job_id || hello.world_rank < 0
          || hello.world_rank >= st.size() || st.workers[hello.world_rank].registered)
        return make_error(error_kind::generic,
                          fmt::format("unexpected registration of rank {} for job {}",
                                      hello.world_rank, hello.job_id));
      if (st.ph != phase::registering)
        return make_error(error_kind::not_started, "the job is no longer starting");
      auto& slot = st.workers[hello.world_rank];
      slot.registered = true;
      slot.hello = hello;
      slot.handle = handle;
      self->monitor(handle);
      if (++st.registered == st.workers.size())
        hand_out_env(self);
      return true;
    },
    [=](exited_atom, const worker_exit& ex) {
      auto& st = self->state;
      if (ex.expected || ex.job_id != st.cfg.job_id || ex.world_rank < 0
          || ex.world_rank >= st.size())
        return;
      if (st.ph == phase::stopping || st.ph == phase::stopped)
        return;
      if (st.cfg.launch)
        launch_exited(self, ex, exit_error(st, ex));
      else
        fail(self, exit_error(st, ex));
    },
    [=](output_atom, int32_t rank, int32_t stream, const std::string& line) {
      if (self->state.cfg.on_output)
        self->state.cfg.on_output(rank, stream, line);
      // on_output wrote the line: give its colocator's reader credit back.
      auto& unacked = self->state.output_unacked[rank];
      unacked += line.size() + 1;
      if (unacked >= output_ack_bytes) {
        if (auto from = caf::actor_cast<node_colocator>(self->current_sender()))
          self->send(from, output_ack_atom_v, rank, unacked);
        unacked = 0;
      }
    },
    [=](event_atom, int32_t rank, const std::string& encoded) {
      if (!self->state.cfg.on_event)
        return;
      try {
        self->state.cfg.on_event(rank, log::decode_event(encoded));
      } catch (const std::exception& e) {
        fail(self, make_error(error_kind::generic,
                              fmt::format("the on_event callback threw on an event of rank {}: {}",
                                          rank, e.what())));
      }
    },
    [=](finished_atom) -> caf::result<job_exit> {
      auto& st = self->state;
      if (st.launch_done)
        return st.outcome;
      auto rp = self->make_response_promise<job_exit>();
      st.finished_promises.push_back(rp);
      return rp;
    },
    [=](call_atom, const call_request& req) -> caf::result<call_results> {
      auto& st = self->state;
      if (st.ph != phase::ready || st.failure)
        return not_ready_error(st, "run");
      call_waiter waiter;
      waiter.all = self->make_response_promise<call_results>();
      auto rp = waiter.all;
      std::vector<int> ranks(st.workers.size());
      for (int r = 0; r < st.size(); ++r)
        ranks[r] = r;
      open_call(self, std::move(waiter), ranks, req);
      return rp;
    },
    [=](call_one_atom, int32_t rank, const call_request& req) -> caf::result<call_result> {
      auto& st = self->state;
      if (st.ph != phase::ready || st.failure)
        return not_ready_error(st, "run_remote");
      if (rank < 0 || rank >= st.size())
        return make_error(error_kind::invalid_argument,
                          fmt::format("rank {} does not exist (size {})", rank, st.size()));
      call_waiter waiter;
      waiter.single = true;
      waiter.one = self->make_response_promise<call_result>();
      auto rp = waiter.one;
      open_call(self, std::move(waiter), {rank}, req);
      return rp;
    },
    [=](call_failed_atom, caf::error& err) -> caf::result<call_results> {
      auto& st = self->state;
      if (st.ph != phase::ready || st.failure)
        return not_ready_error(st, "run");
      call_waiter waiter;
      waiter.all = self->make_response_promise<call_results>();
      auto rp = waiter.all;
      hold_failure(self, std::move(waiter), std::move(err));
      return rp;
    },
    [=](shutdown_atom) -> caf::result<bool> {
      auto& st = self->state;
      st.cfg.direct->end(make_error(error_kind::not_started, "the executor was shut down"));
      if (st.ph == phase::stopped)
        return true;
      auto rp = self->make_response_promise<bool>();
      st.shutdown_promises.push_back(rp);
      if (st.ph == phase::stopping)
        return rp; // a second shutdown waits for the first
      answer_pending(self, make_error(error_kind::not_started, "the executor was shut down"));
      if (st.cfg.launch && !st.launch_done) {
        job_exit out;
        out.message = "the job was stopped before every rank exited";
        finish_launch(self, std::move(out));
      }
      st.ph = phase::stopping;
      for (auto& w : st.workers)
        if (w.registered)
          self->send(w.handle, stop_atom_v);
      for (auto& [node, coloc] : st.colocators) {
        st.stopping_nodes.insert(node);
        auto id = node;
        self->request(coloc, st.cfg.settings.timeout + knobs::colocator_stop_slack, stop_atom_v)
          .then([=](bool) { colocator_stopped(self, id); },
                [=](caf::error& err) {
                  log::warn("colocator on node '{}' did not stop cleanly: {}", id,
                            describe(err));
                  colocator_stopped(self, id);
                });
      }
      colocator_stopped(self, {});
      return rp;
    },
    [=](placement_retry_atom) { try_placement(self); },
    [=](launch_finish_atom) { finish_launch(self, self->state.outcome); },
    [=](registration_due_atom) {
      auto& st = self->state;
      if (st.ph != phase::registering || st.registered == st.workers.size() || st.failure)
        return;
      std::vector<std::string> missing;
      for (int r = 0; r < st.size(); ++r)
        if (!st.workers[r].registered)
          missing.push_back(fmt::format("rank {} on node '{}'", r, st.workers[r].node_id));
      fail(self, make_error(error_kind::rendezvous_timeout,
                            fmt::format("{} of {} workers never registered within {} ms: {}",
                                        missing.size(), st.size(),
                                        st.cfg.settings.timeout.count(),
                                        fmt::join(missing, ", "))));
    },
    [=](call_grace_atom, uint64_t id) { call_grace_passed(self, id); },
    // Elastic jobs only (elastic_coordinator.cpp).
    [=](discover_atom) {},
    [=](reset_due_atom, int32_t) {},
    [=](leave_due_atom, int32_t) {},
    [=](finish_due_atom) {},
    [=](worker_lost_atom, int32_t r) {
      auto& st = self->state;
      if (r >= 0 && r < st.size())
        fail(self, make_error(error_kind::worker_error,
                              fmt::format("lost the connection to worker {}", worker_label(st, r)),
                              r));
    },
  };
}

} // namespace

} // namespace hvactor::detail

namespace hvactor {

void direct_calls::end(const caf::error& err) {
  ended_ = true;
  std::lock_guard<std::mutex> guard{mu_};
  if (!call_ || !caller_)
    return;
  // An answer to the call's request id, so that the waiting receive takes it.
  caller_->enqueue(caf::make_mailbox_element(nullptr, call_->response_id(), {}, err), nullptr);
  call_.reset();
}

bool direct_calls::begin(caf::strong_actor_ptr caller, caf::message_id call) {
  std::lock_guard<std::mutex> guard{mu_};
  if (ended_)
    return false;
  caller_ = std::move(caller);
  call_ = call;
  return true;
}

void direct_calls::finish() {
  std::lock_guard<std::mutex> guard{mu_};
  call_.reset();
}

proto::coordinator spawn_coordinator(caf::actor_system& sys, coordinator_config cfg) {
  if (cfg.options.min_workers)
    return spawn_elastic_coordinator(sys, std::move(cfg));
  return sys.spawn(detail::coordinator_impl, std::move(cfg));
}

} // namespace hvactor
