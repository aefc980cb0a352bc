// An elastic job's run: start, the run's call on every worker, returns,
// exits and failures (elastic_state.hpp describes the protocol;
// elastic_world.cpp plans; elastic_processes.cpp starts and stops the
// workers' processes). The coordinator's handlers call these.

#include <algorithm>

#include <fmt/format.h>

#include "hvactor/event.hpp"
#include "base/internal/actor_system.hpp"
#include "base/internal/caf_error.hpp"
#include "actors/coordinator/coordinator_state.hpp"
#include "base/internal/log.hpp"
#include "actors/coordinator/output_window.hpp"
#include "base/internal/process.hpp"
#include "base/internal/knobs_elastic.hpp"

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

} // namespace

void finish_run(coord_actor self) {
  auto& st = self->state;
  if (st.ph != phase::finishing)
    return;
  std::vector<const job_worker*> ok;
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
    finish(self, std::move(out));
  } else if (st.el.run_pending) {
    call_results out;
    for (auto* w : ok)
      out.payloads.push_back(w->payload);
    st.el.run_pending = false;
    st.el.run_promise.deliver(std::move(out));
  }
  for (auto& [id, w] : st.workers)
    stop_worker(self, id);
  st.el.seats.clear();
  st.el.call.reset();
  st.ph = phase::ready;
}

namespace {

void check_finished(coord_actor self) {
  auto& st = self->state;
  if (st.ph != phase::finishing)
    return;
  for (auto& [id, w] : st.workers)
    if (!is_gone(st, id) && !is_leaving(st, id) && w.rank >= 0 && !w.returned)
      return;
  finish_run(self);
}

void returned(coord_actor self, int32_t id, std::vector<char> payload) {
  auto& st = self->state;
  auto& w = st.workers[id];
  if (is_gone(st, id) || w.returned)
    return;
  w.returned = true;
  w.payload = std::move(payload);
  if (st.ph == phase::running) {
    // Horovod: the first success ends the job; the others finish too.
    st.ph = phase::finishing;
    self->delayed_send(self, knobs::elastic_finish_grace, finish_due_atom_v);
  }
  check_finished(self);
}

} // namespace

void send_call(coord_actor self, int32_t id) {
  auto& st = self->state;
  auto& w = st.workers[id];
  if (!st.el.call || !w.registered || is_gone(st, id))
    return;
  self->request(w.handle, st.cfg.settings.call_timeout, call_atom_v, *st.el.call)
    .then(
      [=](call_result& res) {
        if (res.ok)
          returned(self, id, std::move(res.payload));
        else
          worker_failed(self, id, fmt::format("raised: {}", res.error));
      },
      [=](caf::error& err) { worker_failed(self, id, fmt::format("failed: {}", describe(err))); });
}

std::string worker_name(const job_worker& w) {
  return w.pid > 0 ? fmt::format("worker {} on node '{}' (pid {})", w.id, w.node, w.pid)
                   : fmt::format("worker {} on node '{}'", w.id, w.node);
}

void worker_failed(coord_actor self, int32_t id, const std::string& why) {
  auto& st = self->state;
  auto i = st.workers.find(id);
  if (i == st.workers.end() || is_gone(st, id))
    return;
  auto& w = i->second;
  bool leaving = is_leaving(st, id);
  stop_worker(self, id);
  if (leaving || st.ph == phase::stopping || st.ph == phase::stopped)
    return;
  auto text = fmt::format("{} {}", worker_name(w), why);
  log::warn("job {}: {}", st.cfg.job_id, text);
  st.observer->worker_failed(self, id, text);
  if (st.el.first_failure.empty())
    st.el.first_failure = text;
  st.el.blacklist.failed(w.node, elastic::clock::now());
  if (st.ph == phase::finishing) {
    check_finished(self);
    return;
  }
  if (st.ph != phase::running)
    return;
  bool any_alive = false;
  for (auto& [wid, x] : st.workers)
    any_alive = any_alive || (!is_gone(st, wid) && !is_leaving(st, wid));
  if (!any_alive) {
    fail(self, make_error(error_kind::worker_error,
                                  fmt::format("every worker of the elastic job failed; the first: "
                                              "{}",
                                              st.el.first_failure),
                                  -1));
    return;
  }
  replan(self, true);
}

void elastic_start(coord_actor self) {
  auto& st = self->state;
  auto& o = st.cfg.options;
  elastic::rules_config rc;
  rc.min_workers = *o.min_workers;
  rc.max_workers = o.max_workers.value_or(rc.max_workers);
  rc.reset_limit = o.reset_limit;
  rc.wait = std::chrono::duration_cast<std::chrono::milliseconds>(
    wait_bound(std::chrono::milliseconds{
      std::min<std::chrono::seconds>(o.elastic_timeout, std::chrono::hours(24 * 3650))}));
  rc.timeout_seconds = o.elastic_timeout.count();
  rc.discovery = o.discovery.describe();
  st.el.rules = elastic::job_rules{rc};
  if (!st.cfg.options.discovery.from_cluster())
    st.el.finder = self->system().spawn<caf::detached>(finder_impl, st.cfg.options.discovery);
  poll_discovery(self);
}

void begin_run(coord_actor self) {
  auto& st = self->state;
  st.ph = phase::running;
  st.el.first_failure.clear();
  replan(self, false);
}

void elastic_exited(coord_actor self, const worker_exit& ex) {
  auto& st = self->state;
  auto i = st.workers.find(ex.world_rank);
  if (i == st.workers.end() || i->second.sub_job != ex.job_id)
    return;
  auto& w = i->second;
  if (ex.pid > 0)
    w.pid = ex.pid;
  // A worker already given up (its connection dropped first): its exit
  // status still says why it ended.
  if (is_gone(st, w.id) && !ex.expected)
    log::warn("job {}: {} (already given up) exited: {}{}", st.cfg.job_id, worker_name(w),
              describe_exit(ex.exit_code, ex.signal),
              ex.stderr_tail.empty() ? std::string{". It wrote nothing to stderr."}
                                     : fmt::format(". Last stderr lines:\n  {}",
                                                   fmt::join(ex.stderr_tail, "\n  ")));
  // Whatever the reason, a worker that exited holds nothing any more: its
  // colocator stops (it releases the worker's reservation on its node), or
  // a host listed again later could not be used (its CPUs stayed
  // reserved, the reservation failed and blacklisted it).
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
}

void leave_due(coord_actor self, int32_t id) {
  auto& st = self->state;
  if (auto i = st.workers.find(id); i != st.workers.end() && !is_gone(st, id)) {
    log::info("job {}: {} did not leave within {} s; stopping it", st.cfg.job_id,
              worker_name(i->second), knobs::elastic_leave_grace.count() / 1000.0);
    stop_worker(self, id);
  }
}

} // namespace hvactor::detail
