#include "hvactor/actors/node_agent.hpp"

#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>

#include "hvactor/actors/node_colocator.hpp"
#include "hvactor/errors.hpp"

namespace hvactor {

namespace {

using namespace proto;

struct agent_state {
  node_agent_config cfg;
  std::map<std::string, reservation> reservations; // by job id
  std::map<caf::actor_addr, std::string> colocators; // -> job id
  static inline const char* name = "node_agent";

  resources used() const {
    resources r;
    for (auto& [job, res] : reservations) {
      r.cpus += res.res.cpus;
      r.gpus += res.res.gpus;
    }
    return r;
  }

  std::vector<int32_t> free_gpu_ids() const {
    std::set<int32_t> taken;
    for (auto& [job, res] : reservations)
      taken.insert(res.gpu_ids.begin(), res.gpu_ids.end());
    std::vector<int32_t> out;
    for (auto id : cfg.gpu_ids)
      if (!taken.count(id))
        out.push_back(id);
    return out;
  }

  node_info info() const {
    node_info out;
    out.node_id = cfg.node_id;
    out.hostname = cfg.hostname;
    out.address = cfg.address;
    out.total = {cfg.num_cpus, static_cast<int32_t>(cfg.gpu_ids.size())};
    auto u = used();
    out.free = {out.total.cpus - u.cpus, out.total.gpus - u.gpus};
    out.gpu_ids.assign(cfg.gpu_ids.begin(), cfg.gpu_ids.end());
    out.free_gpu_ids = free_gpu_ids();
    for (auto& [job, res] : reservations)
      out.jobs.push_back(job);
    return out;
  }
};

using agent_actor = node_agent::stateful_pointer<agent_state>;

caf::error placement_error(std::string message) {
  return make_error(static_cast<int>(error_kind::placement_timeout), std::move(message));
}

node_agent::behavior_type agent_impl(agent_actor self, node_agent_config cfg) {
  self->state.cfg = std::move(cfg);
  self->set_down_handler([=](caf::down_msg& dm) {
    // A colocator that ended always gives its job's resources back.
    auto& st = self->state;
    if (auto i = st.colocators.find(dm.source); i != st.colocators.end()) {
      st.reservations.erase(i->second);
      st.colocators.erase(i);
    }
  });
  return {
    [=](info_atom) { return self->state.info(); },
    [=](reserve_atom, const std::string& job, const resources& want) -> caf::result<reservation> {
      auto& st = self->state;
      auto info = st.info();
      if (st.reservations.count(job))
        return placement_error(fmt::format("node '{}' already holds a reservation of job {}: "
                                           "Colocator actors must be placed on unique nodes",
                                           st.cfg.node_id, job));
      if (want.cpus > info.free.cpus || want.gpus > info.free.gpus)
        return placement_error(fmt::format(
          "node '{}' cannot reserve {{CPU: {}, GPU: {}}}: free {{CPU: {}, GPU: {}}}", st.cfg.node_id,
          want.cpus, want.gpus, info.free.cpus, info.free.gpus));
      reservation res{job, st.cfg.node_id, want, {}};
      res.gpu_ids.assign(info.free_gpu_ids.begin(), info.free_gpu_ids.begin() + want.gpus);
      st.reservations[job] = res;
      return res;
    },
    [=](release_atom, const std::string& job) {
      self->state.reservations.erase(job);
      return true;
    },
    [=](colocate_atom, spawn_request& req,
        coordinator coord) -> caf::result<node_colocator> {
      auto& st = self->state;
      auto i = st.reservations.find(req.job_id);
      if (i == st.reservations.end())
        return placement_error(fmt::format("node '{}' holds no reservation for job {}",
                                           st.cfg.node_id, req.job_id));
      auto coloc = spawn_node_colocator(self->system(), std::move(req), i->second, coord,
                                        node_agent{self});
      self->monitor(coloc);
      st.colocators.emplace(coloc.address(), i->first);
      return coloc;
    },
  };
}

} // namespace

proto::node_agent spawn_node_agent(caf::actor_system& sys, node_agent_config cfg) {
  return sys.spawn(agent_impl, std::move(cfg));
}

} // namespace hvactor
