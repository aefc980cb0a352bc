#include "sim_node_agent.hpp"
#include "base/internal/caf_error.hpp"

#include <map>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include <hvactor/errors.hpp>

namespace hvactor::bench {

namespace {

using namespace proto;

node_colocator::behavior_type fake_colocator(node_colocator::pointer self) {
  return {
    [=](stop_atom) {
      self->quit();
      return true;
    },
    [](exited_atom, const worker_exit&) {},
    [](output_ack_atom, int32_t, uint64_t) {},
    [](sigterm_due_atom) {},
    [](sigkill_due_atom) {},
    [](sample_atom) {},
    [](ping_atom) { return int32_t{0}; },
  };
}

struct fake_agent_state {
  node_info info;
  std::map<std::string, reservation> held; // by job id
  sim_stats* stats = nullptr;
  node_registry registry;
  bool updates = true;
  static inline const char* name = "sim_node_agent";
};

using fake_agent_actor = node_agent::stateful_pointer<fake_agent_state>;

caf::error sim_error(const std::string& text) {
  return make_error(error_kind::placement_timeout, text);
}

// Like the real agent: the registry's view follows every change.
void publish(fake_agent_actor self) {
  if (self->state.updates && self->state.registry)
    self->send(self->state.registry, update_atom_v, self->state.info);
}

node_agent::behavior_type fake_agent(fake_agent_actor self, node_info info, sim_stats* stats,
                                     node_registry registry, bool updates) {
  self->state.info = std::move(info);
  self->state.stats = stats;
  self->state.registry = std::move(registry);
  self->state.updates = updates;
  return {
    [=](info_atom) { return self->state.info; },
    [=](reserve_atom, const std::string& job, const resources& want) -> caf::result<reservation> {
      auto& st = self->state;
      if (st.held.count(job))
        return sim_error("node '" + st.info.node_id + "' already holds job " + job);
      if (want.cpus > st.info.free.cpus || want.gpus > st.info.free.gpus)
        return sim_error("node '" + st.info.node_id + "' lacks free resources");
      st.info.free.cpus -= want.cpus;
      st.info.free.gpus -= want.gpus;
      st.info.jobs.push_back(job);
      reservation res{job, st.info.node_id, want, {}};
      st.held.emplace(job, res);
      publish(self);
      return res;
    },
    [=](release_atom, const std::string& job) {
      auto& st = self->state;
      auto i = st.held.find(job);
      if (i != st.held.end()) {
        st.info.free.cpus += i->second.res.cpus;
        st.info.free.gpus += i->second.res.gpus;
        std::erase(st.info.jobs, job);
        st.held.erase(i);
        publish(self);
      }
      return true;
    },
    [=](colocate_atom, const spawn_request&, const coordinator&) {
      self->state.stats->record();
      return self->spawn(fake_colocator);
    },
    [](has_bin_atom, const std::string&, const std::string&) { return true; },
    [](put_bin_atom, const std::string&, const std::string&, uint64_t, const std::vector<char>&,
       bool) { return true; },
    [](join_atom, const std::string&, uint16_t, uint16_t) { return true; },
    [=](stop_atom) {
      self->quit();
      return true;
    },
    [](rejoin_atom) {},
  };
}

} // namespace

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
           std::chrono::steady_clock::now().time_since_epoch())
    .count();
}

void sim_stats::reset() {
  colocates = 0;
  last_colocate_ns = 0;
}

void sim_stats::record() {
  auto t = now_ns();
  auto prev = last_colocate_ns.load();
  while (prev < t && !last_colocate_ns.compare_exchange_weak(prev, t)) {
  }
  ++colocates;
}

proto::node_agent spawn_sim_node_agent(caf::actor_system& sys, proto::node_info info,
                                       sim_stats* stats, proto::node_registry registry,
                                       bool updates) {
  return sys.spawn(fake_agent, std::move(info), stats, std::move(registry), updates);
}

} // namespace hvactor::bench
