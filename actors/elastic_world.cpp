// The elastic coordinator's world: discovery polls, the available hosts,
// and planning and publishing generations (elastic_state.hpp, steps 1, 3-5).

#include <algorithm>
#include <climits>

#include <fmt/format.h>

#include "internal/elastic_assignment.hpp"
#include "internal/elastic_state.hpp"
#include "hvactor/errors.hpp"
#include "internal/caf_error.hpp"
#include "internal/actor_system.hpp"
#include "internal/log.hpp"

namespace hvactor::detail {

using namespace proto;

namespace {

std::string elastic_scope(const elastic_coordinator_state& st) {
  return st.cfg.job_id + "/elastic";
}

std::string gen_scope(const elastic_coordinator_state& st, int gen) {
  return fmt::format("{}/{}", st.cfg.job_id, gen);
}

std::vector<char> bytes(const std::string& s) {
  return {s.begin(), s.end()};
}

caf::timespan elastic_wait(const elastic_coordinator_state& st) {
  return wait_bound(std::chrono::milliseconds{
    std::min<std::chrono::seconds>(st.cfg.options.elastic_timeout, std::chrono::hours(24 * 3650))});
}

// Slots a node's total resources hold for this job (RayHostDiscovery).
int slots_of(const node_info& n, const executor_options& o) {
  int slots = n.total.cpus / std::max(1, o.cpus_per_worker);
  if (o.use_gpu)
    slots = std::min(slots, n.total.gpus / std::max(1, o.gpus_per_worker.value_or(1)));
  return std::max(0, slots);
}

std::string describe_hosts(const std::vector<host_slots>& hosts) {
  std::vector<std::string> parts;
  for (auto& h : hosts)
    parts.push_back(fmt::format("{}:{}", h.host, h.slots));
  return parts.empty() ? std::string{"none"} : fmt::format("{}", fmt::join(parts, ", "));
}

// Where the job stands now that discovery answered.
void evaluate(elastic_actor self) {
  auto& st = self->state;
  int min = *st.cfg.options.min_workers;
  if (st.ph == elastic_phase::waiting) {
    auto avail = available_hosts(self);
    auto slots = elastic::total_slots(avail);
    if (slots >= min) {
      st.short_since.reset();
      st.ph = elastic_phase::ready;
      st.start_pending = false;
      st.start_promise.deliver(job_info{st.cfg.job_id, 0, {}, {}, 0, {}});
      return;
    }
    if (caf::make_timestamp() - *st.short_since >= elastic_wait(st))
      elastic_fail(self, make_error(error_kind::elastic_timeout,
                                    fmt::format("Timed out waiting for minimum number of slots to "
                                                "become available: wanted {}, saw {} on nodes [{}] "
                                                "after {} s ({})",
                                                min, slots, describe_hosts(avail),
                                                st.cfg.options.elastic_timeout.count(),
                                                st.cfg.options.discovery.describe())));
    return;
  }
  if (st.ph == elastic_phase::running)
    replan(self, false);
}

void found(elastic_actor self, std::vector<host_slots> hosts) {
  auto& st = self->state;
  st.first_poll = false;
  std::vector<host_slots> live;
  for (auto& h : hosts) {
    if (auto info = st.infos_by_node.find(h.host); info != st.infos_by_node.end()) {
      // A script may promise more slots than the node can hold for the job.
      h.slots = std::min(h.slots, slots_of(info->second, st.cfg.options));
      if (h.slots > 0)
        live.push_back(h);
    } else
      log::debug("job {}: discovered host '{}' is not a live node of the cluster", st.cfg.job_id,
                 h.host);
  }
  st.found = std::move(live);
  evaluate(self);
}

void poll_done(elastic_actor self) {
  auto& st = self->state;
  if (st.ph != elastic_phase::stopping && st.ph != elastic_phase::stopped && !st.failure)
    self->delayed_send(self, st.cfg.options.discovery_period, discover_atom_v);
}

void discovery_failed(elastic_actor self, const std::string& why) {
  auto& st = self->state;
  if (st.first_poll) {
    elastic_fail(self, make_error(error_kind::generic,
                                  fmt::format("host discovery ({}) failed on its first run: {}",
                                              st.cfg.options.discovery.describe(), why)));
    return;
  }
  log::warn("job {}: host discovery ({}) failed; keeping the last hosts and retrying: {}",
            st.cfg.job_id, st.cfg.options.discovery.describe(), why);
  evaluate(self);
}

// The live nodes from the registry: their infos, and agents of in-process
// nodes (hvactor-node agents are connected when a worker starts there).
void take_view(elastic_actor self, const cluster_view& view) {
  auto& st = self->state;
  std::map<std::string, node_info> infos;
  for (size_t i = 0; i < view.nodes.size(); ++i) {
    auto& info = view.nodes[i];
    auto old = st.infos_by_node.find(info.node_id);
    bool same = old != st.infos_by_node.end() && old->second.address == info.address
                && old->second.port == info.port;
    if (!same) {
      st.agents_by_node.erase(info.node_id);
      st.shipped.erase(info.node_id);
    }
    if (info.port == 0 && i < view.agents.size())
      st.agents_by_node[info.node_id] = view.agents[i];
    infos[info.node_id] = info;
  }
  st.infos_by_node = std::move(infos);
}

} // namespace

std::vector<host_slots> available_hosts(elastic_actor self) {
  auto& st = self->state;
  auto now = elastic::clock::now();
  std::vector<host_slots> out;
  for (auto& h : st.order.order(st.found))
    if (st.infos_by_node.count(h.host) && !st.blacklist.blacklisted(h.host, now))
      out.push_back(h);
  return out;
}

void poll_discovery(elastic_actor self) {
  auto& st = self->state;
  if (st.ph == elastic_phase::stopping || st.ph == elastic_phase::stopped || st.failure)
    return;
  self->request(st.cfg.registry, st.cfg.settings.timeout, list_atom_v)
    .then(
      [=](cluster_view& view) {
        auto& st = self->state;
        take_view(self, view);
        if (st.cfg.options.discovery.from_cluster()) {
          std::vector<host_slots> hosts;
          for (auto& n : view.nodes)
            if (int slots = slots_of(n, st.cfg.options); slots > 0)
              hosts.push_back({n.node_id, slots});
          found(self, std::move(hosts));
          poll_done(self);
          return;
        }
        self->request(st.finder, knobs::discovery_script_limit + knobs::store_round_trip,
                      discover_atom_v)
          .then(
            [=](host_list& list) {
              std::vector<host_slots> hosts;
              for (size_t i = 0; i < list.hosts.size() && i < list.slots.size(); ++i)
                hosts.push_back({list.hosts[i], list.slots[i]});
              found(self, std::move(hosts));
              poll_done(self);
            },
            [=](caf::error& err) {
              discovery_failed(self, describe(err));
              poll_done(self);
            });
      },
      [=](caf::error& err) {
        log::warn("job {}: the cluster's registry did not answer: {}", self->state.cfg.job_id,
                  describe(err));
        poll_done(self);
      });
}

namespace {

bool same_world(const elastic::world_plan& plan, const std::vector<int32_t>& seats) {
  if (plan.seats.size() != seats.size())
    return false;
  for (size_t r = 0; r < seats.size(); ++r)
    if (plan.seats[r].id != seats[r])
      return false;
  return true;
}

std::vector<char> assignment_bytes(const rank_layout& l) {
  return elastic_protocol::encode({.rank = l.rank,
                                   .size = l.size,
                                   .local_rank = l.local_rank,
                                   .local_size = l.local_size,
                                   .cross_rank = l.cross_rank,
                                   .cross_size = l.cross_size});
}

void watch_resets(elastic_actor self, int gen) {
  auto& st = self->state;
  auto key = fmt::format("reset/{}", gen);
  self->request(st.cfg.store, knobs::store_watch_period + knobs::store_round_trip, get_atom_v,
                elastic_scope(st), key, caf::timespan{knobs::store_watch_period})
    .then(
      [=](std::vector<char>& why) {
        auto& st = self->state;
        if (st.generation != gen || st.ph != elastic_phase::running)
          return;
        log::info("job {}: generation {}: a worker's collectives failed ({}); resetting",
                  st.cfg.job_id, gen, std::string{why.begin(), why.end()});
        self->delayed_send(self, knobs::elastic_reset_grace, reset_due_atom_v,
                           static_cast<int32_t>(gen));
      },
      [=](caf::error&) {
        auto& st = self->state;
        if (st.generation == gen && st.ph == elastic_phase::running)
          watch_resets(self, gen);
      });
}

void watch_joins(elastic_actor self, int gen) {
  auto& st = self->state;
  key_list keys;
  for (auto id : st.seats)
    keys.keys.push_back(fmt::format("joined/{}/{}", gen, id));
  auto wait = wait_bound(st.cfg.settings.timeout + std::chrono::duration_cast<std::chrono::milliseconds>(elastic_wait(st)));
  self->request(st.cfg.store, wait + knobs::store_round_trip, wait_atom_v, elastic_scope(st),
                keys, caf::timespan{wait})
    .then(
      [=](bool) {
        auto& st = self->state;
        if (st.generation != gen)
          return;
        st.formed = true;
        for (auto id : st.seats)
          st.workers[id].has_state = true;
        log::info("job {}: generation {} formed with {} workers", st.cfg.job_id, gen,
                  st.seats.size());
        replan(self, false); // changes seen meanwhile
      },
      [=](caf::error& err) {
        log::debug("job {}: generation {} did not form: {}", self->state.cfg.job_id, gen,
                   describe(err));
      });
}

void publish(elastic_actor self, const elastic::world_plan& plan, bool failure) {
  auto& st = self->state;
  int old = st.generation;
  int gen = old + 1;
  st.generation = gen;
  st.formed = false;
  auto store = st.cfg.store;
  auto scope = elastic_scope(st);
  if (old >= 0)
    caf::anon_send(store, close_atom_v, gen_scope(st, old),
                   fmt::format("generation {} of the elastic job superseded it", gen));
  bool added = false;
  std::vector<int32_t> seats;
  std::vector<int32_t> fresh;
  for (auto& seat : plan.seats) {
    int32_t id = static_cast<int32_t>(seat.id);
    if (seat.id < 0) {
      added = true;
      id = static_cast<int32_t>(st.registry.add(seat.host));
      auto& w = st.workers[id];
      w.id = id;
      w.node = seat.host;
      w.sub_job = fmt::format("{}.{}", st.cfg.job_id, id);
      fresh.push_back(id);
    }
    seats.push_back(id);
  }
  bool removed = !plan.leaving.empty();
  for (auto& [id, w] : st.workers)
    w.rank = -1;
  for (size_t r = 0; r < seats.size(); ++r) {
    auto& w = st.workers[seats[r]];
    w.rank = static_cast<int>(r);
    caf::anon_send(store, set_atom_v, scope, fmt::format("assign/{}/{}", w.id, gen),
              assignment_bytes(plan.seats[r].layout));
    caf::anon_send(store, set_atom_v, scope, fmt::format("latest/{}", w.id), bytes(std::to_string(gen)));
  }
  for (auto id64 : plan.leaving) {
    auto id = static_cast<int32_t>(id64);
    st.registry.leave(id);
    caf::anon_send(store, set_atom_v, scope, fmt::format("assign/{}/{}", id, gen),
                   elastic_protocol::encode({.removed = true}));
    caf::anon_send(store, set_atom_v, scope, fmt::format("latest/{}", id), bytes(std::to_string(gen)));
    self->delayed_send(self, knobs::elastic_leave_grace, leave_due_atom_v, id);
  }
  st.seats = seats;
  if (!failure && old >= 0 && (added || removed)) {
    int flags = (removed ? 1 : 0) | (added ? 2 : 0);
    caf::anon_send(store, set_atom_v, scope, fmt::format("changed/{}", old),
              bytes(std::to_string(flags)));
  }
  std::vector<std::string> where;
  for (auto& seat : plan.seats)
    where.push_back(seat.host);
  log::info("job {}: generation {} ({}): {} workers on [{}]{}", st.cfg.job_id, gen,
            failure ? "after a failure" : old < 0 ? "first" : "hosts changed", seats.size(),
            fmt::join(where, ", "), plan.handover ? " (handover from a removed host)" : "");
  watch_joins(self, gen);
  watch_resets(self, gen);
  for (auto id : fresh)
    start_worker(self, id);
}

// Every host the job found is blacklisted for good: no world can form again.
bool hopeless(elastic_actor self) {
  auto& st = self->state;
  if (st.found.empty())
    return false;
  for (auto& h : st.found)
    if (!st.blacklist.forever(h.host))
      return false;
  return true;
}

} // namespace

void replan(elastic_actor self, bool failure) {
  auto& st = self->state;
  if (st.ph != elastic_phase::running || st.failure)
    return;
  failure = failure || st.broken;
  std::vector<elastic::member> members;
  bool held_state = false;
  for (auto& [id, w] : st.workers) {
    held_state = held_state || w.has_state;
    if (!is_gone(st, id) && !is_leaving(st, id))
      members.push_back({id, w.node, w.has_state});
  }
  bool any_state = std::any_of(members.begin(), members.end(),
                               [](auto& m) { return m.has_state; });
  if (held_state && !any_state) {
    elastic_fail(self, make_error(error_kind::worker_error,
                                  fmt::format("every worker that held the elastic job's state is "
                                              "gone, so its last commit is lost. First failure: {}",
                                              st.first_failure.empty() ? "none"
                                                                       : st.first_failure)));
    return;
  }
  auto avail = available_hosts(self);
  int min = *st.cfg.options.min_workers;
  int max = st.cfg.options.max_workers.value_or(INT_MAX);
  auto plan = elastic::plan_world(avail, members, min, max);
  if (!plan) {
    if (failure)
      st.broken = true;
    if (hopeless(self)) {
      elastic_fail(self, make_error(error_kind::worker_error,
                                    fmt::format("every host of the elastic job is blacklisted "
                                                "after failures. First failure: {}",
                                                st.first_failure)));
      return;
    }
    if (!st.short_since)
      st.short_since = caf::make_timestamp();
    if (caf::make_timestamp() - *st.short_since >= elastic_wait(st))
      elastic_fail(self, make_error(error_kind::elastic_timeout,
                                    fmt::format("Timed out waiting for minimum number of slots to "
                                                "become available: wanted {}, saw {} on nodes [{}] "
                                                "after {} s",
                                                min, elastic::total_slots(avail),
                                                describe_hosts(avail),
                                                st.cfg.options.elastic_timeout.count())));
    return;
  }
  st.short_since.reset();
  bool first = st.generation < 0 || st.seats.empty();
  if (!failure && !first && same_world(*plan, st.seats))
    return;
  // A change of hosts waits until the current world formed: its workers
  // would not see the notification before joining it.
  if (!failure && !first && !st.formed)
    return;
  if (!first) {
    if (st.cfg.options.reset_limit && st.resets >= *st.cfg.options.reset_limit) {
      elastic_fail(self, make_error(error_kind::reset_limit_exceeded,
                                    fmt::format("hvactor was shut down because the number of "
                                                "resets during the elastic job exceeded its "
                                                "limit: {}",
                                                *st.cfg.options.reset_limit)));
      return;
    }
    ++st.resets;
  }
  st.broken = false;
  publish(self, *plan, failure);
}

} // namespace hvactor::detail
