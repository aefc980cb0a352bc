// An elastic job's worker processes: each seat's reservation, binary and
// colocator, and giving all of it back when the worker ends (the worker
// registry, elastic_workers.hpp, says what each one holds).

#include <algorithm>

#include <fmt/format.h>

#include "base/internal/actor_system.hpp"
#include "actors/coordinator/binary_shipper.hpp"
#include "base/internal/caf_error.hpp"
#include "actors/coordinator/coordinator_state.hpp"
#include "base/net/transport.hpp"
#include "actors/node/worker_env.hpp"

namespace hvactor::detail {

using namespace proto;

namespace {

void colocated(coord_actor self, int32_t id, node_colocator coloc) {
  auto& st = self->state;
  auto& w = st.workers[id];
  adopt_colocator(self, w.sub_job, colocation{w.node, coloc, id});
  // A worker that ended meanwhile still has to stop the colocator it got.
  if (st.el.registry.colocated(id) == elastic::give_back::stop_colocator)
    stop_colocator(self, w.sub_job);
  else if (st.ph == phase::stopping || st.ph == phase::stopped)
    stop_worker(self, id);
}

void colocate(coord_actor self, int32_t id) {
  auto& st = self->state;
  auto& w = st.workers[id];
  worker_env_spec spec;
  spec.rendezvous_host = st.rendezvous_host;
  spec.rendezvous_port = st.rendezvous_port;
  spec.job_id = st.cfg.job_id;
  spec.generation = st.el.generation;
  spec.timeout = st.cfg.settings.timeout;
  spec.extra_env_vars = st.cfg.options.extra_env_vars;
  auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(
                std::min<std::chrono::seconds>(st.cfg.options.elastic_timeout,
                                               std::chrono::hours(24 * 3650)))
              + wait_bound(st.cfg.settings.timeout);
  auto env = elastic_worker_env(spec, w.node, w.id, wait);
  env_list boot;
  if (!st.cfg.launch)
    boot = worker_bootstrap_env(st.endpoint, st.cfg.job_id, st.cfg.settings.timeout);
  std::vector<env_list> rank_env;
  if (st.cfg.launch)
    rank_env.push_back(env);
  else
    boot.entries.insert(boot.entries.end(), env.entries.begin(), env.entries.end());
  auto req = spawn_request_for(st, w.node, w.sub_job, {id}, std::move(boot), std::move(rank_env));
  self->request(st.agents_by_node[w.node], st.cfg.settings.timeout, colocate_atom_v, req,
                coordinator{self})
    .then([=](node_colocator& coloc) { colocated(self, id, coloc); },
          [=](caf::error& err) {
            worker_failed(self, id, fmt::format("could not start: {}", describe(err)));
          });
}

void reserve_and_colocate(coord_actor self, int32_t id) {
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
        if (st.el.registry.reserved(id) == elastic::give_back::release_reservation) {
          caf::anon_send(st.agents_by_node[node], release_atom_v, w.sub_job);
          return;
        }
        if (!st.infos_by_node[node].caches_binaries || st.el.shipped.count(node)
            || st.cfg.binary_hash.empty()) {
          colocate(self, id);
          return;
        }
        ship_binary(self,
                    shipment{st.agents_by_node[node], node, st.cfg.executable,
                             st.cfg.binary_hash, st.cfg.libraries, st.cfg.job_id,
                             st.cfg.settings.timeout},
                    [=](caf::error err, uint64_t) {
                      if (err) {
                        worker_failed(self, id,
                                      fmt::format("could not get the driver's binary: {}",
                                                  describe(err)));
                        return;
                      }
                      self->state.el.shipped.insert(node);
                      colocate(self, id);
                    });
      },
      [=](caf::error& err) {
        self->state.el.registry.reserve_failed(id);
        worker_failed(self, id, fmt::format("could not reserve resources: {}", describe(err)));
      });
}

} // namespace

void start_worker(coord_actor self, int32_t id) {
  auto& st = self->state;
  auto node = st.workers[id].node;
  with_agent(self, node, st.cfg.settings.timeout, [=](caf::error err) {
    if (err)
      worker_failed(self, id, fmt::format("could not reach node '{}': {}", node, describe(err)));
    else
      reserve_and_colocate(self, id);
  });
}

void stop_worker(coord_actor self, int32_t id) {
  auto& st = self->state;
  auto& w = st.workers[id];
  switch (st.el.registry.gone(id)) {
    case elastic::give_back::stop_colocator:
      if (st.colocators.count(w.sub_job))
        stop_colocator(self, w.sub_job);
      else
        st.el.registry.colocator_stopped(id);
      break;
    case elastic::give_back::release_reservation:
      if (auto a = st.agents_by_node.find(w.node); a != st.agents_by_node.end() && a->second)
        caf::anon_send(a->second, release_atom_v, w.sub_job);
      break;
    case elastic::give_back::none:
      break;
  }
}

} // namespace hvactor::detail
