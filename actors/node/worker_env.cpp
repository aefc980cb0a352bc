#include "actors/node/worker_env.hpp"

#include <algorithm>
#include <cstdlib>
#include <set>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "base/internal/env_names.hpp"
#include "base/internal/knobs_collectives.hpp"
#include "actors/placement/rank_planner.hpp"

namespace hvactor {

namespace {

/// CUDA_VISIBLE_DEVICES per node: the union of its ranks' ids, ranks
/// (local ranks) in order.
std::map<std::string, std::string> devices_by_node(const worker_env_spec& spec) {
  std::map<std::string, std::vector<int32_t>> ids;
  for (size_t r = 0; r < spec.gpu_ids_of_rank.size(); ++r) {
    auto& node = ids[spec.node_of_rank[r]];
    node.insert(node.end(), spec.gpu_ids_of_rank[r].begin(), spec.gpu_ids_of_rank[r].end());
  }
  std::map<std::string, std::string> out;
  for (auto& [node, list] : ids)
    if (!list.empty())
      out.emplace(node, cuda_visible_devices(list));
  return out;
}

// HOROVOD_HOSTNAME and the variables every rank of the job shares, for a
// process on `node`.
std::vector<std::pair<std::string, std::string>> shared_entries(const worker_env_spec& spec,
                                                                const std::string& node) {
  auto gloo_seconds = std::max<long long>(1, spec.timeout.count() / 1000);
  std::vector<std::pair<std::string, std::string>> entries = {
    {env::hostname, node},
    {env::controller, "gloo"},
    {env::cpu_operations, "gloo"},
    {env::rendezvous_addr, spec.rendezvous_host},
    {env::rendezvous_port, std::to_string(spec.rendezvous_port)},
    {env::rendezvous_scope, fmt::format("{}/{}", spec.job_id, spec.generation)},
    {env::gloo_timeout_seconds, std::to_string(gloo_seconds)},
  };
  // Horovod's gloo_run: Gloo takes one interface, NCCL a list.
  if (!spec.nics.empty()) {
    entries.emplace_back(env::gloo_iface, spec.nics.front());
    entries.emplace_back(env::nccl_socket_ifname, fmt::format("{}", fmt::join(spec.nics, ",")));
  }
  if (spec.elastic)
    entries.emplace_back(env::elastic, "1");
  return entries;
}

// A process's env keeps the first of two equal names (execve), so the
// user's value replaces ours rather than following it.
void add_user_vars(const worker_env_spec& spec,
                   std::vector<std::pair<std::string, std::string>>& entries) {
  for (auto& [key, value] : spec.extra_env_vars) {
    auto same = [&](const auto& kv) { return kv.first == key; };
    entries.erase(std::remove_if(entries.begin(), entries.end(), same), entries.end());
  }
  for (auto& kv : spec.extra_env_vars)
    entries.push_back(kv);
}

} // namespace

std::vector<proto::env_list> worker_envs(const worker_env_spec& spec) {
  const auto n = spec.node_of_rank.size();
  if (!spec.gpu_ids_of_rank.empty() && spec.gpu_ids_of_rank.size() != n)
    throw std::invalid_argument(fmt::format("worker env: GPU ids given for {} ranks, but the job "
                                            "has {} ranks",
                                            spec.gpu_ids_of_rank.size(), n));
  rank_planner planner;
  for (size_t r = 0; r < n; ++r)
    planner.add(static_cast<int>(r), spec.node_of_rank[r]);
  auto layout = planner.plan();
  auto devices = devices_by_node(spec);
  std::vector<proto::env_list> out(n);
  for (size_t r = 0; r < n; ++r) {
    auto& l = layout[r];
    auto& node = spec.node_of_rank[r];
    auto& entries = out[r].entries;
    entries = {
      {env::rank, std::to_string(l.rank)},
      {env::size, std::to_string(l.size)},
      {env::local_rank, std::to_string(l.local_rank)},
      {env::local_size, std::to_string(l.local_size)},
      {env::cross_rank, std::to_string(l.cross_rank)},
      {env::cross_size, std::to_string(l.cross_size)},
    };
    auto shared = shared_entries(spec, node);
    entries.insert(entries.end(), shared.begin(), shared.end());
    if (auto d = devices.find(node); d != devices.end())
      entries.emplace_back(env::cuda_visible_devices, d->second);
    add_user_vars(spec, entries);
  }
  return out;
}

std::string cuda_visible_devices(const std::vector<int32_t>& gpu_ids) {
  std::set<int32_t> seen;
  std::vector<int32_t> unique;
  for (auto id : gpu_ids)
    if (seen.insert(id).second)
      unique.push_back(id);
  return fmt::format("{}", fmt::join(unique, ","));
}

proto::env_list elastic_worker_env(worker_env_spec spec, const std::string& node,
                                   int32_t worker_id, std::chrono::milliseconds wait) {
  spec.elastic = true;
  proto::env_list env;
  env.entries = shared_entries(spec, node);
  env.entries.emplace_back(env::elastic_worker, std::to_string(worker_id));
  env.entries.emplace_back(env::elastic_generation, std::to_string(spec.generation));
  env.entries.emplace_back(env::elastic_wait_ms, std::to_string(wait.count()));
  add_user_vars(spec, env.entries);
  return env;
}

proto::env_list worker_bootstrap_env(const std::string& coordinator_endpoint,
                                     const std::string& job_id,
                                     std::chrono::milliseconds timeout) {
  proto::env_list env;
  env.entries = {
    {env::worker_coordinator, coordinator_endpoint},
    {env::worker_job, job_id},
    {env::worker_timeout_ms, std::to_string(timeout.count())},
  };
  return env;
}

void plan_shm(const std::map<std::string, std::string>& job_env, proto::spawn_request& req) {
  if (auto i = job_env.find(env::shm); i != job_env.end())
    req.shm = i->second == "0" ? 0 : 1;
  if (auto i = job_env.find(env::fusion_threshold); i != job_env.end())
    req.shm_slot_bytes = shm_slot_bytes_for(i->second);
}

uint64_t shm_slot_bytes_for(const std::string& fusion_threshold) {
  return std::clamp<uint64_t>(std::strtoull(fusion_threshold.c_str(), nullptr, 10),
                              knobs::shm_min_slot_bytes, knobs::shm_slot_bytes);
}

} // namespace hvactor
