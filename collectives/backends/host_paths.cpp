#include "collectives/backends/host_paths.hpp"

#include <map>
#include <stdexcept>

#include <fmt/format.h>

namespace hvactor::collectives {

std::optional<bool> path_settings::parse_switch(std::string_view value,
                                                std::string_view variable) {
  if (value.empty())
    return std::nullopt;
  if (value == "1" || value == "true")
    return true;
  if (value == "0" || value == "false")
    return false;
  throw std::invalid_argument(fmt::format("hvd::init: {}={} is not a switch; use 1 or 0 (unset: "
                                          "automatic)",
                                          variable, value));
}

namespace {

// The ranks of each segment, by local rank; "" when they form valid
// groups, else why not.
std::string group_by_segment(std::span<const rank_place> table,
                             std::map<uint64_t, std::vector<int>>& groups) {
  std::vector<int> without;
  for (size_t r = 0; r < table.size(); ++r) {
    if (table[r].segment == 0)
      without.push_back(static_cast<int>(r));
    else
      groups[table[r].segment].push_back(static_cast<int>(r));
  }
  if (!without.empty())
    return fmt::format("rank{} {} started without a node's shared-memory segment",
                       without.size() == 1 ? "" : "s", fmt::join(without, ", "));
  for (auto& [id, ranks] : groups) {
    auto n = static_cast<int64_t>(ranks.size());
    std::vector<int> by_local(ranks.size(), -1);
    for (int r : ranks) {
      auto& p = table[static_cast<size_t>(r)];
      if (p.local_size != n || p.local_rank < 0 || p.local_rank >= n || n > p.slots
          || by_local[static_cast<size_t>(p.local_rank)] >= 0)
        return fmt::format("rank {} shares its node's segment with {} rank(s), but has local "
                           "rank {} of {} (workers started one by one, as elastic jobs do, "
                           "get no common segment)",
                           r, n, p.local_rank, p.local_size);
      by_local[static_cast<size_t>(p.local_rank)] = r;
    }
    ranks = by_local;
  }
  return {};
}

} // namespace

host_paths host_paths::plan(std::span<const rank_place> table, int me, const path_settings& s) {
  host_paths p;
  if (!s.shm) {
    p.why = "HVACTOR_SHM=0";
    return p;
  }
  std::map<uint64_t, std::vector<int>> groups;
  if (p.why = group_by_segment(table, groups); !p.why.empty())
    return p;
  p.shm = true;
  p.nodes = static_cast<int>(groups.size());
  p.local_ranks = groups[table[static_cast<size_t>(me)].segment];
  p.local_size = static_cast<int>(p.local_ranks.size());
  if (groups.size() == 1) {
    p.single_node = true;
    return p;
  }
  bool wanted_ar = s.hierarchical_allreduce.value_or(true);
  bool wanted_ag = s.hierarchical_allgather.value_or(wanted_ar);
  if (!wanted_ar && !wanted_ag) {
    p.why = "HOROVOD_HIERARCHICAL_ALLREDUCE=0";
    return p;
  }
  // Automatic only with several ranks per node; forced also with one.
  auto n = p.local_size;
  for (auto& [id, ranks] : groups)
    if (static_cast<int>(ranks.size()) != n) {
      p.why = "the nodes have different numbers of ranks";
      return p;
    }
  if (n == 1 && !s.hierarchical_allreduce.value_or(false)
      && !s.hierarchical_allgather.value_or(false)) {
    p.why = "one rank per node";
    return p;
  }
  p.world_of.assign(static_cast<size_t>(p.nodes * n), -1);
  for (size_t r = 0; r < table.size(); ++r) {
    auto& t = table[r];
    if (t.cross_size != p.nodes || t.cross_rank < 0 || t.cross_rank >= p.nodes) {
      p.why = fmt::format("rank {} has cross rank {} of {}, but the job spans {} nodes", r,
                          t.cross_rank, t.cross_size, p.nodes);
      p.world_of.clear();
      return p;
    }
    auto& slot = p.world_of[static_cast<size_t>(t.cross_rank * n + t.local_rank)];
    if (slot >= 0) {
      p.why = fmt::format("ranks {} and {} have the same local and cross rank", slot, r);
      p.world_of.clear();
      return p;
    }
    slot = static_cast<int>(r);
  }
  p.hierarchical_allreduce = wanted_ar;
  p.hierarchical_allgather = wanted_ag;
  return p;
}

std::vector<int> host_paths::job_ranks_across(int local_rank, std::span<const int> members) const {
  std::vector<int> out;
  for (int c = 0; c < nodes; ++c) {
    int r = world_of[static_cast<size_t>(c * local_size + local_rank)];
    out.push_back(members.empty() ? r : members[static_cast<size_t>(r)]);
  }
  return out;
}

} // namespace hvactor::collectives
