#include "torch/grad_schedule.hpp"

#include <stdexcept>
#include <string>

namespace hvactor::hvd::detail {

namespace {

void check_passes(int passes) {
  if (passes < 1)
    throw std::invalid_argument(
      "hvd::distributed_optimizer: backward_passes_per_step must be >= 1: Got " +
      std::to_string(passes) + ".");
}

} // namespace

grad_schedule::grad_schedule(size_t params, std::vector<std::vector<size_t>> units, int passes)
  : units_(std::move(units)), unit_of_(params, none), passes_(passes) {
  check_passes(passes);
  for (size_t u = 0; u < units_.size(); ++u)
    for (auto i : units_[u]) {
      if (i >= params || unit_of_[i] != none)
        throw std::invalid_argument("grad_schedule: parameter " + std::to_string(i) +
                                    " is out of range or in two units");
      unit_of_[i] = u;
    }
  reset();
}

std::vector<std::vector<size_t>> grad_schedule::split(const std::vector<size_t>& ids, int n) {
  if (n < 1)
    throw std::invalid_argument("hvd::distributed_optimizer: num_groups must be >= 0: Got " +
                                std::to_string(n) + ".");
  auto groups = static_cast<size_t>(n);
  size_t base = ids.size() / groups, extra = ids.size() % groups, at = 0;
  std::vector<std::vector<size_t>> out;
  for (size_t g = 0; g < groups; ++g) {
    size_t len = base + (g < extra ? 1 : 0);
    if (len > 0)
      out.emplace_back(ids.begin() + static_cast<std::ptrdiff_t>(at),
                       ids.begin() + static_cast<std::ptrdiff_t>(at + len));
    at += len;
  }
  return out;
}

std::vector<std::vector<size_t>> grad_schedule::with_groups(
  const std::vector<size_t>& ids, const std::vector<std::vector<size_t>>& groups) {
  std::vector<bool> reduced, grouped;
  for (auto i : ids) {
    if (i >= reduced.size())
      reduced.resize(i + 1, false);
    reduced[i] = true;
  }
  grouped.resize(reduced.size(), false);
  std::vector<std::vector<size_t>> out;
  std::vector<bool> seen;
  for (auto& g : groups) {
    std::vector<size_t> members;
    for (auto i : g) {
      if (i >= seen.size())
        seen.resize(i + 1, false);
      if (seen[i])
        throw std::invalid_argument(
          "hvd::distributed_optimizer: a parameter can only appear once in groups (parameter " +
          std::to_string(i) + " appears twice)");
      seen[i] = true;
      if (i < reduced.size() && reduced[i]) {
        members.push_back(i);
        grouped[i] = true;
      }
    }
    if (!members.empty())
      out.push_back(std::move(members));
  }
  for (auto i : ids)
    if (!grouped[i])
      out.push_back({i});
  return out;
}

bool grad_schedule::exhausted(size_t i) const {
  return i < remaining_.size() && unit_of_[i] != none && remaining_[i] <= 0;
}

std::vector<size_t> grad_schedule::on_gradient(size_t i) {
  if (i >= unit_of_.size() || unit_of_[i] == none || remaining_[i] <= 0)
    return {};
  ++counted_;
  if (--remaining_[i] > 0)
    return {};
  auto u = unit_of_[i];
  if (units_[u].size() == 1) {
    started_[i] = true;
    return {i};
  }
  if (++ready_[u] < units_[u].size())
    return {};
  std::vector<size_t> out;
  for (auto m : units_[u])
    if (!started_[m]) {
      started_[m] = true;
      out.push_back(m);
    }
  return out;
}

std::vector<size_t> grad_schedule::flush() {
  std::vector<size_t> out;
  for (auto& unit : units_)
    for (auto m : unit)
      if (!started_[m])
        out.push_back(m);
  reset();
  return out;
}

void grad_schedule::set_passes(int passes) {
  check_passes(passes);
  passes_ = passes;
  reset();
}

void grad_schedule::reset() {
  remaining_.assign(unit_of_.size(), passes_);
  started_.assign(unit_of_.size(), false);
  ready_.assign(units_.size(), 0);
  counted_ = 0;
}

} // namespace hvactor::hvd::detail
