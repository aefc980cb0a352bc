// The elastic coordinator's world: discovery polls, the available hosts,
// and planning and publishing generations (elastic_state.hpp, steps 1, 3-5).

#include <algorithm>
#include <climits>

#include <fmt/format.h>

#include "collectives/elastic/elastic_assignment.hpp"
#include "actors/coordinator/coordinator_state.hpp"
#include "hvactor/errors.hpp"
#include "base/internal/caf_error.hpp"
#include "base/internal/actor_system.hpp"
#include "base/internal/log.hpp"
#include "base/internal/knobs_collectives.hpp"
#include "base/internal/knobs_elastic.hpp"

namespace hvactor::detail {

using namespace proto;

namespace {

std::string elastic_scope(const coordinator_state& st) {
  return st.cfg.job_id + "/elastic";
}

std::string gen_scope(const coordinator_state& st, int gen) {
  return fmt::format("{}/{}", st.cfg.job_id, gen);
}

std::vector<char> bytes(const std::string& s) {
  return {s.begin(), s.end()};
}

caf::timespan elastic_wait(const coordinator_state& st) {
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

// Where the job stands now that discovery answered.
void evaluate(coord_actor self) {
  auto& st = self->state;
  if (st.ph == phase::running) {
    replan(self, false);
    return;
  }
  if (st.ph != phase::placing)
    return;
  auto d = st.el.rules.on_start(available_hosts(self), elastic::clock::now());
  if (d.what == elastic::decision::action::fail) {
    fail(self, make_error(d.kind, d.message));
  } else if (d.what == elastic::decision::action::publish) {
    st.ph = phase::ready;
    st.start_pending = false;
    st.start_promise.deliver(job_info{st.cfg.job_id, 0, {}, {}, 0, {}});
  }
}

void found(coord_actor self, std::vector<host_slots> hosts) {
  auto& st = self->state;
  st.el.first_poll = false;
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
  st.el.found = std::move(live);
  evaluate(self);
}

// A node that left the cluster's registry (the head lost it: its process
// died or its link went down) takes its workers with it. Often the head
// notices before this driver's own connection to the node times out; were
// the node then only dropped from the hosts, the generation would change
// gracefully and its survivors, which may wait on the lost workers inside
// a collective, would wait out their Gloo timeout. A failure ends the
// generation at once (its scope closed "a worker of it failed").
void fail_workers_of_lost_nodes(coord_actor self) {
  auto& st = self->state;
  std::vector<int32_t> lost;
  for (auto& [id, w] : st.workers)
    if (!st.infos_by_node.count(w.node) && !is_gone(st, id) && !is_leaving(st, id)
        && !w.returned)
      lost.push_back(id);
  for (auto id : lost)
    worker_failed(self, id, "was lost with its node (the node left the cluster's registry)");
}

void poll_done(coord_actor self) {
  auto& st = self->state;
  if (st.ph != phase::stopping && st.ph != phase::stopped && !st.failure)
    self->delayed_send(self, st.cfg.options.discovery_period, discover_atom_v);
}

void discovery_failed(coord_actor self, const std::string& why) {
  auto& st = self->state;
  if (st.el.first_poll) {
    fail(self, make_error(error_kind::generic,
                                  fmt::format("host discovery ({}) failed on its first run: {}",
                                              st.cfg.options.discovery.describe(), why)));
    return;
  }
  log::warn("job {}: host discovery ({}) failed; keeping the last hosts and retrying: {}",
            st.cfg.job_id, st.cfg.options.discovery.describe(), why);
  evaluate(self);
}

} // namespace

std::vector<host_slots> available_hosts(coord_actor self) {
  auto& st = self->state;
  auto now = elastic::clock::now();
  std::vector<host_slots> out;
  for (auto& h : st.el.order.order(st.el.found))
    if (st.infos_by_node.count(h.host) && !st.el.blacklist.blacklisted(h.host, now))
      out.push_back(h);
  return out;
}

void poll_discovery(coord_actor self) {
  auto& st = self->state;
  if (st.ph == phase::stopping || st.ph == phase::stopped || st.failure)
    return;
  self->request(st.cfg.registry, st.cfg.settings.timeout, list_atom_v)
    .then(
      [=](cluster_view& view) {
        auto& st = self->state;
        // hvactor-node agents are connected when a worker starts there.
        for (auto& node : take_view(self, view))
          st.el.shipped.erase(node);
        fail_workers_of_lost_nodes(self);
        if (st.cfg.options.discovery.from_cluster()) {
          std::vector<host_slots> hosts;
          for (auto& n : view.nodes)
            if (int slots = slots_of(n, st.cfg.options); slots > 0)
              hosts.push_back({n.node_id, slots});
          found(self, std::move(hosts));
          poll_done(self);
          return;
        }
        self->request(st.el.finder, knobs::discovery_script_limit + knobs::store_round_trip,
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

std::vector<char> assignment_bytes(const rank_layout& l) {
  return elastic_protocol::encode(elastic_protocol::assignment{l});
}

void watch_resets(coord_actor self, int gen) {
  auto& st = self->state;
  auto key = elastic_protocol::reset_key(gen);
  self->request(st.cfg.store, knobs::store_watch_period + knobs::store_round_trip, get_atom_v,
                elastic_scope(st), key, caf::timespan{knobs::store_watch_period})
    .then(
      [=](std::vector<char>& why) {
        auto& st = self->state;
        if (st.el.generation != gen || st.ph != phase::running)
          return;
        log::info("job {}: generation {}: a worker's collectives failed ({}); resetting",
                  st.cfg.job_id, gen, std::string{why.begin(), why.end()});
        self->delayed_send(self, knobs::elastic_reset_grace, reset_due_atom_v,
                           static_cast<int32_t>(gen));
      },
      [=](caf::error&) {
        auto& st = self->state;
        if (st.el.generation == gen && st.ph == phase::running)
          watch_resets(self, gen);
      });
}

void watch_joins(coord_actor self, int gen) {
  auto& st = self->state;
  key_list keys;
  for (auto id : st.el.seats)
    keys.keys.push_back(elastic_protocol::joined_key(gen, std::to_string(id)));
  auto wait = wait_bound(st.cfg.settings.timeout + std::chrono::duration_cast<std::chrono::milliseconds>(elastic_wait(st)));
  self->request(st.cfg.store, wait + knobs::store_round_trip, wait_atom_v, elastic_scope(st),
                keys, caf::timespan{wait})
    .then(
      [=](bool) {
        auto& st = self->state;
        if (st.el.generation != gen)
          return;
        st.el.formed = true;
        for (auto id : st.el.seats)
          st.workers[id].has_state = true;
        log::info("job {}: generation {} formed with {} workers", st.cfg.job_id, gen,
                  st.el.seats.size());
        replan(self, false); // changes seen meanwhile
      },
      [=](caf::error& err) {
        log::debug("job {}: generation {} did not form: {}", self->state.cfg.job_id, gen,
                   describe(err));
      });
}

void publish(coord_actor self, const elastic::world_plan& plan, bool failure) {
  auto& st = self->state;
  int old = st.el.generation;
  int gen = old + 1;
  st.el.generation = gen;
  st.el.formed = false;
  auto store = st.cfg.store;
  auto scope = elastic_scope(st);
  if (old >= 0)
    caf::anon_send(store, close_atom_v, gen_scope(st, old),
                   fmt::format("generation {} of the elastic job superseded it{}", gen,
                               failure ? std::string{": "} + proto::superseded_after_failure
                                       : std::string{}));
  bool added = false;
  std::vector<int32_t> seats;
  std::vector<int32_t> fresh;
  for (auto& seat : plan.seats) {
    int32_t id = static_cast<int32_t>(seat.id);
    if (seat.id < 0) {
      added = true;
      id = static_cast<int32_t>(st.el.registry.add(seat.host));
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
    auto worker = std::to_string(w.id);
    caf::anon_send(store, set_atom_v, scope, elastic_protocol::assign_key(worker, gen),
                   assignment_bytes(plan.seats[r].layout));
    caf::anon_send(store, set_atom_v, scope, elastic_protocol::latest_key(worker),
                   bytes(std::to_string(gen)));
  }
  for (auto id64 : plan.leaving) {
    auto id = static_cast<int32_t>(id64);
    st.el.registry.leave(id);
    auto worker = std::to_string(id);
    caf::anon_send(store, set_atom_v, scope, elastic_protocol::assign_key(worker, gen),
                   elastic_protocol::encode(elastic_protocol::removal()));
    caf::anon_send(store, set_atom_v, scope, elastic_protocol::latest_key(worker),
                   bytes(std::to_string(gen)));
    self->delayed_send(self, knobs::elastic_leave_grace, leave_due_atom_v, id);
  }
  st.el.seats = seats;
  if (!failure && old >= 0 && (added || removed)) {
    int flags = (removed ? 1 : 0) | (added ? 2 : 0);
    caf::anon_send(store, set_atom_v, scope, elastic_protocol::changed_key(old),
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
bool hopeless(coord_actor self) {
  auto& st = self->state;
  if (st.el.found.empty())
    return false;
  for (auto& h : st.el.found)
    if (!st.el.blacklist.forever(h.host))
      return false;
  return true;
}

} // namespace

void replan(coord_actor self, bool failure) {
  auto& st = self->state;
  if (st.ph != phase::running || st.failure)
    return;
  elastic::world_state now;
  for (auto& [id, w] : st.workers) {
    now.held_state = now.held_state || w.has_state;
    if (!is_gone(st, id) && !is_leaving(st, id))
      now.members.push_back({id, w.node, w.has_state});
  }
  now.available = available_hosts(self);
  now.seats.assign(st.el.seats.begin(), st.el.seats.end());
  now.formed = st.el.formed;
  now.hopeless = hopeless(self);
  now.first_failure = st.el.first_failure;
  auto d = st.el.rules.next_world(now, failure, elastic::clock::now());
  switch (d.what) {
    case elastic::decision::action::publish:
      publish(self, *d.plan, d.failure);
      break;
    case elastic::decision::action::fail:
      fail(self, make_error(d.kind, d.message));
      break;
    case elastic::decision::action::keep:
    case elastic::decision::action::wait:
      break;
  }
}

} // namespace hvactor::detail
