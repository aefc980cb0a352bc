// Placement phase of the coordinator: cluster view -> plan -> all-or-nothing
// reservation -> code shipping -> spawn_workers.

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <unordered_map>

#include <fmt/format.h>

#include "actors/coordinator/coordinator_state.hpp"
#include "actors/coordinator/binary_shipper.hpp"
#include "base/net/transport.hpp"
#include "base/internal/log.hpp"
#include "base/internal/start_marks.hpp"
#include "actors/protocol/system_config.hpp"
#include "base/internal/knobs_jobs.hpp"
#include "base/internal/knobs_net.hpp"

namespace hvactor::detail {

namespace {

using namespace proto;
using namespace std::chrono_literals;

placement_request make_request(const executor_options& o) {
  placement_request r;
  if (o.num_hosts) {
    r.num_hosts = *o.num_hosts;
    r.workers_per_host = o.num_workers_per_host.value_or(1);
  } else {
    r.num_workers = o.num_workers.value_or(o.min_workers.value_or(1));
  }
  r.cpus_per_worker = o.cpus_per_worker;
  r.gpus_per_worker = o.use_gpu ? o.gpus_per_worker.value_or(1) : 0;
  return r;
}

// Bound of one placement request: never past the placement deadline (a
// frozen node must not hold start() beyond placement_timeout), at least
// 500 ms, at most settings.timeout.
caf::timespan attempt_timeout(const coordinator_state& st) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(st.fixed.placement_deadline
                                                                    - caf::make_timestamp());
  return std::clamp<std::chrono::milliseconds>(left, knobs::min_placement_request,
                                               st.cfg.settings.timeout);
}

void retry_placement(coord_actor self, std::string problem) {
  auto& st = self->state;
  st.fixed.last_placement_problem = std::move(problem);
  if (caf::make_timestamp() >= st.fixed.placement_deadline) {
    auto ms = st.cfg.settings.placement_timeout.count();
    fail(self, make_error(error_kind::placement_timeout,
                          fmt::format("could not reserve resources within {} ms "
                                      "(placement_timeout). Requested: {}. Available: {}",
                                      ms, describe(make_request(st.cfg.options)),
                                      st.fixed.last_placement_problem)));
    return;
  }
  // 10, 20, 40, ... ms, then every placement_retry.
  auto doublings = std::min<uint64_t>(st.fixed.attempt > 0 ? st.fixed.attempt - 1 : 0, 5);
  auto delay = std::min<caf::timespan>(knobs::placement_first_retry * (1 << doublings),
                                       knobs::placement_retry);
  self->delayed_send(self, delay, placement_retry_atom_v);
}

// Nodes the driver ships its binary to at the same time (static jobs).
constexpr size_t ship_nodes_at_once = 8;

// Makes sure every node of the plan caches the driver's binary and
// libraries, then spawns the workers.
void ship_binaries(coord_actor self) {
  auto& st = self->state;
  st.ph = phase::shipping;
  start_marks::note(start_marks::placed_ns);
  std::vector<std::string> targets;
  for (auto& a : st.fixed.plan.nodes)
    if (st.infos_by_node[a.node_id].caches_binaries)
      targets.push_back(a.node_id);
  if (targets.empty() || st.cfg.binary_hash.empty()) {
    spawn_workers(self);
    return;
  }
  auto pending = std::make_shared<size_t>(targets.size());
  auto t0 = std::chrono::steady_clock::now();
  // At most ship_nodes_at_once nodes at a time: every upload keeps chunks
  // in flight, and all of a 128-node job's at once filled the driver's
  // memory and kept its one TLS thread from its heartbeats.
  auto queue = std::make_shared<std::vector<std::string>>(targets.rbegin(), targets.rend());
  auto next = std::make_shared<std::function<void()>>();
  *next = [=] {
    if (queue->empty() || self->state.ph != phase::shipping)
      return;
    auto node = queue->back();
    queue->pop_back();
    auto done = [=](caf::error err, uint64_t sent) {
      if (self->state.ph != phase::shipping) {
        *next = nullptr;
        return;
      }
      self->state.fixed.shipped_bytes += sent;
      if (err) {
        *next = nullptr;
        fail(self, make_error(error_kind::worker_error,
                              fmt::format("could not ship the driver's binary to node '{}': {}",
                                          node, describe(err))));
        return;
      }
      if (--*pending == 0) {
        auto ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0);
        log::debug("job {}: binary shipped ({} bytes) in {:.1f} ms", self->state.cfg.job_id,
                   self->state.fixed.shipped_bytes, ms.count());
        *next = nullptr; // the closure holds itself
        spawn_workers(self);
        return;
      }
      (*next)();
    };
    auto& s = self->state;
    ship_binary(self,
                shipment{s.agents_by_node[node], node, s.cfg.executable, s.cfg.binary_hash,
                         s.cfg.libraries, s.cfg.job_id, s.cfg.settings.timeout},
                done);
  };
  for (size_t i = 0; i < ship_nodes_at_once && i < targets.size(); ++i)
    (*next)();
}

