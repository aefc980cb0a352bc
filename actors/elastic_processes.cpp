// An elastic job's worker processes: each seat's reservation, binary and
// colocator, and giving all of it back when the worker ends (the worker
// registry, elastic_workers.hpp, says what each one holds).

#include <algorithm>

#include <fmt/format.h>

#include "internal/actor_system.hpp"
#include "internal/binary_shipper.hpp"
#include "internal/caf_error.hpp"
#include "internal/elastic_state.hpp"
#include "internal/transport.hpp"
#include "internal/worker_env.hpp"

namespace hvactor::detail {

using namespace proto;

namespace {

// The variables an elastic worker starts with; its ranks come with each
// generation's assignment (hvd::init).
env_list elastic_env(const elastic_coordinator_state& st, const elastic_worker& w) {
  env_list env;
  auto gloo_seconds = std::max<long long>(1, st.cfg.settings.timeout.count() / 1000);
  auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(
                std::min<std::chrono::seconds>(st.cfg.options.elastic_timeout,
                                               std::chrono::hours(24 * 3650)))
              + wait_bound(st.cfg.settings.timeout);
  env.entries = {
    {env::hostname, w.node},
    {env::controller, "gloo"},
    {env::cpu_operations, "gloo"},
    {env::rendezvous_addr, st.rendezvous_host},
    {env::rendezvous_port, std::to_string(st.rendezvous_port)},
    {env::rendezvous_scope, fmt::format("{}/{}", st.cfg.job_id, st.generation)},
    {env::gloo_timeout_seconds, std::to_string(gloo_seconds)},
    {env::elastic, "1"},
    {env::elastic_worker, std::to_string(w.id)},
    {env::elastic_generation, std::to_string(st.generation)},
    {env::elastic_wait_ms, std::to_string(wait.count())},
  };
  for (auto& [key, value] : st.cfg.options.extra_env_vars) {
    auto same = [&](const auto& kv) { return kv.first == key; };
    env.entries.erase(std::remove_if(env.entries.begin(), env.entries.end(), same),
                      env.entries.end());
    env.entries.emplace_back(key, value);
  }
  return env;
}

void colocated(elastic_actor self, int32_t id, node_colocator coloc) {
  auto& st = self->state;
  auto& w = st.workers[id];
  w.coloc = coloc;
  self->monitor(coloc);
  // A worker that ended meanwhile still has to stop the colocator it got.
  if (st.registry.colocated(id) == elastic::give_back::stop_colocator)
    stop_colocator(self, id);
  else if (st.ph == elastic_phase::stopping || st.ph == elastic_phase::stopped)
    stop_worker(self, id);
}

void colocate(elastic_actor self, int32_t id) {
  auto& st = self->state;
  auto& w = st.workers[id];
  auto& info = st.infos_by_node[w.node];
  spawn_request req;
  req.job_id = w.sub_job;
  req.executable = st.cfg.executable;
  if (info.caches_binaries)
    req.binary_hash = st.cfg.binary_hash;
  req.args = st.cfg.args;
  req.ranks = {id};
  req.stderr_tail_lines = st.cfg.settings.stderr_tail_lines;
  req.output = st.cfg.output;
  auto env = elastic_env(st, w);
  if (st.cfg.launch) {
    req.launch = true;
    req.rank_env = {env};
  } else {
    req.env = worker_bootstrap_env(st.endpoint, st.cfg.job_id, st.cfg.settings.timeout);
    req.env.entries.insert(req.env.entries.end(), env.entries.begin(), env.entries.end());
  }
  self->request(st.agents_by_node[w.node], st.cfg.settings.timeout, colocate_atom_v, req,
                coordinator{self})
    .then([=](node_colocator& coloc) { colocated(self, id, coloc); },
          [=](caf::error& err) {
            worker_failed(self, id, fmt::format("could not start: {}", describe(err)));
          });
}

void reserve_and_colocate(elastic_actor self, int32_t id) {
  auto& st = self->state;
  auto& w = st.workers[id];
  auto node = w.node;
  auto agent = st.agents_by_node[node];
  resources want{st.cfg.options.cpus_per_worker,
                 st.cfg.options.use_gpu ? st.cfg.options.gpus_per_worker.value_or(1) : 0};
  self->request(agent, st.cfg.settings.timeout, reserve_atom_v, w.sub_job, want)
    .then(
      [=](const reservation&) {
        auto& st = self->state;
        auto& w = st.workers[id];
        if (st.registry.reserved(id) == elastic::give_back::release_reservation) {
          caf::anon_send(st.agents_by_node[node], release_atom_v, w.sub_job);
          return;
        }
        if (!st.infos_by_node[node].caches_binaries || st.shipped.count(node)
            || st.cfg.binary_hash.empty()) {
          colocate(self, id);
          return;
        }
        ship_binary(self,
                    shipment{st.agents_by_node[node], node, st.cfg.executable,
                             st.cfg.binary_hash, st.cfg.job_id, st.cfg.settings.timeout},
                    [=](caf::error err, uint64_t) {
                      if (err) {
                        worker_failed(self, id,
                                      fmt::format("could not get the driver's binary: {}",
                                                  describe(err)));
                        return;
                      }
                      self->state.shipped.insert(node);
                      colocate(self, id);
                    });
      },
      [=](caf::error& err) {
        self->state.registry.reserve_failed(id);
        worker_failed(self, id, fmt::format("could not reserve resources: {}", describe(err)));
      });
}

} // namespace

void start_worker(elastic_actor self, int32_t id) {
  auto& st = self->state;
  auto node = st.workers[id].node;
  auto& info = st.infos_by_node[node];
  if (st.agents_by_node.count(node) || info.port == 0) {
    reserve_and_colocate(self, id);
    return;
  }
  self->request(transport::connector(self->system()), st.cfg.settings.timeout,
                caf::connect_atom_v, info.address, info.port)
    .then(
      [=](const caf::node_id&, caf::strong_actor_ptr& ptr, const std::set<std::string>&) {
        if (!ptr) {
          worker_failed(self, id, fmt::format("could not reach node '{}'", node));
          return;
        }
        self->state.agents_by_node[node] = caf::actor_cast<node_agent>(std::move(ptr));
        reserve_and_colocate(self, id);
      },
      [=](caf::error& err) {
        worker_failed(self, id, fmt::format("could not reach node '{}': {}", node,
                                            describe(err)));
      });
}

void stop_colocator(elastic_actor self, int32_t id) {
  auto& st = self->state;
  auto& w = st.workers[id];
  if (!w.coloc) {
    st.registry.colocator_stopped(id);
    return;
  }
  auto job = w.sub_job;
  st.stopping_jobs.insert(job);
  auto stopped = [=] {
    self->state.registry.colocator_stopped(id);
    self->state.stopping_jobs.erase(job);
    shutdown_done(self);
  };
  self->request(w.coloc, st.cfg.settings.timeout + knobs::colocator_stop_slack, stop_atom_v)
    .then([=](bool) { stopped(); }, [=](caf::error&) { stopped(); });
  self->demonitor(w.coloc.address());
  w.coloc = nullptr;
}

void stop_worker(elastic_actor self, int32_t id) {
  auto& st = self->state;
  switch (st.registry.gone(id)) {
    case elastic::give_back::stop_colocator:
      stop_colocator(self, id);
      break;
    case elastic::give_back::release_reservation: {
      auto& w = st.workers[id];
      if (auto a = st.agents_by_node.find(w.node); a != st.agents_by_node.end() && a->second)
        caf::anon_send(a->second, release_atom_v, w.sub_job);
      break;
    }
    case elastic::give_back::none:
      break;
  }
}

} // namespace hvactor::detail
