#include "actors/node/node_ledger.hpp"

#include <algorithm>
#include <set>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "hvactor/errors.hpp"
#include "base/internal/caf_error.hpp"

namespace hvactor {

namespace {

caf::error ledger_error(error_kind kind, std::string message) {
  return make_error(kind, std::move(message));
}

} // namespace

node_ledger::node_ledger(std::string node_id, int32_t num_cpus, std::vector<int32_t> gpu_ids)
  : node_id_(std::move(node_id)), num_cpus_(num_cpus), gpu_ids_(std::move(gpu_ids)) {
  if (num_cpus_ < 0)
    throw std::invalid_argument(
      fmt::format("node '{}': cannot offer {} CPUs (must be 0 or more)", node_id_, num_cpus_));
  for (auto id : gpu_ids_)
    if (id < 0)
      throw std::invalid_argument(
        fmt::format("node '{}': GPU id {} is out of range (ids are 0 or more)", node_id_, id));
  std::sort(gpu_ids_.begin(), gpu_ids_.end());
  gpu_ids_.erase(std::unique(gpu_ids_.begin(), gpu_ids_.end()), gpu_ids_.end());
}

caf::expected<proto::reservation> node_ledger::reserve(const std::string& job,
                                                       const proto::resources& want) {
  if (want.cpus < 0 || want.gpus < 0)
    return ledger_error(error_kind::invalid_argument,
                        fmt::format("node '{}': cannot reserve negative resources", node_id_));
  if (held_.count(job))
    return ledger_error(error_kind::placement_timeout,
                        fmt::format("node '{}' already holds a reservation of job {}: "
                                    "Colocator actors must be placed on unique nodes",
                                    node_id_, job));
  auto avail = free();
  auto ids = free_gpu_ids();
  if (want.cpus > avail.cpus || want.gpus > avail.gpus)
    return ledger_error(error_kind::placement_timeout,
                        fmt::format("node '{}' cannot reserve {{CPU: {}, GPU: {}}}: free "
                                    "{{CPU: {}, GPU: {}}}",
                                    node_id_, want.cpus, want.gpus, avail.cpus, avail.gpus));
  proto::reservation res{job, node_id_, want, {}};
  res.gpu_ids.assign(ids.begin(), ids.begin() + want.gpus);
  held_[job] = entry{res, false};
  return res;
}

caf::expected<proto::reservation> node_ledger::claimable(const std::string& job) const {
  auto i = held_.find(job);
  if (i == held_.end() || i->second.claimed)
    return ledger_error(error_kind::placement_timeout,
                        fmt::format("node '{}' holds no reservation for job {} that is not "
                                    "already running",
                                    node_id_, job));
  return i->second.res;
}

void node_ledger::claim(const std::string& job) {
  if (auto i = held_.find(job); i != held_.end())
    i->second.claimed = true;
}

bool node_ledger::release(const std::string& job) {
  return held_.erase(job) > 0;
}

std::vector<std::string> node_ledger::jobs() const {
  std::vector<std::string> out;
  for (auto& [job, e] : held_)
    out.push_back(job);
  return out;
}

proto::resources node_ledger::total() const {
  return {num_cpus_, static_cast<int32_t>(gpu_ids_.size())};
}

proto::resources node_ledger::free() const {
  auto out = total();
  for (auto& [job, e] : held_) {
    out.cpus -= e.res.res.cpus;
    out.gpus -= e.res.res.gpus;
  }
  return out;
}

std::vector<int32_t> node_ledger::free_gpu_ids() const {
  std::set<int32_t> taken;
  for (auto& [job, e] : held_)
    taken.insert(e.res.gpu_ids.begin(), e.res.gpu_ids.end());
  std::vector<int32_t> out;
  for (auto id : gpu_ids_)
    if (!taken.count(id))
      out.push_back(id);
  return out;
}

void node_ledger::fill(proto::node_info& info) const {
  info.total = total();
  info.free = free();
  info.gpu_ids = gpu_ids_;
  info.free_gpu_ids = free_gpu_ids();
  info.jobs = jobs();
}

} // namespace hvactor