void reserve_plan(coord_actor self, std::vector<node_resources> nodes) {
  auto& st = self->state;
  auto req = make_request(st.cfg.options);
  auto plan = plan_placement(req, nodes);
  if (!plan) {
    retry_placement(self, describe(nodes));
    return;
  }
  check_unique_nodes(*plan);
  st.fixed.plan = *plan;
  auto attempt = st.fixed.attempt;
  auto pending = std::make_shared<size_t>(plan->nodes.size());
  auto failed = std::make_shared<std::string>();
  // One copy for all handlers: a per-node copy made placement quadratic
  // (measured: 5.6 s and 12 GB at 10,000 nodes, 0.2 s after).
  auto shared_nodes = std::make_shared<const std::vector<node_resources>>(std::move(nodes));
  for (auto& a : plan->nodes) {
    resources want{a.cpus, a.gpus};
    auto node = a.node_id;
    auto done = [=] {
      if (--*pending > 0 || self->state.ph != phase::placing || self->state.fixed.attempt != attempt)
        return;
      if (failed->empty()) {
        ship_binaries(self);
      } else {
        release_reserved(self);
        retry_placement(self, describe(*shared_nodes) + " (" + *failed + ")");
      }
    };
    self->request(st.agents_by_node[node], attempt_timeout(st), reserve_atom_v,
                  st.cfg.job_id, want)
      .then(
        [=](const reservation&) {
          if (self->state.ph != phase::placing) { // shut down meanwhile
            caf::anon_send(self->state.agents_by_node[node], release_atom_v,
                           self->state.cfg.job_id);
            return;
          }
          self->state.fixed.reserved_nodes.insert(node);
          done();
        },
        [=](caf::error& err) {
          // A reservation that timed out may still be granted: release it.
          caf::anon_send(self->state.agents_by_node[node], release_atom_v,
                         self->state.cfg.job_id);
          *failed = describe(err);
          done();
        });
  }
}

// Makes sure every node of `view` has a usable agent handle, then plans.
void connect_agents(coord_actor self, cluster_view view) {
  auto& st = self->state;
  auto attempt = st.fixed.attempt;
  auto pending = std::make_shared<size_t>(view.nodes.size() + 1);
  auto shared_view = std::make_shared<const cluster_view>(std::move(view));
  auto done = [=] {
    if (--*pending > 0 || self->state.ph != phase::placing || self->state.fixed.attempt != attempt)
      return;
    // Keep the registry's order.
    std::vector<node_resources> ordered;
    for (auto& info : shared_view->nodes)
      if (self->state.agents_by_node.count(info.node_id))
        ordered.push_back({info.node_id, info.total.cpus, info.total.gpus, info.free.cpus,
                           info.free.gpus});
    auto& prefer = self->state.cfg.node_order;
    if (!prefer.empty()) {
      // One lookup table, not a search per comparison: a Slurm node list
      // may name tens of thousands of nodes.
      std::unordered_map<std::string, size_t> position;
      position.reserve(prefer.size());
      for (size_t i = 0; i < prefer.size(); ++i)
        position.emplace(prefer[i], i);
      auto rank_of = [&](const node_resources& n) {
        auto it = position.find(n.node_id);
        return it == position.end() ? prefer.size() : it->second;
      };
      std::stable_sort(ordered.begin(), ordered.end(),
                       [&](const node_resources& a, const node_resources& b) {
                         return rank_of(a) < rank_of(b);
                       });
    }
    reserve_plan(self, std::move(ordered));
  };
  take_view(self, *shared_view);
  for (auto& info : shared_view->nodes) {
    auto id = info.node_id;
    with_agent(self, id, attempt_timeout(st), [=](caf::error err) {
      if (err)
        log::warn("cannot reach node '{}': {}", id, describe(err));
      done();
    });
  }
  done();
}

} // namespace

