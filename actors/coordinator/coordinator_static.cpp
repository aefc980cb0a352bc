// A static job's workers: one colocator per planned node, registration,
// the Horovod variables once every rank registered, and what a dead worker
// or a lost node means for the job (static_roster.hpp holds the rules).
// Placement comes before (coordinator_placement.cpp).

#include <fmt/format.h>

#include "hvactor/errors.hpp"
#include "base/internal/caf_error.hpp"
#include "base/internal/start_marks.hpp"
#include "actors/coordinator/coordinator_state.hpp"
#include "actors/node/worker_env.hpp"
#include "base/internal/env_names.hpp"
#include "base/internal/knobs_net.hpp"
#include "base/internal/process.hpp"

namespace hvactor::detail {

namespace {

// Registration waits on every process of the job starting, which takes
// longer the more there are (128 ranks on 2 cores: tens of seconds), so its
// bound grows with the job: the timeout plus this much per rank.
constexpr std::chrono::milliseconds registration_per_rank{100};

std::chrono::milliseconds registration_bound(const coordinator_state& st) {
  return st.cfg.settings.timeout + registration_per_rank * st.size();
}

} // namespace

using namespace proto;

namespace {

// The Horovod variables of every rank, given each rank's node. Static
// jobs: generation 0, NICs not known, CUDA_VISIBLE_DEVICES set by the
// colocators (they hold the GPU ids).
std::vector<env_list> horovod_envs(const coordinator_state& st,
                                   const std::vector<std::string>& node_of_rank) {
  worker_env_spec spec;
  spec.node_of_rank = node_of_rank;
  spec.rendezvous_host = st.rendezvous_host;
  spec.rendezvous_port = st.rendezvous_port;
  spec.job_id = st.cfg.job_id;
  spec.timeout = st.cfg.settings.timeout;
  spec.extra_env_vars = st.cfg.options.extra_env_vars;
  return worker_envs(spec);
}

// What every worker of a node starts with: how to reach this coordinator
// (the job's shared-memory segment is planned in its spawn request).
env_list bootstrap_env(const coordinator_state& st) {
  return worker_bootstrap_env(st.endpoint, st.cfg.job_id, st.cfg.settings.timeout);
}

// hvactor-run: every node started its processes (no registration).
void launch_started(coord_actor self) {
  auto& st = self->state;
  if (!st.start_pending || st.ph != phase::registering)
    return;
  st.ph = phase::ready;
  st.start_pending = false;
  job_info info{st.cfg.job_id, st.size(), {}, {}, st.fixed.shipped_bytes, {}};
  for (auto& [r, w] : st.workers) {
    info.nodes.push_back(w.node);
    info.pids.push_back(0);
  }
  st.start_promise.deliver(std::move(info));
}

void colocate(coord_actor self, const node_assignment& a, std::vector<env_list> envs,
              std::shared_ptr<size_t> colocated) {
  auto& st = self->state;
  std::vector<env_list> rank_env;
  if (st.cfg.launch)
    for (auto r : a.ranks)
      rank_env.push_back(envs[r]);
  auto node = a.node_id;
  auto req = spawn_request_for(st, node, st.cfg.job_id, {a.ranks.begin(), a.ranks.end()},
                               st.cfg.launch ? env_list{} : bootstrap_env(st),
                               std::move(rank_env));
  self->request(st.agents_by_node[node], st.cfg.settings.timeout, colocate_atom_v, req,
                coordinator{self})
    .then(
      [=](node_colocator& coloc) {
        auto& st = self->state;
        if (st.ph != phase::registering && st.ph != phase::ready) {
          caf::anon_send(coloc, stop_atom_v); // shut down meanwhile
          return;
        }
        adopt_colocator(self, node, colocation{node, coloc, -1});
        // hvactor-run: no registration; running once every node started.
        if (st.cfg.launch && ++*colocated == st.fixed.plan.nodes.size())
          launch_started(self);
      },
      [=](caf::error& err) {
        fail(self, make_error(error_kind::worker_error,
                              fmt::format("node '{}' could not start the job's workers: {}", node,
                                          describe(err))));
      });
}

} // namespace

std::string worker_label(const coordinator_state& st, int rank) {
  return st.fixed.roster.label(rank);
}

void spawn_workers(coord_actor self) {
  auto& st = self->state;
  st.ph = phase::registering;
  start_marks::note(start_marks::spawned_ns);
  st.workers.clear();
  std::vector<std::string> node_of_rank;
  for (auto& a : st.fixed.plan.nodes)
    for (auto r : a.ranks) {
      if (node_of_rank.size() <= static_cast<size_t>(r))
        node_of_rank.resize(r + 1);
      node_of_rank[r] = a.node_id;
    }
  for (int r = 0; r < static_cast<int>(node_of_rank.size()); ++r)
    st.workers[r] = job_worker{.id = r, .node = node_of_rank[r]};
  st.fixed.roster.plan(node_of_rank);
  std::vector<env_list> envs;
  if (st.cfg.launch)
    envs = horovod_envs(st, node_of_rank);
  else
    self->delayed_send(self, registration_bound(st), registration_due_atom_v);
  auto colocated = std::make_shared<size_t>(0);
  for (auto& a : st.fixed.plan.nodes)
    colocate(self, a, envs, colocated);
}

void hand_out_env(coord_actor self) {
  auto& st = self->state;
  start_marks::note(start_marks::all_registered_ns);
  std::vector<std::string> nodes;
  for (int r = 0; r < st.size(); ++r)
    nodes.push_back(st.fixed.roster.node_of(r));
  auto envs = horovod_envs(st, nodes);
  auto pending = std::make_shared<int>(st.size());
  for (int r = 0; r < st.size(); ++r) {
    self->request(st.workers[r].handle, st.cfg.settings.timeout, set_env_atom_v, envs[r])
      .then(
        [=](bool) {
          auto& st = self->state;
          if (--*pending > 0 || !st.start_pending)
            return;
          st.ph = phase::ready;
          st.start_pending = false;
          job_info info{st.cfg.job_id, st.size(), {}, {}, st.fixed.shipped_bytes, {}};
          for (auto& [rank, w] : st.workers) {
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

namespace {

// The job's ranks that wait in a collective stop now, failing with `why`
// (gloo_backend's failure watch), instead of waiting out a timeout: the
// job's scope closes (a lost node; `close`), or a key in it says so (a dead
// rank: the ranks still tell each other there whom they blame).
void stop_ranks_waiting(coord_actor self, const std::string& why, bool close) {
  auto& st = self->state;
  if (!st.cfg.store)
    return;
  auto scope = fmt::format("{}/0", st.cfg.job_id);
  if (close)
    caf::anon_send(st.cfg.store, close_atom_v, std::move(scope), why);
  else
    caf::anon_send(st.cfg.store, set_atom_v, std::move(scope), std::string{proto::rank_died_key},
                   std::vector<char>(why.begin(), why.end()));
}

} // namespace

void static_exited(coord_actor self, const worker_exit& ex) {
  auto& st = self->state;
  auto err = make_error(error_kind::worker_error, st.fixed.roster.died(ex), ex.world_rank);
  // Its peers mostly see it go (its connections close, its node raises the
  // shared-memory abort), but not all: a rank whose Gloo send failed before
  // its pair saw the close, or that waits on a live peer which waits on the
  // dead rank (a hierarchical job: other local rank, other node), would wait
  // out its timeout. A rank of an SPMD program that exits 0 is done.
  bool died = !st.cfg.launch || ex.exit_code != 0 || ex.signal != 0;
  if (died && !st.failure && ex.pid != 0)
    stop_ranks_waiting(self, fmt::format("peer rank {} (pid {}) on node '{}' {}: {}",
                                         ex.world_rank, ex.pid, ex.node_id,
                                         proto::worker_died_during_the_job,
                                         describe_exit(ex.exit_code, ex.signal)),
                       false);
  if (st.cfg.launch)
    launch_exited(self, ex, std::move(err));
  else
    fail(self, std::move(err));
}

void static_node_lost(coord_actor self, const std::string& node, const caf::error& reason) {
  static_node_lost(self, node,
                   reason && reason != caf::exit_reason::user_shutdown
                     ? caf::to_string(reason)
                     : std::string{"the node was shut down"});
}

void static_node_lost(coord_actor self, const std::string& node, const std::string& why) {
  auto& st = self->state;
  auto& info = st.infos_by_node[node];
  auto where = info.port != 0 ? fmt::format(" at {}:{}", info.address, info.port)
                              : std::string{};
  auto ranks = st.fixed.roster.on_node(node);
  // The other ranks may wait in a collective on the lost ones: a cut link
  // closes no connection, so Gloo would wait out its whole timeout. Closing
  // the job's scope tells them now (gloo_backend's failure watch), naming
  // the peer; they fail before the job's workers are stopped.
  if (!ranks.empty())
    stop_ranks_waiting(self, fmt::format("peer {} on node '{}'{} is unreachable: {} ({})",
                                         fmt::join(ranks, ", "), node, where,
                                         proto::node_left_the_cluster, why),
                       true);
  fail(self, make_error(error_kind::node_lost,
                        fmt::format("node '{}'{} left the cluster during the job ({}); its "
                                    "workers are gone: {}",
                                    node, where, why, fmt::join(ranks, ", "))));
}

void static_worker_lost(coord_actor self, int32_t id) {
  auto& st = self->state;
  if (id < 0 || id >= st.size() || st.failure)
    return;
  auto lost = [=] {
    auto& st = self->state;
    if (!st.failure && st.ph != phase::stopping && st.ph != phase::stopped)
      fail(self, make_error(error_kind::worker_error,
                            fmt::format("lost the connection to worker {}", worker_label(st, id)),
                            id));
  };
  // A cut link drops the worker's connection and its node's on separate
  // heartbeat ticks: ask the node before blaming the worker. Its
  // colocator's down message (colocator_down) or its silence is node_lost.
  auto node = st.fixed.roster.node_of(id);
  auto i = st.colocators.find(node);
  if (i == st.colocators.end()) {
    lost();
    return;
  }
  auto bound = knobs::connection_timeout + knobs::heartbeat_interval;
  self->request(i->second.handle, bound, ping_atom_v)
    .then([=](int32_t) { lost(); },
          [=](caf::error& err) {
            auto& st = self->state;
            if (!st.failure && st.colocators.count(node) && st.ph != phase::stopping
                && st.ph != phase::stopped)
              static_node_lost(self, node,
                               fmt::format("worker {} lost its connection and the node did "
                                           "not answer within {} s: {}",
                                           id, bound.count(), describe(err)));
          });
}

void registration_due(coord_actor self) {
  auto& st = self->state;
  if (st.ph != phase::registering || st.fixed.roster.complete() || st.failure)
    return;
  auto missing = st.fixed.roster.missing();
  fail(self, make_error(error_kind::rendezvous_timeout,
                        fmt::format("{} of {} workers never registered within {} ms (the "
                                    "timeout, {} ms, and {} ms per rank): {}",
                                    missing.size(), st.size(), registration_bound(st).count(),
                                    st.cfg.settings.timeout.count(),
                                    registration_per_rank.count(), fmt::join(missing, ", "))));
}

} // namespace hvactor::detail
