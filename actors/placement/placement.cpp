#include "actors/placement/placement.hpp"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace hvactor {

namespace {

std::string resources_str(std::int64_t cpus, std::int64_t gpus) {
  return "{CPU: " + std::to_string(cpus) + ", GPU: " + std::to_string(gpus) + "}";
}

void require(bool ok, const std::string& what, const placement_request& req) {
  if (!ok)
    throw std::invalid_argument("placement: " + what + " (request: num_workers="
                                + std::to_string(req.num_workers)
                                + ", num_hosts=" + std::to_string(req.num_hosts)
                                + ", workers_per_host=" + std::to_string(req.workers_per_host)
                                + ", cpus_per_worker=" + std::to_string(req.cpus_per_worker)
                                + ", gpus_per_worker=" + std::to_string(req.gpus_per_worker)
                                + ")");
}

void validate(const placement_request& req, const std::vector<node_resources>& nodes) {
  require(req.cpus_per_worker > 0, "cpus_per_worker must be at least 1", req);
  require(req.gpus_per_worker >= 0, "gpus_per_worker must not be negative", req);
  require(req.workers_per_host >= 0, "workers_per_host must not be negative", req);
  if (req.colocated()) {
    require(req.num_hosts > 0, "num_hosts must be at least 1 when workers_per_host is set",
            req);
    require(req.num_workers == 0, "set either num_workers or num_hosts, not both", req);
    require(req.num_hosts <= INT_MAX / req.workers_per_host,
            "num_hosts * workers_per_host overflows int", req);
  } else {
    require(req.num_workers > 0, "num_workers must be at least 1 (or set num_hosts and "
                                 "workers_per_host)", req);
    require(req.num_hosts == 0, "num_hosts needs workers_per_host; set one of num_workers "
                                "or num_hosts", req);
  }
  std::set<std::string> seen;
  for (const auto& node : nodes)
    if (!seen.insert(node.node_id).second)
      throw std::invalid_argument("placement: node '" + node.node_id
                                  + "' is listed twice; node ids must be unique");
}

node_assignment assign(const placement_request& req, const std::string& node_id,
                       int first_rank, int count) {
  node_assignment out;
  out.node_id = node_id;
  out.ranks.reserve(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i)
    out.ranks.push_back(first_rank + i);
  out.cpus = req.cpus_per_worker * count;
  out.gpus = req.gpus_per_worker * count;
  return out;
}

std::optional<placement_plan> plan_pack(const placement_request& req,
                                        const std::vector<node_resources>& nodes) {
  const int n = req.num_workers;
  std::vector<int> fits;
  fits.reserve(nodes.size());
  for (const auto& node : nodes)
    fits.push_back(workers_that_fit(node, req.cpus_per_worker, req.gpus_per_worker));
  placement_plan plan;
  // One node if any can take the whole job: fewest nodes, no cross traffic.
  if (auto it = std::find_if(fits.begin(), fits.end(), [n](int fit) { return fit >= n; });
      it != fits.end()) {
    plan.nodes.push_back(assign(req, nodes[static_cast<std::size_t>(it - fits.begin())].node_id,
                                0, n));
    return plan;
  }
  int placed = 0;
  for (std::size_t i = 0; i < nodes.size() && placed < n; ++i) {
    const int count = std::min(fits[i], n - placed);
    if (count == 0)
      continue;
    plan.nodes.push_back(assign(req, nodes[i].node_id, placed, count));
    placed += count;
  }
  if (placed < n)
    return std::nullopt;
  return plan;
}

std::optional<placement_plan> plan_colocated(const placement_request& req,
                                             const std::vector<node_resources>& nodes) {
  placement_plan plan;
  for (const auto& node : nodes) {
    if (static_cast<int>(plan.nodes.size()) == req.num_hosts)
      break;
    if (workers_that_fit(node, req.cpus_per_worker, req.gpus_per_worker) < req.workers_per_host)
      continue;
    const int host = static_cast<int>(plan.nodes.size());
    plan.nodes.push_back(assign(req, node.node_id, host * req.workers_per_host,
                                req.workers_per_host));
  }
  if (static_cast<int>(plan.nodes.size()) < req.num_hosts)
    return std::nullopt;
  return plan;
}

} // namespace

int workers_that_fit(const node_resources& node, int cpus_per_worker, int gpus_per_worker) {
  if (cpus_per_worker <= 0 || gpus_per_worker < 0)
    throw std::invalid_argument("workers_that_fit: cpus_per_worker must be at least 1 and "
                                "gpus_per_worker not negative (got "
                                + std::to_string(cpus_per_worker) + " and "
                                + std::to_string(gpus_per_worker) + ")");
  int fit = std::max(node.free_cpus, 0) / cpus_per_worker;
  if (gpus_per_worker > 0)
    fit = std::min(fit, std::max(node.free_gpus, 0) / gpus_per_worker);
  return fit;
}

std::optional<placement_plan> plan_placement(const placement_request& req,
                                             const std::vector<node_resources>& nodes) {
  validate(req, nodes);
  return req.colocated() ? plan_colocated(req, nodes) : plan_pack(req, nodes);
}

std::string describe(const placement_request& req) {
  const std::int64_t cpus = req.cpus_per_worker;
  const std::int64_t gpus = req.gpus_per_worker;
  const std::string per_worker = resources_str(cpus, gpus);
  if (!req.colocated()) {
    const std::int64_t n = req.num_workers;
    return std::to_string(n) + " workers x " + per_worker + " = "
           + resources_str(n * cpus, n * gpus);
  }
  const std::int64_t hosts = req.num_hosts;
  const std::int64_t per_host = req.workers_per_host;
  return std::to_string(hosts) + " hosts x " + std::to_string(per_host) + " workers x "
         + per_worker + " = " + resources_str(hosts * per_host * cpus, hosts * per_host * gpus)
         + ", each host needs " + resources_str(per_host * cpus, per_host * gpus);
}

std::string describe(const std::vector<node_resources>& nodes) {
  if (nodes.empty())
    return "no live nodes";
  std::string out;
  for (const auto& node : nodes) {
    if (!out.empty())
      out += "; ";
    out += "node '" + node.node_id + "': CPU " + std::to_string(node.free_cpus) + " free of "
           + std::to_string(node.total_cpus) + ", GPU " + std::to_string(node.free_gpus)
           + " free of " + std::to_string(node.total_gpus);
  }
  return out;
}

void check_unique_nodes(const placement_plan& plan) {
  std::set<std::string> seen;
  bool unique = true;
  std::string listed;
  for (const auto& node : plan.nodes) {
    unique = seen.insert(node.node_id).second && unique;
    listed += (listed.empty() ? "" : ", ") + node.node_id;
  }
  if (!unique)
    throw std::runtime_error("Colocator actors must be placed on unique nodes! Got: [" + listed
                             + "]");
}

} // namespace hvactor