void release_reserved(coord_actor self) {
  auto& st = self->state;
  for (auto& node : st.fixed.reserved_nodes)
    caf::anon_send(st.agents_by_node[node], release_atom_v, st.cfg.job_id);
  st.fixed.reserved_nodes.clear();
}

void try_placement(coord_actor self) {
  auto& st = self->state;
  if (st.ph != phase::placing)
    return;
  ++st.fixed.attempt;
  auto attempt = st.fixed.attempt;
  self->request(st.cfg.registry, attempt_timeout(st), list_atom_v)
    .then(
      [=](cluster_view& view) {
        if (self->state.ph != phase::placing || self->state.fixed.attempt != attempt)
          return;
        if (view.nodes.empty()) {
          retry_placement(self, "no live nodes");
          return;
        }
        connect_agents(self, std::move(view));
      },
      [=](caf::error& err) {
        retry_placement(self, "the cluster's node registry did not answer: " + describe(err));
      });
}

} // namespace hvactor::detail

namespace hvactor::detail {

std::vector<std::string> take_view(coord_actor self, const cluster_view& view) {
  auto& st = self->state;
  std::map<std::string, node_agent> kept;
  std::vector<std::string> forgotten;
  for (size_t i = 0; i < view.nodes.size(); ++i) {
    auto& info = view.nodes[i];
    auto old = st.infos_by_node.find(info.node_id);
    auto agent = st.agents_by_node.find(info.node_id);
    bool in_process = info.port == 0 && i < view.agents.size();
    // Same address and port is not enough: a node restarted on a fixed
    // port is another process (CAF node), and the old proxy stays dead.
    if (in_process)
      kept.emplace(info.node_id, view.agents[i]);
    else if (old != st.infos_by_node.end() && agent != st.agents_by_node.end()
             && old->second.address == info.address && old->second.port == info.port
             && i < view.agents.size() && view.agents[i]
             && view.agents[i].node() == agent->second.node())
      kept.emplace(info.node_id, agent->second);
    else
      forgotten.push_back(info.node_id);
  }
  st.agents_by_node = std::move(kept);
  st.infos_by_node.clear();
  for (auto& info : view.nodes)
    st.infos_by_node[info.node_id] = info;
  return forgotten;
}

void with_agent(coord_actor self, const std::string& node, caf::timespan timeout,
                std::function<void(caf::error)> then) {
  auto& st = self->state;
  if (st.agents_by_node.count(node)) {
    then({});
    return;
  }
  auto info = st.infos_by_node.find(node);
  if (info == st.infos_by_node.end() || info->second.port == 0) {
    then(make_error(error_kind::node_lost, fmt::format("node '{}' is not in the cluster", node)));
    return;
  }
  auto where = fmt::format("{}:{}", info->second.address, info->second.port);
  auto started = caf::make_timestamp();
  self->request(transport::connector(self->system()), timeout, caf::connect_atom_v,
                info->second.address, info->second.port)
    .then(
      [=](const caf::node_id&, caf::strong_actor_ptr& ptr, const std::set<std::string>&) {
        if (!ptr) {
          then(make_error(error_kind::node_lost, fmt::format("no agent answers at {}", where)));
          return;
        }
        auto agent = caf::actor_cast<node_agent>(std::move(ptr));
        // A node that dies while the job starts must fail start() at once,
        // not when a request to it times out.
        self->monitor(agent);
        self->state.agents_by_node[node] = agent;
        then({});
      },
      [=](caf::error& err) {
        // CAF 0.17.6 drops a new connection whose server handshake comes
        // after the next heartbeat tick (connection_timeout): a busy node,
        // not a lost one. Again while the time allows.
        auto left = timeout - (caf::make_timestamp() - started);
        if (err == caf::sec::connection_timeout && left > knobs::rejoin_interval) {
          log::debug("connecting to node '{}' at {}: dropped during the handshake; again", node,
                     where);
          with_agent(self, node, left, then);
          return;
        }
        then(make_error(error_kind::node_lost, fmt::format("{}: {}", where, describe(err))));
      });
}

} // namespace hvactor::detail
